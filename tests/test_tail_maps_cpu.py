"""B's last tile column and A's last tile row through maps of the rows N and M have there
(GemmConfig.b_tail, a_tail), without a GPU:
the configuration's rules, the kernels' SASS, the plans that take it and their maps' boxes. The
simulator runs it in tests/sim_frontend_cases.py (exact results, an amax that must not count the
stale rows)."""

import math

import pytest
from numba import types

from nbwgmma.errors import ConfigError
from nbwgmma.frontend import tails as tails_mod
from nbwgmma.kernels.gemm import GemmConfig, gemm_kernel
from nbwgmma.precompile import cpu_plan
from nbwgmma.report import compile_reports


@pytest.mark.parametrize("kw, rule", [
    (dict(b_tail=True, b_major="MN", bn=128), "K-major"),
    (dict(b_tail=True, batched=True), "no batch"),
    (dict(b_tail=True, stream_k=1, bn=128), "no stream_k"),
    (dict(b_tail=True, cluster=2), "no cluster sharing B"),
    (dict(a_tail=True, a_major="MN"), "K-major"),
    (dict(a_tail=True, batched=True), "no batch"),
    (dict(a_tail=True, stream_k=1, bn=128), "no stream_k"),
    (dict(a_tail=True, cluster=2, multicast="A", bm=256, bn=128), "no cluster sharing A"),
])
def test_tail_map_config_rules(kw, rule):
    """b_tail (a_tail) takes a K-major B (A) read tile by tile by one CTA: no MN-major boxes, batch,
    stream-K or cluster that shares that operand out; the refusal names the rule and what was given."""
    with pytest.raises(ConfigError, match=rule):
        GemmConfig("f32.bf16.bf16", **kw)


def test_b_tail_config_keys_apart_and_masks_the_padding():
    """A b_tail kernel is a kernel of its own (its key round-trips and differs from the plain one's);
    its padding columns hold stale B rows, so an amax masks them (zero_padding off)."""
    plain = GemmConfig("f32.bf16.bf16", out="e4m3", epilogue="tma", amax=True)
    tail = GemmConfig("f32.bf16.bf16", out="e4m3", epilogue="tma", amax=True, b_tail=True)
    assert plain.zero_padding and not tail.zero_padding
    assert plain.key() != tail.key() and GemmConfig(*tail.key()).key() == tail.key()
    assert GemmConfig(*plain.key()).key() == plain.key() and not GemmConfig(*plain.key()).b_tail
    assert GemmConfig("f32.bf16.bf16", cluster=2, multicast="A", bm=256, bn=128, b_tail=True).b_tail
    both = GemmConfig("f32.bf16.bf16", cluster=2, a_tail=True)  # (a cluster sharing B takes A's tail)
    assert both.a_tail and not both.zero_padding and GemmConfig(*both.key()).key() == both.key()
    assert len({GemmConfig("f32.bf16.bf16", a_tail=a, b_tail=b).key() for a in (0, 1) for b in (0, 1)}) == 4


def test_b_tail_kernels_compile_clean():
    """The kernels take B's second map after B's (and A's after that): no spill, no local memory."""
    cfgs = [GemmConfig("f32.bf16.bf16", epilogue="tma", b_tail=True, **kw)
            for kw in (dict(), dict(bm=64, bn=128, stages=8, a_tail=True), dict(bm=256, bn=128, cluster=2, multicast="A"),
                       dict(bm=128, bn=144, a_tail=True), dict(split=2))]
    jobs = []
    for cfg in cfgs:
        ws = (types.Array(types.float32, 1, "C"), types.Array(types.int32, 1, "C")) if cfg.uses_workspace else ()
        maps = (types.uint64,) * (4 + cfg.a_tail)
        jobs.append((gemm_kernel(cfg), maps + (types.int32,) * 3 + (types.float32,) + ws, None))
    for cfg, rep in zip(cfgs, compile_reports(jobs)):
        assert rep.spill_bytes == 0 and rep.local_memory_ops == 0, (cfg, rep.warnings)
        assert rep.sass["UTMALDG"] >= 2 and rep.sass.get("HGMMA", 0) >= 4, cfg
        assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored, rep.warnings


