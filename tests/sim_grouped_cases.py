"""grouped_matmul in Numba's CUDA simulator (run by tests/test_sim.py in a child process with
NUMBA_ENABLE_CUDASIM=1): uneven groups, an empty one, offsets that are not multiples of the
tile, exact on small integers against the per-group products; bad input refused."""

import numpy as np
import pytest
from numba import config, cuda

from nbwgmma import MatmulError, MatmulTypeError, grouped_matmul
from nbwgmma.layout.wgmma_model import encode_elements

assert config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1"

RNG = np.random.default_rng(11)


def _bits(x):
    return cuda.to_device(encode_elements(x, "bf16").view(np.uint16).reshape(x.shape))


def _bf16(c):
    return (c.copy_to_host().astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("sizes", [[70, 0, 200, 33], [3, 0, 9, 1, 16, 5]])
def test_uneven_groups_one_empty_equal_the_per_group_products(sizes):
    """An empty group, ends that are no multiple of 128; tiles holding at most the groups' mean
    rows (rounded up to 8: 80, then 8) load A in boxes of that many rows, larger ones in 128-row
    boxes."""
    total, n, k = sum(sizes), 136, 96
    ends = np.cumsum(sizes).astype(np.int32)
    a = RNG.integers(-2, 3, (total, k)).astype(np.float64)
    w = RNG.integers(-2, 3, (len(sizes), n, k)).astype(np.float64)
    dw = _bits(w.reshape(-1, k)).reshape(len(sizes), n, k)
    out = cuda.to_device(np.full((total, n), 0x7FC0, np.uint16))  # NaN: every row must be written
    grouped_matmul(_bits(a), _swap(dw), cuda.to_device(ends), out=out,
                   in_dtype="bf16", validate=True)
    ref = np.concatenate([a[e - s:e] @ w[g].T for g, (s, e) in enumerate(zip(sizes, ends))])
    np.testing.assert_array_equal(_bf16(out), ref)


@pytest.mark.parametrize("per_group", [True, False])
def test_bias_per_group_and_relu(per_group):
    """relu(A_g @ B_g + bias[g]) with a bias row per group (an expert's), or one for all."""
    sizes = [70, 0, 150]
    total, n, k = sum(sizes), 72, 64
    ends = np.cumsum(sizes).astype(np.int32)
    a = RNG.integers(-2, 3, (total, k)).astype(np.float64)
    w = RNG.integers(-2, 3, (len(sizes), n, k)).astype(np.float64)
    bias = RNG.integers(-8, 9, (len(sizes), n) if per_group else (n,)).astype(np.float32)
    dw = _bits(w.reshape(-1, k)).reshape(len(sizes), n, k)
    out = cuda.to_device(np.full((total, n), 0x7FC0, np.uint16))
    grouped_matmul(_bits(a), _swap(dw), cuda.to_device(ends), out=out, in_dtype="bf16", bias=cuda.to_device(bias),
                   activation="relu")
    rows = [a[e - s:e] @ w[g].T + (bias[g] if per_group else bias) for g, (s, e) in enumerate(zip(sizes, ends))]
    np.testing.assert_array_equal(_bf16(out), np.maximum(np.concatenate(rows), 0))


def test_f32_out_with_bias_and_relu_and_its_bad_types():
    """out_dtype="f32" for bf16 operands (ping-pong, stored from the registers), groups ending
    inside tiles, exact; another output type refused, and an out of the wrong type."""
    sizes = [130, 0, 61]
    total, n, k = sum(sizes), 136, 64
    ends = np.cumsum(sizes).astype(np.int32)
    a = RNG.integers(-2, 3, (total, k)).astype(np.float64)
    w = RNG.integers(-2, 3, (len(sizes), n, k)).astype(np.float64)
    bias = RNG.integers(-8, 9, (len(sizes), n)).astype(np.float32) / 4
    dw = _swap(_bits(w.reshape(-1, k)).reshape(len(sizes), n, k))
    got = grouped_matmul(_bits(a), dw, cuda.to_device(ends), in_dtype="bf16", out_dtype="f32",
                         bias=cuda.to_device(bias), activation="relu")
    rows = [a[e - s:e] @ w[g].T + bias[g] for g, (s, e) in enumerate(zip(sizes, ends))]
    h = got.copy_to_host()
    assert h.dtype == np.float32
    np.testing.assert_array_equal(h, np.maximum(np.concatenate(rows), 0))
    with pytest.raises(MatmulTypeError, match=r"the output is of the input type \(bf16\) or f32; got out_dtype=f16"):
        grouped_matmul(_bits(a), dw, cuda.to_device(ends), in_dtype="bf16", out_dtype="f16")
    # an f32 out given without out_dtype: the output type is taken from it, as matmul takes it
    out32 = cuda.to_device(np.full((total, n), np.nan, np.float32))
    grouped_matmul(_bits(a), dw, cuda.to_device(ends), in_dtype="bf16", bias=cuda.to_device(bias),
                   activation="relu", out=out32)
    np.testing.assert_array_equal(out32.copy_to_host(), np.maximum(np.concatenate(rows), 0))
    with pytest.raises(MatmulTypeError, match=r"out must be an f32 array; got u16$"):
        grouped_matmul(_bits(a), dw, cuda.to_device(ends), in_dtype="bf16", out_dtype="f32",
                       out=cuda.to_device(np.zeros((total, n), np.uint16)))


def test_row_major_b_with_k_not_a_multiple_of_the_stage():
    """B (G, K, N) with N contiguous: a 3-D map, so the K tail of group g reads zeros, not group
    g + 1's first rows (K = 80: the second stage holds 16 rows of K)."""
    sizes = [130, 20, 0, 64]
    total, n, k = sum(sizes), 136, 80
    ends = np.cumsum(sizes).astype(np.int32)
    a = RNG.integers(-2, 3, (total, k)).astype(np.float64)
    bmat = RNG.integers(-2, 3, (len(sizes), k, n)).astype(np.float64)
    db = _bits(bmat.reshape(-1, n)).reshape(len(sizes), k, n)
    out = cuda.to_device(np.full((total, n), 0x7FC0, np.uint16))
    grouped_matmul(_bits(a), db, cuda.to_device(ends), out=out, in_dtype="bf16")
    ref = np.concatenate([a[e - s:e] @ bmat[g] for g, (s, e) in enumerate(zip(sizes, ends))])
    np.testing.assert_array_equal(_bf16(out), ref)


def test_bad_bias_and_activation_are_refused():
    a, w = _bits(np.ones((8, 16))), _bits(np.ones((2 * 24, 16))).reshape(2, 24, 16)
    ends = cuda.to_device(np.array([4, 8], np.int32))
    for kw, msg in ((dict(activation="tanh"), "activation must be one of"),
                    (dict(bias=cuda.to_device(np.ones((3, 24), np.float32))), r"bias must have shape \(2, 24\)"),
                    (dict(bias=cuda.to_device(np.ones(24, np.int32))), "bias must be f32, bf16 or f16"),
                    (dict(bias=cuda.to_device(np.ones(24, np.float16))),
                     r"bias must be f32, bf16 or f16 \(a Numba array: f32, .*\); got f16"),
                    (dict(in_dtype="f16", out=cuda.to_device(np.zeros((8, 24), np.uint16))),
                     r"out must be an f16 array \(float16: a uint16 array holds bf16 bits")):
        with pytest.raises(MatmulError, match=msg):
            grouped_matmul(a, _swap(w), ends, **({"in_dtype": "bf16"} | kw))
    out = cuda.to_device(np.full((8, 24), np.nan, np.float32))  # a bias in out's own first rows: read after a
    with pytest.raises(MatmulError, match="out overlaps bias"):  # tile wrote them (a wrong answer before)
        grouped_matmul(a, _swap(w), ends, in_dtype="bf16", out=out, bias=out[:2])


def test_a_bad_stream_is_refused_naming_grouped_matmul():
    """The message named matmul."""
    ga, gb = cuda.to_device(np.ones((24, 16), np.float16)), cuda.to_device(np.ones((2, 16, 8), np.float16))
    with pytest.raises(MatmulTypeError, match=r"^grouped_matmul: stream must be a CUDA stream object or a raw "
                                              r"handle; got str$"):
        grouped_matmul(ga, gb, cuda.to_device(np.array([10, 24], np.int32)), stream="default")


def _swap(dw):
    """B[g] = w[g]^T as a view (G, K, N) of the (G, N, K) stack."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    return FakeCUDAArray(dw._ary.transpose(0, 2, 1))


def test_bad_offsets_and_layouts_are_refused():
    a = _bits(np.ones((64, 32)))
    w = _bits(np.ones((3 * 48, 32))).reshape(3, 48, 32)
    b = _swap(w)
    cases = [
        (dict(offs=cuda.to_device(np.array([10, 5, 64], np.int32)), validate=True),
         r"must not decrease; offs\[1\] = 5"),
        (dict(offs=cuda.to_device(np.array([10, 20, 65], np.int32)), validate=True), "past A's 64 rows"),
        (dict(offs=cuda.to_device(np.array([10, 20, 64], np.int64))), "offs must be int32"),
        (dict(offs=cuda.to_device(np.array([10, 64], np.int32))), r"offs must have shape \(3,\) \(one end per group "
                                                                   r"of B, whose shape is \(3, 32, 48\)\); got shape \(2,\)"),
        (dict(offs=cuda.to_device(np.array([-5, 20, 64], np.int32)), validate=True),
         r"offs must be running ends, 0 or more; got offs\[0\] = -5"),
        (dict(offs=np.array([10, 20, 64], np.int32)), "offs"),
    ]
    for kw, msg in cases:
        with pytest.raises(MatmulError, match=msg):
            grouped_matmul(a, b, in_dtype="bf16", **kw)
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    strided = FakeCUDAArray(_bits(np.ones((3 * 32, 96))).reshape(3, 32, 96)._ary[:, :, ::2])  # neither K nor N
    with pytest.raises(MatmulError, match=r"B \(G, K, N\) must have N contiguous"):
        grouped_matmul(a, strided, cuda.to_device(np.array([1, 2, 3], np.int32)), in_dtype="bf16")


def test_offsets_past_the_end_are_clamped_not_followed():
    """Without validate, a last offset past A's rows cannot make the kernel read or write
    outside A and out: the group ends with A."""
    total, n, k = 100, 48, 32
    a = RNG.integers(-2, 3, (total, k)).astype(np.float64)
    w = RNG.integers(-2, 3, (2, n, k)).astype(np.float64)
    out = cuda.to_device(np.full((total, n), 0x7FC0, np.uint16))
    grouped_matmul(_bits(a), _swap(_bits(w.reshape(-1, k)).reshape(2, n, k)),
                   cuda.to_device(np.array([40, 1000], np.int32)), out=out, in_dtype="bf16")
    np.testing.assert_array_equal(_bf16(out), np.concatenate([a[:40] @ w[0].T, a[40:] @ w[1].T]))


def test_masked_groups_compute_only_their_counted_rows():
    """A [G, T, K] with counts [G]: each group's first counts[g] rows, the rest untouched."""
    groups, t, n, k = 3, 150, 64, 48
    counts = np.array([150, 0, 61], np.int32)
    a = RNG.integers(-2, 3, (groups, t, k)).astype(np.float64)
    w = RNG.integers(-2, 3, (groups, n, k)).astype(np.float64)
    out = cuda.to_device(np.full((groups, t, n), 0x7FC0, np.uint16))
    grouped_matmul(_bits(a.reshape(-1, k)).reshape(groups, t, k), _swap(_bits(w.reshape(-1, k)).reshape(groups, n, k)),
                   cuda.to_device(counts), out=out, in_dtype="bf16", validate=True)
    got = _bf16(out)
    for g in range(groups):
        np.testing.assert_array_equal(got[g, :counts[g]], a[g, :counts[g]] @ w[g].T)
        assert np.isnan(got[g, counts[g]:]).all()  # not computed, not written
    with pytest.raises(MatmulError, match=r"counts must be in \[0, 150\]"):
        grouped_matmul(_bits(a.reshape(-1, k)).reshape(groups, t, k),
                       _swap(_bits(w.reshape(-1, k)).reshape(groups, n, k)),
                       cuda.to_device(np.array([1, 151, 0], np.int32)), in_dtype="bf16", validate=True)


@pytest.fixture
def cooperative(monkeypatch):
    """The cooperative schedule (128 x 256 tiles, kit.Cooperative) for groups of any size."""
    import nbwgmma.frontend.grouped as grouped

    monkeypatch.setattr(grouped, "COOPERATIVE_ROWS", 0)


def test_cooperative_schedule_uneven_groups_bias_relu(cooperative):
    test_bias_per_group_and_relu(True)


def test_cooperative_schedule_row_major_b(cooperative):
    test_row_major_b_with_k_not_a_multiple_of_the_stage()


@pytest.mark.parametrize("schedule", ["pingpong", "cooperative"])
def test_groups_of_a_long_k_turn_the_ring_over(schedule, monkeypatch):
    """K = 512: more k-blocks a tile than stages, so each consumer's ring phases turn over (the
    other cases' K of 96 or less never did: a turn passed too early could not show)."""
    if schedule == "cooperative":
        import nbwgmma.frontend.grouped as grouped

        monkeypatch.setattr(grouped, "COOPERATIVE_ROWS", 0)
    sizes = [70, 200, 33]
    total, n, k = sum(sizes), 136, 512
    ends = np.cumsum(sizes).astype(np.int32)
    rng = np.random.default_rng(3)
    a = rng.integers(-1, 2, (total, k)).astype(np.float64)
    w = rng.integers(-1, 2, (len(sizes), n, k)).astype(np.float64)
    dw = _bits(w.reshape(-1, k)).reshape(len(sizes), n, k)
    out = cuda.to_device(np.full((total, n), 0x7FC0, np.uint16))
    grouped_matmul(_bits(a), _swap(dw), cuda.to_device(ends), out=out, in_dtype="bf16", validate=True)
    ref = np.concatenate([a[e - s:e] @ w[g].T for g, (s, e) in enumerate(zip(sizes, ends))])
    np.testing.assert_array_equal(_bf16(out), ref)


def test_zero_rows_and_a_width_of_40_bytes_are_taken():
    """From a hunt for valid calls the library refused: every form with zero rows (NumPy gives
    empty arrays zero strides, which the layout checks refused, the library's own empty outputs
    included), and f16 products whose N (20: 40-byte rows) is no multiple of 8 (the output
    allocated unpadded, then refused; a padded given one refused too)."""
    b = cuda.to_device(np.ones((2, 16, 8), np.float16))
    zeros = cuda.to_device(np.zeros(2, np.int32))
    assert grouped_matmul(cuda.device_array((0, 16), np.float16), b, zeros).shape == (0, 8)
    assert grouped_matmul(cuda.device_array((2, 0, 16), np.float16), b, zeros).shape == (2, 0, 8)
    ends = cuda.to_device(np.array([8, 16], np.int32))
    got = grouped_matmul(cuda.to_device(np.ones((16, 0), np.float16)).T, cuda.to_device(np.ones((16, 8), np.float16)),
                         ends)
    assert got.shape == (2, 0, 8)
    # K = 0 with rows to write: zeros in the groups' rows (B's zero strides not taken for a layout)
    got = grouped_matmul(cuda.device_array((2, 8, 0), np.float16), cuda.device_array((2, 0, 8), np.float16),
                         cuda.to_device(np.array([3, 5], np.int32))).copy_to_host()
    assert (got[0, :3] == 0).all() and (got[1, :5] == 0).all()
    x = RNG.integers(-3, 4, (40, 64)).astype(np.float16)
    w = RNG.integers(-3, 4, (2, 20, 64)).astype(np.float16)
    offs = cuda.to_device(np.array([15, 40], np.int32))
    want = np.concatenate([x[:15].astype(np.float64) @ w[0].T, x[15:].astype(np.float64) @ w[1].T])
    got = grouped_matmul(cuda.to_device(x), _swap(cuda.to_device(w)), offs)  # allocated: rows padded
    np.testing.assert_array_equal(got.copy_to_host(), want)
    padded = cuda.to_device(np.full((40, 24), np.nan, np.float16))
    grouped_matmul(cuda.to_device(x), _swap(cuda.to_device(w)), offs, out=padded[:, :20])
    np.testing.assert_array_equal(padded.copy_to_host()[:, :20], want)


def test_k_zero_writes_the_bias_and_activation_of_a_zero_product():
    """K = 0: each group's rows get ``activation(bias[g])`` (zeros without a bias), in the
    row-stacked and the masked layouts; rows past the last end are left as they were."""
    n = 24
    bias = (np.arange(3 * n, dtype=np.float32).reshape(3, n) % 11) - 5
    out = cuda.to_device(np.full((12, n), np.nan, np.float16))
    grouped_matmul(cuda.device_array((12, 0), np.float16), cuda.device_array((3, 0, n), np.float16),
                   cuda.to_device(np.array([3, 3, 9], np.int32)), out=out, bias=cuda.to_device(bias),
                   activation="relu")
    got = out.copy_to_host().astype(np.float64)
    want = np.concatenate([np.repeat(np.maximum(bias[g], 0)[None], rows, 0) for g, rows in enumerate((3, 0, 6))])
    np.testing.assert_array_equal(got[:9], want)
    assert np.isnan(got[9:]).all()
    got = grouped_matmul(cuda.device_array((3, 4, 0), np.float16), cuda.device_array((3, 0, n), np.float16),
                         cuda.to_device(np.array([4, 2, 0], np.int32)), bias=cuda.to_device(bias),
                         out_dtype="f32").copy_to_host()
    np.testing.assert_array_equal(got[0], np.broadcast_to(bias[0], (4, n)))
    np.testing.assert_array_equal(got[1, :2], np.broadcast_to(bias[1], (2, n)))
