"""The tile shares: each CTA tile's share of a 128 x 256 tile's throughput per SM, measured on an
H100, by which the tile model (:mod:`.tiles`, :mod:`.tall_tiles`) weighs the real work per SM slot of
its tiles. Tables and :func:`share`, the one function that reads them, for every tile the model
offers (128, 192 and 256 rows); the rules that use them live in :mod:`.tiles` and :mod:`.tall_tiles`."""

from __future__ import annotations

__all__ = ["TILES", "TILE256_BN", "TILE256_EFF", "TILE256_FAST", "TILE256_LOW", "SHORT_K", "SHORT_K_SHARES", "short_k", "share",
           "WIDE_BN", "WIDE_EFF", "WIDE_LOW", "WIDE_LOW_MAX_K", "WIDE_MIN_WAVES", "WIDE4_BN", "WIDE4_MIN_WAVES",
           "TALL_BM", "TALL_EFF", "TALL_WIDER", "TALL_SHORT_K"]

#: CTA tiles (BM, BN) and the share of the large tile's throughput per SM each reaches,
#: from bf16 runs on an H100 (BENCHMARKS.md, log steps 9 and 11): smaller tiles load
#: more bytes per FLOP and keep fewer wgmmas in flight.
TILES = {(128, 256): 1.0, (128, 192): 0.95, (128, 128): 0.75, (64, 128): 0.39, (64, 64): 0.30}

