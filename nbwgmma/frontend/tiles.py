"""The tile model: which CTA tile (BM x BN) of the library GEMM suits a problem, from the
throughput each tile reached on an H100 and how evenly its tiles fill the SMs' waves. The
front end picks its default tile with it (:func:`pick_tile`); autotuning starts from its
ranking (:func:`rank_tiles`)."""

from __future__ import annotations

import math

from .. import sim

__all__ = ["TILES", "pick_tile", "rank_tiles", "pick_small_m"]


#: CTA tiles (BM, BN) and the share of the large tile's throughput per SM each reaches,
#: from bf16 runs on an H100 (BENCHMARKS.md, log steps 9 and 11): smaller tiles load
#: more bytes per FLOP and keep fewer wgmmas in flight.
TILES = {(128, 256): 1.0, (128, 192): 0.95, (128, 128): 0.75, (64, 128): 0.39, (64, 64): 0.30}


def pick_tile(m, n, cluster=1):
    """The tile with the most useful work per SM-slot: its throughput share times the
    filled fraction of the waves it needs (tiles / (waves x SMs)), so a tile that leaves a
    last wave nearly empty, or most SMs idle, loses to a smaller one. A cluster splits B
    into 64-column shares: only tiles with ``bn / 64`` a multiple of it.

    Problems of at most 256 rows that leave SMs idle take :func:`pick_small_m` first.

    In the simulator, where every thread is a Python thread and nothing is timed, the
    smallest usable tile (fewest threads and the least wgmma work per tile)."""
    ranked = rank_tiles(m, n, cluster)
    return min(ranked, key=lambda t: t[0] * t[1]) if sim.enabled() else ranked[0]


def rank_tiles(m, n, cluster=1):
    """Every tile of ``TILES`` a cluster of ``cluster`` can use, best score first (see
    :func:`pick_tile`; ties keep the larger tile)."""
    from ..launch import device_limits

    sms = device_limits()["multiprocessors"]

    def score(tile):
        (bm, bn), eff = tile
        tiles = math.ceil(m / bm) * math.ceil(n / bn)
        return eff * tiles / (math.ceil(tiles / sms) * sms)

    usable = [(t, e) for t, e in TILES.items() if (t[1] // 64) % cluster == 0]
    return [t for t, _ in sorted(usable, key=score, reverse=True)]


#: Rows up to which :func:`pick_small_m` decides.
SMALL_M = 256


def pick_small_m(m, n, k, input_bits, cluster=1):
    """``(bm, bn, split)`` for a 16-bit problem of at most :data:`SMALL_M` rows whose 128-column
    tiles fit in one wave of the SMs, else None (the tile model decides).

    Such problems are bound by reading B, and what counts is how many SMs stream it: tiles of
    64 rows (128 for more than 128 rows: a 64-row tile would read B twice per SM pair), 128
    columns, and the most K slices (split-K: 1, 2 or 4, at least 4 k-blocks each) that still fit
    the SMs in one wave. Measured on an H100 (kernel time, BENCHMARKS.md): 32 x 8192 x 8192 at
    0.90x cuBLAS (0.68x with the tile model's 128 x 128), 256 x 4096 x 14336 at 0.91x (0.79x),
    16 x 4096 x 4096 at 0.55x (0.34x). Split-K is built for 16-bit inputs only; the tile
    model's efficiencies hold for fp8 (64 x 128 was best at 128 x 8192 x 8192)."""
    if sim.enabled() or input_bits != 16 or cluster != 1 or m > SMALL_M:
        return None
    from ..launch import device_limits

    sms = device_limits()["multiprocessors"]
    bm, bn = (64 if m <= 128 else 128), 128
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    if tiles > sms:
        return None
    kblocks = math.ceil(k / 64)
    split = max(s for s in (1, 2, 4) if s == 1 or (tiles * s <= sms and kblocks >= 4 * s))
    return bm, bn, split
