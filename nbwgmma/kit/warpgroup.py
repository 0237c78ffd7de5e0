"""Warpgroup helpers: which warpgroup a thread is in, and a barrier of one warpgroup.

A warpgroup is four consecutive warps (128 threads) whose first warp is a multiple of four
(PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate": warpgroup). Named
barrier 0 is ``syncthreads``; :func:`warpgroup_sync` gives warpgroup ``g`` barrier ``1 + g``,
so warpgroups synchronize among themselves without stopping the others.
"""

from __future__ import annotations

from numba import cuda

from ..intrinsics import named_barrier_sync

__all__ = ["warpgroup_index", "warpgroup_thread", "warpgroup_sync", "WARPGROUP_BARRIERS"]

#: Warpgroups :func:`warpgroup_sync` serves (named barrier ids 1-4).
WARPGROUP_BARRIERS = 4


@cuda.jit(device=True, inline=True)
def warpgroup_index():
    """This thread's warpgroup in the block (threadIdx.x // 128; a 1-D block)."""
    return cuda.threadIdx.x // 128


@cuda.jit(device=True, inline=True)
def warpgroup_thread():
    """This thread's index in its warpgroup (0-127), the ``tid`` of the fragment helpers."""
    return cuda.threadIdx.x % 128


@cuda.jit(device=True, inline=True)
def warpgroup_sync(g):
    """Barrier of the 128 threads of warpgroup ``g`` (0-3): named barrier ``1 + g``."""
    # A uniform branch per id (one warpgroup, one path), as the library GEMM was measured
    # with; named_barrier_sync_id(1 + g, 128) does the same with the id in a register.
    if g == 0:
        named_barrier_sync(1, 128)
    elif g == 1:
        named_barrier_sync(2, 128)
    elif g == 2:
        named_barrier_sync(3, 128)
    else:
        named_barrier_sync(4, 128)
