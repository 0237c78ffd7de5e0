"""benchmarks/fit_shares.py without a GPU: shares fitted from synthetic measurements come back."""

import math
import random
import sys

import pytest

from tests.scripts import load_script


def _module():
    return load_script("benchmarks", "fit_shares")


def test_shares_of_synthetic_measurements_are_recovered():
    """Ratios made as share x work_fill x a per-problem factor (x noise) give the shares back, the
    reference tile's as 1; a problem measured with one tile plays no part; configs without a tile are
    skipped; the standard errors shrink to nothing without noise."""
    fit = _module()
    from nbwgmma.frontend.tiles import work_fill

    truth = {"128x256": 1.0, "128x192": 0.97, "s256x160": 0.98, "192x144": 0.96, "128x128 cluster_k=2": 0.8}
    configs = {"128x256": {"bm": 128, "bn": 256}, "128x192": {"bm": 128, "bn": 192},
               "s256x160": {"bm": 256, "bn": 160, "swap": 1}, "192x144": {"bm": 192, "bn": 144},
               "128x128 cluster_k=2": {"bm": 128, "bn": 128, "cluster_k": 2}}
    rng = random.Random(7)
    for noise in (0.0, 0.01):
        records = []
        for _ in range(40):
            m, n, k = rng.randrange(500, 16000), rng.randrange(500, 16000), 4096
            factor = rng.uniform(0.8, 1.1)
            for name in rng.sample(sorted(truth), 3):
                c = configs[name]
                filled = work_fill(n, m, c["bm"], c["bn"], 132) if c.get("swap") else \
                    work_fill(m, n, c["bm"], c["bn"], 132)
                ratio = truth[name] * filled * factor * math.exp(rng.gauss(0, noise))
                records.append({"problem": ["bf16", "KK", m, n, k], "config": c, "default": False, "ratio": ratio})
        records.append({"problem": ["bf16", "KK", 999, 999, 999], "config": {"bm": 64, "bn": 64}, "ratio": 0.5})
        records.append({"problem": ["bf16", "KK", 777, 777, 777], "config": {"stream_k": 1}, "ratio": 0.5})
        shares, rms = fit.fit(records)
        assert set(shares) == set(truth)  # (64 x 64: one tile at its problem; stream-K: no tile)
        for name, (share, err, n) in shares.items():
            assert share == pytest.approx(truth[name], abs=0.02 if noise else 1e-9), name
            assert n > 0 and (err < 1e-9 if not noise else err < 0.02), (name, err)
        assert (rms < 1e-9) == (noise == 0.0)


def test_tile_names():
    fit = _module()
    assert fit.tile_name({"bm": 256, "bn": 160, "swap": 1}) == "s256x160"
    assert fit.tile_name({"bm": 128, "bn": 128, "swap": 0, "cluster_k": 2}) == "128x128 cluster_k=2"
    assert fit.tile_name({"stream_k": 1}) is None
    assert "fit_shares" not in sys.modules  # (loaded from its file, not imported)
