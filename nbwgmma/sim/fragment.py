"""The fragment helpers of :mod:`nbwgmma.intrinsics.fragment` (Numba intrinsics on the GPU)
as Python over the layout models. Each reads its accumulator through
:func:`nbwgmma.sim.wgmma.read_acc` (a fragment still being written by a wgmma is a hazard)
and writes shared memory through the shadow (a store over memory an async read holds is one)."""

from __future__ import annotations

import struct

import numpy as np

from ..layout.fragment import exchange_offset, tile_block_offset, transposed_block_offset
from ..layout.kinds import WGMMA_KINDS
from ..layout.wgmma_model import encode_elements, float_to_fp8
from .address import split_local
from .copy import acc_send_cluster
from .core import SimHazard, me
from .declare import located, typing_error
from .site import where
from .wgmma import acc_pack, raw_acc, read_acc, thread_coords


def _kind(kind, name):
    """The wgmma kind ``kind`` names (an unknown one is the compiled helper's typing error,
    with the kernel line)."""
    k = WGMMA_KINDS.get(kind)
    if k is None:
        raise typing_error(f"{name}: unknown wgmma type combination {kind!r}; expected one of "
                            f"{', '.join(WGMMA_KINDS)}")
    return k


def _kind_n(kind, n, name):
    """The kind, where ``n`` is one of its N (else the typing error the compiled helper raises,
    with the kernel line)."""
    k = _kind(kind, name)
    if n not in k.n_values:
        raise typing_error(f"{name}: {kind} allows N in {list(k.n_values)}; got {n}")
    return k


def _kind_of_acc(kind, acc, name):
    k = _kind(kind, name)
    return k, k.n_of(len(acc))


def _values(acc, k, what):
    a = np.asarray(read_acc(acc, what))
    if k.dtype == "f16":
        return a.astype(np.uint32).view(np.float16).astype(np.float64)
    return a.astype(np.float64)


