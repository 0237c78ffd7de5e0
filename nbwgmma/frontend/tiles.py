"""The tile model: which CTA tile (BM x BN) of the library GEMM suits a problem, from the
throughput each tile reached on an H100 and how evenly its tiles fill the SMs' waves. The
front end picks its default tile with it (:func:`pick_tile`); autotuning starts from its
ranking (:func:`rank_tiles`)."""

from __future__ import annotations

import math

from .. import sim
from ..kernels.gemm_config import STAGE_BUDGET  # (the swapped small-M tiles' stages)
from ..kit.cluster_k import ClusterSplitK  # (their exchange buffer with K in halves)
from .shares import (SHORT_K, SHORT_K_SHARES, TILE256_BN, TILE256_EFF, TILE256_FAST, TILES, WIDE4_BN, WIDE4_MIN_WAVES,
                     WIDE_BN, WIDE_EFF, WIDE_MIN_WAVES, share, short_k)

__all__ = ["TILES", "pick_tile", "rank_tiles", "pick_small_m", "swapped_small_m", "swapped_config", "SWAP_M",
           "SWAP_M_FP8", "SWAP_BN", "STAGE_BUDGET", "NARROW_BN", "NARROW_BN_FP8_MAX", "NARROW_GAIN", "NARROW_PICK_GAIN",
           "narrow_tile", "narrow_config", "NARROW_WIDE_BN", "NARROW_WIDE_PICK_GAIN", "NARROW_WIDE_MIN_M", "SPLIT2_MAX_BYTES", "SPLIT_MIN_KBLOCKS", "HALVES_MIN_FILL", "wave_fill",
           "pick_narrow", "pick_192", "FILL192_GAIN", "FILL192_MIN_K", "PAD_GAIN", "padded_pick", "padded_score",
           "pick_swap", "SWAP_GAIN", "SWAP_MIN_K", "pick_swap_wide", "SWAP256_FUSED_MAX_BN", "SWAP256_EFF", "SWAP256_GAIN", "work_fill", "taken_fill",
           "TILE256_BN", "TILE256_EFF", "TILE256_FAST", "SHORT_K", "SHORT_K_SHARES", "short_k", "share", "WIDE_BN", "WIDE_EFF", "WIDE_MIN_WAVES",
           "WIDE4_BN", "WIDE4_MIN_WAVES", "SWAP256_PADDED_MIN_N",
           "pick_one_wave", "pick_swapped_256", "SWAPPED_256_GAIN", "SWAPPED_256_MIN_K", "ONE_WAVE_BN", "ONE_WAVE_GAIN"]


def pick_tile(m, n, cluster=1, widths=None, count=1, k=None, bits=16):
    """The tile with the most useful work per SM-slot: its throughput share times the
    filled fraction of the waves it needs (tiles / (waves x SMs)), so a tile that leaves a
    last wave nearly empty, or most SMs idle, loses to a smaller one; and where the tiles' padding
    past the problem's edges (which that fraction counts as work) makes another tile do
    :data:`PAD_GAIN` more real work per slot, that one (:func:`padded_pick`). A cluster splits B
    into 64-column shares: only tiles with ``bn / 64`` a multiple of it. With ``widths``
    (no cluster) the 256-row tiles of :data:`TILE256_BN` (where they need more than one wave:
    in one wave :func:`pick_narrow`'s 128-row tiles fill the SMs as well) and the wide 128-row
    tiles of :data:`WIDE_BN` (:data:`WIDE_MIN_WAVES` waves or more) compete: ``"any"`` (K-major
    B) all of them, ``"64"`` (MN-major B) those whose width is a multiple of 64.

    Problems of at most 256 rows that leave SMs idle take :func:`pick_small_m` first. ``k``: the
    product's K and ``bits`` its inputs' width (the shares, :func:`share`; None: a long K).

    A batch of ``count`` products fills the waves with the tiles of all of them, and since its
    products' edges repeat, what a tile computes past an edge weighs too: its score is also the
    share of its elements inside the product (plain problems keep the model they were measured
    with).

    In the simulator, where every thread is a Python thread and nothing is timed, the
    smallest usable tile (fewest threads and the least wgmma work per tile)."""
    if sim.enabled():
        return min(rank_tiles(m, n, cluster, widths, count, k, bits), key=lambda t: t[0] * t[1])
    if count != 1:  # (a batch's score counts the padding already)
        return rank_tiles(m, n, cluster, widths, count, k, bits)[0]
    from ..launch import device_limits

    return padded_pick(m, n, cluster, device_limits()["multiprocessors"], widths, k, bits)


#: Narrow tiles: 128 rows by an N that is not a multiple of 64, B K-major only, stored by the TMA
#: epilogue as one unswizzled box per 64 rows (or from the registers where out is not a 16-bit
#: row-major array); as many stages as fit up to 8 (:data:`nbwgmma.kernels.gemm.NARROW_STAGES`).
#: The widths are those that filled the waves of the mid-sized problems measured (BENCHMARKS.md,
#: 2026-11-26): 72 (768 x 1536), 80 (640 x 2048), 96 (384 x 4096, 512 x 3008), 144 (384 x 6144,
#: 640 x 7168), 160 (1024 x 5120).
NARROW_BN = (72, 80, 96, 144, 160)
#: How much more of its waves a narrow tile must fill than the default's for ``config="auto"`` to
#: time it, and for the default path to take it.
NARROW_GAIN = 0.1
NARROW_PICK_GAIN = 0.15


