"""Ping-pong consumers: two warpgroups that take 128 x BN tiles in turn.

The consumer side of the ping-pong schedule as one block (the guide, section 7, "Two schedules"):
each consumer warpgroup computes a whole 128 x 128 tile (two m64n128 accumulators over a
stage of 128 A rows and 128 B rows of 128 bytes of K each, 128-byte swizzle) and the two
take tiles in turn, so one's epilogue runs under the other's main loop. The producer fills
the ring with the tiles in the order the consumers take them: tile ``2p`` for warpgroup
0, ``2p + 1`` for warpgroup 1.

    pp = PingPong("f32.bf16.bf16", TmaPipeline(6, consumers=1))
    ...
    pp.load(slot, full, tmap_a, tmap_b, kb * pp.bk, a_row, b_row)   # the producer, per stage
    ...
    s, ph = pp.start(cw, kblocks)            # each consumer warpgroup, once
    for u in range(...):                     # its tiles
        acc0, acc1, s, ph = pp.tile(ring, base, s, ph, kblocks, ct, cw, u != first, other_has_next)
        #   (u != first: all but warpgroup 0's first tile wait; other_has_next: the other has a tile after)
        ...                                  # epilogue of rows 0-63 (acc0) and 64-127 (acc1)

``ragged`` is ``tile`` for tiles whose K lengths differ (a K-grouped product: each tile's K is
its group's), with A and B both MN-major: a tile starts at the ring's ``it``-th fill (the caller
counts the fills of both consumers' tiles), from zeros (``kblocks`` may be 0), and the K-rows of
its last stage past ``rows`` (the tile's whole K length) are cleared in all four boxes before
that stage's wgmmas. In the pair of tiles ``2p`` (warpgroup 0) and ``2p + 1`` (warpgroup 1) of
k-blocks ``kb0`` and ``kb1``, after ``it`` fills: warpgroup 0 starts at ``it``, warpgroup 1 at
``it + kb0``, and the next pair at ``it + kb0 + kb1``; ``examples/gemm_12_wgrad.py`` is a whole
kernel (its producer a loop of its own), ``nbwgmma/kernels/grouped_wgrad.py`` the library's.

``tile`` (and ``ragged``) waits for the turn (unless ``wait_turn`` is false: the first tile of
warpgroup 0 has nobody to wait for; every other tile, warpgroup 1's first included, waits), runs the main loop with one wgmma group in flight, releases each
stage after the ``wgmma_wait_group`` that completes it, passes the turn when ``pass_turn``
(the other warpgroup has a tile left: a turn passed to nobody leaves a named barrier
half-arrived), and skips the other warpgroup's stages (``advance_by``). The turn is what
keeps the ring's parities right: a consumer waits on a "full" barrier only after every
earlier fill was waited for (see the guide, section 7, "Two schedules").
"""

from __future__ import annotations

import types

from numba import cuda

from ..errors import KitError
from ..intrinsics import acc_undef, acc_zeros, desc_advance, make_desc, tma_load_2d, wgmma_commit_group, wgmma_fence, \
    wgmma_mma_async, wgmma_wait_group
from ..layout import SWIZZLE_CODE, wgmma_kind
from .pipeline import TmaPipeline, check_stages
from .short_rows import clear_rows
from .warpgroup import turn_pass, turn_wait, warpgroup_sync

__all__ = ["PingPong"]

_SW128 = SWIZZLE_CODE["128B"]


