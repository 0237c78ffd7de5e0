"""``grouped_matmul`` with fp8 operands and block scales (:mod:`nbwgmma.kernels.grouped_scaled`).

``out[rows of group g] = (sa * A[rows]) @ (B[g] * sb[g])`` in the DeepSeek-V3 recipe: A [total,
K] (or the masked layout's [G, T, K]) and B [G, K, N] fp8, e4m3 or e5m2 each, B the transpose
of a contiguous (G, N, K) weight stack (``w.transpose(1, 2)``: K contiguous, each weight read
in place), and f32 scales on A's device, any strides, KB = ceil(K / 128), NB = ceil(N / 128):

============  ===========================  =============================================
side          shape                        meaning
============  ===========================  =============================================
A, 1 x 128    (total, KB) or (G, T, KB)     ``sa[r, kb]``: row r, K block kb
B, 128 x 128  (G, NB, KB)                  ``sb[g, nb, kb]``: group g's weight [N, K] in
                                           128 x 128 blocks, in the weight's own order
============  ===========================  =============================================

Out bf16 (the default), f16 or f32, with a bias (one row per group or one for all) and an
activation as the 16-bit grouped GEMM takes them, in f32 before the rounding to the output
type. ``offs`` as for the 16-bit grouped GEMM: read on the device only (``validate=True``
checks it on the host). Not yet: rowwise or per-tensor scales, a row-major (N-contiguous) B:
each is a
:class:`~nbwgmma.errors.MatmulError` before anything is launched, as is a scale of the wrong
shape, type, layout or device.
"""

from __future__ import annotations

import numpy as np

from .. import sim
from ..errors import MatmulError, MatmulTypeError
from ..kernels.grouped_scaled import BM, BN, SMEM, THREADS, grouped_scaled_kernel
from ..kit import SCALE_BLOCK, box_rows
from .args import NP_OF, arrays_among, check_apart, described, empty_rows16, holds, stand_in, stream_of
from .arrays import ArrayInfo
from .views import numba_view, tensor_map

__all__ = ["FP8_TYPES", "grouped_matmul_scaled"]

_SIM = sim.enabled()
FP8_TYPES = ("e4m3", "e5m2")
OUTS = ("bf16", "f16", "f32")


def _scale(x, name, shapes, device):
    """The Numba view of a scale array: f32, one of ``shapes``, on ``device``, strides of whole
    elements; 2-D for A (a 3-D masked scale seen as [G * T, KB]), 3-D for B."""
    if x is None or isinstance(x, (int, float)):
        raise MatmulError(f"grouped_matmul: fp8 operands need {name} as an array of shape {shapes[0]} (block "
                          f"scales); got {x!r}")
    info = described(x, name, "grouped_matmul")
    if info.dtype != "f32":
        raise MatmulTypeError(f"grouped_matmul: {name} must be f32; got {info.dtype}")
    if info.device != device:
        raise MatmulError(f"grouped_matmul: {name} must be on device {device} like A; got device {info.device}")
    if info.shape not in shapes:
        want = " or ".join(str(s) for s in shapes)
        raise MatmulError(f"grouped_matmul: {name} must have shape {want}; got {info.shape}")
    if any(s < 0 or s % 4 for s in info.strides):
        raise MatmulError(f"grouped_matmul: {name} must have non-negative strides of whole f32 elements; got "
                          f"strides {info.strides} bytes")
    if name == "scale_a" and len(info.shape) == 3:
        g, t, kb = info.shape
        if info.strides[0] != t * info.strides[1]:
            raise MatmulError(f"grouped_matmul: a 3-D scale_a must have its groups' rows one after another; got "
                              f"strides {info.strides} bytes")
        info = ArrayInfo(info.ptr, (g * t, kb), info.strides[1:], *tuple(info)[3:])
    return numba_view(info, x, np.float32)