@pytest.mark.parametrize("m, n, k, layout, tail, a_tail", [
    (263, 11088, 4096, "KK", (80, 64), (8, 64)),     # 128 x 256 tiles: 80 rows of B in the last column
    (2692, 8720, 4096, "KK", (16, 64), (8, 64)),     # 16 rows
    (1000, 712, 520, "KK", (72, 64), (40, 64)),       # 64 x 128 tiles: 712 = 5 x 128 + 72
    (768, 1536, 4096, "KK", (24, 64), None),      # one wave of 128 x 72 tiles: 1536 = 21 x 72 + 24
    (4096, 4096, 4096, "KK", None, None),         # whole 128 x 256 tiles: one map
    (8192, 8192, 8192, "KK", (128, 64), None),    # 128 x 192 tiles: 8192 = 42 x 192 + 128
    (263, 11088, 4096, "KN", None, (8, 64)),         # N-major B: 64-column boxes, not taken
    (7465, 1168, 4096, "KK", (176, 64), (16, 64)),    # swapped (the kernel's B is A): 7465 = 38 x 192 + 169
])
def test_plans_take_the_tail_maps_where_n_or_m_leave_partial_tiles(sms_132, monkeypatch, m, n, k, layout, tail,
                                                                   a_tail):
    """With ``frontend.tails.B_TAIL_MAP`` (``A_TAIL_MAP``) and :func:`~nbwgmma.frontend.tails.tail_pays`
    a plan reads B's last tile column (A's last tile row) through a map of the rows N (M) has there, rounded up to 8, where the operand is read in
    place K-major and the kernel's N (M) is not a multiple of the tile's width (height); its kernel
    then takes one more map for each after B's (a swapped plan: its kernel's M and N are N and M)."""
    monkeypatch.setattr(tails_mod, "TAIL_MIN_ROWS", 1)  # (wherever there is padding: the rule is tested below)
    monkeypatch.setattr(tails_mod, "TAIL_MAX_WAVES", math.inf)
    plan = cpu_plan("bf16", layout, {}, rows=m, n=n, k=k, tails=True)
    cfg = plan.cfg
    assert cfg.b_tail == (tail is not None) and plan.tail_box == tail, (cfg, plan.tail_box)
    assert cfg.a_tail == (a_tail is not None) and plan.a_tail_box == a_tail, (cfg, plan.a_tail_box)
    sig = plan.signature()
    maps = 2 + (tail is not None) + (a_tail is not None)
    assert len(sig) == 5 + maps and sig[:maps] == (types.int64,) * maps


def test_kernels_built_ahead_of_time_load_whole_tiles(sms_132):
    """precompile's plans (cpu_plan without ``tails``) build the kernels of whole tiles, those a class
    runs at every size but the one-wave ones the tail rule takes."""
    plan = cpu_plan("bf16", "KK", {}, rows=263, n=11088, k=4096)
    assert not plan.cfg.b_tail and not plan.cfg.a_tail and len(plan.signature()) == 7


def test_the_tail_maps_can_be_turned_off(sms_132, monkeypatch):
    """``frontend.tails.B_TAIL_MAP = A_TAIL_MAP = False`` read the last column and row through the
    operands' own maps, as before."""
    monkeypatch.setattr(tails_mod, "B_TAIL_MAP", False)
    monkeypatch.setattr(tails_mod, "A_TAIL_MAP", False)
    plan = cpu_plan("bf16", "KK", {}, rows=263, n=11088, k=4096, tails=True)
    assert not plan.cfg.b_tail and not plan.cfg.a_tail and plan.tail_box is None and len(plan.signature()) == 7


@pytest.mark.parametrize("m, n, k, b_tail, a_tail", [
    (263, 11088, 4096, True, True),     # one wave; A's last row 5280 padding rows a stage, B's column 528
    (768, 1536, 4096, True, False),     # 128 x 72, one wave: 48 x 6 = 288
    (1876, 480, 8192, True, False),     # 128 x 128, K halves in clusters: 32 x 15 = 480
    (384, 6144, 4096, False, False),    # 128 x 144, one wave: 48 x 3 = 144 (0.97x measured)
    (8192, 8192, 8192, False, False),   # 128 x 192: 21 waves
    (2692, 8720, 4096, False, False),   # 5.8 waves (0.99x measured)
])
def test_tail_maps_where_they_pay(sms_132, m, n, k, b_tail, a_tail):
    """The default takes a tail map where the product is one wave and the padding rows it saves come
    to TAIL_MIN_ROWS a stage or more: the measured gains (1.11-2.03x), not the measured losses."""
    plan = cpu_plan("bf16", "KK", {}, rows=m, n=n, k=k, tails=True)
    assert (plan.cfg.b_tail, plan.cfg.a_tail) == (b_tail, a_tail), plan.cfg
    assert tails_mod.tail_pays(480, 128, 30, 1.0) and not tails_mod.tail_pays(512, 128, 30, 1.0)
    assert not tails_mod.tail_pays(480, 128, 30, 1.01) and not tails_mod.tail_pays(6144, 144, 3, 0.98)
