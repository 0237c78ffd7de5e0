"""wgmma register fragments: unrolled fragment operations.

Value ``i`` of warpgroup thread ``t`` sits where :func:`nbwgmma.layout.acc_value_coords`
says (the PTX ISA's "Register Fragments" figures, modelled in :mod:`nbwgmma.layout.fragment`).

A fragment is a ``UniTuple`` that must stay in registers: indexing it with a
run-time index would move it to local memory. The operations here therefore
unroll their per-register loops while generating code, so the compiled kernel
only ever uses constant indices.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils

from .. import backend
from ..layout.kinds import WGMMA_KINDS, WgmmaKind
from .errors import NbwgmmaLiteralError, NbwgmmaTypingError, checked_intrinsic

__all__ = [
    "acc_zeros",
    "acc_undef",
    "acc_store",
    "acc_scale",
    "acc_add",
    "acc_to_bf16x2",
    "acc_to_f16x2",
]


def literal_arg(ty, what, name):
    if isinstance(ty, types.Literal):
        return ty.literal_value
    raise NbwgmmaLiteralError(f"{name}: argument '{what}' must be a compile-time constant; got {ty}")


def _kind(kind_v, name) -> WgmmaKind:
    """The wgmma kind named by a literal; an unknown one is a typing error of ``name``."""
    k = WGMMA_KINDS.get(kind_v)
    if k is None:
        raise NbwgmmaTypingError(f"{name}: unknown wgmma type combination {kind_v!r}; expected one of "
                                 f"{', '.join(WGMMA_KINDS)}")
    return k


def check_int_args(name, **args):
    """Run-time integer arguments (addresses, thread indices): a float is refused, not truncated."""
    for nm, ty in args.items():
        if not isinstance(ty, types.Integer):
            raise NbwgmmaTypingError(f"{name}: '{nm}' must be an integer; got {ty}")


def _const_acc(name, fill):
    def make(typingctx, kind, n):
        kind_v = literal_arg(kind, "kind", name)
        n_v = literal_arg(n, "n", name)
        k = _kind(kind_v, name)
        if n_v not in k.n_values:
            raise NbwgmmaTypingError(f"{name}: {kind_v} allows N in {list(k.n_values)}; got {n_v}")
        tupty = types.UniTuple(k.acc_type, k.acc_regs(n_v))

        def codegen(context, builder, sig, args):
            llty = context.get_value_type(tupty)
            if fill is None:
                return ir.Constant(llty, ir.Undefined)
            return cgutils.pack_array(builder, [context.get_constant(k.acc_type, fill)] * tupty.count)

        return tupty(kind, n), codegen

    make.__name__ = make.__qualname__ = name  # (help() and reprs name the helper, not "make")
    make.__doc__ = None
    return checked_intrinsic(make, prefer_literal=True)


acc_zeros = _const_acc("acc_zeros", 0)
acc_zeros.__doc__ = "``acc_zeros(kind, n)``: a zeroed accumulator fragment for ``kind`` and ``N`` (literals)."
acc_undef = _const_acc("acc_undef", None)
acc_undef.__doc__ = (
    "``acc_undef(kind, n)``: an uninitialized accumulator fragment; pair it with "
    "``scale_d=0`` on the first wgmma so nothing is read from it."
)


def acc_kind_of(kind_ty, acc_ty, name):
    kind_v = literal_arg(kind_ty, "kind", name)
    k = _kind(kind_v, name)
    if not (isinstance(acc_ty, types.UniTuple) and acc_ty.dtype == k.acc_type):
        raise NbwgmmaTypingError(f"{name}: expected a {kind_v} accumulator (tuple of {k.acc_type}); got {acc_ty}")
    n = k.n_of(acc_ty.count)
    if n not in k.n_values:
        raise NbwgmmaTypingError(f"{name}: {acc_ty.count} registers is no legal N for {kind_v}")
    return k, n


def _values(builder, k, acc, count):
    """The accumulator's scalar values (f16 halves unpacked), in value order.

    Numba holds a float16 as an i16, so the halves are returned as i16 bits
    typed ``float16``.
    """
    vals = [builder.extract_value(acc, i) for i in range(count)]
    if k.dtype != "f16":
        return vals, k.acc_type
    out = []
    vec = ir.VectorType(ir.IntType(16), 2)
    for v in vals:
        h = builder.bitcast(v, vec)
        out += [builder.extract_element(h, ir.Constant(ir.IntType(32), 0)),
                builder.extract_element(h, ir.Constant(ir.IntType(32), 1))]
    return out, types.float16


def ir_value_coords(builder, tid, ity, count):
    """(row, col) IR values of the ``count`` accumulator values of warpgroup thread ``tid``
    (an IR integer of type ``ity``): :func:`nbwgmma.layout.acc_value_coords` with the per-value offsets
    folded to constants, so no fragment register is ever indexed at run time."""
    warp = builder.udiv(tid, ity(32))
    lane = builder.urem(tid, ity(32))
    rbase = builder.add(builder.mul(warp, ity(16)), builder.udiv(lane, ity(4)))
    cbase = builder.mul(builder.urem(lane, ity(4)), ity(2))
    for i in range(count):
        yield (builder.add(rbase, ity(8 * ((i // 2) % 2))),
               builder.add(cbase, ity(8 * (i // 4) + i % 2)))


def _f32_to_bf16_bits(builder, v):
    fnty = ir.FunctionType(ir.IntType(16), [ir.FloatType()])
    asm = ir.InlineAsm(fnty, "cvt.rn.bf16.f32 $0, $1;", "=h,f")
    return builder.call(asm, [v])


def cvt_pair(builder, op, lo, hi, bits=32):
    """``cvt.<op>.f32`` of two f32 values into one ``bits``-bit register, ``lo`` in the low half
    (the instruction puts its first source in the upper half; PTX ISA: cvt)."""
    fnty = ir.FunctionType(ir.IntType(bits), [ir.FloatType(), ir.FloatType()])
    asm = ir.InlineAsm(fnty, f"cvt.{op}.f32 $0, $1, $2;", "=r,f,f" if bits == 32 else "=h,f,f")
    return builder.call(asm, [hi, lo])


def _check_tile_args(name, arr, arrname, tid, row0, col0):
    """Typing rules shared by the fragment <-> 2-D array moves."""
    if not (isinstance(arr, types.Array) and arr.ndim == 2):
        raise NbwgmmaTypingError(f"{name}: '{arrname}' must be a 2-D array; got {arr}")
    for nm, ty in (("tid", tid), ("row0", row0), ("col0", col0)):
        if not isinstance(ty, types.Integer):
            raise NbwgmmaTypingError(f"{name}: '{nm}' must be an integer; got {ty}")


def _clipped_access(context, builder, sig, args, count, one, pair):
    """Visit the ``count`` values of warpgroup thread ``args[3]`` at ``arr[row0 + row, col0 + col]``
    (``args[2:6]`` = arr, tid, row0, col0), skipping elements outside the array. Values ``i`` and
    ``i + 1`` (i even) are row neighbours. Where all of the thread's values lie inside, the
    array's rows are contiguous and every pair's address is aligned to the pair's size (tested
    once), ``pair(i, ptr)`` moves each pair at once (``ptr`` a pointer to a 2-element vector) with
    no test per element; otherwise ``one(i, ptr)`` is called per element inside."""
    i64 = ir.IntType(64)
    tid_, r0, c0 = (context.cast(builder, args[j], sig.args[j], types.int64) for j in (3, 4, 5))
    arrty = sig.args[2]
    ary = context.make_array(arrty)(context, builder, args[2])
    shape = cgutils.unpack_tuple(builder, ary.shape, 2)
    strides = cgutils.unpack_tuple(builder, ary.strides, 2)
    coords = [(builder.add(r0, dr), builder.add(c0, dc)) for dr, dc in ir_value_coords(builder, tid_, i64, count)]

    def item(r, c):
        return cgutils.get_item_pointer2(context, builder, data=ary.data, shape=shape, strides=strides,
                                         layout=arrty.layout, inds=[r, c])

    def clipped():
        for i, (r, c) in enumerate(coords):
            inside = builder.and_(builder.icmp_signed("<", r, shape[0]), builder.icmp_signed("<", c, shape[1]))
            with builder.if_then(inside, likely=True):
                one(i, item(r, c))

    if arrty.layout != "C" or count % 4:
        clipped()
        return
    esize = context.get_abi_sizeof(context.get_data_type(arrty.dtype))
    vptr_ty = ir.VectorType(context.get_data_type(arrty.dtype), 2).as_pointer()
    addr = builder.ptrtoint(ary.data, i64)
    low = builder.or_(builder.or_(addr, strides[0]), builder.mul(c0, ir.Constant(i64, esize)))
    fast = builder.icmp_unsigned("==", builder.and_(low, ir.Constant(i64, 2 * esize - 1)), ir.Constant(i64, 0))
    lo_r, lo_c = coords[0]
    hi_r, hi_c = coords[2][0], coords[count - 1][1]  # the thread's last row and column
    for v, lim in ((lo_r, None), (lo_c, None), (hi_r, shape[0]), (hi_c, shape[1])):
        if lim is None:  # no negative index takes the fast path
            fast = builder.and_(fast, builder.icmp_signed(">=", v, ir.Constant(i64, 0)))
        else:
            fast = builder.and_(fast, builder.icmp_signed("<", v, lim))
    with builder.if_else(fast, likely=True) as (whole, parts):
        with whole:
            for i in range(0, count, 2):
                pair(i, builder.bitcast(item(*coords[i]), vptr_ty))
        with parts:
            clipped()


@checked_intrinsic(prefer_literal=True)
def acc_store(typingctx, acc, kind, out, tid, row0, col0):
    """``acc_store(acc, kind, out, tid, row0, col0)``: write the fragment into the 2-D array
    ``out`` (global or shared) at ``out[row0 + row, col0 + col]``, skipping elements outside
    ``out``. ``tid`` is the thread's index in its warpgroup (0..127). Values are converted to
    ``out``'s dtype; a ``uint16`` array receives bf16 bits (round to nearest even)."""
    k, n = acc_kind_of(kind, acc, "acc_store")
    _check_tile_args("acc_store", out, "out", tid, row0, col0)

    def codegen(context, builder, sig, args):
        vals, vty = _values(builder, k, args[0], sig.args[0].count)
        dt = sig.args[2].dtype

        def conv(v):
            if dt == types.uint16 and vty == types.float32:
                return _f32_to_bf16_bits(builder, v)
            return v if dt == vty else context.cast(builder, v, vty, dt)

        def one(i, ptr):
            builder.store(conv(vals[i]), ptr)

        def pair(i, vptr):
            if vty == types.float32 and dt in (types.uint16, types.float16):  # one cvt packs both
                packed = cvt_pair(builder, "rn.bf16x2" if dt == types.uint16 else "rn.f16x2", vals[i], vals[i + 1])
                builder.store(packed, builder.bitcast(vptr, ir.IntType(32).as_pointer()), align=4)
                return
            vec = ir.Constant(vptr.type.pointee, ir.Undefined)
            for j in (0, 1):
                vec = builder.insert_element(vec, conv(vals[i + j]), ir.Constant(ir.IntType(32), j))
            builder.store(vec, vptr, align=2 * context.get_abi_sizeof(vptr.type.pointee.element))

        _clipped_access(context, builder, sig, args, len(vals), one, pair)
        return context.get_dummy_value()

    return types.void(acc, kind, out, tid, row0, col0), codegen


