"""The kernels cuBLAS runs for given products (their names tell the tile, stages and cluster shape), read
with ``torch.profiler``: ``python benchmarks/cublas_kernels.py bf16:KK:1169x408x8192 ...`` (DTYPE:LAYOUT:MxNxK as
``benchmarks/configs.py`` takes them; layouts KK, KN, MK, MN; bf16 and f16). Needs PyTorch and a GPU."""

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16}


def operands(spec):
    """A (M x K) and B (K x N) of a DTYPE:LAYOUT:MxNxK spec, each stored K-major ("K") or M-/N-major ("M"/"N")."""
    dt, lay, shape = spec.split(":")
    m, n, k = map(int, shape.split("x"))
    a = torch.randn(m, k, device="cuda", dtype=DTYPES[dt]) if lay[0] == "K" else \
        torch.randn(k, m, device="cuda", dtype=DTYPES[dt]).T
    b = torch.randn(n, k, device="cuda", dtype=DTYPES[dt]).T if lay[1] == "K" else \
        torch.randn(k, n, device="cuda", dtype=DTYPES[dt])
    return a, b


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("problems", nargs="+")
    args = p.parse_args()
    for spec in args.problems:
        a, b = operands(spec)
        for _ in range(3):
            a @ b
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            a @ b
            torch.cuda.synchronize()
        names = sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})
        print(spec, names)


if __name__ == "__main__":
    main()
