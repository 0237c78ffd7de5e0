"""Products of few tiles (more than :data:`~.tiles.SMALL_M` rows; fewer take :func:`~.tiles.pick_small_m`):
K cut so that more SMs share it, where the tile model takes 64-row tiles at a long K.

* :func:`pick_k_halves`: in place of 64 x 128 tiles, 128 x 128 tiles whose K the two CTAs of a cluster
  share (``cluster_k``: :class:`~nbwgmma.kit.ClusterSplitK`, the halves summed through distributed shared
  memory): as many CTAs, each with the same multiply-adds, two consumer warpgroups in place of one.
* :func:`pick_k_split`: in place of 64 x 64 tiles that fill at most half the SMs, the same tiles with K in
  two split-K slices: twice the CTAs, each streaming half of K (such a CTA is bound by the bytes it can
  pull, not by its tensor cores).
* :func:`pick_k_slices`: in place of one wave of 128 x 128 tiles (K in halves or whole) or 64 x 128 tiles
  that leaves much of the SMs' time idle, 128-row tiles of a width in steps of 8 with K in 2-4 split-K
  slices that fill the wave with more real work.
* :func:`pick_k_slices_64`: in place of one wave of 64 x 64 tiles (K whole or in two slices) that leaves
  much of the SMs' time idle, 64-row tiles of a width in steps of 8 with K in 2-4 split-K slices that
  fill the wave with more real work."""

from __future__ import annotations

import math

__all__ = ["K_HALVES_MIN_K", "K_HALVES_FP8_MAX_N", "K_HALVES_TILE", "pick_k_halves", "K_SPLIT_MIN_K", "K_SPLIT_TILE", "pick_k_split",
           "K_SLICES_MIN_K", "K_SLICES_MIN_M", "K_SLICES_GAIN", "K_SLICES_TILES", "slices_fill", "pick_k_slices",
           "K_SLICES_64_TILES", "K_SLICES_64_NEAR", "pick_k_slices_64", "best_slices", "best_slices_64"]

#: The config :func:`pick_k_halves` takes.
K_HALVES_TILE = {"bm": 128, "bn": 128, "cluster_k": 2}
#: Shortest K for which it takes them. Probed on an H100 (BENCHMARKS.md, 2026-12-06, "K split in clusters
#: of two"), bf16 in 64 x 128 tiles against 128 x 128 with ``cluster_k`` 2, ratio to cuBLAS in one process:
#: at K = 8192 2035 x 512 0.88-0.90 -> 1.04-1.05, 2673 x 320 0.76 -> 1.00-1.02, 1844 x 288 0.73 -> 0.98-0.99,
#: 1893 x 480 0.75 -> 0.89, 1262 x 512 0.78 -> 0.88; at K = 4096 within 1-4% (2764 x 384, 1267 x 608); at
#: K = 2048 slower; fp8 slower there (0.75-0.88x). Held out (same day, an H100, 29 fresh bf16/f16
#: problems where the rule takes them, every layout, 64 x 128 forced beside them): 0.96-1.54x, geometric
#: mean 1.19x (slower only at 560 x 1008, whose 128-row tiles pad M most); forced at K = 4096 0.77-1.16x,
#: for four e4m3 problems 0.83-1.22x (too few for fp8 to take them then; see :data:`K_HALVES_FP8_MAX_N`).
K_HALVES_MIN_K = 8192
#: Widest N for which fp8 inputs take them. Probed on an H100 (BENCHMARKS.md, 2026-12-06): 16 e4m3 problems
#: (``benchmarks/k_halves_e4m3_probe.txt`` and the four above), ratio to 64 x 128: N <= 288 all faster,
#: 1.03-1.29x; 869 x 1024 1.12x but 896 x 1040 0.84x, 614 x 960 0.83x, 1733 x 448 0.97x. Held out (same
#: day, second session; ``benchmarks/k_halves_e4m3_heldout.txt``, 16 fresh e4m3 problems of N <= 320 at K
#: = 8192-16384, 64 x 128 forced beside them): 0.99-1.46x, geometric mean 1.135x, none slower by 2%.
#: e5m2 takes them by the same rule (the same bytes and instructions; not measured apart).
K_HALVES_FP8_MAX_N = 320


def pick_k_halves(m, n, k, tile, sms, input_bits=16):
    """:data:`K_HALVES_TILE` in place of ``tile`` (the tile model's (bm, bn)) where that is 64 x 128 for a
    16-bit product, or an fp8 one of N <= :data:`K_HALVES_FP8_MAX_N`, of K >= :data:`K_HALVES_MIN_K` whose
    K halves of 128 x 128 tiles fit one wave of ``sms`` (as many CTAs as the 64 x 128 tiles, or one tile
    row's more where M has an odd count of 64-row tiles); else None. Per CTA the multiply-adds are the
    same (64 x 128 x K or 128 x 128 x K / 2); two consumer warpgroups keep the tensor cores busier than
    one, and the halves' sum costs one exchange per tile."""
    if tuple(tile) != (64, 128) or k < K_HALVES_MIN_K:
        return None
    if input_bits != 16 and not (input_bits == 8 and n <= K_HALVES_FP8_MAX_N):
        return None
    if 2 * math.ceil(m / 128) * math.ceil(n / 128) > sms:
        return None
    return dict(K_HALVES_TILE)