#: fp8 formats :func:`acc_store_fp8` writes.
FP8_FORMATS = ("e4m3", "e5m2")


@checked_intrinsic(prefer_literal=True)
def acc_store_fp8(typingctx, acc, kind, out, tid, row0, col0, fmt):
    """``acc_store_fp8(acc, kind, out, tid, row0, col0, fmt)``: write an f32 fragment into the
    2-D ``uint8`` array ``out`` as fp8 codes of ``fmt`` ("e4m3" or "e5m2", a literal) at
    ``out[row0 + row, col0 + col]``, skipping elements outside ``out``: round to nearest even
    and saturate to the largest finite value (NaN stays NaN), two values per ``cvt.rn.satfinite
    .e4m3x2.f32`` (PTX ISA 8.x, "cvt": the f32 -> f8x2 form, sm_89+). As :func:`acc_store`,
    row neighbours go out as one 16-bit store where the rows are contiguous and aligned."""
    k, n = acc_kind_of(kind, acc, "acc_store_fp8")
    _check_tile_args("acc_store_fp8", out, "out", tid, row0, col0)
    fmt_v = literal_arg(fmt, "fmt", "acc_store_fp8")
    if fmt_v not in FP8_FORMATS:
        raise NbwgmmaTypingError(f"acc_store_fp8: fmt must be one of {list(FP8_FORMATS)}; got {fmt_v!r}")
    if k.acc_type != types.float32:
        raise NbwgmmaTypingError(f"acc_store_fp8: expected an f32 accumulator fragment; got {kind.literal_value}")
    if out.dtype != types.uint8:
        raise NbwgmmaTypingError(f"acc_store_fp8: 'out' must be a uint8 array (fp8 codes); got {out}")

    def codegen(context, builder, sig, args):
        vals, _ = _values(builder, k, args[0], sig.args[0].count)
        op = f"rn.satfinite.{fmt_v}x2"
        zero = ir.Constant(ir.FloatType(), 0.0)

        def one(i, ptr):  # the code of value i in the low byte
            builder.store(builder.trunc(cvt_pair(builder, op, vals[i], zero, 16), ir.IntType(8)), ptr)

        def pair(i, vptr):  # value i in the low byte, at the lower address
            packed = cvt_pair(builder, op, vals[i], vals[i + 1], 16)
            builder.store(packed, builder.bitcast(vptr, ir.IntType(16).as_pointer()), align=2)

        _clipped_access(context, builder, sig, args, len(vals), one, pair)
        return context.get_dummy_value()

    return types.void(acc, kind, out, tid, row0, col0, fmt), codegen


