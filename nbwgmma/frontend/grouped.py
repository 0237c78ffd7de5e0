"""``nbwgmma.grouped_matmul(a, b, offs)``: one GEMM per group of rows, in one launch.

The meaning of PyTorch's ``torch._grouped_mm`` for a 2-D A and a 3-D B: A [total, K] holds
the groups' rows one after another, ``offs`` [G] (int32, on A's device) their running ends,
B [G, K, N] one matrix per group; ``out[offs[g-1]:offs[g]] = A[offs[g-1]:offs[g]] @ B[g]``.
So far: bf16 or f16, A row-major, B either the transpose of a row-major weight stack
(``w.transpose(1, 2)`` for w [G, N, K], the experts' weights of ``x @ w[g].T``: K contiguous)
or (G, K, N) with N contiguous (each B[g] row-major), out of the input type (or f32 with
``out_dtype="f32"``, stored from the registers by the ping-pong schedule), with an optional
bias per group and column and an activation (:mod:`nbwgmma.kernels.grouped`). Empty groups
are allowed, and groups of any size.

The host never reads ``offs`` (no synchronization): its type, shape and device are checked
before the launch, and the kernel clamps its values into [0, total], so bad values cannot
reach memory outside A or ``out`` (decreasing values are not repaired: groups then overlap,
their common rows written twice, or are empty); rows past the last offset are left as they
are (``nbwgmma.torch.grouped_mm(..., zero_rest=True)`` zeroes them). ``validate=True`` also
reads ``offs`` on the host (a synchronization) and refuses decreasing values or an end past
A's rows.

The masked layout, for decoding under CUDA graphs (shapes fixed, counts changing on the
device): a 3-D A [G, T, K] and ``offs`` holding each group's count of valid rows; out is
[G, T, N], and only each group's first ``offs[g]`` rows are computed and written (counts
clamped into [0, T]; ``validate=True`` refuses counts outside it).
The K-grouped form (MoE weight gradients, ``torch._grouped_mm``'s 2-D x 2-D meaning): A [M, total]
and B [total, N], ``offs`` the groups' running ends along ``total``, out [G, M, N]
(:mod:`nbwgmma.frontend.grouped_wgrad`).
"""

from __future__ import annotations

import numpy as np

from .. import sim
from ..capture import call_captured, keep_if_captured, relaxed_call
from ..errors import MatmulError, MatmulTypeError
from ..kit import ACTIVATIONS, box_rows
from ..kernels.grouped import SCHEDULES, SMEM, THREADS, grouped_kernel, units_bound
from .args import (
    NP_OF, arrays_among, check_apart, described, empty_rows16, lib_of, stand_in, stream_of, type_name, typed,
    zero_operands,
)
from .arrays import ArrayInfo
from .grouped_scaled import FP8_TYPES, grouped_matmul_scaled
from .grouped_wgrad import check_ends, grouped_matmul_wgrad, host_offs, out_type
from .views import numba_view, tensor_map

__all__ = ["grouped_matmul"]

_SIM = sim.enabled()
#: From this many rows per group on average, the cooperative schedule (128 x 256 tiles).
COOPERATIVE_ROWS = 128


def _row_major(info: ArrayInfo) -> bool:
    """Rows contiguous, 16-byte aligned (TMA's rule for a row's start; its length may be any).
    An empty array is (NumPy gives it zero strides): nothing is read or written."""
    if 0 in info.shape:
        return True
    es = info.itemsize
    return info.strides[-1] == es and all(s % 16 == 0 for s in info.strides[:-1]) and info.ptr % 16 == 0


