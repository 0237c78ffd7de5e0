"""The library GEMM: persistent, warp-specialized, TMA + wgmma, written with nbwgmma.

``C[M, N] = alpha * A[M, K] @ B[N, K]^T`` with A and B K-major (row-major A,
row-major "B transposed"), any M, N, K.

One CTA per SM loops over output tiles of BM x BN (grouped order, so CTAs
running together share A rows and B columns in L2). Its warpgroups:

* warpgroup 0, the producer, gives registers back (``setmaxnreg.dec``) and one
  thread streams A and B boxes of BK = 128 bytes of K through a ring of
  ``stages`` shared-memory slots with TMA (128-byte swizzle), each slot guarded
  by a "full" mbarrier (transaction bytes) and an "empty" one (consumer
  releases);
* warpgroups 1.. (the consumers) take more registers (``setmaxnreg.inc``); each
  owns 64 rows of the tile and issues m64nBNkK wgmmas straight from the swizzled
  slots, keeping one wgmma group in flight, then writes its accumulator to C
  (converted to C's type, clipped at the edges).

Tails: TMA fills out-of-bounds elements of A and B with zeros, which add
nothing, and the stores skip elements outside C.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from ..intrinsics import (
    acc_scale,
    acc_store,
    acc_undef,
    dynamic_smem_base,
    fence_mbarrier_init,
    make_desc,
    mbarrier_arrive,
    mbarrier_arrive_expect_tx,
    mbarrier_init,
    mbarrier_wait_parity,
    setmaxnreg_dec,
    setmaxnreg_inc,
    smem_addr,
    tma_load_2d,
    wgmma_commit_group,
    wgmma_fence,
    wgmma_kind,
    wgmma_mma_async,
    wgmma_wait_group,
)
from ..intrinsics.descriptor import SWIZZLE_CODE
from ..intrinsics.wgmma_model import ELEMENT_BYTES

__all__ = ["GemmConfig", "gemm_kernel", "tile_order"]

SW128 = SWIZZLE_CODE["128B"]


class GemmConfig:
    """Compile-time parameters of one GEMM kernel."""

    def __init__(self, kind="f32.bf16.bf16", bm=128, bn=256, stages=4, group_m=8, scaled=False,
                 producer_regs=40, consumer_regs=None):
        self.kind = kind
        self.k = wgmma_kind(kind)
        if self.k.dtype != "f32":
            raise ValueError(f"the GEMM accumulates in f32; got {kind}")
        if bm % 64 or not 64 <= bm <= 256:
            raise ValueError(f"bm must be 64, 128, 192 or 256; got {bm}")
        if bn not in self.k.n_values:
            raise ValueError(f"bn must be a wgmma N for {kind}; got {bn}")
        self.bm, self.bn, self.stages, self.group_m, self.scaled = bm, bn, stages, group_m, scaled
        self.esize = int(ELEMENT_BYTES[self.k.atype])
        self.bk = 128 // self.esize  # one 128-byte swizzle row of K per stage
        self.consumers = bm // 64
        self.threads = 128 * (self.consumers + 1)
        self.a_bytes = bm * 128
        self.b_bytes = bn * 128
        self.stage_bytes = self.a_bytes + self.b_bytes
        self.smem_bytes = self.stages * self.stage_bytes
        # The register file holds 64K registers: 512 per thread of one warpgroup, shared out
        # among the warpgroups. setmaxnreg.inc waits until its registers are free, so an
        # over-subscribed split would hang: check it here.
        if consumer_regs is None:
            consumer_regs = min(240, (512 - producer_regs) // self.consumers // 8 * 8)
        if producer_regs + self.consumers * consumer_regs > 512:
            raise ValueError(
                f"setmaxnreg split needs {producer_regs} + {self.consumers} x {consumer_regs} registers per "
                f"thread slot; the register file has 512"
            )
        if self.smem_bytes + 1023 > 227 * 1024:
            raise ValueError(f"{stages} stages of {self.stage_bytes} B exceed 227 KiB of shared memory")
        self.producer_regs, self.consumer_regs = producer_regs, consumer_regs

    def key(self):
        return (self.kind, self.bm, self.bn, self.stages, self.group_m, self.scaled,
                self.producer_regs, self.consumer_regs)

    def __repr__(self):
        return (f"GemmConfig({self.kind}, {self.bm}x{self.bn}x{self.bk}, stages={self.stages}, "
                f"consumers={self.consumers})")


@cuda.jit(device=True, inline=True)
def tile_order(t, tiles_m, tiles_n, group_m):
    """Tile ``t`` -> (tile row, tile col), walking ``group_m`` tile rows at a time."""
    per_group = group_m * tiles_n
    g = t // per_group
    first = g * group_m
    rows = min(tiles_m - first, group_m)
    r = t % per_group
    return first + r % rows, r // rows


@functools.lru_cache(maxsize=None)
def _build(key):
    cfg = GemmConfig(*key)
    KIND, BM, BN, BK = cfg.kind, cfg.bm, cfg.bn, cfg.bk
    STAGES, GROUP_M, NCONS = cfg.stages, cfg.group_m, cfg.consumers
    assert BK // cfg.k.k == 4
    KSTEP_DESC = cfg.k.k * cfg.esize // 16  # descriptor units (16 B) per K step
    A_BYTES, STAGE_BYTES = cfg.a_bytes, cfg.stage_bytes
    SCALED = cfg.scaled
    PREGS, CREGS = cfg.producer_regs, cfg.consumer_regs
    NBARS = 2 * STAGES

    @cuda.jit(launch_bounds=(cfg.threads, 1))
    def gemm(tmap_a, tmap_b, c, m, n, k, alpha):
        dyn = cuda.shared.array(0, np.uint8)
        bars = cuda.shared.array(NBARS, np.uint64)
        base = dynamic_smem_base(dyn, 1024)
        full0 = smem_addr(bars)
        empty0 = full0 + 8 * STAGES
        tid = cuda.threadIdx.x
        wg = tid // 128
        if tid == 0:
            for s in range(STAGES):
                mbarrier_init(full0 + 8 * s, 1)
                mbarrier_init(empty0 + 8 * s, NCONS)
            fence_mbarrier_init()
        cuda.syncthreads()

        tiles_m = (m + BM - 1) // BM
        tiles_n = (n + BN - 1) // BN
        ntiles = tiles_m * tiles_n
        kblocks = (k + BK - 1) // BK

        if wg == 0:
            setmaxnreg_dec(PREGS)
            if tid == 0:
                it = 0
                for t in range(cuda.blockIdx.x, ntiles, cuda.gridDim.x):
                    pm, pn = tile_order(t, tiles_m, tiles_n, GROUP_M)
                    for kb in range(kblocks):
                        s = it % STAGES
                        mbarrier_wait_parity(empty0 + 8 * s, ((it // STAGES) & 1) ^ 1)
                        full = full0 + 8 * s
                        slot = base + s * STAGE_BYTES
                        mbarrier_arrive_expect_tx(full, STAGE_BYTES)
                        tma_load_2d(slot, tmap_a, full, kb * BK, pm * BM)
                        tma_load_2d(slot + A_BYTES, tmap_b, full, kb * BK, pn * BN)
                        it += 1
        else:
            setmaxnreg_inc(CREGS)
            cw = wg - 1
            ctid = tid % 128
            it = 0
            for t in range(cuda.blockIdx.x, ntiles, cuda.gridDim.x):
                pm, pn = tile_order(t, tiles_m, tiles_n, GROUP_M)
                acc = acc_undef(KIND, BN)
                for kb in range(kblocks):
                    s = it % STAGES
                    mbarrier_wait_parity(full0 + 8 * s, (it // STAGES) & 1)
                    slot = base + s * STAGE_BYTES
                    da = make_desc(slot + cw * 64 * 128, 16, 1024, SW128)
                    db = make_desc(slot + A_BYTES, 16, 1024, SW128)
                    wgmma_fence()
                    # BK is one 128-byte swizzle row: always four K steps, written out so
                    # the four wgmmas issue back to back.
                    acc = wgmma_mma_async(acc, da, db, KIND, kb > 0)
                    acc = wgmma_mma_async(acc, da + KSTEP_DESC, db + KSTEP_DESC, KIND)
                    acc = wgmma_mma_async(acc, da + 2 * KSTEP_DESC, db + 2 * KSTEP_DESC, KIND)
                    acc = wgmma_mma_async(acc, da + 3 * KSTEP_DESC, db + 3 * KSTEP_DESC, KIND)
                    wgmma_commit_group()
                    # Keep this stage's group in flight; the previous one is done: release it.
                    wgmma_wait_group(1)
                    if kb > 0 and ctid == 0:
                        mbarrier_arrive(empty0 + 8 * ((it - 1) % STAGES))
                    it += 1
                wgmma_wait_group(0)
                if ctid == 0:
                    mbarrier_arrive(empty0 + 8 * ((it - 1) % STAGES))
                if SCALED:
                    acc = acc_scale(acc, alpha)
                acc_store(acc, KIND, c, ctid, pm * BM + cw * 64, pn * BN)

    return gemm


def gemm_kernel(cfg: GemmConfig):
    """The ``@cuda.jit`` kernel for ``cfg`` (compiled once per configuration)."""
    return _build(cfg.key())