def _map_acc(name, op):
    @checked_intrinsic(prefer_literal=True, name=name)
    def fn(typingctx, acc, other):
        if not (isinstance(acc, types.UniTuple) and acc.dtype in (types.float32, types.int32)):
            raise NbwgmmaTypingError(f"{name}: expected an f32 or s32 accumulator tuple; got {acc}")
        tuple_other = isinstance(other, types.UniTuple)
        if tuple_other and other != acc:
            raise NbwgmmaTypingError(f"{name}: both fragments must have the same type; got {acc} and {other}")
        if not tuple_other and not isinstance(other, (types.Number, types.Literal)):
            raise NbwgmmaTypingError(f"{name}: expected a fragment or a scalar; got {other}")

        def codegen(context, builder, sig, args):
            a, b = args
            dt = sig.args[0].dtype
            outs = []
            for i in range(sig.args[0].count):
                x = builder.extract_value(a, i)
                y = builder.extract_value(b, i) if tuple_other else context.cast(builder, b, sig.args[1], dt)
                outs.append(op(builder, x, y, dt))
            return cgutils.pack_array(builder, outs)

        return acc(acc, other), codegen

    return fn


def _add(builder, x, y, dt):
    return builder.fadd(x, y) if dt == types.float32 else builder.add(x, y)


