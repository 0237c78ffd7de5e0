"""acc_load and acc_store on the GPU: a fragment read from and written back to arrays of every
element type, contiguous or not, at aligned and unaligned offsets and across the array's edges
(the paired accesses and the element-wise clipped path), against the tile's plain copy."""

import numpy as np
import pytest
from numba import cuda

from nbwgmma.intrinsics import acc_load, acc_scale, acc_store

pytestmark = pytest.mark.gpu

KIND = "f32.bf16.bf16"
N = 64
POISON = {np.float32: np.float32(-777.0), np.float16: np.float16(-77.0), np.uint16: np.uint16(0xDEAD)}


@cuda.jit
def _double(src, out, r0, c0):
    t = cuda.threadIdx.x
    acc = acc_load(KIND, N, src, t, r0, c0)
    acc_store(acc_scale(acc, 2.0), KIND, out, t, r0, c0)


def _bf16_bits(x):
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def _values(a, dtype):
    return (a.astype(np.uint32) << 16).view(np.float32) if dtype == np.uint16 else a.astype(np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.uint16])
@pytest.mark.parametrize("shape, r0, c0", [((64, 64), 0, 0), ((100, 90), 8, 16), ((70, 37), 3, 5),
                                           ((70, 37), 6, 2), ((40, 50), 0, 7), ((130, 130), 90, 100)])
@pytest.mark.parametrize("contiguous", [True, False])
def test_fragment_round_trip(dtype, shape, r0, c0, contiguous):
    rng = np.random.default_rng(hash((shape, r0, c0)) % 2**32)
    ints = rng.integers(-64, 64, size=(shape[0], shape[1] + 3)).astype(np.float32)  # exact when doubled
    full = _bf16_bits(ints) if dtype == np.uint16 else ints.astype(dtype)
    src_h = full[:, :shape[1]] if contiguous else full[:, 3:]
    out_h = np.full((shape[0], shape[1] + 3), POISON[dtype], dtype)
    src_d, out_full = cuda.to_device(np.ascontiguousarray(full)), cuda.to_device(out_h)
    src = src_d[:, :shape[1]] if contiguous else src_d[:, 3:]
    out = out_full[:, :shape[1]] if contiguous else out_full[:, 3:]
    if contiguous:  # whole arrays, so the kernel sees C-contiguous rows
        src, out = cuda.to_device(np.ascontiguousarray(src_h)), cuda.to_device(np.full(shape, POISON[dtype], dtype))
    _double[1, 128](src, out, r0, c0)
    got = out.copy_to_host()
    want = np.full(shape, POISON[dtype], dtype)
    tile = _values(np.ascontiguousarray(src_h)[r0:r0 + 64, c0:c0 + N], dtype) * 2
    want[r0:r0 + 64, c0:c0 + N] = _bf16_bits(tile) if dtype == np.uint16 else tile.astype(dtype)
    np.testing.assert_array_equal(got, want)
