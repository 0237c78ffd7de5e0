"""A kernel's timeline: when each CTA started, on which SM, and when it reached the points you mark.

A kernel that runs one wave of CTAs ends with its slowest CTA: a CTA that started late, or whose
loads came in late, costs the whole product that much. Profilers report an SM's counters summed
over the kernel; a timeline says which CTA fell behind, and where. Give the kernel an ``int64``
array of one row per CTA (:class:`nbwgmma.timeline.Timeline` allocates it, poisoned with -1, and
reads it back), then, from one thread of the CTA::

    timeline_start(rec)            # rec[cta, 0] = the SM's number, rec[cta, 1] = the time now
    ...
    timeline_stamp(rec, 2)         # rec[cta, 2] = the time now: your first event
    ...
    timeline_stamp(rec, 3)         # the next one

Times are ``%globaltimer`` nanoseconds (:func:`~nbwgmma.intrinsics.globaltimer`), comparable across
SMs; its resolution is the GPU's (``docs/guide.md``, "A kernel's timeline"). ``cta`` is the linear
block index (``blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)``). A stamp is one
timer read and one 8-byte store: a few cycles, and one register live across the code it spans.
The library GEMM records one with ``GemmConfig(trace=True)`` (its events:
:data:`nbwgmma.kernels.gemm_config.TRACE_EVENTS`).
"""

from __future__ import annotations

from ..intrinsics import cta_index, globaltimer, smid
from .device import inlined

__all__ = ["timeline_start", "timeline_stamp", "timeline_cta"]


@inlined
def timeline_cta():
    """The linear index of this CTA in the grid: its row of a timeline (read at each stamp, so that
    no address of the row stays live in a register between stamps: :func:`~nbwgmma.intrinsics.cta_index`)."""
    return cta_index()


@inlined
def timeline_start(rec):
    """Record this CTA's SM (column 0) and the time now (column 1) in its row of ``rec``."""
    cta = timeline_cta()
    rec[cta, 0] = smid()
    rec[cta, 1] = globaltimer()


@inlined
def timeline_stamp(rec, col):
    """Record the time now in column ``col`` (2 or more, below the row's length: not checked on the
    GPU; :meth:`nbwgmma.timeline.Timeline.column` gives an event's) of this CTA's row of ``rec``."""
    rec[timeline_cta(), col] = globaltimer()
