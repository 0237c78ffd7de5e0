"""B's last tile column through a map of the rows N has there (GemmConfig.b_tail), without a GPU:
the configuration's rules, the kernels' SASS, the plans that take it and their maps' boxes. The
simulator runs it in tests/sim_frontend_cases.py (exact results, an amax that must not count the
stale rows)."""

import pytest
from numba import types

from nbwgmma.errors import ConfigError
from nbwgmma.frontend import plan as plan_mod
from nbwgmma.kernels.gemm import GemmConfig, gemm_kernel
from nbwgmma.precompile import cpu_plan
from nbwgmma.report import compile_reports


@pytest.mark.parametrize("kw, rule", [
    (dict(b_major="MN", bn=128), "K-major"),
    (dict(batched=True), "no batch"),
    (dict(stream_k=1, bn=128), "no stream_k"),
    (dict(cluster=2), "no cluster sharing B"),
])
def test_b_tail_config_rules(kw, rule):
    """b_tail takes a K-major B read tile column by tile column by one CTA: no MN-major boxes, batch,
    stream-K or cluster that shares B out; the refusal names the rule and what was given."""
    with pytest.raises(ConfigError, match=rule):
        GemmConfig("f32.bf16.bf16", b_tail=True, **kw)


def test_b_tail_config_keys_apart_and_masks_the_padding():
    """A b_tail kernel is a kernel of its own (its key round-trips and differs from the plain one's);
    its padding columns hold stale B rows, so an amax masks them (zero_padding off)."""
    plain = GemmConfig("f32.bf16.bf16", out="e4m3", epilogue="tma", amax=True)
    tail = GemmConfig("f32.bf16.bf16", out="e4m3", epilogue="tma", amax=True, b_tail=True)
    assert plain.zero_padding and not tail.zero_padding
    assert plain.key() != tail.key() and GemmConfig(*tail.key()).key() == tail.key()
    assert GemmConfig(*plain.key()).key() == plain.key() and not GemmConfig(*plain.key()).b_tail
    assert GemmConfig("f32.bf16.bf16", cluster=2, multicast="A", bm=256, bn=128, b_tail=True).b_tail


def test_b_tail_kernels_compile_clean():
    """The kernels take B's second map after B's: four loads in the producer's tile loop where there
    were two maps (the last column's and the others'), no spill, no local memory."""
    cfgs = [GemmConfig("f32.bf16.bf16", epilogue="tma", b_tail=True, **kw)
            for kw in (dict(), dict(bm=64, bn=128, stages=8), dict(bm=256, bn=128, cluster=2, multicast="A"),
                       dict(bm=128, bn=144), dict(split=2))]
    jobs = []
    for cfg in cfgs:
        ws = (types.Array(types.float32, 1, "C"), types.Array(types.int32, 1, "C")) if cfg.uses_workspace else ()
        jobs.append((gemm_kernel(cfg), (types.uint64,) * 4 + (types.int32,) * 3 + (types.float32,) + ws, None))
    for cfg, rep in zip(cfgs, compile_reports(jobs)):
        assert rep.spill_bytes == 0 and rep.local_memory_ops == 0, (cfg, rep.warnings)
        assert rep.sass["UTMALDG"] >= 2 and rep.sass.get("HGMMA", 0) >= 4, cfg
        assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored, rep.warnings


@pytest.mark.parametrize("m, n, k, layout, tail", [
    (263, 11088, 4096, "KK", (80, 64)),     # 128 x 256 tiles: 80 rows of B in the last column
    (2692, 8720, 4096, "KK", (16, 64)),     # 16 rows
    (1000, 712, 520, "KK", (72, 64)),       # 64 x 128 tiles: 712 = 5 x 128 + 72
    (768, 1536, 4096, "KK", (24, 64)),      # one wave of 128 x 72 tiles: 1536 = 21 x 72 + 24
    (4096, 4096, 4096, "KK", None),         # whole 128 x 256 tiles: one map
    (8192, 8192, 8192, "KK", (128, 64)),    # 128 x 192 tiles: 8192 = 42 x 192 + 128
    (263, 11088, 4096, "KN", None),         # N-major B: 64-column boxes, not taken
    (7465, 1168, 4096, "KK", (176, 64)),    # swapped (the kernel's B is A): 7465 = 38 x 192 + 169
])
def test_plans_take_the_tail_map_where_n_leaves_a_partial_column(sms_132, monkeypatch, m, n, k, layout, tail):
    """With ``frontend.plan.B_TAIL_MAP`` a plan reads B's last tile column through a map of the rows N
    has there (rounded up to 8) where B is read in place K-major and the kernel's N is not a multiple
    of the tile's width; its kernel then takes one more map (the signature's third argument)."""
    monkeypatch.setattr(plan_mod, "B_TAIL_MAP", True)
    plan = cpu_plan("bf16", layout, {}, rows=m, n=n, k=k)
    cfg = plan.cfg
    assert cfg.b_tail == (tail is not None) and plan.tail_box == tail, (cfg, plan.tail_box)
    sig = plan.signature()
    assert len(sig) == (8 if tail else 7) and sig[:3] == (types.int64,) * 3  # (maps of A, B, B's tail or C)


def test_the_tail_map_can_be_turned_off(sms_132, monkeypatch):
    """``frontend.plan.B_TAIL_MAP = False`` reads the last column through B's own map, as before (the
    default until it is measured on a GPU)."""
    monkeypatch.setattr(plan_mod, "B_TAIL_MAP", False)
    plan = cpu_plan("bf16", "KK", {}, rows=263, n=11088, k=4096)
    assert not plan.cfg.b_tail and plan.tail_box is None and len(plan.signature()) == 7