def wave_fill(m, n, bm, bn, sms):
    """The share of the waves' SM slots an M x N problem in bm x bn tiles fills."""
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    return tiles / (math.ceil(tiles / sms) * sms)


def narrow_tile(bn):
    """The config of the narrow tile of ``bn`` columns (one of :data:`NARROW_BN`)."""
    return {"bm": 128, "bn": bn}


def _best_narrow(m, n, tile, sms, gain, below=None, waves=None):
    """The narrow tile of :data:`NARROW_BN` (narrower than ``below``, needing at most ``waves``
    waves) filling the waves best, where it fills them ``gain`` more than ``tile``; else None."""
    fills = {bn: wave_fill(m, n, 128, bn, sms) for bn in NARROW_BN if (below is None or bn < below) and
             (waves is None or math.ceil(m / 128) * math.ceil(n / bn) <= waves * sms)}
    if not fills:
        return None
    bn = max(fills, key=lambda b: (fills[b], b))
    return narrow_tile(bn) if fills[bn] >= wave_fill(m, n, *tile, sms) + gain else None


def narrow_config(m, n, tile, sms):
    """The narrow tile (``{"bm": 128, "bn": ...}``, the one
    of :data:`NARROW_BN` filling the waves best) where it fills them at least
    :data:`NARROW_GAIN` more than ``tile`` (bm, bn) does; else None. ``config="auto"`` times it
    beside the default (:func:`nbwgmma.frontend.autotune.candidates`)."""
    return _best_narrow(m, n, tile, sms, NARROW_GAIN)


#: Narrow widths the default path takes for inputs other than 16-bit whose out is stored from the
#: registers (tf32's f32 out), in one wave only (e4m3 with those stores: 128 x 144 lost to 128 x 192
#: at 384 x 6144 x 4096 on an H100, 0.94x; 128 x 80 in one wave won at 640 x 2048, 1.06x). With
#: the TMA epilogue fp8 takes them all as 16-bit inputs do (e4m3: 128 x 144 1.18x the default at
#: 384 x 6144, 1.20x at 640 x 7168; 128 x 160 1.08x at 512 and 1024 x 5120; BENCHMARKS.md,
#: 2026-11-26).
NARROW_BN_FP8_MAX = 96


def pick_narrow(m, n, tile, sms, input_bits=16, tma_out=True):
    """The default path's narrow tile in place of a 128-row ``tile`` of at most 192 columns: of the
    narrower tiles of :data:`NARROW_BN` that need at most two waves (for inputs other than 16-bit
    without ``tma_out``, a TMA-stored out: at most :data:`NARROW_BN_FP8_MAX` columns and one wave),
    the one filling the waves best, where it fills them at least :data:`NARROW_PICK_GAIN` more
    (:data:`NARROW_WIDE_PICK_GAIN` for 144 and 160 columns in two waves where M has at least
    :data:`NARROW_WIDE_MIN_M` rows); else None. Measured on an H100 in one process against the earlier choice (BENCHMARKS.md,
    2026-11-26; outputs bit-identical), with the stores from the registers: 1.03-1.13x at 384 x
    6144, 640 x 2048, 640 x 7168 and 768 x 1536 (bf16, e4m3 at 640 x 2048), 1.00-1.02x at 512 x
    5120, 1024 x 5120 and 1536 x 1536; with the TMA epilogue's unswizzled boxes (same day) another
    1.01-1.17x. Where the default tile has 256 columns or the problem several waves narrower
    tiles lost (tiles of 216-248 columns 0.82-0.96x of the 128 x 256 default with the stores from
    the registers, 2026-11-26; 128 x 96 over several waves 0.64-0.91x, 2026-11-25), so they are
    not tried there (:func:`pick_tile`'s wide and 256-row tiles are)."""
    if tile[0] != 128 or tile[1] > 192:
        return None
    full = input_bits == 16 or tma_out
    below = tile[1] if full else min(tile[1], NARROW_BN_FP8_MAX + 1)
    best = _best_narrow(m, n, tile, sms, 0.0, below=below, waves=2 if full else 1)
    if best is None:
        return None
    wide = best["bn"] >= NARROW_WIDE_BN and m >= NARROW_WIDE_MIN_M \
        and math.ceil(m / 128) * math.ceil(n / best["bn"]) > sms  # (two waves)
    gain = NARROW_WIDE_PICK_GAIN if wide else NARROW_PICK_GAIN
    return best if wave_fill(m, n, 128, best["bn"], sms) >= wave_fill(m, n, *tile, sms) + gain else None


