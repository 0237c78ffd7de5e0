"""GEMM step 6: 2:4 structured sparsity, ``out = x @ w.T`` with half of ``w``'s values zero.

``wgmma.mma_async.sp`` (PTX ISA, "wgmma.mma_async.sp") multiplies a 64 x K A of which each
group of 4 consecutive values along K holds at most 2 nonzeros: A is stored *compressed* (64 x
K/2, the kept values) and each thread passes a 32-bit metadata register of 4-bit codes saying
where the kept values sat. One instruction covers twice the K of the dense one (m64nNk32 for
16-bit inputs) in about the time of the dense k16 one.

First one sparse wgmma tile against the model: the host prunes A, compresses it, lays the
compressed A and B out in a shared-memory image (64-byte and 128-byte swizzles) and packs the
metadata registers of two K steps into one (T0, T1 of each quad the first step, read with
``spsel=0``, T2, T3 the second, ``spsel=1``); the kernel issues the two sparse wgmmas; D must be
the model's (:func:`nbwgmma.layout.wgmma_sp_reference`) exactly. Then the library's sparse GEMM
on a pruned weight, ``matmul(x, w24.t())`` with ``w24 = Sparse24.from_dense(w, prune=True)``
(compressed once; the metadata pre-packed per stage and 64-row block in the registers' order),
against float64 and the dense product.

    python examples/gemm_6_sparse.py [M [N K]]

On an H100: the tile, then the GEMM checked against float64 and timed against the dense
``matmul`` and cuSPARSELt. Without a GPU it prints the sparse GEMM kernel's compile report; in
the simulator (``NUMBA_ENABLE_CUDASIM=1``) it runs the tile and a small GEMM of integers (exact).
"""

import sys

import numpy as np
from numba import cuda, types

from nbwgmma import Sparse24, matmul
from nbwgmma.intrinsics import acc_store, acc_zeros, wgmma_commit_group, wgmma_fence, wgmma_mma_async_sp, \
    wgmma_wait_group
from nbwgmma.kernels.sparse import SparseConfig, sparse_kernel
from nbwgmma.kernels.wgmma_tile import stage_image
from nbwgmma.launch import dynamic_smem_bytes, launch
from nbwgmma.layout import (canonical_strides, compress_24, encode_desc, encode_elements, meta_registers_pair,
                            pack_operand, prune_24, wgmma_sp_reference)

KIND, N = "f32.f16.f16", 64  # one m64n64k32 sparse wgmma per K step, two K steps


@cuda.jit(launch_bounds=(128, 1))
def sparse_tile(image, desc_a, desc_b, meta, out):
    base = stage_image(image)  # the host's image in 1 KiB-aligned shared memory
    tid = cuda.threadIdx.x
    acc = acc_zeros(KIND, N)
    m = meta[tid]  # one register, two K steps: T0, T1 of each quad hold the first, T2, T3 the second
    wgmma_fence()
    acc = wgmma_mma_async_sp(acc, desc_a[0] + (base >> 4), desc_b[0] + (base >> 4), m, KIND, 0)  # spsel 0
    acc = wgmma_mma_async_sp(acc, desc_a[1] + (base >> 4), desc_b[1] + (base >> 4), m, KIND, 1)  # spsel 1
    wgmma_commit_group()
    wgmma_wait_group(0)
    acc_store(acc, KIND, out, tid, 0, 0)


def tile_problem(rng):
    """(image, desc_a, desc_b, meta registers, A, B): a pruned 64 x 64 A of small integers
    compressed to 64 x 32 (64 bytes a row: the 64-byte swizzle) and B [N, 64] (128 bytes a row:
    the 128-byte swizzle), both K-major; a K step is 32 bytes on along A's rows, 64 along B's."""
    a = prune_24(rng.integers(1, 4, (64, 64)) * rng.choice([-1, 1], (64, 64))).astype(np.float64)
    b = rng.integers(-3, 4, (N, 64)).astype(np.float64)
    values, codes = compress_24(a)
    image = np.zeros(16 * 1024, np.uint8)
    lbo_a, sbo_a = canonical_strides("64B", 64)
    pack_operand(image, 0, values, "f16", "K", "64B", lbo_a, sbo_a)
    lbo_b, sbo_b = canonical_strides("128B", 128)
    pack_operand(image, 4096, b, "f16", "K", "128B", lbo_b, sbo_b)
    desc_a = np.array([encode_desc(32 * s, lbo_a, sbo_a, "64B") for s in (0, 1)], np.uint64)
    desc_b = np.array([encode_desc(4096 + 64 * s, lbo_b, sbo_b, "128B") for s in (0, 1)], np.uint64)
    meta = meta_registers_pair(codes[:, :8], codes[:, 8:], KIND)  # 8 codes (chunks of 4) per K step
    return image, desc_a, desc_b, meta, a, b


