"""An fp8 output's amax in the epilogue: the largest |value| of the unscaled output, in the
same pass (the recipe fp8 training uses for the next step's scale; no second kernel).

Each consumer warp keeps a running maximum in a shared-memory slot of its own; the kernel's
end raises the caller's one-element f32 ``amax`` to each warp's maximum with one atomic max::

    biggest = cuda.shared.array(NWARPS, np.float32)     # NWARPS: the consumer warps
    largest = acc_absmax(64)                            # built once, beside the kernel
    ...
    amax_start(biggest, t)                              # t: the thread's index among the consumers
    for each tile, each 64-column part ``y`` (f32, before the output scale):
        amax_note(largest(y, ct, row0, col0, m, n), biggest, t)
        ...                                             # scale, convert, store the part
    amax_flush(amax, biggest, t)                        # after the last tile

``amax`` must hold 0 before the launch (or a maximum to keep: the flush only raises it), as
for the library's ``matmul(..., amax=)``. The library GEMM's fp8 outputs use these blocks.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .device import inlined, select
from .typecheck import f32_array_check, fragment_check, wgmma_n

__all__ = ["acc_absmax", "amax_start", "amax_note", "amax_flush"]


def acc_absmax(width: int, masked: bool = True):
    """``largest(v, ct, row0, col0, m, n) -> f32``: the largest |value| of thread ``ct``'s part of
    a 64 x ``width`` f32 fragment ``v`` whose first value sits at (``row0``, ``col0``) of an M x N
    output, unrolled with constant indices (no local memory). ``masked``: among the values inside
    the output only (a tile's rows past M and columns past N hold results of padding: a bias, a
    function of zero); without branches (two code paths, inside the output or not, spilled: ptxas
    kept both paths' values), each value outside counts as zero, from one compare per row and per
    column of the thread. Unmasked, where the padding stays zero (no bias, no function that
    moves zero): all of them. ``width`` is a wgmma N (a multiple of 8 in [8, 256]; else a
    :class:`~nbwgmma.errors.KitError`); a fragment of another length than ``width / 2`` is a typing
    error at the call."""
    width = wgmma_n("acc_absmax", "width", width, ", the fragment's columns")
    lines = ["def largest(v, ct, row0, col0, m, n):", "    check(v)"]
    if masked:
        lines += ["    r = row0 + ((ct >> 5) << 4) + ((ct >> 2) & 7)",
                  "    c = col0 + ((ct & 3) << 1)",
                  "    r0 = r < m", "    r1 = r + 8 < m"]
        for dc in sorted({8 * (i // 4) + i % 2 for i in range(width // 2)}):
            lines.append(f"    c{dc} = c + {dc} < n")
    lines.append("    big = Z")
    for i in range(width // 2):  # (value i at row 8 * ((i // 2) % 2), column 8 * (i // 4) + i % 2 of the base)
        if masked:  # (a select, one statement: see kit.device.select)
            lines.append(f"    big = sel(r{(i // 2) % 2} & c{8 * (i // 4) + i % 2}, max(big, abs(v[{i}])), big)")
        else:
            lines.append(f"    big = max(big, abs(v[{i}]))")
    lines.append("    return big")
    ns = {"Z": np.float32(0.0), "sel": select, "check": fragment_check(f"acc_absmax({width})", width // 2, "v",
                                                       f"one thread's share of a 64 x {width} f32 fragment")}
    exec(compile("\n".join(lines), f"<nbwgmma.kit.acc_absmax({width})>", "exec"), ns)
    return inlined(ns["largest"])


@inlined
def amax_start(biggest, t):
    """Zero warp ``t // 32``'s running maximum ``biggest[t // 32]`` (its lane 0 alone reads and
    writes the slot), before the warp's first :func:`amax_note`."""
    if cuda.laneid == 0:
        biggest[t // 32] = np.float32(0.0)


@inlined
def amax_note(big, biggest, t):
    """Raise warp ``t // 32``'s running maximum ``biggest[t // 32]`` (shared memory) to the
    largest ``big`` of its threads (a shuffle reduction; every lane of the warp calls it)."""
    for off in (16, 8, 4, 2, 1):
        big = max(big, cuda.shfl_xor_sync(0xFFFFFFFF, big, off))
    if cuda.laneid == 0:
        biggest[t // 32] = max(biggest[t // 32], big)


_AMAX_IS_F32 = f32_array_check("amax_flush", "amax", "the output's amax, raised by an f32 atomic max")


@inlined
def amax_flush(amax, biggest, t):
    """Raise ``amax[0]`` (global f32: another type is a typing error) to warp ``t // 32``'s
    running maximum: one atomic max a warp, at the kernel's end."""
    _AMAX_IS_F32(amax)
    if cuda.laneid == 0:
        cuda.atomic.max(amax, 0, biggest[t // 32])
