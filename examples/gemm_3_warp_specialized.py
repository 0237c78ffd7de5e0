"""GEMM step 3: warp specialization.

Same problem (C = A @ B^T, bf16 in, f32 out; M a multiple of 128, N of 256, K of 64)
with three warpgroups per 128x256 tile. Warpgroup 0 is the producer: it gives
registers back (``setmaxnreg.dec``) and one of its threads keeps TMA busy, waiting
only for a slot to be *empty*. Warpgroups 1 and 2 are consumers: they take the
registers (``setmaxnreg.inc``), each owns 64 rows, waits for a slot to be *full*,
issues four m64n256k16 wgmmas, keeps that group in flight (``wait_group(1)``) and
marks the previous slot empty. Loads and math now run in different warps and
never wait for each other's instructions. The library kernel
(``nbwgmma/kernels/gemm.py``) adds a persistent grid, L2-friendly tile order,
tails, other layouts and types, and an stmatrix + TMA-store epilogue.

    python examples/gemm_3_warp_specialized.py [size]
"""

import sys

import numpy as np
from numba import cuda, types

from nbwgmma.demo import compile_report_instead, gpu_available, run_tma_gemm, simulated
from nbwgmma.intrinsics import (
    acc_store, acc_undef, desc_advance, dynamic_smem_base, fence_mbarrier_init, make_desc, mbarrier_arrive,
    mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_wait_parity, setmaxnreg_dec, setmaxnreg_inc, smem_addr,
    tma_load_2d, wgmma_commit_group, wgmma_fence, wgmma_mma_async, wgmma_wait_group,
)
from nbwgmma.layout import SWIZZLE_CODE

KIND = "f32.bf16.bf16"
BM, BN, BK, STAGES = 128, 256, 64, 4
A_BYTES = BM * 128
STAGE = (BM + BN) * 128
NBARS = 2 * STAGES
SW128 = SWIZZLE_CODE["128B"]


@cuda.jit(launch_bounds=(384, 1))
def gemm_ws(tmap_a, tmap_b, c, k):
    dyn = cuda.shared.array(0, np.uint8)
    bars = cuda.shared.array(NBARS, np.uint64)
    base = dynamic_smem_base(dyn, 1024)
    full = smem_addr(bars)
    empty = full + 8 * STAGES
    t = cuda.threadIdx.x
    wg = t // 128
    m0, n0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    if t == 0:
        for s in range(STAGES):
            mbarrier_init(full + 8 * s, 1)  # the producer's expect_tx arrival (+ TMA bytes)
            mbarrier_init(empty + 8 * s, 2)  # one arrival per consumer warpgroup
        fence_mbarrier_init()
    cuda.syncthreads()
    nk = k // BK
    if wg == 0:
        setmaxnreg_dec(40)
        if t == 0:
            for kb in range(nk):
                s = kb % STAGES
                # Wait until both consumers released the slot's previous fill (the first
                # round passes at once: parity 1 is the phase before phase 0).
                mbarrier_wait_parity(empty + 8 * s, ((kb // STAGES) & 1) ^ 1)
                slot = base + s * STAGE
                mbarrier_arrive_expect_tx(full + 8 * s, STAGE)
                tma_load_2d(slot, tmap_a, full + 8 * s, kb * BK, m0)
                tma_load_2d(slot + A_BYTES, tmap_b, full + 8 * s, kb * BK, n0)
    else:
        setmaxnreg_inc(232)
        cw, ct = wg - 1, t % 128
        acc = acc_undef(KIND, BN)
        for kb in range(nk):
            s = kb % STAGES
            mbarrier_wait_parity(full + 8 * s, (kb // STAGES) & 1)
            slot = base + s * STAGE
            da = make_desc(slot + cw * 64 * 128, 16, 1024, SW128)
            db = make_desc(slot + A_BYTES, 16, 1024, SW128)
            wgmma_fence()
            acc = wgmma_mma_async(acc, da, db, KIND, kb > 0)  # scale-d = 0 first: no zero fill
            acc = wgmma_mma_async(acc, desc_advance(da, 32), desc_advance(db, 32), KIND)
            acc = wgmma_mma_async(acc, desc_advance(da, 64), desc_advance(db, 64), KIND)
            acc = wgmma_mma_async(acc, desc_advance(da, 96), desc_advance(db, 96), KIND)
            wgmma_commit_group()
            wgmma_wait_group(1)  # this k-block's group may still run; the previous one is done
            if kb > 0 and ct == 0:
                mbarrier_arrive(empty + 8 * ((kb - 1) % STAGES))
        wgmma_wait_group(0)
        acc_store(acc, KIND, c, ct, m0 + cw * 64, n0)


SIG = (types.uint64, types.uint64, types.float32[:, ::1], types.int32)


def main(size=4096):
    if not gpu_available() and not simulated():  # the simulator runs one tile
        return compile_report_instead(gemm_ws, SIG)
    return run_tma_gemm("step 3, warp-specialized producer/consumers", gemm_ws, size, BM, BN, BK, 384,
                        STAGES * STAGE + 1023)

if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 4096)
