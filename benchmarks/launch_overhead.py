"""Host time per call of repeated launches of a trivial kernel (three arrays, two scalars):
a prepared kernel, nbwgmma.launch.launch with a repeated signature, and Numba's
kernel[grid, block](...), for PyTorch tensors, CuPy arrays and Numba device arrays; with
``--matmul`` also ``nbwgmma.matmul`` at 256^3 bf16 as ``bench --overhead`` measures it.

    python benchmarks/launch_overhead.py [--matmul]

Each line gives the median over 5 rounds (taken over all lines in turn) of the median of
20 x 100 back-to-back calls, the range of the rounds and, in brackets, the measure of
``python -m nbwgmma bench --overhead`` (``nbwgmma.bench.host_overhead``: 10 calls to warm
up, then 2000 timed at once).
"""
import statistics
import sys
import time

import numpy as np
import torch
from numba import cuda

from nbwgmma.bench import host_overhead
from nbwgmma.launch import launch, prepare


@cuda.jit
def axpy(out, x, y, alpha, n):
    i = cuda.grid(1)
    if i < n:
        out[i] = alpha * x[i] + y[i]


def median_us(f):
    for _ in range(50):
        f()
    torch.cuda.synchronize()
    per = []
    for _ in range(20):
        t0 = time.perf_counter()
        for _ in range(100):
            f()
        per.append((time.perf_counter() - t0) / 100)
        torch.cuda.synchronize()
    return statistics.median(per) * 1e6


def main():
    n = 1 << 16
    grid, block = n // 256, 256
    x, y, out = (torch.randn(n, device="cuda") for _ in range(3))
    arrays = {"PyTorch tensors": (out, x, y), "Numba device arrays": tuple(cuda.as_cuda_array(t) for t in (out, x, y))}
    try:
        import cupy

        arrays["CuPy arrays"] = tuple(cupy.asarray(t) for t in (out, x, y))
    except ImportError:
        print("(no CuPy here: its lines are left out)")
    alpha, size = np.float32(2), np.int32(n)
    rows = []
    for kind, (o, a, b) in arrays.items():
        pk = prepare(axpy, grid, block, (o, a, b, alpha, size))
        print(f"prepared for {kind}: {pk.launcher.binding}, readers {[r.__name__ for r in pk.readers]}")
        rows.append((f"prepare(...) then pk(...), {kind}", lambda pk=pk, o=o, a=a, b=b: pk(o, a, b, alpha, size)))
    for kind, (o, a, b) in arrays.items():
        rows.append((f"nbwgmma.launch.launch, {kind}",
                     lambda o=o, a=a, b=b: launch(axpy, grid, block, (o, a, b, alpha, size))))
    o, a, b = arrays["Numba device arrays"]
    rows.append(("Numba's kernel[grid, block], Numba device arrays",
                 lambda: axpy[grid, block](o, a, b, alpha, size)))
    # Rounds over all rows in turn, so that a slow spell of the machine does not fall on one row.
    rounds = {name: [] for name, _ in rows}
    for _ in range(5):
        for name, f in rows:
            rounds[name].append(median_us(f))
    for name, f in rows:
        once = host_overhead(f, torch, 2000) * 1e6
        r = rounds[name]
        print(f"{name:52s}: {statistics.median(r):6.1f} us per call ({min(r):.1f}-{max(r):.1f} over 5 rounds) "
              f"[{once:6.1f}]")

    # Where a prepared call's time goes: reading the arguments, packing and the driver call,
    # and the driver call alone (ctypes, a fixed parameter buffer).
    pk = prepare(axpy, grid, block, (out, x, y, alpha, size))
    args = (out, x, y, alpha, size)
    values = pk.values(args)
    pl = pk.launcher
    print(f"  of which: reading the 5 arguments {median_us(lambda: pk.values(args)):.1f} us, "
          f"packing + cuLaunchKernelEx {median_us(lambda: pl.launch_values(0, values)):.1f} us, "
          f"cuLaunchKernelEx alone {median_us(lambda: pl.driver._fn(*pl.driver._cargs)):.1f} us")

    torch.cuda.synchronize()
    print("result ok:", bool(torch.allclose(out, 2 * x + y)))

    if "--matmul" in sys.argv:
        from nbwgmma.bench import overhead

        r = overhead()
        print(f"matmul 256^3 bf16 (bench --overhead): nbwgmma {r['nbwgmma_us']:.1f} us, "
              f"torch.matmul {r['torch_us']:.1f} us per call, {r['gpu']}")


if __name__ == "__main__":
    main()
