"""Sparse wgmma (``wgmma.mma_async.sp``) on the GPU against the numpy model reading the same
shared-memory image, metadata registers and selectors (tests/wgmma_sp_tile.py). The output is
poisoned (NaN, or INT32_MIN) before each run; operands are nonzero small integers (exact in
every type) or normal random data.

    python -m pytest -q -p no:cacheprovider tests/intrinsics/test_wgmma_sp_gpu.py
"""

import numpy as np
import pytest

from nbwgmma.layout import WGMMA_SP_KINDS, prune_24, wgmma_sp_kind, wgmma_sp_reference
from tests.wgmma_sp_tile import SparseTileProblem, run_sp_tile, sparse_operands

pytestmark = pytest.mark.gpu

KSTEPS = 4
#: One kind of each family: 16-bit (both accumulators), tf32, fp8 (both accumulators), integer.
FAMILIES = ["f32.bf16.bf16", "f16.f16.f16", "f32.tf32.tf32", "f32.e4m3.e5m2", "f16.e5m2.e4m3", "s32.s8.u8"]
SELECTING = ["f32.bf16.bf16", "f16.f16.f16", "f32.f16.f16", "f32.tf32.tf32"]  # sp-sel 0 or 1
INT_POISON = -(2 ** 31)


def check(p, got, *, exact, rs=False, scale_a=1, scale_b=1):
    want = p.reference(scale_a, scale_b, rs=rs)
    got64 = got.astype(np.float64)
    assert np.isfinite(got64).all(), "unwritten (NaN poison) or non-finite outputs"
    assert got.dtype != np.int32 or (got != INT_POISON).any(), "unwritten (poisoned) outputs"
    assert np.abs(want).sum() > 0
    if exact:
        if not np.array_equal(got64, want):
            bad = np.argwhere(got64 != want)
            pytest.fail(f"{len(bad)} of {want.size} differ; first at {bad[:4].tolist()}" + diagnose(p, got64, rs))
        if scale_a == scale_b == 1:
            np.testing.assert_array_equal(got64, p.dense_product())
        return
    rel = np.linalg.norm(got64 - want) / np.linalg.norm(want)
    tol = {"f16": 2e-3, "f32": 1e-5, "s32": 0}[p.k.dtype]
    if p.k.input_bits == 8:
        tol = max(tol, 1e-3)  # fp8 products are added with fewer bits than f32
    assert rel <= tol, f"relative error {rel:.3e} > {tol}"


def diagnose(p, got, rs):
    """Which rows differ (a warp's 16 rows, the upper 8 of each, a whole K step?) and whether the
    hardware read the other thread pair's metadata."""
    bad_rows = sorted({int(r) for r in np.argwhere(got != p.reference(rs=rs))[:, 0]})
    text = f"; rows that differ: {bad_rows[:24]}{'...' if len(bad_rows) > 24 else ''}"
    if p.k.input_bits != 8:
        flipped = 0
        for s in range(p.ksteps):
            flipped = flipped + wgmma_sp_reference(
                p.image, p.kind, p.n, int(p.desc_a[s]), int(p.desc_b[s]), p.meta_regs[s],
                spsel=1 - p.step_spsel(s), trans_a=p.trans_a, trans_b=p.trans_b)
        text += f"; hardware == model reading the other thread pair: {np.array_equal(got, flipped)}"
    return text


def every_kind():
    for kind in WGMMA_SP_KINDS:  # every type combination, both A sources
        for rs in (False, True):
            yield pytest.param(kind, 64, "128B", 0, 0, rs, "0", id=f"{kind}-{'rs' if rs else 'ss'}")


