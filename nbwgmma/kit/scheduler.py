"""A persistent grid's walk over output tiles: grouped rasterization, clusters, K slices.

A persistent kernel launches about one CTA per SM and loops over *work units*. A unit is
one (tile, K slice): tile ``t`` of ``tiles`` in grouped order (``group_m`` tile rows at a
time, so the CTAs running together share rows of A and columns of B in L2), slice ``sp`` of
``nsplit`` of its K blocks. With clusters of ``cluster`` CTAs, a unit is a *cluster tile*:
``cluster`` adjacent tiles, one per CTA (the CTA's rank picks its own): vertically adjacent
along M (``along="M"``, the default: the CTAs share the tile column, B's rows), horizontally
adjacent along N (``along="N"``: they share the tile row, A's rows)::

    sched = TileScheduler(128, 256, 64, group_m=8)      # BM, BN, BK (K per stage)

    @cuda.jit
    def kernel(..., m, n, k):
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        for u in range(sched.first(), nunits, sched.step()):
            t, sp = sched.split_unit(u, nsplit)
            tm, tn = sched.tile(t, tiles_mc, tiles_n, rank)
            kb0, kb1 = sched.k_range(sp, kblocks, nsplit)
            ...

On the host, :meth:`TileScheduler.units` counts the units and :meth:`TileScheduler.grid`
sizes a persistent grid.
"""

from __future__ import annotations

import math

import types

import numpy as np
from numba import cuda

from ..errors import KitError, is_int
from ..intrinsics import cluster_ctarank
from .device import inlined
from .pipeline import MAX_CLUSTER

__all__ = ["TileScheduler", "tile_order", "wave_order", "stream_range", "stream_owner", "stream_segment",
           "stream_whole_units", "stream_walk"]


