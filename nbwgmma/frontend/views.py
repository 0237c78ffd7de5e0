"""Views of the arrays a :func:`nbwgmma.matmul` call takes, as its kernels read them: Numba
device arrays over their memory, TMA views and (cached) tensor maps, K-major staging copies,
Numba streams of raw handles, and the small copy and fill kernels' launches."""

from __future__ import annotations

import weakref

import numpy as np
from numba import cuda

from .. import sim
from ..capture import hold
from .args import NP_OF
from .arrays import ArrayInfo, host_view, numpy_dtype

__all__ = ["numba_view", "tma_view", "batched_view", "padded_cols", "padded_shape", "batch_dims", "kmajor_copy",
           "copy_source", "copy_params", "launch_copy", "StagedCopy", "STAGING_KEEP_BYTES", "l2_promotion",
           "misaligned_rows", "copy_share", "staged_for_speed", "MAX_COPY_SHARE", "COPY_SHARE_SCALE", "COPY_ROW_BYTES",
           "tensor_map", "transposed", "nb_stream", "vector_f32", "zero_fill"]

_SIM = sim.enabled()  # Numba's CUDA simulator (chosen once, when Numba is imported)


def numba_view(info: ArrayInfo, owner, dtype=None):
    """A Numba device array over ``info``'s memory (bf16 and fp8 as raw integers)."""
    dt = np.dtype(dtype or NP_OF.get(info.dtype, None) or numpy_dtype(info.dtype))  # "u16": a bf16 out
    if _SIM:  # the simulator's arrays have no __cuda_array_interface__
        return host_view(owner, dt, info.shape, info.strides)
    desc = {"shape": info.shape, "strides": info.strides, "typestr": dt.str,
            "data": (info.ptr, False), "version": 3}
    return cuda.from_cuda_array_interface(desc, owner=owner, sync=False)


