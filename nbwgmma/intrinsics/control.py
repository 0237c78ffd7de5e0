"""Barriers, warp election and register reallocation.

PTX ISA sections: "Parallel Synchronization and Communication Instructions:
bar, barrier" (``bar.sync``/``bar.arrive``), "barrier.cluster", "elect.sync",
and "Miscellaneous Instructions: setmaxnreg, trap".
"""

from __future__ import annotations

from ._asm import Imm, Out, ptx_intrinsic, ranged, u32

__all__ = [
    "named_barrier_sync",
    "named_barrier_arrive",
    "named_barrier_sync_id",
    "cluster_arrive",
    "cluster_arrive_relaxed",
    "cluster_wait",
    "cluster_sync",
    "elect_one_sync",
    "setmaxnreg_inc",
    "setmaxnreg_dec",
    "SETMAXNREG_RANGE",
    "trap",
    "griddep_wait",
    "griddep_launch_dependents",
]

#: Hardware named barriers are numbered 0..15; barrier 0 is ``__syncthreads``.
_BAR_ID = Imm("barrier_id", rule=lambda v: isinstance(v, int) and 0 <= v <= 15,
              expect="an integer barrier id in [0, 15]")
_NTHREADS = Imm(
    "nthreads",
    rule=lambda v: isinstance(v, int) and 32 <= v <= 1024 and v % 32 == 0,
    expect="a thread count that is a multiple of 32 in [32, 1024]",
)

named_barrier_sync = ptx_intrinsic(
    "named_barrier_sync",
    "bar.sync $barrier_id, $nthreads;",
    params=[_BAR_ID, _NTHREADS],
    doc="``bar.sync id, nthreads`` (PTX ISA: bar, barrier). Wait until ``nthreads`` "
    "threads (whole warps) have arrived at named barrier ``id``.",
)

named_barrier_sync_id = ptx_intrinsic(
    "named_barrier_sync_id",
    "bar.sync $barrier_id, $nthreads;",
    params=[ranged("barrier_id", u32, 0, 15, source="bar, barrier"), _NTHREADS],
    doc="``bar.sync id, nthreads`` with the barrier id in a register (PTX ISA: bar, barrier: "
    "operand ``a`` may be a register), e.g. ``named_barrier_sync_id(1 + warpgroup, 128)``: one "
    "barrier per warpgroup without a branch per id. The id must be in [0, 15] and the same "
    "for all threads of a warp (not checked at run time).",
)

named_barrier_arrive = ptx_intrinsic(
    "named_barrier_arrive",
    "bar.arrive $barrier_id, $nthreads;",
    params=[_BAR_ID, _NTHREADS],
    doc="``bar.arrive id, nthreads`` (PTX ISA: bar, barrier). Arrive at named barrier "
    "``id`` without waiting (the producer side of a producer/consumer pair).",
)

#: ``aligned`` (default True): the ``.aligned`` form, which every thread of the warp executes
#: together; False: the form a warp may reach with some of its threads exited or elsewhere (a
#: producer warp of which one thread runs the producer loop while the others left).
_ALIGNED = Imm("aligned", choices=(True, False), default=True, text=lambda v: ".aligned" if v else "")

cluster_arrive = ptx_intrinsic(
    "cluster_arrive",
    "barrier.cluster.arrive.release$aligned;",
    params=[_ALIGNED],
    doc="``barrier.cluster.arrive.release{.aligned}`` (PTX ISA: barrier.cluster). Arrive "
    "at the cluster barrier; with ``aligned`` (the default) all threads of the warp must execute it.",
)

cluster_arrive_relaxed = ptx_intrinsic(
    "cluster_arrive_relaxed",
    "barrier.cluster.arrive.relaxed$aligned;",
    params=[_ALIGNED],
    doc="``barrier.cluster.arrive.relaxed{.aligned}`` (PTX ISA: barrier.cluster). Arrive "
    "with no memory ordering.",
)