#: The narrow tiles of at least :data:`NARROW_WIDE_BN` columns (144, 160) are taken from
#: :data:`NARROW_WIDE_PICK_GAIN` more of the waves filled (not :data:`NARROW_PICK_GAIN`) where they
#: need two waves and M has at least :data:`NARROW_WIDE_MIN_M` rows. On an H100 (BENCHMARKS.md,
#: 2026-12-05, 128 x 160 against 128 x 192 where the smaller gain changes the pick): 1.015-1.156x
#: in all 9 two-wave problems of a draw; in one wave 0.935-1.131x, 12 of 29 slower (geometric mean
#: 1.025), so one wave keeps :data:`NARROW_PICK_GAIN`. Measured on an H200 (BENCHMARKS.md, 2026-12-05),
#: 128 x 160 forced against the default's 128 x 192 where it fills 0.09-0.15 more of the waves,
#: bf16 at K = 4096 and e4m3 at K = 8192, ratio to cuBLAS in one process: 1.08-1.14x at 14 of 18
#: problems (1514 x 1600: 0.840 -> 0.954), level at 2375 x 848 (1.02x / 0.99x), 0.95-0.98x at 261 x
#: 12960, whose last row of tiles holds 5 rows (its tiles' second warpgroup idle: cheaper tiles
#: than the count of waves assumes).
NARROW_WIDE_BN = 144
NARROW_WIDE_PICK_GAIN = 0.08
NARROW_WIDE_MIN_M = 512


def rank_tiles(m, n, cluster=1, widths=None, count=1, k=None, bits=16):
    """Every tile of ``TILES`` (and with ``widths`` of :data:`TILE256_BN` and :data:`WIDE_BN`, see
    :func:`pick_tile`) a cluster of ``cluster`` can use, best score first (ties keep the larger
    tile)."""
    from ..launch import device_limits

    return [t for _, t in _scored(m, n, cluster, device_limits()["multiprocessors"], widths, count, k, bits)]


#: How much more real work per SM slot (:func:`work_fill`: the padding of the last tile row and
#: column counted as waste) the tile doing the most of it must do than the tile the wave model
#: ranks first (:func:`wave_fill`, which counts a tile past the edges as full work) for
#: :func:`pick_tile` to take it instead. Measured on an H200 (BENCHMARKS.md, 2026-12-04), K =
#: 4096, the two tiles in one process: of 43 ragged bf16 problems of a random draw where the two
#: models' first picks differ, those where the gain was at least 1.02 (14) won in every one,
#: 1.014-1.374x (15024 x 616 swapped in 128 x 192 tiles 1.37x, 8256 x 8192 in 128 x 256 tiles
#: 1.05x); at 1.000-1.019 it won 1.02-1.08x at eleven and lost 0.94-0.99x at nine. With this margin,
#: on problems of another draw (39 bf16, 8 e4m3), 1.16x the wave model's pick (geometric mean),
#: 0.968-2.29x.
PAD_GAIN = 1.02


def _padded(m, n, cluster, sms, widths=None, k=None, bits=16):
    """(:func:`padded_pick`'s tile, the real work per SM slot it does)."""
    scored = _scored(m, n, cluster, sms, widths, k=k, bits=bits)
    real = {t: s / wave_fill(m, n, *t, sms) * work_fill(m, n, *t, sms) for s, t in scored}
    first = scored[0][1]
    best = max(real, key=lambda t: (real[t], t[0] * t[1]))
    tile = best if real[best] >= PAD_GAIN * real[first] else first
    return tile, real[tile]


def padded_pick(m, n, cluster, sms, widths=None, k=None, bits=16):
    """:func:`pick_tile`'s choice of a plain problem: the tile the wave model ranks first, or the
    one doing the most real work per SM slot (its efficiency times :func:`work_fill`) where that
    is at least :data:`PAD_GAIN` times as much as the first's."""
    return _padded(m, n, cluster, sms, widths, k, bits)[0]


def padded_score(m, n, sms, widths=None, k=None):
    """The real work per SM slot (efficiency times :func:`work_fill`) of :func:`padded_pick`'s tile."""
    return _padded(m, n, 1, sms, widths, k)[1]


