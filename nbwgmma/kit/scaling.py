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

    bs = BlockScaled("f32.e4m3.e4m3", TmaPipeline(6, consumers=2), a_block=True, b_block=True)
    ...
    bs.load(slot, full, tmap_a, tmap_b, kb * 128, a_row, b_row)          # the producer, per stage
    ...
    acc, s, ph = bs.tile(ring, base, s, ph, kblocks, ct, cw, sa, sb, ra0, ra1, nb)   # each consumer

Two consumer warpgroups share a 128 x 128 tile (warpgroup ``cw`` holds rows ``64 cw`` to
``64 cw + 63``); while one scales its block, the other's wgmmas keep the tensor cores busy.
``sa`` is A's scale, a 2-D f32 array ``[row, k block]`` (any strides), read at rows ``ra0``
and ``ra1`` (the thread's two rows of the fragment, clamped inside A); ``sb`` is B's,
``[n block, k block]``, read at row ``nb``. A side without block scales (``a_block`` or
``b_block`` false) reads nothing; with neither, ``tile`` is the plain loop (the tensor cores
accumulate the whole K: the fp8 fast path) and the scales go in the epilogue.

:func:`acc_promote` is the promotion itself, a device function over a fragment.
"""

from __future__ import annotations

import types

import numpy as np
from numba import cuda

from ..intrinsics import acc_undef, acc_zeros, desc_advance, make_desc, tma_load_2d, wgmma_commit_group, \
    wgmma_fence, wgmma_mma_async, wgmma_wait_group
from ..layout import SWIZZLE_CODE, wgmma_kind
from .device import inlined
from .pipeline import TmaPipeline

__all__ = ["BlockScaled", "acc_promote", "SCALE_BLOCK"]

#: K (and, for a weight, N) elements per scale block.
SCALE_BLOCK = 128

_SW128 = SWIZZLE_CODE["128B"]
_PROMOTES: dict = {}


def acc_promote(n: int):
    """A device function ``(acc, tmp, s0, s1) -> acc + tmp * s`` over the 64 x ``n`` f32
    fragments of one thread, ``s`` being ``s0`` on the thread's first row (``lr``) and ``s1``
    on its second (``lr + 8``): the promotion of a block whose scale depends on the row (pass
    ``s0 == s1`` for one scale per tile). Unrolled with constant indices (no local memory);
    each value costs one fused multiply-add."""
    if not isinstance(n, int) or n % 8 or not 8 <= n <= 256:
        raise ValueError(f"acc_promote: n must be a wgmma N (a multiple of 8 in [8, 256]); got {n!r}")
    fn = _PROMOTES.get(n)
    if fn is None:
        # value i sits on row lr + 8 * ((i // 2) % 2) (the D fragment of m64nNk*)
        body = ", ".join(f"acc[{i}] + tmp[{i}] * s{(i // 2) % 2}" for i in range(n // 2))
        ns: dict = {}
        exec(compile(f"def promote(acc, tmp, s0, s1):\n    return ({body},)\n", f"<nbwgmma.kit.acc_promote({n})>",
                     "exec"), ns)
        fn = _PROMOTES[n] = inlined(ns["promote"])
    return fn


class BlockScaled(types.ModuleType):
    """Two consumer warpgroups of ``kind`` (an fp8 kind, f32 accumulator) sharing 128 x 128
    tiles over ``pipe`` (a :class:`TmaPipeline` with ``consumers=2``), each stage one 128-K
    block: A's 128 rows x 128 bytes (16 KiB), then B's 128 rows x 128 bytes, both K
    contiguous with the 128-byte swizzle. ``a_block``/``b_block``: A (B) has a scale per row
    (per 128 x 128 block) and per K block; ``promote`` (default: where there are block
    scales) promotes every block, with unit scales where there are none. Device functions: ``load(slot, full, tmap_a,
    tmap_b, kcol, a_row, b_row)`` (the producer's TMA loads of one stage) and ``tile(ring,
    base, s, ph, kblocks, ct, cw, sa, sb, ra0, ra1, nb) -> (acc, s, ph)``: warpgroup ``cw``'s
    64 x 128 f32 accumulator of the tile over ``kblocks`` stages."""

    BM = BN = 128
    BK = 128
    A_BYTES = 128 * 128
    STAGE_BYTES = 2 * 128 * 128

    def __init__(self, kind: str, pipe: TmaPipeline, *, a_block: bool, b_block: bool, promote: bool | None = None):
        k = wgmma_kind(kind)
        if k.dtype != "f32" or k.atype not in ("e4m3", "e5m2") or k.btype not in ("e4m3", "e5m2"):
            raise ValueError(f"BlockScaled: kind must be an fp8 kind with an f32 accumulator (f32.e4m3.e4m3, ...); "
                             f"got {kind!r}")
        if not isinstance(pipe, TmaPipeline) or pipe.consumers != 2 or pipe.cluster != 1:
            raise ValueError(f"BlockScaled: pipe must be a TmaPipeline with consumers=2 and no cluster; got {pipe!r}")
        super().__init__(f"BlockScaled({kind})")
        self.kind, self.pipe = kind, pipe
        self.a_block, self.b_block = bool(a_block), bool(b_block)
        if promote is None:
            promote = self.a_block or self.b_block
        if (self.a_block or self.b_block) and not promote:
            raise ValueError("BlockScaled: block scales need promotion (each 128-K block has its own scale); "
                             "got promote=False")
        self.promotes = bool(promote)
        self._build()

    def __repr__(self):
        return f"BlockScaled({self.kind}, {self.pipe!r}, a_block={self.a_block}, b_block={self.b_block})"

    def _build(self):
        KIND, pipe = self.kind, self.pipe
        A_BYTES, STAGE = self.A_BYTES, self.STAGE_BYTES
        A_BLOCK, B_BLOCK = self.a_block, self.b_block
        A_CONS = 64 * 128  # bytes between the two warpgroups' 64-row halves of A
        promote = acc_promote(128)
        ONE = np.float32(1.0)

        @inlined
        def load(slot, full, tmap_a, tmap_b, kcol, a_row, b_row):
            tma_load_2d(slot, tmap_a, full, kcol, a_row)
            tma_load_2d(slot + A_BYTES, tmap_b, full, kcol, b_row)

        @inlined
        def block(tmp, slot, cw, first):
            """The four m64n128k32 wgmmas of one stage into ``tmp`` (from zero where ``first``)."""
            da = make_desc(slot + cw * A_CONS, 16, 1024, _SW128)
            db = make_desc(slot + A_BYTES, 16, 1024, _SW128)
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
        def scales(sa0, sa1, sbn, kb):
            """Block ``kb``'s scales as loaded (A's on the thread's two rows, B's), one where a
            side has none."""
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
        def issue(ring, base, s, ph, tmp, cw):
            """Block at stage ``s``: wait for its data, its wgmmas into ``tmp`` (from zero)."""
            pipe.consumer_wait(ring, s, ph)
            return block(tmp, base + s * STAGE, cw, 0)

        @cuda.jit(device=True, inline=True)
        def retire(ring, acc, tmp, prev, ct, s0, s1):
            """The block in ``tmp`` (stage ``prev``) is complete: free its stage, promote it."""
            if ct == 0:
                pipe.consumer_release(ring, prev)
            return promote(acc, tmp, s0, s1)

        @cuda.jit(device=True, inline=True)
        def tile_promoted(ring, base, s, ph, kblocks, ct, cw, sa, sb, ra0, ra1, nb):
            # Two temporaries take the blocks in turn (the loop unrolled by two, so each stays in
            # its registers): block j is promoted while block j + 1's wgmmas run. Each block's
            # scales are loaded two blocks ahead, in two sets (no register copies): loaded in
            # their own block, their latency (an L2 round trip) held up the block's last wgmma,
            # which ptxas placed after the multiply that needs them.
            acc = acc_zeros(KIND, 128)
            t0 = acc_undef(KIND, 128)
            t1 = acc_undef(KIND, 128)
            sa0, sa1, sbn = sa[ra0], sa[ra1], sb[nb]  # the scale rows this thread reads (views)
            a0, a1, b = scales(sa0, sa1, sbn, 0)
            c0, c1, d = scales(sa0, sa1, sbn, min(1, kblocks - 1))
            t0 = issue(ring, base, s, ph, t0, cw)
            p0 = s
            s, ph = pipe.advance(s, ph)
            last = (kblocks - 1) // 2 * 2  # the even block t0 holds after the loop
            for j in range(0, last, 2):  # t0: block j, in flight; blocks j + 1 and j + 2 exist
                t1 = issue(ring, base, s, ph, t1, cw)
                p1 = s
                s, ph = pipe.advance(s, ph)
                wgmma_wait_group(1)
                acc = retire(ring, acc, t0, p0, ct, a0 * b, a1 * b)
                a0, a1, b = scales(sa0, sa1, sbn, j + 2)
                t0 = issue(ring, base, s, ph, t0, cw)
                p0 = s
                s, ph = pipe.advance(s, ph)
                wgmma_wait_group(1)
                acc = retire(ring, acc, t1, p1, ct, c0 * d, c1 * d)
                c0, c1, d = scales(sa0, sa1, sbn, min(j + 3, kblocks - 1))
            if last + 1 < kblocks:  # one odd block after t0's
                t1 = issue(ring, base, s, ph, t1, cw)
                p1 = s
                s, ph = pipe.advance(s, ph)
                wgmma_wait_group(1)
                acc = retire(ring, acc, t0, p0, ct, a0 * b, a1 * b)
                wgmma_wait_group(0)
                acc = retire(ring, acc, t1, p1, ct, c0 * d, c1 * d)
            else:
                wgmma_wait_group(0)
                acc = retire(ring, acc, t0, p0, ct, a0 * b, a1 * b)
            return acc, s, ph

        @cuda.jit(device=True, inline=True)
        def tile_plain(ring, base, s, ph, kblocks, ct, cw, sa, sb, ra0, ra1, nb):
            acc = acc_undef(KIND, 128)
            prev = 0
            for kb in range(kblocks):
                pipe.consumer_wait(ring, s, ph)
                acc = block(acc, base + s * STAGE, cw, kb > 0)
                wgmma_wait_group(1)  # the previous stage's wgmmas are done: release it
                if kb > 0 and ct == 0:
                    pipe.consumer_release(ring, prev)
                prev = s
                s, ph = pipe.advance(s, ph)
            wgmma_wait_group(0)
            if ct == 0 and kblocks > 0:
                pipe.consumer_release(ring, prev)
            return acc, s, ph

        self.load = load
        self.tile = tile_promoted if self.promotes else tile_plain