#: 256-row tiles: two consumer warpgroups of 128 rows (two accumulators each,
#: :class:`nbwgmma.kit.Cooperative` with ``blocks=2``), N of 128-168 (a width that is not a
#: multiple of 64 with K-major B only). Where both fill their waves alike they ran at about
#: :data:`TILE256_EFF` of a 128 x 256 tile's rate on an H100 (8192^3: 256 x 160 0.974x cuBLAS, 128 x
#: 256 1.022x); where 128 x 256 tiles fill the waves poorly they won (2048 x 11008 x 4096 in 256 x
#: 168: 1.028x against 0.928x; BENCHMARKS.md, 2026-11-26). Wider ones spill.
TILE256_BN = (128, 136, 144, 152, 160, 168)
TILE256_EFF = 0.95
#: 256-row widths whose C tile goes out in parts through two shared slots, leaving room for 4
#: stages (:class:`~nbwgmma.kernels.gemm.GemmConfig`'s ``c_slots``), with their share of a 128 x
#: 256 tile's rate; offered from one wave. 256 x 160 with 4 stages against the default of the time,
#: ratios to cuBLAS on an H100 (BENCHMARKS.md, 2026-11-26): 3000 x 7000 x 4096 0.970 / 0.912 (128 x
#: 216), 5000 x 5120 x 4096 0.952 / 0.917 (128 x 224), 5000 x 3000 x 4000 0.937 / 0.919 (128 x
#: 232), in one wave 1024 x 5120 x 4096 1.005 / 0.965 (128 x 160) and 512 x 10240 x 4096 1.007 /
#: 0.969 (128 x 256); 8192^3 0.996 / 1.020 (128 x 256).
TILE256_FAST = {160: 0.99}
#: Unswapped 256-row widths below :data:`TILE256_EFF` for 16-bit inputs, with their shares: the fit of
#: 1,080 H100 measurements (``benchmarks/fit_shares.py``, 2026-12-06) put 256 x 136 at 0.903 +- 0.010
#: of 128 x 256's rate. Held out twice on an H100, the picks the share changes against the tile before,
#: both forced in one process (``benchmarks/tile256_136_heldout.txt``, ``tile256_136_heldout2.txt``;
#: BENCHMARKS.md, 2026-12-06 and 2026-12-07): bf16 1.027x over 11 and 1.060x over 16 (0.959-1.180, one
#: slower by 2% or more); e4m3 1.006x over 11 and 0.995x over 5 (six slower by 2-6.5%), so 16-bit only.
TILE256_LOW = {136: 0.90}
#: K at or below which the tile model rates tiles by :data:`SHORT_K_SHARES` (and the 192-row tiles by
#: :data:`TALL_SHORT_K`): a short main loop weighs each tile's fixed costs more. Fitted
#: (``benchmarks/fit_shares.py --by-k``) on bf16 problems with eight tiles forced on an H100
#: (``benchmarks/shares_h100.json``, 2026-12-06; 256 x 160's share 0.940 / 0.956 / 0.976 / 0.998 of 128 x
#: 256's at K = 1024 / 2048 / 4096 / 8192); over every K those shares gained 1.014x at K <= 2048 and
#: 0.995x above it, hence short K only. Held out afresh (``benchmarks/short_k_heldout.txt``: 109
#: problems where they change the pick): 0.92-1.10x, geometric mean 1.007x; 256 x 160 given up for
#: 128 x 256 1.05x (eight problems), for 128 x 192 1.017x (17; BENCHMARKS.md, 2026-12-06).
SHORT_K = 2048
SHORT_K_SHARES = {(128, 192): 0.985, (256, 160): 0.971}
#: Wide tiles: 128 rows by 200-248 columns (K-major B; 4 stages beside the C tile for 200 and 208,
#: for 224 and 240 with C in halves, else 3), offered where they need at least
#: :data:`WIDE_MIN_WAVES` waves.
#: 5000 x 3000 x 4000 in 128 x 232 tiles (4 waves, 98% filled) ran at 0.934-0.938x cuBLAS on an
#: H100 where 128 x 256 (4 waves, 91%) ran at 0.893-0.896x and 128 x 192 (5 waves, 97%) at 0.894;
#: in two or three waves the 3-stage widths did not pay (768 x 14336 and 1536 x 7168: 0.96 and 0.94x
#: 256 x 168's; BENCHMARKS.md, 2026-11-26; for the 4-stage ones see :data:`WIDE4_BN`). Against
#: 256 x 160 with 4 stages they lost 2-6% at like fills (5000 x 3000: 0.921 / 0.937, 5000 x 5120 in
#: 128 x 224: 0.918 / 0.952), hence :data:`WIDE_EFF` below :data:`TILE256_FAST`'s.
WIDE_BN = (200, 208, 216, 224, 232, 240, 248)
WIDE_EFF = 0.955
WIDE_MIN_WAVES = 4
#: Wide widths with 4 stages (200 has them too, not measured in two waves); offered from
#: :data:`WIDE4_MIN_WAVES` waves: 512 x 14336 x 4096 in 128 x 224 tiles (2 waves, 97% filled) ran at
#: 1.045x cuBLAS on an H100 where the default's 128 x 256 (2 waves, 85%) ran at 0.986x (the same
#: process; an earlier run had them level, 0.998x; BENCHMARKS.md, 2026-11-26).
WIDE4_BN = (208, 224, 240)
WIDE4_MIN_WAVES = 2
#: Wide widths below :data:`WIDE_EFF`, with their shares: fitted (``benchmarks/fit_shares.py``) on the bf16
#: and e4m3 designs measured on an H100 (``benchmarks/shares_h100.json``, ``shares_fp8_h100.json``,
#: 2026-12-06; 618 measurements), where 128 x 208 and 128 x 224 came out at 0.98 (0.981 +- 0.008, 0.978 +-
#: 0.011; left at :data:`WIDE_EFF`, below the fit as the model's 128 x 192 is: raised, they would take
#: 8192^3 in 128 x 224 tiles, 1-4% slower there than 128 x 192) and these at 0.91-0.93 (bf16 0.92-0.94,
#: e4m3 0.89-0.91). Held out on an H100 (``benchmarks/wide_shares_heldout.txt``: 38 problems where they
#: change the pick, before and after forced): 0.88-1.16x, geometric mean 1.018x; 1.03x at K <= 4096,
#: 0.99x at K = 8192 (BENCHMARKS.md, 2026-12-06). Hence at K <= :data:`WIDE_LOW_MAX_K` only.
WIDE_LOW = {200: 0.927, 216: 0.913, 232: 0.920, 240: 0.931, 248: 0.930}
#: Longest K for which :data:`WIDE_LOW` rates the wide tiles (longer ones, and a K not given, take
#: :data:`WIDE_EFF`). A second hold-out at K = 8192 on an H100 (``benchmarks/wide_low_8192_heldout.txt``:
#: the 39 picks it changes among 40 fresh draws, before and after forced) measured 0.93-1.05x, geometric
#: mean 0.993x, 11 slower by 2% or more (BENCHMARKS.md, 2026-12-06, second session): with the first
#: hold-out's 13, 52 problems at K = 8192 and no gain.
WIDE_LOW_MAX_K = 4096
#: The 192-row tiles' rows (three consumer warpgroups of 64, K-major A and B; :mod:`.tall_tiles`).
TALL_BM = 192
#: 192 x 144's share (:data:`.tall_tiles.TALL_TILE`): its rate per filled slot was level with 128 x 256's
#: at K >= 4096 on an H100 (0.99-1.04x; BENCHMARKS.md, 2026-12-05; the runs are in ``TALL_TILE``'s notes).
TALL_EFF = 1.0
#: The wider 192-row tiles' shares (:func:`.tall_tiles.best_tall` weighs them for plain products):
#: divided by their real work per SM slot (:func:`.tiles.work_fill`), the runs of :data:`TALL_EFF` put
#: 192 x 160 at 0.985-1.081x 192 x 144's rate (mean 1.025, eight problems) and 192 x 176 at 0.920-1.045x
#: (mean 0.979); their hold-outs are in :func:`.tall_tiles.best_tall`'s notes.
TALL_WIDER = {160: 1.0, 176: 0.97}
#: The 192-row tiles' shares (by width) where K <= :data:`SHORT_K`, over :data:`TALL_EFF` and
#: :data:`TALL_WIDER` (fitted and held out with :data:`SHORT_K_SHARES`).
TALL_SHORT_K = {144: 0.973, 160: 0.982}


