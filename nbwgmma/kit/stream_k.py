"""Stream-K's fix-up: partial tiles parked in global scratch and summed in K order.

With stream-K the tiles' k-blocks, in tile order, are cut evenly over the CTAs
(:func:`~nbwgmma.kit.stream_range`): every SM gets the same work whatever the tile count, at
the price of tiles whose k-blocks two or more CTAs share. :class:`StreamFixup` finishes such a
tile without any CTA waiting for another: each CTA but the tile's first *parks* its partial
sum (its share's first tile in its slot 0, its last tile in slot 1 of the scratch ``ws``) and
counts it on the tile's counter; the CTA holding the tile's first k-blocks, which reaches them
at the end of its share, adds the parked parts to its own and stores the tile if all have
counted, else parks its part too and the last to count sums them all. The sum is in K order
either way (``0 + p0 + p1 + ...`` equals ``p0 + p1 + ...``), so the result does not depend on
which CTA came last::

    fix = StreamFixup("f32.e4m3.e4m3", 128)           # the fragments' kind, their N
    ...
    g0, g1 = stream_range(cta, ctas, total)           # total = tiles * kblocks
    g = g0
    while g < g1:
        t, kb0, kb1 = stream_segment(g, g1, kblocks)
        acc, s, ph = ...                              # the tile's k-blocks kb0 .. kb1 - 1
        accs, last = fix.finish((acc,), ws, counters, flag, tid, ctid, cw, t, cta, ctas, total, kblocks,
                                g == g0, kb0 == 0 and kb1 == kblocks, m - row0)
        if last:
            ...                                       # store accs[0]: the whole tile's sum
        g += kb1 - kb0

Scratch (host side): ``ws`` a 1-D f32 array of ``2 * ctas * fix.tile_floats`` values,
``counters`` a 1-D int32 array of one zero per tile (each is back at zero when the kernel
ends, ready for the next launch on the same stream); ``flag`` a shared int32 array of one.
A CTA's consumer warpgroups park their fragments as rows of 128 threads (coalesced; read back
by the same threads); a warp whose 16 rows all lie past M parks and sums nothing.

:meth:`StreamFixup.count` is the counter alone, for split-K (every slice parks, the last to
count sums them).
"""

from __future__ import annotations

import types

from numba import cuda

from ..errors import KitError, is_int
from ..intrinsics import acc_add_strided, acc_store_strided, acc_zeros, named_barrier_sync
from ..layout import wgmma_kind
from .device import inlined
from .scheduler import stream_owner, stream_range
from .typecheck import wgmma_n

__all__ = ["StreamFixup"]


