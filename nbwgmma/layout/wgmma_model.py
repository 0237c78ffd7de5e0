"""A numpy model of one wgmma: operands read out of a shared-memory byte image
through their descriptors (swizzle, LBO, SBO), exactly as the hardware reads them.

Used to pack test operands, to check descriptors on CPU, and as the reference
the GPU results are compared with. Element encodings:

* ``f16``: IEEE half; ``bf16``: upper half of an f32; ``tf32``: an f32 whose
  13 low mantissa bits the tensor core ignores;
* ``e4m3`` (no infinities, NaN = 0x7F/0xFF) and ``e5m2`` (IEEE-like), decoded
  by :func:`fp8_to_float`;
* ``s8``/``u8``; ``b1``: 256 bits of K per row, D = popcount(A AND B).
"""

from __future__ import annotations

import numpy as np

from ..errors import LayoutError
from .descriptor import decode_desc, kmajor_offset, mnmajor_offset, swizzle_addr
from .kinds import wgmma_kind

__all__ = [
    "to_bits",
    "from_bits",
    "ELEMENT_BYTES",
    "fp8_to_float",
    "float_to_fp8",
    "encode_elements",
    "decode_elements",
    "pack_operand",
    "operand_addresses",
    "read_operand",
    "wgmma_reference",
]

_CANONICAL_NAN16 = 0x7FFF  # what cvt.rn.{f16,bf16}x2.f32 gives for any NaN (encode_elements)

ELEMENT_BYTES = {"f16": 2, "bf16": 2, "tf32": 4, "e4m3": 1, "e5m2": 1, "s8": 1, "u8": 1, "b1": 1 / 8}


def _fp8_table(fmt: str) -> np.ndarray:
    exp_bits, man_bits, bias = (4, 3, 7) if fmt == "e4m3" else (5, 2, 15)
    v = np.arange(256)
    sign = np.where(v >> 7, -1.0, 1.0)
    e = (v >> man_bits) & ((1 << exp_bits) - 1)
    m = v & ((1 << man_bits) - 1)
    normal = (1 + m / (1 << man_bits)) * 2.0 ** (e - bias)
    sub = (m / (1 << man_bits)) * 2.0 ** (1 - bias)
    out = sign * np.where(e == 0, sub, normal)
    emax = (1 << exp_bits) - 1
    if fmt == "e4m3":
        out[(e == emax) & (m == (1 << man_bits) - 1)] = np.nan
    else:
        out[(e == emax) & (m == 0)] = sign[(e == emax) & (m == 0)] * np.inf
        out[(e == emax) & (m != 0)] = np.nan
    return out


_FP8 = {f: _fp8_table(f) for f in ("e4m3", "e5m2")}


def fp8_to_float(codes: np.ndarray, fmt: str) -> np.ndarray:
    return _FP8[fmt][np.asarray(codes, np.uint8)]


def float_to_fp8(x: np.ndarray, fmt: str) -> np.ndarray:
    """Codes of ``x`` rounded as ``cvt.rn.satfinite`` rounds (PTX ISA, "cvt"): to the nearest
    fp8 value, ties to the even code, magnitudes past the largest finite one (infinities too)
    to it, the sign kept (-0.0 is 0x80); NaN to 0x7F. Exact for representable values."""
    table = _FP8[fmt]
    finite = table[:int(np.isfinite(table[:128]).sum())]  # the non-negative finite values, increasing
    x = np.asarray(x, np.float64)
    mag = np.abs(x)
    hi = np.clip(np.searchsorted(finite, mag), 1, len(finite) - 1)  # finite[hi - 1] <= mag <= finite[hi]
    below, above = mag - finite[hi - 1], finite[hi] - mag
    code = np.where((above < below) | ((above == below) & (hi % 2 == 0)), hi, hi - 1)
    code = np.where(np.signbit(x), code | 0x80, code)
    return np.where(np.isnan(x), 0x7F, code).astype(np.uint8)


