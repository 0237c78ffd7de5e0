"""Block-scaled fp8 consumers: the wgmma sums one 128-K block, CUDA cores scale and add it.

An fp8 operand scaled per block of K (1 x 128 for activations, 128 x 128 for weights: the
recipe of DeepSeek-V3) cannot be accumulated by the tensor cores across blocks: each block's
partial product has its own scale. And the fp8 wgmma's accumulator adds its products with
fewer bits than an f32 add keeps, so a long K loses accuracy even with one scale per tensor
(see the guide, "Block-scaled fp8"). Both are fixed by *promotion*: the wgmma accumulates one
128-K block (one stage: 128 bytes of fp8 K, one 128-byte swizzle row) into a temporary
fragment, from zero, and the consumer adds ``tmp * scale`` into the main f32 accumulator with
ordinary fused multiply-adds, in registers. Two temporaries take the blocks in turn: block
``j``'s promotion runs while block ``j + 1``'s wgmmas keep the tensor cores busy::

    pipe = TmaPipeline(6, consumers=BlockScaled.STAGED_RELEASES, producers=BlockScaled.PRODUCERS)
    bs = BlockScaled("f32.e4m3.e4m3", pipe, a_block=True, b_block=True, a_columns=True)
    ...
    bs.load(slot, full, tmap_a, tmap_b, kb * 128, a_row, b_row)          # the TMA thread, per stage
    rows = bs.scale_rows(sa, a_row, m, lane)                             # a scale warp, per tile
    bs.put_scales(ring, sbase, s, ph, lane, rows, sb[nb], kb)            # ... and per stage
    acc, s, ph = bs.tile(ring, base, sbase, s, ph, kblocks, ct, cw)      # each consumer, per tile

Two consumer warpgroups share a 128 x 128 tile (warpgroup ``cw`` holds rows ``64 cw`` to
``64 cw + 63``); while one scales its block, the other's wgmmas keep the tensor cores busy.
``sa`` is A's scale, a 2-D f32 array ``[row, k block]``; ``sb[nb]`` the row of B's ``[n block,
k block]`` scales for the tile's columns. With ``a_columns`` (A's scales in torch's layout:
rows contiguous, 16-byte aligned columns) the scales are *staged*: a scale warp (warps 1-3 of
the producer warpgroup, taking the stages in turn) copies each block's 128 row scales and its
B scale into shared memory beside the stage with ``cp_async``, landing on the stage's "full"
barrier, and the consumers read them there. Otherwise the consumers read them from global
memory themselves (``tile_direct``). A side without block scales reads nothing; with neither,
``tile`` is the plain loop (the tensor cores accumulate the whole K: the fp8 fast path) and
the scales go in the epilogue.

*256-row tiles* (``rows=256``, staged scales only) move less through shared memory per product
(the wgmmas of a 128 x 128 fp8 tile read and TMA writes about 160 bytes a cycle at the tensor
cores' rate, above the 128 shared memory delivers). Each consumer then holds two 64-row sums,
one for each 128-row *wave* of the stage, and one temporary: a wave's wgmmas complete before
its promotion (the other warpgroup's keep the tensor cores busy). No scale warps: the TMA thread
fills the stage, stores B's scale beside it and copies the tile's 256 A scales with one bulk
copy (``m`` a multiple of 4)::

    pipe = TmaPipeline(4, consumers=BlockScaled.STAGED_RELEASES)
    bs = BlockScaled("f32.e4m3.e4m3", pipe, a_block=True, b_block=True, a_columns=True, rows=256)
    bs.fill(ring, base, sbase, s, ph, tmap_a, tmap_b, sa, sb[nb], m, kb, a_row, b_row)  # TMA thread
    acc0, acc1, s, ph = bs.tile_tall(ring, base, sbase, s, ph, kblocks, ct, cw)         # consumers

Measured on an H200 (block scales on both sides, bf16 out): 1228 TFLOP/s at 4096 x 7168 x 7168
against 1142 with 128-row tiles, 1069 against 976 at 4096 x 24576 x 1536.

*192-row tiles* (``rows=192``, staged scales, ``pipe`` counting the TMA thread and 384 consumer
threads) take *three* consumer warpgroups of 64 rows, one temporary and one wave a stage each
(``tile_trio``): a consumer's promotion then hides behind two other waves, not one (the FFMAs
between a wave's completion and the next wave's wgmmas cost a 256-row tile 11% on an H200). The
TMA thread fills the stages as for 256 rows; the 512 threads' registers just fit (24 for the
producers, 160 for each consumer).

:func:`acc_promote` is the promotion itself, a device function over a fragment.
"""

