"""The simulator's machine: clusters of CTAs whose threads are greenlets run one at a time
(:mod:`nbwgmma.sim.sched`), rendezvous for warp- and warpgroup-collective instructions,
and vector clocks for happens-before (the intrinsics' implementations: :mod:`nbwgmma.sim.declare`).

Happens-before is tracked with one vector clock per simulated thread (one entry per thread
of the cluster plus one per mbarrier). A thread publishes its clock and then advances its
own entry whenever it releases (arrives on a barrier, joins a collective, fences); it takes
the maximum with a clock it acquires (a completed barrier phase or generation, a finished
collective). Two events are ordered when the later thread's clock has seen the earlier
thread's epoch: that is how the hazard checks (:mod:`nbwgmma.sim.shadow`) tell a correct
release from one that comes too early, whatever order the threads happened to run in.
"""

from __future__ import annotations

import itertools
import os
import random
import sys

import greenlet
import numpy as np
from numba.cuda.simulator.kernelapi import Dim3

from ..errors import NbwgmmaError
from .sched import EXPIRED, POLL, STUCK, Scheduler, WaitQueue, current
from .site import IN_NUMBA, IN_OWN, file_bits, where, where_from, where_parts

#: Bytes of shared memory per simulated CTA (the 14-bit descriptor address space).
SMEM_BYTES = 1 << 18
#: Offset of dynamic shared memory in the image (static arrays follow it): 16-byte aligned, as
#: CUDA promises, and on purpose not 1024-aligned (on the GPU static arrays come first, so the
#: base is wherever they end): a kernel that aligns it for a swizzle (``dynamic_smem_base``)
#: without asking the launch for the slack (``dynamic_smem_bytes``) overruns it here too.
DYN_BASE = 1024 + 16
RANK_SHIFT = 24
#: Checks run on each thread that returns from the kernel, each may raise :class:`SimHazard`
#: (registered by the modules that keep per-thread state: :mod:`nbwgmma.sim.copy`'s bulk stores).
EXIT_CHECKS: list = []
#: Checks run when the last thread of a CTA returns, ``check(cta)``, each may raise
#: :class:`SimHazard` (:mod:`nbwgmma.sim.cta`'s: copies and peers' accesses the CTA's exit
#: must come after).
CTA_EXIT_CHECKS: list = []
#: Clock entries kept for mbarriers per cluster (each mbarrier_init takes one).
BARRIER_SLOTS = 1024


class SimError(NbwgmmaError, RuntimeError):
    """Base of the simulator's reports."""


class SimStopped(SimError):
    """A simulated kernel waits where no thread can ever run again (it would hang on the GPU), a thread of a
    warp or warpgroup left before a collective instruction, or the kernel hit ``trap``."""


class SimHazard(SimError):
    """The kernel does something whose result the hardware does not define: shared memory
    rewritten while an asynchronous read of it is in flight, an accumulator read before the
    ``wgmma_wait_group`` that covers it, generic stores read by the async proxy without
    ``fence.proxy.async``, a TMA destination read before its barrier phase completes, an
    mbarrier given more bytes or arrivals than its phase expects, or threads of one warp or
    warpgroup reaching different collective instructions."""


def enabled() -> bool:
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def schedule_rng():
    """None for the first-come order, or the generator ``NBWGMMA_SIM_SCHEDULE=random:SEED`` asks for
    (:mod:`nbwgmma.sim.sched`)."""
    how = os.environ.get("NBWGMMA_SIM_SCHEDULE", "fifo").strip()
    if how in ("fifo", ""):  # (set but empty: the default)
        return None
    kind, _, seed = how.partition(":")
    if kind != "random" or not seed.lstrip("-").isdigit():
        raise SimError(f"NBWGMMA_SIM_SCHEDULE must be 'fifo' or 'random:SEED' (SEED an integer); got {how!r}")
    return random.Random(int(seed))


def kernel_line() -> tuple | None:
    """Inside a simulated kernel's thread, (the kernel's line, nbwgmma's own line under it or
    None) (:func:`~nbwgmma.sim.site.where_parts`), else None: the locator the simulator
    registers with :mod:`nbwgmma.backend`."""
    th = current()
    if not isinstance(th, SimThread):
        return None
    inner, caller = where_parts(sys._getframe(1), th)
    return (inner, None) if caller is None else (caller, inner)


# ---------------------------------------------------------------------------------------
# Clocks


