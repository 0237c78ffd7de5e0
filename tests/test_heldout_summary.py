"""benchmarks/heldout.py without a GPU: a hold-out's ratios and summary from synthetic records."""

import math

import pytest

from tests.scripts import load_script


def _module():
    return load_script("benchmarks", "heldout")


def _measure(problem, default, configs):
    """The records configs.py --json writes for one problem: the default's, then each config's."""
    rec = [{"problem": list(problem), "config": {"bm": 128, "bn": 256, "swap": 0}, "default": True, "ratio": default}]
    return rec + [{"problem": list(problem), "config": {"bm": 64, "bn": bn}, "default": False, "ratio": r}
                  for bn, r in zip((64, 128, 192), configs)]


P1 = ("bf16", "KK", 1000, 2000, 4096)
P2 = ("e4m3", "KK", 3000, 500, 8192)
P3 = ("bf16", "MN", 700, 900, 8192)


def test_pairs_and_summary_of_two_runs():
    """Each run's after / before (the last config over the first, or the default's tile at either end),
    the runs' geometric mean per problem; classes all, each input type and each K; losses below the bound;
    a measurement whose configs were refused (no records) is left out."""
    h = _module()
    run1 = _measure(P1, 1.00, [0.80, 0.88]) + _measure(P2, 0.90, [0.90, 0.81]) + _measure(P3, 0.70, [])
    run2 = _measure(P1, 1.00, [0.80, 0.90]) + _measure(P2, 0.90, [1.00, 0.90]) + _measure(P3, 0.70, [0.5, 0.6])
    recs = run1 + run2
    got = h.pairs(recs)
    assert set(got) == {P1, P2, P3}
    assert got[P1] == pytest.approx([1.10, 1.125]) and got[P2] == pytest.approx([0.9, 0.9])
    assert got[P3] == pytest.approx([1.2])  # (run 1 had no config measured)
    assert h.pairs(recs, after="default")[P1] == pytest.approx([1.25, 1.25])
    assert h.pairs(recs, before="default")[P2] == pytest.approx([0.9, 1.0])
    with pytest.raises(ValueError, match="both the default"):
        h.pairs(recs, before="default", after="default")
    with pytest.raises(ValueError, match="both the last config"):
        h.pairs(recs, before="last", after="last")
    # a line problem|{rule}|{alternative}|{tile before}: the rule (the default path's, or the first config) over the last
    assert h.pairs(recs, before="last", after="default")[P1] == pytest.approx([1 / 0.88, 1 / 0.90])
    assert h.pairs(recs, before="last", after="first")[P2] == pytest.approx([0.9 / 0.81, 1.0 / 0.9])
    assert P3 not in h.pairs(run1, before="last", after="first")  # (run 1 measured no config there)
    rows = {c: rest for c, *rest in h.summary(got)}
    g1, g2, g3 = math.sqrt(1.10 * 1.125), 0.9, 1.2
    assert list(rows) == ["all", "bf16", "e4m3", "K = 4096", "K = 8192"]
    assert rows["all"] == pytest.approx([3, (g1 * g2 * g3) ** (1 / 3), 0.9, 1.2, 1])
    assert rows["bf16"] == pytest.approx([2, math.sqrt(g1 * g3), g1, g3, 0])
    assert rows["K = 8192"] == pytest.approx([2, math.sqrt(g2 * g3), g2, g3, 1])
    assert h.summary(got, loss=0.8)[0][-1] == 0
