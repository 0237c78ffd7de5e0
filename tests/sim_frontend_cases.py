"""``nbwgmma.matmul``, ``launch``'s limits and ``compile_report`` in Numba's CUDA simulator
(run by tests/test_sim_frontend.py in a child process with NUMBA_ENABLE_CUDASIM=1; also by
hand: NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/sim_frontend_cases.py).

Every output is poisoned (NaN) before the call and compared with a float64 product of the
operands; small integers make every type's answer exact."""

import numpy as np
import pytest
from numba import config, cuda

from nbwgmma import MatmulError, MatmulTypeError, matmul
from nbwgmma.layout.wgmma_model import decode_elements, encode_elements
from nbwgmma.launch import LaunchError, device_limits, launch
from nbwgmma.report import ToolchainError, compile_report

assert config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1"

RAW = {"bf16": np.uint16, "f16": np.float16, "f32": np.float32, "e4m3": np.uint8, "e5m2": np.uint8}
BF16_NAN = 0x7FC0


def bits(x, t):
    """Host array of ``x`` (exactly representable values) in type ``t`` (bf16/fp8 as raw bits)."""
    if t in ("f16", "f32"):
        return x.astype(RAW[t])
    return encode_elements(x, t).view(RAW[t]).reshape(x.shape)


def operand(x, t, k_major, is_b):
    """``x`` (A: [M, K], B: [K, N]) as a simulator array with K contiguous or not (a transposed view)."""
    h = bits(x, t)
    contiguous_k = k_major if not is_b else not k_major  # B [K, N] row-major has N contiguous
    return cuda.to_device(h) if contiguous_k else cuda.to_device(np.ascontiguousarray(h.T)).T


def poisoned(m, n, odt):
    return cuda.to_device(np.full((m, n), BF16_NAN, np.uint16) if odt == "bf16" else np.full((m, n), np.nan, RAW[odt]))


def host(c, odt):
    h = c.copy_to_host()
    return decode_elements(h.view(np.uint8).reshape(h.shape[0], -1), "bf16") if odt == "bf16" else h.astype(np.float64)


def run(t, m, k, n, a_k_major=True, b_k_major=True, odt=None, hi=3, seed=0, tb=None, **kw):
    """matmul of integer operands in [-hi, hi] of type ``t`` (B of ``tb``): (got, want)."""
    rng = np.random.default_rng(seed)
    tb = tb or t
    a = rng.integers(-hi, hi + 1, (m, k)).astype(np.float64)
    b = rng.integers(-hi, hi + 1, (k, n)).astype(np.float64)
    odt = odt or {"f16": "f16", "f32": "f32"}.get(t, "bf16")
    raw = t in ("bf16", "e4m3", "e5m2")
    out = poisoned(m, n, odt)
    c = matmul(operand(a, t, a_k_major, False), operand(b, tb, b_k_major, True), out=out,
               in_dtype=(t, tb) if raw else None, **kw)
    assert c is out
    want = a @ b
    assert np.abs(want).sum() > 0
    return host(c, odt), want


LAYOUTS = [(True, True), (True, False), (False, True), (False, False)]
LAYOUT_IDS = ["KK", "KN", "MK", "MN"]


@pytest.mark.parametrize("a_k, b_k", LAYOUTS, ids=LAYOUT_IDS)
@pytest.mark.parametrize("t", ["bf16", "f16", "f32", "e4m3", "e5m2"])
def test_every_type_and_layout_small_integers_exact(t, a_k, b_k):
    """5x7 @ 7x3: one tile, mostly out of bounds (TMA zero fill, clipped stores). 16-bit
    MN-major operands are read in place (wgmma transposes), the others staged K-major."""
    got, want = run(t, 5, 7, 3, a_k, b_k)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("t, tb, a_k, b_k, odt", [
    ("bf16", None, True, True, "bf16"),   # in place, the TMA-store epilogue
    ("f16", None, False, False, "f32"),   # both MN-major in place, direct f32 stores
    ("e4m3", "e5m2", False, True, "f32"),  # mixed fp8, A staged
    ("f32", None, True, False, "f32"),    # tf32, B staged
], ids=["bf16-KK-tma", "f16-MN-direct", "e4m3xe5m2-MK", "tf32-KN"])
def test_ragged_sizes_small_integers_exact(t, tb, a_k, b_k, odt):
    """100x72 @ 72x136: several tiles, ragged at both edges; |C| <= 72 is exact in bf16 too."""
    got, want = run(t, 100, 72, 136, a_k, b_k, odt=odt, hi=1, tb=tb)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("t, k, a_k, b_k, staged", [
    ("bf16", 72, True, True, (False, True)),    # rows of 144 bytes: 16 off the 32-byte sectors; B's copy
    ("bf16", 64, True, False, (False, True)),   # A read in place; B N-major, rows of 136 x 2 = 272 bytes
    ("e4m3", 144, True, True, (False, True)),   # fp8 rows of 144 bytes
], ids=["bf16-KK", "bf16-KN", "e4m3-KK"])
def test_rows_off_the_sectors_read_through_staging_copies(monkeypatch, t, k, a_k, b_k, staged):
    """Operands TMA could read in place but whose rows lie 16 bytes off the 32-byte sectors, staged
    (frontend.views.staged_for_speed; its share scale lowered so that a small product pays for the
    copies): the staged paths taken, the copies' 128-byte rows read exactly."""
    from nbwgmma.frontend import views
    from nbwgmma.frontend.matmul import forget_plans, last_plan

    monkeypatch.setattr(views, "COPY_SHARE_SCALE", 1)
    forget_plans()
    got, want = run(t, 100, k, 136, a_k, b_k, odt="f32", hi=1)
    np.testing.assert_array_equal(got, want)
    plan = last_plan()
    a_path, b_path = (plan.b_path, plan.a_path) if plan.swap else (plan.a_path, plan.b_path)
    assert (a_path[1] is None, b_path[1] is None) == staged


