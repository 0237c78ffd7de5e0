"""grouped_matmul's K-grouped form (A (M, total), B (total, N), out (G, M, N): MoE weight
gradients) in Numba's CUDA simulator (run by tests/test_grouped_wgrad_cpu.py in a child process
with NUMBA_ENABLE_CUDASIM=1): groups whose ends are no multiple of 64 (the last k-block of a
group holds the next group's rows, which must not count), an empty group, a group of fewer than
16 rows, M and N no multiple of the tile; exact on small integers against float64 products."""

import numpy as np
import pytest
from numba import config, cuda
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from nbwgmma import MatmulError, MatmulTypeError, grouped_matmul
from nbwgmma.layout.wgmma_model import encode_elements

assert config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1"

RNG = np.random.default_rng(5)


def _bits(x, t="bf16"):
    return encode_elements(x, t).view(np.uint16).reshape(x.shape)


def _value(bits, t="bf16"):
    if t == "f16":
        return bits.view(np.float16).astype(np.float64)
    return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def _reference(a, b, ends):
    starts = np.concatenate([[0], ends[:-1]])
    return np.stack([a[:, s:e] @ b[s:e] for s, e in zip(starts, ends)])


def test_weight_gradient_layout_ragged_and_empty_groups():
    """dW_g = dy_g^T @ x_g with dy (total, M) and x (total, N) row-major, read in place: group
    sizes 70, 0, 9, 100 (ends 70, 70, 79, 179: none a multiple of 64; the 9-row group lies inside
    one k-block of its own and its block holds 55 rows of the next group), M = 136 and N = 72
    (partial tiles in both). The neighbours' rows hold a large value, so a row that leaked into
    another group's sum would show."""
    sizes = [70, 0, 9, 100]
    ends = np.cumsum(sizes).astype(np.int32)
    total, m, n = int(ends[-1]), 136, 72
    dy = RNG.integers(-2, 3, (total, m)).astype(np.float64)
    x = RNG.integers(-2, 3, (total, n)).astype(np.float64)
    dy[70:79] = 64  # group 2 only: counted anywhere else, it breaks the check
    out = cuda.to_device(np.full((len(sizes), m, n), 0x7FC0, np.uint16))  # NaN: every element must be written
    d_dy = cuda.to_device(_bits(dy))
    grouped_matmul(FakeCUDAArray(d_dy._ary.T), cuda.to_device(_bits(x)), cuda.to_device(ends), out=out,
                   in_dtype="bf16", validate=True)
    np.testing.assert_array_equal(_value(out.copy_to_host()), _reference(dy.T, x, ends))


def test_copied_layouts_f16_and_a_zero_group_first():
    """A row-major (M, total) and B (total, N) column-major: both copied into the kernel's
    layouts (M- and N-contiguous, rows padded to 16 bytes); f16; the first group empty, the
    last 13 rows (less than one wgmma K step), M = 70 and N = 20 (no multiple of 8)."""
    sizes = [0, 66, 13]
    ends = np.cumsum(sizes).astype(np.int32)
    total, m, n = int(ends[-1]), 70, 20
    a = RNG.integers(-3, 4, (m, total)).astype(np.float64)
    b = RNG.integers(-3, 4, (total, n)).astype(np.float64)
    db = cuda.to_device(np.ascontiguousarray(_bits(b, "f16").T))  # (N, total): B's transpose, row-major
    out = grouped_matmul(cuda.to_device(_bits(a, "f16").view(np.float16)),
                         FakeCUDAArray(db._ary.view(np.float16).T), cuda.to_device(ends))
    got = out.copy_to_host()
    assert got.shape == (3, m, n) and got.dtype == np.float16
    np.testing.assert_array_equal(got.astype(np.float64), _reference(a, b, ends))


