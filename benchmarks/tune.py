"""Compare GEMM configurations against cuBLAS at one shape (run on the GPU).

    python benchmarks/tune.py --dtype bf16 --m 8192 --n 8192 --k 8192
"""

import argparse

from nbwgmma.bench import bench, format_row

CONFIGS = [
    dict(),  # what matmul picks
    dict(epilogue="tma", bn=192),
    dict(epilogue="tma", c_parts=1),
    dict(epilogue="direct"),
    dict(epilogue="tma", group_m=16),
    dict(epilogue="tma", bn=192, group_m=16),
    dict(epilogue="tma", group_m=4),
    dict(cluster=2),
    dict(cluster=2, group_m=16),
    dict(cluster=4),
    dict(cluster=2, bn=192),
]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--m", type=int, default=8192)
    p.add_argument("--n", type=int, default=8192)
    p.add_argument("--k", type=int, default=8192)
    p.add_argument("--layout", default="KK")
    args = p.parse_args()
    for cfg in CONFIGS:
        r = bench(args.m, args.n, args.k, args.dtype, args.layout, config=cfg)
        print(f"{str(cfg):55s} " + format_row(r), flush=True)


if __name__ == "__main__":
    main()
