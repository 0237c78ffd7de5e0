"""nbwgmma.frontend.autotune without a GPU: candidate sets, the choice, its file."""

import json
import math

import pytest
from numba import types

from nbwgmma.frontend import autotune
from nbwgmma.frontend.args import CONFIG_KEYS
from nbwgmma.frontend.shares import TALL_EFF, TALL_WIDER
from nbwgmma.frontend.tall_tiles import SWAPPED_TALL_GAIN, TALL_GAIN, best_tall, pick_swapped_tall, pick_tall, tall_over_swap
from nbwgmma.frontend.tiles import (narrow_config, narrow_tile, pick_narrow, pick_small_m, pick_swap, pick_swap_wide,
                                    pick_swapped_256, pick_one_wave, pick_tile, padded_score, wave_fill, work_fill,
                                    SWAP256_EFF, SWAP256_GAIN, SWAPPED_256_GAIN, SWAPPED_256_MIN_K, TILE256_BN,
                                    ONE_WAVE_BN, ONE_WAVE_GAIN)
from nbwgmma.kernels.gemm import GemmConfig, gemm_kernel

SHAPES = [(8192, 8192, 8192), (128, 8192, 8192), (512, 8192, 8192), (5000, 3000, 4000), (256, 256, 256),
          (1, 1, 1)]



def assert_default_tiles(cases, *fields):
    """Each case ``(dtype, layout, m, n, k, want)``: the default path's plan of that product (no GPU,
    precompile.cpu_plan) has ``want`` as its kernel config's ``fields``."""
    from nbwgmma.precompile import cpu_plan

    for dt, lay, m, n, k, want in cases:
        plan = cpu_plan(dt, lay, {}, rows=m, n=n, k=k)
        assert tuple(getattr(plan.cfg, f) for f in fields) == want, (dt, lay, m, n, k, plan.config)

