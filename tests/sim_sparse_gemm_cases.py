"""The sparse GEMM (``matmul`` with a ``Sparse24``) in Numba's CUDA simulator (run by
tests/test_sparse_gemm_cpu.py in a child process with NUMBA_ENABLE_CUDASIM=1; also by hand:
NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/sim_sparse_gemm_cases.py): thread by thread, exact
on small integers against float64 products of the decompressed weight, both sides, every
operand layout, ragged M, N and K, outputs poisoned (NaN) before the run."""

import numpy as np
import pytest
from numba import config, cuda
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

import nbwgmma
from nbwgmma import MatmulError, Sparse24
from nbwgmma.layout import encode_elements, prune_24

assert config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1"

RAW = {"bf16": np.uint16, "f16": np.uint16, "e4m3": np.uint8}
NAN = {"bf16": 0x7FC0, "f16": 0x7E00}


def ints(rng, shape, lo=-3, hi=4):
    v = rng.integers(lo, hi, shape).astype(np.float64)
    return np.where(v == 0, 1, v)  # no zeros: every product term counts


def sim_array(x, t, transpose=False):
    """``x`` (float64) as a simulator array of ``t``'s raw bits (``transpose``: the transpose of a
    row-major array of ``x.T``, so the first dimension is contiguous)."""
    src = np.ascontiguousarray(x.T if transpose else x)
    raw = encode_elements(src, t).view(RAW[t]).reshape(src.shape)
    return FakeCUDAArray(raw.T) if transpose else cuda.to_device(raw)


def poisoned(shape):
    return cuda.to_device(np.full(shape, NAN["bf16"], np.uint16))