#: The config :func:`pick_k_split` takes (8 stages, as :func:`~.tiles.pick_small_m`'s).
K_SPLIT_TILE = {"bm": 64, "bn": 64, "stages": 8, "split": 2}
#: Shortest K for which it takes it. Probed on an H100 (BENCHMARKS.md, 2026-12-06), bf16 problems whose
#: default took 64 x 64 tiles filling at most half the SMs, ratio to cuBLAS, the default / 64 x 64 in two
#: slices: K = 8192: 340 x 208 0.61 / 0.90, 1358 x 16 0.45 / 0.62, 279 x 384 0.61 / 0.90, 507 x 160 0.53 /
#: 0.77; K = 16384: 1245 x 32 0.30 / 0.63, 311 x 368 0.40 / 0.70, 1255 x 176 0.40 / 0.75; K = 4096: 518 x 272
#: 1.04-1.06 / 1.06 (level). Held out (same day, an H100, 22 fresh bf16/f16 problems where the rule takes
#: it, every layout, the 64 x 64 tile forced beside it): 1.03-2.07x, geometric mean 1.45x (bf16 1935 x 48 x
#: 16384 0.49 -> 1.01x cuBLAS); forced at K = 4096 0.97-1.17x (5), at K = 2048 0.86-1.00x (3).
K_SPLIT_MIN_K = 8192


def pick_k_split(m, n, k, tile, sms, input_bits=16):
    """:data:`K_SPLIT_TILE` in place of ``tile`` (the tile model's (bm, bn)) where that is 64 x 64 for a
    16-bit product of K >= :data:`K_SPLIT_MIN_K` whose two slices of every tile fit one wave of ``sms``;
    else None."""
    if input_bits != 16 or tuple(tile) != (64, 64) or k < K_SPLIT_MIN_K:
        return None
    if 2 * math.ceil(m / 64) * math.ceil(n / 64) > sms:
        return None
    return dict(K_SPLIT_TILE)


#: Shortest K, fewest rows and least gain in real work per SM slot (:func:`slices_fill`) for which
#: :func:`pick_k_slices` takes K slices. Probed on an H100 (BENCHMARKS.md, 2026-12-07, "K slices"), bf16,
#: ratio to cuBLAS, the default then the rule's choice: 1169 x 408 x 8192 0.68 -> 0.87, 828 x 656 x 8192
#: 0.95 -> 1.09, 990 x 680 x 16384 0.98 -> 1.22, 1765 x 272 x 8192 0.71 -> 0.80, 549 x 976 x 8192 0.80 ->
#: 0.88, 872 x 872 x 8192 level, 1492 x 472 x 8192 0.67 -> 0.61. Held out (same call,
#: ``benchmarks/k_slices_heldout.txt``, 24 fresh bf16/f16 products drawn where the rule, then for K >= 4096,
#: takes slices; one round): at K >= 8192 (18, the default's 128 x 128 tiles, K in halves or whole) 0.96-1.19x,
#: geometric mean 1.071x, two slower (836 x 840 and 878 x 848 in 128 x 96 with two slices, 0.97x and 0.96x);
#: at K = 4096 (6, the default's 64 x 128 tiles) all slower, 0.77-0.87x: so K >= 8192.
K_SLICES_MIN_K = 8192
K_SLICES_MIN_M = 513
K_SLICES_GAIN = 1.25
#: The configs :func:`pick_k_slices` chooses among.
K_SLICES_TILES = tuple({"bm": 128, "bn": w, "split": s} for w in range(64, 257, 8) for s in (2, 3, 4))


def slices_fill(m, n, k, bm, bn, slices, sms):
    """The real work per SM slot of an M x N x K product in bm x bn tiles with K in ``slices`` parts of
    whole 64-element k-blocks (0 where its CTAs overflow one wave of ``sms``): M N K over ``sms`` times
    one CTA's padded work."""
    ctas = math.ceil(m / bm) * math.ceil(n / bn) * slices
    if ctas > sms:
        return 0.0
    return m * n * k / (sms * bm * bn * math.ceil(math.ceil(k / 64) / slices) * 64)


