"""GEMM step 2: TMA loads through a ring of shared-memory stages guarded by mbarriers.

Same problem as step 1 (C = A @ B^T, bf16 in, f32 out, K-major operands; M a multiple
of 64, N of 256, K of 64), now with one warpgroup per 64x256 tile and a ring of
STAGES slots. Thread 0 asks TMA for the first STAGES k-blocks at once; TMA writes
them already swizzled and counts the bytes on each slot's mbarrier
(``arrive.expect_tx`` + ``complete_tx``). The warpgroup waits on a slot's phase,
runs four m64n256k16 wgmmas, and once every thread is done with the slot thread 0
refills it with the k-block STAGES ahead, so loads overlap the math.

    python examples/gemm_2_tma_pipeline.py [size]
"""

import sys

import numpy as np
from numba import cuda, types

from nbwgmma.demo import compile_report_instead, gpu_available, run_tma_gemm, simulated
from nbwgmma.intrinsics import (
    acc_store, acc_zeros, desc_advance, dynamic_smem_base, fence_mbarrier_init, make_desc,
    mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_wait_parity, smem_addr, tma_load_2d,
    wgmma_commit_group, wgmma_fence, wgmma_mma_async, wgmma_wait_group,
)
from nbwgmma.layout import SWIZZLE_CODE

KIND = "f32.bf16.bf16"
BM, BN, BK, STAGES = 64, 256, 64, 4
A_BYTES = BM * 128
STAGE = (BM + BN) * 128  # one 128-byte row of K per tile row
SW128 = SWIZZLE_CODE["128B"]


@cuda.jit(device=True, inline=True)
def load(slot, bar, tmap_a, tmap_b, kb, m0, n0):
    mbarrier_arrive_expect_tx(bar, STAGE)  # the phase completes when STAGE bytes have landed
    tma_load_2d(slot, tmap_a, bar, kb * BK, m0)
    tma_load_2d(slot + A_BYTES, tmap_b, bar, kb * BK, n0)


@cuda.jit(launch_bounds=(128, 1))
def gemm_tma(tmap_a, tmap_b, c, k):
    dyn = cuda.shared.array(0, np.uint8)
    bars = cuda.shared.array(STAGES, np.uint64)
    base = dynamic_smem_base(dyn, 1024)
    full = smem_addr(bars)
    t = cuda.threadIdx.x
    m0, n0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    nk = k // BK
    if t == 0:
        for s in range(STAGES):
            mbarrier_init(full + 8 * s, 1)
        fence_mbarrier_init()
        for s in range(min(STAGES, nk)):
            load(base + s * STAGE, full + 8 * s, tmap_a, tmap_b, s, m0, n0)
    cuda.syncthreads()
    acc = acc_zeros(KIND, BN)
    for kb in range(nk):
        s = kb % STAGES
        mbarrier_wait_parity(full + 8 * s, (kb // STAGES) & 1)  # the slot's n-th fill, n = kb // STAGES
        slot = base + s * STAGE
        da = make_desc(slot, 16, 1024, SW128)
        db = make_desc(slot + A_BYTES, 16, 1024, SW128)
        wgmma_fence()
        acc = wgmma_mma_async(acc, da, db, KIND)
        acc = wgmma_mma_async(acc, desc_advance(da, 32), desc_advance(db, 32), KIND)
        acc = wgmma_mma_async(acc, desc_advance(da, 64), desc_advance(db, 64), KIND)
        acc = wgmma_mma_async(acc, desc_advance(da, 96), desc_advance(db, 96), KIND)
        wgmma_commit_group()
        wgmma_wait_group(0)
        cuda.syncthreads()  # nobody reads the slot any more: refill it
        if t == 0 and kb + STAGES < nk:
            load(slot, full + 8 * s, tmap_a, tmap_b, kb + STAGES, m0, n0)
    acc_store(acc, KIND, c, t, m0, n0)


SIG = (types.uint64, types.uint64, types.float32[:, ::1], types.int32)


def main(size=4096):
    if not gpu_available() and not simulated():  # the simulator runs one tile
        return compile_report_instead(gemm_tma, SIG)
    return run_tma_gemm("step 2, TMA + mbarrier pipeline", gemm_tma, size, BM, BN, BK, 128,
                        STAGES * STAGE + 1023)

if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4096)
