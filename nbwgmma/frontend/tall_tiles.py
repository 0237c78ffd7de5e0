"""The 192-row tiles of the tile model (three consumer warpgroups of 64 rows, K-major A and B): which
of 192 x 144, 160 and 176 an M x N product would take (:func:`best_tall`), and where the default
path takes it over the tile :mod:`.tiles` picks (:func:`pick_tall`), over a swapped 256-row tile
(:func:`tall_over_swap`), or swapped itself, its 192 rows along N (:func:`pick_swapped_tall`)."""

from __future__ import annotations

from .. import sim
from .shares import TALL_BM, TALL_WIDER, share
from .tiles import SWAP256_EFF, padded_score, taken_fill, work_fill

__all__ = ["TALL_TILE", "TALL_GAIN", "tall_tile", "best_tall", "pick_tall", "tall_over_swap", "pick_swapped_tall",
           "SWAPPED_TALL_GAIN", "tall_shares"]


#: :func:`pick_tall`'s tile: 192 rows (three consumer warpgroups of 64) by 144 columns (K-major B),
#: its share of a 128 x 256 tile's rate, and how much more real work per SM slot than the tile
#: picked it must do. cuBLAS runs tiles of about that shape where it leads most (7623 x 432 x 8192:
#: 144 x 192; BENCHMARKS.md, 2026-12-05). On an H100 (same day, one process, ratio to cuBLAS):
#: 7623 x 432 x 8192 0.972 against the default's 128 x 256 0.808 (432 columns in 3 tiles, not 2 of 256
#: mostly padding, in one wave of 120 tiles), 2070 x 4960 x 1024 0.926 against 128 x 224 0.850, 7957 x
#: 2576 x 8192 1.017 against 128 x 216 0.977, 14464 x 2160 x 8192 0.943 against 256 x 136 0.902, 6779 x
#: 15264 x 4096 0.990 against 256 x 160 0.971; where it fills no better it lost (8192^3 1.017 against
#: 128 x 192 1.050; 2207 x 5488 x 1024 0.877 against 128 x 256 0.982, 1741 x 6784 x 8192 0.780 against
#: 0.969: a last tile row mostly padding). Its rate per filled slot was level with 128 x 256's at
#: K >= 4096 (0.99-1.04x), hence :data:`.shares.TALL_EFF`, 1.0. 192 x 128, 160 and 176 ran slower; 192 x 192 spills.
#: Then 32 problems of three random draws where the rule takes it, against the tile taken before in
#: one process: bf16 1.030x (geometric mean of 22; 7623 x 432 x 8192 1.186x, 2070 x 4960 x 1024
#: 1.096x, three slower: 0.954x at 8660 x 8736 x 1024, 0.978x, 0.986x), e4m3 1.008x (of 10: 0.945x
#: at 1981 x 3408 x 8192, 0.953x at 661 x 14144 x 4096), so 16-bit inputs only.
TALL_TILE = (TALL_BM, 144)
TALL_GAIN = 1.02
#: How much more real work per SM slot :func:`pick_swapped_tall`'s tile must do than the tile taken.
SWAPPED_TALL_GAIN = 1.05


def tall_tile(bn=TALL_TILE[1]):
    """The config of a 192-row tile ``bn`` wide (``{"bm": 192, "bn": 144}``: :data:`TALL_TILE`)."""
    return {"bm": TALL_TILE[0], "bn": bn}


def tall_shares(plain=True, k=None):
    """{bn: share of a 128 x 256 tile's rate} of the 192-row tiles :func:`best_tall` weighs in a product of
    inner dimension ``k`` (:func:`.shares.share`): :data:`TALL_TILE`, and where ``plain`` (no fused bias or
    activation) the widths of :data:`.shares.TALL_WIDER` too."""
    return {bn: share((TALL_BM, bn), k) for bn in (TALL_TILE[1], *(TALL_WIDER if plain else ()))}


def best_tall(m, n, sms, plain=True, k=None):
    """(real work per SM slot times the tile's share of 128 x 256's rate, config) of the best 192-row
    tile for an M x N product of inner dimension ``k``: :data:`TALL_TILE`, or where ``plain`` (no fused
    bias or activation) one of :data:`.shares.TALL_WIDER` that does more, each weighed by its share
    (:func:`tall_shares`). The wider ones are for plain products only: their epilogues there spill
    32-80 bytes (192 x 160 with gelu, 192 x 176 with a bias); 192 x 152 and 168 fit only 3 stages.
    Each is taken where it fills the waves better: bf16 14520 x 784 x 8192 in 192 x 160 tiles is 380
    tiles, 2.9 waves with 94% of the slots real work, against 192 x 144's 456 tiles, 3.5 waves and
    78%. Held out (BENCHMARKS.md, 2026-12-06, an H200, two runs, the tile taken before forced in the
    same process; ``benchmarks/tall_wider_heldout.txt``): 19 problems where the rule changes the pick,
    four per K of random draws and three named ones, 0.98-1.29x, geometric mean 1.067x (14520 x 784 x
    8192 1.19x, 12610 x 1040 x 8192 1.13x, 11267 x 336 x 2048 1.29x; slower: 5044 x 10048 x 4096 0.98x
    against 256 x 128, 12246 x 7744 x 2048 0.995x against 128 x 192); again on an H100 (same day):
    0.956-1.288x, geometric mean 1.068x (12977 x 1328 x 4096 0.956x, which :func:`pick_swapped_tall`
    now takes swapped)."""
    # (max keeps the first of equal scores: the narrower tile at a tie)
    score, bn = max(((eff * work_fill(m, n, TALL_BM, bn, sms), bn) for bn, eff in tall_shares(plain, k).items()),
                    key=lambda t: t[0])
    return score, tall_tile(bn)


