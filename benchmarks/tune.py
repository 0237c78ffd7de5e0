"""Compare GEMM configurations against cuBLAS at one shape (run on the GPU).

    python benchmarks/tune.py --dtype bf16 --m 8192 --n 8192 --k 8192
"""

import argparse

from nbwgmma.bench import bench, format_row
from nbwgmma.kernels.gemm import GemmConfig

KINDS = {"bf16": "f32.bf16.bf16", "f16": "f32.f16.f16", "e4m3": "f32.e4m3.e4m3"}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--m", type=int, default=8192)
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--k", type=int, default=8192)
    args = p.parse_args()
    kind = KINDS[args.dtype]
    fp8 = args.dtype == "e4m3"
    for bm, bn, stages, group in [(128, 256, 4, 8), (128, 256, 4, 16), (128, 256, 3, 8), (128, 192, 5, 8),
                                  (192, 128, 5, 8), (128, 128, 6, 8)]:
        cfg = GemmConfig(kind, bm=bm, bn=bn, stages=stages, group_m=group, scaled=fp8)
        r = bench(args.m, args.n, args.k, args.dtype, config=cfg)
        print(f"{cfg!r:60s} group_m={group}: " + format_row(r), flush=True)


if __name__ == "__main__":
    main()
