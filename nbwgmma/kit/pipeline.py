"""The TMA producer / wgmma consumer ring: ``stages`` shared-memory slots, each guarded by a
"full" mbarrier (the producer's arrival plus the TMA transaction bytes) and an "empty" one
(one arrival per consumer of every CTA of the cluster: usually a warpgroup, whose wgmmas read
the slot; every thread where the threads read it themselves).

The position in the ring is two small integers, the slot ``s`` and the phase ``ph``, kept in
registers by the kernel and moved on with :attr:`TmaPipeline.advance` (or derived from a
running count with :attr:`TmaPipeline.stage_of`); the phase flip lives here and nowhere else.
Both sides start at ``(0, 0)``::

    pipe = TmaPipeline(stages=4, consumers=2)
    NBARS = pipe.barrier_words                         # a shared array's shape: one global name

    @cuda.jit
    def kernel(...):
        bars = cuda.shared.array(NBARS, np.uint64)
        ring = smem_addr(bars)
        if cuda.threadIdx.x == 0:
            pipe.init(ring)
        cuda.syncthreads()
        s, ph = 0, 0
        if producer:                                   # one thread
            for kb in range(nk):
                full = pipe.producer_acquire(ring, s, ph, STAGE_BYTES)
                tma_load_2d(slot_address(s), tmap_a, full, ...)
                s, ph = pipe.advance(s, ph)
        else:                                          # each consumer warpgroup
            for kb in range(nk):
                pipe.consumer_wait(ring, s, ph)
                ... wgmma on slot s, commit, wgmma_wait_group(1) ...
                if kb > 0 and elected:
                    pipe.consumer_release(ring, prev)  # the slot of the group now complete
                prev = s
                s, ph = pipe.advance(s, ph)

A slot may also be filled in part by threads that copy into it themselves (scales a warp
gathers): ``TmaPipeline(..., producers=1 + 32)`` counts one more arrival on "full" per
such thread, each of which waits with ``producer_wait`` and calls ``producer_arrive_copies``
after its ``cp_async`` copies. Consumers that read such data themselves must each release
the slot: count them all in ``consumers``.

The "empty" wait of the first round passes at once: the producer waits for parity
``ph ^ 1``, and parity 1 is the phase before phase 0. With ``cluster`` > 1 a release arrives
on the "empty" barrier of every CTA of the cluster (each producer multicasts into all of
them), and :attr:`init` must be followed by ``cluster_sync()`` instead of ``syncthreads()``.
The simulator names the barriers ``full[s]`` and ``empty[s]`` in its reports.
"""

from __future__ import annotations

import types

import numpy as np
from numba import cuda

from ..errors import KitError, is_int
from ..intrinsics import (
    cluster_sync, cp_async_mbarrier_arrive_noinc, dynamic_smem_base, fence_mbarrier_init, griddep_wait, mbarrier_arrive,
    mbarrier_arrive_cluster, mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_name, mbarrier_wait_parity, smem_addr,
)
from .device import inlined
from .typecheck import address_check

__all__ = ["check_stages", "TmaPipeline", "check_shares", "MAX_CLUSTER"]

#: The largest cluster a kit block is built for: 8 CTAs, the portable size (launch refuses more).
MAX_CLUSTER = 8


def check_stages(who: str, pipe) -> None:
    """Consumers that keep one stage's wgmmas in flight hold that stage while they wait for the
    next fill: with one stage the fill they wait for is of the slot they hold (a hang). A
    :class:`~nbwgmma.errors.KitError` naming ``who`` for a ring of fewer than 2 stages."""
    if isinstance(pipe, TmaPipeline) and pipe.stages < 2:
        raise KitError(f"{who}: pipe must have at least 2 stages (the main loop holds a stage while its wgmmas run "
                       f"and waits for the next fill: with one stage, a fill of the slot it holds, which never "
                       f"comes); got {pipe!r}")