def _tall_fits(m, n, widths, input_bits):
    """Whether 192-row tiles may be taken at all: 16-bit inputs, K-major B (``widths`` "any"), at
    least two tile rows and columns of :data:`TALL_TILE` (smaller products were not measured), not
    in the simulator."""
    return widths == "any" and input_bits == 16 and m >= 2 * TALL_TILE[0] and n >= 2 * TALL_TILE[1] \
        and not sim.enabled()


def pick_tall(m, n, sms, widths, input_bits=16, plain=True, k=None):
    """The config of :func:`best_tall`'s 192-row tile (``{"bm": 192, "bn": 144}`` or, where ``plain``,
    a wider one) for 16-bit inputs with K-major B (``widths`` "any"; the caller checks that A is
    K-major too: the products measured) and at least two tile rows and columns (smaller products
    were not measured) where its real work per SM slot (its share of 128 x 256's rate times
    :func:`.tiles.work_fill`) is :data:`TALL_GAIN` times that of the tile :func:`.tiles.pick_tile` takes
    (:func:`.tiles.padded_score`); else None."""
    if not _tall_fits(m, n, widths, input_bits):
        return None
    score, tile = best_tall(m, n, sms, plain, k)
    return tile if score >= TALL_GAIN * padded_score(m, n, sms, widths, k) else None


def tall_over_swap(m, n, swapped, sms, widths, input_bits=16, plain=True, k=None):
    """:func:`best_tall`'s 192-row tile unswapped (``{"bm": 192, "bn": 144}``, or where ``plain`` a
    wider one) in place of :func:`.tiles.pick_swap_wide`'s ``swapped`` tile (bm, bn of the N x M problem)
    where its real work per SM slot (its share of 128 x 256's rate times :func:`.tiles.work_fill`) is
    :data:`TALL_GAIN` times the swapped tile's (:data:`.tiles.SWAP256_EFF` times its :func:`.tiles.work_fill`), for
    the products :func:`pick_tall` takes (16-bit inputs, K-major B, two tile rows and columns); else
    None. On an H100 (BENCHMARKS.md, 2026-12-05), 192 x 144 against the
    swapped tile in one process, ratio to cuBLAS: 15831 x 856 x 4096 0.806 -> 0.944 (1.11x the real
    work by the model), level at 14743 x 720 x 8192 (1.04x); where it does less it lost (14017 x 592 x
    4096 0.893 -> 0.680, 15153 x 1792 x 4096 0.972 -> 0.862). Then, held out, the five problems of
    1,760 drawn at random where the rule changes the pick (2026-12-06, two runs each): 14520 x 784 x
    8192 1.05x, 15480 x 1152 x 4096 1.05x, 12610 x 1040 x 8192 1.12x, 8865 x 1568 x 1024 1.09x, 9382 x
    2256 x 4096 0.986x (geometric mean 1.058x)."""
    if not _tall_fits(m, n, widths, input_bits):
        return None
    score, tile = best_tall(m, n, sms, plain, k)
    return tile if score >= TALL_GAIN * SWAP256_EFF * work_fill(n, m, *swapped, sms) else None


def pick_swapped_tall(m, n, sms, tile, swapped, input_bits=16, k=None):
    """The swapped 192-row tile (``{"swap": 1, "bm": 192, "bn": ...}``: :func:`best_tall` of the N x M
    problem, its 192 rows along N) for a tall (M > N) plain 16-bit product with K-major A and B (the
    caller checks them) where its real work per SM slot (its share of 128 x 256's rate times
    :func:`.tiles.work_fill`) is :data:`SWAPPED_TALL_GAIN` times the real work per slot of the
    ``tile`` taken (bm, bn; ``swapped``: of the N x M problem), its share left out (the model's
    shares of the tiles the later rules take are not measured against the 192-row ones); else None.
    cuBLAS's tile at bf16 12977 x 1328 x 4096 is of this shape (176 rows by 192 columns: N's 7 tiles
    99% filled); on an H100 (BENCHMARKS.md,
    2026-12-06, one process, two runs, ratio to cuBLAS) the swapped 192 x 144 ran at 0.959 / 0.960 and
    192 x 176 at 0.993 / 0.993 where the default's 192 x 160 ran at 0.826 / 0.840 (N's 9 tiles, the
    last 30% used); swapped where it fills worse it lost (14520 x 784: 0.67-0.70 against 0.98)."""
    if m <= n or not _tall_fits(n, m, "any", input_bits):
        return None
    score, tall = best_tall(n, m, sms, k=k)
    return {"swap": 1, **tall} if score >= SWAPPED_TALL_GAIN * taken_fill(m, n, tile, swapped, sms) else None