from __future__ import annotations

import types

import numpy as np
from numba import cuda

from ..errors import KitError, is_int
from ..intrinsics import (
    acc_undef, acc_zeros, bulk_copy_g2s_array, cp_async, cp_async_zfill, desc_advance, ld_shared_f32, make_desc,
    st_shared_f32, tma_load_2d, wgmma_commit_group, wgmma_fence, wgmma_mma_async, wgmma_wait_group,
)
from ..layout import SWIZZLE_CODE, wgmma_kind
from .device import inlined
from .pipeline import TmaPipeline, check_stages
from .promote import acc_promote, acc_promote_cols

__all__ = ["BlockScaled", "SCALE_BLOCK", "WIDE_COLS"]

#: K (and, for a weight, N) elements per scale block.
SCALE_BLOCK = 128

#: tile widths past 128 columns that :class:`BlockScaled` takes (128 rows, staged scales, one
#: temporary): the multiples of 16 up to 176 (at 192 the sum, the temporary and the rest of a
#: consumer's values no longer fit in its 224 registers beside scale warps of 56: ptxas spills)
WIDE_COLS = (144, 160, 176)

_SW128 = SWIZZLE_CODE["128B"]
class BlockScaled(types.ModuleType):
    """Two consumer warpgroups of ``kind`` (an fp8 kind, f32 accumulator) sharing 128 x 128
    tiles (``rows`` and ``cols`` below) over ``pipe`` (a :class:`TmaPipeline`), each stage one
    128-K block: A's 128 rows x 128 bytes (16 KiB), then B's 128 rows x 128 bytes, both K
    contiguous with the 128-byte swizzle.
    ``a_block``/``b_block``: A (B) has a scale per row (per 128 x 128 block) and per K block;
    ``promote`` (default: where there are block scales) promotes every block, with unit scales
    where there are none.

    *Staged* scales (``a_columns`` with A's block scales: each column of A's scales, one K
    block's rows, contiguous and 16-byte aligned, as torch lays them out; the caller
    guarantees it) travel with the stage: for every fill, one of the producer warpgroup's warps
    1-3 (the *scale warps*, :attr:`SCALE_WARPS`, taking the fills in turn) copies the 128 rows'
    A scales (one 16-byte ``cp_async_zfill`` per thread, rows past ``m`` zero-filled) and B's
    scale into the slot's :attr:`SCALE_SLOT_BYTES` of shared memory at ``sbase``, and arrives on
    the stage's "full" barrier when they land; ``pipe`` counts its 32 threads (``producers=``
    :attr:`PRODUCERS`), and since every consumer thread reads the slot, every one releases it
    (``consumers=`` :attr:`STAGED_RELEASES`). Measured on an H100 at 4096 x 7168 x 7168: 1173
    TFLOP/s against 1016 with the scales read from global memory in the main loop (a scale
    held the promotion up by an L2 round trip, and a stage's release waited for the loads).
    Otherwise ``pipe`` counts the TMA thread and two warpgroups, and ``tile_direct`` has the
    consumers read the scales from global memory, two blocks ahead: staged row by row (128
    lines a block where each row's K blocks are contiguous) they were slower (the grouped GEMM,
    whose group rows start anywhere: 0.81-0.92x).

    ``rows`` (128 or 256: 256 needs the staged scales, a pipe counting the TMA thread alone
    and every consumer thread; :attr:`stage_bytes` and :attr:`slot_bytes` give its stage and
    scale slot sizes) makes each consumer hold 64 rows of each 128-row half of the tile; 192
    (likewise, 128 columns) makes three consumers (:attr:`consumers`) of 64 rows each;
    ``cols`` (128, or 64: tiles of 128 x 64, twice the tiles for products of few rows, or of 256 x
    64, a strip's beside 256 x 128 ones (below); B's stage then holds 64 rows and the fragments
    are 64 x 64) sets the tile's width. A
    *wide* tile (``cols`` one of :data:`WIDE_COLS`, 128 rows, staged scales) fills the SMs'
    rounds where 128-column tiles leave the last one mostly idle (4096 x 576: 128 tiles of 128 x
    144 in one round against 160 of 128 x 128 in two on 132 SMs: 1.33x on an H200; per column it
    runs at about 0.85 of a 128 x 128 tile); its columns may span three 128-column blocks of B's
    scales: the scale warp's lane ``l`` copies block ``nb + l % 4``'s scale (the caller passes each
    lane its row, clamped inside the scales) and ``tile_wide(ring, base, sbase, s, ph, kblocks,
    ct, cw, off)`` promotes through :func:`acc_promote_cols` (``off``: the tile's first column
    modulo 128), one temporary a warpgroup as a 256-row tile's waves. With 256 rows, ``b_box``
    (half of ``cols``) loads B's stage in two boxes of that many rows, and ``stride`` (bytes
    between stages, at least :attr:`stage_bytes`) lets tiles of two widths share one ring: the
    block-scaled GEMM's 256 x 128 tiles load B in two 64-row boxes so that a second
    ``BlockScaled`` of 256 x 64 tiles (``cols=64, stride=`` the first's :attr:`stage_bytes`) fills
    and reads the same stages, half of B's slot, for N's last block of at most 64 columns.

    Device functions: ``load(slot, full, tmap_a, tmap_b, kcol, a_row, b_row)`` (the producer's
    TMA loads of one stage); staged: ``scale_rows(sa, row0, m, lane) -> rows`` (what thread
    ``lane`` of a scale warp copies for the tile's rows from ``row0``: once per tile) and
    ``put_scales(ring, sbase, s, ph, lane, rows, sbr, kb)`` (a scale warp's fill of slot ``s``:
    K block ``kb``'s scales and ``sbr[kb]``, B's for the tile's columns, then the arrival),
    ``tile(ring, base, sbase, s, ph, kblocks, ct, cw) -> (acc, s, ph)``: warpgroup ``cw``'s 64
    x ``cols`` f32 accumulator of the tile over ``kblocks`` stages (``cw`` best taken from
    :func:`~nbwgmma.kit.warpgroup_index` less one, warp-uniform: the wgmma descriptors then stay in uniform
    registers, 6-9% faster with staged scales on an H200); direct: ``tile`` is
    ``tile_direct(ring, base, s, ph, kblocks, ct, cw, sa, sb, ra0, ra1, nb)`` (``sa`` rows
    ``ra0`` and ``ra1``, the thread's two rows clamped inside A; ``sb`` row ``nb``). 256 rows:
    ``fill(ring, base, sbase, s, ph, tmap_a, tmap_b, sa, b, m, kb, a_row, b_row)`` (the TMA
    thread's whole fill of slot ``s``: the wait, B's scale ``b``, the barrier armed, the loads and
    A's scales) and ``tile_tall(ring, base, sbase, s, ph,
    kblocks, ct, cw) -> (acc0, acc1, s, ph)`` (warpgroup ``cw``'s 64 rows of the first and of the
    second 128-row half); 192 rows: ``tile_trio(ring, base, sbase, s, ph, kblocks, ct, cw) ->
    (acc, s, ph)`` (warpgroup ``cw`` of three). ``tile_skip(ring, s, ph, kblocks, ct) -> (s, ph)``: a warpgroup whose
    rows of the tile all lie past M (a decoding product's second 64 rows) passes ``kblocks``
    stages on, each waited for and released unread, leaving the tensor cores to the other (on an
    H200, 16 x 7168 x 7168 in 128 x 128 tiles: the consumers bound each stage, the producers
    waited for them)."""

    BM = BN = 128
    BK = 128
    A_BYTES = 128 * 128
    STAGE_BYTES = 2 * 128 * 128
    #: arrivals per fill on the pipeline's "full" barriers where the scales are staged: the
    #: TMA thread's and the 32 threads of the scale warp that copies the fill's scales.
    PRODUCERS = 1 + 32
    #: releases per fill on the pipeline's "empty" barriers where the scales are staged: every
    #: consumer thread releases the stage it read scales from (256; else one per warpgroup).
    STAGED_RELEASES = 256
    #: the producer warpgroup's warps that copy the scales, taking the fills in turn (warp 0's
    #: thread issues the TMA loads); measured on an H100 at 4096 x 7168 x 7168: 1173 TFLOP/s
    #: with three, 1151 with one (4096 x 24576 x 1536: 995 and 999).
    SCALE_WARPS = 3
    #: bytes per stage of the scales' slots: 128 rows' A scales, then B's scale in 32 words
    #: (one per thread of the scale warp).
    SCALE_SLOT_BYTES = 640

    def __init__(self, kind: str, pipe: TmaPipeline, *, a_block: bool, b_block: bool, promote: bool | None = None,
                 a_columns: bool = False, rows: int = 128, cols: int = 128, b_box: int | None = None,
                 stride: int | None = None):
        k = wgmma_kind(kind)
        if k.dtype != "f32" or k.atype not in ("e4m3", "e5m2") or k.btype not in ("e4m3", "e5m2"):
            raise KitError(f"BlockScaled: kind must be an fp8 kind with an f32 accumulator (f32.e4m3.e4m3, ...); "
                             f"got {kind!r}")
        if not isinstance(pipe, TmaPipeline) or pipe.cluster != 1:
            raise KitError(f"BlockScaled: pipe must be a TmaPipeline with no cluster; got {pipe!r}")
        check_stages("BlockScaled", pipe)
        super().__init__(f"BlockScaled({kind})")
        self.kind, self.pipe = kind, pipe
        self.a_block, self.b_block = bool(a_block), bool(b_block)
        if promote is None:
            promote = self.a_block or self.b_block
        if (self.a_block or self.b_block) and not promote:
            raise KitError("BlockScaled: block scales need promotion (each 128-K block has its own scale); "
                             "got promote=False")
        self.staged = self.a_block and bool(a_columns)
        if rows not in (128, 192, 256) or isinstance(rows, bool):
            raise KitError(f"BlockScaled: rows must be 128, 192 or 256; got {rows!r}")
        if rows != 128 and not self.staged:
            raise KitError(f"BlockScaled: {rows}-row tiles take A's block scales with contiguous rows (a_block=True, "
                             f"a_columns=True); got a_block={a_block!r}, a_columns={a_columns!r}")
        if rows == 192 and cols != 128:
            raise KitError(f"BlockScaled: 192-row tiles are 128 columns wide; got cols={cols!r}")
        if cols not in (64, 128) + WIDE_COLS or isinstance(cols, bool) or (cols in WIDE_COLS and rows == 256) \
                or (cols in WIDE_COLS and not self.staged):
            raise KitError(f"BlockScaled: cols must be 128, 64, or one of {WIDE_COLS} with 128 rows "
                             f"and staged scales (a_block=True, a_columns=True); got cols={cols!r}, rows={rows!r}, "
                             f"a_columns={a_columns!r}")
        self.rows, self.cols = rows, cols
        #: consumer warpgroups: three with 192-row tiles (64 rows each), else two
        self.consumers = 3 if rows == 192 else 2
        tma = rows != 128  # the TMA thread stages the scales
        want = ((1 if tma else self.PRODUCERS), 128 * self.consumers) if self.staged else (1, 2)
        if (pipe.producers, pipe.consumers) != want:
            who = ("the TMA thread" + ("" if tma else " and a scale warp"), "the consumer threads") if self.staged \
                else ("the TMA thread", "two warpgroups")
            raise KitError(f"BlockScaled: with{'' if self.staged else 'out'} staged scales the pipe must count "
                             f"producers={want[0]} ({who[0]}) and consumers={want[1]} ({who[1]}); got {pipe!r}")
        if self.staged and not tma and pipe.stages < self.SCALE_WARPS:
            # a scale warp's next fill is SCALE_WARPS fills after its last: with fewer stages its
            # slot can have two releases pending, and its parity wait matches a phase a round old
            raise KitError(f"BlockScaled: staged scales taken in turn by {self.SCALE_WARPS} scale warps need at least "
                           f"{self.SCALE_WARPS} stages; got {pipe!r}")
        self.promotes = bool(promote)
        #: bytes of one stage (A's rows, then B's) and of one stage's scale slot (A's row
        #: scales, then B's scale): the class constants' values for 128 x 128 tiles
        self.stage_bytes = rows * 128 + cols * 128
        self.slot_bytes = 4 * rows + 128
        #: rows of B's map box (its stage loaded in cols / b_box boxes) and bytes between stages
        self.b_box = cols if b_box is None else b_box
        self.stride = self.stage_bytes if stride is None else stride
        if not is_int(self.b_box) or self.b_box < 8 or cols % self.b_box or cols // self.b_box > 2 or self.b_box % 8 \
                or (self.b_box != cols and rows != 256):
            raise KitError(f"BlockScaled: b_box (rows of B's box) must be cols or half of it, a multiple of 8, with "
                           f"256 rows where it is not cols; got b_box={b_box!r}, cols={cols!r}, rows={rows!r}")
        if not is_int(self.stride) or self.stride < self.stage_bytes or self.stride % 1024 \
                or (self.stride != self.stage_bytes and rows != 256):
            raise KitError(f"BlockScaled: stride (bytes between stages) must be a multiple of 1024 of at least "
                           f"{self.stage_bytes}, with 256 rows where it is not that; got stride={stride!r}")
        self._build()

    def __repr__(self):
        return f"BlockScaled({self.kind}, {self.pipe!r}, a_block={self.a_block}, b_block={self.b_block})"

    def _build(self):
        KIND, pipe = self.kind, self.pipe
        A_BYTES, STAGE, ROWS, W = self.rows * 128, self.stage_bytes, self.rows, self.rows // 128
        STRIDE, BBOX, NBOX = self.stride, self.b_box, self.cols // self.b_box
        A_BLOCK, B_BLOCK, STAGED = self.a_block, self.b_block, self.staged
        SLOT = self.slot_bytes
        A_CONS = 64 * 128  # bytes between the two warpgroups' 64-row halves of A
        N = self.cols
        promote = acc_promote(N)
        spans = acc_promote_cols(N) if N in WIDE_COLS else None
        SPANS = spans is not None  # a wide tile: its columns span up to three blocks of B's scales
        ONE = np.float32(1.0)

        @inlined
        def load(slot, full, tmap_a, tmap_b, kcol, a_row, b_row):
            tma_load_2d(slot, tmap_a, full, kcol, a_row)
            if W == 2:  # A's second 128 rows (the maps' boxes are 128 rows)
                tma_load_2d(slot + 128 * 128, tmap_a, full, kcol, a_row + 128)
            tma_load_2d(slot + A_BYTES, tmap_b, full, kcol, b_row)
            if NBOX == 2:  # B's second box
                tma_load_2d(slot + A_BYTES + BBOX * 128, tmap_b, full, kcol, b_row + BBOX)

        @cuda.jit(device=True, inline=True)
        def scale_rows(sa, row0, m, lane):
            """What thread ``lane`` of a scale warp copies of ``sa`` for a tile from ``row0``:
            its four rows of each column (one 16-byte vector; rows past ``m`` zero-filled)."""
            r = row0 + 4 * lane
            return sa, r * 4, np.uint32(max(0, min(16, 4 * (m - r))))

        @cuda.jit(device=True, inline=True)
        def fill(ring, base, sbase, s, ph, tmap_a, tmap_b, sa, b, m, kb, a_row, b_row):
            """The TMA thread's fill of slot ``s`` with K block ``kb`` of a 256-row tile (A's rows
            from ``a_row``, B's from ``b_row``): the wait for the slot, B's scale ``b`` (the
            caller loads it a fill ahead, its latency out of the fill) stored beside it, then the
            "full" barrier armed (its release orders the store before the consumers' reads), the
            TMA loads and one bulk copy of the tile's A scales (4 bytes per row inside A: ``m`` a
            multiple of 4)."""
            sslot = sbase + s * SLOT
            nbytes = min(4 * ROWS, 4 * (m - a_row))
            if B_BLOCK:
                pipe.producer_wait(ring, s, ph)
                st_shared_f32(sslot + 4 * ROWS, b)
            full = pipe.producer_acquire(ring, s, ph, STAGE + nbytes)
            load(base + s * STRIDE, full, tmap_a, tmap_b, kb * 128, a_row, b_row)
            bulk_copy_g2s_array(sslot, sa, a_row * 4 + kb * sa.strides[1], nbytes, full)

        @cuda.jit(device=True, inline=True)
        def put_scales(ring, sbase, s, ph, lane, rows, sbr, kb):
            pipe.producer_wait(ring, s, ph)
            slot = sbase + s * SLOT
            sa, off, nvalid = rows
            cp_async_zfill(slot + 16 * lane, sa, off + kb * sa.strides[1], nvalid)
            if B_BLOCK:  # every thread copies B's scale, to a word of its own (no divergent branch)
                cp_async(slot + 4 * ROWS + 4 * lane, sbr, kb * sbr.strides[0], 4)
            pipe.producer_arrive_copies(ring, s)

        @inlined
        def descs(base, cw):
            """The descriptors of stage 0's A (warpgroup ``cw``'s 64 rows) and B, built once a
            tile: a stage's are these moved by its offset (one add each, where descriptors built
            from each stage's address took four instructions)."""
            return make_desc(base + cw * A_CONS, 16, 1024, _SW128), make_desc(base + A_BYTES, 16, 1024, _SW128)

        @inlined
        def block(tmp, d, off, first, wave=0):
            """The four m64nNk32 wgmmas of the stage ``off`` bytes past stage 0 (of its 128-row
            ``wave``) into ``tmp`` (from zero where ``first``); ``d`` from :func:`descs`."""
            da = desc_advance(d[0], off + wave * 128 * 128)
            db = desc_advance(d[1], off)
            wgmma_fence()
            tmp = wgmma_mma_async(tmp, da, db, KIND, first, 1, 1, 0, 0)
            tmp = wgmma_mma_async(tmp, desc_advance(da, 32), desc_advance(db, 32), KIND, 1, 1, 1, 0, 0)
            tmp = wgmma_mma_async(tmp, desc_advance(da, 64), desc_advance(db, 64), KIND, 1, 1, 1, 0, 0)
            tmp = wgmma_mma_async(tmp, desc_advance(da, 96), desc_advance(db, 96), KIND, 1, 1, 1, 0, 0)
            wgmma_commit_group()
            return tmp

        # The main loops stay Numba-inlined (inline=True), as PingPong.tile: as called functions
        # the epilogue after them grew by 32 integer instructions.
        @cuda.jit(device=True, inline=True)
        def issue(ring, d, sbase, s, ph, tmp, cw, o):
            """Block at stage ``s``: wait for its data, its wgmmas into ``tmp`` (from zero), its
            scales on the thread's two rows (``o`` and ``o + 8`` of the tile)."""
            pipe.consumer_wait(ring, s, ph)
            tmp = block(tmp, d, s * STRIDE, 0)
            # the scales after the wgmmas: read before them, the loads (slow beside the tensor
            # cores' shared-memory traffic) held up the block's first wgmma
            a0 = ONE
            a1 = ONE
            b = ONE
            slot = sbase + s * SLOT
            if STAGED:
                a0 = ld_shared_f32(slot + 4 * o)
                a1 = ld_shared_f32(slot + 4 * o + 32)
            if STAGED and B_BLOCK:
                b = ld_shared_f32(slot + 4 * ROWS)
            return tmp, a0, a1, b

        @cuda.jit(device=True, inline=True)
        def retire(ring, acc, tmp, prev, ct, a0, a1, b):
            """The block in ``tmp`` (stage ``prev``) is complete: free its stage, promote it.
            (The scales are multiplied here, a block after their loads: multiplied as loaded,
            the wait for the loads held up the next block's wgmmas.) With staged scales every
            thread has read the slot's scales itself, so every thread releases the stage after
            its reads (``pipe`` counts 256 consumers; compute-sanitizer's racecheck reports a
            warp released by one lane after ``syncwarp`` as a race with the next copy)."""
            if STAGED or ct == 0:
                pipe.consumer_release(ring, prev)
            return promote(acc, tmp, a0 * b, a1 * b)

        @cuda.jit(device=True, inline=True)
        def tile_promoted(ring, base, sbase, s, ph, kblocks, ct, cw):
            # Two temporaries take the blocks in turn (the loop unrolled by two, so each stays in
            # its registers): block j is promoted while block j + 1's wgmmas run.
            o = cw * 64 + ((ct >> 5) << 4) + ((ct >> 2) & 7)  # the thread's first row in the tile
            acc = acc_zeros(KIND, N)
            t0 = acc_undef(KIND, N)
            t1 = acc_undef(KIND, N)
            d = descs(base, cw)
            t0, a0, a1, b0 = issue(ring, d, sbase, s, ph, t0, cw, o)
            p0 = s
            s, ph = pipe.advance(s, ph)
            last = (kblocks - 1) // 2 * 2  # the even block t0 holds after the loop
            for j in range(0, last, 2):  # t0: block j, in flight; blocks j + 1 and j + 2 exist
                t1, c0, c1, b1 = issue(ring, d, sbase, s, ph, t1, cw, o)
                p1 = s
                s, ph = pipe.advance(s, ph)
                wgmma_wait_group(1)
                acc = retire(ring, acc, t0, p0, ct, a0, a1, b0)
                t0, a0, a1, b0 = issue(ring, d, sbase, s, ph, t0, cw, o)
                p0 = s
                s, ph = pipe.advance(s, ph)
                wgmma_wait_group(1)
                acc = retire(ring, acc, t1, p1, ct, c0, c1, b1)
            if last + 1 < kblocks:  # one odd block after t0's
                t1, c0, c1, b1 = issue(ring, d, sbase, s, ph, t1, cw, o)
                p1 = s
                s, ph = pipe.advance(s, ph)
                wgmma_wait_group(1)
                acc = retire(ring, acc, t0, p0, ct, a0, a1, b0)
                wgmma_wait_group(0)
                acc = retire(ring, acc, t1, p1, ct, c0, c1, b1)
            else:
                wgmma_wait_group(0)
                acc = retire(ring, acc, t0, p0, ct, a0, a1, b0)
            return acc, s, ph

        @cuda.jit(device=True, inline=True)
        def wave(ring, acc, tmp, d, sslot, s, ct, cw, o, w, b):
            """Wave ``w`` (128 rows) of the block at stage ``s``: its wgmmas into ``tmp``, its
            A scales (and, in the first wave, B's) read while they run, their completion, the
            stage's release after the last wave, the promotion."""
            tmp = block(tmp, d, s * STRIDE, 0, w)
            a0 = ONE
            a1 = ONE
            a0 = ld_shared_f32(sslot + 4 * (o + 128 * w))
            a1 = ld_shared_f32(sslot + 4 * (o + 128 * w) + 32)
            if B_BLOCK and w == 0:
                b = ld_shared_f32(sslot + 4 * ROWS)
            wgmma_wait_group(0)
            if w == 1:  # every thread read the slot's scales: every one releases it
                pipe.consumer_release(ring, s)
            return promote(acc, tmp, a0 * b, a1 * b), tmp, b

        @cuda.jit(device=True, inline=True)
        def tile_tall(ring, base, sbase, s, ph, kblocks, ct, cw):
            # One temporary for the stage's two 128-row waves in turn: each wave's wgmmas complete
            # before its promotion, the other warpgroup's keeping the tensor cores busy meanwhile
            # (two temporaries and two sums would not fit in the registers).
            o = cw * 64 + ((ct >> 5) << 4) + ((ct >> 2) & 7)  # the thread's first row in a wave
            acc0 = acc_zeros(KIND, N)
            acc1 = acc_zeros(KIND, N)
            tmp = acc_undef(KIND, N)
            d = descs(base, cw)
            for kb in range(kblocks):
                pipe.consumer_wait(ring, s, ph)
                sslot = sbase + s * SLOT
                acc0, tmp, b = wave(ring, acc0, tmp, d, sslot, s, ct, cw, o, 0, ONE)
                acc1, tmp, b = wave(ring, acc1, tmp, d, sslot, s, ct, cw, o, 1, b)
                s, ph = pipe.advance(s, ph)
            return acc0, acc1, s, ph

        @cuda.jit(device=True, inline=True)
        def tile_one(ring, base, sbase, s, ph, kblocks, ct, cw, off):
            # One temporary (with a sum it fills the registers there are): each block's wgmmas
            # complete before its promotion, the other warpgroups' keeping the tensor cores busy
            # meanwhile, as a 256-row tile's waves. Wide tiles: B's scales of the (up to three)
            # 128-column blocks the tile's columns span, from ``off`` columns into the first, sit
            # in the slot's first three B words; else B's one scale in the first.
            o = cw * 64 + ((ct >> 5) << 4) + ((ct >> 2) & 7)  # the thread's first row in the tile
            acc = acc_zeros(KIND, N)
            tmp = acc_undef(KIND, N)
            d = descs(base, cw)
            for kb in range(kblocks):
                pipe.consumer_wait(ring, s, ph)
                sslot = sbase + s * SLOT
                tmp = block(tmp, d, s * STRIDE, 0)
                a0 = ld_shared_f32(sslot + 4 * o)
                a1 = ld_shared_f32(sslot + 4 * o + 32)
                b0 = ONE
                b1 = ONE
                b2 = ONE
                if B_BLOCK:
                    b0 = ld_shared_f32(sslot + 4 * ROWS)
                if B_BLOCK and SPANS:
                    b1 = ld_shared_f32(sslot + 4 * ROWS + 4)
                    b2 = ld_shared_f32(sslot + 4 * ROWS + 8)
                wgmma_wait_group(0)
                pipe.consumer_release(ring, s)  # every thread read the slot's scales: every one releases it
                if B_BLOCK and SPANS:
                    acc = spans(acc, tmp, a0, a1, b0, b1, b2, off)
                elif SPANS:
                    acc = promote(acc, tmp, a0, a1)
                else:
                    acc = promote(acc, tmp, a0 * b0, a1 * b0)
                s, ph = pipe.advance(s, ph)
            return acc, s, ph

        @cuda.jit(device=True, inline=True)
        def tile_trio(ring, base, sbase, s, ph, kblocks, ct, cw):
            # 192-row tiles, three consumers of 64 rows: while one promotes, the other two keep the
            # tensor cores busy (twice a 256-row tile's time for the promotion to hide in: measured
            # on an H200, its FFMAs in that path cost 11% of the speed).
            return tile_one(ring, base, sbase, s, ph, kblocks, ct, cw, 0)

        @cuda.jit(device=True, inline=True)
        def scales(sa0, sa1, sbn, kb):
            """Block ``kb``'s scales read from global memory (A's on the thread's two rows,
            B's), one where a side has none."""
            a0 = ONE
            a1 = ONE
            b = ONE
            if A_BLOCK:
                a0 = sa0[kb]
                a1 = sa1[kb]
            if B_BLOCK:
                b = sbn[kb]
            return a0, a1, b

        @cuda.jit(device=True, inline=True)
        def start(ring, d, s, ph, tmp, cw):
            """Block at stage ``s``: wait for its data, its wgmmas into ``tmp`` (from zero)."""
            pipe.consumer_wait(ring, s, ph)
            return block(tmp, d, s * STRIDE, 0)

        @cuda.jit(device=True, inline=True)
        def tile_direct(ring, base, s, ph, kblocks, ct, cw, sa, sb, ra0, ra1, nb):
            # As tile_promoted, the scales read by the consumers themselves, two blocks ahead in
            # two sets (no register copies): read in their own block, their latency (an L2 round
            # trip) held up the block's last wgmma, which ptxas placed after the multiply that
            # needs them. The products go to retire (times one): two live values, not three.
            acc = acc_zeros(KIND, N)
            t0 = acc_undef(KIND, N)
            t1 = acc_undef(KIND, N)
            # the scale rows this thread reads (views); a side without block scales passes a 1 x 1
            # stand-in, never read: its row 0 (a view past its end is an address on the GPU, an
            # IndexError in the simulator)
            sa0 = sa[ra0 if A_BLOCK else 0]
            sa1 = sa[ra1 if A_BLOCK else 0]
            sbn = sb[nb if B_BLOCK else 0]
            a0, a1, b = scales(sa0, sa1, sbn, 0)
            c0, c1, d = scales(sa0, sa1, sbn, min(1, kblocks - 1))
            ds = descs(base, cw)
            t0 = start(ring, ds, s, ph, t0, cw)
            p0 = s
            s, ph = pipe.advance(s, ph)
            last = (kblocks - 1) // 2 * 2
            for j in range(0, last, 2):
                t1 = start(ring, ds, s, ph, t1, cw)
                p1 = s
                s, ph = pipe.advance(s, ph)
                wgmma_wait_group(1)
                acc = retire(ring, acc, t0, p0, ct, a0 * b, a1 * b, ONE)
                a0, a1, b = scales(sa0, sa1, sbn, j + 2)
                t0 = start(ring, ds, s, ph, t0, cw)
                p0 = s
                s, ph = pipe.advance(s, ph)
                wgmma_wait_group(1)
                acc = retire(ring, acc, t1, p1, ct, c0 * d, c1 * d, ONE)
                c0, c1, d = scales(sa0, sa1, sbn, min(j + 3, kblocks - 1))
            if last + 1 < kblocks:
                t1 = start(ring, ds, s, ph, t1, cw)
                p1 = s
                s, ph = pipe.advance(s, ph)
                wgmma_wait_group(1)
                acc = retire(ring, acc, t0, p0, ct, a0 * b, a1 * b, ONE)
                wgmma_wait_group(0)
                acc = retire(ring, acc, t1, p1, ct, c0 * d, c1 * d, ONE)
            else:
                wgmma_wait_group(0)
                acc = retire(ring, acc, t0, p0, ct, a0 * b, a1 * b, ONE)
            return acc, s, ph

        @cuda.jit(device=True, inline=True)
        def tile_plain(ring, base, sbase, s, ph, kblocks, ct, cw):
            acc = acc_undef(KIND, N)
            prev = 0
            d = descs(base, cw)
            for kb in range(kblocks):
                pipe.consumer_wait(ring, s, ph)
                acc = block(acc, d, s * STRIDE, kb > 0)
                wgmma_wait_group(1)  # the previous stage's wgmmas are done: release it
                if kb > 0 and ct == 0:
                    pipe.consumer_release(ring, prev)
                prev = s
                s, ph = pipe.advance(s, ph)
            wgmma_wait_group(0)
            if ct == 0 and kblocks > 0:
                pipe.consumer_release(ring, prev)
            return acc, s, ph

        @cuda.jit(device=True, inline=True)
        def tile_skip(ring, s, ph, kblocks, ct):
            # Each stage waited for (so the releases keep the ring's phases) and released unread.
            for kb in range(kblocks):
                pipe.consumer_wait(ring, s, ph)
                if STAGED or ct == 0:
                    pipe.consumer_release(ring, s)
                s, ph = pipe.advance(s, ph)
            return s, ph

        self.load, self.scale_rows, self.put_scales, self.fill = load, scale_rows, put_scales, fill
        self.tile_skip = tile_skip
        direct = (A_BLOCK or B_BLOCK) and not STAGED
        self.tile_direct, self.tile_tall, self.tile_wide, self.tile_trio = tile_direct, tile_tall, tile_one, tile_trio
        self.tile = tile_direct if direct else tile_promoted if self.promotes else tile_plain