@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty choice store in a cache directory of this test's own."""
    monkeypatch.setenv("NBWGMMA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "_MEMO", {})
    monkeypatch.setattr(autotune, "_LOADED", [False])
    return tmp_path


def _default_tile(dtype, m, n, k):
    """(bm, bn, swap) of the default path's plan of a K-major dtype product on the CPU."""
    from nbwgmma.precompile import cpu_plan

    plan = cpu_plan(dtype, "KK", {}, rows=m, n=n, k=k)
    return plan.cfg.bm, plan.cfg.bn, int(plan.swap)


@pytest.mark.parametrize("m, n, k", [(4096, 50257, 768), (200, 50257, 768), (100, 777, 513), (1000, 777, 512)])
def test_candidates_of_outputs_stored_a_row_per_warp(sms_132, m, n, k):
    """A problem whose 16-bit out TMA cannot write (the rows epilogue) has candidates: the stage
    counts are probed with a 16-bit out, as the rows epilogue takes (with f32 it raised)."""
    cands = autotune.candidates("f32.bf16.bf16", m, n, k, "rows", {"bm": 128, "bn": 128})
    assert cands[0] == {} and len(cands) >= 2


@pytest.mark.parametrize("m, n, k", SHAPES)
@pytest.mark.parametrize("kind, epilogue", [("f32.bf16.bf16", "tma"), ("f32.e4m3.e4m3", "tma"),
                                            ("f32.f16.f16", "direct")])
def test_candidates_are_valid_distinct_and_start_with_the_default(sms_132, m, n, k, kind, epilogue):
    default = dict(zip(("bm", "bn"), pick_tile(m, n)))
    cands = autotune.candidates(kind, m, n, k, epilogue, default)
    assert 3 <= len(cands) <= 8
    # the default path itself, then challengers (where it swaps a few rows, the unswapped config is one)
    swaps = (pick_small_m(m, n, k, 8 if "e4m3" in kind else 16) or {}).get("swap")
    assert cands[0] == {} and (default not in cands or swaps)
    assert len({tuple(sorted(c.items())) for c in cands}) == len(cands)
    out = "bf16" if epilogue == "tma" else "f32"
    for c in cands[1:]:
        assert set(c) <= CONFIG_KEYS
        kernel = {key: v for key, v in c.items() if key != "swap"}  # (the plan's choice, not the kernel's)
        GemmConfig(kind, **({"epilogue": epilogue, "out": out} | kernel))  # raises if the kernel could not be built
    for c in autotune.candidates(kind, m, n, k, epilogue, default, b_major="MN")[1:]:
        assert c.get("bn", 64) % 64 == 0  # narrow tiles read B K-major only


def test_narrow_tiles_where_the_default_fills_its_waves_poorly(sms_132):
    """384 x 4096 (128 x 128: 96 tiles on 132 SMs) and 512 x 3008 try 128 x 96 tiles (129 and 128
    tiles), second; 8192^3 and 5000 x 3000 (their tiles fill the waves) do not; MN-major B never
    does."""
    narrow = {"bm": 128, "bn": 96}
    for m, n in ((384, 4096), (512, 3008)):
        assert autotune.candidates("f32.bf16.bf16", m, n, 4096, "tma", {"bm": 128, "bn": 128})[1] == narrow
        assert narrow not in autotune.candidates("f32.bf16.bf16", m, n, 4096, "tma", {"bm": 128, "bn": 128}, "MN")
    for m, n, dflt in ((8192, 8192, {"bm": 128, "bn": 256}), (5000, 3000, {"bm": 128, "bn": 192})):
        assert not any(c.get("bm") == 128 and c.get("bn", 0) % 64 and c["bn"] < 192 for c in
                       autotune.candidates("f32.bf16.bf16", m, n, 4096, "tma", dflt))
    assert narrow_config(384, 4096, (128, 128), 132) == narrow
    narrow144 = {"bm": 128, "bn": 144}
    assert narrow_config(384, 6144, (128, 192), 132) == narrow144
    # the default path's own pick: the narrower tile filling one or two waves best, 15 points more
    assert pick_narrow(384, 4096, (128, 128), 132) == narrow
    assert pick_narrow(640, 2048, (128, 128), 132) == {"bm": 128, "bn": 80}
    assert pick_narrow(768, 1536, (128, 128), 132)["bn"] == 72 and pick_narrow(640, 7168, (128, 192), 132) == narrow144
    assert pick_narrow(384, 6144, (128, 192), 132) == narrow144
    # fp8 with a TMA-stored out as 16-bit inputs; stored from the registers: 96 columns at most, one wave
    assert pick_narrow(384, 6144, (128, 192), 132, input_bits=8) == narrow144
    assert pick_narrow(384, 6144, (128, 192), 132, input_bits=32, tma_out=False) is None
    assert pick_narrow(640, 2048, (128, 128), 132, input_bits=8, tma_out=False)["bn"] == 80
    assert pick_narrow(1536, 7168, (128, 256), 132) is None  # 256-column defaults keep their tile
    assert pick_narrow(2048, 2048, (128, 128), 132) is None  # two full waves already
    assert pick_narrow(5000, 3000, (128, 192), 132) is None  # several waves
    # 144 and 160 columns from 8 points more in two waves where M has 512 rows or more
    assert pick_narrow(1133, 4288, (128, 192), 132) == {"bm": 128, "bn": 160}  # 0.78 -> 0.92 of two waves
    assert pick_narrow(1514, 1600, (128, 192), 132) is None  # 0.82 -> 0.91 of one wave: 15 points there
    assert pick_narrow(261, 12960, (128, 192), 132) is None  # 0.77 -> 0.92 of two, but 261 rows


def test_tall_16_bit_products_swap_where_the_swapped_tiles_fill_better(sms_132):
    """pick_swap: 3072 x 1024 and 6144 x 1000 (128 x 256 tiles fill 73% of their waves; swapped,
    128 x 192 tiles 97%); not where the swapped tiles fill about as well (5000 x 3000, 4096 x 1000
    x 8192, 8192 x 1024), not for wide problems, fp8, tf32, or K below 2048 where out is stored
    from the registers."""
    assert pick_swap(3072, 1024, 4096, 16, 132) and pick_swap(6144, 1000, 4096, 16, 132)
    assert pick_tile(1024, 3072) == (128, 192)
    for m, n in ((5000, 3000), (4096, 1000), (8192, 1024), (1024, 3072), (8192, 8192)):
        assert not pick_swap(m, n, 4096, 16, 132), (m, n)
    assert not pick_swap(3072, 1024, 4096, 8, 132) and not pick_swap(3072, 1024, 4096, 32, 132)
    assert not pick_swap(6144, 1024, 1024, 16, 132, tma_out=False)  # short K, register stores: not swapped
    assert pick_swap(6144, 1024, 1024, 16, 132)  # (the transposed TMA stores: any K)


def test_tall_products_swap_to_256_row_tiles_that_fill_their_waves(sms_132):
    """pick_swap_wide: 5000 x 3000 in swapped 256 x 152 tiles fills 3 waves of 132 SMs exactly
    (unswapped 256 x 160: 96%); measured wins; not where the swapped tiles lost on an H100 (their
    last tile row mostly padding: 5632 x 2624, 17920 x 1920, 7936 x 1664; 6144 x 5120), 4096 x 3000,
    squares, wide problems (the plan's choice: tests/test_library_epilogue_cpu.py)."""
    for (m, n), tile in (((5000, 3000), (256, 152)), ((5000, 3072), (256, 152)), ((6144, 3000), (256, 144)),
                         ((3072, 3000), (256, 144)), ((19200, 512), (256, 152)), ((14720, 576), (256, 168))):
        assert pick_swap_wide(m, n, 16, 132, "any") == tile, (m, n)
    for m, n in ((5632, 2624), (17920, 1920), (7936, 1664), (6144, 5120), (4096, 3000), (8192, 8192),
                 (16384, 8192), (3000, 5000), (4096, 1000)):
        assert pick_swap_wide(m, n, 16, 132, "any") is None, (m, n)
    # from 2048 columns weighed against the tile pick_tile takes (measured 1.03-1.19x the swapped
    # tiles at these), narrower products against the wave model's first (the swapped tiles won there)
    for m, n in ((7957, 2576), (16024, 2352), (11659, 2896), (5438, 2672)):
        assert pick_swap_wide(m, n, 16, 132, "any") is None, (m, n)
        assert padded_score(m, n, 132, "any") * SWAP256_GAIN > max(
            SWAP256_EFF * work_fill(n, m, 256, w, 132) for w in TILE256_BN), (m, n)
    # 7957 x 2576 (measured with 128 x 216 as pick_tile's tile, 1.066x the swapped one) at a K where
    # shares.WIDE_LOW rates the wide tiles: pick_tile takes 256 x 168 and the swapped tiles outscore it,
    # but the default path runs 192 x 144 there either way (tall_tiles.tall_over_swap)
    from nbwgmma.precompile import cpu_plan

    assert pick_swap_wide(7957, 2576, 16, 132, "any", k=4096) == (256, 168)
    for k in (4096, 8192):
        plan = cpu_plan("bf16", "KK", {}, rows=7957, n=2576, k=k)
        assert (plan.cfg.bm, plan.cfg.bn, plan.swap) == (192, 144, False), k
    for (m, n), tile in (((14017, 592), (256, 160)), ((9635, 896), (256, 152))):
        assert pick_swap_wide(m, n, 16, 132, "any") == tile, (m, n)
    # fp8 or tf32 inputs, or an out not stored by TMA as 16-bit values: never
    assert pick_swap_wide(5000, 3000, 8, 132, "any") is None and pick_swap_wide(5000, 3000, 32, 132, "any") is None
    assert pick_swap_wide(5000, 3000, 16, 132, "any", tma_out=False) is None
    assert work_fill(5632, 2624, 160, 256, 132) < wave_fill(5632, 2624, 160, 256, 132) == 1.0
    # config="auto" where the default path swaps: the unswapped default is timed first, so a losing swap is undone
    cands = autotune.candidates("f32.bf16.bf16", 5000, 3000, 4000, "tma", {"bm": 256, "bn": 160}, swapped=True)
    assert cands[:2] == [{}, {"swap": 0}] and {"bm": 256, "bn": 160} not in cands, cands
    assert {"swap": 0} not in autotune.candidates("f32.bf16.bf16", 5000, 3000, 4000, "tma", {"bm": 256, "bn": 160})


def test_few_rows_try_the_swapped_kernels_other_k_slicings(sms_132):
    """A few-row product the default path swaps tries the swapped kernel's other cuts of K first
    (those that fit one wave); not with a column-major A (no swap), not for tf32."""
    uncut = {"swap": 1, "bm": 64, "bn": 16, "stages": 16}
    halves, two, four = uncut | {"cluster_k": 2}, uncut | {"split": 2}, uncut | {"split": 4}
    cands = autotune.candidates("f32.bf16.bf16", 16, 4096, 4096)  # the default: halves; 4 slices do not fit
    assert cands[1:3] == [uncut, two] and halves not in cands and four not in cands
    assert autotune.candidates("f32.bf16.bf16", 9, 4096, 2048)[1:3] == [two, halves]  # the default: uncut
    one = {"swap": 1, "bm": 64, "bn": 8, "stages": 16}  # one row: the 8-wide tile
    assert autotune.candidates("f32.bf16.bf16", 1, 4096, 2048)[1:3] == [one | {"split": 2}, one | {"cluster_k": 2}]
    assert autotune.candidates("f32.bf16.bf16", 16, 2048, 8192)[1:4] == [uncut, two, halves]  # default: 4 slices
    assert autotune.candidates("f32.bf16.bf16", 16, 2560, 4096)[1:3] == [uncut, halves]  # default: 2 slices
    assert autotune.candidates("f32.e4m3.e4m3", 16, 4096, 16384)[1:3] == [two, halves]
    # the unswapped plan's config (matmul passes it as ``default``) stays a challenger where the default swaps
    assert {"bm": 256, "bn": 160} in autotune.candidates("f32.bf16.bf16", 16, 4096, 4096, "tma", {"bm": 256, "bn": 160})
    for args, kw in ((("f32.bf16.bf16", 16, 4096, 4096), {"a_major": "MN"}), (("f32.tf32.tf32", 16, 4096, 4096), {}),
                     (("f32.bf16.bf16", 128, 4096, 4096), {}), (("f32.e4m3.e4m3", 64, 4096, 4096), {})):
        assert not any(c.get("swap") for c in autotune.candidates(*args, **kw)), args


def test_candidates_for_a_bandwidth_bound_shape_include_deeper_pipelines(sms_132):
    cands = autotune.candidates("f32.bf16.bf16", 128, 8192, 8192)
    assert {"bm": 64, "bn": 128, "stages": 8} in cands
    assert {"bm": 64, "bn": 128, "cluster": 2} in cands
    big = autotune.candidates("f32.bf16.bf16", 8192, 8192, 8192)
    assert {"bm": 128, "bn": 256, "cluster": 2} in big and {"bm": 128, "bn": 256, "group_m": 16} in big


@pytest.mark.parametrize("bm, bn, stages", [(64, 128, 8), (64, 64, 8)])
def test_deeper_pipelines_compile_clean(bm, bn, stages, report_batch):
    def job(bm, bn, stages):
        cfg = GemmConfig("f32.bf16.bf16", bm=bm, bn=bn, stages=stages, epilogue="tma")
        return gemm_kernel(cfg), (types.uint64, types.uint64, types.uint64, types.int32, types.int32, types.int32,
                                  types.float32), None

    rep = report_batch(job)  # both compiled together (tests/conftest.py)
    assert rep.sass["HGMMA"] == 4 and rep.spill_bytes == 0 and rep.local_memory_ops == 0
    assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored


@pytest.mark.parametrize("kind, bn", [("f32.bf16.bf16", 72), ("f32.bf16.bf16", 96), ("f32.e4m3.e4m3", 80),
                                     ("f32.e4m3.e4m3", 144), ("f32.f16.f16", 160)])
def test_narrow_tiles_compile_clean(kind, bn, report_batch):
    """The narrow tiles (N of :data:`NARROW_BN`, direct epilogue, as many stages as fit): the wgmmas
    of that N, no spills, no serialization."""
    def job(kind, bn):
        cfg = GemmConfig(kind, scaled=kind.endswith("e4m3"), **narrow_tile(bn))
        return gemm_kernel(cfg), (types.uint64, types.uint64, types.Array(types.uint16, 2, "A"), types.int32,
                                  types.int32, types.int32, types.float32), None

    rep = report_batch(job)
    gmma = "QGMMA" if kind.endswith("e4m3") else "HGMMA"
    assert any(f"{gmma}.64x{bn}x" in op for op in rep.sass_full), rep.sass_full
    assert rep.sass[gmma] == 4 and rep.spill_bytes == 0 and rep.local_memory_ops == 0
    assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored


@pytest.mark.parametrize("kind, bn, transposed", [("f32.bf16.bf16", 136, True), ("f32.e4m3.e4m3", 136, True),
                                                  ("f32.e4m3.e4m3", 208, False), ("f32.f16.f16", 184, True),
                                                  ("f32.bf16.bf16", 216, False)])
def test_one_wave_tiles_compile_clean(kind, bn, transposed, report_batch):
    """pick_one_wave's tiles (128 x bn, bn in steps of 8; swapped ones store C^T transposed by TMA): the
    wgmmas of that N, no spills, no serialization (all of ONE_WAVE_BN compiled so for bf16 and e4m3, either
    store, when the rule was made)."""
    def job(kind, bn, transposed):
        cfg = GemmConfig(kind, scaled=kind.endswith("e4m3"), bm=128, bn=bn, epilogue="tma", c_transposed=transposed,
                         out="f16" if "f16" in kind else "bf16")
        return gemm_kernel(cfg), (types.uint64, types.uint64, types.uint64, types.int32, types.int32, types.int32,
                                  types.float32), None

    rep = report_batch(job)
    gmma = "QGMMA" if kind.endswith("e4m3") else "HGMMA"
    assert any(f"{gmma}.64x{bn}x" in op for op in rep.sass_full), rep.sass_full
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0
    assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored


def test_the_fastest_candidate_is_chosen_kept_and_found_again(fresh, monkeypatch):
    configs = [{"bm": 128, "bn": 256}, {"bm": 128, "bn": 192}, {"bm": 64, "bn": 128}]
    timed = []

    def fake_time(run, cfgs, stream, **kw):
        timed.append(list(cfgs))
        ms = [1.5, None, 1.25][:len(cfgs)]  # the second failed to run
        return ms, [[t] * 7 if t else [] for t in ms]

    monkeypatch.setattr(autotune, "time_candidates", fake_time)
    got = autotune.choose("k1", lambda: configs, None, 0)
    assert got == {"bm": 64, "bn": 128} and autotune.last["source"] == "tuned"
    files = list(fresh.glob("autotune-*.json"))
    assert len(files) == 1
    saved = json.loads(files[0].read_text())["k1"]
    assert saved["config"] == got and saved["ms"][1] == [configs[1], None]
    # a new process (empty memory) reads the file and times nothing
    monkeypatch.setattr(autotune, "_MEMO", {})
    monkeypatch.setattr(autotune, "_LOADED", [False])
    assert autotune.choose("k1", lambda: pytest.fail("no candidates needed"), None, 0) == got
    assert autotune.last["source"] == "cached" and len(timed) == 1
    # another class is tuned and added to the same file
    autotune.choose("k2", lambda: configs[:2], None, 0)
    assert set(json.loads(files[0].read_text())) == {"k1", "k2"}
    assert set(autotune.choices()) == {"k1", "k2"}
    autotune.clear()
    assert not list(fresh.glob("autotune-*.json")) and autotune.choices() == {}


def test_a_choice_made_with_challengers_passed_over_stays_in_memory(fresh, monkeypatch):
    """Where the budget passed challengers over (their kernels not built), the choice serves this
    process but is not written: a later process, its kernels built, tunes the class in full."""
    def fake_time(run, cfgs, stream, built=None, skipped=None):
        skipped.extend(cfgs[1:])
        return [1.0] + [None] * (len(cfgs) - 1), [[1.0] * 7] + [[] for _ in cfgs[1:]]

    monkeypatch.setattr(autotune, "time_candidates", fake_time)
    assert autotune.choose("k", lambda: [{}, {"bm": 64, "bn": 64}], None, 0) == {}
    assert autotune.last["skipped"] == 1 and not list(fresh.glob("autotune-*.json"))
    assert autotune.choose("k", lambda: pytest.fail("known in this process"), None, 0) == {}
    monkeypatch.setattr(autotune, "_MEMO", {})  # a new process
    monkeypatch.setattr(autotune, "time_candidates", lambda run, cfgs, stream, **kw: ([1.0, 0.5], [[1.0] * 7, [0.5] * 7]))
    assert autotune.choose("k", lambda: [{}, {"bm": 64, "bn": 64}], None, 0) == {"bm": 64, "bn": 64}
    assert autotune.last["skipped"] == 0 and list(fresh.glob("autotune-*.json"))


def test_no_candidate_ran_is_an_error(fresh, monkeypatch):
    monkeypatch.setattr(autotune, "time_candidates", lambda run, cfgs, stream, **kw: ([None] * len(cfgs), [[]] * len(cfgs)))
    with pytest.raises(RuntimeError, match="no candidate configuration ran"):
        autotune.choose("k", lambda: [{"bm": 128, "bn": 256}], None, 0)
    assert "k" not in autotune.choices()


def test_a_damaged_file_is_ignored_and_rewritten(fresh, monkeypatch):
    path = autotune.choices_path()
    path.write_text("{not json")
    monkeypatch.setattr(autotune, "time_candidates", lambda run, cfgs, stream, **kw: ([2.0], [[2.0]]))
    assert autotune.choose("k", lambda: [{"bm": 64, "bn": 64}], None, 0) == {"bm": 64, "bn": 64}
    assert json.loads(path.read_text())["k"]["config"] == {"bm": 64, "bn": 64}


def test_with_the_cache_off_choices_stay_in_memory(fresh, monkeypatch):
    monkeypatch.setenv("NBWGMMA_CACHE", "0")
    monkeypatch.setattr(autotune, "time_candidates", lambda run, cfgs, stream, **kw: ([2.0], [[2.0]]))
    autotune.choose("k", lambda: [{"bm": 64, "bn": 64}], None, 0)
    assert "k" in autotune.choices() and not list(fresh.iterdir())


def test_a_challenger_must_beat_the_default_by_more_than_its_noise():
    steady = [1.0, 1.0, 1.001, 0.999, 1.0, 1.0, 1.0]
    assert autotune.pick([1.0, 0.995, 1.2], [steady, [0.995] * 7, [1.2] * 7]) == (0, autotune.MIN_MARGIN)
    assert autotune.pick([1.0, 0.98, 1.2], [steady, [0.98] * 7, [1.2] * 7])[0] == 1
    noisy = [1.0, 0.95, 1.05, 0.96, 1.04, 1.0, 1.0]  # median absolute deviation 0.04: margin 8%
    idx, margin = autotune.pick([1.0, 0.93, None], [noisy, [0.93] * 7, []])
    assert idx == 0 and margin == pytest.approx(0.08)
    assert autotune.pick([1.0, 0.9, None], [noisy, [0.9] * 7, []])[0] == 1
    assert autotune.pick([None, 2.0, 1.5], [[], [2.0], [1.5]])[0] == 2  # the default did not run
    assert autotune.pick([None, None], [[], []]) == (None, None)


def test_the_budget_stops_the_compiles_after_the_default(monkeypatch):
    monkeypatch.setattr(autotune, "COMPILE_S", 0.0)  # no prior: the compiles seen decide
    now = [0.0]
    compile_s = {"a": 1.2, "b": 1.0, "c": 0.9, "d": 0.01}
    seen = []

    def run(cfg):  # the first run of a config compiles it
        if cfg["name"] not in seen:
            seen.append(cfg["name"])
            now[0] += compile_s[cfg["name"]]
        now[0] += 1e-4

    cfgs = [{"name": x} for x in "abcd"]
    ok = autotune.warm_within_budget(run, cfgs, 3.0, clock=lambda: now[0])
    # a (1.2 s), b (spent 1.2, + 1.25 * 1.2 <= 3), c (spent 2.2, + 1.5 > 3: left out)
    assert [c["name"] for c in ok] == ["a", "b"]
    now[0], seen[:] = 0.0, []
    assert autotune.warm_within_budget(run, cfgs, 0.0, clock=lambda: now[0]) == cfgs[:1]  # the default always runs

    def failing(cfg):
        if cfg["name"] == "a":
            raise RuntimeError("cannot build")
        run(cfg)

    now[0], seen[:] = 0.0, []
    # a fails at once, b (1.0 s), c (spent 1.0, + 1.25), d (spent 1.9, + 1.25 > 3: left out)
    assert [c["name"] for c in autotune.warm_within_budget(failing, cfgs, 3.0, clock=lambda: now[0])] == ["b", "c"]


def test_built_challengers_run_within_the_budget_and_compiles_only_where_one_fits():
    """A challenger whose kernel is built (``built(config)``) starts while its load fits the
    budget; one that needs a compile only where a compile (at least COMPILE_S, 3 s) fits: with
    the default budget of 3 s, none after the default."""
    now, seen = [0.0], set()

    def run(cfg):  # the first run costs cfg["s"] (a load from the cache, or a compile)
        if id(cfg) not in seen:
            seen.add(id(cfg))
            now[0] += cfg["s"]

    cfgs = [{"s": 0.01}, {"s": 0.01}, {"s": 0.01}, {"s": 2.4}, {"s": 0.01}]
    built = lambda cfg: cfg["s"] < 0.1  # noqa: E731
    got = autotune.warm_within_budget(run, cfgs, 3.0, clock=lambda: now[0], built=built)
    assert got == cfgs[:3] + cfgs[4:]  # the compile (spent 0.03 + 1.25 * 3 > 3) is passed over
    now, seen = [0.0], set()
    assert autotune.warm_within_budget(run, cfgs, 3.0, clock=lambda: now[0]) == cfgs[:1]  # nothing known built
    now, seen = [0.0], set()
    assert autotune.warm_within_budget(run, cfgs, 10.0, clock=lambda: now[0], built=built) == cfgs  # room to compile
    now, seen = [0.0], set()
    assert autotune.warm_within_budget(run, [{"s": 2.95}, {"s": 0.01}], 3.0, clock=lambda: now[0],
                                       built=built) == [{"s": 2.95}]  # the default's compile spent it


def test_precompile_lists_every_challenger(sms_132):
    from nbwgmma import precompile

    listed = {(dt, lay, tuple(sorted(c.items()))) for dt, lay, c in precompile.kernel_list(autotune=True)}
    kinds = {"bf16": "f32.bf16.bf16", "f16": "f32.f16.f16", "e4m3": "f32.e4m3.e4m3", "tf32": "f32.tf32.tf32"}
    for dt, kind in kinds.items():
        epilogue = "direct" if dt == "tf32" else "tma"
        for m, n, k in SHAPES + [(64, 8192, 8192), (1000, 1000, 1000), (16384, 4096, 4096), (1169, 408, 8192),
                                 (1893, 136, 8192)]:
            for c in autotune.candidates(kind, m, n, k, epilogue)[1:]:
                assert (dt, "KK", tuple(sorted(c.items()))) in listed, (dt, m, n, c)


def test_budget_from_environment(monkeypatch):
    for value, got in (("1.5", 1.5), ("0", 0.0), ("-2", 0.0), ("x", 3.0)):
        monkeypatch.setenv("NBWGMMA_AUTOTUNE_BUDGET", value)
        assert autotune.budget() == got
    monkeypatch.delenv("NBWGMMA_AUTOTUNE_BUDGET")
    assert autotune.budget() == 3.0


def test_enabled_by_environment(monkeypatch):
    for value, on in (("1", True), ("on", True), ("0", False), ("", False)):
        monkeypatch.setenv("NBWGMMA_AUTOTUNE", value)
        assert autotune.enabled() is on


def test_config_string_other_than_auto_is_an_error():
    from nbwgmma import MatmulError, matmul

    from .test_matmul_cpu import Fake

    with pytest.raises(MatmulError, match="'auto'"):
        matmul(Fake((8, 16), "f2"), Fake((16, 8), "f2"), config="fast")


def test_helper_kernels_small_grid_warning_is_silenced_even_highlighted():
    """``kernels.copy.sized_to_data`` (around the busy wait and the copy kernels) silences Numba's
    small-grid warning, plain or wrapped in terminal highlighting as Numba may print it."""
    import warnings

    from nbwgmma.kernels.copy import sized_to_data

    text = "Grid size 1 will likely result in GPU under-utilization due to low occupancy."
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with sized_to_data():
            warnings.warn(text)
            warnings.warn(f"\x1b[1m\x1b[1m{text}\x1b[0m\x1b[0m")
        warnings.warn("another warning")
    assert [str(w.message) for w in seen] == ["another warning"]


def test_the_tiles_padding_counts_where_it_costs_another_tile_much_real_work(sms_132):
    """padded_pick: the wave model counts a tile past M or N as full work. Where another tile does
    at least PAD_GAIN more real work per SM slot (work_fill), pick_tile takes it: 8256 x 8192 (256 x
    160 tiles fill 13 waves exactly, 128 x 256 tiles 15.8 of 16, but a 256-row tile row is 97%
    padding past M) in 128 x 256 tiles; 384 x 9984 in 128 x 256, not 256 x 160 (half of each tile
    past M); 11328 x 384 in 128 x 192, the 256-column tiles' second half past N. Where the gain is
    smaller the wave model's tile stays (5000 x 5000: 256 x 152 would do 1.0% more), and where the
    edges fall on the tiles both models agree (8192^3, 2048^3)."""
    from nbwgmma.frontend.tiles import PAD_GAIN, padded_pick, padded_score, wave_fill as wf

    assert pick_tile(8256, 8192, 1, "any") == (128, 256)
    assert wf(8256, 8192, 256, 160, 132) > wf(8256, 8192, 128, 256, 132)  # (the wave model's favourite)
    assert pick_tile(384, 9984, 1, "any") == (128, 256)
    assert pick_tile(11328, 384, 1, "any") == (128, 192)
    assert pick_tile(5000, 5000, 1, "any") == (256, 160)
    for m, n in ((8192, 8192), (2048, 2048)):
        assert pick_tile(m, n, 1, "any") == (128, 256)
    assert pick_tile(4096, 14336, 1, "any") == (256, 160)  # (as before: 14336 = 89.6 x 160)
    for m, n in ((8256, 8192), (5000, 5000), (777, 12345), (15024, 616)):
        first = padded_pick(m, n, 1, 132, "any")
        real = padded_score(m, n, 132, "any")
        assert 0 < real <= 1
        assert work_fill(m, n, *first, 132) <= wf(m, n, *first, 132)
    assert PAD_GAIN > 1
    # swapped where the swapped tiles do much more real work (616 columns: 128 x 256 tiles' third
    # column 40% used), as where they fill the waves better
    assert pick_swap(15024, 616, 4096, 16, 132) and not pick_swap(5000, 3000, 4096, 16, 132)


@pytest.mark.parametrize("m, n, tile", [
    # measured on an H200 against the wave model's tile (BENCHMARKS.md, 2026-12-04): after / before
    (12184, 320, (192, 160, 0)),    # 2.29x in 256 x 160 (128 x 256 before: the second column tile 25% used);
    #                                 192 x 160 (tall_tiles.TALL_WIDER) 1.20-1.24x that (2026-12-06, an H200)
    (8947, 592, (128, 192, 1)),     # 1.38x, swapped (128 x 256 before)
    (2089, 5904, (128, 192, 0)),    # 1.28x (256 x 136 before: 17 tile rows of 256 past 2089 rows)
    (8320, 1288, (192, 144, 0)),    # 1.23x in 128 x 224 (128 x 256 before); 192 x 144 since pick_tall
    (2176, 5568, (128, 256, 0)),    # 1.16x (256 x 128)
    (8024, 8192, (256, 152, 1)),    # 1.04x in 128 x 256 (256 x 160 before); 128 x 192 since pick_192; swapped 256 x
    #                                 152 since pick_swapped_256 weighs 128 x 192's share (held out 1.04x; unmeasured here)
    (10317, 2368, (192, 144, 0)),   # 0.995x in 128 x 216 (128 x 192 before); 192 x 144 since pick_tall
    (5000, 3000, (256, 152, 1)),    # unchanged: the sweep's swapped 256 x 152
    # measured on an H100 (2026-12-05 and -06): 192 x 144 over the swapped 256-row tile taken before
    (15831, 856, (192, 144, 0)),    # 1.17x (swapped 256 x 152 before)
    (12610, 1040, (192, 176, 0)),   # 1.12x in 192 x 144, held out (swapped 256 x 160 before); 192 x 176 1.13x that
    (14017, 592, (128, 192, 1)),    # 192 x 144 lost 0.76x here (less real work than the swapped tile)
    # measured on an H100 (2026-12-06): swapped 192-row tiles (tall_tiles.pick_swapped_tall)
    (12977, 1328, (192, 144, 1)),   # 1.16x (192 x 160 before; cuBLAS's tile there is 176 x 192)
    (14271, 576, (192, 176, 1)),    # 1.24x, held out (192 x 144 before)
    (14520, 784, (192, 160, 0)),    # swapped it fills worse: 0.67-0.70x measured
    # swapped 256-row tiles that fill the waves better (tiles.pick_swapped_256), measured on an H100 (2026-12-06)
    (1862, 2768, (256, 160, 1)),    # 1.15x (128 x 192 before; cuBLAS's tile there is 160 x 256)
    (264, 15456, (256, 136, 1)),    # 1.62x, held out (128 x 192 before)
    (2353, 8880, (256, 160, 1)),    # 1.21x (256 x 136 before: two waves and more)
    (5355, 992, (256, 168, 1)),     # 1.33x, held out (128 x 192 before)
    (3758, 7056, (192, 160, 0)),    # the swapped 256 x 136 does 1.9% more real work: not enough
])
def test_the_padding_aware_default_tiles_measured_on_the_gpu(sms_132, m, n, tile):
    """The bf16 default plan's (bm, bn, swapped) for K-major operands and a bf16 out, built from the
    arrays' descriptions alone (nbwgmma.precompile.cpu_plan: the plan a call makes)."""
    from nbwgmma.precompile import cpu_plan

    plan = cpu_plan("bf16", "KK", {}, rows=m, n=n, k=4096)
    assert (plan.cfg.bm, plan.cfg.bn, int(plan.swap)) == tile


def test_192_row_tiles_where_they_do_enough_more_real_work(sms_132):
    """pick_tall: 192 x 144 tiles (three consumers of 64 rows) where they do TALL_GAIN more real work
    per SM slot than pick_tile's tile: 432 columns in 3 tiles, not 2 of 256 mostly padding (measured
    1.19x on an H100); not where both fill alike (8192^3), where the last 192-row tile row is mostly
    padding (1741 x 6784), for fp8 or tf32 inputs, or for MN-major B (widths "64")."""
    for m, n in ((7623, 432), (2070, 4960), (7957, 2576), (14464, 2160), (6779, 15264)):
        assert pick_tall(m, n, 132, "any") == {"bm": 192, "bn": 144}, (m, n)
        assert TALL_EFF * work_fill(m, n, 192, 144, 132) >= TALL_GAIN * padded_score(m, n, 132, "any")
    for m, n in ((8192, 8192), (1741, 6784), (2207, 5488), (4096, 4096), (512, 8192)):
        assert pick_tall(m, n, 132, "any") is None, (m, n)
    assert pick_tall(7623, 432, 132, "64") is None and pick_tall(7623, 432, 132, None) is None
    assert pick_tall(7623, 432, 132, "any", 8) is None and pick_tall(7623, 432, 132, "any", 32) is None
    # fewer than two tile rows or columns: not measured, not taken (132 x 16096: one tile row 69% padding)
    for m, n in ((132, 16096), (19336, 16), (19336, 64), (383, 8192), (8192, 287)):
        assert pick_tall(m, n, 132, "any") is None, (m, n)


def test_wider_192_row_tiles_for_plain_products_where_they_fill_better(sms_132):
    """best_tall: a plain product takes 192 x 160 or 192 x 176 (TALL_WIDER) where that does more real
    work per SM slot, its share of 128 x 256's rate counted (14520 x 784: 380 tiles of 192 x 160, 94% of
    the slots, against 456 of 192 x 144, 78%); a fused bias or activation keeps 192 x 144 (wider
    epilogues spill); at a tie the narrower."""
    assert best_tall(14520, 784, 132)[1] == {"bm": 192, "bn": 160}
    assert best_tall(12610, 1040, 132)[1] == {"bm": 192, "bn": 176}
    assert work_fill(14520, 784, 192, 160, 132) > 1.19 * work_fill(14520, 784, 192, 144, 132)
    for m, n in ((14520, 784), (12610, 1040), (7623, 432)):
        assert best_tall(m, n, 132, plain=False)[1] == {"bm": 192, "bn": 144}
    assert pick_tall(7623, 432, 132, "any", plain=False) == pick_tall(7623, 432, 132, "any") == {"bm": 192, "bn": 144}
    assert best_tall(7623, 432, 132)[1] == {"bm": 192, "bn": 144}  # 432 = 3 x 144: none fills better
    score, tile = best_tall(12610, 1040, 132)
    assert score == TALL_WIDER[176] * work_fill(12610, 1040, 192, 176, 132) and set(TALL_WIDER) == {160, 176}


def test_192_row_tiles_over_swapped_ones_where_they_do_enough_more_real_work(sms_132):
    """tall_over_swap: 192 x 144 unswapped in place of pick_swap_wide's swapped tile where it does
    TALL_GAIN more real work per SM slot (measured 1.05-1.17x at five of six problems on an H100, 0.986x at
    the sixth); not where it does less (14017 x 592, 15153 x 1792: 0.76x and 0.89x measured), for fp8
    inputs, or for MN-major B."""
    for m, n in ((15831, 856), (14520, 784), (15480, 1152), (12610, 1040), (8865, 1568), (9382, 2256)):
        wide = pick_swap_wide(m, n, 16, 132, "any")
        assert wide is not None, (m, n)
        assert tall_over_swap(m, n, wide, 132, "any", plain=False) == {"bm": 192, "bn": 144}, (m, n)
        assert TALL_EFF * work_fill(m, n, 192, 144, 132) >= TALL_GAIN * SWAP256_EFF * work_fill(n, m, *wide, 132)
        assert tall_over_swap(m, n, wide, 132, "any") == best_tall(m, n, 132)[1], (m, n)  # (plain: maybe wider)
    for m, n, wide in ((14017, 592, (256, 160)), (15153, 1792, (256, 136))):
        assert tall_over_swap(m, n, wide, 132, "any") is None, (m, n)
    assert tall_over_swap(15831, 856, (256, 152), 132, "64") is None
    assert tall_over_swap(15831, 856, (256, 152), 132, "any", 8) is None


def test_swapped_256_row_tiles_where_they_do_enough_more_real_work(sms_132):
    """pick_swapped_256: swapped 256 x bn tiles (bn of TILE256_BN, rows along N) where, their SWAP256_EFF
    counted, they do SWAPPED_256_GAIN times the real work per SM slot of the tile taken, in one wave (1862 x
    2768: 132 tiles of 256 x 160, 95%, against 128 x 192's 225 in two waves, 79%; cuBLAS's tile there;
    measured 1.15x on an H100) or more (2353 x 8880: 525 tiles of 256 x 160 against 660 of 256 x 136;
    1.21x); for fp8 inputs too (e4m3 9442 x 496: 1.38x); not where the tile taken fills about as well, for
    tf32 inputs, or outside the problems measured (at most SMALL_M rows, K under SWAPPED_256_MIN_K)."""
    assert pick_swapped_256(1862, 2768, 4096, (128, 192), 0, 132) == {"bm": 256, "bn": 160, "swap": 1}
    assert work_fill(2768, 1862, 256, 160, 132) >= 1.15 * work_fill(1862, 2768, 128, 192, 132)
    assert pick_swapped_256(9848, 496, 4096, (128, 192), 0, 132) == {"bm": 256, "bn": 152, "swap": 1}
    assert pick_swapped_256(264, 15456, 4096, (128, 192), 0, 132) == {"bm": 256, "bn": 136, "swap": 1}
    assert pick_swapped_256(2353, 8880, 4096, (256, 136), 0, 132) == {"bm": 256, "bn": 160, "swap": 1}
    assert math.ceil(8880 / 256) * math.ceil(2353 / 160) > 3 * 132  # (four waves)
    assert SWAP256_EFF * work_fill(8880, 2353, 256, 160, 132) >= SWAPPED_256_GAIN * work_fill(2353, 8880, 256, 136, 132)
    assert pick_swapped_256(9442, 496, 4096, (128, 192), 0, 132, input_bits=8) == {"bm": 256, "bn": 144, "swap": 1}
    assert pick_swapped_256(1862, 2768, 4096, (128, 192), 0, 132, input_bits=32) is None
    for m, n, tile, swapped in ((8192, 8192, (128, 256), 0), (5000, 3000, (256, 152), 1), (2048, 2048, (128, 128), 0),
                                (1862, 2768, (256, 160), 1), (3758, 7056, (192, 160), 0), (512, 8192, (128, 256), 0)):
        assert pick_swapped_256(m, n, 4096, tile, swapped, 132) is None, (m, n)
    # the problems measured: more than SMALL_M rows, K of at least SWAPPED_256_MIN_K
    assert pick_swapped_256(264, 15456, SWAPPED_256_MIN_K, (128, 192), 0, 132) is not None
    assert pick_swapped_256(264, 15456, 512, (128, 192), 0, 132) is None
    assert pick_swapped_256(144, 32000, 4096, (128, 256), 0, 132) is None
    # the plans the default path builds (e4m3 into bf16 too)
    from nbwgmma.precompile import cpu_plan

    for dt, m, n, tile in (("e4m3", 9442, 496, (256, 144, 1)), ("f16", 2353, 8880, (256, 160, 1)),
                           ("e4m3", 144, 32000, (128, 256, 0))):
        plan = cpu_plan(dt, "KK", {}, rows=m, n=n, k=4096)
        assert (plan.cfg.bm, plan.cfg.bn, int(plan.swap)) == tile, (dt, m, n)


@pytest.mark.parametrize("dtype, m, n, k, before, after", [
    # held out on an H100 (2026-12-06, third session), the tile before and after forced: 1.006x, 1.041x,
    # 1.074x, 1.119x
    ("bf16", 5426, 12592, 4096, (128, 192, 0), (256, 160, 1)),
    ("bf16", 7735, 9936, 2048, (256, 160, 0), (256, 144, 1)),
    ("e4m3", 9864, 1008, 8192, (128, 208, 0), (256, 152, 1)),
    ("e4m3", 3610, 2560, 2048, (256, 152, 0), (256, 144, 1)),
])
def test_swapped_256_weighs_the_share_of_the_tile_taken(sms_132, dtype, m, n, k, before, after):
    """pick_swapped_256's ``share``: the default path weighs the real work of the unswapped tile taken by
    its share of a 128 x 256 tile's rate (shares.share, which rates the 192-row tiles by TALL_EFF,
    TALL_WIDER and TALL_SHORT_K), so the swapped 256-row tile need not do SWAPPED_256_GAIN times the work of a
    tile the model rates below 1.0; by its real work alone (share 1.0) the tile before stays."""
    from nbwgmma.frontend.shares import SHORT_K, TALL_SHORT_K, share
    from nbwgmma.frontend.tall_tiles import tall_shares

    assert share((192, 144)) == TALL_EFF and share((192, 176), 8192) == share((192, 176), SHORT_K) == TALL_WIDER[176]
    assert share((192, 160), SHORT_K) == TALL_SHORT_K[160] and share([192, 160]) == TALL_WIDER[160]
    assert share((192, 144), SHORT_K + 1) == TALL_EFF and share((192, 144), SHORT_K) == TALL_SHORT_K[144]
    assert tall_shares(k=SHORT_K) == {144: TALL_SHORT_K[144], 160: TALL_SHORT_K[160], 176: TALL_WIDER[176]}
    assert tall_shares(plain=False) == {144: TALL_EFF}
    assert _default_tile(dtype, m, n, k) == after
    bits = 8 if dtype == "e4m3" else 16
    tile = before[:2]
    assert share(tile, k) < 1.0
    assert pick_swapped_256(m, n, k, tile, 0, 132, bits) is None
    assert pick_swapped_256(m, n, k, tile, 0, 132, bits, share(tile, k)) == {"bm": 256, "bn": after[1], "swap": 1}


def test_swapped_192_row_tiles_where_they_do_enough_more_real_work(sms_132):
    """pick_swapped_tall: a tall plain 16-bit product swapped into 192-row tiles along N where they do
    SWAPPED_TALL_GAIN more real work per SM slot than the tile taken (12977 x 1328: N's 7 tiles of 192
    99% filled against 9 of 160; measured 1.16x on an H100); not where they fill worse (14520 x 784),
    for products wider than tall, fp8 inputs, or fewer than two tile rows and columns."""
    assert pick_swapped_tall(12977, 1328, 132, (192, 160), 0) == {"swap": 1, "bm": 192, "bn": 144}
    assert best_tall(1328, 12977, 132)[0] >= SWAPPED_TALL_GAIN * work_fill(12977, 1328, 192, 160, 132)
    assert pick_swapped_tall(10230, 1328, 132, (256, 160), 1) == {"swap": 1, "bm": 192, "bn": 144}
    assert pick_swapped_tall(14271, 576, 132, (192, 144), 0) == {"swap": 1, "bm": 192, "bn": 176}
    assert pick_swapped_tall(14520, 784, 132, (192, 160), 0) is None
    assert pick_swapped_tall(1328, 12977, 132, (128, 256), 0) is None  # (wider than tall)
    assert pick_swapped_tall(12977, 1328, 132, (192, 160), 0, input_bits=8) is None
    assert pick_swapped_tall(12977, 380, 132, (128, 256), 0) is None  # (N of fewer than two 192-row tiles)
    # where the tile taken fills as well, it stays (8192^3, 5000 x 3000's swapped 256 x 152)
    assert pick_swapped_tall(8192, 8192, 132, (128, 192), 0) is None
    assert pick_swapped_tall(5000, 3000, 132, (256, 152), 1) is None


def test_one_wave_of_128_row_tiles_where_it_does_much_more_real_work(sms_132):
    """pick_one_wave: the 128 x bn tile (bn of ONE_WAVE_BN, swapped or not) whose one wave does the most real
    work, where that is ONE_WAVE_GAIN times the tile taken's: e4m3 798 x 2704 in swapped 128 x 136 tiles (132
    tiles, 94% real work; cuBLASLt's tile there) for 128 x 192 (105 tiles, 67%); not where the tile taken
    fills its waves about as well (8192^3, 5000 x 3000), nor swapped where the caller says it cannot be."""
    assert pick_one_wave(798, 2704, (128, 192), 0, 132) == {"bm": 128, "bn": 136, "swap": 1}
    assert work_fill(2704, 798, 128, 136, 132) >= ONE_WAVE_GAIN * work_fill(798, 2704, 128, 192, 132)
    assert pick_one_wave(263, 8096, (128, 192), 0, 132) == {"bm": 128, "bn": 136, "swap": 1}
    assert pick_one_wave(1363, 2368, (128, 256), 0, 132) == {"bm": 128, "bn": 200, "swap": 0}
    assert pick_one_wave(2535, 1264, (128, 256), 0, 132) == {"bm": 128, "bn": 200, "swap": 1}
    # unswapped only: the best unswapped width, or none where it does not gain enough
    assert pick_one_wave(2535, 1264, (128, 256), 0, 132, swappable=False) == {"bm": 128, "bn": 216, "swap": 0}
    assert pick_one_wave(1363, 2368, (128, 256), 0, 132, swappable=False) == {"bm": 128, "bn": 200, "swap": 0}
    for m, n, tile, swapped in ((8192, 8192, (128, 192), 0), (5000, 3000, (256, 152), 1), (4096, 4096, (128, 256), 0),
                                (512, 8192, (128, 256), 0), (2048, 2048, (128, 128), 0)):
        assert pick_one_wave(m, n, tile, swapped, 132) is None, (m, n)
    # the plan takes it for K-major A and B and a 16-bit out stored by TMA; never narrower than 128
    from nbwgmma.precompile import cpu_plan

    plan = cpu_plan("e4m3", "KK", {}, rows=798, n=2704, k=8192)
    assert (plan.cfg.bm, plan.cfg.bn, plan.swap) == (128, 136, True)
    plan = cpu_plan("bf16", "KN", {}, rows=798, n=2704, k=8192)
    assert (plan.cfg.bm, plan.cfg.bn, plan.swap) == (128, 192, False)
    assert min(ONE_WAVE_BN) == 128 and all(bn % 8 == 0 for bn in ONE_WAVE_BN)


def test_auto_times_192_row_tiles_where_the_model_has_them_level(sms_132):
    """config="auto" times 192 x 144 tiles for 16-bit inputs stored by TMA where the model has them
    doing at least the real work of the default's tile (2457 x 9568: 1.016x, short of pick_tall's
    2%), not where they do less (8192^3), not for fp8 or direct stores; precompile lists them."""
    tall = {"bm": 192, "bn": 144}
    assert pick_tall(2457, 9568, 132, "any", plain=False) is None  # (plain: 192 x 160 fills 1.07x better)
    assert tall in autotune.candidates("f32.bf16.bf16", 2457, 9568, 4096, "tma", {"bm": 128, "bn": 256})
    assert tall not in autotune.candidates("f32.bf16.bf16", 8192, 8192, 8192, "tma", {"bm": 128, "bn": 192})
    assert tall not in autotune.candidates("f32.e4m3.e4m3", 2457, 9568, 4096, "tma", {"bm": 128, "bn": 256})
    assert tall not in autotune.candidates("f32.bf16.bf16", 2457, 9568, 4096, "direct", {"bm": 128, "bn": 256})
    assert tall not in autotune.candidates("f32.bf16.bf16", 2457, 9568, 4096, "tma", {"bm": 128, "bn": 256},
                                           a_major="MN")
    assert tall in autotune.challengers("f32.f16.f16") and tall not in autotune.challengers("f32.e4m3.e4m3")


@pytest.mark.parametrize("m, n, short, long", [
    # held out on an H100 (2026-12-06): the short-K pick against the long-K one, both forced, at K = 2048
    (2522, 12128, (128, 192, 0), (256, 160, 0)),
    (8199, 9568, (128, 256, 0), (192, 144, 0)),
    # (swapped 256 x 144 at short K since pick_swapped_256 weighs 256 x 160's share: held out 1.04x elsewhere,
    # unmeasured here)
    (4738, 14272, (256, 144, 1), (192, 144, 0)),
])
def test_short_k_takes_its_own_shares(sms_132, m, n, short, long):
    """tiles.share / tall_tiles.best_tall: at K <= SHORT_K the tile model rates 128 x 192, 256 x 160 and the
    192-row tiles by SHORT_K_SHARES and TALL_SHORT_K (a short main loop weighs the bigger tiles' fixed
    costs more); above it by TILES, TILE256_FAST and TALL_EFF / TALL_WIDER as before."""
    from nbwgmma.frontend.shares import TALL_SHORT_K
    from nbwgmma.frontend.tiles import SHORT_K, SHORT_K_SHARES, TILE256_FAST, TILES, share

    assert share((128, 192), SHORT_K) == SHORT_K_SHARES[(128, 192)] != share((128, 192), SHORT_K + 1) \
        == share((128, 192)) == TILES[(128, 192)]
    assert share((256, 160), SHORT_K) == SHORT_K_SHARES[(256, 160)] != share((256, 160)) == TILE256_FAST[160]
    assert share((128, 256), SHORT_K) == share((128, 256)) == 1.0
    assert best_tall(7623, 432, 132, k=SHORT_K)[0] == pytest.approx(
        TALL_SHORT_K[144] / TALL_EFF * best_tall(7623, 432, 132)[0])
    for k, tile in ((SHORT_K, short), (1024, short), (4096, long), (8192, long)):
        assert _default_tile("bf16", m, n, k) == tile, k


@pytest.mark.parametrize("dtype, m, n, k, before, after", [
    # held out on an H100 (2026-12-06), the tile before and after forced: 1.16x, 1.05x, 1.05x
    ("bf16", 1138, 15552, 2048, (128, 216, 0), (192, 144, 0)),
    ("bf16", 1207, 15552, 2048, (128, 200, 0), (256, 152, 0)),
    ("e4m3", 4021, 7488, 4096, (128, 232, 0), (256, 160, 0)),
    # K = 8192: held out twice, 0.99x over 52 problems; these took WIDE_LOW's tiles at 0.93x and 0.95x
    ("e4m3", 3394, 6224, 8192, (128, 216, 0), (128, 216, 0)),
    ("bf16", 5165, 4400, 8192, (128, 232, 0), (128, 232, 0)),
])
def test_wide_widths_take_their_own_shares(sms_132, monkeypatch, dtype, m, n, k, before, after):
    """shares.WIDE_LOW: at K <= WIDE_LOW_MAX_K the wide 128-row tiles of 200, 216, 232, 240 and 248 columns
    are rated below WIDE_EFF (the short-K shares do not name them), 208 and 224 at it; at a longer K (or
    none given) all at WIDE_EFF. Without the table the default path took the wide tile, with it the tile
    that measured faster; at K = 8192 it keeps the wide one."""
    from nbwgmma.frontend import shares

    assert set(shares.WIDE_LOW) == set(shares.WIDE_BN) - {208, 224}
    assert shares.SHORT_K < shares.WIDE_LOW_MAX_K < 8192
    for bn in shares.WIDE_BN:
        want = shares.WIDE_LOW.get(bn, shares.WIDE_EFF)
        assert shares.share((128, bn), shares.WIDE_LOW_MAX_K) == shares.share((128, bn), shares.SHORT_K) == want
        assert shares.share((128, bn)) == shares.share((128, bn), shares.WIDE_LOW_MAX_K + 1) == shares.WIDE_EFF
        assert (want < shares.WIDE_EFF) == (bn in shares.WIDE_LOW)

    assert _default_tile(dtype, m, n, k) == after
    monkeypatch.setattr(shares, "WIDE_LOW", {})
    assert _default_tile(dtype, m, n, k) == before


@pytest.mark.parametrize("dtype, m, n, k, before, after", [
    # the second hold-out's bf16 picks (1.060x over 16 on an H100): the tile before, the tile now
    ("bf16", 9787, 1312, 2048, (256, 136, 0), (192, 176, 1)),
    ("bf16", 16250, 1616, 1024, (256, 136, 0), (128, 208, 0)),
    ("bf16", 674, 11664, 1024, (256, 136, 0), (256, 136, 1)),
    ("f16", 4452, 8864, 1024, (256, 136, 0), (128, 192, 0)),
    # e4m3 keeps 256 x 136 (0.995x over 5, 1.006x over 11: no gain)
    ("e4m3", 7471, 1072, 2048, (256, 136, 0), (256, 136, 0)),
    ("e4m3", 12269, 2160, 1024, (256, 136, 0), (256, 136, 0)),
])
def test_unswapped_256_by_136_takes_its_own_share_for_16_bit_inputs(sms_132, monkeypatch, dtype, m, n, k, before,
                                                                     after):
    """shares.TILE256_LOW: unswapped 256 x 136 tiles of 16-bit inputs are rated at 0.90 of a 128 x 256 tile's rate
    (fp8 ones and every other 256-row width keep TILE256_EFF / TILE256_FAST); without the table the default path
    took 256 x 136 in each of these, with it the tile that measured faster (bf16; fp8 unchanged)."""
    from nbwgmma.frontend import shares

    assert shares.share((256, 136), 1024) == shares.share((256, 136)) == shares.TILE256_LOW[136] == 0.90
    assert shares.share((256, 136), bits=8) == shares.share((256, 144), bits=16) == shares.TILE256_EFF
    assert shares.share((256, 160), bits=16) == shares.TILE256_FAST[160]

    assert _default_tile(dtype, m, n, k) == after
    monkeypatch.setattr(shares, "TILE256_LOW", {})
    assert _default_tile(dtype, m, n, k) == before


def test_k_halves_for_products_of_few_tiles(sms_132):
    """pick_k_halves: 128 x 128 tiles with K in halves on clusters of two in place of 64 x 128 tiles, for
    16-bit inputs (fp8 ones of N <= K_HALVES_FP8_MAX_N) at K >= K_HALVES_MIN_K, where the halves fit one
    wave (as many CTAs as the 64 x 128 tiles, or one tile row's more; 1876 x 480: 60 tiles of 128 x 128,
    120 halves, as many); not for wider fp8 products, tf32 inputs, shorter K, other tiles (439 x 320's
    64 x 64) or more than a wave; the default path's plans in every layout, not with a given config."""
    from nbwgmma.frontend.few_tiles import K_HALVES_FP8_MAX_N, K_HALVES_MIN_K, K_HALVES_TILE, pick_k_halves
    from nbwgmma.precompile import cpu_plan

    assert K_HALVES_TILE == {"bm": 128, "bn": 128, "cluster_k": 2}
    assert pick_k_halves(1876, 480, 8192, (64, 128), 132) == K_HALVES_TILE
    assert pick_k_halves(8192, 128, 16384, (64, 128), 132) == K_HALVES_TILE
    assert pick_k_halves(1876, 480, K_HALVES_MIN_K - 1024, (64, 128), 132) is None
    assert pick_k_halves(1876, 480, 8192, (64, 128), 132, input_bits=8) is None
    assert pick_k_halves(1876, 480, 8192, (64, 128), 132, input_bits=32) is None
    # fp8: held out on an H100 (2026-12-06) 1.46x, 1.45x the 64 x 128 tiles; wider ones lost (896 x 1040 0.84x)
    assert K_HALVES_FP8_MAX_N == 320
    assert pick_k_halves(3067, 176, 16384, (64, 128), 132, input_bits=8) == K_HALVES_TILE
    assert pick_k_halves(1930, 320, 8192, (64, 128), 132, input_bits=8) == K_HALVES_TILE
    assert pick_k_halves(1930, 321, 8192, (64, 128), 132, input_bits=8) is None
    assert pick_k_halves(896, 1040, 8192, (64, 128), 132, input_bits=8) is None
    assert pick_k_halves(3067, 176, 4096, (64, 128), 132, input_bits=8) is None
    assert pick_k_halves(1876, 480, 8192, (64, 64), 132) is None
    assert pick_k_halves(1876, 480, 8192, (128, 128), 132) is None
    assert pick_k_halves(1876, 480, 8192, (64, 128), 114) is None  # (120 halves: more than a wave)
    assert pick_k_halves(2140, 480, 8192, (64, 128), 132) is None  # (34 tile rows of 64: 132 tiles; 17 of 128: 136 halves)
    assert_default_tiles((("bf16", "KK", 1876, 480, 8192, (128, 128, 2)), ("f16", "MN", 2673, 320, 8192, (128, 128, 2)),
                          ("bf16", "KN", 953, 800, 16384, (128, 128, 2)), ("bf16", "KK", 1876, 480, 4096, (64, 128, 1)),
                          ("e4m3", "KK", 1876, 480, 8192, (64, 128, 1)), ("bf16", "KK", 439, 320, 8192, (64, 64, 1)),
                          ("e4m3", "KK", 3067, 176, 16384, (128, 128, 2)), ("e4m3", "KK", 2296, 272, 16384, (128, 128, 2))),
                         "bm", "bn", "cluster_k")
    assert cpu_plan("bf16", "KK", {"stages": 4}, rows=1876, n=480, k=8192).cfg.cluster_k == 1


def test_k_slices_for_products_of_few_64_column_tiles(sms_132):
    """pick_k_split: 64 x 64 tiles in two split-K slices (8 stages) in place of 64 x 64 tiles, for 16-bit
    inputs at K >= K_SPLIT_MIN_K, where both slices of every tile fit one wave (340 x 208: 24 tiles, 48
    CTAs); not for fp8 inputs, shorter K, other tiles or more than a wave (2215 x 96: 70 tiles); the
    default path's plans in every layout."""
    from nbwgmma.frontend.few_tiles import K_SPLIT_MIN_K, K_SPLIT_TILE, pick_k_split

    assert K_SPLIT_TILE == {"bm": 64, "bn": 64, "stages": 8, "split": 2}
    assert pick_k_split(340, 208, 8192, (64, 64), 132) == K_SPLIT_TILE
    assert pick_k_split(1255, 176, 16384, (64, 64), 132) == K_SPLIT_TILE  # (60 tiles: 120 CTAs)
    assert pick_k_split(340, 208, K_SPLIT_MIN_K - 1024, (64, 64), 132) is None
    assert pick_k_split(340, 208, 8192, (64, 64), 132, input_bits=8) is None
    assert pick_k_split(340, 208, 8192, (64, 128), 132) is None
    assert pick_k_split(2215, 96, 8192, (64, 64), 132) is None
    assert_default_tiles((("bf16", "KK", 340, 208, 8192, (64, 64, 2)), ("f16", "MN", 1358, 16, 8192, (64, 64, 2)),
                          ("bf16", "KN", 1255, 176, 16384, (64, 64, 2)), ("bf16", "KK", 518, 272, 4096, (64, 64, 1)),
                          ("e4m3", "KK", 340, 208, 8192, (64, 64, 1)), ("bf16", "KN", 2215, 96, 8192, (64, 64, 1)),
                          ("bf16", "KK", 2215, 96, 8192, (64, 96, 3))),
                         "bm", "bn", "split")  # (pick_k_slices_64, K-major A and B)


def test_k_slices_for_one_wave_of_few_128_row_tiles(sms_132):
    """pick_k_slices: 128-row tiles of a width in steps of 8 with K in 2-4 split-K slices in place of one wave of
    128 x 128 tiles (K in halves or whole) or 64 x 128 tiles, where they fill the wave K_SLICES_GAIN times better
    (1169 x 408 x 8192: 40 tiles of 128 x 128 in halves, 80 CTAs, 0.44 of the slots' work; 30 tiles of 128 x 136 in
    four slices, 120 CTAs, 0.83), for 16-bit inputs at K >= K_SLICES_MIN_K (at 4096 the hold-out's six all lost) and
    M >= K_SLICES_MIN_M; not for fp8, other tiles, products that fill their wave or overflow it; the default path's
    plans with K-major A and B only (held out so)."""
    from nbwgmma.frontend.few_tiles import (K_SLICES_GAIN, K_SLICES_MIN_K, K_SLICES_MIN_M, pick_k_slices,
                                            slices_fill)
    from nbwgmma.precompile import cpu_plan

    assert (K_SLICES_MIN_K, K_SLICES_MIN_M, K_SLICES_GAIN) == (8192, 513, 1.25)
    assert abs(slices_fill(1169, 408, 8192, 128, 128, 2, 132) - 0.441) < 1e-3
    assert abs(slices_fill(1169, 408, 8192, 128, 136, 4, 132) - 0.830) < 1e-3
    assert slices_fill(1169, 408, 8192, 128, 64, 4, 132) == 0.0  # (280 CTAs: more than a wave)
    assert pick_k_slices(1169, 408, 8192, (128, 128), True, 132) == {"bm": 128, "bn": 136, "split": 4}
    assert pick_k_slices(1344, 432, 8192, (128, 128), True, 132) == {"bm": 128, "bn": 144, "split": 4}
    assert pick_k_slices(2211, 200, 16384, (128, 128), True, 132) == {"bm": 128, "bn": 104, "split": 3}
    assert pick_k_slices(1169, 408, 4096, (128, 128), True, 132) is None
    assert pick_k_slices(1169, 408, 8192, (128, 128), True, 132, input_bits=8) is None
    assert pick_k_slices(500, 408, 8192, (128, 128), True, 132) is None
    assert pick_k_slices(1169, 408, 8192, (64, 64), False, 132) is None
    assert pick_k_slices(1876, 480, 8192, (128, 128), True, 132) is None  # (0.67 filled: 0.89 is not 1.25x)
    assert pick_k_slices(8192, 8192, 8192, (128, 128), False, 132) is None  # (many waves)
    assert_default_tiles((("bf16", "KK", 1169, 408, 8192, (128, 136, 4, 1)), ("f16", "KK", 971, 760, 16384, (128, 192, 4, 1)),
                          ("bf16", "KN", 1169, 408, 8192, (128, 128, 1, 2)), ("bf16", "KK", 1169, 408, 4096, (64, 128, 1, 1)),
                          ("bf16", "KK", 1876, 480, 8192, (128, 128, 1, 2))),
                         "bm", "bn", "split", "cluster_k")
    assert cpu_plan("bf16", "KK", {"stages": 4}, rows=1169, n=408, k=8192).cfg.split == 1


def test_the_class_tells_a_staged_operand_from_one_read_in_place(sms_132, monkeypatch):
    """problem_key: an operand read through its K-major staging copy (rows 16 bytes off the sectors, K
    = 8136) is keyed "K*", one read in place "K", so a choice timed on one never serves the other."""
    import types as pytypes

    from numba import cuda

    from nbwgmma.precompile import cpu_plan

    monkeypatch.setattr(cuda, "get_current_device", lambda: pytypes.SimpleNamespace(name=b"NVIDIA H100 80GB HBM3"))
    staged = cpu_plan("bf16", "KK", {}, rows=8192, n=8192, k=8136)
    assert staged.a_path[1] is not None and staged.b_path[1] is None  # (the staging rule takes B's)
    in_place = cpu_plan("bf16", "KK", {}, rows=8192, n=8192, k=8128)
    keys = [autotune.problem_key("f32.bf16.bf16", "bf16", p.a_path, p.b_path, "tma", 8192, 8192, 8136)
            for p in (staged, in_place)]
    assert "|K/K*-major|" in keys[0] and "|K/K-major|" in keys[1], keys


def test_k_slices_for_one_wave_of_few_64_row_tiles(sms_132):
    """pick_k_slices_64: 64-row tiles of a width in steps of 8 with K in 2-4 split-K slices in place of one wave of
    64 x 64 tiles (K whole or in pick_k_split's two slices), where they fill the wave K_SLICES_GAIN times better
    (1893 x 136 x 8192: 90 tiles of 64 x 64, K whole, 0.48 of the slots' work; 30 tiles of 64 x 136 in four
    slices, 120 CTAs, 0.90); among those within K_SLICES_64_NEAR of the best fill, the one whose CTAs pull the
    fewest operand rows (1634 x 160 x 8192: 64 x 80 in two slices and 64 x 160 in four fill it alike, 144 x 64
    rows a CTA against 224 x 32); 64 x 64 ones with 8 stages; 16-bit inputs, K >= K_SLICES_MIN_K, M >=
    K_SLICES_MIN_M; not for fp8, other tiles, products that overflow the wave; the default path's plans with
    K-major A and B only, their stages as many as fit where wider than 64."""
    from nbwgmma.frontend.few_tiles import K_SLICES_64_NEAR, pick_k_slices_64, slices_fill
    from nbwgmma.precompile import cpu_plan

    assert K_SLICES_64_NEAR == 0.95
    assert abs(slices_fill(1893, 136, 8192, 64, 64, 1, 132) - 0.476) < 1e-3
    assert abs(slices_fill(1893, 136, 8192, 64, 136, 4, 132) - 0.896) < 1e-3
    assert pick_k_slices_64(1893, 136, 8192, (64, 64), 1, 132) == {"bm": 64, "bn": 136, "split": 4}
    assert pick_k_slices_64(2050, 56, 8192, (64, 64), 2, 132) == {"bm": 64, "bn": 64, "split": 4, "stages": 8}
    assert pick_k_slices_64(1634, 160, 8192, (64, 64), 1, 132) == {"bm": 64, "bn": 160, "split": 4}
    # (64 x 112 in three slices fills 0.856 against 64 x 72 in two 0.888: near enough, and 176 x 64 rows a CTA
    # against 136 x 96)
    assert pick_k_slices_64(823, 328, 12288, (64, 64), 1, 132) == {"bm": 64, "bn": 112, "split": 3}
    assert pick_k_slices_64(1893, 136, 4096, (64, 64), 1, 132) is None
    assert pick_k_slices_64(1893, 136, 8192, (64, 64), 1, 132, input_bits=8) is None
    assert pick_k_slices_64(500, 136, 8192, (64, 64), 1, 132) is None
    assert pick_k_slices_64(1893, 136, 8192, (64, 128), 1, 132) is None
    assert pick_k_slices_64(8192, 136, 8192, (64, 64), 1, 132) is None  # (many waves)
    assert_default_tiles((("bf16", "KK", 1893, 136, 8192, (64, 136, 4)), ("f16", "KK", 2050, 56, 8192, (64, 64, 4)),
                          ("bf16", "KK", 704, 528, 8192, (64, 176, 4)), ("f16", "KK", 2563, 112, 8192, (64, 112, 3)),
                          ("bf16", "KN", 1893, 136, 8192, (64, 64, 1)), ("f16", "MN", 1358, 16, 8192, (64, 64, 2)),
                          ("bf16", "KK", 340, 208, 8192, (64, 64, 2)), ("bf16", "KK", 1893, 136, 4096, (64, 64, 1))),
                         "bm", "bn", "split")
    assert cpu_plan("bf16", "KK", {}, rows=2050, n=56, k=8192).cfg.stages == 8
    assert cpu_plan("bf16", "KK", {}, rows=2078, n=200, k=8192).cfg.stages < 8  # (64 x 200: 8 stages do not fit)


def test_k_slices_are_challengers_for_one_wave_of_few_tiles(sms_132):
    """For a 16-bit product of K-major A and B at K >= 8192 and M > 512 stored by TMA, unswapped, the best K
    slices of 64-row and 128-row tiles (few_tiles.best_slices_64, best_slices) are the first challengers where
    they fit one wave, the default's own left out (1169 x 408 x 8192: the default takes 128 x 136 in four slices,
    64 x 208 in three ran faster on an H100); none for fp8, MN-major operands, other epilogues, a swapped
    default, shorter K, fewer rows or products of many waves."""
    kind = "f32.bf16.bf16"
    assert autotune.candidates(kind, 1169, 408, 8192, "tma", {"bm": 128, "bn": 136, "split": 4, "swap": 0})[1] == \
        {"bm": 64, "bn": 208, "split": 3}
    assert autotune.candidates(kind, 1893, 136, 8192, "tma", {"bm": 64, "bn": 136, "split": 4, "swap": 0})[1] == \
        {"bm": 128, "bn": 72, "split": 4}
    assert autotune.candidates(kind, 1893, 136, 8192, "tma", {"bm": 64, "bn": 64})[1:3] == \
        [{"bm": 64, "bn": 136, "split": 4}, {"bm": 128, "bn": 72, "split": 4}]
    args = (1169, 408, 8192, "tma", {"bm": 128, "bn": 136, "split": 4})
    assert autotune.slices_challengers(kind, *args, "K", "K", False) == [{"bm": 64, "bn": 208, "split": 3}]
    assert autotune.slices_challengers("f32.e4m3.e4m3", *args, "K", "K", False) == []
    assert autotune.slices_challengers(kind, *args, "MN", "K", False) == []
    assert autotune.slices_challengers(kind, *args, "K", "MN", False) == []
    assert autotune.slices_challengers(kind, *args, "K", "K", True) == []
    assert autotune.slices_challengers(kind, 1169, 408, 8192, "direct", None, "K", "K", False) == []
    assert autotune.slices_challengers(kind, 1169, 408, 4096, "tma", None, "K", "K", False) == []
    assert autotune.slices_challengers(kind, 500, 408, 8192, "tma", None, "K", "K", False) == []
    assert autotune.slices_challengers(kind, 8192, 8192, 8192, "tma", None, "K", "K", False) == []
