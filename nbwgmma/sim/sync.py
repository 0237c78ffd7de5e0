"""Simulated mbarriers: phases, arrivals, transaction bytes, waits by parity or state token,
and what a hang report says of them. Barriers of other kinds, fences and warpgroup controls:
:mod:`nbwgmma.sim.barriers`; addresses and plain loads and stores: :mod:`nbwgmma.sim.address`."""

from __future__ import annotations

import numpy as np

from .address import addr_of, mapa, split, split_local
from .core import SimHazard, acquire, me, release
from .declare import IMPLS, impl
from .shadow import note_remote


# mbarriers ------------------------------------------------------------------------------

#: Arrivals an mbarrier keeps for the parity check's count; past it, a parity wait must know the
#: previous phase complete from a wait, a barrier or its own completing arrival.
ARRIVALS_KEPT = 1 << 16


class MBarrier:
    """An mbarrier's state: phase (completed phases so far), pending arrivals, transaction
    bytes, the clocks that carry happens-before from arrivers to waiters, and its init by
    thread ``th`` (an event every use must be ordered after)."""

    def __init__(self, cta, off, count, th):
        self.cta, self.off = cta, off
        th.clock[th.gid] += 1  # (a later release of th publishes it)
        self.init_gid, self.init_epoch, self.init_where = th.gid, int(th.clock[th.gid]), th.where
        self.expected = self.pending = int(count)
        self.tx = 0
        self.expected_bytes = self.arrived_bytes = 0
        prev = cta.cl.barrier_at.get((cta.rank, off))
        if prev is None:
            self.phase, self.slot = 0, cta.cl.new_slot()
        else:  # an mbarrier initialized here again (after mbarrier_inval): its vector-clock slot, with
            # the phases counted on past the earlier barrier's (whose completions clocks still hold),
            # from an even number (the parities restart at 0, as after an init on the GPU)
            self.phase, self.slot = prev.phase + (prev.phase & 1), prev.slot
        self.first = self.phase  # its first phase: a parity wait for it needs no earlier one seen
        cta.cl.barrier_at[(cta.rank, off)] = self
        self.clock = cta.cl.new_clock()
        self.done = {}  # completed phase -> clock
        # every arrival since the init, (gid, epoch, count), for the parity check's count (None
        # past ARRIVALS_KEPT), and the completed phases that had transaction bytes
        self.arrival_log, self.byte_phases = [], set()
        self.sites, self.done_sites = [], {}  # the arrivals' lines: this phase's, and by completed phase
        self.expects = []  # this phase's standalone expect_tx no arrival is ordered after yet: (gid, epoch, tid, line)
        self.landed = {}  # this phase's copies: (what, issuing line, bytes) -> how many
        self.arrivers = {}  # (CTA, thread id) -> line: every thread that arrived on it or armed it, any phase
        self.cond = cta.cl.new_cond()

    def label(self):
        name = self.cta.barrier_names.get(self.off)
        at = f"shared address 0x{addr_of(self.cta, self.off):x}"
        return f"mbarrier '{name}' at {at}" if name else f"mbarrier at {at}"

    def state(self):
        short = "" if self.pending or self.tx <= 0 else (
            ": every arrival is in, the bytes are short (copies not issued, or maps whose boxes bring "
            "fewer bytes than the expect_tx counted: check each map's box against the stage's bytes); "
            + (f"the copies that landed in this phase: {self.landed_copies()}" if self.landed
               else "no copy landed in this phase"))
        return (f"its current phase, not yet complete, is {self.phase} (parity {self.phase & 1}), with "
                f"{self.pending} of "
                f"{self.expected} arrivals pending and {self.tx} transaction bytes pending "
                f"({self.expected_bytes} expected, {self.arrived_bytes} arrived in this phase){short}")

    def landed_copies(self) -> str:
        """This phase's copies so far, alike ones counted together."""
        parts = [f"{n} x {what} ({nbytes} bytes{' each' if n > 1 else ''}) issued at {at}"
                 for (what, at, nbytes), n in self.landed.items()]
        return "; ".join(parts[:6]) + (f"; and {len(parts) - 6} more" if len(parts) > 6 else "")

    def _check(self, th):
        if self.pending == 0 and self.tx < 0:
            raise SimHazard(
                f"thread {th.thread_id} at {th.where}: {self.label()} received {-self.tx} more transaction bytes "
                f"than its phase {self.phase} expects ({self.arrived_bytes} arrived, {self.expected_bytes} expected, "
                f"every arrival made): on the GPU the phase completes while bytes are still landing")
        if self.pending == 0 and self.tx == 0:
            c = self.clock
            c[self.slot] = self.phase + 1
            self.done[self.phase] = c
            self.done.pop(self.phase - 4, None)
            self.done_sites[self.phase] = self.sites
            if self.expected_bytes or self.arrived_bytes:
                self.byte_phases.add(self.phase)
            self.done_sites.pop(self.phase - 4, None)
            self.sites, self.expects, self.landed = [], [], {}
            self.clock = self.cta.cl.new_clock()
            self.phase += 1
            self.pending = self.expected
            self.expected_bytes = self.arrived_bytes = 0
            self.cond.notify_all()

    def update(self, th, arrivals=0, tx=0):
        if th.cta is not self.cta:
            note_remote(th, self.cta, "an arrival or bytes on " + self.label())
        state = self.phase
        if arrivals > self.pending:
            raise SimHazard(
                f"thread {th.thread_id} at {th.where}: {arrivals} arrival(s) on {self.label()} whose phase "
                f"{self.phase} has only {self.pending} of {self.expected} pending")
        if tx > 0:
            self.expected_bytes += tx
        else:
            self.arrived_bytes -= tx
        if tx > 0 and not arrivals:
            self.expects.append((th.gid, int(th.clock[th.gid]), th.thread_id, th.where))
        if arrivals:
            self._check_expects(th, arrivals)
        if arrivals or tx > 0:
            self.arrivers.setdefault((th.cta, th.thread_id), th.where)
        self.tx += tx
        own = self._completes_alone(th, arrivals)
        self.pending -= arrivals
        if arrivals and self.arrival_log is not None:
            self.arrival_log.append((th.gid, int(th.clock[th.gid]), arrivals))
            if len(self.arrival_log) > ARRIVALS_KEPT:
                self.arrival_log = None
        if arrivals:
            release(th, self.clock)
            if th.where not in self.sites:
                self.sites.append(th.where)
        else:  # bytes or expect_tx alone: the issuer's past joins the phase, no release of its own
            np.maximum(self.clock, th.clock, out=self.clock)
        self._check(th)
        if own:  # (its own arrival completed the phase: a later parity wait of it knows that)
            th.clock[self.slot] = max(th.clock[self.slot], state + 1)
        return np.uint64(state)

    def _completes_alone(self, th, arrivals):
        """Whether ``th``'s ``arrivals`` complete the phase with every other arrival of it ordered
        before them and no transaction bytes in it: in every order of the threads the phase then
        completes at this arrival, so the arriving thread knows it complete (a count-1 barrier a
        thread arrives on again and again before one parity wait for the last phase: the barrier
        state a later wait of the same thread reads, PTX ISA, mbarrier: phase completion when the
        pending count reaches zero). The thread must know the phase before complete too (else in
        another order its arrival counts there). Bytes land asynchronously: a phase with any is
        not known."""
        return bool(arrivals and arrivals == self.pending and self.tx == 0 and self.expected_bytes == 0
                    and not self.expects and (self.phase == self.first or th.clock[self.slot] >= self.phase)
                    and np.all(th.clock >= self.clock))

    def _check_expects(self, th, arrivals):
        """A standalone expect_tx must be ordered before one of its phase's arrivals (program order
        or a barrier): the phase completes only once they are all in, so it counts its bytes then.
        Otherwise, when this arrival makes the pending count zero, the GPU may have taken the
        arrivals first and completed the phase with no bytes pending (PTX ISA, mbarrier: phase
        completion, when the pending arrival count and the tx-count both reach zero)."""
        self.expects = [e for e in self.expects if th.clock[e[0]] < e[1]]
        if self.expects and arrivals == self.pending:
            _, _, tid, at = self.expects[0]
            raise SimHazard(
                f"thread {th.thread_id} at {th.where}: this arrival completes the pending arrivals of phase "
                f"{self.phase} of {self.label()}, but the mbarrier_expect_tx of thread {tid} at {at} is ordered "
                f"before none of them: on the GPU the arrivals can come first and complete the phase with no "
                f"transaction bytes pending, before the copies land (use mbarrier_arrive_expect_tx, or expect_tx "
                f"before an arrival of the same thread or before a barrier the arriving threads pass)")

    def arrivers_gone(self) -> str:
        """Where every thread that ever arrived on this barrier or armed it has exited, a sentence
        saying so (a producer that left its loop before the consumers' last wait); where none
        ever did, a sentence saying that (a release never made: a stage's consumers never
        arrived on its "empty" barrier); else ""."""
        if not self.arrivers and self.pending:
            return (". No thread has arrived on this barrier or armed it yet, in any phase: is the arrival "
                    "the wait needs ever made (a stage released by its consumers, pipe.consumer_release or "
                    "Cooperative.drain after tile_open; a producer's expect_tx)?")
        if not self.arrivers or self.pending == 0 or any(tid not in cta.exited for cta, tid in self.arrivers):
            return ""
        many = len({cta for cta, _ in self.arrivers}) > 1
        who = [f"thread {f'{c.rank}:{t}' if many else t} at {at}" for (c, t), at in self.arrivers.items()]
        return (f". Every thread that arrived on this barrier or armed it before has exited ({'; '.join(who[:3])}"
                f"{f' and {len(who) - 3} more' if len(who) > 3 else ''}): unless a thread that never arrived is to, "
                f"none will. Did they leave their loop early, walking fewer tiles or stages than the waiting threads?")

    def completed(self, state=None, parity=None):
        """The completed phase a wait for ``state``/``parity`` returns on, or None."""
        if parity is None:
            s = int(state)
            return s if self.phase != s else None
        if (self.phase & 1) != (int(parity) & 1):
            return self.phase - 1  # -1: the phase "before phase 0", complete from the start
        return None

    def check_token(self, th, state):
        """A wait of ``th`` for ``state`` that found it complete: the ISA defines the test of a
        state only in the phase after it (mbarrier.test_wait: the current phase or the one
        before); two or more phases on, the GPU compares the phase's parity and may wait on."""
        s = int(state)
        if self.phase - s >= 2:
            sites = ", ".join(self.done_sites.get(self.phase - 1, [])[:3])
            raise SimHazard(
                f"thread {th.thread_id} at {th.where}: tests {self.label()} with the state of phase {s} (its "
                f"arrival's token), but phases {s}-{self.phase - 1} have completed: the PTX ISA defines the test "
                f"only for the current phase or the one before it (mbarrier.test_wait), and on the GPU the wait "
                f"can see phase {s} as not complete and hang. More arrivals than the {self.expected} a phase "
                f"expects? (phase {self.phase - 1}'s came from {sites or 'unknown lines'})")