def tma_view(info: ArrayInfo, rows: int, cols: int, row_stride: int, col_stride: int):
    """(shape, strides in elements) of ``info`` seen as [rows, cols] with ``cols``
    contiguous, if TMA can read it in place (16-byte aligned base and row pitch); else None."""
    es = info.itemsize
    if cols > 1 and col_stride != es:
        return None
    if rows == 1:  # the pitch of a single row is never used: any legal value
        row_stride = -(-cols * es // 16) * 16
    if info.ptr % 16 or row_stride % 16 or row_stride < cols * es:
        return None
    return (rows, cols), (row_stride // es, 1)


#: The staging copy's share of a product's time (:func:`copy_share`) that an operand whose rows TMA
#: reads slowly (:func:`misaligned_rows`) may cost. Rows 16 bytes off the 32-byte
#: sectors (a row pitch of 16 modulo 32 bytes) put each 128-byte box row across five sectors: on an
#: H100 such products ran at 0.65-0.78x cuBLAS read in place (bf16 8192 x 8192 x 8136, 4096 x 4096 x
#: 4072, 16384 x 4096 x 4104; e4m3 8192 x 8192 x 8208; tf32 4096 x 4096 x 4100; 0.99-1.04 with K a
#: multiple of 64), and 1.05-1.33x as fast through the copies where those came to 0.13-0.21 (B's
#: copy alone at 4096 x 1024 x 4072, 0.16: 1.15x); at 0.32 bf16 and tf32 4096^3-sized products
#: still gained (1.12x, 1.21x) but e4m3 4096 x 4096 x 4112 lost (0.88x), and bf16 2048 x 2048 x 2040
#: (0.64) lost (0.75x) (BENCHMARKS.md, 2026-11-28 and 2026-12-07). Staging B's copy alone did better
#: than both at every size measured since (H100, ratio to cuBLAS, none / B / both): bf16 8192 x 8192 x
#: 8136 0.68 / 0.96 / 0.89, 16384 x 4096 x 4104 0.70 / 0.98 / 0.85, 4096 x 4096 x 4072 0.68 / 0.89 /
#: 0.77; e4m3 8192 x 8192 x 8208 0.79 / 1.01 / 0.95, 4096 x 4096 x 4112 0.95 / 1.04 / 0.84; tf32 4096 x
#: 4096 x 4100 0.73 / 0.99 / 0.87 (A's alone: 0.71, 0.87, 0.80 at the 4096^2 ones), so where B is
#: staged A is read in place. Rows 64 bytes off the 128-byte lines cost 0-3% at these sizes and are
#: read in place.
MAX_COPY_SHARE = 0.25
#: :func:`copy_share`'s constant: a staging copy moves twice the operand's bytes at about 2 TB/s,
#: while the tensor cores take about 650 x 10^12 operand bytes a second per product column (the
#: bytes and the rate scale alike with the element size), so a copy costs about this over the
#: product's other dimension of its time.
COPY_SHARE_SCALE = 650


def misaligned_rows(view, itemsize: int) -> bool:
    """Whether an operand TMA can read in place as ``view`` (``(rows, cols), (pitch, 1)`` in
    elements of ``itemsize`` bytes) has more than one row, rows longer than one 128-byte box row
    (shorter ones are read whole anyway) and rows 16 bytes off the 32-byte sectors (such operands
    are read through their staging copies where that pays: :func:`staged_for_speed`)."""
    (rows, cols), (pitch, _) = view
    return rows > 1 and cols * itemsize > COPY_ROW_BYTES and pitch * itemsize % 32 == 16


def copy_share(other: int) -> float:
    """The estimated share of a product's time that the staging copy of one operand costs,
    ``other`` being the product's other dimension (N for A, M for B): :data:`COPY_SHARE_SCALE` /
    ``other``."""
    return COPY_SHARE_SCALE / max(other, 1)


def staged_for_speed(operands) -> set:
    """The indices of ``operands`` (``(view or None, itemsize, other dimension, matrices)`` each: A's
    and B's paths, a batch's count of each) to read through their staging copies although TMA could
    read them in place: B's (index 1) where its rows are :func:`misaligned_rows`, else A's where its
    are, where that copy's :func:`copy_share` is within :data:`MAX_COPY_SHARE` and the copy (every
    matrix of a batch, :func:`padded_cols`) within half of :data:`STAGING_KEEP_BYTES` (a larger one
    would be allocated afresh at each call); never both (B's alone ran faster, see
    :data:`MAX_COPY_SHARE`). The module's values are read at each call (set ``MAX_COPY_SHARE`` to 0
    to read every such operand in place)."""
    for i in (1, 0):
        view, itemsize, other, count = operands[i]
        if view is not None and misaligned_rows(view, itemsize):
            (rows, cols), _ = view
            nbytes = count * rows * padded_cols(cols, itemsize) * itemsize
            return {i} if copy_share(other) <= MAX_COPY_SHARE and nbytes <= STAGING_KEEP_BYTES // 2 else set()
    return set()


def batched_view(view, count: int, stride: int, itemsize: int, reads: bool = False):
    """A TMA view of one matrix extended to a batch of ``count`` of them ``stride`` bytes apart (a 3-D
    view: the matrix's dimensions inside), or None where TMA cannot use it so: the stride not a
    positive multiple of 16 bytes, or (unless the view only ``reads``, an operand's) less than a
    matrix's extent: matrices that interleave, which a store would write in no set order."""
    if view is None or isinstance(stride, tuple):  # (two batch dimensions: a staging copy)
        return None
    (rows, cols), (pitch, one) = view
    if count == 1:  # (the stride to a second matrix is never used: any legal value)
        stride = -(-rows * pitch * itemsize // 16) * 16
    if stride <= 0 or stride % 16 or stride % itemsize or (not reads and stride < rows * pitch * itemsize):
        return None
    return (count, rows, cols), (stride // itemsize, pitch, one)


#: The row pitch of the K-major staging copies, in bytes: a whole 128-byte swizzle row, so that each
#: TMA box row of a copy lies in four 32-byte sectors (TMA needs 16; rows 16 bytes off the sectors
#: read up to a third slower: :func:`misaligned_rows`).
COPY_ROW_BYTES = 128


def padded_cols(cols: int, itemsize: int) -> int:
    """``cols`` elements of ``itemsize`` bytes padded to a multiple of :data:`COPY_ROW_BYTES` bytes: a
    staging copy's row, in elements."""
    return -(-cols * itemsize // COPY_ROW_BYTES) * COPY_ROW_BYTES // itemsize


def padded_shape(info: ArrayInfo, transpose: bool) -> tuple:
    """(rows, cols, kpad) of the K-major copy of ``info`` (or its transpose): its rows, the columns
    it holds, and those columns padded (:func:`padded_cols`)."""
    rows, cols = (info.shape[1], info.shape[0]) if transpose else info.shape
    return rows, cols, padded_cols(cols, info.itemsize)


def batch_dims(count: int, step) -> tuple:
    """((d0, s0), (d1, s1)): the two batch dimensions and their byte strides of a batch of ``count``
    matrices ``step`` bytes apart, or of ``step`` = ((d0, s0), (d1, s1)) itself."""
    return step if isinstance(step, tuple) else ((1, 0), (count, step))


def kmajor_copy(x, info: ArrayInfo, transpose: bool, batch=None):
    """In the simulator (host memory: numpy copies at once where the copy kernel would take a
    Python thread per element): a fresh [rows, Kpad] K-major copy (zero-padded to 128-byte rows) of
    ``x`` or ``x.T``; with ``batch`` = (count, the bytes from one matrix to the next, or ((d0, s0),
    (d1, s1)): two batch dimensions and their strides), ``info`` describing the first matrix, a
    [count, rows, Kpad] copy of the batch. On the GPU: :class:`StagedCopy`."""
    rows, cols, kpad = padded_shape(info, transpose)
    raw = np.dtype(f"u{info.itemsize}")
    if batch is None:
        h = host_view(x, raw, info.shape, info.strides).copy_to_host()  # x, or x.T: as ``info``
        dst = np.zeros((rows, kpad), h.dtype)
        dst[:, :cols] = h.T if transpose else h
        return cuda.to_device(dst)
    count, step = batch
    (d0, s0), (d1, s1) = batch_dims(count, step)
    h = np.lib.stride_tricks.as_strided(x._ary.view(raw), (d0, d1) + info.shape, (s0, s1) + info.strides)
    h = h.reshape((count,) + info.shape)
    dst = np.zeros((count, rows, kpad), raw)
    dst[:, :, :cols] = h.transpose(0, 2, 1) if transpose else h
    return cuda.to_device(dst)


def copy_source(info: ArrayInfo, transpose: bool) -> tuple:
    """(the view, the kernel's transpose flag) with which the padded copy kernels read ``info``
    (or its transpose) along its contiguous dimension: a column-major source is read through its
    transpose with the flag flipped (the tiled kernels read the source's last dimension)."""
    es = info.itemsize
    if info.strides[-1] != es and info.strides[-2] == es:
        return info._replace(shape=info.shape[:-2] + info.shape[-2:][::-1],
                             strides=info.strides[:-2] + info.strides[-2:][::-1]), not transpose
    return info, transpose


#: Bytes of staging buffers the plans keep in all (:class:`StagedCopy`); past it a copy gets a
#: fresh buffer at each call (as before buffers were kept), so odd shapes that vary from call to
#: call do not pile up memory outside the array libraries' allocators.
STAGING_KEEP_BYTES = 1 << 30
_KEPT = [0]


def _forget(nbytes):
    _KEPT[0] -= nbytes


def copy_params(info: ArrayInfo, transpose: bool, batch=None) -> tuple:
    """How the padded copy kernels (:mod:`nbwgmma.kernels.copy`) copy ``info`` (or its transpose;
    with ``batch`` as :func:`kmajor_copy` takes it, ``info`` describing the first matrix):
    ``(lo, extent, params, wide)``: the source seen as a flat array of ``extent`` elements from
    byte address ``lo`` (its lowest element), the kernel's scalar parameters after its two arrays
    (``rows, kpad, count, cols, base, s_row, s_col, d1, s_b0, s_b1, transpose``, in elements), and
    whether it needs the 64-bit kernel (a negative stride, or a matrix of 2**32 elements or more).
    Raises ValueError for a stride that is not a multiple of the element size."""
    rows, cols, kpad = padded_shape(info, transpose)
    view, flag = copy_source(info, transpose)  # (read along its contiguous dimension)
    es = info.itemsize
    (d0, s0), (d1, s1) = batch_dims(*batch) if batch is not None else ((1, 0), (1, 0))
    dims = [(d0, s0), (d1, s1), *zip(view.shape, view.strides)]
    if any(st % es for _, st in dims):
        lead = "" if batch is None else f" (its batch's {(s0, s1)})"
        raise ValueError(f"has strides {info.strides}{lead} bytes, not multiples of its element size ({es} bytes)")
    lo = sum((d - 1) * st for d, st in dims if st < 0 and d > 1)
    hi = sum((d - 1) * st for d, st in dims if st > 0 and d > 1)
    (p, q), (s_row, s_col) = view.shape, (st // es for st in view.strides)
    span = (p - 1) * abs(s_row) + (q - 1) * abs(s_col)
    wide = any(st < 0 and d > 1 for d, st in dims) or max(span + 1, rows * kpad) > 0xFFFFFFFF
    params = (rows, kpad, d0 * d1, cols, -lo // es, s_row, s_col, max(d1, 1), s0 // es, s1 // es, int(flag))
    return info.ptr + lo, (hi - lo) // es + 1, params, wide


def launch_copy(params: tuple, itemsize: int, dst, stream_handle: int):
    """Launch the padded copy that ``params`` (:func:`copy_params`' result) describes into
    ``dst``, a C-contiguous [count,] rows x kpad device array of ``itemsize``-byte elements, on
    the stream ``stream_handle`` (a one-off copy: Numba's launch)."""
    from ..kernels.copy import COPY_BLOCK, copy_grid, pad_copy_kernel, pad_copy_wide_kernel, sized_to_data

    lo, extent, args, wide = params
    src = _Described(lo, (extent,), (itemsize,), np.dtype(f"u{itemsize}").str)
    kern = pad_copy_wide_kernel if wide else pad_copy_kernel
    with sized_to_data():
        kern[copy_grid(*args[:3]), COPY_BLOCK, nb_stream(stream_handle)](
            cuda.as_cuda_array(src), dst.reshape(dst.size), *args)


class StagedCopy:
    """The K-major staging copy (zero-padded to 128-byte rows) of one operand TMA cannot read in
    place (or reads slowly: :func:`misaligned_rows`), for one plan, stream and host thread: the
    buffer allocated once and rewritten by each call (launches on a stream run in order, so a call's copy overwrites it only after the GEMM
    before has read it; one per host thread, since two threads' copy-then-GEMM pairs on one stream
    may interleave), up to :data:`STAGING_KEEP_BYTES` kept in all; the copy kernel prepared once
    (:func:`nbwgmma.launch.prepare`). Allocated and launched through Numba at each call, a bf16
    1000 x 777 x 513 product (K = 513: rows not 16 bytes apart) took 1604 us a call; so, 18 us
    (torch.mm: 20 us; measured on an H200). The copy kernel reads the operand along its contiguous
    dimension (a transposed read where that is the destination's column). Not in the simulator
    (:func:`kmajor_copy` there). With ``captured`` (made for a call captured into a CUDA graph):
    the graph's own buffer, held for the life of the process (:mod:`nbwgmma.capture`). Raises
    ValueError where :func:`copy_params` does."""

    def __init__(self, info: ArrayInfo, transpose: bool, batch=None, captured=False):
        from ..kernels.copy import copy_grid

        rows, _, kpad = padded_shape(info, transpose)
        self.raw = np.dtype(f"u{info.itemsize}")
        lo, self.extent, self.params, self.wide = copy_params(info, transpose, batch)
        self.below = info.ptr - lo  # (bytes from the lowest element to the first)
        count = self.params[2]
        self.shape = (rows, kpad) if batch is None else (count, rows, kpad)
        nbytes = count * rows * kpad * info.itemsize
        self.kept = captured or _KEPT[0] + nbytes <= STAGING_KEEP_BYTES
        self.dst = self.flat = None
        if self.kept:
            self.dst = cuda.device_array(self.shape, dtype=self.raw)
            self.flat = self.dst.reshape(self.dst.size)  # (the kernel's view: one dimension)
            if captured:
                hold(self.dst)
            else:
                _KEPT[0] += nbytes
                weakref.finalize(self, _forget, nbytes)
        self.grid = copy_grid(rows, kpad, count)
        self.prepared = None

    def __call__(self, info: ArrayInfo, stream_handle: int):
        """Copy the operand ``info`` describes (its first matrix, for a batch): into :attr:`dst`
        where it is kept, else into a fresh buffer; returns the buffer."""
        src = _Described(info.ptr - self.below, (self.extent,), (self.raw.itemsize,), self.raw.str)
        if self.kept:
            dst, flat = self.dst, self.flat
        else:
            dst = cuda.device_array(self.shape, dtype=self.raw, stream=nb_stream(stream_handle))
            flat = dst.reshape(dst.size)
        if self.prepared is None:
            from ..kernels.copy import COPY_BLOCK, pad_copy_kernel, pad_copy_wide_kernel, sized_to_data
            from ..launch import prepare

            with sized_to_data():
                self.prepared = prepare(pad_copy_wide_kernel if self.wide else pad_copy_kernel, self.grid,
                                        COPY_BLOCK, (src, flat, *self.params))
        self.prepared(src, flat, *self.params, stream=stream_handle)
        return dst


class _Described:
    """An array of raw elements at ``ptr`` as ``__cuda_array_interface__`` gives it (to prepare a kernel)."""

    def __init__(self, ptr, shape, strides, typestr):
        self.__cuda_array_interface__ = {"shape": shape, "strides": strides, "typestr": typestr,
                                         "data": (ptr, False), "version": 3}


_TMAP_CACHE: dict = {}


def l2_promotion(dtype, view):
    """The L2 promotion of a map of ``view``: 256 bytes, or 128 where its rows start off the 32-byte
    sectors (a stride outside the contiguous dimension of 16 modulo 32 bytes: each 128-byte box row
    touches 5 sectors). On an H100 such an N-major B (bf16 rows of 6000 bytes) read 26-29% slower
    than rows of 6144 bytes, and 128-byte promotion gained 11-17% of that back (BENCHMARKS.md,
    2026-11-28). (An element type TMA lacks: 256, and the map refuses it.)"""
    from ..layout.tma import TMA_DTYPES

    es = TMA_DTYPES[dtype][1] if dtype in TMA_DTYPES else 0
    return "128B" if any(s * es % 32 for s in view[1][:-1]) else "256B"


def tensor_map(arr, ptr, dtype, box, view, keep: bool, swizzle: str = "128B"):
    """A cached tensor map of ``arr`` seen as ``view`` = (shape, strides), 128B-swizzled unless
    ``swizzle`` says otherwise, with :func:`l2_promotion`'s promotion.

    The map encodes only the address, shape and strides, so a cached map stays right
    for any array later placed at the same address. ``keep`` holds ``arr`` alive with
    the map: staging copies must outlive the asynchronous launch that reads them.
    """
    from ..tma import TensorMap

    key = (ptr, view, dtype, box, keep, swizzle)
    tm = _TMAP_CACHE.get(key)
    if tm is None:
        shape, strides = view
        tm = TensorMap(arr, box, dtype=dtype, swizzle=swizzle, shape=shape, strides=strides,
                       l2_promotion=l2_promotion(dtype, view))
        if not keep:
            tm.array = None
        while len(_TMAP_CACHE) >= 64:  # oldest first
            del _TMAP_CACHE[next(iter(_TMAP_CACHE))]
        _TMAP_CACHE[key] = tm
    return tm



def transposed(info: ArrayInfo) -> ArrayInfo:
    """The transpose of a 2-D array as a view: shape and strides reversed, same memory."""
    return info._replace(shape=info.shape[::-1], strides=info.strides[::-1])



_NB_STREAMS: dict = {}


def nb_stream(st):
    """A Numba stream for a raw handle (cached: creating one per call costs microseconds)."""
    if not isinstance(st, int):
        return st if st else 0
    if st == 0:
        return 0
    s = _NB_STREAMS.get(st)
    if s is None:
        if len(_NB_STREAMS) > 64:
            _NB_STREAMS.clear()
        s = _NB_STREAMS[st] = cuda.external_stream(st)
    return s


def vector_f32(info: ArrayInfo, owner, stream):
    """A new contiguous f32 copy of the 1-D Numba vector ``info`` (any stride; f32 or f16),
    made on ``stream`` (a raw handle or None)."""
    from ..kernels.copy import grid_for, sized_to_data, vector_f32_kernel

    st = nb_stream(stream)
    n = info.shape[0]
    dst = cuda.device_array(n, np.float32, stream=st)
    with sized_to_data():
        vector_f32_kernel[grid_for(n), 256, st](numba_view(info, owner), dst)
    return dst



def zero_fill(io: ArrayInfo, out, stream) -> None:
    """Fill ``out`` (described by ``io``) with zeros: the product of a K = 0 matmul."""
    from ..kernels.copy import fill_zero_kernel, grid_for, sized_to_data

    m, n = io.shape
    with sized_to_data():
        fill_zero_kernel[grid_for(m * n), 256, nb_stream(stream)](numba_view(io, out))