def release(th, into):
    """``th`` publishes its clock into ``into`` and advances its own entry."""
    np.maximum(into, th.clock, out=into)
    th.clock[th.gid] += 1


def acquire(th, clock):
    if clock is not None:
        np.maximum(th.clock, clock, out=th.clock)


# ---------------------------------------------------------------------------------------
# Clusters, CTAs, threads


class _Section:
    """The cluster's ``lock``: its threads run one at a time and switch only where they wait,
    so its critical sections (``with cl.lock:``) need no lock; the name marks them."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Cluster:
    def __init__(self, nctas, nthreads, bound_threads=None, kernel_name="the kernel"):
        self.lock = _Section()
        self.bound_threads = bound_threads  # the kernel's launch bounds' threads, if it has bounds
        self.kernel_name = kernel_name
        self.sched = Scheduler(schedule_rng())
        self.cond = WaitQueue(self.sched)  # the default wait queue
        self.ctas = []
        self.clustered = True  # launched with cluster dimensions (sim.run sets it)
        self.grid = (1, 1, 1)  # the launch's grid (sim.run sets it)
        self.error = None
        self.nthreads = nthreads
        self.clock_len = nctas * nthreads + BARRIER_SLOTS
        self.slots = itertools.count(nctas * nthreads)
        self.barrier_at = {}  # (CTA rank, offset) -> the latest mbarrier initialized there (its slot is reused)
        self.barrier = PhasedBarrier(self, nctas * nthreads, "cluster barrier")
        # per thread (cluster id): its own clock entry at each fence.proxy.async, ascending, and the fence's line
        self.fences = {}

    def new_clock(self):
        return np.zeros(self.clock_len, np.int64)

    def new_cond(self):
        return WaitQueue(self.sched)

    def new_slot(self):
        s = next(self.slots)
        if s >= self.clock_len:
            raise SimStopped(f"mbarriers at more than {BARRIER_SLOTS} shared addresses in one cluster: the simulator "
                             f"tracks at most that many (initializing one address again reuses its tracking)")
        return s

    def wait_for(self, pred, what, timeout_s=None, cond=None):
        """Suspend the calling simulated thread on ``cond`` (a :class:`WaitQueue`, default the
        cluster's) until ``pred()``. When the cluster can never progress (:mod:`~nbwgmma.sim.sched`)
        return False for a timed wait (``timeout_s`` not None: a wait of the kernel's with a
        time limit, which here ends only then), else raise :class:`SimStopped` with ``what()``
        (a string or a callable giving one, evaluated then)."""
        return self._wait(current(), pred, what, cond or self.cond, timeout_s is not None)

    def wait_woken(self, th, ready, what):
        """Like :meth:`wait_for` on no queue: another thread calls ``th.wake()`` after making
        ``ready()`` true."""
        self._wait(th, ready, what, None, False)

    def spin(self, th, pred, what, queue):
        """A failed ``try_wait``: let the others run until ``queue`` is notified (or the
        cluster cannot progress, when the kernel's next test may fail again), then ``pred()``;
        raises where the kernel only tests again with nothing else to do."""
        if self.error is not None:
            raise SimStopped("another simulated thread failed")
        th.waiting_for = what
        v = self.sched.wait(th, queue, True)
        th.waiting_for = None
        if v is STUCK:
            raise self.stuck(th, what)
        ok = pred()
        if ok and v is POLL:  # as in _wait: a poll found what it waited for
            self.sched.progress += 1
        return ok

    def _wait(self, th, pred, what, queue, may_expire):
        looked = False
        while not pred():
            if self.error is not None:
                raise SimStopped("another simulated thread failed")
            th.waiting_for = what
            v = self.sched.wait(th, queue, may_expire)
            th.waiting_for = None
            if v is STUCK:
                raise self.stuck(th, what)
            if v is EXPIRED:
                return False
            looked = v is POLL
        if looked:  # a poll found what it waited for: what it does next is progress
            self.sched.progress += 1
        return True

    def stuck(self, th, what):
        """The :class:`SimStopped` of thread ``th`` waiting for ``what`` where no thread can run;
        led instead by the wait that shows the cause, where another thread waits there: for
        registers (a ``setmaxnreg_inc`` the pool never satisfies; the other waits are its
        consequences), else on an mbarrier whose arrivals are all in and whose bytes are short
        (a box that brings fewer bytes than the stage counts; a producer waiting for a slot is
        its consequence)."""
        text = what() if callable(what) else what
        at = th.where or where()
        first = (th, at, text)  # the thread that found the hang, a wait site of its own if another leads
        rank = _cause_rank(text)
        for t in self.sched.blocked:
            if rank == 0:
                break
            if t is th or not isinstance(t, SimThread):
                continue
            t_at, told = _wait_site(t)
            if told is not None and _cause_rank(told) < rank:
                th, text, at, rank = t, told, t_at, _cause_rank(told)
        return SimStopped(
            f"simulated wait can never finish (every thread of the cluster waits or has exited; on the GPU "
            f"the kernel hangs): block {tuple(th.blockIdx)} thread {th.thread_id} (warp {th.thread_id // 32}) "
            f"at {at}: {text}{self.fewer_threads_than_bounds()}{self.wait_sites(th, text, at, first)}")

    def wait_sites(self, th, text, at, first) -> str:
        """The other places where threads of the cluster wait (each line and what it waits
        for, with its threads), after ``th``'s own: the longest waiting thread is often not
        the one whose wait shows the mistake (a producer waiting for a slot the consumers,
        themselves waiting for bytes that never come, never release). ``first``: (thread, line,
        what) of the thread that found the hang, one of these sites where ``th`` is another."""
        sites: dict = {}
        own = (at, text)
        if first[0] is not th:
            sites[first[1:]] = [first[0]]
        for t in self.sched.blocked:
            if t is th or t is first[0] or not isinstance(t, SimThread):
                continue
            at, told = _wait_site(t)
            if told is None:
                told = "a wait"
            if (at, told) != own:
                sites.setdefault((at, told), []).append(t)
        if not sites:
            return ""
        many = len(self.ctas) > 1
        parts = []
        for (at, told), ts in list(sites.items())[:8]:
            ids = [f"{r}:{i}" if many else str(i) for r, i in sorted((t.cta.rank, t.thread_id) for t in ts)]
            who = f"thread{'s' if len(ids) > 1 else ''} {', '.join(ids[:4])}{f' and {len(ids) - 4} more' if len(ids) > 4 else ''}"
            parts.append(f"at {at} ({who}): {told}")
        more = f"; and {len(sites) - 8} more places" if len(sites) > 8 else ""
        return ". Waiting elsewhere" + (" (CTA rank:thread)" if many else "") + ": " + "; ".join(parts) + more

    def fewer_threads_than_bounds(self) -> str:
        """Where the block is smaller than the kernel's launch bounds, a sentence saying so (the
        likely cause of a hang: the threads the kernel counts on for an arrival do not exist)."""
        if self.bound_threads is None or self.nthreads >= self.bound_threads:
            return ""
        return (f". The block has {self.nthreads} threads, the kernel's launch_bounds {self.bound_threads}: "
                f"threads it counts on may not exist (launch it with block={self.bound_threads}?)")

    def fail(self, exc):
        if self.error is None:
            self.error = exc
        self.sched.wake_all()


#: what a wait's description says where it shows a hang's cause, most telling first (sim.barriers'
#: register waits; sim.sync's mbarrier whose bytes are short)
CAUSES = ("setmaxnreg_inc(", "every arrival is in, the bytes are short")


def _cause_rank(told: str) -> int:
    """The place of the first of :data:`CAUSES` a wait's description shows, len(CAUSES) for none."""
    return next((i for i, c in enumerate(CAUSES) if (told.startswith(c) if i == 0 else c in told)), len(CAUSES))


def _wait_site(t):
    """(line, what it waits for) of blocked thread ``t``; what is None where it cannot be said
    (no description, or one that fails to be made)."""
    what = t.waiting_for
    try:
        told = what() if callable(what) else (what or None)
    except Exception:  # noqa: BLE001  (a description that cannot be made: the place alone)
        told = None
    at = t.where or (where_from(t.gr_frame, t) if t.gr_frame is not None else "between intrinsics")
    return at, told


class PhasedBarrier:
    """Arrive/wait barrier of ``parties`` threads (``syncthreads``, named and cluster
    barriers); exited threads count as arrived (once: a thread that arrived and then exited
    counts as exited from the next generation on). Each generation carries the join of its
    arrivers' clocks to its waiters."""

    def __init__(self, cluster, parties, name):
        self.cl, self.parties, self.name = cluster, parties, name
        self.count = self.gen = self.exited = 0
        self.arrived = set()  # threads (gid) that arrived in the current generation
        self.leaving = 0  # of those, the ones that exited since: they count as exited from the next one on
        self.cond = cluster.new_cond()
        self.clock = cluster.new_clock()
        self.done = {}  # generation -> clock

    def _check(self):
        if self.count and self.count + self.exited >= self.parties:
            self.done[self.gen] = self.clock
            self.done.pop(self.gen - 64, None)
            self.clock = self.cl.new_clock()
            self.gen += 1
            self.count = 0
            self.arrived.clear()
            self.exited += self.leaving
            self.leaving = 0
            self.cond.notify_all()

    def arrive(self):
        th = current()
        with self.cl.lock:
            tok = self.gen
            self.count += 1
            self.arrived.add(th.gid)
            release(th, self.clock)
            self._check()
            return tok

    def wait(self, tok):
        th = current()
        with self.cl.lock:
            self.cl.wait_for(lambda: self.gen > tok, lambda: f"waiting at the {self.name} ({self.count} of "
                             f"{self.parties} threads arrived)", cond=self.cond)
            acquire(th, self.done.get(tok))

    def sync(self):
        self.wait(self.arrive())

    def exit(self):
        th = current()
        with self.cl.lock:
            # a thread that arrived (cluster_arrive) and exits before the generation completes is
            # already in its count: counting its exit too would complete it one arrival early,
            # depending on whether the exit ran before the last arrival
            if th.gid in self.arrived:
                self.leaving += 1
            else:
                self.exited += 1
            self._check()


class SimThread(greenlet.greenlet):
    def __init__(self, fn, args, cta, block_idx, thread_idx, block_dim):
        super().__init__(parent=cta.cl.sched.main)
        self.fn, self.args, self.cta, self.cl = fn, args, cta, cta.cl
        self.blockIdx, self.threadIdx = Dim3(*block_idx), Dim3(*thread_idx)
        bx, by, _ = block_dim
        self.thread_id = thread_idx[0] + bx * (thread_idx[1] + by * thread_idx[2])
        self.gid = cta.rank * cta.cl.nthreads + self.thread_id
        cta.threads[self.thread_id] = self
        self.clock = cta.cl.new_clock()
        # its own entry from 1: an event of this thread before its first release is epoch 1,
        # which a thread that has heard nothing of it (entry 0) does not cover
        self.clock[self.gid] = 1
        self.rounds = {}
        self.cluster_token = None
        self.where = None  # the kernel line of the intrinsic being run (see ``where``)
        self.op = None  # that intrinsic's name (nbwgmma.sim.declare), for split's reports
        self.waiting_for = None  # while it waits: what for (a string, or a callable giving one)
        self.bulk = None  # this thread's bulk async-group state (nbwgmma.sim.copy)
        self.cp_async = None  # its cp.async copies not yet landed (nbwgmma.sim.copy)
        self.verdict = None  # what the scheduler said when it last resumed this thread
        self.last_phase = None  # (mbarrier, phase) it last waited for (nbwgmma.sim.sync; named in hazards)
        self.expired_at = -1  # the scheduler's progress count when a wait of this thread last gave up

    @property
    def where(self):
        """The kernel line (``file:line``, :func:`~nbwgmma.sim.site.where_from`) of the intrinsic
        this thread is running, None between intrinsics. Worked out from the intrinsic's frame
        when first asked (most calls never are): the frames above it stand still at their lines
        until it returns."""
        w = self._where
        if w is None and self._where_frame is not None:
            w = self._where = where_from(self._where_frame, self)
        return w

    @where.setter
    def where(self, value):
        self._where, self._where_frame = value, None

    def enter(self, frame, op):
        """Start intrinsic ``op`` run from ``frame``: returns what :meth:`leave` restores after it."""
        saved = (self._where, self._where_frame, self.op)
        self._where, self._where_frame, self.op = None, frame, op
        return saved

    def leave(self, saved):
        self._where, self._where_frame, self.op = saved

    def wake(self):
        self.cl.sched.wake(self)

    def run(self):
        try:
            self.fn(*self.args)
            for check in EXIT_CHECKS:
                check(self)
            cta = self.cta
            with self.cl.lock:  # the CTA's exit: its threads' clocks joined, checked when the last returns
                cta.exit_clock = self.clock.copy() if cta.exit_clock is None else np.maximum(cta.exit_clock,
                                                                                             self.clock)
                cta.returned += 1
                last = cta.returned == self.cl.nthreads
            if last:
                for check in CTA_EXIT_CHECKS:
                    check(cta)
                cta.left = True
        except greenlet.GreenletExit:
            raise
        except IndexError as e:  # an index past an array of the kernel's, which the GPU does not check
            self.cl.fail(_unchecked_index(self, e))
        except (ArithmeticError, ValueError) as e:  # Python's arithmetic refusing what a kernel computes
            self.cl.fail(python_only(e) or e)
        except BaseException as e:  # raised by run(), a KeyboardInterrupt as it is
            self.cl.fail(e)
        finally:
            with self.cl.lock:
                self.cta.exited.add(self.thread_id)
                for bar in list(self.cta.named.values()):  # (a warp's last running threads may be waiting there)
                    bar.thread_exited(self)
            self.cl.sched.progress += 1  # a collective's members that wait see it
            self.cta.syncthreads.exit()
            self.cl.barrier.exit()

    def syncthreads(self):
        bar0 = self.cta.named.get(0)  # (named barrier 0 of fewer threads: the same hardware barrier)
        if bar0 is not None and (bar0.count or bar0.lanes):
            raise SimHazard(f"thread {self.thread_id} at {where()}: syncthreads while threads wait at named barrier 0 "
                            f"with {bar0.parties} threads, the same hardware barrier: one barrier with two thread "
                            f"counts (give the named barrier another id)")
        self.cta.syncthreads.sync()


def _unchecked_index(th, e):
    """An ``IndexError`` of NumPy's bounds check raised at a line of the user's kernel (an array
    indexed past its end, which the GPU does not check) as a :class:`SimHazard` naming the line.
    Any other stays as it is: a tuple's index (a typing error compiled), one raised in nbwgmma's
    own code or the simulator's."""
    if "out of bounds for axis" not in str(e):
        return e
    tb = e.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    f = tb.tb_frame  # where it was raised: the user's line (a NumPy array) or Numba's simulated array
    if file_bits(f.f_code.co_filename) & IN_OWN:  # nbwgmma's own code, the simulator's included
        return e
    here = os.path.dirname(os.path.abspath(__file__))
    while f is not None and (file_bits(f.f_code.co_filename) & IN_NUMBA or f.f_code.co_filename.startswith(here)):
        f = f.f_back  # Numba's simulated arrays and atomics, and the simulator's wrappers of the atomics
    if f is None or file_bits(f.f_code.co_filename) & IN_OWN:
        return e
    err = SimHazard(f"thread {th.thread_id} of block {tuple(th.blockIdx)} at {where_from(f, th)}: an index outside "
                    f"its array ({e}): the GPU does not check it, so a load reads whatever lies there and a store "
                    f"overwrites another array's data or faults; guard the access with the array's size")
    err.__cause__ = e
    return err


def python_only(e, call=""):
    """The :class:`SimError` for ``e`` where it is Python's arithmetic refusing, at a line of the user's
    code, what a compiled kernel computes without an error (Numba's NumPy error model: a logarithm or
    square root of a negative number, a float division by zero give an infinity or NaN, an integer
    division by zero gives 0): the simulator cannot model that line for those values. ``call``: the
    user's device function and its arguments, where ``e`` came from one. None for any other error
    (a ``ValueError`` other than a math domain error, one raised in nbwgmma's, Numba's, NumPy's or the
    standard library's code)."""
    if not (isinstance(e, ArithmeticError) or isinstance(e, ValueError) and str(e) == "math domain error"):
        return None
    tb = e.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    f = tb.tb_frame
    if file_bits(f.f_code.co_filename) or f"{os.sep}numpy{os.sep}" in f.f_code.co_filename:
        return None
    th = current()
    at = f"thread {th.thread_id} of block {tuple(th.blockIdx)} at {where_from(f, th)}" \
        if isinstance(th, SimThread) else f"{f.f_code.co_filename}:{f.f_lineno}"
    err = SimError(f"{at}{call}: Python's arithmetic raised {type(e).__name__}: {e}. A compiled kernel raises no "
                   f"error there (a float result is an infinity or NaN, an integer division by zero gives 0); the "
                   f"simulator cannot model this line for these values. Guard the value, or run this case on a GPU.")
    err.__cause__ = e
    return err


def me() -> SimThread:
    th = current()
    if not isinstance(th, SimThread):
        raise RuntimeError("nbwgmma intrinsics run in the simulator only inside kernels launched with "
                           "nbwgmma.launch.launch")
    return th