def mbar(bar, create=None, peer=False):
    """The mbarrier at ``bar`` (``create``: initialized there with that count), a ``.shared::cta``
    address unless ``peer`` (the ``.shared::cluster`` forms: a remote arrival, a copy's completion)."""
    cta, off = split(bar) if peer else split_local(bar)
    th = me()
    if off % 8:
        raise SimHazard(f"thread {th.thread_id} at {th.where}: mbarrier address 0x{int(bar):x} is not 8-byte aligned")
    if create is not None:
        cta.shadow.check_bounds(th, np.arange(off, off + 8), "mbarrier_init")
        m = cta.mbarriers[off] = MBarrier(cta, off, create, th)
        return m
    m = cta.mbarriers.get(off)
    if m is None:
        raise SimHazard(f"thread {th.thread_id} at {th.where}: mbarrier at 0x{int(bar):x} used before mbarrier_init")
    if th.clock[m.init_gid] < m.init_epoch:  # the init happened first here, but nothing orders it first
        raise SimHazard(f"thread {th.thread_id} at {th.where}: {m.label()} is used with nothing ordering its "
                        f"mbarrier_init (at {m.init_where}) before this use: a syncthreads (or a cluster barrier) "
                        f"after the init is missing")
    return m


#: The largest arrival count and transaction count of an mbarrier phase (PTX ISA, "Size and
#: alignment of mbarrier object" / "Contents of the mbarrier object": counts in [1, 2^20 - 1],
#: tx-count in [-(2^20 - 1), 2^20 - 1]).
MBAR_COUNT_MAX = (1 << 20) - 1


