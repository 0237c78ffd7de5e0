"""Batches of products through ``nbwgmma.matmul`` against ``torch.bmm`` (cuBLAS's batched GEMM) in
one process: batches of 10 calls taking turns, 15 rounds, median; each with its own ``out``.

    python benchmarks/bmm.py [BxMxNxK[:LAYOUT] ...]      (default: the shapes below)
    python benchmarks/bmm.py --dtype f16 ...

LAYOUT is B's: "N" (B stored (batch, K, N), as ``torch.bmm(a, b)`` takes a row-major B; the
default) or "K" (B stored (batch, N, K), used as ``b.transpose(1, 2)``: attention's ``q @ k^T``).
A is stored (batch, M, K). Two layouts broadcast one operand (the peer is ``torch.matmul``): "1A"
(one (M, K) matrix A for every product of B's batch) and "SB" (A stored (M, batch, K), seen as
(batch, M, K), times one (K, N) matrix B: a sequence-first activation times a weight). Prints each shape's two lines, then the geometric mean and the
worst ratio over the shapes.
"""
import math
import sys

import torch

from nbwgmma import matmul
from nbwgmma.bench import side_by_side

SHAPES = ["8x4096x4096x4096", "64x1024x1024x1024", "32x2048x2048x128:K", "32x2048x128x2048", "128x512x512x64:K",
          "4x4096x7168x2048", "16x8192x1024x1024:K", "256x256x256x256", "12x1000x777x513", "8x2048x2048x2048:1A",
          "64x512x512x128:1A", "8x2048x4096x1024:SB"]


def bench(spec, dtype, rounds=15, inner=10):
    dims, _, layout = spec.partition(":")
    nb, m, n, k = (int(x) for x in dims.split("x"))
    g = torch.Generator(device="cuda").manual_seed(0)
    a = (torch.randn(nb, m, k, device="cuda", generator=g) / k ** 0.5).to(dtype)
    peer, name = torch.bmm, "torch.bmm"
    if layout == "1A":
        a, peer, name = a[0], torch.matmul, "torch.matmul"
    elif layout == "SB":
        a, peer, name = a.transpose(0, 1).contiguous().transpose(0, 1), torch.matmul, "torch.matmul"
    if layout == "K":
        b = torch.randn(nb, n, k, device="cuda", generator=g).to(dtype).transpose(1, 2)
    else:
        b = torch.randn(*(() if layout == "SB" else (nb,)), k, n, device="cuda", generator=g).to(dtype)
    ours, theirs = torch.empty(nb, m, n, device="cuda", dtype=dtype), torch.empty(nb, m, n, device="cuda", dtype=dtype)
    matmul(a, b, out=ours)
    peer(a, b, out=theirs)
    ref = a.double() @ b.double()
    err = max(float(torch.linalg.norm(x.double() - ref) / torch.linalg.norm(ref)) for x in (ours, theirs))
    med = side_by_side(torch, {"nbwgmma.matmul": lambda: matmul(a, b, out=ours),
                               name: lambda: peer(a, b, out=theirs)},
                       2 * nb * m * n * k, f"{spec:22s}", "matmul", rounds, inner)
    print(f"{spec:22s} relative error vs float64 at most {err:.1e}")
    return med[name] / med["nbwgmma.matmul"]


def main(argv):
    dtype = torch.bfloat16
    if "--dtype" in argv:
        i = argv.index("--dtype")
        dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[argv[i + 1]]
        argv = argv[:i] + argv[i + 2:]
    print(f"{torch.cuda.get_device_name()}, {dtype}, torch {torch.__version__}")
    ratios = [bench(s, dtype) for s in (argv or SHAPES)]
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"peer time / nbwgmma time: geometric mean {geo:.3f}, worst {min(ratios):.3f} over {len(ratios)} shapes")


if __name__ == "__main__":
    main(sys.argv[1:])
