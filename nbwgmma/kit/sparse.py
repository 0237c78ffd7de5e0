"""Sparse consumers: warpgroups that multiply a 2:4-sparse A by a dense B with
``wgmma.mma_async.sp`` (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate with
sparse A": ``wgmma.mma_async.sp``, "Sparse matrix storage").

The consumer side of the sparse GEMM (:mod:`nbwgmma.kernels.sparse`) as one block, with the
producer's loads of a stage. A stage covers 128 bytes of dense K (64 K of 16-bit inputs, 128 of
fp8: two sparse K steps) and holds, for a CTA tile of 128 rows of A by ``bn`` columns:

* A compressed: 128 rows x 64 bytes (the kept half of 128 bytes of K), one TMA box with the
  64-byte swizzle, 8 KiB; each consumer warpgroup reads its 64 rows through a descriptor
  (SBO 512: 8-row atoms of 64 bytes), the second K step 32 bytes along the row;
* B: ``bn`` rows x 128 bytes of K (``b_major="K"``: one box of B [N, K], the 128-byte swizzle,
  the second K step 64 bytes along the row) or 64-column boxes of B [K, N] (``b_major="MN"``,
  16-bit only, read with the transpose bit: LBO 8 KiB between boxes, SBO 1 KiB between 8-row
  groups of K, the second K step 32 rows = 4 KiB on);
* the metadata registers of both 64-row blocks (:func:`nbwgmma.layout.sparse_gemm.gemm_meta`):
  ``R`` x 128 words per block, R = 1 for 16-bit inputs (one register, ``spsel`` 0 then 1), 2 for
  fp8 (one register per K step); each thread loads its word(s) with one coalesced shared load.

    sc = SparseConsumers("f32.bf16.bf16", TmaPipeline(5, consumers=2))
    ...
    sc.load(slot, full, tmap_a, tmap_b, tmap_meta, kb, a_row, b_row, mblocks, rank)   # producer, per stage
    ...
    acc, s, ph = sc.tile(ring, base, s, ph, kblocks, ct, cw)   # each consumer, per tile

With a pipe of ``cluster`` CTAs (2 or 4, along M: vertically adjacent tiles sharing their B
tile), each CTA's producer loads its share of B, ``bn / cluster`` rows (K-major) or 64-column
boxes (MN-major), and multicasts it into the same place of every CTA of the cluster (less L2
traffic for the operand a sparse wgmma reads most of); ``rank`` is the CTA's rank in it.

``tile`` runs the main loop of consumer ``cw``'s 64 rows with one wgmma group in flight,
releasing each stage after the ``wgmma_wait_group(1)`` that completes the wgmmas reading it; two
stages per trip of the loop keep each stage's metadata in registers of its own until then.
"""

from __future__ import annotations

import types

import numpy as np
from numba import cuda

from ..errors import KitError
from ..intrinsics import (acc_undef, desc_advance, make_desc, smem_addr, tma_load_2d, tma_load_multicast_2d,
                          wgmma_commit_group, wgmma_fence, wgmma_mma_async_sp, wgmma_wait_group)
from ..layout import SWIZZLE_CODE, wgmma_sp_kind
from ..layout.sparse_gemm import STAGE_BYTES_K, meta_regs_per_stage
from .pipeline import TmaPipeline, check_stages, check_shares

__all__ = ["SparseConsumers"]

_SW64, _SW128 = SWIZZLE_CODE["64B"], SWIZZLE_CODE["128B"]