class PingPong(types.ModuleType):
    """Consumer warpgroups of ``kind`` (a 16-bit or fp8 wgmma kind, f32 accumulators) taking
    128 x 128 tiles in turn over ``pipe`` (a :class:`TmaPipeline` with ``consumers=1``: each
    stage belongs to one warpgroup), two 64-row accumulators of 64 registers per thread. A
    stage holds A's 128 rows x 128 bytes of K (64 K of 16-bit inputs, 128 of fp8; 16 KiB): K
    contiguous (``a_major="K"``: one box of A [M, K]) or M contiguous (``a_major="MN"``, 16-bit
    inputs: two boxes of 64 x 64 of A [K, M], read with wgmma's transpose bit), then B's 128
    columns x 128 bytes of K, likewise: ``b_major="K"`` one box of B [N, K], ``b_major="MN"`` two
    boxes of B [K, N]. ``BM``, ``BN``, ``A_BYTES`` and ``STAGE_BYTES`` give the tile and a
    stage's bytes, ``BK`` (also ``bk``) a stage's K: 64 for 16-bit inputs, 128 for fp8 (the
    class's ``BK`` is the 16-bit one). ``box_a`` and ``box_b`` are the TMA boxes (rows, columns)
    to build the tensor maps with: ``(128, BK)`` K-major, ``(BK, 64)`` MN-major (A [K, M] or B
    [K, N], two boxes a stage).
    Device functions: ``load(slot, full, tmap_a, tmap_b, kcol, a_row, b_row)`` (the
    producer's TMA loads of one stage: ``kcol`` the stage's first K index, ``a_row`` and ``b_row``
    the tile's first row and column of the product, M and N indices whichever way the operands
    are stored), ``start(cw, kblocks) -> (s, ph)``, ``tile(ring, base, s, ph, kblocks, ct, cw,
    wait_turn, pass_turn) -> (acc0, acc1, s, ph)`` (kblocks >= 1) and, with both operands
    MN-major, ``ragged(ring, base, it, kblocks, rows, ct, cw, wait_turn, pass_turn) -> (acc0,
    acc1)``: ``rows`` the tile's K length (its group's K-rows), ``kblocks`` ``ceil(rows / BK)``
    (not checked: a smaller ``rows`` clears nothing it should), ``it`` the ring's fills before
    the tile's first stage (every tile's k-blocks, both warpgroups', in the producer's order);
    no ``start`` before it and no ``(s, ph)`` after it, as ``it`` places each tile (the
    module's text)."""

    BM = 128
    BK = 64
    A_BYTES = 128 * 128
    BN = 128
    STAGE_BYTES = 2 * 128 * 128

    def __init__(self, kind: str, pipe: TmaPipeline, *, a_major: str = "K", b_major: str = "K"):
        k = wgmma_kind(kind)
        if k.dtype != "f32" or k.input_bits not in (8, 16) or k.atype in ("s8", "u8"):
            raise KitError(f"PingPong: kind must be a 16-bit or fp8 kind with f32 accumulators (f32.bf16.bf16, "
                             f"f32.f16.f16, f32.e4m3.e4m3, ...; 8-bit integer kinds: Cooperative); got {kind!r}")
        for name, major in (("a_major", a_major), ("b_major", b_major)):
            if major not in ("K", "MN"):
                raise KitError(f"PingPong: {name} must be 'K' or 'MN'; got {major!r}")
            if major == "MN" and not k.transposable:
                raise KitError(f"PingPong: {kind} has no transpose: {name[0].upper()} must be K-major ({name}='K')")
        if not isinstance(pipe, TmaPipeline) or pipe.consumers != 1 or pipe.cluster != 1:
            raise KitError(f"PingPong: pipe must be a TmaPipeline with consumers=1 and no cluster; got {pipe!r}")
        check_stages("PingPong", pipe)
        self.BK = self.bk = 1024 // k.input_bits  # a stage's 128 bytes of K (64 bf16, 128 fp8)
        self.box_a, self.box_b = ((self.BK, 64) if major == "MN" else (128, self.BK) for major in (a_major, b_major))
        super().__init__(f"PingPong({kind})")
        self.kind, self.pipe, self.a_major, self.b_major = kind, pipe, a_major, b_major
        self._build()

    def __repr__(self):
        return f"PingPong({self.kind}, {self.pipe!r}, a_major={self.a_major!r}, b_major={self.b_major!r})"

    def __getattr__(self, name):
        if name == "ragged":  # (built only where both operands are MN-major)
            raise KitError(f"PingPong.ragged: A and B must both be MN-major (a_major='MN', b_major='MN'); this "
                           f"one has a_major={self.a_major!r}, b_major={self.b_major!r}")
        raise AttributeError(name)

    def _build(self):
        KIND, pipe = self.kind, self.pipe
        A_BYTES, STAGE, BN, BK = self.A_BYTES, self.STAGE_BYTES, self.BN, self.BK
        A_MN, B_MN = self.a_major == "MN", self.b_major == "MN"
        TRANS_A, TRANS_B = int(A_MN), int(B_MN)
        # An operand in the stage: K-major, 8-row atoms 1024 B apart, a K step 32 B along the row;
        # MN-major, two boxes of 64 rows (columns) 8 KiB apart (LBO), 8 K-rows 1024 B apart (SBO),
        # a K step 2048 B.
        A_LBO, A_STEP = (8192, 2048) if A_MN else (16, 32)
        B_LBO, B_STEP = (8192, 2048) if B_MN else (16, 32)
        A1, A2, A3 = A_STEP, 2 * A_STEP, 3 * A_STEP
        B1, B2, B3 = B_STEP, 2 * B_STEP, 3 * B_STEP

        # Numba-inlined (inline=True), not kit.inlined: as called functions, the epilogue that
        # follows a tile grew by 88 integer instructions (the same main loop).
        @cuda.jit(device=True, inline=True)
        def load(slot, full, tmap_a, tmap_b, kcol, a_row, b_row):
            if A_MN:
                for j in range(2):
                    tma_load_2d(slot + j * 8192, tmap_a, full, a_row + j * 64, kcol)
            else:
                tma_load_2d(slot, tmap_a, full, kcol, a_row)
            if B_MN:
                for j in range(BN // 64):
                    tma_load_2d(slot + A_BYTES + j * 8192, tmap_b, full, b_row + j * 64, kcol)
            else:
                tma_load_2d(slot + A_BYTES, tmap_b, full, kcol, b_row)

        @cuda.jit(device=True, inline=True)
        def start(cw, kblocks):
            return pipe.advance_by(0, 0, cw * kblocks)  # the other's first tile comes first

        @cuda.jit(device=True, inline=True)
        def stage(acc0, acc1, slot, scale_d):
            """The stage's eight wgmmas: four K steps of both 64-row halves, the first with
            ``scale_d``."""
            da = make_desc(slot, A_LBO, 1024, _SW128)
            da1 = make_desc(slot + 64 * 128, A_LBO, 1024, _SW128)
            db = make_desc(slot + A_BYTES, B_LBO, 1024, _SW128)
            wgmma_fence()
            acc0 = wgmma_mma_async(acc0, da, db, KIND, scale_d, 1, 1, TRANS_A, TRANS_B)
            acc1 = wgmma_mma_async(acc1, da1, db, KIND, scale_d, 1, 1, TRANS_A, TRANS_B)
            acc0 = wgmma_mma_async(acc0, desc_advance(da, A1), desc_advance(db, B1), KIND, 1, 1, 1, TRANS_A, TRANS_B)
            acc1 = wgmma_mma_async(acc1, desc_advance(da1, A1), desc_advance(db, B1), KIND, 1, 1, 1, TRANS_A, TRANS_B)
            acc0 = wgmma_mma_async(acc0, desc_advance(da, A2), desc_advance(db, B2), KIND, 1, 1, 1, TRANS_A, TRANS_B)
            acc1 = wgmma_mma_async(acc1, desc_advance(da1, A2), desc_advance(db, B2), KIND, 1, 1, 1, TRANS_A, TRANS_B)
            acc0 = wgmma_mma_async(acc0, desc_advance(da, A3), desc_advance(db, B3), KIND, 1, 1, 1, TRANS_A, TRANS_B)
            acc1 = wgmma_mma_async(acc1, desc_advance(da1, A3), desc_advance(db, B3), KIND, 1, 1, 1, TRANS_A, TRANS_B)
            return acc0, acc1

        @cuda.jit(device=True, inline=True)
        def retire(ring, s, ph, prev, kb, ct):
            """After stage ``s``'s wgmmas are issued: commit them, wait for the previous stage's
            and release that one (none before the first); -> (prev, s, ph) for the next stage."""
            wgmma_commit_group()
            wgmma_wait_group(1)  # the previous stage's wgmmas are done: release it
            if kb > 0 and ct == 0:
                pipe.consumer_release(ring, prev)
            s1, ph1 = pipe.advance(s, ph)
            return s, s1, ph1

        @cuda.jit(device=True, inline=True)
        def close(ring, prev, ct, cw, pass_turn, release):
            """The end of a tile's main loop: the turn passed (where ``pass_turn``), the last
            wgmmas waited for and their stage released (where ``release``)."""
            if pass_turn:
                turn_pass(cw)  # our stages are all waited for: the other may start its main loop
            wgmma_wait_group(0)
            if release and ct == 0:
                pipe.consumer_release(ring, prev)

        @cuda.jit(device=True, inline=True)
        def tile(ring, base, s, ph, kblocks, ct, cw, wait_turn, pass_turn):
            acc0 = acc_undef(KIND, BN)
            acc1 = acc_undef(KIND, BN)
            if wait_turn:
                turn_wait(cw)  # the other's main loop has waited on every stage before ours
            prev = 0
            for kb in range(kblocks):
                pipe.consumer_wait(ring, s, ph)
                slot = base + s * STAGE
                acc0, acc1 = stage(acc0, acc1, slot, kb > 0)  # scale-d 0 first: no fill
                prev, s, ph = retire(ring, s, ph, prev, kb, ct)
            close(ring, prev, ct, cw, pass_turn, True)
            s, ph = pipe.advance_by(s, ph, kblocks)  # skip the other warpgroup's tile
            return acc0, acc1, s, ph

        self.load, self.start, self.tile = load, start, tile
        if A_MN and B_MN:
            self.ragged = self._ragged(stage, retire, close)

    def _ragged(self, stage, retire, close):
        """The ``ragged`` device function (both operands MN-major)."""
        pipe, KIND, STAGE, BN, BK = self.pipe, self.kind, self.STAGE_BYTES, self.BN, self.BK
        BOX = 64 * 128  # one 64 x 64 box of 16-bit values: 64 K-rows of 128 bytes

        @cuda.jit(device=True, inline=True)
        def ragged(ring, base, it, kblocks, rows, ct, cw, wait_turn, pass_turn):
            # Zeros, not undefined values with scale-d 0 at the first wgmma: a tile of no k-blocks
            # has no wgmma and returns these (selecting zeros after the loop copied both fragments
            # and spilled).
            acc0 = acc_zeros(KIND, BN)
            acc1 = acc_zeros(KIND, BN)
            if wait_turn:
                turn_wait(cw)  # the other's main loop has waited on every stage before ours
            s, ph = pipe.stage_of(it)
            prev = 0
            for kb in range(kblocks):
                pipe.consumer_wait(ring, s, ph)
                slot = base + s * STAGE
                valid = rows - kb * BK
                if valid < BK:  # the last block: K-rows past ``rows`` (another group's) must not count
                    # In the MN-major layout a K-row is one 128-byte row of a box (the 128-byte
                    # swizzle moves 16-byte chunks only within a row): rows valid .. 63 of the
                    # stage's four boxes (A's two, B's two), then the fence the wgmmas read after.
                    clear_rows(slot, BOX, 4, 128, valid, BK, ct, 128)
                    warpgroup_sync(cw)
                acc0, acc1 = stage(acc0, acc1, slot, 1)
                prev, s, ph = retire(ring, s, ph, prev, kb, ct)
            close(ring, prev, ct, cw, pass_turn, kblocks > 0)
            return acc0, acc1

        return ragged