def run_tile():
    """max |D - model| of the one-tile kernel (0 or it raises)."""
    rng = np.random.default_rng(0)
    image, desc_a, desc_b, meta, a, b = tile_problem(rng)
    out = cuda.to_device(np.full((64, N), np.nan, np.float32))
    launch(sparse_tile, 1, 128, tuple(cuda.to_device(x) for x in (image, desc_a, desc_b, meta)) + (out,),
           smem=dynamic_smem_bytes(image.size))
    got = out.copy_to_host()
    model = sum(wgmma_sp_reference(image, KIND, N, int(desc_a[s]), int(desc_b[s]), meta, spsel=s) for s in (0, 1))
    err = float(np.max(np.abs(got - model)))
    print(f"one m64n{N}k32 sparse wgmma pair: max |D - model| = {err:g}, max |model - A @ B^T| = "
          f"{float(np.max(np.abs(model - a @ b.T))):g}")
    if err != 0.0 or not np.array_equal(model, a @ b.T):
        raise SystemExit("mismatch")
    return err


def simulate():
    """The tile, then ``x @ w24.t()`` of small integers (f16, exact) in the simulator."""
    run_tile()
    rng = np.random.default_rng(1)
    w = prune_24(rng.integers(-3, 4, (128, 64))).astype(np.float16)
    x = rng.integers(-3, 4, (64, 64)).astype(np.float16)
    w24 = Sparse24.from_dense(cuda.to_device(w))
    out = matmul(cuda.to_device(x), w24.t()).copy_to_host()
    err = float(np.max(np.abs(out.astype(np.float64) - x.astype(np.float64) @ w.astype(np.float64).T)))
    print(f"simulated 64x128x64 x @ w24.t(): max |C - ref| = {err:g}")
    if err != 0.0:
        raise SystemExit("mismatch")
    return err


def benchmark(m, n, k, repeats=15):
    import torch

    from nbwgmma.bench import side_by_side

    run_tile()
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    w24 = Sparse24.from_dense(torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16), prune=True)
    w = w24.to_dense()  # the pruned weight as a dense tensor
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    matmul(x, w24.t(), out=out)
    ref = x.double() @ w.double().t()
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    plain = torch.empty_like(out)
    peers = {"nbwgmma sparse matmul(x, w24.t())": lambda: matmul(x, w24.t(), out=out),
             "nbwgmma dense matmul(x, w.t())": lambda: matmul(x, w.t(), out=plain)}
    try:
        from torch.sparse import to_sparse_semi_structured

        ws = to_sparse_semi_structured(w)
        peers["cuSPARSELt F.linear(x, ws)"] = lambda: torch.nn.functional.linear(x, ws)
    except (RuntimeError, ImportError):
        pass
    side_by_side(torch, peers, 2 * m * n * k, f"{m}x{n}x{k}", "the sparse GEMM", repeats)
    print(f"relative error vs float64: {err:.2e}")
    if not err < 1e-2:
        raise SystemExit("mismatch")
    return err


#: the sparse GEMM kernel of ``x @ w24.t()``: maps of W's values, x and the metadata; D = out^T (a
#: transposed view); m, n, k, the metadata's 64-row blocks
SIG = (types.uint64, types.uint64, types.uint64, types.Array(types.uint16, 2, "A"), types.int32, types.int32,
       types.int32, types.int32)


def main(m=8192, n=None, k=None):
    """Returns the relative error of the GEMM against float64 (0.0 where nothing ran on a GPU)."""
    from nbwgmma.demo import run_example

    return run_example("the sparse GEMM kernel", simulate, lambda: (sparse_kernel(SparseConfig("bf16")), SIG),
                       benchmark, m, n, k)


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:4]))
