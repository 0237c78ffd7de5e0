"""Simulated approximate math (:mod:`nbwgmma.intrinsics.fastmath`): the correctly rounded
f32 function with the hardware's flushing of subnormal inputs and results (``.ftz``), which
lies within the instruction's documented error of the GPU's result."""

from __future__ import annotations

import numpy as np

from ..layout.wgmma_model import decode_elements, encode_elements
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