def _group_bias(bias, groups, n, device, lib):
    """``(2-D f32 bias, gb)`` for the kernel: one row per group (shape (G, N), ``gb`` 1) or one
    row for all (shape (N,) or (1, N), ``gb`` 0); a stand-in and 0 without a bias."""
    if bias is None:
        return None, 0
    info = described(bias, "bias", "grouped_matmul")
    if info.dtype not in ("f32", "bf16", "f16") or (lib == "numba" and info.dtype != "f32"):
        raise MatmulTypeError(f"grouped_matmul: bias must be f32, bf16 or f16 (a Numba array: f32, its library "
                              f"cannot convert it here); got {info.dtype}")
    if info.device != device:
        raise MatmulError(f"grouped_matmul: bias must be on device {device} like A; got device {info.device}")
    if info.shape not in ((groups, n), (n,), (1, n)):
        raise MatmulError(f"grouped_matmul: bias must have shape ({groups}, {n}) (one row per group) or ({n},) (one "
                          f"for all groups); got {info.shape}")
    rows = groups if info.shape == (groups, n) and groups != 1 else 1
    if lib == "torch":
        f32 = bias.reshape(rows, n).float().contiguous()
    elif lib == "cupy":  # (a graph's kernel reads the copy at every replay: nbwgmma.capture)
        f32 = keep_if_captured(bias.reshape(rows, n).astype(np.float32))
    else:  # (a Numba bias is f32: checked above)
        f32 = bias.reshape(rows, n)
    return f32, int(rows > 1)