class SparseConsumers(types.ModuleType):
    """Two consumer warpgroups of a sparse GEMM of ``kind`` (f32 accumulators; f16, bf16, e4m3
    or e5m2 inputs), each owning 64 rows of a 128 x ``bn`` CTA tile, over ``pipe`` (a
    :class:`TmaPipeline` with ``consumers=2`` and ``cluster`` 1, 2 or 4). Constants: ``BM``
    (128), ``bn``, ``bk`` (dense K per stage), ``a_cols`` (compressed A elements per stage and
    row), ``b_rows`` (rows of B's tensor-map box: ``bn / cluster`` K-major, else 64),
    ``stage_bytes``, ``meta_regs``. Device functions: ``load(slot, full, tmap_a, tmap_b,
    tmap_meta, kb, a_row, b_row, mblocks, rank)`` (the producer's TMA loads of stage ``kb``: A
    [rows, K/2] compressed, the CTA's share of B (the tile's from row ``b_row``), multicast
    with clusters, the metadata [kblocks * mblocks, R * 128] as ``int32``) and ``tile(ring,
    base, s, ph, kblocks, ct, cw) -> (acc, s, ph)`` (kblocks >= 1)."""

    BM = 128
    A_BYTES = 128 * 64

    def __init__(self, kind: str, pipe: TmaPipeline, *, bn: int = 256, b_major: str = "K", paired: bool = True):
        k = wgmma_sp_kind(kind)
        ok = ("f16", "bf16") if k.input_bits == 16 else ("e4m3", "e5m2")
        if k.dtype != "f32" or k.atype not in ok or k.btype not in ok or (k.input_bits == 16 and k.atype != k.btype):
            raise KitError(f"SparseConsumers: kind must be a 16-bit or fp8 sparse kind with f32 accumulators "
                             f"(f32.bf16.bf16, f32.f16.f16, f32.e4m3.e4m3, ...); got {kind!r}")
        if bn not in (64, 128, 192, 256):
            raise KitError(f"SparseConsumers: bn must be 64, 128, 192 or 256; got {bn!r}")
        if b_major not in ("K", "MN"):
            raise KitError(f"SparseConsumers: b_major must be 'K' or 'MN'; got {b_major!r}")
        if b_major == "MN" and not k.transposable:
            raise KitError(f"SparseConsumers: {kind} has no transpose: B must be K-major (b_major='K')")
        if not isinstance(pipe, TmaPipeline) or pipe.consumers != 2 or pipe.cluster not in (1, 2, 4):
            raise KitError(f"SparseConsumers: pipe must be a TmaPipeline with consumers=2 and a cluster of 1, 2 "
                             f"or 4; got {pipe!r}")
        check_stages("SparseConsumers", pipe)
        check_shares("SparseConsumers", bn, b_major, pipe.cluster)
        super().__init__(f"SparseConsumers({kind})")
        self.kind, self.pipe, self.bn, self.b_major = kind, pipe, bn, b_major
        esize = k.input_bits // 8
        self.bk = STAGE_BYTES_K // esize
        self.a_cols = self.bk // 2
        self.paired = bool(paired)
        self.meta_regs = meta_regs_per_stage(esize, self.paired)
        self.b_bytes = bn * STAGE_BYTES_K
        self.b_rows = bn // pipe.cluster if b_major == "K" else 64
        self.meta_offset = self.A_BYTES + self.b_bytes
        self.stage_bytes = self.meta_offset + 2 * self.meta_regs * 512
        self._build()

    def __repr__(self):
        return (f"SparseConsumers({self.kind}, {self.pipe!r}, bn={self.bn}, b_major={self.b_major!r}, "
                f"paired={self.paired})")

    def _build(self):
        KIND, pipe, BN, BK, A_COLS = self.kind, self.pipe, self.bn, self.bk, self.a_cols
        A_BYTES, META, STAGE, R = self.A_BYTES, self.meta_offset, self.stage_bytes, self.meta_regs
        B_MN = self.b_major == "MN"
        TRANS_B = int(B_MN)
        TWO = R == 2  # one register per K step (fp8; 16-bit unpaired), both read with spsel 0
        # B's second K step: 64 bytes along the K-major row; 32 K-rows of 128 bytes MN-major.
        B_LBO, B_STEP = (8192, 4096) if B_MN else (16, 64)
        CL = pipe.cluster
        CL_MASK = (1 << CL) - 1
        B_PART_ROWS = BN // CL  # each CTA's share of B: rows (K-major) or columns (MN-major)
        B_PART_BYTES = self.b_bytes // CL
        B_BOXES = B_PART_ROWS // 64

        @cuda.jit(device=True, inline=True)
        def load(slot, full, tmap_a, tmap_b, tmap_meta, kb, a_row, b_row, mblocks, rank):
            tma_load_2d(slot, tmap_a, full, kb * A_COLS, a_row)
            b_dst = slot + A_BYTES + rank * B_PART_BYTES
            b_row += rank * B_PART_ROWS
            if B_MN:
                for j in range(B_BOXES):
                    if CL == 1:
                        tma_load_2d(b_dst + j * 8192, tmap_b, full, b_row + j * 64, kb * BK)
                    else:
                        tma_load_multicast_2d(b_dst + j * 8192, tmap_b, full, CL_MASK, b_row + j * 64, kb * BK)
            elif CL == 1:
                tma_load_2d(b_dst, tmap_b, full, kb * BK, b_row)
            else:
                tma_load_multicast_2d(b_dst, tmap_b, full, CL_MASK, kb * BK, b_row)
            tma_load_2d(slot + META, tmap_meta, full, 0, kb * mblocks + a_row // 64)

        @cuda.jit(device=True, inline=True)
        def issue(acc, slot, meta0, meta1, cw, scale_d):
            """The two sparse wgmmas of one stage (scale_d 0: the first of a tile, no fill)."""
            da = make_desc(slot + cw * 4096, 16, 512, _SW64)
            db = make_desc(slot + A_BYTES, B_LBO, 1024, _SW128)
            acc = wgmma_mma_async_sp(acc, da, db, meta0, KIND, 0, scale_d, 1, 1, 0, TRANS_B)
            if TWO:
                acc = wgmma_mma_async_sp(acc, desc_advance(da, 32), desc_advance(db, B_STEP), meta1, KIND, 0, 1,
                                         1, 1, 0, TRANS_B)
            else:  # T2, T3 of each quad hold the second step's codes
                acc = wgmma_mma_async_sp(acc, desc_advance(da, 32), desc_advance(db, B_STEP), meta0, KIND, 1, 1,
                                         1, 1, 0, TRANS_B)
            return acc

        W = STAGE // 4  # 32-bit words per stage

        @cuda.jit(device=True, inline=True)
        def stage(acc, ring, base, s, ph, mw, cw, scale_d):
            """Wait for stage ``s``, load its metadata words and issue its wgmmas as one group."""
            words = cuda.shared.array(0, np.uint32)  # the dynamic shared memory, as 32-bit words
            pipe.consumer_wait(ring, s, ph)
            m0 = words[mw + s * W]
            m1 = words[mw + s * W + 128] if TWO else m0
            wgmma_fence()  # the metadata loads are complete before the wgmmas read them
            acc = issue(acc, base + s * STAGE, m0, m1, cw, scale_d)
            wgmma_commit_group()
            return acc

        @cuda.jit(device=True, inline=True)
        def retire(ring, prev, ct):
            """The group before the last one is done: release its stage."""
            wgmma_wait_group(1)
            if ct == 0:
                pipe.consumer_release(ring, prev)

        @cuda.jit(device=True, inline=True)
        def tile(ring, base, s, ph, kblocks, ct, cw):
            acc = acc_undef(KIND, BN)
            mw = (base - smem_addr(cuda.shared.array(0, np.uint32)) + META + cw * (R * 512)) // 4 + ct
            # One group in flight: a stage's wgmmas run while the next stage's are issued, and
            # complete (retire: wgmma_wait_group(1)) before its slot is released. A wgmma's
            # metadata register must not be written before its group completes (a rolled loop
            # reloads the same PTX register one stage on: wrong products on an H100), so the loop
            # runs two stages per trip, each inlined ``stage`` with metadata variables of its own.
            acc = stage(acc, ring, base, s, ph, mw, cw, 0)
            prev = s
            s, ph = pipe.advance(s, ph)
            for p in range((kblocks - 1) // 2):
                acc = stage(acc, ring, base, s, ph, mw, cw, 1)
                retire(ring, prev, ct)
                prev = s
                s, ph = pipe.advance(s, ph)
                acc = stage(acc, ring, base, s, ph, mw, cw, 1)
                retire(ring, prev, ct)
                prev = s
                s, ph = pipe.advance(s, ph)
            if (kblocks - 1) % 2:  # one stage more
                acc = stage(acc, ring, base, s, ph, mw, cw, 1)
                retire(ring, prev, ct)
                prev = s
                s, ph = pipe.advance(s, ph)
            wgmma_wait_group(0)
            if ct == 0:
                pipe.consumer_release(ring, prev)
            return acc, s, ph

        self.load, self.tile = load, tile
