"""Simulated arithmetic intrinsics. Approximate math (:mod:`nbwgmma.intrinsics.fastmath`): the
correctly rounded f32 function with the hardware's flushing of subnormal inputs and results
(``.ftz``), which lies within the instruction's documented error of the GPU's result. The
16-bit pair conversions (:mod:`nbwgmma.intrinsics.convert`) and Philox
(:mod:`nbwgmma.intrinsics.random`): exact, from the host models."""

from __future__ import annotations

import numpy as np

from ..layout.wgmma_model import decode_elements, encode_elements
from ..random import philox4x32, uniform
from .declare import impl

_TINY = np.float32(2.0 ** -126)


def _ftz(x):
    x = np.float32(x)
    return np.float32(0.0) * np.sign(x) if abs(x) < _TINY else x


@impl("ex2_approx")
def _ex2_approx(x):
    with np.errstate(over="ignore"):
        return _ftz(np.float32(np.exp2(np.float64(_ftz(x)))))


@impl("rcp_approx")
def _rcp_approx(x):
    x = _ftz(x)
    with np.errstate(divide="ignore"):
        return _ftz(np.float32(1.0 / np.float64(x)) if x != 0 else np.float32(np.copysign(np.inf, x)))


@impl("tanh_approx")
def _tanh_approx(x):
    return np.float32(np.tanh(np.float64(np.float32(x))))


def _half_bits(x, fmt):
    return int(encode_elements(np.array([[np.float32(x)]]), fmt).view(np.uint16)[0, 0])


def _half_value(bits, fmt):
    raw = np.array([[bits]], np.uint16).view(np.uint8)
    return np.float32(decode_elements(raw, fmt)[0, 0])


@impl("x2_to_f32")
def _x2_to_f32(w, fmt):
    w = int(w)
    return _half_value(w & 0xFFFF, fmt), _half_value(w >> 16, fmt)


@impl("f32_to_x2")
def _f32_to_x2(lo, hi, fmt):
    with np.errstate(over="ignore"):
        return np.uint32(_half_bits(lo, fmt) | (_half_bits(hi, fmt) << 16))


@impl("philox4x32")
def _philox4x32(c0, c1, c2, c3, k0, k1):
    return tuple(np.uint32(w) for w in philox4x32(int(c0), int(c1), int(c2), int(c3), int(k0), int(k1)))


@impl("uint_to_uniform")
def _uint_to_uniform(w):
    return np.float32(uniform(np.uint32(int(w) & 0xFFFFFFFF)))