class TmaPipeline(types.ModuleType):
    """A ring of ``stages`` slots filled by TMA and drained by ``consumers`` (warpgroups, or
    threads) per CTA, in clusters of ``cluster`` CTAs; ``producers`` arrivals complete a fill
    (the TMA thread's, plus one per thread copying into the slot itself). Device functions
    (all inlined):

    * ``init(ring)``: one thread initializes the ``2 * stages`` barriers at shared address
      ``ring`` (``barrier_words`` u64 words: full[0..S-1], then empty[0..S-1]);
    * ``producer_acquire(ring, s, ph, nbytes) -> full``: wait until slot ``s`` is empty, arm
      its "full" barrier for ``nbytes`` transaction bytes; returns the barrier's address for
      the TMA loads of the stage;
    * ``producer_wait(ring, s, ph)``: wait until slot ``s`` is empty (without arming it: a
      thread that fills part of the slot with ``cp_async`` copies);
    * ``producer_arrive(ring, s)``: that thread's arrival on slot ``s``'s "full" barrier after
      plain stores into the slot (the arrival orders them before the consumers' reads);
    * ``producer_arrive_copies(ring, s)``: that thread's arrival on slot ``s``'s "full"
      barrier once its ``cp_async`` copies into the slot have landed (``producers`` counts it);
    * ``consumer_wait(ring, s, ph)``: wait until slot ``s`` is full;
    * ``consumer_release(ring, s)``: one thread per consumer (warpgroup) marks slot ``s`` empty
      (after the ``wgmma_wait_group`` that completes the wgmmas reading it);
    * ``advance(s, ph) -> (s, ph)``: the next slot and its phase;
    * ``advance_by(s, ph, n) -> (s, ph)``: the slot and phase ``n`` fills later (a consumer
      that skips the fills meant for another, as warpgroups taking tiles in turn do);
    * ``stage_of(it) -> (s, ph)``: slot and phase of the ``it``-th fill (for a loop that keeps
      one running count instead of two counters);
    * ``setup() -> (base, ring)``: a kernel's start, by every thread: the dynamic shared
      memory's address aligned to 1024 bytes (for the stages: launch with 1 KiB more than they
      need, as :func:`nbwgmma.launch.dynamic_smem_bytes` counts), the ring's barriers in static
      shared memory initialized by thread 0, then a barrier of the CTA (of the cluster with
      ``cluster`` > 1), then ``griddep_wait()``: a kernel built on it may be launched with
      programmatic dependent launch (``launch(..., pdl=True)``);
    * ``teardown()``: a kernel's end, by every thread still running: with ``cluster`` > 1 a
      cluster barrier (``cluster_sync(False)``), so that no CTA leaves while a peer may still
      arrive on its barriers or multicast into its slots; nothing without a cluster. Threads
      with nothing left to do may return before it (they should: waiting there beside the
      producer thread of their warp slows its loop).
    """

    def __init__(self, stages: int, consumers: int, *, cluster: int = 1, producers: int = 1):
        for name, v, lo, hi in (("stages", stages, 1, 32), ("consumers", consumers, 1, 1024),
                                ("cluster", cluster, 1, MAX_CLUSTER), ("producers", producers, 1, 1024)):
            if not is_int(v) or not lo <= v <= hi:
                raise KitError(f"TmaPipeline: {name} must be an integer in [{lo}, {hi}]; got {v!r}")
        stages, consumers, cluster, producers = int(stages), int(consumers), int(cluster), int(producers)
        super().__init__(f"TmaPipeline({stages}, {consumers}, cluster={cluster})")
        self.stages, self.consumers, self.cluster, self.producers = stages, consumers, cluster, producers
        self.barrier_words = 2 * stages
        self._build()

    def __repr__(self):
        more = f", producers={self.producers}" if self.producers != 1 else ""
        return f"TmaPipeline(stages={self.stages}, consumers={self.consumers}, cluster={self.cluster}{more})"

    def _build(self):
        S, CL = self.stages, self.cluster
        RELEASES = self.consumers * CL
        FILLS = self.producers

        ring_check = address_check("TmaPipeline.init", "ring", "smem_addr(bars) of the barriers' shared array")

        @inlined
        def init(ring):
            ring_check(ring)
            for s in range(S):
                mbarrier_init(ring + 8 * s, FILLS)  # arrive.expect_tx (TMA adds the bytes), copying threads
                mbarrier_name(ring + 8 * s, "full", s)
                mbarrier_init(ring + 8 * S + 8 * s, RELEASES)
                mbarrier_name(ring + 8 * S + 8 * s, "empty", s)
            fence_mbarrier_init()

        @inlined
        def producer_wait(ring, s, ph):
            mbarrier_wait_parity(ring + 8 * S + 8 * s, ph ^ 1)

        @inlined
        def producer_acquire(ring, s, ph, nbytes):
            producer_wait(ring, s, ph)
            full = ring + 8 * s
            mbarrier_arrive_expect_tx(full, nbytes)
            return full

        @inlined
        def producer_arrive(ring, s):
            mbarrier_arrive(ring + 8 * s)

        @inlined
        def producer_arrive_copies(ring, s):
            cp_async_mbarrier_arrive_noinc(ring + 8 * s)

        @inlined
        def consumer_wait(ring, s, ph):
            mbarrier_wait_parity(ring + 8 * s, ph)

        if CL == 1:
            @inlined
            def consumer_release(ring, s):
                mbarrier_arrive(ring + 8 * S + 8 * s)
        else:
            @inlined
            def consumer_release(ring, s):
                for r in range(CL):
                    mbarrier_arrive_cluster(ring + 8 * S + 8 * s, r)

        @inlined
        def advance(s, ph):
            s += 1
            if s == S:
                s = 0
                ph ^= 1
            return s, ph

        @inlined
        def advance_by(s, ph, n):
            t = s + n
            return t % S, ph ^ ((t // S) & 1)

        @inlined
        def stage_of(it):
            return it % S, (it // S) & 1

        NWORDS = self.barrier_words

        @cuda.jit(device=True, inline=True)  # Numba-inlined: its shared arrays become the kernel's
        def setup():
            dyn = cuda.shared.array(0, np.uint8)
            bars = cuda.shared.array(NWORDS, np.uint64)
            base = dynamic_smem_base(dyn, 1024)
            ring = smem_addr(bars)
            if cuda.threadIdx.x == 0:
                init(ring)
            if CL == 1:
                cuda.syncthreads()
            else:
                cluster_sync()
            # Launched with programmatic dependent launch, the grid may have started while the
            # stream's previous kernel still runs: wait for it before any memory is touched.
            griddep_wait()
            return base, ring

        self.init, self.producer_acquire, self.consumer_wait = init, producer_acquire, consumer_wait
        self.consumer_release, self.advance, self.stage_of = consumer_release, advance, stage_of
        @inlined
        def teardown():
            if CL > 1:
                # not .aligned: of the producer's warp only its one thread may be left
                cluster_sync(False)

        self.advance_by, self.setup, self.teardown = advance_by, setup, teardown
        self.producer_wait, self.producer_arrive_copies = producer_wait, producer_arrive_copies
        self.producer_arrive = producer_arrive


def check_shares(owner: str, rows: int, major: str, cluster: int, operand: str = "B"):
    """ValueError (naming ``owner``) unless a cluster of ``cluster`` CTAs can split an
    ``operand`` tile of ``rows`` rows (M or N) into whole swizzle atoms per CTA (8 rows K-major,
    64-column boxes MN-major), each CTA loading its share and multicasting it."""
    if rows % cluster or (major == "K" and (rows // cluster) % 8) or (major == "MN" and (rows // 64) % cluster):
        size = "bm" if operand == "A" else "bn"
        raise KitError(f"{owner}: a cluster of {cluster} splits {operand}'s {rows} rows into whole swizzle atoms "
                         f"({'8 rows' if major == 'K' else '64-column boxes'}) per CTA; got {size}={rows}")
