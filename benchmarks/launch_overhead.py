"""Host time per call of repeated launches of a trivial kernel (three arrays, two scalars):
a prepared kernel, nbwgmma.launch.launch with a repeated signature, and Numba's
kernel[grid, block](...).

    python benchmarks/launch_overhead.py
"""
import statistics, time
import numpy as np
import torch
from numba import cuda
from nbwgmma.launch import launch, prepare

@cuda.jit
def axpy(out, x, y, alpha, n):
    i = cuda.grid(1)
    if i < n:
        out[i] = alpha * x[i] + y[i]

n = 1 << 16
x, y, out = (torch.randn(n, device="cuda") for _ in range(3))
nbx, nby, nbo = (cuda.as_cuda_array(t) for t in (x, y, out))
pk = prepare(axpy, n // 256, 256, (out, x, y, np.float32(2), np.int32(n)))
for name, f in (("prepare(...) then pk(...), torch tensors", lambda: pk(out, x, y, np.float32(2), np.int32(n))),
                ("nbwgmma.launch.launch, torch tensors", lambda: launch(axpy, n // 256, 256, (out, x, y, np.float32(2), np.int32(n)))),
                ("nbwgmma.launch.launch, Numba arrays", lambda: launch(axpy, n // 256, 256, (nbo, nbx, nby, np.float32(2), np.int32(n)))),
                ("numba kernel[grid, block], Numba arrays", lambda: axpy[n // 256, 256](nbo, nbx, nby, np.float32(2), np.int32(n)))):
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
    print(f"{name:44s}: {statistics.median(per) * 1e6:7.1f} us per call (median of 20 x 100)")
torch.cuda.synchronize()
ref = 2 * x + y
print("result ok:", bool(torch.allclose(out, ref)))