def _count(value, low, what):
    """``value`` as an int, which must lie in [low, 2^20 - 1] (``what`` names it in the report)."""
    v = int(value)
    if not low <= v <= MBAR_COUNT_MAX:
        th = me()
        raise SimHazard(f"thread {th.thread_id} ({th.op} at {th.where}): {what} {v} is outside [{low}, "
                        f"{MBAR_COUNT_MAX}] (PTX ISA, mbarrier: counts of a phase lie in [1, 2^20 - 1], "
                        f"transaction counts in [0, 2^20 - 1]); the result is undefined")
    return v


@impl("mbarrier_init")
def _mb_init(bar, count):
    th = me()
    count = _count(count, 1, "the expected arrival count")
    with th.cl.lock:
        mbar(bar, create=count)


@impl("mbarrier_name")
def _mb_name(bar, name, index=-1):
    th = me()
    cta, off = split(bar)
    with th.cl.lock:
        cta.barrier_names[off] = name if int(index) < 0 else f"{name}[{int(index)}]"


def mb_update(bar, arrivals=0, tx=0, peer=False):
    th = me()
    with th.cl.lock:
        return mbar(bar, peer=peer).update(th, arrivals, tx)


def complete_tx(th, m, nbytes, what="a copy"):
    """A copy issued by ``th`` delivers ``nbytes`` on ``m`` (call with the lock held); ``what`` names
    it in a hang's report of the phase's copies."""
    key = (what, th.where, int(nbytes))
    m.landed[key] = m.landed.get(key, 0) + 1
    m.update(th, tx=-int(nbytes))


