"""Sparse wgmma (``wgmma.mma_async.sp``) in Numba's CUDA simulator (run by tests/test_sim.py in a
child process with NUMBA_ENABLE_CUDASIM=1; also by hand:
NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/sim_sparse_cases.py): the tile kernel of the GPU
tests, thread by thread, exact on small integers against the model and the dense product."""

import numpy as np
import pytest
from numba import config

from nbwgmma import sim
from tests.wgmma_sp_tile import SparseTileProblem, run_sp_tile, sparse_operands

assert config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1"

#: One kind of each family, every A source and selector mode, on both swizzle kinds of B.
CASES = [
    ("f32.bf16.bf16", 16, "128B", 0, 0, False, "pair"),
    ("f16.f16.f16", 8, "none", 0, 0, True, "1"),
    ("f32.f16.f16", 16, "64B", 1, 1, False, "0"),
    ("f32.tf32.tf32", 8, "128B", 0, 0, True, "pair"),
    ("f32.e4m3.e5m2", 24, "none", 0, 0, False, "0"),
    ("f16.e5m2.e5m2", 8, "64B", 0, 0, True, "0"),
    ("s32.s8.u8", 16, "128B", 0, 0, False, "0"),
    ("s32.u8.s8", 8, "none", 0, 0, True, "0"),
]


@pytest.mark.parametrize("kind, n, swizzle, trans_a, trans_b, rs, spsel", CASES)
def test_sparse_tile_small_integers_exact(kind, n, swizzle, trans_a, trans_b, rs, spsel):
    rng = np.random.default_rng(len(kind) * n)
    a, b = sparse_operands(kind, n, 2, rng)
    p = SparseTileProblem(kind, n, 2, a, b, swizzle=swizzle, trans_a=trans_a, trans_b=trans_b, spsel=spsel)
    got = run_sp_tile(p, rs=rs).astype(np.float64)
    want = p.reference(rs=rs)
    assert np.abs(want).sum() > 0
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, p.dense_product())


def test_negated_operands():
    rng = np.random.default_rng(5)
    a, b = sparse_operands("f32.bf16.bf16", 8, 2, rng)
    p = SparseTileProblem("f32.bf16.bf16", 8, 2, a, b, swizzle="64B")
    got = run_sp_tile(p, scale_a=-1, scale_b=1)
    np.testing.assert_array_equal(got, -p.dense_product())


def test_undefined_metadata_is_a_hazard():
    """Metadata naming one position twice (0b0000) is undefined behaviour: reported, not computed."""
    rng = np.random.default_rng(6)
    a, b = sparse_operands("f32.f16.f16", 8, 2, rng)
    p = SparseTileProblem("f32.f16.f16", 8, 2, a, b)
    p.meta_regs[1, 5] &= np.uint32(0xFFFFFFF0)  # thread 5 (read with sp-sel 0): its first code 0b0000
    with pytest.raises(sim.SimHazard, match="positions must differ"):
        run_sp_tile(p)