def pick_k_slices(m, n, k, tile, halves, sms, input_bits=16):
    """``{"bm": 128, "bn": w, "split": s}`` (w from 64 to 256 in steps of 8, s from 2 to 4: the most real
    work per SM slot, :func:`slices_fill`) in place of ``tile`` (128 x 128, its K in halves where
    ``halves``, or 64 x 128) where that runs one wave of ``sms`` and the slices fill it at least
    :data:`K_SLICES_GAIN` times better; for 16-bit products of K >= :data:`K_SLICES_MIN_K` and M >=
    :data:`K_SLICES_MIN_M`; else None."""
    if input_bits != 16 or k < K_SLICES_MIN_K or m < K_SLICES_MIN_M or tuple(tile) not in ((128, 128), (64, 128)):
        return None
    now = slices_fill(m, n, k, *tile, 2 if halves else 1, sms)
    if now == 0.0:
        return None
    fill, c = best_slices(m, n, k, sms)
    return c if fill >= K_SLICES_GAIN * now else None


def best_slices(m, n, k, sms):
    """``(fill, config)``: the config of :data:`K_SLICES_TILES` with the most real work per SM slot
    (:func:`slices_fill`; fill 0 where none fits one wave of ``sms``), as :func:`pick_k_slices` takes."""
    fill, w, s = max((slices_fill(m, n, k, 128, c["bn"], c["split"], sms), c["bn"], c["split"]) for c in K_SLICES_TILES)
    return fill, {"bm": 128, "bn": w, "split": s}


#: The configs :func:`pick_k_slices_64` chooses among (64 x 64 ones with :func:`pick_k_split`'s 8 stages).
K_SLICES_64_TILES = tuple({"bm": 64, "bn": w, "split": s} | ({"stages": 8} if w == 64 else {})
                          for w in range(64, 257, 8) for s in (2, 3, 4))
#: How near the most real work per SM slot a choice of :func:`pick_k_slices_64` must come; among those
#: that do, it takes the one whose CTAs pull the fewest bytes.
K_SLICES_64_NEAR = 0.95


def pick_k_slices_64(m, n, k, tile, split, sms, input_bits=16):
    """A config of :data:`K_SLICES_64_TILES` (``{"bm": 64, "bn": w, "split": s}``, w from 64 to 256 in
    steps of 8, s from 2 to 4) in place of ``tile`` where that is 64 x 64 with K in ``split`` slices (1,
    or 2 by :func:`pick_k_split`) running one wave of ``sms``, and the slices fill it at least
    :data:`K_SLICES_GAIN` times better (:func:`slices_fill`); of those within :data:`K_SLICES_64_NEAR`
    of the best fill, the one whose CTAs each pull the fewest operand rows, (64 + w) times its k-blocks
    (fewer slices among equals): such products are bound by the bytes a CTA pulls more than by its
    multiply-adds. For 16-bit products of K >= :data:`K_SLICES_MIN_K` and M >= :data:`K_SLICES_MIN_M`;
    else None.

    Probed on an H100 (BENCHMARKS.md, 2026-12-08, "64-row tiles in K slices"; 16 problems,
    ``benchmarks/k_slices_64_probe.txt``) and held out (20 fresh products, seed 9800,
    ``benchmarks/k_slices_64_heldout.txt``). The probe chose the two refinements of the draft (the most
    fill, fewest slices among equals, 64 x 64 with the stages that fit): 64 x 64 tiles ran faster with 8
    stages than with 4 (0.82 -> 0.97x cuBLAS at 2050 x 56 x 8192), and among alike fills the wider tile
    in more slices (1634 x 160 x 8192: 64 x 160 in four 1.28x cuBLAS, 64 x 80 in two 1.15x). The
    hold-out, the rule as revised: 0.98-1.90x the former default (64 x 64, K whole or in two slices),
    geometric mean 1.33x, one slower (2264 x 64 x 8192, 0.98x)."""
    if input_bits != 16 or k < K_SLICES_MIN_K or m < K_SLICES_MIN_M or tuple(tile) != (64, 64):
        return None
    now = slices_fill(m, n, k, 64, 64, split, sms)
    if now == 0.0:
        return None
    fill, c = best_slices_64(m, n, k, sms)
    return c if fill >= K_SLICES_GAIN * now else None


def best_slices_64(m, n, k, sms):
    """``(fill, config)``: :func:`pick_k_slices_64`'s choice among :data:`K_SLICES_64_TILES` wherever the
    product (fill: the most real work per SM slot of them, :func:`slices_fill`, 0 where none fits one
    wave of ``sms``)."""
    fills = [(slices_fill(m, n, k, 64, c["bn"], c["split"], sms), c) for c in K_SLICES_64_TILES]
    best = max(f for f, _ in fills)
    kb = math.ceil(k / 64)
    near = [c for f, c in fills if f >= K_SLICES_64_NEAR * best]
    return best, dict(min(near, key=lambda c: ((64 + c["bn"]) * math.ceil(kb / c["split"]), c["split"])))
