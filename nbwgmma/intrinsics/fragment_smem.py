"""Accumulator fragments into shared memory, in the layouts TMA stores read.

:func:`acc_store_swizzled` (32-bit values), :func:`acc_stmatrix_swizzled` (packed 16-bit
pairs, ``stmatrix``) and :func:`acc_store_fp8_swizzled` (fp8 codes in pairs) write a 64 x N
fragment as column blocks of 64 rows, with a swizzle applied: each block is what a TMA store
with a box of 64 rows and that swizzle reads (:func:`nbwgmma.layout.tile_block_offset` is the
host model of the layout).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types

from .. import backend
from ..layout.descriptor import SWIZZLE_BYTES, SWIZZLE_MASK
from ..layout.fragment import EXCHANGE_QUAD
from .errors import NbwgmmaTypingError, checked_intrinsic
from .fragment import FP8_FORMATS, acc_kind_of, check_int_args, cvt_pair, ir_value_coords, literal_arg

__all__: list = []


@checked_intrinsic(prefer_literal=True)
def acc_store_swizzled(typingctx, acc, kind, base, tid, row_bytes, swizzle):
    """``acc_store_swizzled(acc, kind, base, tid, row_bytes, swizzle)``: write a 32-bit
    accumulator (f32 or s32) into shared memory as column blocks of ``row_bytes // 4``
    columns, each block 64 rows of ``row_bytes`` bytes, with the ``swizzle`` address map
    applied: the layout a TMA store with a (64, row_bytes // 4) box and that swizzle reads.
    ``base`` (a 32-bit shared address) must be aligned to the swizzle period.
    Row neighbours (a thread's values at columns 2j and 2j + 1) go as one ``st.shared.v2.b32``
    (PTX ISA: st): 8 bytes that a swizzle, which moves 16-byte chunks, keeps together."""
    k, n = acc_kind_of(kind, acc, "acc_store_swizzled")
    check_int_args("acc_store_swizzled", base=base, tid=tid)
    if k.dtype == "f16":
        raise NbwgmmaTypingError("acc_store_swizzled: expected an f32 or s32 accumulator; got f16")
    rb = literal_arg(row_bytes, "row_bytes", "acc_store_swizzled")
    sw = literal_arg(swizzle, "swizzle", "acc_store_swizzled")
    if sw not in SWIZZLE_MASK:
        raise NbwgmmaTypingError(f"acc_store_swizzled: swizzle must be one of {tuple(SWIZZLE_MASK)}; got {sw!r}")
    if rb % 16 or not 16 <= rb <= 4 * n:
        raise NbwgmmaTypingError(f"acc_store_swizzled: row_bytes must be a multiple of 16 in [16, {4 * n}]; got {rb}")
    cpb = rb // 4
    mask = SWIZZLE_MASK[sw]

    def codegen(context, builder, sig, args):
        acc_v, _, base_v, tid_v = args[:4]
        i32 = ir.IntType(32)
        base_ = context.cast(builder, base_v, sig.args[2], types.uint32)
        t = context.cast(builder, tid_v, sig.args[3], types.uint32)
        fnty = ir.FunctionType(ir.VoidType(), [i32, i32, i32])
        st = ir.InlineAsm(fnty, "st.shared.v2.b32 [$0], {$1, $2};", "r,r,r,~{memory}", side_effect=True)
        count = sig.args[0].count

        def bits(i):
            v = builder.extract_value(acc_v, i)
            return builder.bitcast(v, i32) if k.dtype == "f32" else v

        for i, (r, c) in enumerate(ir_value_coords(builder, t, i32, count)):
            if i % 2:
                continue  # value i + 1 is the next column of the same row: stored with value i
            blk = builder.udiv(c, i32(cpb))
            cc = builder.urem(c, i32(cpb))
            off = builder.add(builder.mul(blk, i32(64 * rb)),
                              builder.add(builder.mul(r, i32(rb)), builder.mul(cc, i32(4))))
            if mask:
                x = builder.shl(builder.and_(builder.lshr(off, i32(7)), i32(mask)), i32(4))
                off = builder.xor(off, x)
            builder.call(st, [builder.add(base_, off), bits(i), bits(i + 1)])
        return context.get_dummy_value()

    return types.void(acc, kind, base, tid, row_bytes, swizzle), codegen


__all__ += ["acc_store_swizzled"]


@checked_intrinsic(prefer_literal=True)
def acc_store_fp8_swizzled(typingctx, acc, base, tid, row_bytes, swizzle, fmt):
    """``acc_store_fp8_swizzled(acc, base, tid, row_bytes, swizzle, fmt)``: write an f32
    accumulator into shared memory as fp8 codes of ``fmt`` ("e4m3" or "e5m2"), in column blocks
    of ``row_bytes`` columns (one byte each), each block 64 rows of ``row_bytes`` bytes with the
    ``swizzle`` address map applied: the layout a TMA store of a one-byte tensor with a (64,
    row_bytes) box and that swizzle reads. Row neighbours go as one ``cvt.rn.satfinite.<fmt>x2
    .f32`` (round to nearest even, saturated to the largest finite value; PTX ISA: cvt) and one
    ``st.shared.b16`` (PTX ISA: st). ``base`` (a 32-bit shared address) must be aligned to the
    swizzle period."""
    if not (isinstance(acc, types.UniTuple) and acc.dtype == types.float32 and acc.count % 4 == 0):
        raise NbwgmmaTypingError(f"acc_store_fp8_swizzled: expected an f32 accumulator fragment; got {acc}")
    check_int_args("acc_store_fp8_swizzled", base=base, tid=tid)
    n = acc.count * 2
    rb = literal_arg(row_bytes, "row_bytes", "acc_store_fp8_swizzled")
    sw = literal_arg(swizzle, "swizzle", "acc_store_fp8_swizzled")
    fmt_v = literal_arg(fmt, "fmt", "acc_store_fp8_swizzled")
    if fmt_v not in FP8_FORMATS:
        raise NbwgmmaTypingError(f"acc_store_fp8_swizzled: fmt must be one of {list(FP8_FORMATS)}; got {fmt_v!r}")
    if sw not in SWIZZLE_MASK:
        raise NbwgmmaTypingError(f"acc_store_fp8_swizzled: swizzle must be one of {tuple(SWIZZLE_MASK)}; got {sw!r}")
    if rb % 16 or not 16 <= rb <= n or (sw != "none" and rb > SWIZZLE_BYTES[sw]):
        raise NbwgmmaTypingError(f"acc_store_fp8_swizzled: row_bytes must be a multiple of 16 in [16, {n}] and at "
                                 f"most the swizzle's span; got {rb} with {sw}")
    mask = SWIZZLE_MASK[sw]
    op = f"rn.satfinite.{fmt_v}x2"

    def codegen(context, builder, sig, args):
        acc_v, base_v, tid_v = args[:3]
        i32 = ir.IntType(32)
        base_ = context.cast(builder, base_v, sig.args[1], types.uint32)
        t = context.cast(builder, tid_v, sig.args[2], types.uint32)
        st = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [i32, ir.IntType(16)]), "st.shared.b16 [$0], $1;",
                          "r,h,~{memory}", side_effect=True)
        count = sig.args[0].count
        for i, (r, c) in enumerate(ir_value_coords(builder, t, i32, count)):
            if i % 2:
                continue  # value i + 1 is the next column of the same row: one 16-bit store for both
            blk = builder.udiv(c, i32(rb))
            off = builder.add(builder.mul(blk, i32(64 * rb)), builder.add(builder.mul(r, i32(rb)),
                                                                          builder.urem(c, i32(rb))))
            if mask:
                off = builder.xor(off, builder.shl(builder.and_(builder.lshr(off, i32(7)), i32(mask)), i32(4)))
            packed = cvt_pair(builder, op, builder.extract_value(acc_v, i), builder.extract_value(acc_v, i + 1), 16)
            builder.call(st, [builder.add(base_, off), packed])
        return context.get_dummy_value()

    return types.void(acc, base, tid, row_bytes, swizzle, fmt), codegen


__all__ += ["acc_store_fp8_swizzled"]


def _stmatrix_asm(count, trans=""):
    """``stmatrix.sync.aligned.m8n8.x{count}{trans}.shared::cta.b16 [addr], {regs}`` as inline asm."""
    regs = ", ".join(f"${i + 1}" for i in range(count))
    return ir.InlineAsm(ir.FunctionType(ir.VoidType(), [ir.IntType(32)] * (count + 1)),
                        f"stmatrix.sync.aligned.m8n8.x{count}{trans}.shared::cta.b16 [$0], {{{regs}}};",
                        ",".join(["r"] * (count + 1)) + ",~{memory}", side_effect=True)


@checked_intrinsic(prefer_literal=True)
def acc_stmatrix_swizzled(typingctx, regs, base, tid, row_bytes, swizzle):
    """``acc_stmatrix_swizzled(regs, base, tid, row_bytes, swizzle)``: store a 16-bit
    accumulator (``regs``: the ``N/4`` packed u32 registers of :func:`acc_to_bf16x2` or
    :func:`acc_to_f16x2`) into shared memory with ``stmatrix.x4`` (PTX ISA: stmatrix), in
    the layout a TMA store with a (64, row_bytes // 2) box and ``swizzle`` reads: column
    blocks of ``row_bytes // 2`` columns, each 64 rows of ``row_bytes`` bytes, swizzled.

    Why stmatrix fits: packed register ``j`` of lane ``l`` holds row ``l//4 + 8*(j%2)``,
    columns ``8*(j//2) + 2*(l%4) + {0,1}`` of its warp's 16 rows, which is the stmatrix lane
    map of an 8x8 matrix. Registers ``4q..4q+3`` are the four 8x8 matrices of columns
    ``16q..16q+15`` (top-left, bottom-left, top-right, bottom-right); lane ``l`` gives the
    address of row ``l % 8`` of matrix ``l // 8``. One instruction per 16 columns replaces
    eight scalar stores, and each 16-byte row lands whole (the swizzle moves 16-byte chunks).
    An N that is an odd multiple of 8 ends with one ``.x2``. With swizzle ``"none"`` and
    ``row_bytes`` = 2 N the tile is one block of whole rows for any N that is a multiple of 8
    (the TMA store of a narrow tile: one (64, N) box).
    ``base`` (a 32-bit shared address) must be aligned to the swizzle period.
    """
    if not (isinstance(regs, types.UniTuple) and regs.dtype == types.uint32 and regs.count % 2 == 0):
        raise NbwgmmaTypingError(
            f"acc_stmatrix_swizzled: 'regs' must be a tuple of 2*k u32 registers (acc_to_bf16x2 of an "
            f"accumulator); got {regs}")
    check_int_args("acc_stmatrix_swizzled", base=base, tid=tid)
    n = regs.count * 4
    rb = literal_arg(row_bytes, "row_bytes", "acc_stmatrix_swizzled")
    sw = literal_arg(swizzle, "swizzle", "acc_stmatrix_swizzled")
    if sw not in SWIZZLE_MASK:
        raise NbwgmmaTypingError(f"acc_stmatrix_swizzled: swizzle must be one of {tuple(SWIZZLE_MASK)}; got {sw!r}")
    # A whole unswizzled row (row_bytes = 2 N, a narrow tile's N any multiple of 8) never splits a
    # 16-column stmatrix between blocks; otherwise the blocks hold whole multiples of 16 columns.
    whole_row = sw == "none" and rb == 2 * n
    if not (whole_row or (rb % 32 == 0 and 32 <= rb <= max(32, 2 * n))):
        raise NbwgmmaTypingError(
            f"acc_stmatrix_swizzled: row_bytes must be a multiple of 32 in [32, {max(32, 2 * n)}], or 2 N = {2 * n} "
            f"(whole rows) with swizzle 'none'; got {rb}")
    if sw != "none" and rb > SWIZZLE_BYTES[sw]:
        raise NbwgmmaTypingError(
            f"acc_stmatrix_swizzled: a {sw} swizzled row holds at most {sw[:-1]} bytes; got row_bytes={rb}")
    cpb = rb // 2
    mask = SWIZZLE_MASK[sw]

    def codegen(context, builder, sig, args):
        regs_v, base_v, tid_v = args[:3]
        i32 = ir.IntType(32)
        base_ = context.cast(builder, base_v, sig.args[1], types.uint32)
        t = context.cast(builder, tid_v, sig.args[2], types.uint32)
        st4, st2 = _stmatrix_asm(4), _stmatrix_asm(2)
        lane = builder.urem(t, i32(32))
        # This lane's row: warp's 16 rows, matrix (lane // 8) % 2 picks the lower 8.
        row = builder.add(builder.mul(builder.udiv(t, i32(32)), i32(16)),
                          builder.add(builder.mul(builder.and_(builder.lshr(lane, i32(3)), i32(1)), i32(8)),
                                      builder.urem(lane, i32(8))))
        rowoff = builder.mul(row, i32(rb))
        # Matrices 2 and 3 sit 8 columns (16 bytes) further right.
        colhalf = builder.mul(builder.lshr(lane, i32(4)), i32(16))
        for q in range(-(-n // 16)):
            c0 = 16 * q
            width = min(4, regs.count - 4 * q)  # an odd last 8 columns: .x2 (lanes 0-15 give rows)
            blk, cc = divmod(c0, cpb)
            off = builder.add(builder.add(rowoff, colhalf), i32(blk * 64 * rb + cc * 2))
            if mask:
                x = builder.shl(builder.and_(builder.lshr(off, i32(7)), i32(mask)), i32(4))
                off = builder.xor(off, x)
            builder.call(st4 if width == 4 else st2,
                         [builder.add(base_, off)] + [builder.extract_value(regs_v, 4 * q + i) for i in range(width)])
        return context.get_dummy_value()

    return types.void(regs, base, tid, row_bytes, swizzle), codegen


__all__ += ["acc_stmatrix_swizzled"]

@checked_intrinsic
def acc_stmatrix_transposed(typingctx, regs, base, tid):
    """``acc_stmatrix_transposed(regs, base, tid)``: store a 16-bit accumulator (``regs``: the
    ``N/4`` packed u32 registers of :func:`acc_to_bf16x2` or :func:`acc_to_f16x2`, a multiple of
    two: N a multiple of 8) transposed into shared memory with ``stmatrix.x4.trans`` (PTX ISA:
    stmatrix; an odd last 8 columns with one ``.x2.trans``): column
    ``c`` of the warpgroup's 64 x N fragment becomes row ``c`` of an N x 64 tile, 128 bytes a
    row, with the 128-byte swizzle (the 16-byte chunk ``j`` of row ``c`` at chunk ``j ^ (c % 8)``):
    what a TMA store with a (N, 64) box and the 128-byte swizzle writes into the transpose of
    the output, e.g. ``out`` of ``x @ w.T`` where the kernel's D is ``out.T``.

    Registers ``4q..4q+3`` are the four 8x8 matrices of columns ``16q..16q+15`` (see
    :func:`acc_stmatrix_swizzled`); ``.trans`` stores each transposed, so row ``i`` of a stored
    matrix is its column ``i``: 8 rows of the fragment, one 16-byte chunk. The rows of an N x 64
    tile of any N that is a multiple of 8 follow the swizzle's 8-row period, so TMA boxes of
    8-row multiples read it (a swapped tile of 152 columns: parts of 80 and 72). ``base`` (a
    32-bit shared address) must be aligned to 1024 bytes."""
    if not (isinstance(regs, types.UniTuple) and regs.dtype == types.uint32 and regs.count % 2 == 0):
        raise NbwgmmaTypingError(
            f"acc_stmatrix_transposed: 'regs' must be a tuple of 2*k u32 registers (acc_to_bf16x2 of an "
            f"accumulator whose N is a multiple of 8); got {regs}")
    check_int_args("acc_stmatrix_transposed", base=base, tid=tid)

    def codegen(context, builder, sig, args):
        regs_v, base_v, tid_v = args
        i32 = ir.IntType(32)
        base_ = context.cast(builder, base_v, sig.args[1], types.uint32)
        t = context.cast(builder, tid_v, sig.args[2], types.uint32)
        st4, st2 = _stmatrix_asm(4, ".trans"), _stmatrix_asm(2, ".trans")
        lane = builder.urem(t, i32(32))
        mat = builder.lshr(lane, i32(3))  # the matrix this lane addresses: k = 0..3
        # Its stored row is fragment column 16q + 8 (k // 2) + lane % 8; its 8 rows start at
        # 16 * warp + 8 * (k % 2): chunk 2 * warp + k % 2 of the 128-byte row.
        col_in = builder.add(builder.mul(builder.lshr(mat, i32(1)), i32(8)), builder.urem(lane, i32(8)))
        chunk = builder.add(builder.mul(builder.udiv(t, i32(32)), i32(2)), builder.and_(mat, i32(1)))
        for q in range(-(-regs.count // 4)):
            width = min(4, regs.count - 4 * q)  # .x2: matrices 0 and 1 (lanes 0-15 give their rows)
            c = builder.add(col_in, i32(16 * q))
            sw = builder.xor(chunk, builder.urem(c, i32(8)))
            off = builder.add(builder.mul(c, i32(128)), builder.mul(sw, i32(16)))
            builder.call(st4 if width == 4 else st2,
                         [builder.add(base_, off)] + [builder.extract_value(regs_v, 4 * q + i) for i in range(width)])
        return context.get_dummy_value()

    return types.void(regs, base, tid), codegen


__all__ += ["acc_stmatrix_transposed"]


def _check_exchange(name, acc):
    if not (isinstance(acc, types.UniTuple) and acc.dtype == types.float32 and acc.count % 4 == 0):
        raise NbwgmmaTypingError(f"{name}: expected an f32 accumulator fragment (a multiple of 4 values); got {acc}")


@checked_intrinsic
def acc_send_cluster(typingctx, acc, base, bar, cta, tid):
    """``acc_send_cluster(acc, base, bar, cta, tid)``: send a warpgroup's f32 accumulator to CTA
    ``cta`` of the cluster: one ``st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32``
    (PTX ISA: st.async) per four values, into that CTA's shared memory at the offset of this
    CTA's address ``base`` (mapped with ``mapa``), each completing 16 bytes on that CTA's
    mbarrier at the offset of ``bar``. The layout is :func:`nbwgmma.layout.exchange_offset`'s
    (``tid``: the thread's index in its warpgroup, 0-127); ``base`` 16-byte aligned; the buffer holds
    ``4 * len(acc) * 128`` bytes, which the receiver expects on its barrier
    (``mbarrier_arrive_expect_tx``) and reads back with :func:`acc_add_shared` once the phase
    completed (a wait with ``scope="cluster"``: the transfers release at cluster scope). The
    registers are read when the stores issue: the accumulator may be overwritten at once."""
    _check_exchange("acc_send_cluster", acc)
    check_int_args("acc_send_cluster", base=base, bar=bar, cta=cta, tid=tid)

    def codegen(context, builder, sig, args):
        acc_v, base_v, bar_v, cta_v, tid_v = args
        i32, f32 = ir.IntType(32), ir.FloatType()
        b, r, c, t = (context.cast(builder, v, ty, types.uint32) for v, ty in zip(args[1:], sig.args[1:]))
        mapa = ir.InlineAsm(ir.FunctionType(i32, [i32, i32]), "mapa.shared::cluster.u32 $0, $1, $2;", "=r,r,r")
        dst = builder.call(mapa, [builder.add(b, builder.mul(t, i32(16))), c])
        rbar = builder.call(mapa, [r, c])
        for q in range(sig.args[0].count // 4):
            st = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [i32, f32, f32, f32, f32, i32]),
                              f"st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [$0+{q * EXCHANGE_QUAD}], "
                              "{$1, $2, $3, $4}, [$5];", "r,f,f,f,f,r,~{memory}", side_effect=True)
            builder.call(st, [dst] + [builder.extract_value(acc_v, 4 * q + i) for i in range(4)] + [rbar])
        return context.get_dummy_value()

    return types.void(acc, base, bar, cta, tid), codegen


@checked_intrinsic
def acc_add_shared(typingctx, acc, base, tid):
    """``acc_add_shared(acc, base, tid)``: ``acc`` plus the f32 fragment stored at the
    ``.shared::cta`` address ``base`` (16-byte aligned) in the layout of
    :func:`nbwgmma.layout.exchange_offset` (what
    :func:`acc_send_cluster` sends), one ``ld.shared.v4.f32`` (PTX ISA: ld) per four values."""
    _check_exchange("acc_add_shared", acc)
    check_int_args("acc_add_shared", base=base, tid=tid)

    def codegen(context, builder, sig, args):
        acc_v = args[0]
        i32, f32 = ir.IntType(32), ir.FloatType()
        b, t = (context.cast(builder, v, ty, types.uint32) for v, ty in zip(args[1:], sig.args[1:]))
        src = builder.add(b, builder.mul(t, i32(16)))
        v4 = ir.LiteralStructType([f32] * 4)
        out = acc_v
        for q in range(sig.args[0].count // 4):
            ld = ir.InlineAsm(ir.FunctionType(v4, [i32]), f"ld.shared.v4.f32 {{$0, $1, $2, $3}}, [$4+{q * EXCHANGE_QUAD}];",
                              "=f,=f,=f,=f,r,~{memory}", side_effect=True)
            got = builder.call(ld, [src])
            for i in range(4):
                j = 4 * q + i
                out = builder.insert_value(out, builder.fadd(builder.extract_value(acc_v, j),
                                                             builder.extract_value(got, i)), j)
        return out

    return acc(acc, base, tid), codegen


__all__ += ["acc_send_cluster", "acc_add_shared"]

# In Numba's CUDA simulator: the Python implementations it registered (nbwgmma.backend).
globals().update(backend.python_functions(__all__, globals()))