def values(out, t="bf16"):
    h = out.copy_to_host()
    if t == "f16":
        return h.view(np.float16).astype(np.float64)
    return (h.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def weight(rng, m, k, t):
    dense = prune_24(ints(rng, (m, k)))
    w24 = Sparse24.from_dense(sim_array(dense, t), dtype=t if t != "f16" else None)
    back = w24.to_dense().copy_to_host()
    got = (back.astype(np.uint32) << 16).view(np.float32) if t == "bf16" else back
    if t == "e4m3":
        got = dense  # (fp8 codes: checked through the product)
    np.testing.assert_array_equal(np.asarray(got, np.float64), dense)  # to_dense is the inverse
    return w24, dense


def test_right_side_bf16_ragged_and_n_contiguous_x():
    """``x @ w24.t()``: M = 100 weight rows (one partial tile), K = 80 (a partial second stage),
    x [40, K] row-major (B K-major), then x with its 40 rows contiguous (B N-major)."""
    rng = np.random.default_rng(1)
    w24, w = weight(rng, 100, 80, "bf16")
    x = ints(rng, (40, 80))
    for transpose in (False, True):
        out = poisoned((40, 100))
        got = nbwgmma.matmul(sim_array(x, "bf16", transpose), w24.t(), in_dtype="bf16", out=out)
        assert got is out
        np.testing.assert_array_equal(values(out), x @ w.T)


def test_left_side_f16_two_tile_rows_row_major_y():
    """``w24 @ y``: M = 130 (a second tile row of 2 rows: the metadata's padding blocks), y [48, 72]
    row-major (B N-major, read with the transpose bit), one CTA walking both tiles."""
    rng = np.random.default_rng(2)
    dense = prune_24(ints(rng, (130, 48)))
    w24 = Sparse24.from_dense(cuda.to_device(dense.astype(np.float16)))
    np.testing.assert_array_equal(w24.to_dense().copy_to_host(), dense)
    y = ints(rng, (48, 72))
    out = nbwgmma.matmul(w24, cuda.to_device(y.astype(np.float16)))
    np.testing.assert_array_equal(values(out, "f16"), dense @ y)
    # in_dtype naming the operand's own type is a no-op, as for the dense product (it was refused)
    again = nbwgmma.matmul(w24, cuda.to_device(y.astype(np.float16)), in_dtype="f16")
    np.testing.assert_array_equal(values(again, "f16"), dense @ y)


@pytest.mark.parametrize("k", [64, 256, 320])
def test_left_side_bf16_k_contiguous_y(k):
    """``w24 @ x.T`` with x [N, K] row-major: B K-major; 1, 4 and 5 stages (the first stage
    alone, the loop's two-stage trips, a last odd stage)."""
    rng = np.random.default_rng(3 + k)
    w24, w = weight(rng, 64, k, "bf16")
    y = ints(rng, (k, 24))
    out = poisoned((64, 24))
    nbwgmma.matmul(w24, sim_array(y, "bf16", transpose=True), in_dtype="bf16", out=out)
    np.testing.assert_array_equal(values(out), w @ y)


def test_right_side_e4m3_bf16_out():
    """fp8: k64 sparse wgmmas, two metadata registers per stage, K = 160 (a partial stage of 128)."""
    rng = np.random.default_rng(4)
    w24, w = weight(rng, 64, 160, "e4m3")
    x = ints(rng, (24, 160))
    out = poisoned((24, 64))
    nbwgmma.matmul(sim_array(x, "e4m3"), w24.t(), in_dtype="e4m3", out=out)
    np.testing.assert_array_equal(values(out), x @ w.T)


def test_not_24_is_refused_with_its_row_and_prune_keeps_the_largest_two():
    w = np.zeros((8, 16))
    w[:, :2] = 1
    w[5, 9:12] = (1, -4, 2)  # row 5, columns 8..11: three nonzeros
    with pytest.raises(MatmulError, match=r"row 5 is not 2:4 sparse: columns 8\.\.11 hold 3 nonzeros"):
        Sparse24.from_dense(cuda.to_device(w.astype(np.float16)))
    w24 = Sparse24.from_dense(cuda.to_device(w.astype(np.float16)), prune=True)
    want = w.copy()
    want[5, 9] = 0
    np.testing.assert_array_equal(w24.to_dense().copy_to_host(), want)


@pytest.mark.parametrize("blocks, bn", [(1, 128), (2, 128), (1, 64)])
def test_right_side_bf16_transposed_tma_stores(blocks, bn):
    """``x @ w24.t()`` into a row-major out with 16-byte aligned rows: D's tile goes transposed
    through shared memory (stmatrix.trans) to TMA stores, one or two 64 x 64 blocks per consumer
    taking turns; M = 136 weight rows (a partial tile), 72 or 130 rows of x (ragged N), 3 stages."""
    rng = np.random.default_rng(10 + blocks + bn)
    w24, w = weight(rng, 136, 192, "bf16")
    n = 130 if blocks == 2 else 72
    x = ints(rng, (n, 192))
    out = poisoned((n, 136))
    nbwgmma.matmul(sim_array(x, "bf16"), w24.t(), in_dtype="bf16", out=out, config={"bn": bn, "out_blocks": blocks})
    np.testing.assert_array_equal(values(out), x @ w.T)


@pytest.mark.parametrize("cluster, m, bn, blocks", [(2, 264, 64, 1), (4, 136, 64, 0)])
def test_right_side_bf16_clusters_multicast_b(cluster, m, bn, blocks):
    """Clusters of 2 and 4 CTAs along M share B's tile, each loading its share and multicasting it;
    tile rows past M (3 tile rows in clusters of 2, 2 in clusters of 4) still load and store nothing."""
    rng = np.random.default_rng(20 + cluster)
    w24, w = weight(rng, m, 128, "bf16")
    x = ints(rng, (72, 128))
    out = poisoned((72, m))
    nbwgmma.matmul(sim_array(x, "bf16"), w24.t(), in_dtype="bf16", out=out,
                   config={"bn": bn, "out_blocks": blocks, "cluster": cluster})
    np.testing.assert_array_equal(values(out), x @ w.T)


def test_left_side_f16_cluster_of_two_row_major_y():
    """``w24 @ y`` with y row-major (B N-major): each CTA of a pair loads one 64-column box of B's
    128 and multicasts it; M = 130 (two tile rows, one per CTA)."""
    rng = np.random.default_rng(30)
    dense = prune_24(ints(rng, (130, 64)))
    w24 = Sparse24.from_dense(cuda.to_device(dense.astype(np.float16)))
    y = ints(rng, (64, 136))
    out = nbwgmma.matmul(w24, cuda.to_device(y.astype(np.float16)), config={"bn": 128, "cluster": 2})
    np.testing.assert_array_equal(values(out, "f16"), dense @ y)


def test_a_cluster_given_alone_widens_the_default_tile_and_auto_takes_the_default():
    """From the simulator fuzz: ``{"cluster": 4}`` alone with y row-major (B N-major) was refused
    (the default 64-column tile does not split into four 64-column boxes); the default tile is now
    as wide as the cluster needs (256 columns here), where ``bn`` is not given."""
    rng = np.random.default_rng(31)
    dense = prune_24(ints(rng, (70, 64)))
    w24 = Sparse24.from_dense(cuda.to_device(dense.astype(np.float16)))
    y = ints(rng, (64, 40))
    out = nbwgmma.matmul(w24, cuda.to_device(y.astype(np.float16)), config={"cluster": 4})
    np.testing.assert_array_equal(values(out, "f16"), dense @ y)
    with pytest.raises(MatmulError, match="a cluster of 4 splits B's 64 rows"):  # a bn given is kept, and refused
        nbwgmma.matmul(w24, cuda.to_device(y.astype(np.float16)), config={"cluster": 4, "bn": 64})
    # config="auto" (no tuned classes for sparse products): the default path; it was refused
    out = nbwgmma.matmul(w24, cuda.to_device(y.astype(np.float16)), config="auto")
    np.testing.assert_array_equal(values(out, "f16"), dense @ y)


def test_one_row_dense_operand_with_an_unaligned_row_stride():
    """From a fuzz: a dense operand of one row whose (never stepped) row stride is no multiple of
    16 bytes raised the tensor map's internal error; its map now takes the row's own length."""
    dense = prune_24(np.ones((64, 64)))
    w24 = Sparse24.from_dense(cuda.to_device(dense.astype(np.float16)))
    x = FakeCUDAArray(cuda.to_device(np.ones((1, 67), np.float16)).copy_to_host()[:, :64])  # strides (134, 2)
    np.testing.assert_array_equal(nbwgmma.matmul(x, w24.t()).copy_to_host().astype(np.float64), np.ones((1, 64)) @ dense.T)
    np.testing.assert_array_equal(nbwgmma.matmul(w24, x.T).copy_to_host().astype(np.float64), dense @ np.ones((64, 1)))


def test_dtype_given_for_a_typed_weight_is_a_clear_error():
    with pytest.raises(nbwgmma.MatmulTypeError, match="a weight of f16 has its own type: leave dtype out"):
        Sparse24.from_dense(cuda.to_device(np.zeros((8, 8), np.float16)), dtype="bf16")
    with pytest.raises(nbwgmma.MatmulTypeError, match="dtype='e4m3' reads 1-byte raw bits; got a weight of u16"):
        Sparse24.from_dense(cuda.to_device(np.zeros((8, 8), np.uint16)), dtype="e4m3")


def test_an_empty_dense_operand_gives_an_empty_product():
    """NumPy (hence Numba) gives an empty array zero strides, which the dense operand's layout
    check refused; with no row or column to compute, the product is returned empty."""
    w24 = Sparse24.from_dense(cuda.to_device(prune_24(np.ones((64, 64))).astype(np.float16)))
    assert nbwgmma.matmul(cuda.device_array((0, 64), np.float16), w24.t()).shape == (0, 64)
    assert nbwgmma.matmul(w24, cuda.device_array((64, 0), np.float16)).shape == (64, 0)