def short_k(k):
    """Whether a product of inner dimension ``k`` takes the short-K shares (``k`` <= :data:`SHORT_K`;
    None: a long K)."""
    return k is not None and k <= SHORT_K


def share(tile, k=None, bits=16):
    """A tile's (bm, bn) share of a 128 x 256 tile's rate in a product of inner dimension ``k`` (None:
    a long one) and ``bits``-bit inputs: :data:`TILES`, :data:`TILE256_LOW` (16-bit inputs),
    :data:`TILE256_FAST` or :data:`TILE256_EFF` for 256 rows, :data:`TALL_WIDER`
    or :data:`TALL_EFF` for 192 rows, :data:`WIDE_LOW` (where ``k`` <= :data:`WIDE_LOW_MAX_K`) or
    :data:`WIDE_EFF` for the wide 128-row tiles, and :data:`SHORT_K_SHARES` (:data:`TALL_SHORT_K` for 192
    rows) over them where ``k`` <= :data:`SHORT_K`."""
    tile = tuple(tile)
    if tile[0] == TALL_BM:
        if short_k(k) and tile[1] in TALL_SHORT_K:
            return TALL_SHORT_K[tile[1]]
        return TALL_WIDER.get(tile[1], TALL_EFF)
    if short_k(k) and tile in SHORT_K_SHARES:
        return SHORT_K_SHARES[tile]
    if tile in TILES:
        return TILES[tile]
    if tile[0] == 256:
        if bits == 16 and tile[1] in TILE256_LOW:
            return TILE256_LOW[tile[1]]
        return TILE256_FAST.get(tile[1], TILE256_EFF)
    return WIDE_LOW.get(tile[1], WIDE_EFF) if k is not None and k <= WIDE_LOW_MAX_K else WIDE_EFF
