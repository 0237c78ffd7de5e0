"""GEMM step 1: the simplest correct wgmma GEMM.

C[M, N] = A[M, K] @ B[N, K]^T, bf16 in, f32 out, both operands K-major; M a multiple
of 64, N of 128, K of 64. One warpgroup (128 threads) per 64x128 tile of C. For each
64-element slice of K, the threads copy the A and B tiles from global memory into
shared memory in the 128-byte-swizzled layout wgmma reads, make those ordinary
stores visible to the tensor cores (``fence.proxy.async``), and issue four
m64n128k16 wgmmas. Nothing overlaps: copy, compute, repeat.

    python examples/gemm_1_simple.py [size]
"""

import sys

import numpy as np
from numba import cuda, types

from nbwgmma.demo import (
    compile_report_instead, gemm_operands, gemm_report, gpu_available, sim_check, sim_operands, simulated,
)
from nbwgmma.intrinsics import (
    acc_store, acc_zeros, desc_advance, dynamic_smem_base, fence_proxy_async_shared, make_desc, smem_addr,
    wgmma_commit_group, wgmma_fence, wgmma_mma_async, wgmma_wait_group,
)
from nbwgmma.layout import SWIZZLE_CODE

KIND = "f32.bf16.bf16"
BM, BN, BK = 64, 128, 64  # BK bf16 = 128 bytes: one swizzled row per tile row
WORDS = BK // 2  # 32-bit words per tile row
SMEM = (BM + BN) * 128
SW128 = SWIZZLE_CODE["128B"]


@cuda.jit(device=True, inline=True)
def swizzled_word(r, w):
    """Word index of word ``w`` of tile row ``r``: rows of 128 bytes whose 16-byte chunks are
    permuted by XOR with ``r % 8`` (the 128B swizzle; the tile starts 1024-byte aligned)."""
    return r * WORDS + (((w // 4) ^ (r % 8)) * 4) + w % 4


@cuda.jit(launch_bounds=(128, 1))
def gemm_simple(a, b, c):
    """``a``: [M, K/2] and ``b``: [N, K/2] uint32 views (bf16 pairs); ``c``: [M, N] float32."""
    dyn = cuda.shared.array(0, np.uint32)
    base = dynamic_smem_base(dyn, 1024)
    w0 = (base - smem_addr(dyn)) // 4  # first word of the aligned region
    sa, sb = w0, w0 + BM * WORDS
    t = cuda.threadIdx.x
    m0, n0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    acc = acc_zeros(KIND, BN)
    for kw in range(0, a.shape[1], WORDS):
        for i in range(t, BM * WORDS, 128):
            dyn[sa + swizzled_word(i // WORDS, i % WORDS)] = a[m0 + i // WORDS, kw + i % WORDS]
        for i in range(t, BN * WORDS, 128):
            dyn[sb + swizzled_word(i // WORDS, i % WORDS)] = b[n0 + i // WORDS, kw + i % WORDS]
        fence_proxy_async_shared()  # generic-proxy stores -> visible to wgmma (async proxy)
        cuda.syncthreads()
        # 8-row atoms 1024 bytes apart (SBO); a K step of 16 is 32 bytes (2 descriptor units).
        da = make_desc(base, 16, 1024, SW128)
        db = make_desc(base + BM * 128, 16, 1024, SW128)
        wgmma_fence()
        acc = wgmma_mma_async(acc, da, db, KIND)
        acc = wgmma_mma_async(acc, desc_advance(da, 32), desc_advance(db, 32), KIND)
        acc = wgmma_mma_async(acc, desc_advance(da, 64), desc_advance(db, 64), KIND)
        acc = wgmma_mma_async(acc, desc_advance(da, 96), desc_advance(db, 96), KIND)
        wgmma_commit_group()
        wgmma_wait_group(0)
        cuda.syncthreads()  # everyone is done reading before the next copy overwrites
    acc_store(acc, KIND, c, t, m0, n0)


SIG = (types.uint32[:, ::1], types.uint32[:, ::1], types.float32[:, ::1])


def simulate():
    """In the CUDA simulator: one tile, two k-blocks (``launch`` gives each CTA its shared memory)."""
    from nbwgmma.launch import launch

    a, b, a_bits, b_bits = sim_operands(BM, BN, 2 * BK)
    au, bu = (cuda.to_device(x.copy_to_host().view(np.uint32)) for x in (a_bits, b_bits))
    c = cuda.device_array((BM, BN), np.float32)

    def run():
        launch(gemm_simple, (1, 1), 128, (au, bu, c), smem=SMEM + 1023)

    return sim_check("step 1, simple wgmma GEMM", run, c, a, b)


def main(size=4096):
    if simulated():
        return simulate()
    if not gpu_available():
        return compile_report_instead(gemm_simple, SIG)
    import torch

    m = n = k = size
    a, b = gemm_operands(m, n, k)
    c = torch.empty(m, n, device="cuda")
    au, bu, cu = (cuda.as_cuda_array(x) for x in (a.view(torch.int32), b.view(torch.int32), c))
    au, bu = au.view(np.uint32), bu.view(np.uint32)

    def run():
        gemm_simple[(n // BN, m // BM), 128, 0, SMEM + 1023](au, bu, cu)

    return gemm_report("step 1, simple wgmma GEMM", run, c, a, b)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4096)
