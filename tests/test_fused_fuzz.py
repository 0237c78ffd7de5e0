"""Seeded random cases of matmul's fused epilogues against a float64 reference.

Case ``i`` takes compile-time configuration ``i % len(CONFIGS)`` of the list below (every activation, both bias
kinds and none, C or none, both B layouts, bf16/f16/e4m3/e5m2 inputs, 16-bit and fp8 outputs,
amax, user epilogues with extras) and draws from its own seed what needs no new kernel: the
shape (ragged M, N, K), row padding and view offsets, the bias's type and shape, C's type and
layout (row-major, transposed, strided, the output itself), alpha, beta, the output scale and
the data. A failure names the seed; ``NBWGMMA_FUZZ_SEED=<seed> NBWGMMA_FUZZ_CASES=1 python -m
pytest tests/test_fused_fuzz.py`` replays that case. The cases run in one child process with
a deadline (a hang fails this test, not the suite).

The bound, elementwise: the activation's slope times the product's accumulation bound
(``rt * alpha * |A| @ |B|``, as in tests/test_matmul_fuzz.py), plus the output's rounding
(half a step of its type, relative to the result, and its smallest step), plus the fast
``ex2``/``rcp`` approximations under the activations.
"""

import math
import os

import numpy as np
import pytest

from tests.fuzzing import run_seeded

pytestmark = [pytest.mark.gpu, pytest.mark.isolated(timeout=900)]

CASES = int(os.environ.get("NBWGMMA_FUZZ_CASES", "160"))
SEED = int(os.environ.get("NBWGMMA_FUZZ_SEED", "20261123"))


def shift_by_position(v, row, col):
    return v + np.float32(row % 3) - np.float32(col % 2)


def scale_and_shift(v, row, col, s, t):
    return v * s + t


def gate_rows(v, row, col, g):
    return v * g


# User epilogues: (function, extras kinds, float64 reference (y, rows, cols, extras), slope bound).
USER = {
    "position": (shift_by_position, (), lambda y, r, c, x: y + (r % 3) - (c % 2), 1.0),
    "scale": (scale_and_shift, ("col", "scalar"), lambda y, r, c, x: y * x[0][None, :] + x[1], 2.0),
    "gate": (gate_rows, ("row",), lambda y, r, c, x: y * x[0], 2.0),  # x[0]: (M, 1)
}

# Compile-time configurations: (inputs, bias kind, activation, B layout, with C, output, amax, user).
CONFIGS = [
    ("bf16", "col", "gelu_tanh", "K", False, "bf16", False, None),
    ("bf16", "row", "gelu", "MN", False, "bf16", False, None),
    ("f16", "col", "relu", "K", True, "f16", False, None),
    ("f16", None, "silu", "MN", True, "f16", False, None),
    ("bf16", "col", "sigmoid", "K", True, "bf16", False, None),
    ("f16", "row", None, "K", False, "f16", False, "scale"),
    ("bf16", None, None, "K", True, "bf16", False, None),
    ("bf16", "col", "gelu_tanh", "K", False, "e4m3", True, None),
    ("f16", "row", "relu", "MN", True, "e5m2", False, None),
    ("e4m3", "col", "gelu_tanh", "K", False, "bf16", False, None),
    ("e5m2", "row", "silu", "K", True, "f16", False, None),
    ("e4m3", None, "relu", "K", False, "e4m3", True, "gate"),
    ("bf16", "col", "silu", "MN", False, "bf16", False, "position"),
    ("e5m2", "col", "sigmoid", "K", False, "e5m2", True, None),
]

SLOPE = {None: 1.0, "relu": 1.0, "gelu": 1.13, "gelu_tanh": 1.13, "silu": 1.1, "sigmoid": 0.25}
# Accumulation (relative to alpha |A| @ |B|): f32 for 16-bit inputs, reduced for fp8.
RT_ACC = {"bf16": 1e-4, "f16": 1e-4, "e4m3": 2e-3, "e5m2": 2e-3}
# Output rounding: half a step relative to the value, and the smallest step (subnormals).
OUT_REL = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11, "e4m3": 2.0 ** -4, "e5m2": 2.0 ** -3}
OUT_ABS = {"bf16": 1e-30, "f16": 2.0 ** -24, "e4m3": 2.0 ** -9, "e5m2": 2.0 ** -16}
FP8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}