cluster_wait = ptx_intrinsic(
    "cluster_wait",
    "barrier.cluster.wait.acquire$aligned;",
    params=[_ALIGNED],
    doc="``barrier.cluster.wait.acquire{.aligned}`` (PTX ISA: barrier.cluster). Wait until "
    "every non-exited thread of the cluster has arrived.",
)

cluster_sync = ptx_intrinsic(
    "cluster_sync",
    "barrier.cluster.arrive.release$aligned;\nbarrier.cluster.wait.acquire$aligned;",
    params=[_ALIGNED],
    doc="``barrier.cluster.arrive`` then ``barrier.cluster.wait`` (PTX ISA: "
    "barrier.cluster): a full cluster-wide barrier of every thread that has not exited. A kernel "
    "whose idle threads leave early (and whose producer warp keeps one thread) ends with "
    "``cluster_sync(False)``: threads waiting at the barrier while another thread of their warp "
    "still runs slowed that thread's work (measured on an H100: 128 x 128 GEMM tiles in clusters of two 12-20% slower).",
)

elect_one_sync = ptx_intrinsic(
    "elect_one_sync",
    "{\n.reg .b32 %nbw_lane;\nelect.sync %nbw_lane|$elected, 0xffffffff;\n}",
    outs=[Out("elected", pred=True)],
    doc="``elect.sync _|p, 0xffffffff`` (PTX ISA: elect.sync). True in exactly one "
    "active lane of the (fully active) warp.",
)

#: ``setmaxnreg`` takes a multiple of 8 in this range (PTX ISA: setmaxnreg).
SETMAXNREG_RANGE = (24, 256)


def _regcount():
    lo, hi = SETMAXNREG_RANGE
    return Imm(
        "count",
        rule=lambda v: isinstance(v, int) and lo <= v <= hi and v % 8 == 0,
        expect=f"a multiple of 8 in [{lo}, {hi}]",
    )


setmaxnreg_inc = ptx_intrinsic(
    "setmaxnreg_inc",
    "setmaxnreg.inc.sync.aligned.u32 $count;",
    params=[_regcount()],
    doc="``setmaxnreg.inc.sync.aligned.u32 count`` (PTX ISA: setmaxnreg). Raise this "
    "warpgroup's per-thread register limit to ``count``. The kernel needs a register "
    "cap at entry (launch bounds with min blocks), or ptxas ignores it (warning C7508).",
)

setmaxnreg_dec = ptx_intrinsic(
    "setmaxnreg_dec",
    "setmaxnreg.dec.sync.aligned.u32 $count;",
    params=[_regcount()],
    doc="``setmaxnreg.dec.sync.aligned.u32 count`` (PTX ISA: setmaxnreg). Lower this "
    "warpgroup's per-thread register limit to ``count``, releasing registers.",
)

trap = ptx_intrinsic(
    "trap",
    "trap;",
    doc="``trap`` (PTX ISA: trap). Abort the kernel: the launch fails with an error the host "
    "sees at its next synchronization.",
)

griddep_wait = ptx_intrinsic(
    "griddep_wait",
    "griddepcontrol.wait;",
    doc="``griddepcontrol.wait`` (PTX ISA: griddepcontrol; sm_90). Wait until the grids this one "
    "depends on (the kernel before it in the stream, where it was launched with programmatic "
    "dependent launch: ``launch(..., pdl=True)``) have completed and their memory operations are "
    "visible. A kernel launched that way may start while the previous one still runs: every "
    "read or write of memory the previous kernel may touch goes after this wait. Without such "
    "a launch it returns at once.",
)

griddep_launch_dependents = ptx_intrinsic(
    "griddep_launch_dependents",
    "griddepcontrol.launch_dependents;",
    doc="``griddepcontrol.launch_dependents`` (PTX ISA: griddepcontrol; sm_90). Let the next "
    "kernel of the stream, if launched with programmatic dependent launch, be scheduled once "
    "every CTA of this grid has issued this (or exited): its CTAs take SMs as this grid's leave "
    "and run up to their ``griddep_wait``. Repeats in a CTA have no further effect; without "
    "such a dependent it does nothing.",
)
