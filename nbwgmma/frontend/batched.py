"""Batches of products in :func:`nbwgmma.matmul`: ``a @ b`` with a leading batch dimension, as
``torch.bmm`` and ``torch.matmul`` take them.

* ``(batch..., M, K) @ (batch..., K, N)`` -> ``(batch..., M, N)``: the leading dimensions, equal
  in both, are one batch; the library GEMM runs every product in one launch on 3-D tensor maps
  (``GemmConfig(batched=True)``: the kit's :meth:`~nbwgmma.kit.TileScheduler.batch_unit` walk,
  ``Cooperative.load_3d`` and 3-D TMA stores). An operand whose leading dimensions merge into
  one stride (a contiguous tensor's do) and which TMA can read is read in place; one whose
  dimensions merge into two strides (attention's ``(B, S, H, D).transpose(1, 2)``), whose
  matrices interleave, or which TMA cannot read is first copied K-major by one copy kernel, as
  ``torch.matmul`` copies such a batch. ``out``'s must merge into one stride; an ``out`` TMA
  cannot write (rows not 16 bytes apart: an odd width of a contiguous 16-bit out) goes out
  through the "rows" epilogue (a row per warp, :func:`~nbwgmma.kit.store_rows_part`), as the plain
  product's does (a new ``out`` has its rows padded for TMA).
* ``(batch..., M, K) @ (K, N)``: one product of the batch's rows folded into M (what
  ``torch.matmul`` does), where A's matrices follow one another row after row; an A whose
  matrices do not (a transposed or interleaved batch) runs as a batch whose B is one matrix for
  every product, as does ``(M, K) @ (batch..., K, N)`` with A, and an operand whose batch
  stride is 0 (``expand``): ``GemmConfig(broadcast="A" | "B")``, its map one matrix deep, every
  product's loads reading that matrix (no copy).
* A batch takes ``alpha``, fp8 inputs with per-tensor scales, ``out``/``out_dtype`` (fp8 outputs,
  ``scale_out`` and ``amax`` included), ``bias`` and ``activation`` (a bias per column, or per
  row of each product when both operands are batched), ``c`` and ``beta`` (``torch.baddbmm``:
  ``c`` of the output's shape, its batch in one stride, or one (M, N) matrix added to every
  product; ``c`` may be ``out`` itself), ``stream`` and ``config`` (no ``split``, ``stream_k`` or
  ``cluster_k``: the tile model's tile for the batch, never swapped) and an ``epilogue`` function
  (its ``row`` and ``col`` inside the product; extras per column or per row of a product, as a
  plain call's). Scale arrays, and an epilogue function where A's rows are folded over a 2-D B,
  are refused so far.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba.core.errors import NumbaError

from .. import sim
from ..errors import MatmulError, MatmulTypeError
from .args import (
    arrays_among, check_apart, check_c_apart, check_call, described, empty_rows16, holds, lib_of, real_arg,
    scale_product, stream_of, zero_operands,
)
from .arrays import ArrayInfo, array_info
from .fused import bias_operand, check_c, check_epilogue, check_fp8_out, epilogue_error, user_epilogue
from .plan import Plan
from .views import batch_dims, batched_view, numba_view, tma_view, zero_fill

__all__ = ["Batch", "batch_of", "fold", "unfold", "check_batch_options", "batched_matmul", "forget_batched_plans"]

_SIM = sim.enabled()


class Batch(NamedTuple):
    """A batched call's shape: ``count`` products; ``a``, ``b``: one matrix of each operand
    (2-D descriptions); ``sa``, ``sb``: bytes from one matrix to the next (None: a 2-D
    operand); ``lead``: the leading dimensions of the output."""
    count: int
    a: ArrayInfo
    b: ArrayInfo
    sa: int | None
    sb: int | None
    lead: tuple

    @property
    def folds(self) -> bool:
        """One 2-D product does it: a batch of one, or a batched A times a 2-D B whose batch is
        M's rows continued."""
        return self.count == 1 or (self.sb is None and _continues(self.sa, self.a))

    def folds_out(self, io: ArrayInfo) -> bool:
        """Whether ``out`` (described by ``io``) takes the folded product: the batch's shape, its
        matrices' rows one after the other."""
        m, n = self.a.shape[0], self.b.shape[1]
        if io.shape != self.lead + (m, n):
            return False
        return self.count == 1 or _continues(_merged(io, "out")[1], io)