def encode_elements(x: np.ndarray, t: str) -> np.ndarray:
    """Matrix of values -> matrix of raw bytes per row ([rows, cols * element bytes]); b1: bits.

    ``f16`` and ``bf16`` round as ``cvt.rn.f16x2.f32`` / ``cvt.rn.bf16x2.f32`` do (PTX ISA, "cvt":
    to nearest, ties to even; ``bf16`` from the f32 value, as the instruction takes it), and every
    NaN becomes the canonical NaN 0x7FFF, whatever its sign and payload: the ISA promises only "a
    NaN", and an H100/H200 gives 0x7FFF (measured for quiet, signalling and negative NaNs; the
    ``CUDART_NAN_BF16`` of ``cuda_bf16.h`` too). Rounding the bits of a NaN as a number would
    carry into the exponent (0xFFFFFFFF, shared memory's poison, would become +0)."""
    x = np.asarray(x)
    if t in ("f16", "bf16"):
        f = x.astype(np.float32)
        if t == "f16":
            with np.errstate(over="ignore"):
                bits = f.astype(np.float16).view(np.uint16)
        else:
            u = f.view(np.uint32)
            bits = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
        raw = np.where(np.isnan(f), np.uint16(_CANONICAL_NAN16), bits).astype(np.uint16).view(np.uint8)
    elif t == "tf32":
        raw = x.astype(np.float32).view(np.uint8)
    elif t in _FP8:
        raw = float_to_fp8(x, t)
    elif t == "s8":
        raw = x.astype(np.int8).view(np.uint8)
    elif t == "u8":
        raw = x.astype(np.uint8)
    elif t == "b1":
        raw = np.packbits(x.astype(np.uint8), axis=-1, bitorder="little")
    else:
        raise LayoutError(f"unknown element type {t!r}")
    raw = np.ascontiguousarray(raw)
    # each row's bytes: what follows the first axis, which every branch keeps (a vector's elements are
    # its rows); not reshape's -1, which cannot infer it from zero rows
    width = int(np.prod(raw.shape[1:], dtype=np.int64)) if raw.ndim > 1 else raw.size // max(x.shape[0], 1)
    return raw.reshape(x.shape[0], width)


