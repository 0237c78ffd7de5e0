"""ldmatrix/stmatrix on the GPU against the lane-map model (iota data)."""

import numpy as np
import pytest
from numba import cuda

from nbwgmma.intrinsics import ldmatrix, ldmatrix_lane_map, smem_addr, stmatrix

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