class StreamFixup(types.ModuleType):
    """The fix-up of consumer warpgroups holding ``fragments`` 64 x ``bn`` fragments of
    ``kind`` each (the tile: ``consumers`` warpgroups times ``fragments`` blocks of 64 rows,
    fragment ``f`` of every warpgroup ``rows_apart`` rows below fragment ``f - 1``'s: a positive
    multiple of 64). The consumers are the ``128 * consumers`` threads from thread
    ``first_thread``; the counters are read and written by the first and broadcast through
    ``flag`` between two syncs of named barrier ``barrier``. Device functions:

    * ``count(counters, t, others, flag, tid, add) -> bool``: after this CTA's part of tile
      ``t`` is parked (``add`` 1: made visible GPU-wide first, then counted), True in every
      consumer thread of the CTA whose count completes the tile (``others`` parts counted
      before; the counter is reset to zero then). With ``add`` 0 it only reads the count.
    * ``finish(accs, ws, counters, flag, tid, ctid, cw, t, cta, ctas, total, kblocks,
      first_seg, whole, rows_left) -> (accs, last)``: the stream-K fix-up of warpgroup ``cw``'s
      fragments ``accs`` (a tuple) of tile ``t`` after its segment (``first_seg``: the segment
      is the first of the CTA's share; ``whole``: it holds all of the tile's k-blocks);
      ``last`` says this CTA stores the tile, ``accs`` its whole sum then. ``rows_left`` is M
      minus the fragment's first row.
    """

    def __init__(self, kind: str, bn: int, *, consumers: int = 2, fragments: int = 1, rows_apart: int = 128,
                 first_thread: int = 128, barrier: int = 5):
        k = wgmma_kind(kind)
        if k.dtype != "f32":
            raise KitError(f"StreamFixup: kind must have an f32 accumulator; got {kind!r}")
        bn = wgmma_n("StreamFixup", "bn", bn)
        for name, v, ok in (("consumers", consumers, (1, 2, 3, 4)), ("fragments", fragments, (1, 2)),
                            ("barrier", barrier, range(1, 16))):
            if isinstance(v, bool) or v not in ok:
                raise KitError(f"StreamFixup: {name} must be one of {tuple(ok)}; got {v!r}")
        if not is_int(first_thread) or first_thread < 0 or first_thread % 128:
            raise KitError(f"StreamFixup: first_thread must be a warpgroup's first thread (a multiple of 128); "
                             f"got {first_thread!r}")
        if not is_int(rows_apart) or rows_apart < 64 or rows_apart % 64:
            raise KitError(f"StreamFixup: rows_apart (rows from a warpgroup's first fragment to its second) must be "
                           f"a positive multiple of 64 (a fragment's rows); got {rows_apart!r}")
        first_thread, rows_apart = int(first_thread), int(rows_apart)
        super().__init__(f"StreamFixup({kind}, {bn})")
        self.kind, self.bn, self.consumers, self.fragments = kind, bn, consumers, fragments
        self.rows_apart, self.first_thread, self.barrier = rows_apart, first_thread, barrier
        #: f32 values of one parked tile (a scratch slot)
        self.tile_floats = 64 * bn * consumers * fragments
        self._build()

    def __repr__(self):
        return (f"StreamFixup({self.kind}, {self.bn}, consumers={self.consumers}, fragments={self.fragments})")

    def _build(self):
        KIND, BN, FR, APART = self.kind, self.bn, self.fragments, self.rows_apart
        LEADER, THREADS, BAR = self.first_thread, 128 * self.consumers, self.barrier
        TILE = self.tile_floats
        CONS = 64 * BN  # one warpgroup's fragment
        FRAG = CONS * self.consumers  # between a warpgroup's fragments

        @inlined
        def count(counters, t, others, flag, tid, add=1):
            if add:
                cuda.threadfence()  # the part is visible GPU-wide before the count says so
            named_barrier_sync(BAR, THREADS)  # (also: every consumer read the previous answer)
            if tid == LEADER:
                is_last = cuda.atomic.add(counters, t, add) == others  # (add 0: an atomic read, from L2)
                if is_last:
                    counters[t] = 0  # every part has counted: ready for the next launch
                flag[0] = 1 if is_last else 0
            named_barrier_sync(BAR, THREADS)
            last = flag[0] != 0
            if last:
                cuda.threadfence()
            return last

        if FR == 1:
            @inlined
            def park(accs, ws, at, ctid, rows_left):
                if 16 * (ctid // 32) < rows_left:
                    acc_store_strided(accs[0], ws, at, 128)

            @inlined
            def gather(accs, ws, at, ctid, rows_left):
                a0 = accs[0]
                if 16 * (ctid // 32) < rows_left:
                    a0 = acc_add_strided(a0, ws, at, 128)
                return (a0,)

            @inlined
            def zeros():
                return (acc_zeros(KIND, BN),)
        else:
            @inlined
            def park(accs, ws, at, ctid, rows_left):
                if 16 * (ctid // 32) < rows_left:
                    acc_store_strided(accs[0], ws, at, 128)
                if 16 * (ctid // 32) < rows_left - APART:
                    acc_store_strided(accs[1], ws, at + FRAG, 128)

            @inlined
            def gather(accs, ws, at, ctid, rows_left):
                a0 = accs[0]
                a1 = accs[1]
                if 16 * (ctid // 32) < rows_left:
                    a0 = acc_add_strided(a0, ws, at, 128)
                if 16 * (ctid // 32) < rows_left - APART:
                    a1 = acc_add_strided(a1, ws, at + FRAG, 128)
                return (a0, a1)

            @inlined
            def zeros():
                return (acc_zeros(KIND, BN), acc_zeros(KIND, BN))

        @inlined
        def finish(accs, ws, counters, flag, tid, ctid, cw, t, cta, ctas, total, kblocks, first_seg, whole,
                   rows_left):
            last = whole
            if not whole:
                ctas = min(ctas, total)  # as stream_walk shares: at most one CTA per shared k-block
                c0 = stream_owner(t * kblocks, ctas, total)
                c1 = stream_owner((t + 1) * kblocks - 1, ctas, total)
                mine = cw * CONS + ctid
                done = False
                if cta == c0:
                    done = count(counters, t, c1 - c0, flag, tid, 0)
                if done:
                    last = True
                    for o in range(c0 + 1, c1 + 1):  # the others' first tile is t: slot 0
                        accs = gather(accs, ws, 2 * o * TILE + mine, ctid, rows_left)
                else:
                    park(accs, ws, (2 * cta + (0 if first_seg else 1)) * TILE + mine, ctid, rows_left)
                    last = count(counters, t, c1 - c0, flag, tid)
                    if last:
                        accs = zeros()
                        for o in range(c0, c1 + 1):  # 0 + part of c0 + part of c0 + 1 + ...
                            # the part's slot: 0 where tile t is the first of CTA o's share
                            first_of_o = stream_range(o, ctas, total)[0] // kblocks == t
                            accs = gather(accs, ws, (2 * o + (0 if first_of_o else 1)) * TILE + mine, ctid,
                                          rows_left)
            return accs, last

        self.count, self.finish = count, finish
