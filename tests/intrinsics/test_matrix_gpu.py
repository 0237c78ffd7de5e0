"""ldmatrix/stmatrix on the GPU against the lane-map model (iota data)."""

import numpy as np
import pytest
from numba import cuda

from nbwgmma.intrinsics import ldmatrix, smem_addr, stmatrix
from nbwgmma.layout import ldmatrix_lane_map

pytestmark = pytest.mark.gpu

_SRC = """
def kernel(src, regs_out, back):
    buf = cuda.shared.array(256, np.uint16)
    buf2 = cuda.shared.array(256, np.uint16)
    lane = cuda.threadIdx.x
    for i in range(lane, 256, 32):
        buf[i] = src[i]
        buf2[i] = 0
    cuda.syncwarp()
    # Lane l gives row l % 8 of matrix l // 8 (each matrix 8 rows x 16 bytes, stored one after another).
    r = ldmatrix(smem_addr(buf) + lane * 16, NUM, TRANS)
    for j in range(NUM):
        regs_out[lane, j] = r[j]
    stmatrix(smem_addr(buf2) + lane * 16, r, TRANS)
    cuda.syncwarp()
    for i in range(lane, 256, 32):
        back[i] = buf2[i]
"""


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [0, 1])
def test_lane_maps(num, trans):
    ns = dict(globals(), np=np, NUM=num, TRANS=trans)
    exec(_SRC, ns)
    kern = cuda.jit(ns["kernel"])
    src = np.arange(256, dtype=np.uint16) + 1000
    regs = cuda.to_device(np.zeros((32, num), np.uint32))
    back = cuda.to_device(np.zeros(256, np.uint16))
    kern[1, 32](cuda.to_device(src), regs, back)
    got = regs.copy_to_host()
    lm = ldmatrix_lane_map(bool(trans))  # [32, 2 halves, (row, col)]
    mats = src.reshape(4, 8, 8)
    for j in range(num):
        lo = mats[j][lm[:, 0, 0], lm[:, 0, 1]].astype(np.uint32)
        hi = mats[j][lm[:, 1, 0], lm[:, 1, 1]].astype(np.uint32)
        np.testing.assert_array_equal(got[:, j], lo | (hi << 16))
    want = np.zeros(256, np.uint16)
    want[: num * 64] = src[: num * 64]
    np.testing.assert_array_equal(back.copy_to_host(), want)  # stmatrix is ldmatrix's inverse


_TILE_SRC = """
def kernel(src, out):
    buf = cuda.shared.array(BYTES, np.uint8)
    t = cuda.threadIdx.x
    for i in range(t, BYTES, 128):
        buf[i] = 0xEE  # poison
    cuda.syncthreads()
    acc = acc_load(KIND, N, src, t, 0, 0)
    base = smem_addr(buf)
    STORE
    cuda.syncthreads()
    for i in range(t, BYTES, 128):
        out[i] = buf[i]
"""


def _stored_tile(store, n, nbytes, **names):
    """Run ``store`` (a statement on ``acc``, ``base``, ``t``) in a warpgroup over a 64 x ``n``
    bf16 fragment of exact values, into ``nbytes`` of poisoned shared memory: (the bytes, the
    values, their rows, their columns)."""
    from nbwgmma.intrinsics import acc_load

    ns = dict(globals(), np=np, BYTES=nbytes, KIND="f32.bf16.bf16", N=n, acc_load=acc_load, **names)
    exec(_TILE_SRC.replace("STORE", store), ns)
    kern = cuda.jit(ns["kernel"])
    r, c = np.meshgrid(np.arange(64), np.arange(n), indexing="ij")
    vals = ((r * 37 + c * 11) % 255 - 127).astype(np.float32)  # exact in bf16, never all zero
    out = cuda.to_device(np.zeros(nbytes, np.uint8))
    kern[1, 128](cuda.to_device(vals), out)
    return out.copy_to_host(), vals, r, c


def _bf16_bits(vals):
    return (vals.view(np.uint32) >> 16).astype(np.uint16)  # exact values: truncation = rounding


@pytest.mark.parametrize("esize, rb, sw, n", [(2, 128, "128B", 256), (2, 64, "64B", 64), (2, 32, "32B", 144), (2, 64, "none", 200),
                                              (2, 128, "none", 128), (4, 128, "128B", 64), (4, 32, "32B", 24)])
def test_swizzled_tile_stores_match_the_model(esize, rb, sw, n):
    from nbwgmma.intrinsics import acc_stmatrix_swizzled, acc_store_swizzled, acc_to_bf16x2
    from nbwgmma.layout import tile_block_offset

    nbytes = -(-n * esize // rb) * 64 * rb  # whole column blocks; a partial last one stays poisoned
    store = ("acc_stmatrix_swizzled(acc_to_bf16x2(acc), base, t, RB, SW)" if esize == 2 else
             "acc_store_swizzled(acc, KIND, base, t, RB, SW)")
    got, vals, r, c = _stored_tile(store, n, nbytes, RB=rb, SW=sw, acc_stmatrix_swizzled=acc_stmatrix_swizzled,
                                   acc_store_swizzled=acc_store_swizzled, acc_to_bf16x2=acc_to_bf16x2)
    want = np.full(nbytes, 0xEE, np.uint8)
    off = tile_block_offset(r, c, esize, rb, sw)
    if esize == 2:
        want.view(np.uint16)[off // 2] = _bf16_bits(vals)
    else:
        want.view(np.float32)[off // 4] = vals
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n", [16, 24, 64, 152, 256])
def test_transposed_tile_stores_match_the_model(n):
    """``acc_stmatrix_transposed`` on the GPU writes every element where
    ``layout.transposed_block_offset`` (the simulator's model) says, and nothing else."""
    from nbwgmma.intrinsics import acc_stmatrix_transposed, acc_to_bf16x2
    from nbwgmma.layout import transposed_block_offset

    nbytes = 128 * n
    got, vals, r, c = _stored_tile("acc_stmatrix_transposed(acc_to_bf16x2(acc), base, t)", n, nbytes,
                                   acc_stmatrix_transposed=acc_stmatrix_transposed, acc_to_bf16x2=acc_to_bf16x2)
    want = np.full(nbytes, 0xEE, np.uint8)
    want.view(np.uint16)[transposed_block_offset(r, c) // 2] = _bf16_bits(vals)
    np.testing.assert_array_equal(got, want)
