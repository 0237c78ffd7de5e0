"""wgmma on the GPU against the numpy model reading the same shared-memory image."""

import numpy as np
import pytest

from nbwgmma.layout import WGMMA_KINDS, wgmma_kind
from nbwgmma.layout import decode_desc, encode_desc
from nbwgmma.layout.wgmma_model import wgmma_reference
from nbwgmma.kernels.wgmma_tile import TileProblem, run_tile

pytestmark = pytest.mark.gpu

KSTEPS = 4
FAMILIES = ["f32.bf16.bf16", "f16.f16.f16", "f32.tf32.tf32", "f32.e4m3.e5m2", "s32.s8.u8", "s32.b1.b1"]


def operands(kind, n, rng, ksteps=KSTEPS, random=False):
    k = wgmma_kind(kind)
    K = ksteps * k.k

    def one(t, rows):
        if t == "b1":
            return rng.integers(0, 2, (rows, K))
        if t == "s8":
            return rng.integers(-128, 128, (rows, K))
        if t == "u8":
            return rng.integers(0, 256, (rows, K))
        if random:
            return rng.standard_normal((rows, K))
        v = rng.integers(-4, 5, (rows, K)).astype(np.float64)
        v[v == 0] = 1  # never zeros
        return v

    return one(k.atype, 64), one(k.btype, n)


def check(problem, got, *, exact, scale_a=1, scale_b=1):
    want = problem.reference(scale_a, scale_b)
    assert np.isfinite(got.astype(np.float64)).all(), "unwritten or non-finite outputs"
    assert np.abs(want).sum() > 0
    if exact:
        if not np.array_equal(got.astype(np.float64), want):
            bad = np.argwhere(got.astype(np.float64) != want)
            msg = f"{len(bad)} of {want.size} differ; first at {bad[:4].tolist()}"
            pytest.fail(msg + diagnose(problem, got))
    else:
        rel = np.linalg.norm(got.astype(np.float64) - want) / np.linalg.norm(want)
        tol = {"f16": 2e-3, "f32": 1e-5, "s32": 0}[problem.k.dtype]
        if problem.k.input_bits == 8:
            # fp8 wgmma adds its products with fewer bits than f32 (measured ~1.3e-4 on an H100).
            tol = max(tol, 1e-3)
        assert rel <= tol, f"relative error {rel:.3e} > {tol}"


def diagnose(problem, got):
    """Say whether the hardware read the operands with LBO and SBO exchanged."""
    if not (problem.trans_a or problem.trans_b):
        return ""
    swapped = []
    for da, db in zip(problem.desc_a, problem.desc_b):
        fa, fb = decode_desc(int(da)), decode_desc(int(db))
        if problem.trans_a:
            fa["lbo"], fa["sbo"] = fa["sbo"], fa["lbo"]
        if problem.trans_b:
            fb["lbo"], fb["sbo"] = fb["sbo"], fb["lbo"]
        swapped.append((encode_desc(**fa), encode_desc(**fb)))
    alt = sum(wgmma_reference(problem.image, problem.kind, problem.n, a, b, trans_a=problem.trans_a,
                              trans_b=problem.trans_b) for a, b in swapped)
    return f"; hardware == model with LBO/SBO exchanged: {np.array_equal(got.astype(np.float64), alt)}"


def cases():
    for kind in WGMMA_KINDS:  # every type combination, both A sources
        for rs in (False, True):
            yield kind, 64, "128B", 0, 0, rs
    for kind in FAMILIES:  # every family at the N values
        k = wgmma_kind(kind)
        ns = (8, 64, 128, 256, 24, 136, 248) if k.is_float else (8, 64, 128, 256, 24, 144, 240)
        for n in ns:
            yield kind, n, "128B", 0, 0, False
    for kind in ("f32.bf16.bf16", "f16.f16.f16", "f32.tf32.tf32", "s32.s8.s8"):  # every swizzle
        for sw in ("none", "32B", "64B", "128B"):
            yield kind, 64, sw, 0, 0, False
    for kind in ("f32.bf16.bf16", "f32.f16.f16"):  # transposes (16-bit only)
        for sw in ("none", "32B", "64B", "128B"):
            for ta, tb in ((1, 0), (0, 1), (1, 1)):
                yield kind, 64, sw, ta, tb, False
            yield kind, 64, sw, 0, 1, True


@pytest.mark.parametrize("kind, n, swizzle, trans_a, trans_b, rs", list(cases()))
def test_wgmma_small_integers_exact(kind, n, swizzle, trans_a, trans_b, rs, rng):
    a, b = operands(kind, n, rng)
    p = TileProblem(kind, n, KSTEPS, a, b, swizzle=swizzle, trans_a=trans_a, trans_b=trans_b)
    got = run_tile(p, rs=rs)
    check(p, got, exact=True)


@pytest.mark.parametrize("kind", ["f32.bf16.bf16", "f32.f16.f16", "f16.f16.f16", "f32.tf32.tf32",
                                  "f32.e4m3.e4m3", "f32.e5m2.e4m3"])
def test_wgmma_random_data(kind, rng):
    a, b = operands(kind, 128, rng, random=True)
    p = TileProblem(kind, 128, KSTEPS, a, b, swizzle="128B")
    check(p, run_tile(p), exact=False)


@pytest.mark.parametrize("scale_a, scale_b", [(-1, 1), (1, -1), (-1, -1)])
def test_wgmma_negation(scale_a, scale_b, rng):
    a, b = operands("f32.bf16.bf16", 32, rng)
    p = TileProblem("f32.bf16.bf16", 32, KSTEPS, a, b, swizzle="64B")
    check(p, run_tile(p, scale_a=scale_a, scale_b=scale_b), exact=True, scale_a=scale_a, scale_b=scale_b)


def test_accumulator_layout_on_hardware():
    """An identity A and iota B: each output element names its own (row, col)."""
    n = 64
    a = np.zeros((64, 16 * KSTEPS))
    a[np.arange(64), np.arange(64) % 16] = 1.0  # A[m, m % 16] = 1
    b = np.zeros((n, 16 * KSTEPS))
    for c in range(n):
        b[c, :16] = np.arange(16) * 64 + c  # D[m, c] = (m % 16) * 64 + c, exact in bf16 up to 256
    b = np.where(b < 256, b, 0)
    p = TileProblem("f32.bf16.bf16", n, KSTEPS, a, b, swizzle="128B")
    check(p, run_tile(p), exact=True)


def test_device_descriptor_matches_host():
    """make_desc / desc_advance (32-bit PTX) give the host encoding, bit for bit."""
    from numba import cuda

    from tests.intrinsics.test_wgmma_cpu import DESC_FIELDS, _desc_kernel, expected_descs

    f = cuda.to_device(np.array(DESC_FIELDS, np.uint32))
    out = cuda.to_device(np.full((len(DESC_FIELDS), 3), 0xDEADBEEFDEADBEEF, np.uint64))  # poisoned
    cuda.jit(_desc_kernel)[1, 32](out, f)
    np.testing.assert_array_equal(out.copy_to_host(), expected_descs(DESC_FIELDS))