def acc_zeros(kind, n):
    k = _kind_n(kind, n, "acc_zeros")
    return acc_pack(np.zeros(n // 2), k)


def acc_undef(kind, n):
    k = _kind_n(kind, n, "acc_undef")
    return acc_pack(np.full(n // 2, np.nan if k.is_float else 0x5A5A5A5A), k)  # poison


def _elements(arr, tid, row0, col0, nvals, name, arrname):
    if getattr(arr, "ndim", None) != 2:  # the compiled helper's typing rule
        got = f"an array of shape {arr.shape}" if hasattr(arr, "shape") else type(arr).__name__
        raise typing_error(f"{name}: '{arrname}' must be a 2-D array; got {got}")
    r, c = thread_coords(int(tid), nvals)
    r, c = r + int(row0), c + int(col0)
    rows, cols = arr.shape
    return [(i, int(r[i]), int(c[i])) for i in range(nvals) if r[i] < rows and c[i] < cols]


def _half_bits(x, t):
    """Round-to-nearest-even ``t`` (bf16 or f16) bits of ``x``, a NaN the canonical 0x7FFF, as
    ``cvt.rn`` gives them (the model's encoding, :func:`encode_elements`)."""
    x = np.asarray(x, np.float32)
    return encode_elements(x.reshape(-1, 1), t).view(np.uint16).reshape(x.shape)


_F32, _U32, _F16, _U16 = (struct.Struct(f"<{c}") for c in "fIeH")


def _half_bits_f32(v, t):
    """:func:`_half_bits` of one ``np.float32`` as an int, in plain Python (the same bits: the
    f32 value is exact as a double, so ``struct``'s half packs it with the one rounding
    ``cvt.rn`` makes; one it overflows is the infinity NumPy gives)."""
    if v != v:
        return 0x7FFF
    if t == "bf16":
        u = _U32.unpack(_F32.pack(v))[0]
        return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    try:
        return _U16.unpack(_F16.pack(v))[0]
    except OverflowError:
        return 0xFC00 if v < 0 else 0x7C00


def _to_dtype(v, dt):
    if dt == np.uint16:  # bf16 bits
        return np.uint16(_half_bits_f32(v, "bf16")) if type(v) is np.float32 else _half_bits(v, "bf16")[()]
    if dt == np.float16:
        if type(v) is np.float32:
            return np.uint16(_half_bits_f32(v, "f16")).view(np.float16)
        return _half_bits(v, "f16").view(np.float16)[()]
    return np.dtype(dt).type(v)


def acc_store(acc, kind, out, tid, row0, col0):
    k, n = _kind_of_acc(kind, acc, "acc_store")
    vals = _values(acc, k, "acc_store")
    if k.dtype == "f32":
        vals = vals.astype(np.float32)
    for i, r, c in _elements(out, tid, row0, col0, len(vals), "acc_store", "out"):
        out[r, c] = _to_dtype(vals[i], out.dtype)


def acc_load(kind, n, src, tid, row0, col0):
    k = _kind_n(kind, n, "acc_load")
    vals = np.zeros(n // 2)
    bits = np.dtype(src.dtype) == np.uint16 and k.dtype == "f32"  # bf16 bits, as acc_store writes them
    for i, r, c in _elements(src, tid, row0, col0, n // 2, "acc_load", "src"):
        vals[i] = (np.array(src[r, c], np.uint32) << 16).view(np.float32)[()] if bits else src[r, c]
    return acc_pack(vals, k)


def _tuple_type(values) -> str:
    """Numba's name of a fragment's type: ``UniTuple(float32 x 32)``."""
    return f"UniTuple({np.asarray(values).dtype} x {len(values)})"


def _map(name, op):
    def fn(acc, other):
        a = np.asarray(read_acc(acc, name))
        if not np.isscalar(other):
            other = read_acc(other, name)
            if len(other) != len(a) or np.asarray(other).dtype != a.dtype:  # (the compiled check's words)
                raise typing_error(f"{name}: both fragments must have the same type; got {_tuple_type(a)} and "
                                   f"{_tuple_type(other)}")
        b = np.asarray(other, a.dtype) if not np.isscalar(other) else a.dtype.type(other)
        return tuple(op(a, b).astype(a.dtype))
    fn.__name__ = name
    return fn


acc_add = _map("acc_add", np.add)
acc_scale = _map("acc_scale", np.multiply)


def _pack16(name, t):
    def fn(acc):
        vals = read_acc(acc, name)
        if 0 < len(vals) <= 8 and not len(vals) % 2 and all(type(v) is np.float32 for v in vals):
            bits = [_half_bits_f32(v, t) for v in vals]  # (acc_map's pairs: in Python, NumPy costs more per call)
            return tuple(np.uint32(lo | hi << 16) for lo, hi in zip(bits[0::2], bits[1::2]))
        a = np.asarray(vals, np.float32)
        bits = _half_bits(a, t).astype(np.uint32)
        return tuple((bits[0::2] | (bits[1::2] << 16)).astype(np.uint32))
    fn.__name__ = name
    return fn


acc_to_bf16x2 = _pack16("acc_to_bf16x2", "bf16")
acc_to_f16x2 = _pack16("acc_to_f16x2", "f16")


def _store_smem(th, base, offs, esize, vals, dtype, what, swizzle=None):
    cta, off0 = split_local(int(base))
    idx = ((off0 + np.asarray(offs, np.int64))[:, None] + np.arange(esize)).reshape(-1)
    data = np.asarray(vals, dtype).view(np.uint8).reshape(-1)  # (element by element, idx's order)
    with th.cl.lock:
        cta.shadow.generic_write(th, idx, what, swizzle, data=lambda: data)
        cta.image[idx] = data


def acc_store_swizzled(acc, kind, base, tid, row_bytes, swizzle):

    th = me()
    _kind_of_acc(kind, acc, "acc_store_swizzled")
    vals = np.asarray(read_acc(acc, "acc_store_swizzled"))
    r, c = thread_coords(int(tid), len(vals))
    _store_smem(th, base, tile_block_offset(r, c, 4, row_bytes, swizzle), 4, vals, vals.dtype, "acc_store_swizzled",
                swizzle)


def acc_store_fp8_swizzled(acc, base, tid, row_bytes, swizzle, fmt):
    th = me()
    if fmt not in ("e4m3", "e5m2"):
        raise typing_error(f"acc_store_fp8_swizzled: fmt must be one of ['e4m3', 'e5m2']; got {fmt!r}")
    vals = np.asarray(read_acc(acc, "acc_store_fp8_swizzled")).astype(np.float32).astype(np.float64)
    codes = np.where(np.isnan(vals), 0x7F, float_to_fp8(np.nan_to_num(vals), fmt)).astype(np.uint8)
    r, c = thread_coords(int(tid), len(vals))
    _store_smem(th, base, tile_block_offset(r, c, 1, row_bytes, swizzle), 1, codes, np.uint8,
                "acc_store_fp8_swizzled", swizzle)


def _halves(regs):
    """The 16-bit values of packed registers (low half first): the fragment's order."""
    bits = np.asarray(raw_acc(regs), np.uint32)
    return np.stack([bits & 0xFFFF, bits >> 16], -1).reshape(-1).astype(np.uint16)


def acc_stmatrix_swizzled(regs, base, tid, row_bytes, swizzle):

    th = me()
    halves = _halves(regs)
    r, c = thread_coords(int(tid), len(halves))
    _store_smem(th, base, tile_block_offset(r, c, 2, row_bytes, swizzle), 2, halves, np.uint16,
                "acc_stmatrix_swizzled", swizzle)


def acc_stmatrix_transposed(regs, base, tid):

    th = me()
    halves = _halves(regs)
    if len(halves) % 4:
        raise typing_error(f"acc_stmatrix_transposed: 'regs' must be 2*k packed registers; got {len(halves) // 2}")
    r, c = thread_coords(int(tid), len(halves))
    offs = transposed_block_offset(np.asarray(r), np.asarray(c))
    _store_smem(th, base, offs, 2, halves, np.uint16, "acc_stmatrix_transposed")


def acc_store_strided(acc, out, start, stride):
    vals = read_acc(acc, "acc_store_strided")
    for i, v in enumerate(vals):
        out[int(start) + i * int(stride)] = v


def acc_add_strided(acc, src, start, stride):
    a = np.asarray(read_acc(acc, "acc_add_strided"))
    add = np.array([src[int(start) + i * int(stride)] for i in range(len(a))], a.dtype)
    return tuple((a + add).astype(a.dtype))


def acc_add_shared(acc, base, tid):
    th = me()
    a = np.asarray(read_acc(acc, "acc_add_shared"), np.float32)
    cta, off0 = split_local(int(base))
    if off0 % 16:
        raise SimHazard(f"thread {th.thread_id} at {th.where}: acc_add_shared needs a 16-byte aligned address "
                        f"(ld.shared.v4); got 0x{int(base):x}")
    idx = off0 + exchange_offset(int(tid), np.arange(len(a)))
    byte_idx = (idx[:, None] + np.arange(4)).reshape(-1)
    with th.cl.lock:
        cta.shadow.check_observed(th, byte_idx, "acc_add_shared", generic=True)
        got = cta.image[byte_idx].view(np.float32)
    return tuple(a + got)


def acc_store_fp8(acc, kind, out, tid, row0, col0, fmt):
    k, n = _kind_of_acc(kind, acc, "acc_store_fp8")
    if fmt not in ("e4m3", "e5m2"):  # the compiled helper's typing rules
        raise typing_error(f"acc_store_fp8: fmt must be one of ['e4m3', 'e5m2']; got {fmt!r}")
    if k.dtype != "f32":
        raise typing_error(f"acc_store_fp8: expected an f32 accumulator fragment; got {kind}")
    if np.dtype(getattr(out, "dtype", None)) != np.uint8:
        raise typing_error(f"acc_store_fp8: 'out' must be a uint8 array (fp8 codes); got "
                            f"{getattr(out, 'dtype', type(out).__name__)}")
    vals = _values(acc, k, "acc_store_fp8").astype(np.float32).astype(np.float64)
    # 0x7F: a NaN code of both formats (e4m3: S.1111.111; e5m2: S.11111.11)
    codes = np.where(np.isnan(vals), 0x7F, float_to_fp8(np.nan_to_num(vals), fmt)).astype(np.uint8)
    for i, r, c in _elements(out, tid, row0, col0, len(vals), "acc_store_fp8", "out"):
        out[r, c] = codes[i]


FRAGMENT_IMPLS = {f.__name__: located(f) for f in (
    acc_zeros, acc_undef, acc_store, acc_load, acc_store_swizzled, acc_stmatrix_swizzled, acc_stmatrix_transposed, acc_to_bf16x2,
    acc_to_f16x2, acc_add, acc_scale, acc_store_strided, acc_add_strided, acc_add_shared, acc_send_cluster, acc_store_fp8, acc_store_fp8_swizzled)}