def _mul(builder, x, y, dt):
    return builder.fmul(x, y) if dt == types.float32 else builder.mul(x, y)


acc_add = _map_acc("acc_add", _add)
acc_add.__doc__ = "``acc_add(acc, other)``: elementwise sum with a fragment of the same type or a scalar."
acc_scale = _map_acc("acc_scale", _mul)
acc_scale.__doc__ = "``acc_scale(acc, s)``: elementwise product with a scalar or a fragment."


def _pack16(name, op):
    @checked_intrinsic(name=name)
    def fn(typingctx, acc):
        if not (isinstance(acc, types.UniTuple) and acc.dtype == types.float32 and acc.count % 2 == 0):
            raise NbwgmmaTypingError(f"{name}: expected an f32 accumulator tuple; got {acc}")
        outty = types.UniTuple(types.uint32, acc.count // 2)

        def codegen(context, builder, sig, args):
            (a,) = args
            outs = [cvt_pair(builder, op, builder.extract_value(a, 2 * j), builder.extract_value(a, 2 * j + 1))
                    for j in range(outty.count)]
            return cgutils.pack_array(builder, outs)

        return outty(acc), codegen

    return fn


acc_to_bf16x2 = _pack16("acc_to_bf16x2", "rn.bf16x2")
acc_to_bf16x2.__doc__ = (
    "``acc_to_bf16x2(acc)``: ``cvt.rn.bf16x2.f32`` (PTX ISA: cvt) over an f32 fragment of n values, "
    "n / 2 uint32 out: values 2j and 2j+1 (adjacent "
    "columns) packed into u32 register j, low half first. The result is the A-register "
    "layout for a following RS wgmma and the input of ``stmatrix``."
)
acc_to_f16x2 = _pack16("acc_to_f16x2", "rn.f16x2")
acc_to_f16x2.__doc__ = ("``acc_to_f16x2(acc)``: ``cvt.rn.f16x2.f32`` (PTX ISA: cvt) over an f32 fragment, as "
                         ":func:`acc_to_bf16x2`.")


@checked_intrinsic(prefer_literal=True)
def acc_load(typingctx, kind, n, src, tid, row0, col0):
    """``acc = acc_load(kind, n, src, tid, row0, col0)``: an f32/s32 accumulator fragment read
    from the 2-D array ``src`` (global or shared) at ``src[row0 + row, col0 + col]`` in the
    accumulator layout (zeros outside ``src``): e.g. C for a ``beta * C`` epilogue, or known
    values for testing a store. The inverse of :func:`acc_store`: a ``uint16`` source holds
    bf16 bits."""
    kind_v = literal_arg(kind, "kind", "acc_load")
    n_v = literal_arg(n, "n", "acc_load")
    k = _kind(kind_v, "acc_load")
    if k.dtype == "f16":
        raise NbwgmmaTypingError("acc_load: expected an f32 or s32 accumulator kind; got f16")
    if n_v not in k.n_values:
        raise NbwgmmaTypingError(f"acc_load: {kind_v} allows N in {list(k.n_values)}; got {n_v}")
    _check_tile_args("acc_load", src, "src", tid, row0, col0)
    tupty = types.UniTuple(k.acc_type, k.acc_regs(n_v))

    def codegen(context, builder, sig, args):
        zero = context.get_constant(k.acc_type, 0)
        slots = [cgutils.alloca_once_value(builder, zero) for _ in range(tupty.count)]
        sdt = sig.args[2].dtype

        def conv(v):
            if sdt == types.uint16 and k.acc_type == types.float32:  # bf16 bits, as acc_store writes them
                return builder.bitcast(builder.shl(builder.zext(v, ir.IntType(32)), ir.Constant(ir.IntType(32), 16)),
                                       ir.FloatType())
            return context.cast(builder, v, sdt, k.acc_type)

        def one(i, ptr):
            builder.store(conv(builder.load(ptr)), slots[i])

        def pair(i, vptr):
            vec = builder.load(vptr, align=2 * context.get_abi_sizeof(vptr.type.pointee.element))
            for j in (0, 1):
                builder.store(conv(builder.extract_element(vec, ir.Constant(ir.IntType(32), j))), slots[i + j])

        _clipped_access(context, builder, sig, args, tupty.count, one, pair)
        return cgutils.pack_array(builder, [builder.load(sl) for sl in slots])

    return tupty(kind, n, src, tid, row0, col0), codegen


def _check_strided(name, acc, arr, start, stride):
    if not (isinstance(acc, types.UniTuple) and acc.dtype in (types.float32, types.int32)):
        raise NbwgmmaTypingError(f"{name}: expected an f32 or s32 accumulator tuple; got {acc}")
    if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == acc.dtype):
        raise NbwgmmaTypingError(f"{name}: expected a 1-D {acc.dtype} array; got {arr}")
    for nm, ty in (("start", start), ("stride", stride)):
        if not isinstance(ty, types.Integer):
            raise NbwgmmaTypingError(f"{name}: '{nm}' must be an integer; got {ty}")


