"""The tile model: which CTA tile (BM x BN) of the library GEMM suits a problem, from the
throughput each tile reached on an H100 and how evenly its tiles fill the SMs' waves. The
front end picks its default tile with it (:func:`pick_tile`); autotuning starts from its
ranking (:func:`rank_tiles`)."""

from __future__ import annotations

import math

from .. import sim

__all__ = ["TILES", "pick_tile", "rank_tiles"]


#: CTA tiles (BM, BN) and the share of the large tile's throughput per SM each reaches,
#: from bf16 runs on an H100 (BENCHMARKS.md, log steps 9 and 11): smaller tiles load
#: more bytes per FLOP and keep fewer wgmmas in flight.
TILES = {(128, 256): 1.0, (128, 192): 0.95, (128, 128): 0.75, (64, 128): 0.39, (64, 64): 0.30}


def pick_tile(m, n, cluster=1):
    """The tile with the most useful work per SM-slot: its throughput share times the
    filled fraction of the waves it needs (tiles / (waves x SMs)), so a tile that leaves a
    last wave nearly empty, or most SMs idle, loses to a smaller one. A cluster splits B
    into 64-column shares: only tiles with ``bn / 64`` a multiple of it.

    Split-K is not picked automatically: at 128 x 8192 x 8192 (bandwidth-bound) 4 slices
    of 128 x 256 measured 0.75x cuBLAS against 0.87x for 64 x 128 tiles (BENCHMARKS.md).

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