@pytest.mark.parametrize("cfg", [{"bm": 64, "bn": 64}, {"cluster": 2}, {"split": 2, "bm": 64, "bn": 64}, "auto",
                                 {"bm": 128, "bn": 96, "epilogue": "direct", "stages": 8},
                                 {"cluster": 2, "multicast": "A"}],
                         ids=["tile64", "cluster2", "split2", "auto", "narrow96", "cluster2-sharing-a"])
def test_explicit_configs(cfg):
    """A given configuration runs as given; "auto" (nothing to time here) the tile model's pick."""
    got, want = run("bf16", 96, 128, 64, odt="f32", config=cfg, seed=3)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("m, k, n, cfg", [
    (96, 128, 200, {"bm": 64, "bn": 128, "stages": 2}),              # the last column's 72 rows, slots reused
    (130, 200, 136, {"bm": 64, "bn": 64, "split": 2}),               # K slices: 8 rows in the last column
    (64, 320, 100, {"bm": 64, "bn": 64, "cluster_k": 2}),            # K halves in a cluster
    (200, 128, 300, {"bm": 256, "bn": 128, "cluster": 2, "multicast": "A"}),  # clusters sharing A, past N
    (300, 256, 72, {"swap": 1, "bm": 128, "bn": 128}),               # swapped: the caller's M is the tail
    (80, 128, 72, {"bm": 64, "bn": 64, "epilogue": "direct"}),       # the register stores
    (200, 192, 128, {"bm": 128, "bn": 128, "stages": 2}),            # A's last tile row alone
    (200, 256, 128, {"bm": 128, "bn": 64, "cluster": 2}),            # clusters sharing B: A's tail
], ids=["reused-slots", "split", "cluster-k", "cluster-sharing-a", "swapped", "direct", "a-alone", "cluster-sharing-b"])
def test_the_last_tile_column_and_row_through_their_own_maps_are_exact(monkeypatch, m, k, n, cfg):
    """Where N (M) leaves a partial last tile column (row), B's (A's) rows there come through a map of
    the rows N (M) has (frontend.tails.B_TAIL_MAP, A_TAIL_MAP; tail_pays' limits lifted): the stage's rows past them hold an
    earlier tile's rows (zeros before any), which only feed C's padding columns (rows). Exact into a
    poisoned out, f32 and bf16."""
    from nbwgmma.frontend import tails as tails_mod
    from nbwgmma.frontend.matmul import forget_plans, last_plan

    monkeypatch.setattr(tails_mod, "TAIL_MIN_ROWS", 1)  # (wherever there is padding)
    monkeypatch.setattr(tails_mod, "TAIL_MAX_WAVES", 1 << 30)
    forget_plans()
    for odt in ("f32", "bf16"):
        got, want = run("bf16", m, k, n, odt=odt, config=cfg, hi=1, seed=m)
        np.testing.assert_array_equal(got, want)
        plan = last_plan()
        km, kn, _ = plan.mnk
        sharing_a = cfg.get("multicast") == "A"
        assert plan.cfg.b_tail == (kn % plan.cfg.bn != 0 and (cfg.get("cluster", 1) == 1 or sharing_a))
        assert plan.cfg.a_tail == (km % plan.cfg.bm != 0 and not sharing_a)
        assert plan.swap == bool(cfg.get("swap"))


def test_an_amax_does_not_count_the_stale_rows_of_the_last_column(monkeypatch):
    """One CTA (an SM count of 1) takes a whole tile, then the last column's through its own map, K
    in three k-blocks through two stages: the stage rows past N then hold the first tile's B rows of
    another k-block, so the padding columns sum products that are in no column of C. Built so that
    they come to 128 (A's first and last k-blocks 1, B's stale rows 1 in the middle k-block, 0 in
    the others) while C stays smaller: the fp8 codes are exact and amax is the largest |C| inside."""
    from nbwgmma import launch as launch_mod
    from nbwgmma.frontend import tails as tails_mod
    from nbwgmma.frontend.matmul import forget_plans, last_plan
    from nbwgmma.layout.wgmma_model import float_to_fp8

    monkeypatch.setattr(tails_mod, "TAIL_MIN_ROWS", 1)
    monkeypatch.setattr(tails_mod, "TAIL_MAX_WAVES", 1 << 30)
    monkeypatch.setattr(launch_mod, "device_limits", lambda device=None: dict(launch_mod.H100_LIMITS, multiprocessors=1))
    forget_plans()
    rng = np.random.default_rng(7)
    m, n, k = 64, 200, 192
    a = np.zeros((m, k))
    a[:, :64] = a[:, 128:] = 1
    b = rng.integers(-1, 2, (k, n)).astype(np.float64)
    b[:, 72:128] = 0
    b[64:128, 72:128] = 1  # the second k-block's rows 72-127: what the second tile's stages keep past N
    out = cuda.to_device(np.full((m, n), 0xAA, np.uint8))
    amax = cuda.to_device(np.zeros(1, np.float32))
    matmul(operand(a, "bf16", True, False), operand(b, "bf16", True, True), out=out, out_dtype="e4m3",
           in_dtype="bf16", scale_out=0.25, amax=amax, config={"bm": 64, "bn": 128, "stages": 2})
    cfg = last_plan().cfg
    assert cfg.b_tail and cfg.amax and not cfg.zero_padding
    ref = a @ b
    assert 0 < np.abs(ref).max() < 128  # (the padding columns' 128 would have shown)
    np.testing.assert_array_equal(out.copy_to_host(), float_to_fp8(ref * 0.25, "e4m3"))
    assert amax.copy_to_host()[0] == np.abs(ref).max()


