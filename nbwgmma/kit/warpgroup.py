"""Warpgroup helpers: which warpgroup a thread is in, and a barrier of one warpgroup.

A warpgroup is four consecutive warps (128 threads) whose first warp is a multiple of four
(PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate": warpgroup). Named
barrier 0 is ``syncthreads``; :func:`warpgroup_sync` gives warpgroup ``g`` barrier ``1 + g``,
so warpgroups synchronize among themselves without stopping the others.

Two consumer warpgroups that take tiles in turn (one's epilogue under the other's main
loop) pass a turn between them: :func:`turn_wait` before a main loop, :func:`turn_pass`
after it (named barriers 5 and 6, each completed by one warpgroup's ``bar.arrive`` and the
other's ``bar.sync``).

The kit's blocks use named barriers 1-6 and none above: ``tma_store_part``,
``tma_store_block`` and ``ClusterSplitK``'s exchange sync consumer ``cw`` (its index among the
consumers) with ``warpgroup_sync(cw)``, the turns use 5 and 6, :class:`~nbwgmma.kit.StreamFixup` 5 by default.
Ids 7-15 are free for a kernel's own barriers.
"""

from __future__ import annotations

from numba import cuda

from ..intrinsics import named_barrier_arrive, named_barrier_sync
from .device import inlined
from .typecheck import index_check

__all__ = ["launch_regs", "warpgroup_index", "warpgroup_thread", "warpgroup_sync", "WARPGROUP_BARRIERS", "turn_wait",
           "turn_pass", "TURN_BARRIERS"]

#: Warpgroups :func:`warpgroup_sync` serves (named barrier ids 1-4).
WARPGROUP_BARRIERS = 4


def launch_regs(threads: int) -> int:
    """Registers per thread a CTA of ``threads`` gets with one CTA per SM (64K register file,
    8-register granularity, at most 255 addressable): the pool ``setmaxnreg`` redistributes
    among the warpgroups is this times ``threads``. Host-side."""
    return min(255, 65536 // threads) // 8 * 8


@inlined
def warpgroup_index():
    """This thread's warpgroup in the block (threadIdx.x // 128; a 1-D block), read from lane 0
    of the warp (a shuffle: call it where the whole warp runs). The shuffle tells ptxas the value
    is the same across the warp, so what derives from it (a warpgroup's shared-memory offsets, its
    wgmma descriptors) can live in uniform registers: a descriptor computed from ``threadIdx.x //
    128`` is moved into uniform registers (R2UR) before every wgmma. The block-scaled fp8 GEMM
    ran 6-9% faster with it (an H200)."""
    return cuda.shfl_sync(0xFFFFFFFF, cuda.threadIdx.x // 128, 0)


@inlined
def warpgroup_thread():
    """This thread's index in its warpgroup (0-127), the ``tid`` of the fragment helpers."""
    return cuda.threadIdx.x % 128


@inlined
def warpgroup_sync(g):
    """Barrier of the 128 threads of warpgroup ``g`` (0-3; a constant outside is a typing error at
    the call): named barrier ``1 + g``. The kit's stores call it with the consumer's index ``cw``
    (0 for the first consumer warpgroup): a kernel syncing a consumer itself passes the same
    ``cw``, or uses an id from 7 up."""
    # A uniform branch per id (one warpgroup, one path), as the library GEMM was measured
    # with; named_barrier_sync_id(1 + g, 128) does the same with the id in a register.
    _SYNC_INDEX(g)  # (simulated: a value outside 0-3 is refused, as a constant is at typing)
    if g == 0:
        named_barrier_sync(1, 128)
    elif g == 1:
        named_barrier_sync(2, 128)
    elif g == 2:
        named_barrier_sync(3, 128)
    else:
        named_barrier_sync(4, 128)


_SYNC_INDEX = index_check(warpgroup_sync, "kit.warpgroup_sync", "g", WARPGROUP_BARRIERS,
                          "the warpgroup whose named barrier 1 + g it syncs")


#: Named barrier ids of :func:`turn_wait` / :func:`turn_pass` (warpgroup 0 waits on the first).
TURN_BARRIERS = (5, 6)


@inlined
def turn_wait(g):
    """Consumer warpgroup ``g`` (0 or 1) waits until the other passed it the turn."""
    _TURN_WAIT_INDEX(g)  # (simulated: a value outside 0-1 is refused, as a constant is at typing)
    if g == 0:
        named_barrier_sync(5, 256)
    else:
        named_barrier_sync(6, 256)


@inlined
def turn_pass(g):
    """Consumer warpgroup ``g`` (0 or 1) passes the turn to the other (does not wait). Pass
    only a turn the other will take: a barrier left half-arrived at exit is undefined."""
    _TURN_PASS_INDEX(g)
    if g == 0:
        named_barrier_arrive(6, 256)
    else:
        named_barrier_arrive(5, 256)


_TURN_WAIT_INDEX = index_check(turn_wait, "kit.turn_wait", "g", len(TURN_BARRIERS),
                               "the consumer warpgroup taking the turn: cw, not the warpgroup's index in the block")
_TURN_PASS_INDEX = index_check(turn_pass, "kit.turn_pass", "g", len(TURN_BARRIERS),
                               "the consumer warpgroup passing the turn: cw, not the warpgroup's index in the block")
