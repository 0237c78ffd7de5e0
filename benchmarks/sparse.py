"""The 2:4-sparse GEMM (``matmul(x, w24.t())`` with ``w24 = nbwgmma.Sparse24.from_dense(w)``)
against cuSPARSELt (``torch.sparse.to_sparse_semi_structured(w)`` + ``F.linear``), nbwgmma's dense
``matmul(x, w.t())`` and cuBLAS's ``x @ w.t()`` on the same pruned weight, random data, one
process, one GPU: every contender in batches of 10 calls, taking turns, 15 rounds, median.
TFLOP/s count the dense product's 2 * M * N * K (the "effective" rate of a sparse product).
Then e4m3: the sparse GEMM against nbwgmma's dense fp8 ``matmul`` (bf16 out).

``MxNxK`` is ``F.linear(x, w)`` with x [M, K] and w [N, K].

    python benchmarks/sparse.py [MxNxK ...]
"""
import sys

import torch
import torch.nn.functional as F

from nbwgmma import Sparse24, matmul
from nbwgmma.bench import side_by_side

TDT = {"bf16": torch.bfloat16, "f16": torch.float16}


def bench(m, n, k, t, rounds=15, inner=10):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=g).to(TDT[t])
    w24 = Sparse24.from_dense(torch.randn(n, k, device="cuda", generator=g).to(TDT[t]), prune=True)
    w = w24.to_dense()  # the pruned weight, dense: the same product for every contender
    out = torch.empty(m, n, device="cuda", dtype=TDT[t])
    plain = torch.empty_like(out)
    matmul(x, w24.t(), out=out)
    ref = x.double() @ w.double().t()
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    del ref
    peers = {"nbwgmma sparse matmul(x, w24.t())": lambda: matmul(x, w24.t(), out=out)}
    try:
        from torch.sparse import to_sparse_semi_structured

        ws = to_sparse_semi_structured(w)
        peers["cuSPARSELt F.linear(x, ws)"] = lambda: F.linear(x, ws)
    except (RuntimeError, ImportError) as e:  # no cuSPARSELt in this PyTorch
        print(f"{m}x{n}x{k} {t}: no cuSPARSELt contender ({str(e).splitlines()[0]})")
    peers["nbwgmma dense matmul(x, w.t())"] = lambda: matmul(x, w.t(), out=plain)
    peers["cuBLAS dense x @ w.t()"] = lambda: x @ w.t()
    side_by_side(torch, peers, 2 * m * n * k, f"{m}x{n}x{k} {t}", "nbwgmma sparse", rounds, inner)
    print(f"{m}x{n}x{k} {t} relative error of the sparse result vs float64: {err:.2e}")


def bench_fp8(m, n, k, rounds=15, inner=10):
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    w24 = Sparse24.from_dense(torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn), prune=True)
    w = w24.to_dense()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    plain = torch.empty_like(out)
    matmul(x, w24.t(), out=out)
    ref = x.double() @ w.double().t()
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    del ref
    peers = {"nbwgmma sparse e4m3 matmul(x, w24.t())": lambda: matmul(x, w24.t(), out=out),
             "nbwgmma dense e4m3 matmul(x, w.t())": lambda: matmul(x, w.t(), out=plain)}
    side_by_side(torch, peers, 2 * m * n * k, f"{m}x{n}x{k} e4m3", "nbwgmma sparse", rounds, inner)
    print(f"{m}x{n}x{k} e4m3 relative error of the sparse result vs float64: {err:.2e}")


def main(shapes):
    for m, n, k in shapes:
        for t in ("f16", "bf16"):
            bench(m, n, k, t)
        bench_fp8(m, n, k)


if __name__ == "__main__":
    main([tuple(int(v) for v in a.split("x")) for a in sys.argv[1:]] or [(8192, 8192, 8192), (4096, 14336, 4096)])
