"""Where the values of wgmma's register fragments sit in their matrices: host-side models
(ints or numpy arrays) of the PTX ISA's fragment figures.

PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions:
Register Fragments" (figure "WGMMA .m64nNk16 register fragment layout for
accumulator matrix D"). For thread ``t`` of the warpgroup (warp ``w = t // 32``,
lane ``l = t % 32``) and accumulator value ``i`` (0 <= i < N/2)::

    row = 16*w + l//4 + 8*((i//2) % 2)
    col = 8*(i//4) + 2*(l % 4) + i % 2

An ``f32``/``s32`` accumulator holds value ``i`` in register ``i``; an ``f16``
accumulator packs values ``2j`` (low half) and ``2j+1`` (high half) in ``u32``
register ``j``. The same map holds for every K (k8, k16, k32, k256). The device-side
fragment operations (:mod:`nbwgmma.intrinsics.fragment`) follow these maps.
"""

from __future__ import annotations

import numpy as np

from ..errors import LayoutError
from .descriptor import SWIZZLE_MASK
from .kinds import wgmma_kind

__all__ = ["acc_value_coords", "acc_coords", "a_frag_coords", "tile_block_offset", "transposed_block_offset",
           "ldmatrix_lane_map", "EXCHANGE_QUAD", "exchange_offset"]


def acc_value_coords(t, i):
    """(row, col) of accumulator value ``i`` held by warpgroup thread ``t``."""
    w, lane = t // 32, t % 32
    return 16 * w + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2


def acc_coords(kind: str, n: int) -> np.ndarray:
    """Array ``[128, N/2, 2]``: (row, col) of every accumulator value of every thread.

    For ``f16`` accumulators value ``i`` sits in register ``i // 2``, half ``i % 2``.
    """
    k = wgmma_kind(kind)
    if n not in k.n_values:
        raise LayoutError(f"{kind} allows N in {list(k.n_values)}; got {n}")
    t = np.arange(128)[:, None]
    i = np.arange(n // 2)[None, :]
    r, c = acc_value_coords(t, i)
    return np.stack(np.broadcast_arrays(r, c), axis=-1)


def a_frag_coords(kind: str) -> np.ndarray:
    """Array ``[128, 4, E, 2]``: (row, k) of element ``e`` of A-fragment register ``j``.

    PTX ISA, "Register Fragments" (figure "WGMMA .m64nNkK register fragment
    layout for matrix A"): register ``j`` of thread ``t`` covers row
    ``16*w + l//4 + 8*(j%2)`` and K columns ``(j//2)*K/2 + (l%4)*E + e`` for the
    ``E = 32 / bits`` elements it packs (low bits first).
    """
    k = wgmma_kind(kind)
    e_per = 32 // k.input_bits
    t = np.arange(128)[:, None, None]
    j = np.arange(4)[None, :, None]
    e = np.arange(e_per)[None, None, :]
    w, lane = t // 32, t % 32
    row = 16 * w + lane // 4 + 8 * (j % 2)
    col = (j // 2) * (k.k // 2) + (lane % 4) * e_per + e
    return np.stack(np.broadcast_arrays(row, col), axis=-1)


def tile_block_offset(row, col, esize: int, row_bytes: int, swizzle: str):
    """Byte offset of element (row, col) in the shared C tile that :func:`nbwgmma.intrinsics.acc_store_swizzled`
    (``esize`` 4) and :func:`nbwgmma.intrinsics.acc_stmatrix_swizzled` (``esize`` 2) write: column blocks of
    ``row_bytes // esize`` columns, each 64 rows of ``row_bytes`` bytes, swizzled (ints or
    numpy arrays). It is the layout a TMA store with box (64, row_bytes // esize) and the
    same swizzle reads, one box per column block."""
    if swizzle not in SWIZZLE_MASK:
        raise LayoutError(f"swizzle must be one of {tuple(SWIZZLE_MASK)}; got {swizzle!r}")
    cpb = row_bytes // esize
    off = (col // cpb) * 64 * row_bytes + row * row_bytes + (col % cpb) * esize
    return off ^ (((off >> 7) & SWIZZLE_MASK[swizzle]) << 4)


def transposed_block_offset(row, col):
    """Byte offset of 16-bit element (row, col) of a warpgroup's 64 x N fragment in the shared
    tile that :func:`nbwgmma.intrinsics.acc_stmatrix_transposed` writes: the N x 64 transpose,
    128 bytes a row, with the 128-byte swizzle (ints or numpy arrays); what a TMA store with a
    (N, 64) box and that swizzle reads."""
    return tile_block_offset(col, row, 2, 128, "128B")


#: Bytes between the groups of four values of the exchange layout (:func:`exchange_offset`).
EXCHANGE_QUAD = 128 * 16


def exchange_offset(t, i):
    """Byte offset of 32-bit accumulator value ``i`` of warpgroup thread ``t`` in the exchange
    layout that :func:`nbwgmma.intrinsics.acc_send_cluster` writes and
    :func:`nbwgmma.intrinsics.acc_add_shared` reads: values ``4q .. 4q + 3`` of thread ``t`` at
    ``q * EXCHANGE_QUAD + 16 t`` (ints or numpy arrays; each warp's 16-byte pieces one contiguous
    512-byte run, so no bank conflicts)."""
    return (i // 4) * EXCHANGE_QUAD + 16 * t + 4 * (i % 4)


def ldmatrix_lane_map(trans: bool = False) -> np.ndarray:
    """``[32, 2, 2]``: (row, col) inside an 8x8 matrix of the two halves lane ``l`` receives."""
    lane = np.arange(32)
    r, c = lane // 4, 2 * (lane % 4)
    lo, hi = np.stack([r, c], -1), np.stack([r, c + 1], -1)
    out = np.stack([lo, hi], 1)
    return out[..., ::-1] if trans else out
