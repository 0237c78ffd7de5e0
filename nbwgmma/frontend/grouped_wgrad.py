"""``grouped_matmul(a, b, offs)`` with a 2-D A and a 2-D B: the K-grouped product of
mixture-of-experts weight gradients (``torch._grouped_mm``'s 2-D x 2-D form).

A [M, total] and B [total, N] share the grouped dimension; ``offs`` [G] (int32, on A's device)
holds the groups' running ends along it; out is [G, M, N] with ``out[g] = A[:, s:e] @ B[s:e, :]``
(``s = offs[g-1]``, 0 for the first group, ``e = offs[g]``). An empty group gives ``out[g] = 0``,
as ``torch._grouped_mm`` does (its loop of ``mm`` over an empty K, and its Hopper kernel).
:func:`nbwgmma.grouped_matmul` documents the call; the kernel is
:mod:`nbwgmma.kernels.grouped_wgrad`.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .. import sim
from ..capture import call_captured, hold, relaxed
from ..errors import MatmulError, MatmulTypeError
from ..kernels.grouped_wgrad import SMEM, THREADS, grouped_wgrad_kernel, units
from .args import check_apart, described, empty_rows16, holds, stream_of, type_name
from .arrays import ArrayInfo
from .views import copy_params, launch_copy, nb_stream, numba_view, padded_shape, tensor_map

__all__ = ["grouped_matmul_wgrad", "host_offs", "check_ends", "out_type"]

_SIM = sim.enabled()


def _in_place(info: ArrayInfo, inner: int, outer: int):
    """(shape, strides in elements) of a 2-D operand seen as [rows, cols] with ``cols`` along
    its dimension ``inner`` (contiguous) and ``rows`` along ``outer``, if TMA reads it in place
    (16-byte aligned base and pitch); else None."""
    es = info.itemsize
    cols, rows = info.shape[inner], info.shape[outer]
    pitch = info.strides[outer]
    if cols > 1 and info.strides[inner] != es:
        return None
    if rows == 1:  # the pitch of one row is never used: any legal value
        pitch = -(-cols * es // 16) * 16
    if info.ptr % 16 or pitch % 16 or pitch < cols * es:
        return None
    return (rows, cols), (pitch // es, 1)


def _copied(x, info: ArrayInfo, transpose: bool, stream, name: str):
    """A fresh [rows, cols_pad] copy of ``x`` (or ``x.T`` with ``transpose``), its rows padded
    to 128 bytes with zeros, and its TMA view; an operand the copy cannot step (strides not whole
    elements) is a MatmulError naming it (``name``)."""
    try:
        params = copy_params(info, transpose)
    except ValueError as e:
        raise MatmulError(f"grouped_matmul: {name} (copied first: TMA cannot read it in place) {e}") from None
    rows, cols, pad = padded_shape(info, transpose)
    es = info.itemsize
    if _SIM:  # host memory: numpy copies it at once (the copy kernel would take a Python thread per element)
        h = x.copy_to_host().view(f"u{es}")
        dst = np.zeros((rows, pad), h.dtype)
        dst[:, :cols] = h.T if transpose else h
        return cuda.to_device(dst), ((rows, cols), (pad, 1))
    captured = call_captured()  # (a graph's copy: its own buffer, held; nbwgmma.capture)
    with relaxed(captured):
        dst = cuda.device_array((rows, pad), dtype=np.dtype(f"u{es}"), stream=nb_stream(stream))
    if captured:
        hold(dst)
    launch_copy(params, es, dst, stream)
    return dst, ((rows, cols), (pad, 1))


def host_offs(offs, lib):
    """``offs`` copied to the host as a numpy array (a synchronization: ``validate=True`` only)."""
    if lib == "torch":
        return offs.cpu().numpy()
    if lib == "cupy":
        return offs.get()
    return offs.copy_to_host()


def check_ends(offs, lib, total, groups, past):
    """``validate=True``: the running ends ``offs`` read on the host (a synchronization) must not
    decrease nor pass ``total``; ``past`` names what ``total`` counts ("A's 100 rows")."""
    ends = np.asarray(host_offs(offs, lib), np.int64)
    if groups and ends[0] < 0:
        raise MatmulError(f"grouped_matmul: offs must be running ends, 0 or more; got offs[0] = {ends[0]}")
    bad = np.flatnonzero(np.diff(np.concatenate([[0], ends])) < 0)
    if bad.size:
        raise MatmulError(f"grouped_matmul: offs must not decrease; offs[{bad[0]}] = {ends[bad[0]]} follows "
                          f"{0 if bad[0] == 0 else ends[bad[0] - 1]}")
    if groups and ends[-1] > total:
        raise MatmulError(f"grouped_matmul: offs[-1] = {ends[-1]} is past {past}")


def _zero(out, io: ArrayInfo, lib, stream):
    """out = 0 (a problem whose groups are all empty, ``total`` = 0)."""
    if lib == "torch":
        out.zero_()
    elif lib == "cupy":
        out.fill(0)
    elif _SIM:
        out._ary[...] = 0
    else:
        from ..kernels.copy import fill_zero_kernel, grid_for, sized_to_data

        st = nb_stream(stream)
        for g in range(io.shape[0]):
            part = numba_view(ArrayInfo(io.ptr + g * io.strides[0], io.shape[1:], io.strides[1:], *tuple(io)[3:]),
                              out)
            with sized_to_data():
                fill_zero_kernel[grid_for(io.shape[1] * io.shape[2]), 256, st](part)


def out_type(io: ArrayInfo, odt: str):
    """A grouped product's ``out`` holds ``odt`` (:func:`~nbwgmma.frontend.args.holds`); else a
    :class:`MatmulTypeError`."""
    if not holds(io.dtype, odt):
        bits = {"bf16": " (uint16 for bf16 bits)",
                "f16": " (float16: a uint16 array holds bf16 bits; f16 bits as .view(np.float16))"}.get(odt, "")
        article = "an" if odt[0] in "ef" else "a"
        raise MatmulTypeError(f"grouped_matmul: out must be {article} {odt} array{bits}; got {io.dtype}")


def grouped_matmul_wgrad(a, b, offs, ia: ArrayInfo, ib: ArrayInfo, io_: ArrayInfo, lib, *, out, out_dtype, in_dtype,
                         stream, validate):
    """:func:`nbwgmma.grouped_matmul` for a 2-D A [M, total] and a 2-D B [total, N] (see the
    module's text); ``ia``, ``ib``, ``io_`` describe ``a``, ``b``, ``offs``."""
    (m, total), (tb_, n) = ia.shape, ib.shape
    if tb_ != total:
        raise MatmulError(f"grouped_matmul: A (M, total) and B (total, N) must share the grouped dimension; got "
                          f"shapes {ia.shape} and {ib.shape}")
    ta, tb = in_dtype or ia.dtype, in_dtype or ib.dtype  # (uint16 without in_dtype refused before)
    if ta not in ("bf16", "f16") or tb != ta:
        raise MatmulTypeError(f"grouped_matmul: A and B must both be bf16 or both f16 so far; got {ta} and {tb}")
    if io_.dtype != "s32":
        raise MatmulTypeError(f"grouped_matmul: offs must be int32 (the groups' ends along A's columns and B's "
                              f"rows); got {io_.dtype}")
    if len(io_.shape) != 1:
        raise MatmulError(f"grouped_matmul: offs must be 1-D (the groups' ends along A's columns and B's rows); got "
                          f"shape {io_.shape}")
    for name, info in (("B", ib), ("offs", io_)):
        if info.device != ia.device:
            raise MatmulError(f"grouped_matmul: {name} must be on device {ia.device} like A; got {info.device}")
    odt = type_name(out_dtype or ta)
    if odt != ta:
        raise MatmulTypeError(f"grouped_matmul: the output has the input type so far; got out_dtype={odt}")
    groups = io_.shape[0]
    es = ia.itemsize
    shape = (groups, m, n)
    fresh = out is None
    if fresh:
        out = empty_rows16(lib, a, (groups, m, n), odt)
    io = described(out, "out", "grouped_matmul")
    if not fresh:
        check_apart(io, (("A", ia), ("B", ib), ("offs", io_)), "grouped_matmul")
    out_type(io, odt)
    if io.shape != shape or (0 not in shape and (
            (n > 1 and io.strides[2] != es) or io.ptr % 16 or any(s % 16 for s in io.strides[:2])
            or io.strides[1] < n * es or io.strides[0] < m * io.strides[1])):  # (an empty out: any strides)
        raise MatmulError(f"grouped_matmul: out must be a {shape} {odt} array with N contiguous and 16-byte aligned "
                          f"rows; got {io.dtype} of shape {io.shape}, strides {io.strides}")
    if validate:
        check_ends(offs, lib, total, groups, f"the {total} columns of A (rows of B; a 2-D B is the weight-gradient "
                                             f"form: one weight per group of A's rows is a 3-D B, (G, K, N))")
    if groups == 0 or m == 0 or n == 0:
        return out
    st = stream_of(lib, stream, "grouped_matmul")
    if total == 0:
        _zero(out, io, lib, st)
        return out
    # A [M, total] read as [total, M] with M contiguous (dy.t() of a row-major dy): in place, or a
    # copy in that layout; likewise B [total, N] with N contiguous (a row-major x).
    view_a = _in_place(ia, 0, 1)
    src_a, keep_a = a, view_a is None
    if keep_a:
        src_a, view_a = _copied(a, ia, True, st, "A")
    view_b = _in_place(ib, 1, 0)
    src_b, keep_b = b, view_b is None
    if keep_b:
        src_b, view_b = _copied(b, ib, False, st, "B")
    ptr_a = ia.ptr if not keep_a else described(src_a, "A", "grouped_matmul").ptr
    ptr_b = ib.ptr if not keep_b else described(src_b, "B", "grouped_matmul").ptr
    tma_a = tensor_map(src_a, ptr_a, ta, (64, 64), view_a, keep=keep_a)
    tma_b = tensor_map(src_b, ptr_b, ta, (64, 64), view_b, keep=keep_b)
    tma_c = tensor_map(out, io.ptr, ta, (1, 64, 64), (shape, (io.strides[0] // es, io.strides[1] // es, 1)),
                       keep=False)
    from ..launch import device_limits, launch

    sms = 1 if _SIM else device_limits()["multiprocessors"]
    grid = max(1, min(sms, -(-units(groups, m, n) // 2)))
    launch(grouped_wgrad_kernel(ta), grid, THREADS,
           (tma_a.address, tma_b.address, tma_c.address, offs, np.int32(m), np.int32(n), np.int32(total)),
           stream=st, smem=SMEM, pdl=True)
    return out