IMPLS["mbarrier_arrive"] = lambda bar, scope="cta": mb_update(bar, arrivals=1)
IMPLS["mbarrier_arrive_count"] = (
    lambda bar, count, scope="cta": mb_update(bar, arrivals=_count(count, 1, "the arrival count")))
IMPLS["mbarrier_arrive_expect_tx"] = (
    lambda bar, tx, scope="cta": mb_update(bar, arrivals=1, tx=_count(tx, 0, "the transaction count")))
IMPLS["mbarrier_expect_tx"] = (
    lambda bar, tx, scope="cta": (mb_update(bar, tx=_count(tx, 0, "the transaction count")), None)[1])
IMPLS["mbarrier_arrive_cluster"] = lambda bar, cta, scope="cta": (mb_update(mapa(bar, cta), arrivals=1, peer=True),
                                                                           None)[1]


def _observe(th, m, done, parity=None):
    if parity is not None and done is not None and done > m.first:
        _check_parity_known(th, m, done, int(parity))
    if done is not None and done >= 0:
        acquire(th, m.done.get(done))
        th.last_phase = (m, done)  # what a hazard of its next writes can name (nbwgmma.sim.shadow)
        seen = th.__dict__.setdefault("mb_seen", {})
        seen[m] = max(done, seen.get(m, -1))


def _check_parity_known(th, m, done, parity):
    """A parity wait tells phase ``done`` from ``done - 2`` only where the waiter knows phase
    ``done - 1`` complete (a wait of its own, or a barrier or turn after another thread's):
    otherwise the threads may run so that the barrier is still in phase ``done - 1`` when it
    waits, and the same wait returns at once on phase ``done - 2``, whatever order this run took."""
    if th.clock[m.slot] >= done:  # (a completed phase p's clock holds p + 1 in the barrier's entry)
        return
    if _completed_by_count(th, m, done):
        return
    earlier = "the state before its first phase" if done - 2 < m.first else f"phase {done - 2}"
    raise SimHazard(
        f"thread {th.thread_id} at {th.where}: waits on {m.label()} for parity {parity} and passes on the "
        f"completion of phase {done}, but nothing orders the completion of phase {done - 1} before this wait: "
        f"the threads may run so that the barrier is still in phase {done - 1} here, and then the wait passes at "
        f"once, on {earlier} (a parity wait sees only the latest completion). Wait for every phase of the barrier "
        f"(a consumer skipping another's stages with advance_by must take its turn first: turn_wait, "
        f"PingPong.tile's wait_turn), or check the (s, ph) this wait is given")