def _continues(stride, info: ArrayInfo) -> bool:
    """Whether matrices ``stride`` bytes apart continue one another's rows (``info``: an array
    whose last two dimensions are a matrix; one of one row continues at any single stride)."""
    rows = info.shape[-2]
    return not isinstance(stride, tuple) and (rows == 1 or stride == rows * info.strides[-2])


def row_step(stride, info: ArrayInfo) -> int:
    """The row stride of a batch folded into one matrix (:func:`_continues`): the matrices' own, or
    for matrices of one row the batch's."""
    return info.strides[-2] if info.shape[-2] > 1 else stride


def _merged(info: ArrayInfo, name: str):
    """(count, stride, leading dims) of an array's leading dimensions merged where their strides
    allow: the stride in bytes from one matrix to the next, or ((d0, s0), (d1, s1)) for two that do
    not merge (a head dimension transposed past the sequence's, say); more are refused."""
    lead, strides = info.shape[:-2], info.strides[:-2]
    count = int(np.prod(lead)) if lead else 1
    dims = []
    for d, st in zip(lead, strides):
        if d == 1:  # (a dimension of one has no step)
            continue
        if dims and dims[-1][1] == d * st:
            dims[-1] = (dims[-1][0] * d, st)
        else:
            dims.append((d, st))
    if len(dims) > 2:
        raise MatmulError(f"matmul: {name}'s batch dimensions {lead} (strides {strides} bytes) merge into {len(dims)} "
                          f"strides, not one or two; make them contiguous (a copy)")
    return count, (tuple(dims) if len(dims) == 2 else dims[0][1] if dims else 0), lead


def batch_of(ia: ArrayInfo, ib: ArrayInfo) -> Batch:
    """The batch of a call whose A or B has more than two dimensions (:class:`Batch`), or the
    :class:`~nbwgmma.errors.MatmulError` that names what does not fit."""
    if len(ia.shape) < 2 or len(ib.shape) < 2:
        raise MatmulError(f"matmul: A and B must be 2-D, or batches of matrices (batch..., rows, columns); got shapes "
                          f"{ia.shape} and {ib.shape}")
    na, sa, lead_a = _merged(ia, "A")
    nb, sb, lead_b = _merged(ib, "B")
    a, b = ia._replace(shape=ia.shape[-2:], strides=ia.strides[-2:]), \
        ib._replace(shape=ib.shape[-2:], strides=ib.strides[-2:])
    if len(ib.shape) == 2:
        return Batch(na, a, b, sa, None, lead_a)
    if len(ia.shape) == 2:  # one A for every product of B's batch
        return Batch(nb, a, b, None, sb, lead_b)
    if lead_a != lead_b:
        raise MatmulError(f"matmul: A's and B's batch dimensions must be equal; got {lead_a} and {lead_b} "
                          f"(shapes {ia.shape} and {ib.shape})")
    return Batch(na, a, b, sa, sb, lead_a)


