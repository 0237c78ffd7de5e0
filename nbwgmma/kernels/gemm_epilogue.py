"""The library GEMM's epilogue pieces, generated per configuration: the fused epilogue of a part
(bias, activation, beta * C, a user function), a part's trip through shared memory to TMA stores (or
row by row), a 64-row block stored in parts, a tile's packed parts stored during the next tile's first
stages (the fp8 output's |value| maxima: :mod:`nbwgmma.kit.amax`).
:mod:`nbwgmma.kernels.gemm` builds its kernels from them."""

from __future__ import annotations

import numpy as np

from ..intrinsics import (
    acc_add, acc_load, acc_scale, acc_stmatrix_swizzled, acc_stmatrix_transposed, acc_store_fp8_swizzled,
    acc_store_swizzled, acc_to_bf16x2, acc_to_f16x2, bulk_commit_group, bulk_wait_group_read,
    fence_proxy_async_shared, tma_store_2d, tma_store_3d,
)
from ..kit.amax import acc_absmax, amax_note
from ..kit.device import inlined
from ..kit.epilogue import acc_map, activation, store_rows_part
from ..kit.warpgroup import warpgroup_sync

__all__ = ["fused_epilogue", "part_writers", "parts_hook", "parts_store"]


def fused_epilogue(cfg, width, pack, offset=None):
    """``epi(acc, ctid, row0, col0, ep) -> fragment`` of ``cfg``'s fused epilogue over a 64 x
    ``width`` fragment whose tile starts at (``row0``, ``col0``): ``user(act(v + beta * C + bias),
    row, col, *extras)`` per value (C's values read with ``acc_load``), packed into 16-bit pairs
    with ``pack`` (:func:`nbwgmma.kit.acc_map`); ``ep`` is (the bias, M, N, C, beta, the extras).
    With ``offset`` (a per-column bias only) ``ep[0]`` is instead the tuple of the thread's bias
    values for the whole tile (:func:`nbwgmma.kit.col_values`) and the fragment lies ``offset``
    columns into the tile."""
    bias, act = cfg.bias, cfg.act
    if (cfg.with_c or any(kind != "scalar" for kind, _ in cfg.extras)) and width > 64 and width % 64 == 0:
        # With C, 64 columns at a time: C's values, the bias's and the results of a whole part
        # beside the accumulator spilled (960 bytes for 128-column parts of a 128 x 256 tile with a
        # bias and gelu_tanh; 240 so; C alone none). 256-row tiles (two accumulators) with C and a
        # bias still spill 176-600 bytes in 32-column parts (16-column ones: more). So with a user
        # function's vectors (a bias, gelu_tanh and two vectors: 280 bytes in 128-column parts).
        assert offset is None  # (the bias is loaded per tile without C or a user function's vectors only)
        sub = fused_epilogue(cfg, 64, pack)
        parts = [f"sub(acc[{32 * j}:{32 * (j + 1)}], ctid, row0, col0 + {64 * j}, ep)" for j in range(width // 64)]
        ns = {"sub": sub}
        exec(compile(f"def epi(acc, ctid, row0, col0, ep):\n    return {' + '.join(parts)}\n",
                     "<nbwgmma.kernels.gemm epilogue by 64 columns>", "exec"), ns)
        return inlined(ns["epi"])
    # acc_map's extra arguments: per-column vectors, per-row vectors, scalars; each (name in the
    # value function, element type, its source in epi)
    vecs = {"col": [], "row": [], "scalar": []}
    if bias:
        vecs[bias].append(("b", cfg.bias_type, "vec"))
    for j, (kind, vtype) in enumerate(cfg.extras):
        vecs[kind].append((f"x{j}", vtype, f"xs[{j}]"))
    given = vecs["col"] + vecs["row"] + vecs["scalar"]
    v = "v + b" if bias else "v"
    if act:
        v = f"f({v})"
    if cfg.user is not None:  # (C's row and column as int64; swapped: the caller's are the kernel's column and row)
        where = "I(col), I(row)" if cfg.user_t else "I(row), I(col)"
        v = f"u({v}, {where}{''.join(f', x{j}' for j in range(len(cfg.extras)))})"
    src = [f"def value(v, row, col{''.join(', ' + name for name, _, _ in given)}):", f"    return {v}"]
    # (gelu_tanh on tanh.approx where the output is 16-bit or fp8: cuBLASLt's form, one MUFU and one
    # instruction less a value; the two-MUFU form, accurate to 5e-6 relative, for f32 outputs)
    ns = {"f": activation(act, cfg.out) if act else None, "u": cfg.user, "I": np.int64}
    exec(compile("\n".join(src), "<nbwgmma.kernels.gemm epilogue>", "exec"), ns)
    mapped = acc_map(inlined(ns["value"]), width, cols=len(vecs["col"]), rows=len(vecs["row"]),
                     nextra=len(vecs["scalar"]), pack=pack, vtype=tuple(t for _, t, _ in vecs["col"] + vecs["row"]),
                     loaded=offset is not None)
    # the tile's part of each vector, the scalars as they are
    args = [f"{x}[{offset // 4}:{(offset + width) // 4}]" if offset is not None else f"{x}[col0:n]"
            for _, _, x in vecs["col"]] + [f"{x}[row0:m]" for _, _, x in vecs["row"]] \
        + [x for _, _, x in vecs["scalar"]]
    src = ["def epi(acc, ctid, row0, col0, ep):", "    vec, m, n, cmat, beta, xs = ep[:6]"]
    if cfg.with_c:  # beta * C's part, added to the (scaled) product first
        src.append(f"    acc = acc_add(acc, acc_scale(acc_load('{cfg.kind}', {width}, cmat, ctid, row0, col0), beta))")
    src.append(f"    return mapped(acc, ctid, row0, col0{''.join(', ' + x for x in args)})")
    ns = {"mapped": mapped, "acc_add": acc_add, "acc_scale": acc_scale, "acc_load": acc_load}
    exec(compile("\n".join(src), "<nbwgmma.kernels.gemm epilogue parts>", "exec"), ns)
    return inlined(ns["epi"])


def part_writers(cfg):
    """``(put_part, packed, put_rows)`` of ``cfg``'s epilogue: ``put_part(regs, tmap_c, ctid, cw,
    row0, col0, cbase, first, ep)`` writes a part of a 64-row block (16-bit pairs, fp8 codes or f32
    values) into the consumer's shared tile at ``cbase`` (one of ``cfg.c_slots``) and hands it to TMA
    stores, after the stores of the part before have read it (``first``: a block's first part waits
    for all); ``packed(acc)`` the values as ``put_part`` takes them; ``put_rows`` the row-by-row
    epilogue's part (:func:`nbwgmma.kit.store_rows_part`)."""
    KIND, C_SLOTS, AMAX, C_T, C_BOX, BATCHED = cfg.kind, cfg.c_slots, cfg.amax, cfg.c_transposed, cfg.c_box, cfg.batched
    PART_COLS = cfg.c_widths[0]
    FP8_OUT, F32_OUT = cfg.fp8_out, cfg.f32_out
    FMT = cfg.out if FP8_OUT else "e4m3"
    VALUES = FP8_OUT or F32_OUT
    BF16_OUT = cfg.out == "bf16"
    SWIZZLED_C = C_BOX == 64
    ROW_BYTES_C = 2 * PART_COLS
    largest_part = acc_absmax(PART_COLS, not cfg.zero_padding) if AMAX else None

    if BATCHED:
        @inlined
        def store_box(smem, tmc, x, y):
            tma_store_3d(smem, tmc[0], x, y, tmc[1])
    else:
        @inlined
        def store_box(smem, tmc, x, y):
            tma_store_2d(smem, tmc, x, y)

    @inlined
    def put_part(regs, tmap_c, ctid, cw, row0, col0, cbase, first, ep):
        # The TMA stores must have read the part's shared tile before it is rewritten: a block's
        # first part waits for all (the block before went through the same tiles), the next
        # ones for all but the last (with two slots, the part before is in the other one).
        if ctid == 0:
            if first or C_SLOTS == 1:
                bulk_wait_group_read(0)
            else:
                bulk_wait_group_read(1)
        big = largest_part(regs, ctid, row0, col0, ep[1], ep[2]) if AMAX else 0.0  # (first: regs die at the store)
        warpgroup_sync(cw)
        if FP8_OUT:  # codes of 64 x 64 bytes per block, 64B-swizzled, blocks one after the other
            acc_store_fp8_swizzled(acc_scale(regs, ep[6]), cbase, ctid, 64, "64B", FMT)
        elif F32_OUT:  # 64 x 32 values per block, 128B-swizzled, blocks one after the other
            acc_store_swizzled(regs, KIND, cbase, ctid, 128, "128B")
        elif C_T:  # C^T's rows, 128 bytes each (the stored rows are C's columns)
            acc_stmatrix_transposed(regs, cbase, ctid)
        elif SWIZZLED_C:
            acc_stmatrix_swizzled(regs, cbase, ctid, 128, "128B")
        else:
            acc_stmatrix_swizzled(regs, cbase, ctid, ROW_BYTES_C, "none")
        # Generic-proxy writes of every thread become visible to the TMA unit.
        fence_proxy_async_shared()
        warpgroup_sync(cw)
        if ctid == 0:
            if FP8_OUT:
                for j in range(PART_COLS // 64):
                    store_box(cbase + j * 4096, tmap_c, col0 + j * 64, row0)
            elif F32_OUT:
                for j in range(PART_COLS // 32):
                    store_box(cbase + j * 8192, tmap_c, col0 + j * 32, row0)
            elif C_T:  # boxes of C_BOX rows of out (this part's width: 4 columns a register)
                for j in range(len(regs) * 4 // C_BOX):
                    store_box(cbase + j * 128 * C_BOX, tmap_c, row0, col0 + j * C_BOX)
            elif SWIZZLED_C:
                for j in range(PART_COLS // 64):
                    store_box(cbase + j * 8192, tmap_c, col0 + j * 64, row0)
            else:
                store_box(cbase, tmap_c, col0, row0)
            bulk_commit_group()
        if AMAX:
            amax_note(big, ep[7], ctid + 128 * cw)

    @inlined
    def packed(acc):
        if VALUES:
            return acc
        if BF16_OUT:
            return acc_to_bf16x2(acc)
        return acc_to_f16x2(acc)

    if BATCHED:  # (c: the 3-D out and the tile's product: its matrix)
        @inlined
        def put_rows(regs, c, ctid, cw, row0, col0, cbase, first, ep):
            store_rows_part(regs, cbase, ctid, cw, c[0][c[1]], row0, col0)
    else:
        @inlined
        def put_rows(regs, c, ctid, cw, row0, col0, cbase, first, ep):
            store_rows_part(regs, cbase, ctid, cw, c, row0, col0)

    return put_part, packed, put_rows


def _put_calls(widths, slot_bytes, slots, regs_of):
    """The ``put_part`` call of each part of a 64-row block (``widths`` columns each, part ``p``
    through the consumer's shared tile ``p % slots``), its registers ``regs_of(p, c0, w)`` (the
    part's first column ``c0``, its width ``w``): source text, one call a part."""
    calls, c0 = [], 0
    for p, w in enumerate(widths):
        calls.append(f"put_part({regs_of(p, c0, w)}, tmap_c, ctid, cw, row0, col0 + {c0}, "
                     f"cbase + {(p % slots) * slot_bytes}, {p == 0}, ep)")
        c0 += w
    return calls


def parts_hook(widths, slot_bytes, slots, put_part):
    """``hook(j, carry)`` (:meth:`nbwgmma.kit.Cooperative.beside`) storing part ``j`` (of
    ``widths`` columns) of a 64-row block's packed 16-bit pairs (4 columns a register) through
    the consumer's shared tile ``j % slots``; ``carry`` is (the packed registers, the block's row
    and column, whether it lies in C, ctid, cw, cbase, tmap_c, ep)."""
    lines = ["def hook(j, carry):", "    regs, row0, col0, live, ctid, cw, cbase, tmap_c, ep = carry", "    if live:"]
    calls = _put_calls(widths, slot_bytes, slots, lambda p, c0, w: f"regs[{c0 // 4}:{(c0 + w) // 4}]")
    for p, call in enumerate(calls):
        lines += [f"        if j == {p}:", f"            {call}"]
    ns = {"put_part": put_part}
    exec(compile("\n".join(lines), f"<nbwgmma.kernels.gemm store hook in {len(widths)} parts>", "exec"), ns)
    return inlined(ns["hook"])


def parts_store(widths, cols_per_reg, slot_bytes, slots, put_part, packed, epis=None):
    """The TMA epilogue's ``store(acc, tmap_c, ctid, cw, row0, col0, cbase, ep)`` of one 64-row
    block: its packed registers (``cols_per_reg`` columns each) in parts of ``widths`` columns,
    part ``p`` through the consumer's shared tile ``p % slots`` (the parts written out: a tuple's
    slices are static). With a fused epilogue (``epis``: one per part) each part's values are
    mapped and packed just before it goes."""
    lines = ["def store(acc, tmap_c, ctid, cw, row0, col0, cbase, ep):"]
    if epis is None:
        lines.append("    regs = packed(acc)")

    def regs_of(p, c0, w):
        if epis is None:
            return f"regs[{c0 // cols_per_reg}:{(c0 + w) // cols_per_reg}]"
        return f"epi{p}(acc[{c0 // 2}:{(c0 + w) // 2}], ctid, row0, col0 + {c0}, ep)"

    lines += [f"    {call}" for call in _put_calls(widths, slot_bytes, slots, regs_of)]
    ns = {"packed": packed, "put_part": put_part, **{f"epi{p}": e for p, e in enumerate(epis or ())}}
    exec(compile("\n".join(lines), f"<nbwgmma.kernels.gemm store in {len(widths)} parts>", "exec"), ns)
    return inlined(ns["store"])
