"""Reductions over an accumulator fragment's rows or columns, in registers, unrolled at compile time.

What Triton writes ``tl.max(acc, axis=1)`` or ``tl.sum(acc, axis=0)``: a row's maximum and
sum of exponentials (softmax statistics, a cross-entropy's log-sum-exp over the vocabulary
without writing the logits), a row's sum of squares (an RMS norm of the output), a column's
sum (a bias gradient). Thread ``t`` of a warpgroup holds two rows of a 64 x N fragment, rows
``lr = 16 * (t // 32) + (t % 32) // 4`` and ``lr + 8``, and ``N / 4`` columns, ``2 * (t % 4) +
8 * (k // 2) + k % 2`` (the layout :mod:`~nbwgmma.kit.epilogue` describes), so:

* a row is whole within the four lanes of a quad: :func:`acc_row_reduce` reduces each of the
  thread's rows over its values, then across the quad (two shuffles a row), and every lane of
  the quad gets the pair ``(lo, hi)``: rows ``lr`` and ``lr + 8`` of the fragment;
* a column spreads over all 64 rows: :func:`acc_col_reduce` reduces over the thread's two rows,
  then across the eight lanes of the warp that share its columns (three shuffles a column),
  and gives the warp's result for its 16 rows; the four warps (and the consumer warpgroups)
  are combined by the kernel, through shared memory or one atomic per column and warp.

Columns past ``ncols`` (rows past ``nrows``) are padding, read as zeros by TMA and moved by any
bias or function: ``masked`` (the default) counts each of them as the operation's identity
(``-inf`` for max, ``+inf`` for min, 0 for sum) by selects, from one compare per column (row) of
the thread (a row reduction of a fragment wholly inside C branches to a path without them).
``fn(value, row, col, *pair_values, *extra)`` maps each value before it is reduced, as
:func:`~nbwgmma.kit.acc_map` does (``exp(v - row_max)``), padding included (its result then
unused: a function that reads an array at ``row`` or ``col`` must stay inside it there too);
``pairs`` row pairs that a row reduction returned (the row's maximum) reach it as the value of
the element's row. The fragment must hold f32 values (an s32 accumulator: map it with
``acc_map(..., dtype="f32")`` first; a typing error otherwise)::

    row_max = acc_row_reduce("max", 256)
    row_sumexp = acc_row_reduce("sum", 256, fn=lambda v, r, c, mx: math.exp(v - mx), pairs=1)
    ...
    mx = row_max(acc, ct, row0, col0, n)               # (lo, hi): rows lr and lr + 8
    se = row_sumexp(acc, ct, row0, col0, n, mx)
    pair_store(mx, tile_max[tn, row0:m], ct)           # one lane of each quad writes its rows
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from ..errors import KitError, is_int
from .device import device_function, inlined, select
from .typecheck import count_check, fragment_check, number_check, store_vector_check, wgmma_n

__all__ = ["acc_row_reduce", "acc_col_reduce", "pair_store", "pair_atomic", "PAIR_ATOMICS", "REDUCE_OPS"]

#: operation -> (the two-operand expression, its identity)
_OPS = {"max": ("max({}, {})", -math.inf), "min": ("min({}, {})", math.inf), "sum": ("{} + {}", 0.0),
        "argmax": (">", -math.inf), "argmin": ("<", math.inf)}  # (arg ops: the comparison that takes a value)
REDUCE_OPS = tuple(_OPS)


def _common(what: str, op, n, fn, pairs: int, nextra: int, masked):
    """Checked ``(n, fn, pairs, nextra)`` of a reduction builder; a :class:`KitError` naming ``what``."""
    if op not in _OPS:
        raise KitError(f"{what}: op must be one of {REDUCE_OPS}; got {op!r}")
    n = wgmma_n(what, "n", n, ", the fragment's columns")
    for name, count in (("pairs", pairs), ("nextra", nextra)):
        if not is_int(count) or not 0 <= count <= 8:
            raise KitError(f"{what}: {name} must be an integer in [0, 8]; got {count!r}")
    if (pairs or nextra) and fn is None:
        given = f"pairs={pairs} and nextra={nextra} count" if pairs else f"nextra={nextra} counts"
        raise KitError(f"{what}: {given} arguments for fn; without fn there is none to give them to")
    if fn is not None:
        fn = device_function(what, fn, 3 + pairs + nextra, f"(value, row, col{', a row pair value' * pairs}"
                             f"{', an extra' * nextra}) for pairs={pairs}, nextra={nextra}")
    if not isinstance(masked, bool):
        raise KitError(f"{what}: masked must be True or False; got {masked!r}")
    return n, fn, int(pairs), int(nextra)


def _build(name: str, lines: list, ns: dict, what: str):
    exec(compile("\n".join(lines), f"<nbwgmma.kit.{what}>", "exec"), ns)
    return inlined(ns[name])


def acc_row_reduce(op: str, n: int, *, fn=None, pairs: int = 0, nextra: int = 0, masked: bool = True):
    """A device function ``(acc, tid, row0, col0, ncols, *pairs, *extra) -> (lo, hi)``: ``op``
    ("max", "min", "sum", or "argmax" / "argmin": the column in the output, an int32, of the
    row's largest / smallest value, the first on ties as NumPy's, -1 where every column is masked;
    unspecified where the row holds a NaN) over each row of a 64 x ``n`` f32 fragment of thread ``tid`` (0-127
    in its warpgroup) whose tile starts at (``row0``, ``col0``) of an output of ``ncols``
    columns: ``lo`` for the thread's row ``lr = 16 * (tid // 32) + (tid % 32) // 4`` of the
    fragment, ``hi`` for row ``lr + 8``; the four lanes of a quad (``tid // 4``) get the same
    pair. With ``fn`` each value is first mapped to ``fn(value, row, col, *pair_values,
    *extra)`` (``row``, ``col`` in the output); each of the ``pairs`` row pairs, ``(lo, hi)`` as
    this function returns, reaches ``fn`` as its value at the element's row. ``masked``: columns
    from ``ncols`` on count as ``op``'s identity (``fn`` maps them too, its result then unused: a
    select, not a branch), and a fragment wholly inside takes a path with no compare or select
    (one branch on ``col0 + n <= ncols``); unmasked, every value counts. Sums run in column order within a thread, then over the quad."""
    what = f"acc_row_reduce({op!r}, {n})"
    n, fn, pairs, nextra = _common(what, op, n, fn, pairs, nextra, masked)
    expr, ident = _OPS[op]
    arg = op.startswith("arg")
    lines = ["def reduce(acc, tid, row0, col0, ncols, *args):", "    check(acc)", "    count(args)"]
    for j in range(pairs):
        lines += [f"    p{j} = pair(args[{j}])", f"    p{j}_0 = F(p{j}[0])", f"    p{j}_1 = F(p{j}[1])"]
    lines += [f"    e{j} = args[{pairs + j}]" for j in range(nextra)]
    lines += ["    r = row0 + ((tid >> 5) << 4) + ((tid >> 2) & 7)", "    c = col0 + ((tid & 3) << 1)"]

    def body(mask: bool, pad: str) -> list:
        out = [f"{pad}c{dc} = c + {dc} < ncols" for dc in sorted({8 * (i // 4) + i % 2 for i in range(n // 2)})] \
            if mask else []
        out += [f"{pad}lo = I", f"{pad}hi = I"] + ([f"{pad}klo = NONE", f"{pad}khi = NONE"] if arg else [])
        for i in range(n // 2):  # value i: row lr + 8 * ((i // 2) % 2), column lc + 8 * (i // 4) + i % 2
            h, dc = (i // 2) % 2, 8 * (i // 4) + i % 2
            v = f"F(acc[{i}])"
            if fn is not None:  # mapped whether inside or not (a select, not a branch around fn)
                args = "".join(f", p{j}_{h}" for j in range(pairs)) + "".join(f", e{j}" for j in range(nextra))
                out.append(f"{pad}y{i} = F(one(fn({v}, r + {8 * h}, c + {dc}{args})))")
                v = f"y{i}"
            side = "hi" if h else "lo"
            if arg:  # taken where better, or the first inside: the first column of the best value
                inside = f"c{dc} and " if mask else ""
                out += [f"{pad}t = {inside}({v} {expr} {side} or k{side} < 0)",
                        f"{pad}{side} = {v} if t else {side}", f"{pad}k{side} = K(c + {dc}) if t else k{side}"]
                continue
            if mask:
                v = f"sel(c{dc}, {v}, I)"
            out.append(f"{pad}{side} = {expr.format(side, v)}")
        return out

    if masked:  # a fragment wholly inside (every tile but the last of a row) takes no compare or select
        lines += [f"    if col0 + {n} <= ncols:", *body(False, " " * 8), "    else:", *body(True, " " * 8)]
    else:
        lines += body(False, " " * 4)
    for off in (1, 2):  # the quad's four lanes hold the row's columns
        for side in ("lo", "hi"):
            if arg:  # the other lane's pick where it has one and it is better, or as good at a lower column
                lines += [f"    ob = cuda.shfl_xor_sync(FULL, {side}, {off})",
                          f"    ok = cuda.shfl_xor_sync(FULL, k{side}, {off})",
                          f"    t = ok >= 0 and (k{side} < 0 or ob {expr} {side} or (ob == {side} and ok < k{side}))",
                          f"    {side} = ob if t else {side}", f"    k{side} = ok if t else k{side}"]
            else:
                lines.append(f"    {side} = {expr.format(side, f'cuda.shfl_xor_sync(FULL, {side}, {off})')}")
    lines.append("    return klo, khi" if arg else "    return lo, hi")
    ns = {"F": np.float32, "I": np.float32(ident), "K": np.int32, "NONE": np.int32(-1), "FULL": 0xFFFFFFFF,
          "cuda": cuda, "fn": fn, "sel": select,
          "check": fragment_check(what, n // 2, element="f32"),
          "count": count_check(what, None, None, nextra, pairs=pairs, head="(acc, tid, row0, col0, ncols)"),
          "pair": fragment_check(what, 2, "a row pair", "(lo, hi) as acc_row_reduce returns it", element="number"),
          "one": number_check(what)}
    return _build("reduce", lines, ns, what)


def acc_col_reduce(op: str, n: int, *, fn=None, nextra: int = 0, masked: bool = True):
    """A device function ``(acc, tid, row0, col0, nrows, *extra) -> tuple`` of ``n / 4`` values:
    ``op`` ("max", "min" or "sum") over the 16 rows of thread ``tid``'s warp (``tid`` 0-127 in
    its warpgroup) of each column the thread holds in a 64 x ``n`` f32 fragment whose tile
    starts at (``row0``, ``col0``) of an output of ``nrows`` rows: value ``k`` for fragment
    column ``2 * (tid % 4) + 8 * (k // 2) + k % 2`` (the order of :func:`~nbwgmma.kit.col_values`);
    the eight lanes of the warp with the same ``tid % 4`` get the same values. The fragment's
    column is the sum (maximum, ...) of the four warps' values: combine them, and those of the
    kernel's other warpgroups and tiles, through shared memory or atomics (lanes 0-3 of each
    warp hold all its columns). ``fn(value, row, col, *extra)`` maps each value first;
    ``masked``: rows from ``nrows`` on count as ``op``'s identity."""
    what = f"acc_col_reduce({op!r}, {n})"
    if op in ("argmax", "argmin"):
        raise KitError(f"{what}: {op} is a row reduction only (acc_row_reduce); columns take max, min or sum")
    n, fn, _, nextra = _common(what, op, n, fn, 0, nextra, masked)
    expr, ident = _OPS[op]
    lines = ["def reduce(acc, tid, row0, col0, nrows, *args):", "    check(acc)", "    count(args)"]
    lines += [f"    e{j} = args[{j}]" for j in range(nextra)]
    lines += ["    r = row0 + ((tid >> 5) << 4) + ((tid >> 2) & 7)", "    c = col0 + ((tid & 3) << 1)"]
    if masked:
        lines += ["    r0 = r < nrows", "    r1 = r + 8 < nrows"]
    for k in range(n // 4):  # column k: values 4 * (k // 2) + k % 2 (row lr) and that + 2 (row lr + 8)
        dc = 8 * (k // 2) + k % 2
        parts = []
        for h in (0, 1):
            i = 4 * (k // 2) + k % 2 + 2 * h
            v = f"F(acc[{i}])"
            if fn is not None:  # mapped whether inside or not (a select, not a branch around fn)
                lines.append(f"    y{i} = F(one(fn({v}, r + {8 * h}, c + {dc}"
                             f"{''.join(f', e{j}' for j in range(nextra))})))")
                v = f"y{i}"
            parts.append(f"sel(r{h}, {v}, I)" if masked else v)
        lines.append(f"    x{k} = {expr.format(*parts)}")
        for off in (4, 8, 16):  # the warp's eight lanes of these columns hold its 16 rows
            lines.append(f"    x{k} = {expr.format(f'x{k}', f'cuda.shfl_xor_sync(FULL, x{k}, {off})')}")
    lines.append("    return (" + "".join(f"x{k}, " for k in range(n // 4)) + ")")
    ns = {"F": np.float32, "I": np.float32(ident), "FULL": 0xFFFFFFFF, "cuda": cuda, "fn": fn, "sel": select,
          "check": fragment_check(what, n // 2, element="f32"),
          "count": count_check(what, None, None, nextra, head="(acc, tid, row0, col0, nrows)"),
          "one": number_check(what)}
    return _build("reduce", lines, ns, what)


_PAIR = fragment_check("pair_store", 2, "the pair", "(lo, hi) as acc_row_reduce returns it", element="number")
_VEC = store_vector_check("pair_store")


@inlined
def pair_store(pair, vec, tid):
    """Store a row pair ``(lo, hi)`` (:func:`acc_row_reduce`'s result) of thread ``tid`` (0-127 in
    its warpgroup) into ``vec``, a 1-D array whose element 0 is the fragment's first row (the
    slice ``out[row0:m]``, its length bounding the rows): lane ``tid % 4 == 0`` of each quad writes
    its rows ``lr = 16 * (tid // 32) + (tid % 32) // 4`` and ``lr + 8`` where they lie inside
    ``vec``; the other three lanes, which hold the same pair, write nothing. ``vec`` must be 1-D
    (a column of a 2-D array, ``scales[row0:m, g]``, is: its stride is kept),
    and hold floats for a pair of floats (a typing error otherwise); the values are converted to
    its element type (f32 into an f64 workspace, say)."""
    p = _PAIR(pair)
    _VEC((p, vec))
    if tid & 3 == 0:
        lr = ((tid >> 5) << 4) + ((tid >> 2) & 7)
        if lr < len(vec):
            vec[lr] = p[0]
        if lr + 8 < len(vec):
            vec[lr + 8] = p[1]


#: The atomic operations :func:`pair_atomic` takes.
PAIR_ATOMICS = ("add", "max", "min")


def pair_atomic(op: str):
    """The device function ``(pair, vec, tid)`` of :func:`pair_store` with ``cuda.atomic.<op>`` in
    place of the store (``op`` "add", "max" or "min"): each tile's row results combined in a
    per-row vector that several tiles (CTAs) share, one atomic a row (lane ``tid % 4 == 0`` of
    each quad), no second pass. ``vec`` starts as the operation's identity (0 for "add", -inf for
    "max", +inf for "min": fill it before the launch). Max and min are exact and the same in any
    order; a float sum's rounding depends on the order the tiles come in."""
    if op not in PAIR_ATOMICS:
        raise KitError(f"pair_atomic: op must be one of {PAIR_ATOMICS}; got {op!r}")
    what = f"pair_atomic({op!r})"
    pair_check = fragment_check(what, 2, "the pair", "(lo, hi) as acc_row_reduce returns it", element="number")
    vec_check = store_vector_check(what)
    # cuda.atomic named in the function's own text: Numba's simulator has it only inside kernels
    src = f"""def combine(pair, vec, tid):
    p = pair_check(pair)
    vec_check((p, vec))
    if tid & 3 == 0:
        lr = ((tid >> 5) << 4) + ((tid >> 2) & 7)
        if lr < len(vec):
            cuda.atomic.{op}(vec, lr, p[0])
        if lr + 8 < len(vec):
            cuda.atomic.{op}(vec, lr + 8, p[1])
"""
    ns = {"cuda": cuda, "pair_check": pair_check, "vec_check": vec_check}
    exec(compile(src, f"<nbwgmma.kit.{what}>", "exec"), ns)
    return inlined(ns["combine"])