def _validate(offs, lib, masked, total, groups):
    """``validate=True``: ``offs`` read on the host (a synchronization), refused where it decreases
    or ends past A's rows (masked: a count outside [0, T])."""
    if masked:
        ends = np.asarray(host_offs(offs, lib), np.int64)
        bad = np.flatnonzero((ends < 0) | (ends > total // max(groups, 1)))
        if bad.size:
            raise MatmulError(f"grouped_matmul: counts must be in [0, {total // max(groups, 1)}] (the rows per group of "
                              f"A); offs[{bad[0]}] = {ends[bad[0]]}")
    else:
        check_ends(offs, lib, total, groups, f"A's {total} rows")


def _call_stream(a, b, offs, *args, stream=None, **kwargs):
    return 0 if _SIM else stream_of(lib_of(a), stream, "grouped_matmul")


def _zero_product(a, a_shape, groups, n, offs, out, t, stream, bias, activation):
    """A K = 0 grouped product into ``out``: the epilogue (zeros, or ``activation(bias[g])`` in
    group g's rows) over a product of zeros of K = 16 in ``t`` (bf16 or f16)."""
    za, zb = zero_operands(lib_of(a), a, a_shape, (groups,), n, t, t)
    return grouped_matmul(za, zb, offs, out=out, in_dtype=t, stream=stream, bias=bias, activation=activation)


@relaxed_call(_call_stream)  # (a call captured into a CUDA graph may compile, load and allocate: nbwgmma.capture)
def grouped_matmul(a, b, offs, *, out=None, out_dtype=None, in_dtype=None, stream=None, validate=False, bias=None,
                   activation=None, scale_a=None, scale_b=None):
    """``out[rows of group g] = activation(a[rows of group g] @ b[g] + bias[g])`` for the groups
    of rows ``offs`` delimits (see the module's text); returns ``out`` (allocated when not
    given). ``offs`` is read on the device only and not checked unless ``validate=True`` (a host
    read): ends past A's rows or below 0 are clamped into [0, total], and decreasing ends make
    groups overlap: a wrong product, with no error. Rows past the last end are left as they are.
    ``in_dtype``: the element type of raw integer operands (NumPy, Numba and CuPy have
    no bf16 or fp8: ``uint16`` bits with "bf16" or "f16", ``uint8`` with "e4m3" or "e5m2";
    :func:`nbwgmma.layout.to_bits` makes them); PyTorch tensors carry their type. ``bias``: (G, N) (one row per group: each expert's bias) or (N,) (one for all), f32,
    bf16 or f16 (a Numba array: f32); ``activation``: one of ``relu``, ``gelu``, ``gelu_tanh``, ``silu``, ``sigmoid``
    (after the bias, in f32, before the rounding to the output type), for every operand type.

    With ``a`` 2-D (M, total) and ``b`` 2-D (total, N): the K-grouped product of MoE weight
    gradients, ``torch._grouped_mm``'s 2-D x 2-D form. ``offs`` (int32 [G], on the device) holds
    the groups' running ends along ``total``; out is (G, M, N) with ``out[g] = a[:, s:e] @ b[s:e]``
    (``s = offs[g-1]``, 0 for ``g = 0``; ``e = offs[g]``). An empty group gives ``out[g] = 0``, as
    ``torch._grouped_mm`` does. ``dW_g = dy_g^T @ x_g`` is ``grouped_matmul(dy.t(), x, offs)``
    with ``dy`` (total, M) and ``x`` (total, N) row-major: A M-contiguous and B N-contiguous
    (16-byte aligned rows) are read in place, with no copy; any other layout of A or B (a
    row-major A, a K-contiguous B, unaligned rows) is first copied into that one (one extra
    pass over the operand), never refused. bf16 or f16, out of the input type: a given ``out``
    must be (G, M, N) with N contiguous and 16-byte aligned rows (an allocated one pads its rows
    to 16 bytes, as PyTorch's does). One launch, ``offs`` read on the device only (clamped into
    [0, total], as in the 3-D form; ``validate=True`` checks it on the host);
    ``bias`` and ``activation`` are refused in this form.

    fp8 A and B (e4m3 or e5m2; PyTorch float8 tensors, or uint8 bytes with ``in_dtype``) run the
    block-scaled grouped GEMM: ``scale_a`` f32 (total, ceil(K/128)) (one scale per row and
    128-K block), ``scale_b`` f32 (G, ceil(N/128), ceil(K/128)) (one per 128 x 128 block of each
    weight [N, K]), B the transpose of a contiguous (G, N, K) fp8 weight stack, out bf16 (or
    ``out_dtype`` f16 / f32), ``bias`` and ``activation`` as above
    (:mod:`nbwgmma.frontend.grouped_scaled`)."""
    ia, ib, io_ = (described(x, name, "grouped_matmul") for x, name in ((a, "A"), (b, "B"), (offs, "offs")))
    for name, info in (("A", ia), ("B", ib)):
        typed(info, name, in_dtype, "grouped_matmul")  # raw integers of the type's size, if in_dtype
        if in_dtype is None and info.dtype == "u16":
            raise MatmulTypeError(f"grouped_matmul: {name} holds uint16: say with in_dtype='bf16' or 'f16' which "
                                  f"16-bit type its bits are")
    if activation is not None and (not isinstance(activation, str) or activation not in ACTIVATIONS):
        raise MatmulError(f"grouped_matmul: activation must be one of {sorted(ACTIVATIONS)} or None; got "
                          f"{activation!r}")
    if validate and not _SIM and call_captured():  # (the decorator recorded the call's stream)
        raise MatmulError("grouped_matmul: validate=True reads offs on the host, which a call captured into a "
                          "CUDA graph cannot (its offs are read at each replay); validate outside the capture")
    if len(ia.shape) == 2 and len(ib.shape) == 2:  # the K-grouped form (weight gradients)
        if bias is not None or activation is not None:
            raise MatmulError("grouped_matmul: bias and activation apply to a 3-D B so far; the 2-D x 2-D form "
                              "takes neither")
        if scale_a is not None or scale_b is not None:
            raise MatmulError("grouped_matmul: scale_a and scale_b apply to fp8 operands with a 3-D B; the 2-D x "
                              "2-D form (16-bit) takes neither")
        return grouped_matmul_wgrad(a, b, offs, ia, ib, io_, lib_of(a), out=out, out_dtype=out_dtype,
                                    in_dtype=in_dtype, stream=stream, validate=validate)
    masked = len(ia.shape) == 3
    if masked:  # [G, T, K] seen as [G * T, K]
        if ia.shape[0] != (ib.shape[0] if len(ib.shape) == 3 else None):
            raise MatmulError(f"grouped_matmul: a 3-D A (G, T, K) needs B of (G, K, N) with the same G; got shapes "
                              f"{ia.shape} and {ib.shape}")
        t = ia.shape[1]
        if ia.strides[0] != t * ia.strides[1]:
            raise MatmulError(f"grouped_matmul: a 3-D A must have its groups' rows one after another; got strides "
                              f"{ia.strides} bytes")
        ia = ArrayInfo(ia.ptr, (ia.shape[0] * t, ia.shape[2]), ia.strides[1:], *tuple(ia)[3:])
    if len(ia.shape) != 2 or len(ib.shape) != 3:
        raise MatmulError(f"grouped_matmul: A must be 2-D (total, K) or 3-D (G, T, K) and B 3-D (G, K, N), or both "
                          f"2-D: A (M, total) and B (total, N); got shapes {ia.shape} and {ib.shape}")
    (total, k), (groups, kb, n) = ia.shape, ib.shape
    if kb != k:
        raise MatmulError(f"grouped_matmul: inner dimensions differ: A is {ia.shape}, B is {ib.shape}")
    ta, tb = in_dtype or ia.dtype, in_dtype or ib.dtype
    if io_.dtype != "s32":
        raise MatmulTypeError(f"grouped_matmul: offs must be int32 (one end per group of B); got {io_.dtype}")
    if io_.shape != (groups,):  # the right type, a wrong value: ValueError's side
        raise MatmulError(f"grouped_matmul: offs must have shape ({groups},) (one end per group of B, whose shape "
                          f"is {ib.shape}); got shape {io_.shape}")
    for name, info in (("B", ib), ("offs", io_)):
        if info.device != ia.device:
            raise MatmulError(f"grouped_matmul: {name} must be on device {ia.device} like A; got {info.device}")

    def check_offs(total):
        if validate:
            _validate(offs, lib_of(a), masked, total, groups)

    if ta in FP8_TYPES:
        bias32, gb = _group_bias(bias, groups, n, ia.device, lib_of(a))
        out = grouped_matmul_scaled(a, b, offs, ia, ib, io_, lib_of(a), masked=masked,
                                    t=t if masked else 0, ta=ta, tb=tb, out=out,
                                    out_dtype=out_dtype, scale_a=scale_a, scale_b=scale_b, stream=stream,
                                    check_offs=check_offs, bias=(bias32, gb), activation=activation)
        if k > 0 or 0 in out.shape:
            return out
        odt = "f16" if described(out, "out", "grouped_matmul").dtype == "f16" else "bf16"
        return _zero_product(a, (groups, t, 0) if masked else (total, 0), groups, n, offs, out, odt, stream, bias,
                             activation)
    if scale_a is not None or scale_b is not None:
        raise MatmulError("grouped_matmul: scale_a and scale_b apply to fp8 operands; got "
                          f"{ta} and {tb}")
    if ta not in ("bf16", "f16") or tb != ta:
        raise MatmulTypeError(f"grouped_matmul: A and B must both be bf16 or both f16, or both fp8; got {ta} and "
                              f"{tb}")
    given = None if out is None else described(out, "out", "grouped_matmul")
    # (an f32 out gives the output type, as matmul takes it from out; a 16-bit one the input type)
    odt = type_name(out_dtype or ("f32" if given is not None and given.dtype == "f32" else ta))
    if odt not in (ta, "f32"):
        raise MatmulTypeError(f"grouped_matmul: the output is of the input type ({ta}) or f32; got out_dtype={odt}")
    es = ib.itemsize
    wt = ArrayInfo(ib.ptr, (groups * n, k), (ib.strides[2], ib.strides[1]), *tuple(ib)[3:])  # B[g]^T stacked
    if 0 in ib.shape:  # (nothing of B is read; an empty array may have zero strides)
        b_major = "K"
    elif ib.strides[1] == es and ib.strides[0] == n * ib.strides[2] and _row_major(wt):
        b_major = "K"  # the transpose of a contiguous (G, N, K) weight stack: w.transpose(1, 2)
    elif ib.strides[2] == es and all(st % 16 == 0 for st in ib.strides[:2]) and ib.ptr % 16 == 0 and (n * es) % 16 == 0:
        b_major = "MN"  # (G, K, N) with N contiguous: each B[g] row-major
    else:
        raise MatmulError(f"grouped_matmul: B (G, K, N) must have N contiguous (each B[g] row-major) or K "
                          f"contiguous (the transpose of a contiguous (G, N, K) weight stack, w.transpose(1, 2)), "
                          f"16-byte aligned; got strides {ib.strides} bytes")
    if not _row_major(ia):
        raise MatmulError(f"grouped_matmul: A must be row-major with 16-byte aligned rows and base; got strides "
                          f"{ia.strides} bytes, base {ia.ptr % 16} bytes past a 16-byte boundary")
    lib = lib_of(a)
    shape = (groups, t, n) if masked else (total, n)
    fresh = out is None
    if fresh:
        out = empty_rows16(lib, a, shape, odt)
    io = described(out, "out", "grouped_matmul") if fresh else given
    out_type(io, odt)
    if not fresh:
        check_apart(io, (("A", ia), ("B", ib), ("offs", io_)) + arrays_among((("bias", bias),), "grouped_matmul"),
                    "grouped_matmul")
    if io.shape != shape or not _row_major(io) or (masked and io.strides[0] != io.shape[1] * io.strides[1]):
        raise MatmulError(f"grouped_matmul: out must be a row-major {shape} {odt} array with 16-byte aligned "
                          f"rows; got {io.dtype} of shape {io.shape}, strides {io.strides}")
    if masked:
        io = ArrayInfo(io.ptr, (total, n), io.strides[1:], *tuple(io)[3:])
    check_offs(total)
    bias32, gb = _group_bias(bias, groups, n, ia.device, lib)  # (checked before anything returns)
    if total == 0 or n == 0 or groups == 0:
        return out
    if k == 0:
        return _zero_product(a, (groups, t, 0) if masked else (total, 0), groups, n, offs, out, ta, stream, bias,
                             activation)
    es = ia.itemsize
    tma_a = tensor_map(a, ia.ptr, ta, (128, 64), ((total, k), (ia.strides[0] // es, 1)), keep=False)
    # Groups of 128 rows or more on average: the cooperative 128 x 256 tiles (both consumers on
    # one tile, in step; their stores on the epilogue warps, under the next main loop). Against
    # ping-pong's 128 x 128 tiles, on an H100: 1.19-1.32x for groups of 512 and 1024 rows,
    # 0.97-1.04x at 256, 1.04x at 128 (BENCHMARKS.md, 2026-11-25); on an H200: 1.02-1.04x at 256,
    # 1.18x at 384, 1.04-1.05x at 128 (2026-11-29); fewer than 128: ping-pong.
    schedule = "cooperative" if total // groups >= COOPERATIVE_ROWS else "pingpong"
    if io.ptr % 16 or (total > 1 and io.strides[0] % 16) or odt == "f32":  # the epilogue warps store 16-bit
        schedule = "pingpong"                                                 # values, 16 bytes at a time
    bn, _, at_once = SCHEDULES[schedule]
    if b_major == "K":
        tma_b = tensor_map(b, ib.ptr, ta, (bn, 64), ((groups * n, k), (wt.strides[0] // es, 1)), keep=False)
    else:  # a 3-D map, so that K past a group's end reads zeros
        tma_b = tensor_map(b, ib.ptr, ta, (1, 64, 64), ((groups, k, n), (ib.strides[0] // es, ib.strides[1] // es, 1)),
                           keep=False)
    from ..launch import device_limits, launch

    sms = 1 if _SIM else device_limits()["multiprocessors"]
    grid = max(1, min(sms, -(-units_bound(total, groups, n, schedule) // at_once)))

    if schedule == "cooperative":  # its epilogue warps store C's rows as bytes
        view = numba_view(ArrayInfo(io.ptr, (total, 2 * n), (io.strides[0], 1), 1, "u8", *tuple(io)[5:]), out,
                          np.uint8)
    else:
        view = numba_view(io, out, NP_OF[odt])
    bias_arg = stand_in(ia.device) if bias32 is None else bias32
    # Groups of at most 4 tile rows on average (few tokens per expert): CTAs take units in wave
    # order, so a column's tiles run together and read their B once (on an H100, 32 groups of 256
    # rows: 0.91x torch._grouped_mm instead of 0.58x). Larger groups keep the plain order, whose
    # pairs share B inside the CTA (measured 5-10% faster there; see BENCHMARKS.md).
    # Decoding: tiles holding at most `short` of their group's rows load A in boxes of that many (the
    # masked layout's rows per group; else the groups' mean, rounded up to 8; kit.box_rows)
    short = box_rows(total // groups if masked else -(-total // groups), 128)
    short = short if short < 128 else 0
    tma_as = tensor_map(a, ia.ptr, ta, (short, 64), ((total, k), (ia.strides[0] // es, 1)), keep=False) \
        if short else tma_a
    kernel = grouped_kernel(ta, masked, wave=total // groups <= 512, bias=bias32 is not None, act=activation,
                            b_major=b_major, schedule=schedule, out=odt, short=short > 0)
    launch(kernel, grid, THREADS,
           (tma_a.address, tma_b.address, view, offs, np.int32(n), np.int32(k), np.int32(total // groups), bias_arg,
            np.int32(gb), tma_as.address, np.int32(short)), stream=stream_of(lib, stream, "grouped_matmul"),
           smem=SMEM[schedule], pdl=True)
    return out
