"""x2_to_f32 / f32_to_x2 (two 16-bit floats in one register <-> two f32) and ld_shared_v4_b32:
PTX and SASS on CPU, exact round trips on the GPU against numpy's conversions."""

import numpy as np
import pytest
from numba import cuda, types

from nbwgmma.intrinsics import f32_to_x2, ld_shared_v4_b32, smem_addr, st_shared_v4_b32, x2_to_f32
from nbwgmma.layout.wgmma_model import decode_elements, encode_elements
from nbwgmma.report import compile_report


def _kernel(fmt):
    @cuda.jit
    def k(words, lo, hi, back, staged):
        buf = cuda.shared.array(128, np.uint32)
        t = cuda.threadIdx.x
        a, b = x2_to_f32(words[t], fmt)
        lo[t], hi[t] = a, b
        back[t] = f32_to_x2(lo[t] * np.float32(2.0), hi[t], fmt)  # a doubled low half
        base = smem_addr(buf)
        if t < 32:  # 16 bytes per thread through shared memory, read back by another thread
            st_shared_v4_b32(base + 16 * t, words[4 * t], words[4 * t + 1], words[4 * t + 2], words[4 * t + 3])
        cuda.syncthreads()
        if t < 32:
            x, y, z, w = ld_shared_v4_b32(base + 16 * (31 - t))
            staged[4 * t], staged[4 * t + 1], staged[4 * t + 2], staged[4 * t + 3] = x, y, z, w
    return k


U32, F32 = types.uint32[::1], types.float32[::1]


@pytest.mark.parametrize("fmt", ["bf16", "f16"])
def test_ptx_and_sass(fmt):
    rep = compile_report(_kernel(fmt), (U32, F32, F32, U32, U32))
    assert f"cvt.f32.{fmt}" in rep.ptx and f"cvt.rn.{fmt}x2.f32" in rep.ptx and "ld.shared.v4.b32" in rep.ptx
    assert rep.sass_full.get("LDS.128") == 1 and rep.sass_full.get("STS.128") == 1, rep.sass_full
    assert rep.sass_full.get(f"F2FP.{fmt.upper()}.F32.PACK_AB") == 1, rep.sass_full
    assert rep.local_memory_ops == 0


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["bf16", "f16"])
def test_round_trips_are_exact(fmt):
    rng = np.random.default_rng(3)
    vals = rng.standard_normal(256).astype(np.float32) * 100
    bits = encode_elements(vals.reshape(1, -1), fmt).view(np.uint16).reshape(-1).astype(np.uint32)
    words = (bits[0::2] | (bits[1::2] << 16)).astype(np.uint32)  # 128 words
    exact = decode_elements(encode_elements(vals.reshape(1, -1), fmt), fmt).reshape(-1)
    lo, hi = (cuda.to_device(np.full(128, np.nan, np.float32)) for _ in range(2))
    back, staged = cuda.to_device(np.zeros(128, np.uint32)), cuda.to_device(np.zeros(128, np.uint32))
    _kernel(fmt)[1, 128](cuda.to_device(words), lo, hi, back, staged)
    np.testing.assert_array_equal(lo.copy_to_host(), exact[0::2])
    np.testing.assert_array_equal(hi.copy_to_host(), exact[1::2])
    doubled = np.stack([2 * exact[0::2], exact[1::2]], 1).reshape(1, -1)  # doubling is exact
    want = encode_elements(doubled, fmt).view(np.uint16).reshape(-1).astype(np.uint32)
    np.testing.assert_array_equal(back.copy_to_host(), want[0::2] | (want[1::2] << 16))
    np.testing.assert_array_equal(staged.copy_to_host().reshape(32, 4), words.reshape(32, 4)[::-1])