def test_bad_offsets_are_clamped_and_all_empty_gives_zeros():
    """Without validate, offsets past the end or decreasing cannot reach outside A or B: group g
    runs from offs[g-1] clamped into [0, total] to offs[g] clamped into [that start, total].
    Offsets all zero: every group empty, out = 0."""
    total, m, n = 40, 16, 24
    a = RNG.integers(-2, 3, (total, m)).astype(np.float64)  # dy
    b = RNG.integers(-2, 3, (total, n)).astype(np.float64)
    da = cuda.to_device(_bits(a))
    ends = np.array([30, 10, 1000], np.int32)  # groups [0, 30), [30, 30) (end raised to the start), [10, 40)
    out = grouped_matmul(FakeCUDAArray(da._ary.T), cuda.to_device(_bits(b)), cuda.to_device(ends), in_dtype="bf16")
    want = np.stack([a[:30].T @ b[:30], np.zeros((m, n)), a[10:].T @ b[10:]])
    np.testing.assert_array_equal(_value(out.copy_to_host()), want)
    out = cuda.to_device(np.full((2, m, n), 0x7FC0, np.uint16))
    grouped_matmul(FakeCUDAArray(da._ary.T), cuda.to_device(_bits(b)), cuda.to_device(np.zeros(2, np.int32)),
                   out=out, in_dtype="bf16")
    assert not out.copy_to_host().any()


def test_bad_input_is_refused_naming_the_argument():
    a = FakeCUDAArray(cuda.to_device(np.ones((32, 16), np.uint16))._ary.T)  # (16, 32)
    b = cuda.to_device(np.ones((32, 24), np.uint16))
    ends = cuda.to_device(np.array([10, 32], np.int32))
    cases = [
        ((a, cuda.to_device(np.ones((31, 24), np.uint16)), ends), {}, MatmulError, "must share the grouped dimension"),
        ((a, b, cuda.to_device(np.array([10, 32], np.int64))), {}, MatmulTypeError, "offs must be int32"),
        ((a, cuda.to_device(np.ones((32, 24), np.float16)), ends), {}, MatmulTypeError,
         "in_dtype=bf16 reads raw 2-byte integers; B holds f16"),
        ((a, b, ends), {"in_dtype": None}, MatmulTypeError, "A holds uint16: say with in_dtype"),
        ((a, b, cuda.to_device(np.array([20, 10], np.int32))), dict(validate=True), MatmulError,
         r"must not decrease; offs\[1\] = 10"),
        ((a, b, cuda.to_device(np.array([10, 33], np.int32))), dict(validate=True), MatmulError,
         r"past the 32 columns of A \(rows of B; a 2-D B is the weight-gradient form: one weight per group of A's "
         r"rows is a 3-D B, \(G, K, N\)\)"),
        ((a, b, ends), dict(out=cuda.to_device(np.ones((2, 16, 23), np.uint16))), MatmulError, "out must be a"),
        ((a, b, ends), dict(bias=cuda.to_device(np.ones(24, np.float32))), MatmulError, "take neither|takes neither"),
        ((a, b, ends), dict(out_dtype="f32"), MatmulTypeError, "output has the input type"),
    ]
    for args, kw, exc, msg in cases:
        with pytest.raises(exc, match=msg):
            grouped_matmul(*args, **({"in_dtype": "bf16"} | kw))  # uint16 arrays: bf16 bits


def test_several_ctas_walk_the_units_in_pairs():
    """The kernel launched directly with 2 CTAs (the front end launches one in the simulator):
    5 groups of one tile each, so CTA 0 takes pairs 0 and 2 (the last pair has one tile: its
    second consumer has none and passes no turn) and CTA 1 pair 1."""
    from nbwgmma.kernels.grouped_wgrad import SMEM, THREADS, grouped_wgrad_kernel
    from nbwgmma.launch import launch
    from nbwgmma.tma import TensorMap

    sizes = [10, 70, 0, 64, 3]
    ends = np.cumsum(sizes).astype(np.int32)
    total, m, n = int(ends[-1]), 72, 40
    dy = RNG.integers(-2, 3, (total, m)).astype(np.float64)
    x = RNG.integers(-2, 3, (total, n)).astype(np.float64)
    d_dy, d_x = cuda.to_device(_bits(dy)), cuda.to_device(_bits(x))
    out = cuda.to_device(np.full((len(sizes), m, n), 0x7FC0, np.uint16))
    maps = [TensorMap(d_dy, (64, 64), dtype="bf16"), TensorMap(d_x, (64, 64), dtype="bf16"),
            TensorMap(out, (1, 64, 64), dtype="bf16")]
    launch(grouped_wgrad_kernel("bf16"), 2, THREADS,
           tuple(t.address for t in maps) + (cuda.to_device(ends), np.int32(m), np.int32(n), np.int32(total)),
           smem=SMEM)
    np.testing.assert_array_equal(_value(out.copy_to_host()), _reference(dy.T, x, ends))