@inlined
def tile_order(t, tiles_m, tiles_n, group_m):
    """Tile ``t`` -> (tile row, tile col), walking ``group_m`` tile rows at a time. Divided as
    unsigned 32-bit integers: Numba widens signed ones to 64 bits, whose division is a call
    to a slow routine (four of them a tile). A group's tiles, ``group_m * tiles_n``, are held
    at 2^32 - 1 (where more, ``t`` lies in the first group, as it does then, and that group holds
    every row: the walk of one group of ``tiles_m`` rows): the product wrapped in 32 bits (a
    division by zero at 2^32). ``group_m`` must be below 2^31 (:class:`TileScheduler` holds it
    there: a group of ``tiles_m`` rows or more is the same walk)."""
    per_group = np.uint32(min(np.int64(group_m) * tiles_n, 0xFFFFFFFF))  # (64 bits in the simulator too)
    g = np.uint32(t) // per_group
    first = np.int32(g) * group_m
    rows = np.uint32(min(tiles_m - first, group_m))
    r = np.uint32(np.uint32(t) - np.uint32(g * per_group))
    return np.int32(first + np.int32(r % rows)), np.int32(r // rows)


@inlined
def stream_range(c, ctas, total):
    """Stream-K: CTA ``c``'s share ``[g0, g1)`` of ``total`` iterations (the tiles' k-blocks in
    tile order, tile ``g // kblocks``, k-block ``g % kblocks``) cut evenly over ``ctas`` CTAs
    (``ctas <= total``: every share holds at least one)."""
    return c * total // ctas, (c + 1) * total // ctas


@inlined
def stream_segment(g, g1, kblocks):
    """Stream-K: the next piece of a share whose iterations ``[g, g1)`` remain: ``(t, kb0,
    kb1)``, tile ``t``'s k-blocks ``kb0 .. kb1 - 1`` (the walk goes on at ``g + kb1 - kb0``)."""
    t = g // kblocks
    kb0 = g - t * kblocks
    return t, kb0, min(kblocks, kb0 + g1 - g)


@inlined
def stream_owner(g, ctas, total):
    """Stream-K: the CTA whose share (:func:`stream_range`) holds iteration ``g``."""
    return ((g + 1) * ctas - 1) // total


@inlined
def stream_whole_units(units, ctas):
    """Stream-K after whole tiles: how many of ``units`` tiles the ``ctas`` CTAs take whole, in
    waves (CTA ``c`` tiles ``c``, ``c + ctas``, ...), before sharing the rest's k-blocks
    (:func:`stream_range` over ``(units - whole) * kblocks``): every full wave but the last.
    The tiles running together stay neighbours in tile order (sharing A's rows and B's columns
    in L2; with every tile shared, each CTA walking its own stretch of tiles, they were spread
    over the whole product), and the shared rest, one to two waves, gives each CTA at least
    one tile's k-blocks (few CTAs per tile to sum)."""
    waves = units // ctas
    return (waves - 1) * ctas if waves > 1 else 0


def stream_walk(sched, whole, shared=None):
    """The device function ``walk(state, nunits, kblocks, tiles_mc, tiles_n, args) -> state`` of
    one CTA over its tiles (``sched`` without clusters or K slices), for each role of a kernel
    (the producer, scale copies, the consumers) to walk alike: ``whole(state, tm, tn, kblocks,
    args) -> state`` on each tile the CTA takes whole, units ``cta``, ``cta + ctas``, ... With
    ``shared`` (stream-K) the CTAs take only the first waves whole (:func:`stream_whole_units`),
    then each its share of the other tiles' k-blocks (:func:`stream_range`; with more CTAs than
    shared k-blocks the CTAs past them take none), piece by piece:
    ``shared(state, t, tm, tn, kb0, kb1, kblocks, first, total, args) -> state`` on tile (``tm``,
    ``tn``), ``t`` counted from the first shared tile, its k-blocks ``kb0 .. kb1 - 1``; ``first``
    whether it is the CTA's first piece, ``total`` the shared k-blocks of all CTAs (what a
    :class:`~nbwgmma.kit.StreamFixup` asks). ``state`` (a tuple: the ring's slot and phase, ...)
    goes from each call to the next; ``args`` reaches every call unchanged."""
    if not isinstance(sched, TileScheduler) or sched.cluster != 1 or sched.split != 1:
        raise KitError(f"stream_walk: sched must be a TileScheduler without clusters or K slices; got {sched!r}")
    STREAM = shared is not None

    @cuda.jit(device=True, inline=True)
    def walk(state, nunits, kblocks, tiles_mc, tiles_n, args):
        cta, ctas = cuda.blockIdx.x, cuda.gridDim.x
        done = stream_whole_units(nunits, ctas) if STREAM else nunits
        for u in range(cta, done, ctas):
            tm, tn = sched.tile(u, tiles_mc, tiles_n, 0)
            state = whole(state, tm, tn, kblocks, args)
        if STREAM:
            total = (nunits - done) * kblocks
            # at most one CTA per shared k-block: CTAs past that take no piece (a grid larger than
            # the shared k-blocks gave some CTAs empty shares inside a tile's owners, who then never
            # counted: its fix-up waited for them and C stayed unwritten). StreamFixup.finish clamps alike.
            sctas = min(ctas, total)
            g0, g1 = stream_range(cta, sctas, total) if cta < sctas else (0, 0)
            g = g0
            while g < g1:
                t, kb0, kb1 = stream_segment(g, g1, kblocks)
                tm, tn = sched.tile(done + t, tiles_mc, tiles_n, 0)
                state = shared(state, t, tm, tn, kb0, kb1, kblocks, g == g0, total, args)
                g += kb1 - kb0
        return state

    return walk


@inlined
def wave_order(u, nunits, ctas):
    """Unit ``u`` -> the tile (position in tile order) it runs, for ``ctas`` CTAs that take units
    two at a time, one per consumer in turn (CTA ``p`` takes units ``2p`` and ``2p + 1``, then
    ``2p + 2 * ctas`` ...). The tiles running together are then the first consumers' tiles of
    all CTAs, then the second consumers': each set a run of neighbours in tile order, so they
    share A's rows and B's columns in L2 (with units taken in plain order, the first consumers
    would run every other tile). A bijection on ``[0, nunits)``, increasing along each
    consumer's units and along each CTA's pairs."""
    wave = 2 * ctas
    base = u // wave * wave
    half = (min(wave, nunits - base) + 1) // 2
    return base + (u % 2) * half + (u - base) // 2


class TileScheduler(types.ModuleType):
    """Tiles of ``bm`` x ``bn`` over K blocks of ``bk`` elements, walked in groups of
    ``group_m`` tile rows, by clusters of ``cluster`` CTAs along ``along`` (``"M"`` or ``"N"``),
    each tile's K cut into up to ``split`` slices. Device functions (all inlined):

    * ``shape(m, n, k) -> (tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits)``;
    * ``first()``, ``step()``: this CTA's first unit and the stride between its units;
    * ``rank()``: this CTA's rank in its cluster (0 without clusters), for ``tile``;
    * ``split_unit(u, nsplit) -> (t, sp)``: unit ``u``'s (cluster) tile and K slice;
    * ``tile(t, tiles_mc, tiles_n, rank) -> (tile_m, tile_n)``: the tile of (cluster) tile
      ``t`` for the CTA of cluster rank ``rank`` (0 without clusters);
    * ``k_range(sp, kblocks, nsplit) -> (kb0, kb1)``: the K blocks of slice ``sp``;
    * ``batch_unit(u, nunits) -> (batch, v)``: unit ``u`` of a batch of products, ``nunits``
      units each (``shape``'s), as the product ``batch`` and its unit ``v``: a batched kernel
      walks ``batches * nunits`` units and decodes each so (3-D maps:
      ``Cooperative.load_tile_3d``, :func:`~nbwgmma.kit.tma_store_part_3d`).

    ``tile_m`` may be past M's last tile when ``tiles_m`` is not a multiple of ``cluster``
    (``tile_n`` past N's with ``along="N"``): such a CTA still takes part in the cluster's
    multicasts and stores nothing. With ``along="N"`` ``tiles_mc`` is ``tiles_m`` (a cluster
    spans one tile row) and the units are ``tiles_m * ceil(tiles_n / cluster)``.

    With ``last_row`` (no clusters, no K slices) the last tile row is walked after all the
    others, in column order, the others in groups as before: where M is not a multiple of
    ``bm`` that row's tiles are light (a kernel whose warpgroups past M skip their wgmmas),
    and walked last they fill the last round instead of lengthening the CTAs that draw them
    in the middle of the walk.

    With ``cluster_k`` = 2 the clusters are twice as large and both halves of each take the
    same units (a :class:`~nbwgmma.kit.ClusterSplitK` kernel: the two CTAs of a cluster share a
    tile, half of its k-blocks each); ``cluster`` stays 1 then.
    """

    def __init__(self, bm: int, bn: int, bk: int, *, group_m: int = 8, cluster: int = 1, split: int = 1,
                 cluster_k: int = 1, along: str = "M", last_row: bool = False):
        if along not in ("M", "N"):
            raise KitError(f"TileScheduler: along (the clusters' direction) must be 'M' or 'N'; got {along!r}")
        if not is_int(cluster_k) or cluster_k not in (1, 2) or (cluster_k == 2 and (cluster != 1 or split != 1)):
            raise KitError(f"TileScheduler: cluster_k must be 1, or 2 with cluster=1 and split=1; got "
                             f"cluster_k={cluster_k!r}, cluster={cluster!r}, split={split!r}")
        for name, v in (("bm", bm), ("bn", bn), ("bk", bk), ("group_m", group_m), ("cluster", cluster),
                        ("split", split)):
            if not is_int(v) or v < 1:
                raise KitError(f"TileScheduler: {name} must be a positive integer; got {v!r}")
        if not isinstance(last_row, (bool, np.bool_)) or (last_row and (cluster != 1 or split != 1 or cluster_k != 1)):
            raise KitError(f"TileScheduler: last_row must be a bool, and True only without clusters or K slices "
                           f"(cluster=1, split=1, cluster_k=1); got last_row={last_row!r}, cluster={cluster!r}, "
                           f"split={split!r}, cluster_k={cluster_k!r}")
        if cluster > MAX_CLUSTER:
            raise KitError(f"TileScheduler: cluster must be at most {MAX_CLUSTER} CTAs (larger clusters are not "
                           f"portable); got {cluster!r}")
        bm, bn, bk, group_m, cluster, split = int(bm), int(bn), int(bk), int(group_m), int(cluster), int(split)
        cluster_k = int(cluster_k)
        super().__init__(f"TileScheduler({bm}x{bn}x{bk})")
        self.bm, self.bn, self.bk = bm, bn, bk
        self.group_m, self.cluster, self.split, self.cluster_k = group_m, cluster, split, cluster_k
        self.along, self.last_row = along, bool(last_row)
        self._build()

    def __repr__(self):
        return (f"TileScheduler({self.bm}x{self.bn}x{self.bk}, group_m={self.group_m}, cluster={self.cluster}, "
                f"split={self.split}{', cluster_k=2' if self.cluster_k == 2 else ''}"
                f"{', along=' + repr(self.along) if self.along != 'M' else ''}"
                f"{', last_row=True' if self.last_row else ''})")

    def units(self, m: int, n: int, k: int, batch: int = 1) -> int:
        """Work units of an M x N x K problem (cluster tiles times K slices), times ``batch``
        for a batch of such products."""
        tiles_m, tiles_n = math.ceil(m / self.bm), math.ceil(n / self.bn)
        if self.along == "N":
            tiles_n = math.ceil(tiles_n / self.cluster)
        else:
            tiles_m = math.ceil(tiles_m / self.cluster)
        kblocks = math.ceil(k / self.bk)
        return tiles_m * tiles_n * min(self.split, max(kblocks, 1)) * batch

    def grid(self, m: int, n: int, k: int, ctas: int, *, at_once: int = 1, batch: int = 1) -> int:
        """CTAs of a persistent grid of at most ``ctas`` (whole clusters, no idle cluster),
        for CTAs that take ``at_once`` units at a time (2 for consumers taking tiles in turn),
        over ``batch`` products."""
        size = self.cluster * self.cluster_k
        for name, v, low in (("m", m, 0), ("n", n, 0), ("k", k, 0), ("ctas", ctas, 1), ("at_once", at_once, 1),
                             ("batch", batch, 1)):
            if not is_int(v) or v < low:  # (ctas below a cluster's size: one cluster)
                raise KitError(f"TileScheduler.grid: {name} must be an integer of at least {low}; got {v!r}")
        clusters = max(1, min(ctas // size, -(-self.units(m, n, k, int(batch)) // at_once)))
        return clusters * size

    def _build(self):
        BM, BN, BK, CL, SPLIT = self.bm, self.bn, self.bk, self.cluster, self.split
        CTAS = CL * self.cluster_k  # CTAs that take one unit together
        ALONG_N = self.along == "N" and CL > 1
        CL_M = 1 if ALONG_N else CL  # tile rows of a cluster
        # tile rows per group, counted in cluster rows; past 2^31 - 1 (more than M's tile rows can
        # be) the walk is the same (tile_order), and the constant stays in 32 bits
        GROUP_MC = max(1, min(self.group_m, 2 ** 31 - 1) // CL_M)

        @inlined
        def shape(m, n, k):
            tiles_m = (m + BM - 1) // BM
            tiles_mc = (tiles_m + CL_M - 1) // CL_M
            tiles_n = (n + BN - 1) // BN
            kblocks = (k + BK - 1) // BK
            nsplit = 1 if SPLIT == 1 else min(SPLIT, kblocks)
            tiles_nc = (tiles_n + CL - 1) // CL if ALONG_N else tiles_n
            return tiles_m, tiles_mc, tiles_n, kblocks, nsplit, tiles_mc * tiles_nc * nsplit

        @inlined
        def first():
            return cuda.blockIdx.x // CTAS

        @inlined
        def step():
            return cuda.gridDim.x // CTAS

        @inlined
        def rank():
            return cluster_ctarank() if CL > 1 else 0

        @inlined
        def split_unit(u, nsplit):  # (unsigned 32-bit: see tile_order)
            t = np.int32(np.uint32(u) // np.uint32(nsplit))
            return t, u - t * nsplit

        if ALONG_N:
            @inlined
            def tile(t, tiles_mc, tiles_n, rank):
                pm, pnc = tile_order(t, tiles_mc, (tiles_n + CL - 1) // CL, GROUP_MC)
                return pm, pnc * CL + rank
        elif self.last_row:
            @inlined
            def tile(t, tiles_mc, tiles_n, rank):
                body = (tiles_mc - 1) * tiles_n  # the other rows' tiles, first
                if t >= body:
                    return np.int32(tiles_mc - 1), np.int32(t - body)
                return tile_order(t, tiles_mc - 1, tiles_n, GROUP_MC)
        else:
            @inlined
            def tile(t, tiles_mc, tiles_n, rank):
                pmc, pn = tile_order(t, tiles_mc, tiles_n, GROUP_MC)
                return pmc * CL + rank, pn

        @inlined
        def k_range(sp, kblocks, nsplit):
            n = np.uint32(nsplit)
            return np.int32(np.uint32(sp * kblocks) // n), np.int32(np.uint32((sp + 1) * kblocks) // n)

        @inlined
        def batch_unit(u, nunits):
            """Unit ``u`` of a batch of products of ``nunits`` units each -> (its product, its unit
            there), divided as unsigned 32-bit integers (see :func:`tile_order`)."""
            b = np.int32(np.uint32(u) // np.uint32(nunits))
            return b, np.int32(u - b * nunits)

        self.shape, self.first, self.step, self.rank, self.split_unit = shape, first, step, rank, split_unit
        self.tile, self.k_range, self.batch_unit = tile, k_range, batch_unit