def decode_elements(raw: np.ndarray, t: str) -> np.ndarray:
    """Raw bytes per row -> float64 (or int64) values, as the tensor core reads them."""
    raw = np.ascontiguousarray(raw, np.uint8)
    if t == "f16":
        return raw.view(np.float16).astype(np.float64)
    if t == "bf16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if t == "tf32":
        return (raw.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if t in _FP8:
        return fp8_to_float(raw, t)
    if t == "s8":
        return raw.view(np.int8).astype(np.int64)
    if t == "u8":
        return raw.astype(np.int64)
    if t == "b1":
        return np.unpackbits(raw, axis=-1, bitorder="little").astype(np.int64)
    raise LayoutError(f"unknown element type {t!r}")


_BITS = {"bf16": np.uint16, "f16": np.uint16, "e4m3": np.uint8, "e5m2": np.uint8}


def to_bits(x, t: str) -> np.ndarray:
    """``x`` (any shape) rounded to element type ``t`` ("bf16", "f16", "e4m3" or "e5m2", to
    nearest even) as raw integers of the type's size, ``uint16`` or ``uint8``, of ``x``'s shape:
    the arrays NumPy, Numba and CuPy can hold (they have no bf16 or fp8 type), for ``matmul`` and
    ``grouped_matmul`` with ``in_dtype=t``. :func:`from_bits` reads them back."""
    if t not in _BITS:
        raise LayoutError(f"to_bits: t must be one of {sorted(_BITS)}; got {t!r}")
    x = np.asarray(x)
    flat = encode_elements(x.reshape(1, -1), t)
    return flat.view(_BITS[t]).reshape(x.shape)


def from_bits(bits, t: str) -> np.ndarray:
    """The float64 values of raw ``t`` elements (``uint16`` for "bf16" and "f16", ``uint8`` for
    "e4m3" and "e5m2": a kernel's output or :func:`to_bits`'s), of the array's shape."""
    if t not in _BITS:
        raise LayoutError(f"from_bits: t must be one of {sorted(_BITS)}; got {t!r}")
    bits = np.ascontiguousarray(bits)
    if bits.dtype.itemsize != np.dtype(_BITS[t]).itemsize:
        raise LayoutError(f"from_bits: {t} elements are {np.dtype(_BITS[t]).itemsize}-byte integers; got {bits.dtype}")
    return decode_elements(bits.reshape(1, -1).view(np.uint8), t).reshape(bits.shape)


def _offsets(rows: int, nbytes: int, major: str, swizzle: str, lbo: int, sbo: int, esize: float, kelems: int):
    """Logical byte offsets [rows, nbytes] of a ``rows`` (M or N) x K operand."""
    if major == "K":
        r = np.arange(rows)[:, None]
        b = np.arange(nbytes)[None, :]
        return kmajor_offset(r, b, swizzle, sbo, lbo)
    # MN-major: element (mn, k) of a 16-bit (or wider) type; bytes of one element contiguous.
    es = int(esize)
    mn = np.arange(rows)[:, None, None]
    k = np.arange(kelems)[None, :, None]
    byte = np.arange(es)[None, None, :]
    off = mnmajor_offset(mn * es + byte, k, swizzle, sbo, lbo)
    return off.reshape(rows, kelems * es)


def pack_operand(image: np.ndarray, base: int, values: np.ndarray, t: str, major: str,
                 swizzle: str, lbo: int, sbo: int) -> None:
    """Write a [rows, K] operand ``values`` of element type ``t`` into the shared-memory byte
    ``image`` at byte ``base``, laid out as a descriptor with ``major`` ("K": K contiguous, or
    "MN"), ``swizzle`` ("none", "32B", "64B", "128B"), ``lbo`` and ``sbo`` (bytes) reads it."""
    raw = encode_elements(values, t)
    rows, kelems = values.shape
    off = _offsets(rows, raw.shape[1], major, swizzle, lbo, sbo, ELEMENT_BYTES[t], kelems)
    image[swizzle_addr(base + off, swizzle)] = raw


def operand_addresses(desc: int, rows: int, kelems: int, t: str, major: str) -> np.ndarray:
    """Shared-memory byte addresses [rows, K bytes] a wgmma reads a [rows, K] operand from."""
    d = decode_desc(desc)
    if d["base_offset"]:
        raise NotImplementedError("the model reads tiles whose start is aligned to the swizzle period")
    esize = ELEMENT_BYTES[t]
    nbytes = int(np.ceil(kelems * esize))
    off = _offsets(rows, nbytes, major, d["swizzle"], d["lbo"], d["sbo"], esize, kelems)
    return swizzle_addr(d["addr"] + off, d["swizzle"])


def read_operand(image: np.ndarray, desc: int, rows: int, kelems: int, t: str, major: str) -> np.ndarray:
    """Read a [rows, K] operand through a descriptor, as wgmma does."""
    return decode_elements(image[operand_addresses(desc, rows, kelems, t, major)], t)


def wgmma_reference(image, kind: str, n: int, desc_a: int, desc_b: int, *, trans_a=0, trans_b=0,
                    scale_a=1, scale_b=1, d=None, a_values=None):
    """D (64 x N, float64 or int64) of one wgmma over the image, plus ``d`` if given.

    ``trans_a``/``trans_b`` select MN-major A/B. ``a_values`` replaces the A
    operand read (A from registers).
    """
    k = wgmma_kind(kind)
    a = a_values if a_values is not None else read_operand(image, desc_a, 64, k.k, k.atype, "MN" if trans_a else "K")
    b = read_operand(image, desc_b, n, k.k, k.btype, "MN" if trans_b else "K")
    if k.atype == "b1":
        out = (a[:, None, :] & b[None, :, :]).sum(-1)
    else:
        out = (scale_a * a) @ (scale_b * b).T
    return out if d is None else out + d

