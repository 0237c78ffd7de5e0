"""The walk of a grouped GEMM's persistent grid over its groups of rows (mixture-of-experts
layers), on the device: :func:`group_walk`.

A's rows hold the groups one after another; ``offs`` (int32, on the device) gives their
running ends (group ``g`` is rows ``offs[g-1]`` .. ``offs[g]``, from 0 for the first), or, in
the masked layout (A [G, T, K] seen as [G * T, K]), each group's count of valid rows (group
``g`` is rows ``g * T`` .. ``g * T + counts[g]``). Values are clamped (into [0, total] and made
non-decreasing; counts into [0, T]), so bad offsets cannot make a kernel reach outside A.
Work units are the ``bm``-row tiles of every group in order, ``tiles_n`` per tile row; within
a group they are walked ``group_m`` tile rows at a time (:func:`~nbwgmma.kit.tile_order`);
with ``wave``, CTAs take units in :func:`~nbwgmma.kit.wave_order`. The host never reads
``offs``: every thread walks the groups itself::

    group_rows, units, place = group_walk(masked=False, bm=128, group_m=4, wave=False)
    ...
    nunits = units(offs, total, t, tiles_n)
    g, gbase = 0, 0
    for u in range(first, nunits, step):
        g, gbase, start, end, tm, tn = place(u, g, gbase, offs, total, t, tiles_n, nunits, step)
        # the tile's rows: start + tm * bm ...; rows from ``end`` on are the next group's
"""

from __future__ import annotations

import functools

from .device import inlined
from .scheduler import tile_order, wave_order

__all__ = ["group_walk"]


@functools.lru_cache(maxsize=None)
def group_walk(masked: bool, bm: int, group_m: int, wave: bool):
    """``(group_rows, units, place)`` device functions: ``group_rows(offs, g, total, t) -> (start,
    end)``, group ``g``'s rows (``t`` the rows per group of the masked layout, else unused);
    ``units(offs, total, t, tiles_n)``, the work units of all groups;
    ``place(u, g, gbase, offs, total, t, tiles_n, nunits, step) -> (g, gbase, start, end, tm,
    tn)``, unit ``u``'s group, that group's first unit, its rows and the unit's tile in it (``u``
    must never decrease between the calls a thread makes: the walk goes on from the ``g`` and
    ``gbase`` of its last call, starting from 0, 0)."""
    BM, GROUP_M, WAVE = bm, min(group_m, 2 ** 31 - 1), wave  # (past M's tile rows: the same walk, tile_order)
    if masked:
        @inlined
        def group_rows(offs, g, total, t):
            """Rows [start, end) of group ``g``: its ``counts[g]`` first rows, clamped to [0, t]."""
            return g * t, g * t + min(max(offs[g], 0), t)
    else:
        @inlined
        def group_rows(offs, g, total, t):
            """Rows [start, end) of group ``g``, clamped into [0, total] and non-decreasing."""
            start = 0 if g == 0 else min(max(offs[g - 1], 0), total)
            return start, min(max(offs[g], start), total)

    @inlined
    def units(offs, total, t, tiles_n):
        """Work units of every group: its tile rows times ``tiles_n``."""
        nunits = 0
        for g in range(offs.shape[0]):
            start, end = group_rows(offs, g, total, t)
            nunits += (end - start + BM - 1) // BM * tiles_n
        return nunits

    @inlined
    def locate(u, g, gbase, offs, total, t, tiles_n):
        """Group, its first unit and its rows for unit ``u`` (``u`` never decreases between
        calls: the walk goes on from the group of the last call)."""
        start, end = group_rows(offs, g, total, t)
        tiles = (end - start + BM - 1) // BM * tiles_n
        while u >= gbase + tiles:
            gbase += tiles
            g += 1
            start, end = group_rows(offs, g, total, t)
            tiles = (end - start + BM - 1) // BM * tiles_n
        return g, gbase, start, end

    @inlined
    def place(u, g, gbase, offs, total, t, tiles_n, nunits, step):
        """Unit ``u`` -> ``(g, gbase, start, end, tm, tn)``: its group (``locate`` after the
        unit's position in the walk) and its tile within the group."""
        w = wave_order(u, nunits, step) if WAVE else u
        g, gbase, start, end = locate(w, g, gbase, offs, total, t, tiles_n)
        tm, tn = tile_order(w - gbase, (end - start + BM - 1) // BM, tiles_n, GROUP_M)
        return g, gbase, start, end, tm, tn

    return group_rows, units, place