def every_n():
    for kind in FAMILIES:
        ns = wgmma_sp_kind(kind).n_values
        for n in sorted({ns[0], ns[2], ns[len(ns) // 2], ns[-1]}):
            yield pytest.param(kind, n, "128B", 0, 0, False, "0", id=f"{kind}-n{n}")


def every_swizzle():
    for kind in FAMILIES:
        for sw in ("none", "32B", "64B", "128B"):  # A in every swizzle; a K-major B is 64 bytes of K
            yield pytest.param(kind, 32, sw, 0, 0, False, "0", id=f"{kind}-{sw}")


def every_selector():
    for kind in SELECTING:
        for mode in ("1", "pair"):
            for rs in (False, True):
                yield pytest.param(kind, 32, "64B", 0, 0, rs, mode, id=f"{kind}-spsel{mode}-{'rs' if rs else 'ss'}")


def every_transpose():
    for kind in ("f32.bf16.bf16", "f32.f16.f16", "f16.f16.f16"):  # imm-trans-a/b: 16-bit only
        for sw in ("none", "32B", "64B", "128B"):
            for ta, tb in ((1, 0), (0, 1), (1, 1)):
                yield pytest.param(kind, 32, sw, ta, tb, False, "pair", id=f"{kind}-{sw}-t{ta}{tb}")
            yield pytest.param(kind, 32, sw, 0, 1, True, "0", id=f"{kind}-{sw}-rs-t01")


CASES = list(every_kind()) + list(every_n()) + list(every_swizzle()) + list(every_selector()) + \
    list(every_transpose())


@pytest.mark.parametrize("kind, n, swizzle, trans_a, trans_b, rs, spsel", CASES)
def test_sparse_wgmma_small_integers_exact(kind, n, swizzle, trans_a, trans_b, rs, spsel, rng):
    a, b = sparse_operands(kind, n, KSTEPS, rng)
    # A 32-byte swizzle row cannot hold a K-major B's 64 bytes of K: B takes 64B there.
    swizzle_b = "64B" if swizzle == "32B" and not trans_b else None
    p = SparseTileProblem(kind, n, KSTEPS, a, b, swizzle=swizzle, swizzle_b=swizzle_b, trans_a=trans_a,
                          trans_b=trans_b, spsel=spsel)
    check(p, run_sp_tile(p, rs=rs), exact=True, rs=rs)


@pytest.mark.parametrize("kind", ["f32.bf16.bf16", "f32.f16.f16", "f16.f16.f16", "f32.tf32.tf32", "f32.e4m3.e4m3",
                                  "f32.e5m2.e4m3"])
@pytest.mark.parametrize("rs", [False, True], ids=["ss", "rs"])
def test_sparse_wgmma_random_data(kind, rs, rng):
    """A pruned to 2:4 from normal data (the largest magnitudes kept), B normal."""
    k = wgmma_sp_kind(kind)
    K = KSTEPS * k.k
    a = prune_24(rng.standard_normal((64, K)), k.atype)
    b = rng.standard_normal((128, K))
    p = SparseTileProblem(kind, 128, KSTEPS, a, b, swizzle="128B", spsel="0" if k.input_bits == 8 else "pair")
    check(p, run_sp_tile(p, rs=rs), exact=False, rs=rs)


@pytest.mark.parametrize("scale_a, scale_b", [(-1, 1), (1, -1), (-1, -1)])
@pytest.mark.parametrize("kind", ["f32.bf16.bf16", "f32.tf32.tf32", "f32.e4m3.e4m3"])
def test_sparse_wgmma_negation(kind, scale_a, scale_b, rng):
    a, b = sparse_operands(kind, 32, KSTEPS, rng)
    p = SparseTileProblem(kind, 32, KSTEPS, a, b, swizzle="64B")
    check(p, run_sp_tile(p, scale_a=scale_a, scale_b=scale_b), exact=True, scale_a=scale_a, scale_b=scale_b)


def test_metadata_layout_on_hardware():
    """A whose kept elements carry their own (row, column) code, B picking one column each: every
    output element names the A element the hardware placed at each K position."""
    kind, n = "f32.f16.f16", 32
    k = wgmma_sp_kind(kind)
    rng = np.random.default_rng(3)
    a, _ = sparse_operands(kind, 8, 1, rng)  # the positions of the kept elements, random
    a = np.where(a != 0, 1.0, 0.0) * (np.arange(64)[:, None] % 16 + 1)  # value: row % 16 + 1
    b = np.zeros((n, k.k))
    b[np.arange(n), np.arange(n)] = 1.0  # D[m, c] = A[m, c]: the dense A, column by column
    p = SparseTileProblem(kind, n, 1, a, b, swizzle="128B", spsel="1")
    got = run_sp_tile(p)
    np.testing.assert_array_equal(got, a)
    check(p, got, exact=True)