@pytest.mark.parametrize("group_m", [2 ** 31, 2 ** 32, 10 ** 12])
def test_a_group_of_more_tile_rows_than_m_has_walks_every_tile(group_m):
    """group_m * tiles_n past 32 bits wrapped in the tile walk (the simulator stopped inside the
    kernel; the GPU divided by zero): such a group is one group of M's tile rows."""
    got, want = run("bf16", 200, 64, 300, odt="f32", config={"group_m": group_m, "bm": 64, "bn": 64}, seed=5)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("cluster, a_k", [(2, False), (4, False), (4, True)])
def test_clusters_sharing_a_pick_a_tile_whose_rows_split(cluster, a_k):
    """``{"cluster": c, "multicast": "A"}`` without a tile: the tile model's pick, or the first
    of 128 x 256 and 256 x 128 whose A rows split into whole atoms per CTA (an MN-major A comes in
    64-column boxes: 128 rows for 2 CTAs, 256 for 4); exact, the second cluster's tiles past N."""
    from nbwgmma.frontend.matmul import last_plan

    got, want = run("bf16", 96, 64, 136, a_k_major=a_k, odt="f32", config={"cluster": cluster, "multicast": "A"},
                    seed=cluster)
    np.testing.assert_array_equal(got, want)
    c = last_plan().cfg
    assert (c.cluster, c.multicast) == (cluster, "A") and c.bm // cluster % (8 if a_k else 64) == 0, c


@pytest.mark.parametrize("t, m, k, n, a_k, odt, cfg", [
    ("bf16", 300, 136, 136, True, "bf16", {"bm": 256, "bn": 128}),
    ("f16", 260, 72, 40, False, "f16", {"bm": 256, "bn": 40, "stages": 2}),
    ("bf16", 200, 64, 88, True, "f32", {"bm": 256, "bn": 88, "consumers": 2}),
    ("bf16", 270, 64, 136, True, "bf16", {"bm": 256, "bn": 128, "c_parts": 2}),
    ("f16", 260, 72, 72, True, "f16", {"bm": 256, "bn": 64, "b_mn": True}),
    ("f16", 260, 72, 200, False, "f16", {"bm": 256, "bn": 128, "cluster": 2, "multicast": "A"}),
], ids=["256x128-tma", "256x40-narrow-tma-mn-a", "256x88-direct", "256x128-halves", "256x64-mn-b",
        "256x128-cluster-sharing-mn-a"])
def test_tall_tiles_two_blocks_per_consumer(t, m, k, n, a_k, odt, cfg):
    """256-row tiles by default take two consumer warpgroups of 128 rows (two 64-row blocks and
    two accumulators each): rows past M in the second block, a narrow N stored by one unswizzled
    TMA box per block (16-bit out) or from the registers (f32 out)."""
    from nbwgmma.frontend.matmul import last_plan

    cfg = dict(cfg)
    b_k = not cfg.pop("b_mn", False)
    got, want = run(t, m, k, n, a_k_major=a_k, b_k_major=b_k, odt=odt, config=cfg, seed=m)
    c = last_plan().cfg
    assert (c.consumers, c.blocks, c.epilogue) == (2, 2, "direct" if odt == "f32" else "tma"), c
    assert c.b_major == ("K" if b_k else "MN") and c.c_parts == cfg.get("c_parts", 1), c
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("t, m, n, bn, parts", [("bf16", 200, 160, 144, 1), ("f16", 130, 152, 144, 1),
                                                ("bf16", 200, 336, 160, 2), ("f16", 130, 184, 176, 2)])
def test_192_row_tiles_three_consumers(t, m, n, bn, parts):
    """192-row tiles (``tall_tiles.pick_tall``'s: 192 x 144, and 160 or 176 for plain products): three
    consumer warpgroups of 64 rows, rows past M in the last ones (200 rows: the second tile row's
    third block all padding), a last tile column of 16 or 8 columns, stored by one unswizzled TMA box
    per block or (160, 176) per half block."""
    from nbwgmma.frontend.matmul import last_plan

    got, want = run(t, m, 72, n, odt=t, config={"bm": 192, "bn": bn}, seed=m)
    c = last_plan().cfg
    assert (c.bm, c.bn, c.consumers, c.blocks, c.epilogue, c.c_parts) == (192, bn, 3, 1, "tma", parts), c
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n, odt, parts", [(72, "bf16", 1), (136, "f16", 1), (208, "bf16", 2)])
def test_narrow_tiles_tma_epilogue(n, odt, parts):
    """A 128-row tile of a width that is not a multiple of 64 stores each consumer's block with
    one unswizzled (64, bn) TMA box, or two of (64, bn / 2) through half the shared tile."""
    from nbwgmma.frontend.matmul import last_plan

    got, want = run("bf16" if odt == "bf16" else "f16", 150, 64, n + 16, odt=odt,
                    config={"bm": 128, "bn": n, "c_parts": parts}, seed=n)
    cfg = last_plan().cfg
    assert (cfg.epilogue, cfg.c_parts, cfg.c_box) == ("tma", parts, n // parts)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("t, m, n, cfg", [("bf16", 300, 136, {"swap": 1, "bm": 128, "bn": 128}),
                                          ("f16", 200, 72, {"swap": 1, "bm": 128, "bn": 64}),
                                          ("bf16", 330, 104, {"swap": 1, "bm": 256, "bn": 128}),
                                          ("bf16", 260, 136, {"swap": 1, "bm": 128, "bn": 128, "c_parts": 2}),
                                          ("bf16", 330, 296, {"swap": 1, "bm": 256, "bn": 152}),
                                          ("f16", 170, 264, {"swap": 1, "bm": 256, "bn": 152, "c_parts": 5,
                                                             "c_slots": 2}),
                                          ("bf16", 200, 264, {"swap": 1, "bm": 256, "bn": 136, "b_rows": 1}),
                                          ("f16", 200, 136, {"swap": 1, "bm": 128, "bn": 144}),
                                          ("bf16", 200, 400, {"swap": 1, "bm": 192, "bn": 144}),
                                          ("f16", 190, 408, {"swap": 1, "bm": 192, "bn": 176})],
                         ids=["128x128", "128x64", "256x128", "128x128-parts", "256x152", "256x152-5parts-2slots",
                              "256x136-Bmn", "128x144", "192x144", "192x176-thirds"])
