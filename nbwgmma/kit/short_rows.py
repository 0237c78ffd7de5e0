"""Tiles taller than the problem: load only the rows M has.

A decoding product (1 to 64 tokens) in tiles of 128 rows loads A in boxes of 128 rows, the
rows past M arriving as zeros. TMA writes the whole box into shared memory all the same, and an
SM's TMA moves a bounded number of bytes a second, padding included. On an H200, 56 CTAs
streaming a 7168 x 7168 fp8 weight in 128 x 128 boxes took 16.1 us alone and 27.5 us with a
128-row box of a 16-row A beside each one (``benchmarks/tma_stream.py``). So the map of
such an operand takes a box of :func:`box_rows` rows (M rounded up to a swizzle atom of 8 rows),
the stage's barrier expects only those bytes, and the slot's rows past the box are cleared once
(:func:`clear_rows`) and stay zero: no load ever writes them, and a zero row adds nothing to any
sum::

    ar = box_rows(m, 128)                        # host: A's map box (ar, 128)
    ...
    ar = box_rows_device(m, 128)                 # in the kernel: the same
    full = pipe.producer_acquire(ring, s, ph, ar * 128 + B_BYTES)       # the producer, per stage
    ...
    clear_rows(base, STAGE, STAGES, 128, max(ar, 64 * cw), 64 * cw + 64, ct, 128)  # each consumer its rows,
    warpgroup_sync(cw)                                                  # before its first wait

With :func:`~nbwgmma.kit.tile_producer`, ``stage_tx`` gives the stage's bytes. Where only some
tiles are short (a grouped GEMM's groups of few rows), the producer picks per tile with
:func:`short_map`.
"""

from __future__ import annotations

from numba import cuda

from ..intrinsics import fence_proxy_async_shared, st_shared_v4_b32

__all__ = ["box_rows", "box_rows_device", "clear_rows", "short_map"]


def box_rows(m: int, rows: int) -> int:
    """Rows of a TMA box for an operand of ``m`` rows in tiles of ``rows`` (128 or 256): ``rows``
    where M fills a tile, else M rounded up to 8 (a 128-byte swizzle atom). The
    kernel's: :func:`box_rows_device`, the same function compiled for ``@cuda.jit`` code (the
    host's map and the kernel's expected bytes must agree, or the stage never completes)."""
    return rows if m >= rows else max(8, (m + 7) // 8 * 8)


#: :func:`box_rows` as a device function
box_rows_device = cuda.jit(device=True, inline=True)(box_rows)


@cuda.jit(device=True, inline=True)
def clear_rows(base, stage_bytes, stages, row_bytes, r0, r1, t, nt):
    """Zero rows ``r0`` to ``r1 - 1`` (``row_bytes`` each, a multiple of 16) of the slot at
    ``base`` in each of ``stages`` stages ``stage_bytes`` apart, the ``nt`` threads sharing the
    16-byte stores (this one's index ``t``), then ``fence.proxy.async`` so that wgmma and TMA see
    the zeros. The threads that read the rows next must sync with these (a named barrier) first."""
    first = r0 * row_bytes
    span = max(0, r1 - r0) * row_bytes
    for st in range(stages):
        at = base + st * stage_bytes + first
        for i in range(t * 16, span, nt * 16):
            st_shared_v4_b32(at + i, 0, 0, 0, 0)
    fence_proxy_async_shared()


@cuda.jit(device=True, inline=True)
def short_map(short, tmap, tmap_short, stage_bytes, rows, short_rows, row_bytes):
    """``(map, bytes)`` of a producer's tile: with ``short`` (the tile holds at most
    ``short_rows`` rows of its operand) the map whose box has ``short_rows`` rows and the stage's
    ``stage_bytes`` less the ``rows - short_rows`` rows (``row_bytes`` each) it leaves out; else
    ``tmap`` and ``stage_bytes``."""
    if short:
        return tmap_short, stage_bytes - (rows - short_rows) * row_bytes
    return tmap, stage_bytes