def _strided_pointers(context, builder, sig, args, count):
    """Pointers to ``arr[start + i * stride]`` for i < count (``args[1:4]``), unchecked."""
    arr = context.make_array(sig.args[1])(context, builder, args[1])
    start, stride = (context.cast(builder, args[j], sig.args[j], types.int64) for j in (2, 3))
    i64 = ir.IntType(64)
    for i in range(count):
        idx = builder.add(start, builder.mul(stride, i64(i)))
        yield builder.gep(arr.data, [idx])


@checked_intrinsic
def acc_store_strided(typingctx, acc, out, start, stride):
    """``acc_store_strided(acc, out, start, stride)``: value ``i`` of this thread's fragment
    to ``out[start + i * stride]`` (a 1-D array of the accumulator's type, no bounds check).
    With ``start = block + tid`` and ``stride = 128`` a warpgroup writes its fragments as
    contiguous 128-byte rows: a scratch layout for values the same threads read back with
    :func:`acc_add_strided` (e.g. split-K partial tiles)."""
    _check_strided("acc_store_strided", acc, out, start, stride)

    def codegen(context, builder, sig, args):
        for i, ptr in enumerate(_strided_pointers(context, builder, sig, args, sig.args[0].count)):
            builder.store(builder.extract_value(args[0], i), ptr)
        return context.get_dummy_value()

    return types.void(acc, out, start, stride), codegen


@checked_intrinsic
def acc_add_strided(typingctx, acc, src, start, stride):
    """``acc = acc_add_strided(acc, src, start, stride)``: ``acc`` plus ``src[start + i * stride]``
    for each value ``i`` (the inverse layout of :func:`acc_store_strided`), one value at a
    time, so no second fragment's registers are live."""
    _check_strided("acc_add_strided", acc, src, start, stride)

    def codegen(context, builder, sig, args):
        dt = sig.args[0].dtype
        outs = [_add(builder, builder.extract_value(args[0], i), builder.load(ptr), dt)
                for i, ptr in enumerate(_strided_pointers(context, builder, sig, args, sig.args[0].count))]
        return cgutils.pack_array(builder, outs)

    return acc(acc, src, start, stride), codegen


__all__ += ["acc_load", "acc_store_strided", "acc_add_strided", "acc_store_fp8", "FP8_FORMATS"]

# In Numba's CUDA simulator the fragment operations are Python functions over the layout
# models, registered by nbwgmma.sim.
globals().update(backend.python_functions(__all__, globals()))