def test_swapped_tiles_stored_transposed_by_tma(t, m, n, cfg):
    """A swapped product (C^T = B^T A^T) into a 16-bit row-major out stores each consumer's block
    transposed through shared memory (stmatrix.trans) with TMA boxes of out, clipped at its edges;
    a width that is not a multiple of 64 in parts of a multiple of 8 but the last (152: 80 and 72,
    or 32, 32, 32, 32 and 24 through two slots), in boxes of 8 rows of out; 192-row tiles (three
    consumers, tall_tiles.pick_swapped_tall's) with rows past N in the last tile row."""
    from nbwgmma.frontend.matmul import last_plan

    cfg = dict(cfg)
    b_rows = cfg.pop("b_rows", 0)  # B row-major (N-major): the swapped kernel's A is M-major
    got, want = run(t, m, 72, n, b_k_major=not b_rows, config=cfg, seed=m)
    c = last_plan().cfg
    assert c.c_transposed and c.epilogue == "tma" and c.a_major == ("MN" if b_rows else "K")
    if cfg["bn"] == 144:  # one part of 144 columns: boxes of 16 rows
        assert c.c_widths == (144,) and c.c_box == 16
    if cfg["bn"] == 176:  # three consumers: in thirds (in halves it spilled)
        assert c.consumers == 3 and c.c_widths == (64, 64, 48) and c.c_box == 16
    if cfg["bn"] == 152:
        assert c.c_box == 8 and c.c_widths == ((80, 72) if "c_parts" not in cfg else (32, 32, 32, 32, 24))
    np.testing.assert_array_equal(got, want)


def test_split_k_with_a_small_m():
    """16 rows in 64-row tiles cut in 4 K slices: three warps of each fragment hold only padding
    rows and park no partial sums; the 16 real rows are exact."""
    got, want = run("bf16", 16, 256, 72, odt="f32", config={"split": 4, "bm": 64, "bn": 64}, seed=4)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("m, b_k, cfg", [
    (13, True, {"bn": 16, "stages": 4}), (24, False, {"bn": 32, "stages": 3, "split": 2}),
    (5, True, {"bn": 16, "stages": 2, "split": 3}), (45, True, {"bn": 48, "stages": 3, "split": 4}),
    (3, True, {"bn": 8, "stages": 2}), (37, False, {"bn": 40, "stages": 2, "split": 2})],
    ids=["bn16", "bn32-Bmn-split2", "bn16-split3", "bn48-split4", "bn8", "bn40-Bmn-split2"])
def test_swapped_small_m(m, b_k, cfg):
    """Few rows swapped (C^T = B^T A^T: B's columns in 64-row tiles, A's rows the narrow
    tile's N; the output a transposed view written element by element): exact, ragged N."""
    got, want = run("bf16", m, 192, 136, b_k_major=b_k, odt="f32", config={"swap": 1, "bm": 64} | cfg, seed=m)
    np.testing.assert_array_equal(got, want)
    got, want = run("f16", m, 64, 72, b_k_major=b_k, config={"swap": 1, "bm": 64} | cfg, seed=m + 1)
    np.testing.assert_array_equal(got, want)


def test_fp8_scales_and_a_fresh_output():
    rng = np.random.default_rng(5)
    a = rng.integers(-3, 4, (16, 32)).astype(np.float64)
    b = rng.integers(-3, 4, (32, 24)).astype(np.float64)
    c = matmul(operand(a, "e4m3", True, False), operand(b, "e4m3", True, True), in_dtype="e4m3",
               scale_a=2.0, scale_b=0.5, out_dtype="f32")
    assert type(c).__name__ == "FakeCUDAArray" and c.dtype == np.float32 and c.shape == (16, 24)
    np.testing.assert_array_equal(c.copy_to_host(), a @ b)


def test_empty_inner_dimension_gives_zeros():
    out = poisoned(6, 10, "f16")
    c = matmul(cuda.to_device(np.ones((6, 0), np.float16)), cuda.to_device(np.ones((0, 10), np.float16)), out=out)
    np.testing.assert_array_equal(c.copy_to_host(), np.zeros((6, 10)))


class _CupyLike:
    """Looks like a CuPy array (its module) with a device pointer the simulator cannot read."""

    __module__ = "cupy._core.core"

    def __init__(self):
        self.__cuda_array_interface__ = {"shape": (8, 8), "typestr": "<f2", "data": (1 << 40, False),
                                         "strides": None, "version": 3}


def _a(t="f16", shape=(8, 16)):
    return cuda.to_device(np.zeros(shape, RAW[t]))