def _scored(m, n, cluster, sms, widths=None, count=1, k=None, bits=16):
    """(score, tile) of every usable tile, best first: the throughput share (:func:`share`) times the
    filled fraction of the waves (:func:`pick_tile`; a batch's: times the share of useful elements)."""
    def score(tile):
        (bm, bn), eff = tile
        if count == 1:
            return eff * wave_fill(m, n, bm, bn, sms)
        tiles = math.ceil(m / bm) * math.ceil(n / bn)
        return eff * tiles * count / (math.ceil(tiles * count / sms) * sms) * m * n / (tiles * bm * bn)

    usable = [(t, share(t, k, bits)) for t in TILES if (t[1] // 64) % cluster == 0]
    if widths in ("any", "64") and cluster == 1:
        more = [((256, bn), share((256, bn), k, bits), 1 if bn in TILE256_FAST else 2) for bn in TILE256_BN]
        more += [((128, bn), share((128, bn), k, bits), WIDE4_MIN_WAVES if bn in WIDE4_BN else WIDE_MIN_WAVES)
                 for bn in WIDE_BN]
        usable += [((bm, bn), e) for (bm, bn), e, waves in more if (widths == "any" or bn % 64 == 0)
                   and math.ceil(m / bm) * math.ceil(n / bn) > (waves - 1) * sms]
    return [(score(te), te[0]) for te in sorted(usable, key=score, reverse=True)]


#: How much higher the tile model's best score for the swapped problem (N x M) must be than for
#: M x N for the default path to swap a tall 16-bit product (:func:`pick_swap`).
SWAP_GAIN = 0.1


#: Smallest K for which the default path swaps a tall product whose out is stored from the
#: registers (at K = 1024, 6144 x 1024 swapped ran 0.986x the unswapped: the register stores
#: weigh more against a short main loop). With the transposed TMA stores it swaps at any K.
SWAP_MIN_K = 2048


def pick_swap(m, n, k, input_bits, sms, tma_out=True):
    """Whether the default path computes a tall 16-bit product (M > N) as C^T = B^T A^T: where the
    tile model's best tile for the N x M problem scores at least :data:`SWAP_GAIN` more than the
    best for M x N (its tiles fill the waves better: 3072 x 1024 in 128 x 256 tiles fills 96 of
    132 SMs, swapped in 128 x 192 tiles 128). ``tma_out``: out is a 16-bit row-major array, so the
    swapped tiles go out transposed through shared memory and TMA; otherwise from the registers,
    and K below :data:`SWAP_MIN_K` is not swapped. Measured on an H100 (BENCHMARKS.md,
    2026-11-26), bf16, ratio to cuBLAS, with the register stores: 3072 x 1024 x 4096 0.804 ->
    0.915, 6144 x 1000 x 4096 0.807 -> 0.898, 1.09-1.16x the unswapped default at seven tall
    shapes (K 4096-14336); with the TMA stores 0.97-1.00x cuBLAS there, and at K = 512-1024 1.15-1.25x
    the unswapped (6144 x 1024 x 1024: 0.807 -> 1.013); where the swapped tiles fill no better it
    lost (5000 x 3000 x 4000: 0.884 -> 0.749, 4096 x 1000 x 8192: 0.983 -> 0.617), hence the
    margin. The same margin on the real work per SM slot (:func:`padded_score`: the padding of the
    tiles past M and N counted as waste) swaps too: on an H200, 15024 x 616 x 4096 in swapped 128 x
    192 tiles ran 1.37x the unswapped 128 x 256, 11392 x 1368 1.01x, 11659 x 2176 and 11840 x 1408
    1.03-1.04x (BENCHMARKS.md, 2026-12-04)."""
    if input_bits != 16 or m <= n or (k < SWAP_MIN_K and not tma_out) or sim.enabled():
        return False
    return _scored(n, m, 1, sms, k=k)[0][0] >= _scored(m, n, 1, sms, k=k)[0][0] + SWAP_GAIN \
        or padded_score(n, m, sms, k=k) >= padded_score(m, n, sms, k=k) + SWAP_GAIN


#: Swapped 256-row tiles (the tile's 256 rows along N, a width of :data:`TILE256_BN` along M, C^T
#: stored transposed by TMA: 128 columns whole and 136-152 in two parts with 4 stages, 160 and 168
#: whole with 3, as measured below): their share of a 128 x 256
#: tile's rate, and how much more real work per SM slot (:func:`work_fill`) the model must see
#: them do for the default path to take them (:func:`pick_swap_wide`).
SWAP256_EFF = 0.99
SWAP256_GAIN = 1.03


def work_fill(m, n, bm, bn, sms):
    """The share of the waves' SM slots that an M x N problem in bm x bn tiles fills with real
    work: :func:`wave_fill` less the padding of its last tile row and column."""
    tiles = math.ceil(m / bm) * math.ceil(n / bn)
    return m * n / (math.ceil(tiles / sms) * sms * bm * bn)


def taken_fill(m, n, tile, swapped, sms):
    """:func:`work_fill` of the ``tile`` (bm, bn) an M x N product runs, in the N x M problem where
    ``swapped`` (C^T = B^T A^T): the real work per SM slot the later rules weigh theirs against."""
    return work_fill(n, m, *tile, sms) if swapped else work_fill(m, n, *tile, sms)


#: :func:`pick_192`: how much more real work per SM slot (:func:`work_fill`) 128 x 192 tiles must do
#: than the model's 128 x 256, and the least K. On an H100 (BENCHMARKS.md, 2026-12-05), the two tiles
#: in one process, ratio 128 x 192 / 128 x 256 over two runs: at 8192^3 (1.6% more work per slot:
#: 15.5 waves of 128 x 256 tiles against 20.8 of 128 x 192) bf16 1.011-1.017, f16 1.003-1.024, KN
#: 1.016-1.025, e4m3 1.008-1.015; on 20 problems of random draws where the gain is at least 1.5%,
#: 1.012 (geometric mean), at K >= 2048 0.996-1.117 (e4m3 8574 x 6992 x 8192 1.05, 14786 x 2096 x 4096
#: 1.11), at K = 1024 0.987-1.017 (short main loops: more tiles cost more there), tf32 8192^3 0.986
#: / 1.009. Where both fill their waves alike 128 x 256 stays ahead (6144 x 12288 x 8192: 0.98x), as
#: the model's 0.95 for 128 x 192 in :data:`TILES` says; that share is from early kernels and is
#: low where the fills differ, but raising it moves picks of the 256-row and wide tiles too.
FILL192_GAIN = 1.015
FILL192_MIN_K = 2048


def pick_192(m, n, k, tile, sms, input_bits=16):
    """``{"bm": 128, "bn": 192}`` in place of the model's 128 x 256 ``tile`` for 16-bit and fp8 inputs at K
    of at least :data:`FILL192_MIN_K` where 128 x 192 tiles do :data:`FILL192_GAIN` more real work per
    SM slot (:func:`work_fill`: their fuller last wave against their padding past N); else None."""
    if tuple(tile) != (128, 256) or input_bits > 16 or k < FILL192_MIN_K:
        return None
    if work_fill(m, n, 128, 192, sms) >= FILL192_GAIN * work_fill(m, n, 128, 256, sms):
        return {"bm": 128, "bn": 192}
    return None


#: Columns from which :func:`pick_swap_wide` weighs the swapped tiles against the unswapped tile
#: :func:`pick_tile` takes (:func:`padded_score`); narrower products against the wave model's first.
SWAP256_PADDED_MIN_N = 2048


#: The widest swapped 256-row tile :func:`pick_swap_wide` takes for a product with a fused bias or
#: activation (their transposed parts spilled from 160 columns with a bias and gelu_tanh: 68 bytes,
#: 208 at 168).
SWAP256_FUSED_MAX_BN = 152


def pick_swap_wide(m, n, input_bits, sms, widths, tma_out=True, plain=True, k=None):
    """The swapped 256-row tile (bm, bn) for a tall 16-bit product (M > N; the caller checks that A,
    the swapped kernel's B, is K-major) whose out TMA stores as 16-bit values (``tma_out``): the
    width of :data:`TILE256_BN` (more than one wave; not ``plain``, a fused bias or activation: at most
    :data:`SWAP256_FUSED_MAX_BN`) whose tiles do the most real work per SM slot
    (:data:`SWAP256_EFF` times :func:`work_fill`), where that is at least :data:`SWAP256_GAIN` times
    the unswapped tile's: from :data:`SWAP256_PADDED_MIN_N` columns the one :func:`pick_tile` takes
    with ``widths`` (:func:`padded_score`), below them the wave model's first (its efficiency times
    its :func:`work_fill`); else None. cuBLAS's choice at
    5000 x 3000 x 4000: 256 x 152 tiles across M fill 3 waves of 132 SMs exactly where nbwgmma's
    best unswapped ones fill 96%. The padding counts: a swapped tile row mostly past N wastes
    what its waves gain (5632 x 2624 in 256 x 160 tiles: 3 waves exactly, the last of 11 tile rows
    a quarter used). Measured on an H100, bf16, in one process, the swapped kernel against the
    unswapped default (BENCHMARKS.md, 2026-11-28), 19 problems: where the model's gain was at least
    1.035 (15 problems) it won in every one, 1.008-1.378x (5000 x 3000 x 4000 0.932 -> 0.961-0.968x
    cuBLAS, 5000 x 3072 x 4096 0.920 -> 0.989, 19200 x 512 x 1024 0.693 -> 0.955); at 1.016 it won
    1.015x (16384 x 3000 x 4096); at 0.968-1.008 it lost in all four, 0.895-0.975x (17920 x 1920 x
    2048, 5632 x 2624 x 8192, 6144 x 5120 x 4096, 7936 x 1664 x 8192). The baseline was the wave
    model's first tile until :func:`padded_pick` (2026-12-04) made pick_tile take another where it
    does more real work: against that first tile 9 problems of 1,044 drawn at random swapped where
    the tile pick_tile takes does as much real work. On an H100 (BENCHMARKS.md, 2026-12-05), two
    runs, that tile over the swapped one: 7957 x 2576 x 8192 1.066, 16024 x 2352 x 4096 1.19,
    11659 x 2896 x 2048 1.085, 5438 x 2672 x 4096 1.025, level at 5315 x 4608 and 12033 x 3232; but
    0.949-0.989 at the three narrow ones (14017 x 592 x 4096, 9635 x 896 x 1024, 9502 x 1232 x
    2048), and 14720 x 576 x 4096 swapped had won 1.31x, so narrow products keep the first
    baseline."""
    if input_bits != 16 or m <= n or not tma_out or sim.enabled():
        return None
    if n >= SWAP256_PADDED_MIN_N:
        useful = padded_score(m, n, sms, widths, k)
    else:
        score, (bm, bn) = _scored(m, n, 1, sms, widths, k=k)[0]
        useful = score / wave_fill(m, n, bm, bn, sms) * work_fill(m, n, bm, bn, sms)
    swapped = [(SWAP256_EFF * work_fill(n, m, 256, w, sms), w) for w in TILE256_BN
               if math.ceil(n / 256) * math.ceil(m / w) > sms and (plain or w <= SWAP256_FUSED_MAX_BN)]
    if not swapped:
        return None
    best, w = max(swapped)
    return (256, w) if best >= SWAP256_GAIN * useful else None


#: :func:`pick_one_wave`'s widths (128-row tiles, K-major B), and how much more real work per SM
#: slot (:func:`work_fill`) than the tile taken before its one wave must do. cuBLASLt runs 128 x 136
#: tiles at e4m3 798 x 2704 x 8192, swapped or not as a tile of 128 rows fills the one wave best
#: (2704 x 798 in swapped 128 x 136 tiles: 132 tiles, 94% of the slots real work; the default's
#: 128 x 192: 105 tiles, 67%). Measured on an H100 (BENCHMARKS.md, 2026-12-06), the widest fill of
#: 128 x bn (bn any multiple of 8) against the default, 16 random problems where it does 1.15x the
#: real work, two runs: 1.10-1.60x at 13 (bf16 263 x 8096 x 8192 swapped in 128 x 136: 0.57 ->
#: 0.91x cuBLAS; e4m3 798 x 2704 x 8192 0.82 -> 0.96x), 1.00-1.10x at 1896 x 1264 x 2048 (swapped 128 x
#: 152), and the two 128 x 104 ones 0.95-1.01x (narrow tiles load more bytes per FLOP), hence 128
#: columns or more. Then, held out, 14 problems drawn where the rule changes the pick (bf16, f16,
#: e4m3, M 256-3072, K 1024-8192; ``benchmarks/one_wave_heldout.txt``): 1.01-1.40x the tile before
#: in all 14, geometric mean 1.15x.
ONE_WAVE_BN = tuple(range(128, 257, 8))
ONE_WAVE_GAIN = 1.15


def pick_one_wave(m, n, tile, swapped, sms, swappable=True):
    """The config of the 128 x bn tile (bn of :data:`ONE_WAVE_BN`; the product swapped, C^T = B^T A^T,
    where ``swappable`` and that fills better) whose tiles fit one wave and do the most real work
    per SM slot (:func:`work_fill`; the wider at a tie), where that is :data:`ONE_WAVE_GAIN` times the
    real work of ``tile`` (bm, bn; of the N x M problem where ``swapped``); else None. For K-major A
    and B and 16-bit outputs stored by TMA (the caller checks)."""
    if sim.enabled():
        return None
    now = taken_fill(m, n, tile, swapped, sms)
    best = None
    for swap in ((0, 1) if swappable else (0,)):
        rows, cols = (n, m) if swap else (m, n)
        for bn in ONE_WAVE_BN:
            if math.ceil(rows / 128) * math.ceil(cols / bn) <= sms:
                fill = work_fill(rows, cols, 128, bn, sms)
                if best is None or fill > best[0]:
                    best = (fill, swap, bn)
    if best is None or best[0] < ONE_WAVE_GAIN * now:
        return None
    return {"bm": 128, "bn": best[2], "swap": best[1]}


#: How much more real work per SM slot than the tile taken the swapped 256-row tiles of
#: :func:`pick_swapped_256` must do, their :data:`SWAP256_EFF` counted. cuBLAS's tile at bf16 1862 x
#: 2768 x 4096 is a swapped 256 x 160 in nbwgmma's terms (132 tiles, 95% real work, against 128 x
#: 192's 225 in two waves, 79%). On an H100 (BENCHMARKS.md, 2026-12-06, ratio to the tile taken),
#: first in one wave: seven probed 1.12-1.30x, 19 held out 0.94-1.62x (geometric mean 1.17x); then in
#: one wave or more, twelve probed 1.02-1.60x, and with this margin 29 held out 0.99-1.33x (1.11x;
#: 0.89 -> 0.99 against cuBLAS); e4m3 inputs (bf16 out) alike, 26 held out 0.96-1.38x (1.10x).
#: Unswapped, 256-row tiles along M lost where measured (430 x 8960 x 2048: 0.92x). Every problem
#: measured had more than :data:`SMALL_M` rows and K of at least :data:`SWAPPED_256_MIN_K`.
SWAPPED_256_GAIN = 1.05
#: The least K of :func:`pick_swapped_256` (the shortest measured).
SWAPPED_256_MIN_K = 1024


def pick_swapped_256(m, n, k, tile, swapped, sms, input_bits=16, share=1.0):
    """The config of the swapped 256 x bn tile (bn of :data:`TILE256_BN`, its 256 rows along N) that
    does the most real work per SM slot (:func:`work_fill`; the wider at a tie), where that, times
    :data:`SWAP256_EFF`, is :data:`SWAPPED_256_GAIN` times the real work of ``tile`` (bm, bn; of the
    N x M problem where ``swapped``) times ``share``, that tile's share of a 128 x 256 tile's rate (the
    caller's :func:`.shares.share`; 1.0 for a swapped tile), for more than :data:`SMALL_M`
    rows and K of at least :data:`SWAPPED_256_MIN_K` (the problems measured); else None. For 16-bit and
    fp8 inputs (measured: bf16, f16 and e4m3 into bf16; e5m2 and mixed fp8 alike, unmeasured), K-major
    A and B, 16-bit outputs stored by TMA, no fused bias or activation (their transposed parts spill
    from 160 columns), beta * C or user function (unmeasured); the caller checks all but the sizes.
    The share: on an H100 (BENCHMARKS.md, 2026-12-06, third session), the 16 problems of 580 drawn at
    random whose pick it changes (``benchmarks/swapped_256_share_heldout.txt``: 256 x 144-160, 128 x
    192-224 unswapped before) ran 0.998-1.119x as fast, geometric mean 1.041x, none slower by 2%."""
    if input_bits > 16 or m <= SMALL_M or k < SWAPPED_256_MIN_K or sim.enabled():
        return None
    now = share * taken_fill(m, n, tile, swapped, sms)
    fill, bn = max((work_fill(n, m, 256, w, sms), w) for w in TILE256_BN)
    return {"bm": 256, "bn": bn, "swap": 1} if SWAP256_EFF * fill >= SWAPPED_256_GAIN * now else None


#: Rows up to which :func:`pick_small_m` decides.
SMALL_M = 256
#: Rows up to which 16-bit products swap their operands (:func:`swapped_small_m`), and fp8
#: ones (at 64 rows the unswapped 64 x 64 tiles measured 1.12x faster for fp8 on an H100).
SWAP_M = 64
SWAP_M_FP8 = 32
#: The narrow tiles' widths (the tokens' side of a swapped product).
#: The narrower the tile, the faster the few-row kernel on an H100 (BENCHMARKS.md, 2026-11-27, the
#: same cut of K): 48 columns against 64 for 36-48 rows 1.12x (geometric mean of 10 problems,
#: 0.98-1.25x), 40 against 48 for 40 rows 1.03-1.10x, 8 against 16 for 1-8 rows 1.03-1.17x; 24 against
#: 32 and 56 against 64 gained 0-3% and are left out (fewer kernels to build).
SWAP_BN = (8, 16, 32, 40, 48, 64)


#: Bytes of B (the weight a swapped small-M product streams) up to which two K slices pay on
#: an H100 (50 MB of L2): a weight that stays in L2 between calls streams faster with more SMs
#: pulling it; a larger one streams from DRAM, which 48 or more SMs already saturate, and the
#: slices' sum only adds its cost (:func:`swapped_small_m`). At 35-40 MiB (16-64 x 3584-4096 x
#: 5120) the uncut kernel ran 1.00-1.10x as fast as K in halves on an H100 (7 of 10 problems;
#: BENCHMARKS.md, 2026-11-27), and 2 split-K slices level with uncut at 40 MiB the day before.
SPLIT2_MAX_BYTES = 32 << 20
#: Fewest k-blocks for which a swapped small-M product cuts K at all.
SPLIT_MIN_KBLOCKS = 48
#: Share of the SMs the two parts of K of every tile must fill for a swapped small-M product to
#: take them as halves in 2-CTA clusters rather than as 2 split-K slices (:func:`swapped_small_m`).
HALVES_MIN_FILL = 0.8


def swapped_small_m(m, n, k, sms, input_bits=16):
    """The swapped config for a 16-bit product of at most :data:`SWAP_M` rows (fp8:
    :data:`SWAP_M_FP8`; ``input_bits`` 16 or 8): the kernel
    computes C^T = B^T A^T, so B's N columns fill 64-row wgmma blocks and A's few rows are
    the wgmma's N, a tile 8 to 64 wide (the smallest of :data:`SWAP_BN` that holds
    them). Such a product only streams B: 64-row tiles spread it over the most SMs, its
    stages are small (9-16 KiB), so up to 16 of them keep the most bytes in flight.

    K is cut where that pays for the slices' sum: never below :data:`SPLIT_MIN_KBLOCKS`
    k-blocks; in 4 slices (split-K: each slice's f32 part parked, a fence, a counter, the last
    slice's sum, about a microsecond) where 4 slices of every tile fit one wave (at most 33
    tiles on 132 SMs: 32 tiles alone leave most SMs idle); in 2 where 2 fit and B is at most
    :data:`SPLIT2_MAX_BYTES`: where the two parts of every tile fill at least
    :data:`HALVES_MIN_FILL` of the SMs, as halves taken by the two CTAs of a cluster and summed
    through distributed shared memory (``cluster_k``: no global round trip), else as 2 split-K
    slices (clusters sit whole in a GPC, so a grid of clusters filling few SMs may crowd some
    GPCs' share of the memory system while others idle). Measured on an H100,
    ratios to cuBLAS in one process (uncut / 2 slices / 4 slices; BENCHMARKS.md, 2026-11-27):
    16 x 4096 x 2048 (64 tiles, 32 k-blocks) 0.921 / 0.799 / 0.554; 16 x 2048 x 2048 0.928 /
    0.874 / 0.971; 16 x 2048 x 4096 0.731 / 0.866 / 1.061; 16 x 3072 x 4096 0.868 / 0.982 /
    0.719; 16 x 4096 x 4096 0.879 / 0.928 / 0.661; 16 x 4096 x 6144 (48 MiB) 1.109 / 1.055 /
    0.979; 16 x 3072 x 8192 1.155 / 1.039 / 0.981; 16 x 2560 x 8192 (40 MiB) 0.863 / 0.876 /
    0.807. Halves in clusters against 2 slices (BENCHMARKS.md, 2026-11-27, two H100s): 64 tiles
    (128 CTAs) 1.02-1.13x as fast (16 / 32 / 48 / 64 x 4096 x 4096, 1 x 4096 x 4096, e4m3 16 and 32
    x 4096 x 8192), 48 tiles 0.94-1.17x (16 and 64 x 3072 x 4096 and 6144), 40 tiles 0.88-0.95x
    (16 and 64 x 2560 x 4096 and 6144)."""
    tiles = math.ceil(n / 64)
    kblocks = math.ceil(k * input_bits / 1024)  # 128-byte stages: 64 K of 16-bit inputs, 128 of fp8
    split = 1
    if kblocks >= SPLIT_MIN_KBLOCKS:
        if 4 * tiles <= sms:
            split = 4
        elif 2 * tiles <= sms and n * k * input_bits // 8 <= SPLIT2_MAX_BYTES:
            split = 2
    bn = next(w for w in SWAP_BN if w >= m)
    if split == 2 and 2 * tiles >= HALVES_MIN_FILL * sms:
        return swapped_config(bn, halves=True)
    return swapped_config(bn, split)


def swapped_config(bn, split=1, halves=False):
    """The swapped small-M config of tile width ``bn`` (one of :data:`SWAP_BN`) and ``split``
    split-K slices, or with ``halves`` K in halves on the two CTAs of a cluster (``cluster_k``:
    their exchange buffer of 64 x ``bn`` f32 takes shared memory from the stages): 64 x ``bn``
    tiles, as many stages as fit up to 16."""
    x_bytes = ClusterSplitK.bytes_for(bn) if halves else 0
    cfg = {"swap": 1, "bm": 64, "bn": bn, "stages": min(16, (STAGE_BUDGET - x_bytes) // ((64 + bn) * 128))}
    return cfg | ({"cluster_k": 2} if halves else {"split": split} if split > 1 else {})


def pick_small_m(m, n, k, input_bits, cluster=1, a_kmajor=True):
    """The config (``{"bm": 64, "bn": 128, "stages": 8}``, with ``"split"`` where K is cut; swapped
    ones :func:`swapped_small_m`'s, which may cut K into ``"cluster_k"`` halves) for
    a 16-bit or fp8 problem of at most :data:`SMALL_M` rows whose 64 x 128 tiles fit in one wave
    of the SMs, else None (the tile model decides). Problems of at most :data:`SWAP_M` rows
    (fp8: :data:`SWAP_M_FP8`) with a K-major (row-major) A whose N fills at most two waves of
    64-row tiles take :func:`swapped_small_m` instead.

    Such problems are bound by reading B: 64-row tiles keep the most SMs streaming it, and 8
    stages keep the most bytes in flight per SM. K is cut in 4 slices (split-K, at least 16
    k-blocks each) where 4 slices of every tile still fit the SMs, in 2 where only 2 fit the
    k-blocks; a tile count between a quarter and a whole wave runs uncut (two slices measured
    slower there at 16-64 x 8192 x 8192), in 64 x 64 tiles where twice as many still fit one
    wave and the rows fill a 64-row tile (128 x 4096 x 4096: 1.00-1.07x cuBLAS against 0.93-0.98x
    with 64 x 128; at 16-32 rows 64 x 64 tiles were 3-9% slower). Measured on an H100 in device time against the
    earlier choice (128-row tiles above 128 rows, 4 stages, slices wherever they fit;
    BENCHMARKS.md, 2026-11-24): 256 x 4096 x 14336 0.95 -> 1.10x cuBLAS, 192 x 4096 x 4096 0.67
    -> 1.01x, 32 x 8192 x 8192 0.90 -> 0.98x (16 x 4096 x 4096, then 0.58x, now takes
    :func:`swapped_small_m`: 0.97x on an H100, 2026-12-02). Split-K is built for 16-bit inputs only: unswapped fp8 runs uncut (against
    cuBLASLt: 128 x 8192 x 8192 0.92 -> 1.00x, 256 x 4096 x 14336 0.83 -> 1.09x)."""
    if sim.enabled() or input_bits not in (8, 16) or cluster != 1 or m > SMALL_M:
        return None
    from ..launch import device_limits

    sms = device_limits()["multiprocessors"]
    if a_kmajor and m <= (SWAP_M if input_bits == 16 else SWAP_M_FP8) and math.ceil(n / 64) <= 2 * sms:
        return swapped_small_m(m, n, k, sms, input_bits)
    tiles = math.ceil(m / 64) * math.ceil(n / 128)
    if tiles > sms:
        return None
    cfg = {"bm": 64, "bn": 128, "stages": 8}
    kblocks = math.ceil(k / 64)
    if 4 * tiles <= sms and input_bits == 16:
        split = 4 if kblocks >= 64 else 2 if kblocks >= 32 else 1
        if split > 1:
            cfg["split"] = split
            return cfg
    if 2 * tiles <= sms and m >= 64:  # full 64-row tiles: twice as many of 64 columns still fit
        cfg["bn"] = 64
    return cfg