def fold(x, info: ArrayInfo, rows: int):
    """``x`` (batch..., M, cols) seen as one (rows, cols) matrix, its batch's rows one after the
    other (the caller checked that they are): same memory, same array kind."""
    shape = (rows, info.shape[-1])
    strides = (row_step(_merged(info, "x")[1], info) if len(info.shape) > 2 else info.strides[-2], info.strides[-1])
    if info.kind == "torch":
        return x.as_strided(shape, (strides[0] // info.itemsize, strides[1] // info.itemsize))
    if _SIM:  # (a reshape could copy: a view of the same host memory)
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(np.lib.stride_tricks.as_strided(x._ary, shape, strides))
    if info.kind == "cupy":
        import cupy

        return cupy.lib.stride_tricks.as_strided(x, shape, strides)
    return numba_view(info._replace(shape=shape, strides=strides), x)


def unfold(r, shape: tuple):
    """A fresh (rows, N) result seen as the batch's (batch..., M, N)."""
    return r.view(shape) if lib_of(r) == "torch" else r.reshape(shape)


def check_batch_options(bt: Batch, *, c, beta, epilogue, epilogue_args, bias, scale_a, scale_b, config) -> None:
    """What a batched call refuses (module text), each a :class:`~nbwgmma.errors.MatmulError`."""
    if c is not None and bt.folds and bt.count > 1 and len(getattr(c, "shape", ())) == 2:
        raise MatmulError(f"matmul: a batch of A times a 2-D B is one product of all the rows: its c has the output's "
                          f"shape {bt.lead + (bt.a.shape[0], bt.b.shape[1])}, not one matrix for every product; got "
                          f"{tuple(c.shape)}")
    if (epilogue is not None or epilogue_args) and bt.folds and bt.count > 1:
        raise MatmulError("matmul: an epilogue function with a batch of A over a 2-D B is not built so far (its "
                          "rows would be those of all the products; give B a batch too)")
    for name, s in (("scale_a", scale_a), ("scale_b", scale_b)):
        if s is not None and getattr(s, "shape", ()) not in ((), (1,)):
            raise MatmulError(f"matmul: {name}: a batch of products takes per-tensor fp8 scales so far; got an array "
                              f"of shape {tuple(s.shape)}")
    if bias is not None and bt.folds and bt.count > 1:
        shape = tuple(getattr(bias, "shape", ()))
        m, n = bt.a.shape[0], bt.b.shape[1]
        if shape not in ((n,), (1, n)):
            raise MatmulError(f"matmul: a batch of A times a 2-D B takes a bias per column, shape ({n},) or (1, {n}); "
                              f"got {shape}" + (" (a bias per row of each product: give B a batch too)"
                                                if shape == (m, 1) else ""))
    if isinstance(config, dict) and not bt.folds:
        bad = sorted(key for key, plain in (("split", 1), ("stream_k", 0), ("cluster_k", 1), ("swap", 0))
                     if key in config and config[key] != plain)
        if bad:
            raise MatmulError(f"matmul: config {({key: config[key] for key in bad})}: a batch of products runs without "
                              f"split, stream_k or cluster_k, unswapped")


def _output(lib, a, out, bt: Batch, odt, device, written: bool) -> tuple:
    """(out, its description, one matrix of it, bytes from one to the next): the given ``out``
    (shape (batch..., M, N); ``written`` by the kernel: its matrices where TMA can write them) or
    a new one (rows 16 bytes apart, as TMA stores need: a view of the first N columns where N's
    row is not a multiple of 16 bytes, as ``torch._grouped_mm`` pads its outputs)."""
    m, n = bt.a.shape[0], bt.b.shape[1]
    want = bt.lead + (m, n)
    if out is None:
        out = empty_rows16(lib, a, want, odt)
    io = described(out, "out")
    if io.shape != want:
        raise MatmulError(f"matmul: out must have shape {want}; got {io.shape}")
    if io.device != device:
        raise MatmulError(f"matmul: out is on device {io.device}, A on device {device}")
    _, so, _ = _merged(io, "out")
    one = io._replace(shape=(m, n), strides=io.strides[-2:])
    if written and batched_view(tma_view(one, m, n, *one.strides), bt.count, so, io.itemsize) is None:
        # stored from the registers (slower than through TMA, which needs 16-byte aligned rows): each
        # element once, so the matrices must not interleave
        lo, hi = one.byte_range()
        if isinstance(so, tuple) or (bt.count > 1 and so < hi - lo) \
                or any(st == 0 and d > 1 for st, d in zip(one.strides, one.shape)):
            raise MatmulError(f"matmul: a batch's out must hold its matrices and their elements apart (no zero "
                              f"strides), their batch in one stride; got out of shape {io.shape}, strides "
                              f"{io.strides} bytes (a copy of it, or out=None)")
    return out, io, one, so


_PLANS: dict = {}


def forget_batched_plans() -> None:
    """Drop the batched calls' plans (:func:`nbwgmma.frontend.matmul.forget_plans`)."""
    _PLANS.clear()


def _batch_c(c, beta, bt: Batch, device, raw16=False):
    """``(C as the kernel reads it: (description of a (count, M, N) view, owner), or None; beta)``
    of a batched call: ``c`` of the output's shape (its batch in one stride) or (M, N), added to
    every product (``torch.baddbmm``'s broadcast)."""
    m, n = bt.a.shape[0], bt.b.shape[1]
    info, beta = check_c(c, beta, m, n, device, shapes=(bt.lead + (m, n), (m, n)), raw_f16=raw16)
    if info is None:
        return None, beta
    _, sc, _ = _merged(info, "c") if len(info.shape) > 2 else (bt.count, 0, ())
    if isinstance(sc, tuple):
        raise MatmulError(f"matmul: c's batch dimensions must merge into one stride; got strides {info.strides} bytes "
                          f"for shape {info.shape}")
    return (info._replace(shape=(bt.count, m, n), strides=(sc,) + info.strides[-2:]), c), beta


def batched_matmul(a, ia, b, ib, bt: Batch, *, out, out_dtype, in_dtype, scale_a, scale_b, alpha, bias, activation,
                   c, beta, scale_out, amax, stream, config, epilogue=None, epilogue_args=()):
    """``a @ b`` for batched A and B (:func:`batch_of`'s ``bt``, both with a batch): one launch.
    Returns (out, the plan or None where nothing was launched, one matrix of out, the bias as
    the kernel reads it or None)."""
    io = described(out, "out") if out is not None else None  # (check_call reads its type)
    one_a, one_b, kind, fp8, auto, opts, odt, raw16 = check_call(
        bt.a, bt.b, io, in_dtype=in_dtype, out_dtype=out_dtype, scale_a=scale_a, scale_b=scale_b,
        config=None if config == "auto" else config, autotune_default=False)
    (m, k), n = one_a.shape, one_b.shape[1]
    lib = lib_of(a)
    fresh = out is None
    out, io, one_o, so = _output(lib, a, out, bt, odt, ia.device, written=m * n * k * bt.count > 0)
    if not holds(io.dtype, odt):
        raise MatmulTypeError(f"matmul: out must have type {odt}; got {io.dtype}")
    if not fresh:
        check_apart(io, ((("A", ia), ("B", ib)) if m and n and k else ()) + arrays_among(
            (("bias", bias), ("amax", amax), *((f"epilogue_args[{i}]", x) for i, x in enumerate(
                epilogue_args if isinstance(epilogue_args, (tuple, list)) else ())))))
    st = stream_of(lib, stream)
    alpha = real_arg(alpha, "alpha")
    epi, vec, fp8_out = {}, None, (1.0, None)
    cb, beta = _batch_c(c, beta, bt, ia.device, raw16)
    if m == 0 or n == 0 or bt.count == 0:  # an empty output: nothing runs, but the options are checked
        check_fp8_out(odt, scale_out, amax, ia.device)
        user_epilogue(epilogue, epilogue_args, m, n, ia.device)
        check_epilogue(activation, described(bias, "bias") if bias is not None else None, m, n, ia.device)
        return out, None, one_o, None
    scale, iamax = check_fp8_out(odt, scale_out, amax, ia.device)
    if k == 0:
        if cb is not None or bias is not None or activation is not None or epilogue is not None or epilogue_args:
            # the epilogue over a product of zeros of K = 16 (the value a K = 0 product has)
            za, zb = zero_operands(lib, a, ia.shape, ib.shape[:-2] if bt.sb is not None else (), n, one_a.dtype,
                                   one_b.dtype)
            iza, izb = array_info(za), array_info(zb)
            return batched_matmul(za, iza, zb, izb, batch_of(iza, izb), out=out, out_dtype=odt,
                                  in_dtype=(one_a.dtype, one_b.dtype) if in_dtype is not None else None,
                                  scale_a=scale_a, scale_b=scale_b, alpha=alpha, bias=bias, activation=activation, c=c,
                                  beta=beta, scale_out=scale_out, amax=amax, stream=stream, config=None,
                                  epilogue=epilogue, epilogue_args=epilogue_args)
        zero_fill_batch(out, io, st)
        return out, None, one_o, None
    # your function (value, row, col, *extras): row and col inside the product, the extras as a plain call's
    ufn, kinds, infos = user_epilogue(epilogue, epilogue_args, m, n, ia.device)
    own = st if stream is not None else None
    extras = tuple(float(x) if info is None else bias_operand(x, info, own) for x, info in zip(epilogue_args, infos))
    if ufn is not None:
        epi["user"] = ufn
    if kinds:
        epi["extras"] = tuple((kd, "f32" if kd == "scalar" else x[0].dtype) for kd, x in zip(kinds, extras))
    if bias is not None or activation is not None:
        bi = described(bias, "bias") if bias is not None else None
        where = check_epilogue(activation, bi, m, n, ia.device)
        vec = bias_operand(bias, bi, st if stream is not None else None) if bi is not None else None
        epi.update({key: v for key, v in (("bias", where), ("act", activation)) if v is not None})
        if vec is not None:
            epi["bias_type"] = vec[0].dtype
    if iamax is not None:
        epi["amax"] = True
    if cb is not None and not fresh:  # (C as the kernel reads it: a C added to every product has batch stride 0)
        check_c_apart(cb[0], io._replace(shape=(bt.count,) + one_o.shape, strides=(so,) + one_o.strides))
    fp8_out = (scale, None if iamax is None else (iamax, amax))
    alpha = float(alpha) * scale_product(scale_a, scale_b)
    scaled = fp8 or alpha != 1.0
    batch = (bt.count, bt.sa or 0, bt.sb or 0, so)  # (a 2-D operand: one matrix for every product, 0 bytes apart)
    key = (kind, odt, one_a.shape, one_a.strides, ia.ptr % 16, one_b.shape, one_b.strides, ib.ptr % 16,
           one_o.strides, io.ptr % 16, ia.device, tuple(sorted(opts.items())), tuple(sorted(epi.items())), scaled,
           batch, None if cb is None else (cb[0].dtype, cb[0].strides))
    plan = _PLANS.get(key)
    if plan is None:
        plan = Plan(kind, odt, one_a, one_b, one_o, {**opts, **epi}, scaled, None if cb is None else cb[0],
                    batch=batch)
        if len(_PLANS) >= 256:
            _PLANS.clear()
        _PLANS[key] = plan
    try:
        plan(a, one_a._replace(ptr=ia.ptr), b, one_b._replace(ptr=ib.ptr), out, one_o, alpha, st, vec, cb, beta,
             extras, *fp8_out)
    except NumbaError as e:  # your function does not compile in the kernel: nothing was launched
        if ufn is None:
            raise
        raise epilogue_error(ufn, kinds, e) from e
    return out, plan, one_o, vec


def zero_fill_batch(out, io: ArrayInfo, stream) -> None:
    """Zeros into every matrix of a batched ``out`` (a K = 0 product)."""
    count, so, _ = _merged(io, "out")
    if _SIM:  # (the simulator's arrays are host memory)
        out._ary[...] = 0
        return
    one = io._replace(shape=io.shape[-2:], strides=io.strides[-2:])
    (d0, s0), (d1, s1) = batch_dims(count, so)
    for j in range(count):
        zero_fill(one._replace(ptr=io.ptr + j // d1 * s0 + j % d1 * s1), out, stream)