def _odd_strides():
    """An f16 (8, 16) array whose rows are 35 bytes apart (not a whole number of elements)."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    return FakeCUDAArray(np.lib.stride_tricks.as_strided(np.ones(200, np.float16), (8, 16), (35, 2)))


@pytest.mark.parametrize("args, kw, err, msg", [
    (lambda: (_a(), _a("f16", (8, 16))), {}, MatmulError, "inner dimensions differ"),
    (lambda: (_a(), _a("f32", (16, 8))), {}, MatmulTypeError, "same type"),
    (lambda: (_a("bf16"), _a("bf16", (16, 8))), {}, MatmulTypeError, "in_dtype="),
    (lambda: (_a("bf16"), _a("bf16", (16, 8))), {"in_dtype": "e4m3"}, MatmulError, "raw 1-byte integers"),
    (lambda: (_a(), _a("f16", (16, 8))), {"in_dtype": "bf16"}, MatmulError, "A holds f16"),
    (lambda: (_a(), _a("f16", (16, 8))), {"in_dtype": "f64"}, MatmulError, "in_dtype must be"),
    (lambda: (np.zeros((8, 16), np.float16), _a("f16", (16, 8))), {}, MatmulTypeError, "host numpy array"),
    (lambda: (_CupyLike(), _a("f16", (8, 8))), {}, MatmulTypeError, "got a CuPy array"),
    (lambda: (_a(), _a("f16", (16, 8))), {"config": {"bm": 96}}, MatmulError, "config['bm'] must be"),
    (lambda: (_a(), _a("f16", (16, 8))), {"config": {"tile": 1}}, MatmulError, "unknown config keys"),
    (lambda: (_a(), _a("f16", (16, 8))), {"out": _a("f16", (8, 9))}, MatmulError, "shape (8, 8)"),
    (lambda: (_odd_strides(), _a("f16", (16, 8))), {}, MatmulError, "a (copied first: TMA cannot read it in place) "
     "has strides (35, 2) bytes, not multiples of its element size (2 bytes)"),
    (lambda: (_a(), _a("f16", (16, 8))), {"config": {"epilogue": "rows"}, "out": _a("f16", (8, 8)).T}, MatmulError,
     "config['epilogue'] 'rows' needs an out whose columns are contiguous; got f16 with strides (2, 16)"),
    (lambda: (_a(), _a("f16", (16, 8))), {"config": {"epilogue": "rows", "swap": 1}}, MatmulError,
     "config['epilogue'] 'rows' does not take a swapped product"),
], ids=["inner", "types", "bf16-needs-in_dtype", "in_dtype-size", "in_dtype-float", "in_dtype-name", "host",
        "cupy", "config-value", "config-key", "out-shape", "stride-not-elements", "rows-column-major-out",
        "rows-swapped"])
def test_bad_input_is_the_gpu_paths_error(args, kw, err, msg):
    a, b = args()
    with pytest.raises(err) as exc:
        matmul(a, b, **kw)
    assert msg in str(exc.value) and "\n" not in str(exc.value)


@cuda.jit
def _write_one(x):
    x[0] = 1


@pytest.mark.parametrize("kw, msg", [
    ({"block": 2048}, "exceeds the device limit of 1024"),
    ({"smem": 300 * 1024}, r"^launch of _write_one: dynamic shared memory 307200 B \+ static 0 B exceeds the "
                           r"device's opt-in limit of 232448 B per block by 74752 B"),
    ({"grid": 3, "cluster": 2}, "not a multiple of cluster"),
    ({"grid": 16, "cluster": 16}, "portable limit of 8"),
])
def test_launch_holds_kernels_to_an_h100s_limits(kw, msg):
    x = cuda.to_device(np.zeros(4, np.int32))
    with pytest.raises(LaunchError, match=msg):
        launch(_write_one, kw.pop("grid", 1), kw.pop("block", 32), (x,), **kw)
    assert x.copy_to_host()[0] == 0  # refused before running


@cuda.jit(device=True)
def _a_device_function(x):
    return x


@pytest.mark.parametrize("call, msg", [
    (lambda x: launch(lambda x: None, 1, 32, (x,)), r"^launch: kernel must be a @cuda\.jit kernel \(a Numba "
     r"dispatcher, not a device function\); got function"),
    (lambda x: launch(_a_device_function, 1, 32, (x,)), r"^launch: kernel must be .*got a device function"),
    (lambda x: launch(_write_one, 1, 32, ()), r"^launch of _write_one: missing a required argument: 'x': the kernel "
     r"takes _write_one\(x\); got 0 argument\(s\)"),
    (lambda x: launch(_write_one, 1, 32, (x, x)), r"^launch of _write_one: too many positional arguments"),
    (lambda x: launch(_write_one, 1, 32, (x,), stream="junk"), r"^launch of _write_one: stream must be 0, a raw "
     r"handle .*; got str 'junk'"),
    (lambda x: launch(_write_one, 1, 32, (x,), stream=True), r"stream must be .*got bool True"),
    (lambda x: launch(_write_one, 1, 32, (x,), pdl="no"), r"^launch of _write_one: pdl must be a bool \(or 0 or "
     r"1\); got str 'no'"),
], ids=["not-a-kernel", "device-function", "too-few-args", "too-many-args", "stream-string", "stream-bool",
        "pdl-string"])
def test_launch_refuses_what_the_gpu_path_refuses_before_running(call, msg):
    """A LaunchError naming the launch, as on the GPU's path, before the kernel runs (the
    simulator ran a bad stream or pdl, and raised its own TypeError for an argument count)."""
    x = cuda.to_device(np.zeros(4, np.int32))
    with pytest.raises(LaunchError, match=msg):
        call(x)
    assert x.copy_to_host()[0] == 0


def test_launch_at_an_h100s_limits_runs():
    x = cuda.to_device(np.zeros(4, np.int32))
    launch(_write_one, 1, 1024, (x,), smem=232448)
    launch(_write_one, 8, 32, (x,), cluster=(8, 1, 1))
    assert x.copy_to_host()[0] == 1


def test_device_limits_are_an_h100s():
    lim = device_limits()
    assert lim["multiprocessors"] == 132 and lim["compute_capability"] == (9, 0)
    assert lim["max_smem_optin"] == 232448 and lim["max_threads_per_block"] == 1024


def test_compile_report_says_it_needs_the_cuda_target():
    with pytest.raises(ToolchainError, match="NUMBA_ENABLE_CUDASIM") as exc:
        compile_report(_write_one, "(int32[:],)")
    assert "\n" not in str(exc.value)


def test_swapped_single_column():
    """One column of out swapped: out^T is a single contiguous row, still written from the
    registers (the narrow tile has no TMA epilogue)."""
    got, want = run("bf16", 5, 64, 1, config={"swap": 1, "bm": 64, "bn": 16, "stages": 2}, seed=9)
    np.testing.assert_array_equal(got, want)


def test_swapped_mixed_fp8():
    """e4m3 A, e5m2 B swapped: the kernel's A is B^T (e5m2), its B is A^T (e4m3), so the kind's
    types trade places with the operands; K in 2 slices."""
    got, want = run("e4m3", 9, 128, 40, tb="e5m2", odt="f32",
                    config={"swap": 1, "bm": 64, "bn": 16, "stages": 2, "split": 2}, seed=12)
    np.testing.assert_array_equal(got, want)


def on_a_gpu_of(monkeypatch, sms, order):
    """Run what follows as on a GPU of ``sms`` SMs, the clusters in ``order`` (NBWGMMA_SIM_ORDER)."""
    import nbwgmma.launch

    real = nbwgmma.launch.device_limits
    monkeypatch.setattr(nbwgmma.launch, "device_limits", lambda device=None: {**real(device), "multiprocessors": sms})
    monkeypatch.setenv("NBWGMMA_SIM_ORDER", order)


@pytest.mark.parametrize("order", ["forward", "reverse"])
@pytest.mark.parametrize("sms, m, n, k, bm", [(3, 96, 128, 128, 64), (5, 96, 128, 192, 64), (3, 64, 64, 320, 64),
                                              (3, 96, 128, 64, 64), (4, 130, 64, 192, 128), (2, 192, 192, 192, 64),
                                              (3, 256, 128, 128, 64), (2, 260, 128, 128, 128)])
def test_stream_k_parts_summed_in_k_order(monkeypatch, sms, m, n, k, bm, order):
    """Stream-K on a GPU of a few SMs: the tiles' k-blocks cut evenly over the CTAs, so shares
    cover whole tiles and parts of others (4 tiles of 2 or 3 k-blocks on 3 or 5 SMs; one tile of
    5 k-blocks shared by 3 CTAs; single k-blocks, all whole; 128-row tiles, the second
    consumer's part); with two waves of tiles or more, every full wave but the last taken whole
    first (9 tiles on 2 SMs: 6 whole, 3 shared; 8 on 3: 3 whole; 128-row tiles, the last row
    partial, 6 on 2: 4 whole); exact. CTAs in increasing order: a shared tile's first CTA comes first,
    parks its part, and the last to count sums them all; in decreasing order it comes last,
    finds the others counted and adds their parts to its own, parking nothing."""
    on_a_gpu_of(monkeypatch, sms, order)
    got, want = run("bf16", m, k, n, odt="f32", config={"stream_k": 1, "bm": bm, "bn": 64}, seed=5)
    np.testing.assert_array_equal(got, want)


def test_a_cluster_larger_than_the_gpu_is_a_matmul_error(monkeypatch):
    """From the simulator fuzz: K halves on a cluster of 2 CTAs on a GPU of one SM launched a grid
    of 0 CTAs (a LaunchError about the grid); no cluster fits, which the error now says."""
    on_a_gpu_of(monkeypatch, 1, "forward")
    with pytest.raises(MatmulError, match=r"no cluster of 2 CTAs of this kernel fits the GPU at once \(1 SMs\)"):
        run("bf16", 64, 128, 64, odt="f32", config={"cluster_k": 2})


def test_an_unknown_cta_order_is_refused(monkeypatch):
    """``NBWGMMA_SIM_ORDER`` other than forward or reverse: a SimError naming the variable, the
    values it takes and the value got, before any thread runs."""
    from nbwgmma.sim import SimError

    monkeypatch.setenv("NBWGMMA_SIM_ORDER", "sideways")
    with pytest.raises(SimError, match=r"NBWGMMA_SIM_ORDER must be 'forward' or 'reverse'; got 'sideways'"):
        run("bf16", 64, 64, 64, odt="f32", config={"stream_k": 1, "bm": 64, "bn": 64}, seed=1)


@pytest.mark.parametrize("sms, m, n, k, bn, odt, order, bm", [
    (2, 130, 64, 192, 64, "f32", "forward", 128), (2, 512, 64, 128, 64, "f32", "reverse", 128),
    (4, 256, 128, 256, 64, "bf16", "reverse", 128), (2, 128, 64, 64, 64, "f32", "forward", 128),
    (2, 128, 40, 128, 40, "f32", "reverse", 128), (2, 70, 64, 320, 64, "f32", "forward", 64),
    (2, 250, 40, 192, 40, "f32", "reverse", 64), (4, 128, 128, 64, 64, "bf16", "forward", 64)],
    ids=["ragged-2-tiles-3-kblocks", "4-tiles-per-cluster", "tma-epilogue-2-clusters", "one-k-block", "narrow40",
         "64rows-ragged-5-kblocks", "64rows-4-tiles-per-cluster", "64rows-tma-one-k-block"])
def test_cluster_k_halves_summed_through_the_peer(monkeypatch, sms, m, n, k, bn, odt, order, bm):
    """``cluster_k=2``: each tile's two CTAs take half its k-blocks, and each sends the 64 rows the
    other keeps through distributed shared memory (st.async into the peer's buffer, the bytes on
    its barrier); a CTA walks several tiles, so the buffers are reused (the "free" barrier's
    phases; four tiles per cluster reach both parities of it twice); K of one block leaves rank 0
    a half of nothing; a TMA-store epilogue. 64-row tiles (one consumer): rank 1 sends the whole
    tile, rank 0 keeps it. Exact, with the clusters run in either order."""
    from nbwgmma.frontend.matmul import last_plan

    on_a_gpu_of(monkeypatch, sms, order)
    cfg = {"cluster_k": 2, "bm": bm, "bn": bn, "stages": 2} | ({"epilogue": "direct"} if bn % 64 else {})
    got, want = run("bf16", m, k, n, odt=odt, config=cfg, seed=6)
    assert (last_plan().cfg.consumers, last_plan().cfg.cluster_k) == (bm // 64, 2)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("t, m, n, k, bn", [("bf16", 16, 200, 320, 16), ("bf16", 40, 130, 136, 48),
                                             ("bf16", 5, 64, 64, 8), ("e4m3", 24, 130, 384, 32)],
                         ids=["16rows-4-tiles-5-kblocks", "40rows-ragged", "5rows-one-k-block", "fp8-3-kblocks"])
def test_swapped_few_rows_in_k_halves(monkeypatch, t, m, n, k, bn):
    """A few-row product swapped (C^T = B^T A^T in 64-row tiles of B's N) with K in halves on the
    two CTAs of a cluster (the default's cut where two halves of every tile fit one wave): exact,
    the sum stored transposed by rank 0."""
    from nbwgmma.frontend.matmul import last_plan

    on_a_gpu_of(monkeypatch, 2, "reverse")
    cfg = {"swap": 1, "cluster_k": 2, "bm": 64, "bn": bn, "stages": 3}
    got, want = run(t, m, k, n, odt="f32", config=cfg, seed=m)
    assert last_plan().swap and last_plan().cfg.cluster_k == 2
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("m, k, n, cfg, parts, slots", [
    (300, 136, 328, {"bm": 256, "bn": 160}, 5, 2),     # the default for 256 x 160: 5 parts of 32 columns
    (270, 72, 176, {"bm": 256, "bn": 168, "c_parts": 7, "c_slots": 2}, 7, 2),  # 7 parts of 24 columns
    (200, 72, 264, {"bm": 256, "bn": 128, "c_parts": 4, "c_slots": 2}, 4, 2),
    (150, 136, 264, {"bm": 128, "bn": 256, "c_parts": 4, "c_slots": 2}, 4, 2),  # 64-column swizzled parts
    (150, 72, 200, {"bm": 128, "bn": 192, "c_parts": 3}, 3, 1),  # three parts through one slot
], ids=["256x160-default", "256x168-7in2", "256x128-4in2", "128x256-4in2", "128x192-3in1"])
def test_c_parts_through_two_slots(m, k, n, cfg, parts, slots):
    """The TMA epilogue stores a block in ``c_parts`` parts through ``c_slots`` shared tiles used
    in turn (each rewritten once the store two parts back has read it): 256-row tiles of 160
    columns take it by default, for a fourth stage."""
    from nbwgmma.frontend.matmul import last_plan

    got, want = run("bf16", m, k, n, odt="bf16", config=cfg, seed=n)
    c = last_plan().cfg
    assert (c.epilogue, c.c_parts, c.c_slots, c.c_box) == ("tma", parts, slots, c.bn // parts), c
    if c.bm == 256 and "c_slots" not in cfg:
        assert c.stages == 4, c
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("k, cfg", [(64, {"bm": 128, "bn": 256}), (192, {"bm": 128, "bn": 256}),
                                    (64, {"bm": 128, "bn": 192, "c_parts": 3})])
def test_tiles_stored_beside_the_next_tiles_stages(monkeypatch, k, cfg):
    """Each tile's 16-bit results leave during the next tile's first stages (``Cooperative.beside``):
    part j after stage j's wgmmas, those past a tile's last stage after it (K = 64: one stage, two
    or three parts), the last tile's after the loop; several tiles per CTA on a GPU of 2 SMs,
    ragged at M and N."""
    from nbwgmma.frontend.matmul import last_plan

    on_a_gpu_of(monkeypatch, 2, "forward")
    m, n = 300, 392
    rng = np.random.default_rng(k)
    a = rng.integers(-3, 4, (m, k)).astype(np.float64)
    b = rng.integers(-3, 4, (k, n)).astype(np.float64)
    out = poisoned(m, n, "bf16")
    matmul(operand(a, "bf16", True, False), operand(b, "bf16", True, True), out=out, in_dtype="bf16", config=cfg)
    plan = last_plan().cfg
    assert (plan.bm, plan.bn, plan.epilogue, plan.c_parts) == (cfg["bm"], cfg["bn"], "tma", cfg.get("c_parts", 2))
    want = a @ b  # exact in f32, rounded once to bf16
    want = decode_elements(encode_elements(want, "bf16").view(np.uint8).reshape(m, -1), "bf16")
    np.testing.assert_array_equal(host(out, "bf16"), want)


@pytest.mark.parametrize("cfg", [{"split": 2, "bm": 128, "bn": 64}, {"split": 3, "bm": 128, "bn": 64, "epilogue": "tma"}])
def test_k_slices_of_two_consumers_are_exact(cfg):
    """K slices of 128-row tiles: each slice's two consumers park their 64 rows in the workspace
    (no case had two consumers with K slices: a workspace offset without the consumer's rows went
    unseen)."""
    got, want = run("bf16", 200, 384, 136, odt="f32" if "epilogue" not in cfg else "bf16", config=cfg, seed=7, hi=1)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("t, m, k, n, kw", [
    ("bf16", 70, 40, 131, {}),  # rows an odd number of elements apart: half of them start off 4 bytes
    ("f16", 130, 24, 197, {"config": {"bm": 128, "bn": 128}}),  # parts clipped at M and N
    ("bf16", 70, 40, 131, {"config": {"split": 2, "bm": 64, "bn": 64}}),  # K slices summed, then stored
    ("bf16", 70, 24, 301, {"config": {"bm": 128, "bn": 256}}),  # four parts a consumer, the second tile clipped
])
def test_rows_tma_cannot_write_go_through_shared_memory(t, m, k, n, kw):
    """An out whose rows are not 16 bytes apart (an odd N) takes the rows epilogue (each 64 x 64
    part staged in shared memory, stored a row per warp, 4-byte stores where a row's pair is
    aligned): exact on small integers, every element written."""
    from nbwgmma.frontend.matmul import last_plan

    got, want = run(t, m, k, n, hi=1, **kw)
    assert last_plan().cfg.epilogue == "rows", last_plan().cfg
    np.testing.assert_array_equal(got, want)


def test_rows_epilogue_into_a_view_with_a_bias_and_an_activation():
    """The rows epilogue into a view whose rows start 2 bytes past 4-byte boundaries, with a bias
    and relu fused (the parts mapped before they are staged): the view's elements exact, the
    columns around it untouched."""
    from nbwgmma.frontend.matmul import last_plan

    rng = np.random.default_rng(3)
    m, k, n = 66, 32, 72
    a = rng.integers(-1, 2, (m, k)).astype(np.float64)
    b = rng.integers(-1, 2, (k, n)).astype(np.float64)
    bias = rng.integers(-4, 5, n).astype(np.float64)
    big = cuda.to_device(np.full((m, n + 3), BF16_NAN, np.uint16))
    out = big[:, 1:n + 1]  # rows 150 bytes apart, each starting 2 bytes into its row
    matmul(cuda.to_device(bits(a, "bf16")), cuda.to_device(bits(b, "bf16")), out=out, in_dtype="bf16",
           bias=cuda.to_device(bias.astype(np.float32)), activation="relu")
    assert last_plan().cfg.epilogue == "rows"
    h = big.copy_to_host()
    got = decode_elements(np.ascontiguousarray(h[:, 1:n + 1]).view(np.uint8).reshape(m, -1), "bf16")
    np.testing.assert_array_equal(got, np.maximum(a @ b + bias, 0))
    assert (h[:, 0] == BF16_NAN).all() and (h[:, n + 1:] == BF16_NAN).all()


def test_rows_epilogue_under_stream_k_a_user_function_and_c_in_place(monkeypatch):
    """The rows epilogue wherever the store is called: stream-K's tiles shared by CTAs (summed, then
    stored a row per warp), a user epilogue function (mapped per part before staging, its column
    the part's), and beta * C read from out itself (each part read before it is written)."""
    from nbwgmma.frontend.matmul import last_plan
    from nbwgmma.kit import inlined

    on_a_gpu_of(monkeypatch, 3, "reverse")
    got, want = run("bf16", 130, 192, 131, hi=1, config={"stream_k": 1, "bm": 128, "bn": 64}, seed=5)
    assert last_plan().cfg.epilogue == "rows" and last_plan().cfg.stream_k
    np.testing.assert_array_equal(got, want)

    @inlined
    def twice_plus_col(v, row, col):
        return v * 2 + col

    got, want = run("bf16", 70, 32, 67, hi=1, epilogue=twice_plus_col)
    assert last_plan().cfg.epilogue == "rows"
    np.testing.assert_array_equal(got, want * 2 + np.arange(67))
    rng = np.random.default_rng(2)
    m, k, n = 66, 32, 67
    a, b = rng.integers(-1, 2, (m, k)).astype(np.float64), rng.integers(-1, 2, (k, n)).astype(np.float64)
    c0 = rng.integers(-3, 4, (m, n)).astype(np.float64)
    out = cuda.to_device(bits(c0, "bf16"))
    matmul(cuda.to_device(bits(a, "bf16")), cuda.to_device(bits(b, "bf16")), out=out, c=out, beta=1.0, in_dtype="bf16")
    assert last_plan().cfg.epilogue == "rows"
    np.testing.assert_array_equal(host(out, "bf16"), a @ b + c0)


def test_rows_epilogue_into_reversed_rows_and_not_with_two_slots():
    """The rows epilogue into an out of a negative row stride (its rows stored upwards) is exact;
    a c_slots=2 (which the rows epilogue does not take) keeps the register stores."""
    from nbwgmma.frontend.matmul import last_plan

    rng = np.random.default_rng(4)
    m, k, n = 70, 32, 67
    a, b = rng.integers(-1, 2, (m, k)).astype(np.float64), rng.integers(-1, 2, (k, n)).astype(np.float64)
    base = cuda.to_device(np.full((m, n), BF16_NAN, np.uint16))
    matmul(cuda.to_device(bits(a, "bf16")), cuda.to_device(bits(b, "bf16")), out=base[::-1], in_dtype="bf16")
    assert last_plan().cfg.epilogue == "rows"
    np.testing.assert_array_equal(host(base, "bf16")[::-1], a @ b)
    got, want = run("bf16", 70, 32, 131, hi=1, config={"bm": 128, "bn": 128, "c_parts": 2, "c_slots": 2})
    assert last_plan().cfg.epilogue == "direct"
    np.testing.assert_array_equal(got, want)