def _completed_by_count(th, m, done):
    """Whether the arrivals ordered before ``th`` are enough to complete every phase before
    ``done`` in any order of the threads: phases of arrivals alone (bytes land asynchronously),
    the count fixed since the init (a thread making all but one of a barrier's arrivals, another
    thread the last, unordered, before a wait on the last phase)."""
    log = m.arrival_log
    if log is None or any(m.first <= p < done for p in m.byte_phases):
        return False
    seen = sum(n for gid, epoch, n in log if th.clock[gid] >= epoch)
    return seen >= (done - m.first) * m.expected


def _passed_by(th, m, parity):
    """Where thread ``th``, blocked on a parity wait of ``m``, missed the phase it waited for: the
    text saying so, or "". A parity wait sees only the latest completion: when two or more phases
    completed after the last one the thread saw (more arrivals than a phase's count: every thread
    of a warpgroup releasing a stage counted once), the one it waited for went by."""
    if parity is None:
        return ""
    seen = getattr(th, "mb_seen", {}).get(m, -1)
    since = m.phase - 1 - seen
    if since < 2:
        return ""
    sites = ", ".join(m.done_sites.get(m.phase - 1, [])[:3])
    return (f". It missed phase {seen + 1}: phases {seen + 1}-{m.phase - 1} completed after the last one this "
            f"thread saw ({'none' if seen < 0 else seen}), and a parity wait sees only the latest: more arrivals "
            f"than the {m.expected} a phase expects, or this wait's stage and phase behind the ring's fills (a "
            f"consumer's (s, ph), or the fill count PingPong.ragged's it gives, counted short)? (phase "
            f"{m.phase - 1}'s came from {sites or 'unknown lines'})")


def _mb_test(bar, state=None, parity=None):
    """A phase not complete yet lets the other threads run first (a kernel that tests in a loop
    would otherwise spin alone: :mod:`nbwgmma.sim.sched`), then tests again."""
    th = me()
    with th.cl.lock:
        m = mbar(bar)
        done = m.completed(state, parity)
        if done is None and th.cl.spin(th, lambda: m.completed(state, parity) is not None,
                                       lambda: f"{m.label()}, tested (try_wait/test_wait) for "
                                               f"{_wanted(state, parity)} again and again; {m.state()}"
                                               f"{_passed_by(th, m, parity)}", m.cond):
            done = m.completed(state, parity)
        if done is not None and state is not None:
            m.check_token(th, state)
        _observe(th, m, done, parity)
        return done is not None


def _wanted(state, parity):
    return f"parity {int(parity)} (the completion of a phase of that parity)" if parity is not None \
        else f"state 0x{int(state):x}"


def _mb_wait(bar, state=None, parity=None, timeout_s=None):
    th = me()
    with th.cl.lock:
        m = mbar(bar)
        ok = th.cl.wait_for(lambda: m.completed(state, parity) is not None,
                            lambda: f"{m.label()}, waiting for {_wanted(state, parity)}; {m.state()}"
                                    f"{_passed_by(th, m, parity)}{m.arrivers_gone()}", timeout_s,
                            cond=m.cond)
        if ok:
            if state is not None:
                m.check_token(th, state)
            _observe(th, m, m.completed(state, parity), parity)
    return ok if timeout_s is not None else None


IMPLS["mbarrier_try_wait"] = IMPLS["mbarrier_test_wait"] = lambda bar, state, scope="cta": _mb_test(bar, state=state)
IMPLS["mbarrier_try_wait_parity"] = IMPLS["mbarrier_test_wait_parity"] = (
    lambda bar, parity, scope="cta": _mb_test(bar, parity=parity))
IMPLS["mbarrier_wait"] = lambda bar, state, scope="cta": _mb_wait(bar, state=state)
IMPLS["mbarrier_wait_parity"] = lambda bar, parity, scope="cta": _mb_wait(bar, parity=parity)
IMPLS["mbarrier_wait_timeout"] = (
    lambda bar, state, timeout_ns, scope="cta": _mb_wait(bar, state=state, timeout_s=int(timeout_ns) / 1e9))
IMPLS["mbarrier_wait_parity_timeout"] = (
    lambda bar, parity, timeout_ns, scope="cta": _mb_wait(bar, parity=parity, timeout_s=int(timeout_ns) / 1e9))


@impl("mbarrier_inval")
def _mb_inval(bar):
    th = me()
    with th.cl.lock:
        cta, off = split_local(bar)
        cta.mbarriers.pop(off, None)