def grouped_matmul_scaled(a, b, offs, ia, ib, io_, lib, *, masked, t, ta, tb, out, out_dtype, scale_a, scale_b,
                          stream, check_offs, bias=(None, 0), activation=None):
    """The fp8 form of :func:`nbwgmma.grouped_matmul` (see the module's text): ``ia`` A as
    [total, K] (the masked layout already flattened, ``t`` its rows per group), ``ta``/``tb`` the
    operands' fp8 types, ``check_offs(total)`` the host check of ``validate=True`` (or None);
    ``bias`` the checked bias as the kernel takes it, ``(2-D f32 array, gb)`` or ``(None, 0)``;
    ``activation`` a checked name or None. With K = 0 everything is checked and ``out`` returned
    unwritten: :func:`nbwgmma.grouped_matmul` writes the zero product's epilogue."""
    from ..launch import device_limits, launch

    (total, k), (groups, _, n) = ia.shape, ib.shape
    if tb not in FP8_TYPES:
        raise MatmulTypeError(f"grouped_matmul: fp8 A needs fp8 B (e4m3 or e5m2); got {ta} and {tb}")
    odt = out_dtype or "bf16"
    if odt not in OUTS:
        raise MatmulTypeError(f"grouped_matmul: fp8 operands give bf16, f16 or f32 out; got out_dtype={odt}")
    es = ib.itemsize
    if 0 not in ib.shape and not (ib.strides[1] == es and ib.strides[0] == n * ib.strides[2]  # (empty: never read;
                                  and ib.strides[2] % 16 == 0 and ib.ptr % 16 == 0):       # may have zero strides)
        raise MatmulError(f"grouped_matmul: fp8 B (G, K, N) must be the transpose of a contiguous (G, N, K) weight "
                          f"stack (w.transpose(1, 2): K contiguous, 16-byte aligned rows) so far; got strides "
                          f"{ib.strides} bytes")
    if 0 not in ia.shape and not (ia.strides[1] == ia.itemsize and ia.strides[0] % 16 == 0 and ia.ptr % 16 == 0):
        raise MatmulError(f"grouped_matmul: A must be row-major with 16-byte aligned rows and base; got strides "
                          f"{ia.strides} bytes, base {ia.ptr % 16} bytes past a 16-byte boundary")
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    a_shapes = ((total, kb),) + (((groups, t, kb),) if masked else ())
    sa = _scale(scale_a, "scale_a", a_shapes, ia.device)
    sb = _scale(scale_b, "scale_b", ((groups, nb, kb),), ia.device)
    shape = (groups, t, n) if masked else (total, n)
    fresh = out is None
    if fresh:
        out = empty_rows16(lib, a, shape, odt)  # (rows 16 bytes apart, as TMA stores need)
    io = described(out, "out", "grouped_matmul")
    if not fresh:
        # (the bias as the kernel reads it: a copy _group_bias made is read before the kernel runs)
        reads = arrays_among((("bias", bias[0]), ("scale_a", scale_a), ("scale_b", scale_b)), "grouped_matmul")
        check_apart(io, (("A", ia), ("B", ib), ("offs", io_)) + reads, "grouped_matmul")
    empty = 0 in shape  # (an empty array's strides say nothing: NumPy gives a new one zeros)
    if io.shape != shape or not holds(io.dtype, odt) or (not empty and (
            io.strides[-1] != io.itemsize or any(s % 16 for s in io.strides[:-1])
            or (masked and io.strides[0] != io.shape[1] * io.strides[1]))):
        raise MatmulError(f"grouped_matmul: out must be a row-major {shape} {odt} array with 16-byte aligned rows; "
                          f"got {io.dtype} of shape {io.shape}, strides {io.strides}")
    if masked:
        io = ArrayInfo(io.ptr, (total, n), io.strides[1:], *tuple(io)[3:])
    if check_offs is not None:
        check_offs(total)
    if total == 0 or n == 0 or groups == 0:
        return out
    if k == 0:  # (the caller writes the epilogue over a zero product)
        return out
    tma_a = tensor_map(a, ia.ptr, ta, (BM, SCALE_BLOCK), ((total, k), (ia.strides[0], 1)), keep=False)
    # Decoding: tiles holding at most `short` of their group's rows load A in boxes of that many (the
    # masked layout's rows per group; else the groups' mean, rounded up to 8)
    short = box_rows(t if masked else -(-total // groups), BM)
    short = short if short < BM else 0
    tma_as = tensor_map(a, ia.ptr, ta, (short, SCALE_BLOCK), ((total, k), (ia.strides[0], 1)), keep=False) \
        if short else tma_a
    tma_b = tensor_map(b, ib.ptr, tb, (BN, SCALE_BLOCK), ((groups * n, k), (ib.strides[2], 1)), keep=False)
    sms = 1 if _SIM else device_limits()["multiprocessors"]
    units = (-(-total // BM) + groups) * -(-n // BN)  # each group's last tile may be partial
    grid = max(1, min(sms, units))
    view = numba_view(io, out, NP_OF[odt])
    bias32, gb = bias
    kernel = grouped_scaled_kernel(ta, tb, masked, bias=bias32 is not None, act=activation, out=odt, short=short > 0)
    launch(kernel, grid, THREADS,
           (tma_a.address, tma_b.address, view, offs, sa, sb, np.int32(n), np.int32(k), np.int32(t),
            stand_in(ia.device) if bias32 is None else bias32, np.int32(gb), tma_as.address, np.int32(short)),
           stream=stream_of(lib, stream, "grouped_matmul"), smem=SMEM, pdl=True)
    return out
