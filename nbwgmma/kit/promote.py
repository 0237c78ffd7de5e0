"""Promotion: a block-scaled product's 128-K block, summed by the wgmma into a temporary
fragment, scaled and added into the f32 accumulator with one fused multiply-add per value, in
registers (:class:`~nbwgmma.kit.BlockScaled`'s consumers; the guide, "Block-scaled fp8").
:func:`acc_promote` takes a scale per row of the thread; :func:`acc_promote_cols` also one per
128-column block of B's scales, for tiles whose columns span several blocks.
"""

from __future__ import annotations

import math

from ..errors import KitError, is_int
from .device import inlined
from .typecheck import wgmma_n

__all__ = ["acc_promote", "acc_promote_cols"]

_PROMOTES: dict = {}


def acc_promote(n: int):
    """A device function ``(acc, tmp, s0, s1) -> acc + tmp * s`` over the 64 x ``n`` f32
    fragments of one thread, ``s`` being ``s0`` on the thread's first row (``lr``) and ``s1``
    on its second (``lr + 8``): the promotion of a block whose scale depends on the row (pass
    ``s0 == s1`` for one scale per tile). Unrolled with constant indices (no local memory);
    each value costs one fused multiply-add."""
    n = wgmma_n("acc_promote", "n", n)
    fn = _PROMOTES.get(n)
    if fn is None:
        # value i sits on row lr + 8 * ((i // 2) % 2) (the D fragment of m64nNk*)
        body = ", ".join(f"acc[{i}] + tmp[{i}] * s{(i // 2) % 2}" for i in range(n // 2))
        ns: dict = {}
        exec(compile(f"def promote(acc, tmp, s0, s1):\n    return ({body},)\n", f"<nbwgmma.kit.acc_promote({n})>",
                     "exec"), ns)
        fn = _PROMOTES[n] = inlined(ns["promote"])
    return fn


_SPANS: dict = {}


def acc_promote_cols(n: int):
    """A device function ``(acc, tmp, a0, a1, b0, b1, b2, off) -> acc + tmp * a * b`` over the 64
    x ``n`` f32 fragments of one thread whose columns start ``off`` columns into a 128-column scale
    block (``off`` a multiple of ``gcd(n, 128)`` below 128, as for tiles ``n`` wide): ``a`` is
    ``a0`` on the thread's first row and ``a1`` on its second; ``b`` is ``b0``, ``b1`` or ``b2``,
    the scale of the block the value's column lies in (a tile up to 256 columns wide spans three).
    Each possible ``off`` has its own branch (uniform: no select per value) that names, for each
    8-column group of the tile, the product ``a * b`` of the block its columns lie in (``q{g}{r}``
    for group ``g`` and row ``r``: moves of six products, about 40 a call at 176 columns once
    ptxas has shared them out); one unrolled body then takes one fused multiply-add per value,
    as :func:`acc_promote`. (A whole unrolled body per offset, which ptxas merged into the same
    code, took Numba about four times as long to compile.)"""
    if not is_int(n) or n % 16 or not 16 <= n <= 256:
        raise KitError(f"acc_promote_cols: n must be a multiple of 16 in [16, 256]; got {n!r}")
    n = int(n)
    fn = _SPANS.get(n)
    if fn is None:
        groups = n // 8  # value i: row lr + 8 * ((i // 2) % 2), column 8 * (i // 4) + (0 .. 7)

        def case(off, pad):
            return [pad + f"q{g}{r} = p{r}{(off + 8 * g) >> 7}" for g in range(groups) for r in (0, 1)]

        def tree(offs, pad):  # a binary search over the offsets, one case at each leaf
            if len(offs) == 1:
                return case(offs[0], pad)
            mid = offs[len(offs) // 2]
            return [pad + f"if off < {mid}:"] + tree(offs[:len(offs) // 2], pad + "    ") \
                + [pad + "else:"] + tree(offs[len(offs) // 2:], pad + "    ")
        lines = ["def promote(acc, tmp, a0, a1, b0, b1, b2, off):"]
        lines += [f"    p{r}{j} = a{r} * b{j}" for r in (0, 1) for j in (0, 1, 2)]
        lines += tree(list(range(0, 128, math.gcd(n, 128))), "    ")
        lines.append("    return (" + ", ".join(f"acc[{i}] + tmp[{i}] * q{i // 4}{(i // 2) % 2}"
                                               for i in range(n // 2)) + ",)")
        ns: dict = {}
        exec(compile("\n".join(lines), f"<nbwgmma.kit.acc_promote_cols({n})>", "exec"), ns)
        fn = _SPANS[n] = inlined(ns["promote"])
    return fn
