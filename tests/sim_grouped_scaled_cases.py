"""The block-scaled fp8 grouped GEMM in Numba's CUDA simulator (run by tests/test_sim.py in a
child process with NUMBA_ENABLE_CUDASIM=1): four uneven groups (one empty, ends no multiple of
the tile), a ragged N and K, the masked layout, exact on small integers with power-of-two scales
against the per-group float64 products; bad scales refused before any launch."""

import numpy as np
import pytest
from numba import config, cuda
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from nbwgmma import MatmulError, MatmulTypeError, grouped_matmul
from nbwgmma.layout.wgmma_model import decode_elements, encode_elements

assert config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1"


def _fp8(x):
    return cuda.to_device(encode_elements(x, "e4m3").reshape(x.shape))


def _pow2(rng, shape):
    return np.exp2(rng.integers(-2, 3, shape)).astype(np.float32)


def _reference(a, w, sa, sw):
    """float64 ``sum_kb (a_kb @ w_kb^T) * sa[:, kb] * sw[nb, kb]`` of one group."""
    n, k = w.shape
    out = np.zeros((a.shape[0], n))
    for kb in range(-(-k // 128)):
        blk = slice(128 * kb, 128 * kb + 128)
        out += (a[:, blk] @ w[:, blk].T) * sa[:, kb][:, None] * np.repeat(sw[:, kb], 128)[:n][None, :]
    return out


def _bf16(c):
    h = c.copy_to_host()
    return decode_elements(h.view(np.uint8).reshape(h.shape[0], -1), "bf16").reshape(h.shape)


def _operands(sizes, n, k, seed):
    rng = np.random.default_rng(seed)
    total, g = sum(sizes), len(sizes)
    a = rng.integers(-2, 3, (total, k)).astype(np.float64)
    w = rng.integers(-2, 3, (g, n, k)).astype(np.float64)
    sa, sw = _pow2(rng, (total, -(-k // 128))), _pow2(rng, (g, -(-n // 128), -(-k // 128)))
    dw = _fp8(w.reshape(-1, k)).copy_to_host().reshape(g, n, k)
    return a, w, sa, sw, _fp8(a), FakeCUDAArray(dw.transpose(0, 2, 1))  # B = w^T per group: K contiguous


@pytest.mark.parametrize("sizes", [[70, 0, 150, 27], [3, 0, 9, 1, 16, 5]])
def test_uneven_groups_one_empty_equal_the_per_group_products(sizes):
    """Groups of any size; tiles holding at most the groups' mean rows (rounded up to 8: 64,
    then 8) load A in boxes of that many rows, larger ones in 128-row boxes."""
    n, k = 120, 208  # one partial N tile, two K blocks (the last partial)
    a, w, sa, sw, da, db = _operands(sizes, n, k, 1)
    ends = np.cumsum(sizes).astype(np.int32)
    out = cuda.to_device(np.full((sum(sizes), n), 0x7FC0, np.uint16))  # NaN: every row must be written
    got = grouped_matmul(da, db, cuda.to_device(ends), out=out, scale_a=cuda.to_device(sa),
                         scale_b=cuda.to_device(sw), in_dtype="e4m3", validate=True)
    assert got is out
    ref = np.concatenate([_reference(a[e - s:e], w[g], sa[e - s:e], sw[g])
                          for g, (s, e) in enumerate(zip(sizes, ends))])
    want = decode_elements(encode_elements(ref, "bf16"), "bf16").reshape(ref.shape)
    np.testing.assert_array_equal(_bf16(out), want)


@pytest.mark.parametrize("per_group", [True, False])
def test_bias_and_relu_on_uneven_groups_f32_out(per_group):
    """relu(A_g @ B_g^T + bias) with the bias one row per group or one for all: exact on small
    integers (f32 out), rows past each group's end untouched."""
    sizes = [70, 0, 150, 27]
    n, k = 136, 272  # a partial N tile, a partial third K block
    a, w, sa, sw, da, db = _operands(sizes, n, k, 4)
    rng = np.random.default_rng(5)
    bias = rng.integers(-8, 9, (len(sizes), n) if per_group else (n,)).astype(np.float32) / 2
    ends = np.cumsum(sizes).astype(np.int32)
    out = cuda.to_device(np.full((sum(sizes), n), np.nan, np.float32))
    grouped_matmul(da, db, cuda.to_device(ends), out=out, out_dtype="f32", scale_a=cuda.to_device(sa),
                   scale_b=cuda.to_device(sw), in_dtype="e4m3", bias=cuda.to_device(bias), activation="relu")
    ref = np.concatenate([np.maximum(_reference(a[e - s:e], w[g], sa[e - s:e], sw[g])
                                     + (bias[g] if per_group else bias), 0)
                          for g, (s, e) in enumerate(zip(sizes, ends))])
    np.testing.assert_array_equal(out.copy_to_host(), ref)


def test_masked_layout_computes_only_the_counted_rows_f32_out():
    g, t, n, k = 2, 80, 72, 128
    a, w, sa, sw, da, db = _operands([t] * g, n, k, 2)
    counts = np.array([80, 9], np.int32)
    out = cuda.to_device(np.full((g, t, n), np.nan, np.float32))
    grouped_matmul(FakeCUDAArray(da._ary.reshape(g, t, k)), db, cuda.to_device(counts), out=out, out_dtype="f32",
                   scale_a=cuda.to_device(sa.reshape(g, t, 1)), scale_b=cuda.to_device(sw), in_dtype="e4m3")
    h = out.copy_to_host()
    for j in range(g):
        rows = slice(j * t, j * t + counts[j])
        np.testing.assert_array_equal(h[j, :counts[j]], _reference(a[rows], w[j], sa[rows], sw[j]))
        assert np.isnan(h[j, counts[j]:]).all()  # rows past the count: not written


def test_an_allocated_output_pads_rows_that_tma_could_not_store():
    """From a fuzz: with N * 2 bytes not a multiple of 16 (N = 20) the output the call allocated
    was refused by its own check (rows 16-byte apart); it now pads its rows, as the 16-bit
    grouped GEMM's does, and returns the (rows, N) view."""
    sizes, n, k = [5, 0, 11], 20, 160
    a, w, sa, sw, da, db = _operands(sizes, n, k, 3)
    ends = np.cumsum(sizes).astype(np.int32)
    got = grouped_matmul(da, db, cuda.to_device(ends), scale_a=cuda.to_device(sa), scale_b=cuda.to_device(sw),
                         in_dtype="e4m3")
    assert got.shape == (sum(sizes), n) and got.strides[0] % 16 == 0
    r0 = 0
    for g, rows in enumerate(sizes):
        if rows:
            want = _reference(a[r0:r0 + rows], w[g], sa[r0:r0 + rows], sw[g])
            np.testing.assert_array_equal(_bf16(got)[r0:r0 + rows], decode_elements(
                encode_elements(want, "bf16"), "bf16").reshape(want.shape))
        r0 += rows


def test_bad_scales_are_refused_naming_the_argument():
    sizes = [40, 24]
    a, w, sa, sw, da, db = _operands(sizes, 64, 128, 3)
    ends = cuda.to_device(np.cumsum(sizes).astype(np.int32))
    good = {"scale_a": cuda.to_device(sa), "scale_b": cuda.to_device(sw), "in_dtype": "e4m3"}
    for change, exc, msg in (
            ({"scale_a": None}, MatmulError, "fp8 operands need scale_a as an array"),
            ({"scale_b": 2.0}, MatmulError, "need scale_b as an array"),
            ({"scale_a": cuda.to_device(sa[:10])}, MatmulError, r"scale_a must have shape \(64, 1\)"),
            ({"scale_b": cuda.to_device(sw[0])}, MatmulError, r"scale_b must have shape \(2, 1, 1\)"),
            ({"scale_a": cuda.to_device(sa.astype(np.float64))}, MatmulTypeError, "scale_a must be f32"),
            ({"out_dtype": "e4m3"}, MatmulTypeError, "bf16, f16 or f32 out"),
            ({"bias": cuda.to_device(np.zeros(63, np.float32))}, MatmulError, r"bias must have shape \(2, 64\)"),
            ({"activation": "tanh"}, MatmulError, "activation must be one of")):
        with pytest.raises(exc, match=msg) as e:
            grouped_matmul(da, db, ends, **(good | change))
        assert "\n" not in str(e.value)
    row_major_b = FakeCUDAArray(np.ascontiguousarray(db._ary))  # (G, K, N) with N contiguous
    with pytest.raises(MatmulError, match="transpose of a contiguous"):
        grouped_matmul(da, row_major_b, ends, **good)


def test_masked_layout_with_no_groups_is_an_empty_output():
    """G = 0 in the masked layout (A (0, T, K), B (0, K, N), scales (0, T, 1) and (0, 1, 1)) with
    the strides a PyTorch tensor of those shapes has: an empty (0, T, N) output (the scale shapes
    divided the rows by G: a ZeroDivisionError, then the new output's zero strides were refused)."""
    t, n, k = 8, 16, 128
    view = np.lib.stride_tricks.as_strided
    a = FakeCUDAArray(view(np.zeros(16, np.uint8), (0, t, k), (t * k, k, 1)))
    b = FakeCUDAArray(view(np.zeros(16, np.uint8), (0, k, n), (n * k, 1, k)))
    sa = FakeCUDAArray(view(np.zeros(4, np.float32), (0, t, 1), (t * 4, 4, 4)))
    sb = FakeCUDAArray(view(np.zeros(4, np.float32), (0, 1, 1), (4, 4, 4)))
    out = grouped_matmul(a, b, cuda.to_device(np.zeros(0, np.int32)), in_dtype="e4m3", out_dtype="f32",
                         scale_a=sa, scale_b=sb)
    assert out.shape == (0, t, n)


def test_k_zero_writes_the_bias_and_activation_of_a_zero_product():
    """K = 0 with fp8 operands: the scales (of KB = 0 blocks) are checked, and each group's rows
    get ``activation(bias[g])``, as the 16-bit form gives them."""
    n = 24
    bias = (np.arange(3 * n, dtype=np.float32).reshape(3, n) % 11) - 5
    got = grouped_matmul(cuda.device_array((12, 0), np.uint8), cuda.device_array((3, 0, n), np.uint8),
                         cuda.to_device(np.array([3, 3, 9], np.int32)), in_dtype="e4m3",
                         scale_a=cuda.device_array((12, 0), np.float32), scale_b=cuda.device_array((3, 1, 0), np.float32),
                         bias=cuda.to_device(bias), activation="relu", out_dtype="f32").copy_to_host()
    want = np.concatenate([np.repeat(np.maximum(bias[g], 0)[None], rows, 0) for g, rows in enumerate((3, 0, 6))])
    np.testing.assert_array_equal(got[:9], want)
    with pytest.raises(MatmulError, match="scale_b must have shape"):
        grouped_matmul(cuda.device_array((12, 0), np.uint8), cuda.device_array((3, 0, n), np.uint8),
                       cuda.to_device(np.array([3, 3, 9], np.int32)), in_dtype="e4m3",
                       scale_a=cuda.device_array((12, 0), np.float32), scale_b=cuda.device_array((3, 1, 1), np.float32))