def draw(seed):
    rng = np.random.default_rng(seed)
    cfg = CONFIGS[seed % len(CONFIGS)]
    fp8_in = cfg[0].startswith("e")
    align = 16 if fp8_in else 8  # elements per 16 bytes: TMA reads rows of A and B 16-byte aligned
    n_step = 8 if cfg[5] in ("bf16", "f16") or cfg[3] == "MN" else 1  # a 16-bit C by TMA, a B [K, N]

    def size(step):
        v = int(rng.choice([rng.integers(1, 33), rng.integers(1, 400), rng.integers(300, 1100)], p=[0.2, 0.6, 0.2]))
        return max(step, v // step * step)

    return dict(
        seed=seed, cfg=cfg, m=size(1), n=size(n_step), k=size(align),
        pad_a=int(rng.choice([0, 0, align])), pad_b=int(rng.choice([0, 0, align])),
        off_a=int(rng.choice([0, 0, align])), off_b=int(rng.choice([0, 0, align])),
        bias_t=str(rng.choice(["f32", "bf16", "f16"])), bias_2d=bool(rng.random() < 0.3),
        c_t=str(rng.choice(["bf16", "f16", "f32"])), c_layout=str(rng.choice(["row", "col", "strided", "inplace"])),
        alpha=float(rng.choice([1.0, 0.5, 2.0])), beta=rng.choice([None, 0.5, -1.0]),
        scale_out=float(rng.choice([0.25, 1.0, 4.0])), scales=(float(rng.choice([0.5, 1.0])), 0.25) if fp8_in else None,
        ints=bool(rng.random() < 0.2),
    )


def run_case(torch, c):
    from nbwgmma import matmul

    dt, where, act, b_major, with_c, odt, amax_on, user = c["cfg"]
    m, n, k = c["m"], c["n"], c["k"]
    gen = torch.Generator(device="cuda").manual_seed(c["seed"])
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "e4m3": torch.float8_e4m3fn,
           "e5m2": torch.float8_e5m2}

    def data(*shape):
        if c["ints"]:
            return torch.randint(-3, 4, shape, device="cuda", generator=gen).double()
        return torch.randn(*shape, device="cuda", generator=gen, dtype=torch.float64)

    def operand(rows, cols, pad, off):
        """[rows, cols] of the input type, row-major, rows padded, the view at an offset."""
        base = torch.zeros(rows * (cols + pad) + off, device="cuda", dtype=tdt[dt])
        x = base[off:].view(rows, cols + pad)[:, :cols]
        x.copy_(data(rows, cols).clamp(-6, 6).to(tdt[dt]))
        return x

    a = operand(m, k, c["pad_a"], c["off_a"])
    if b_major == "K":
        w = operand(n, k, c["pad_b"], c["off_b"])
        b = w.t()
    else:
        b = operand(k, n, c["pad_b"], c["off_b"])
    kw = {"alpha": c["alpha"], "activation": act}
    pre = c["alpha"] * (a.double() @ b.double())
    bound = abs(c["alpha"]) * (a.double().abs() @ b.double().abs())
    if c["scales"]:
        sa, sb = c["scales"]
        kw.update(scale_a=sa, scale_b=sb)
        pre, bound = pre * sa * sb, bound * sa * sb
    bound = bound * RT_ACC[dt]
    if where is not None:
        if where == "col":
            vec = data(n).to(tdt[c["bias_t"]])
            kw["bias"] = vec.view(1, n) if c["bias_2d"] else vec
            pre = pre + vec.double()[None, :]
        else:
            vec = data(m).to(tdt[c["bias_t"]])
            kw["bias"] = vec.view(m, 1)
            pre = pre + vec.double()[:, None]
    fp8_out = odt in FP8_MAX
    out = torch.full((m, n), float("nan"), device="cuda", dtype=tdt[odt]) if not fp8_out else \
        torch.full((m, n), 0x7F, device="cuda", dtype=torch.uint8).view(tdt[odt])  # NaN codes
    if with_c:
        layout = c["c_layout"] if not fp8_out else ("row" if c["c_layout"] == "inplace" else c["c_layout"])
        if layout == "inplace":
            cm = out
            cm.copy_(data(m, n).to(out.dtype))
        elif layout == "col":
            cm = data(n, m).to(tdt[c["c_t"]]).t()
        elif layout == "strided":
            cm = data(m, 2 * n + 1).to(tdt[c["c_t"]])[:, 1::2]
        else:
            cm = data(m, n).to(tdt[c["c_t"]])
        beta = 1.0 if c["beta"] is None else float(c["beta"])
        kw["c"] = cm
        if c["beta"] is not None:
            kw["beta"] = beta
        pre = pre + beta * cm.double()
    y = _activation(torch, pre, act)
    slope = SLOPE[act]
    if user is not None:
        fn, kinds, ref_fn, user_slope = USER[user]
        # vectors within [-2, 2] (the slope bound), a number
        extras = [data(n).float().clamp(-2, 2) if kd == "col" else data(m, 1).float().clamp(-2, 2) if kd == "row"
                  else 0.75 for kd in kinds]
        kw.update(epilogue=fn, epilogue_args=tuple(extras))
        rows = torch.arange(m, device="cuda", dtype=torch.float64)[:, None]
        cols = torch.arange(n, device="cuda", dtype=torch.float64)[None, :]
        y = ref_fn(y, rows, cols, [e.double() if torch.is_tensor(e) else e for e in extras])
        slope *= user_slope
    amax = None
    if fp8_out:
        kw["scale_out"] = c["scale_out"]
        if amax_on:
            amax = torch.zeros(1, device="cuda")
            kw["amax"] = amax
    got = matmul(a, b, out=out, **kw)
    assert got.data_ptr() == out.data_ptr()
    tol = slope * bound + 1e-5 * (1 + pre.abs())  # the activations' ex2/rcp approximations
    ref = y
    if fp8_out:
        so = c["scale_out"]
        ref, tol = (y * so).clamp(-FP8_MAX[odt], FP8_MAX[odt]), tol * so
    tol = tol + OUT_REL[odt] * ref.abs() + OUT_ABS[odt]
    g = got.double()
    err = (g - ref).abs()
    ok = bool(torch.isfinite(g).all()) and bool((err <= tol).all())
    if not ok:
        bad = (~(err <= tol)).nonzero()[0].tolist()
        raise AssertionError(f"case {c}: at {bad} got {float(g[bad[0], bad[1]])}, float64 {float(ref[bad[0], bad[1]])}, "
                             f"bound {float(tol[bad[0], bad[1]])}")
    if amax is not None:
        want = float(y.abs().max())
        slack = float((slope * bound + 1e-5 * (1 + pre.abs())).max()) + 1e-6 * want
        assert abs(float(amax[0]) - want) <= slack, f"case {c}: amax {float(amax[0])}, float64 {want}, slack {slack}"
    return bool(ref.abs().max() > 0)


def _activation(torch, v, act):
    if act is None:
        return v
    if act == "relu":
        return v.clamp(min=0)
    if act == "gelu":
        return 0.5 * v * (1 + torch.erf(v / math.sqrt(2)))
    if act == "gelu_tanh":
        return 0.5 * v * (1 + torch.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    if act == "silu":
        return v * torch.sigmoid(v)
    return torch.sigmoid(v)


def test_fuzz_fused_epilogues():
    torch = pytest.importorskip("torch")
    run_seeded(torch, draw, run_case, CASES, SEED, "fused fuzz")
