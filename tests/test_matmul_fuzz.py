"""Seeded random cases of nbwgmma.matmul against a float64 reference.

Each case draws a type, shape, layout, padding, view offset, output type and
array kind from its own seed; a failure names the seed, and
``NBWGMMA_FUZZ_SEED=<seed> NBWGMMA_FUZZ_CASES=1 python -m pytest tests/test_matmul_fuzz.py``
replays exactly that case. The cases run in one child process with a deadline
(a hang fails this test, not the suite).
"""

import os

import numpy as np
import pytest

from tests.fuzzing import run_seeded

pytestmark = [pytest.mark.gpu, pytest.mark.isolated(timeout=900)]

CASES = int(os.environ.get("NBWGMMA_FUZZ_CASES", "500"))
SEED = int(os.environ.get("NBWGMMA_FUZZ_SEED", "20261122"))

# (A type, B type) and their weights.
TYPES = [(("bf16", "bf16"), 0.35), (("f16", "f16"), 0.25), (("f32", "f32"), 0.1), (("e4m3", "e4m3"), 0.15),
         (("e5m2", "e4m3"), 0.05), (("e4m3", "e5m2"), 0.05), (("e5m2", "e5m2"), 0.05)]
# Elementwise bound |got - ref| <= RT * (|A| @ |B|) + AT: accumulation and output rounding.
RT = {"bf16": 1.6e-2, "f16": 2e-3, "f32": 1e-4}
RT_INPUT = {"f32": 4e-3, "e4m3": 1e-3, "e5m2": 1e-3}  # tf32 rounding; fp8 accumulates in reduced precision


def draw(seed):
    rng = np.random.default_rng(seed)
    (ta, tb) = TYPES[rng.choice(len(TYPES), p=[w for _, w in TYPES])][0]

    def size():
        return int(rng.choice([rng.integers(1, 17), rng.integers(1, 300), rng.integers(100, 1100)],
                              p=[0.2, 0.6, 0.2]))

    m, n, k = size(), size(), size()
    fp8 = ta.startswith("e")
    outs = ["bf16", "f16", "f32"] if fp8 else (["f32"] if ta == "f32" else [ta, ta, "f32"])
    return dict(
        seed=seed, ta=ta, tb=tb, m=m, n=n, k=k,
        a_col=bool(rng.random() < 0.4), b_col=bool(rng.random() < 0.4),
        pad_a=int(rng.choice([0, 0, 0, 8, rng.integers(1, 9)])), pad_b=int(rng.choice([0, 0, 0, 8, rng.integers(1, 9)])),
        off_a=int(rng.choice([0, 0, 0, 0, rng.integers(1, 4)])), off_b=int(rng.choice([0, 0, 0, 0, rng.integers(1, 4)])),
        out=str(rng.choice(outs)), out_given=bool(rng.random() < 0.5), out_strided=bool(rng.random() < 0.1),
        scales=(float(rng.choice([0.5, 1.0, 2.0])), float(rng.choice([0.25, 1.0]))) if fp8 else None,
        ints=bool(rng.random() < 0.15), lib="cupy" if rng.random() < 0.1 else "torch",
    )


def operand(torch, rows, cols, t, col_major, pad, off, ints, gen):
    """A [rows, cols] operand with a padded leading dimension and an element offset."""
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
           "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[t]
    outer, inner = (cols, rows) if col_major else (rows, cols)
    if ints:
        base = torch.randint(-3, 4, (outer * (inner + pad) + off,), device="cuda", generator=gen).float()
    else:
        base = torch.randn(outer * (inner + pad) + off, device="cuda", generator=gen)
        if t.startswith("e"):
            base = base.clamp(-6, 6)
    base = base.to(tdt)
    x = base[off:].view(outer, inner + pad)[:, :inner]
    return x.t() if col_major else x


def run_case(torch, c):
    from nbwgmma import matmul

    gen = torch.Generator(device="cuda").manual_seed(c["seed"])
    a = operand(torch, c["m"], c["k"], c["ta"], c["a_col"], c["pad_a"], c["off_a"], c["ints"], gen)
    b = operand(torch, c["k"], c["n"], c["tb"], c["b_col"], c["pad_b"], c["off_b"], c["ints"], gen)
    odt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[c["out"]]
    kw = {"out_dtype": c["out"]}
    if c["scales"]:
        kw.update(scale_a=c["scales"][0], scale_b=c["scales"][1])
    if c["out_given"]:
        if c["out_strided"]:
            big = torch.full((c["m"], 2 * c["n"] + 3), float("nan"), device="cuda", dtype=odt)
            kw["out"] = big[:, 1:2 * c["n"] + 1:2]
        else:
            kw["out"] = torch.full((c["m"], c["n"]), float("nan"), device="cuda", dtype=odt)
        kw.pop("out_dtype")
    if c["lib"] == "cupy" and not c["ta"].startswith("e") and c["ta"] != "bf16":
        import cupy

        got = torch.as_tensor(matmul(cupy.asarray(a), cupy.asarray(b), **kw), device="cuda")
    else:
        got = matmul(a, b, **kw)
    ad, bd = a.double(), b.double()
    scale = c["scales"][0] * c["scales"][1] if c["scales"] else 1.0
    ref = (ad @ bd) * scale
    bound = (ad.abs() @ bd.abs()) * scale
    rt = RT[c["out"]] + RT_INPUT.get(c["ta"], 0) + RT_INPUT.get(c["tb"], 0)
    if c["ints"] and not c["ta"].startswith("e") and c["ta"] != "f32" and c["out"] == "f32":
        rt = 0.0  # small integers: exact
    g = got.double()
    assert g.shape == ref.shape, f"shape {tuple(g.shape)} != {tuple(ref.shape)}"
    err = (g - ref).abs()
    ok = bool(torch.isfinite(g).all()) and bool((err <= rt * bound + 1e-6).all())
    if not ok:
        worst = float((err - rt * bound).max())
        raise AssertionError(f"case {c}: elementwise error exceeds the bound by {worst:.3e}")
    return bool(ref.abs().max() > 0)


def test_fuzz_matmul():
    torch = pytest.importorskip("torch")
    run_seeded(torch, draw, run_case, CASES, SEED, "fuzz")
