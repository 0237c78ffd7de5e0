"""Simulated barriers and warpgroup controls: named barriers (whole warps, as the GPU counts
them), the cluster barrier, fences, ``elect.sync``, cluster ids, the timers, SM numbers and CTA
index, ``setmaxnreg`` (the CTA's register pool), ``trap``, ``griddepcontrol`` (no-ops: grids run one after another). The CTA
barrier ``syncthreads`` is :class:`~nbwgmma.sim.core.PhasedBarrier`; mbarriers are
:mod:`nbwgmma.sim.sync`'s."""

from __future__ import annotations

import time

import numpy as np

from ..errors import LaunchError, roles_unfilled
from .collective import collective, warp_members, warpgroup_members
from .core import CTA_EXIT_CHECKS, PhasedBarrier, SimHazard, SimStopped, acquire, me
from .declare import IMPLS, impl
from .sched import current


def _noop(**_):
    return None


for _n in ("fence_acq_rel_gpu", "fence_acq_rel_cluster", "fence_acq_rel_cta", "fence_mbarrier_init",
           "fence_proxy_tensormap_acquire", "fence_proxy_tensormap_release", "prefetch_tensormap",
           "griddep_wait", "griddep_launch_dependents"):  # (the simulator runs one grid at a time)
    IMPLS[_n] = _noop


@impl("fence_proxy_async", "fence_proxy_async_shared", "fence_proxy_async_global")
def _fence_proxy_async():
    """Generic-proxy writes of this thread before the fence become visible to the async proxy
    (to a reader that the fence is ordered before: :meth:`~nbwgmma.sim.shadow.Shadow.check_proxy`)."""
    th = me()
    with th.cl.lock:
        epochs, sites = th.cl.fences.setdefault(th.gid, ([], []))
        epochs.append(int(th.clock[th.gid]))
        sites.append(th.where)
        th.clock[th.gid] += 1


#: the SMs of the simulated GPU (an H100 SXM's): ``smid`` is a CTA's linear index in the grid modulo it
SIM_SMS = 132


@impl("globaltimer", "clock64")
def _timer():
    """The host's nanosecond counter: a thread's reads never go back, and they order its events; their
    differences say nothing of the GPU's time."""
    return np.uint64(time.perf_counter_ns())


@impl("cta_index")
def _cta_index():
    th = me()
    g, b = th.cl.grid, th.blockIdx
    return np.uint32(b.x + g[0] * (b.y + g[1] * b.z))


@impl("smid")
def _smid():
    return np.uint32(_cta_index() % SIM_SMS)


@impl("nsmid")
def _nsmid():
    return np.uint32(SIM_SMS)


@impl("cluster_ctarank")
def _ctarank():
    return np.uint32(me().cta.rank)


@impl("cluster_nctarank")
def _nctarank():
    return np.uint32(len(me().cl.ctas))


@impl("cluster_id")
def _cluster_id(axis):
    return np.uint32(me().cta.cluster_idx["xyz".index(axis)])


@impl("cluster_ctaid")
def _cluster_ctaid(axis):
    return np.uint32(me().cta.local["xyz".index(axis)])


class NamedBarrier(PhasedBarrier):
    """A named barrier of ``parties`` threads (``bar.sync`` / ``bar.arrive`` with a thread
    count). The GPU counts whole warps (PTX ISA, bar/barrier: the instruction "causes executing
    thread to wait for all non-exited threads from its warp and marks warps' arrival"): a warp
    arrives, counting the warp size, once every thread of it that has not exited has executed
    the instruction, so a warp whose other threads returned arrives with its remaining ones.
    Exited threads do not arrive. A waiting thread passes when the generation its warp was
    counted in completes."""

    def __init__(self, cta, parties, name):
        super().__init__(cta.cl, parties, name)
        self.cta = cta
        # warp -> its arrivals not yet counted, oldest first: each {thread id: (its clock at arrival,
        # the arrival's token)}; a thread arriving again before its warp was counted (two bar.arrive
        # in a row, the second run before the warp's other threads ran the first) is in the next one
        self.lanes = {}
        self.counted = {}  # arrival token -> the generation its warp was counted in (until it waits past it)
        self.tokens = 0

    def arrive(self):
        th = current()
        w = th.thread_id // 32
        with self.cl.lock:
            self.tokens += 1
            rounds = self.lanes.setdefault(w, [])
            for got in rounds:
                if th.thread_id not in got:
                    break
            else:
                got = {}
                rounds.append(got)
            got[th.thread_id] = (th.clock.copy(), self.tokens)
            th.clock[th.gid] += 1
            self.settle(w)
            return self.tokens

    def settle(self, w):
        """Count warp ``w``'s oldest arrivals while every thread of it still running has made them
        (under the lock)."""
        rounds = self.lanes.get(w)
        ex = self.cta.exited
        while rounds:
            got = rounds[0]
            if any(t not in got and t not in ex for t in range(32 * w, min(32 * w + 32, self.cl.nthreads))):
                return
            rounds.pop(0)
            if not rounds:
                del self.lanes[w]
            for c, tok in got.values():
                np.maximum(self.clock, c, out=self.clock)
                self.counted[tok] = self.gen
            self.count += 32
            self._check()

    def wait(self, tok=None):
        th = current()
        with self.cl.lock:
            self.cl.wait_for(lambda: tok in self.counted and self.gen > self.counted[tok], self._stuck_text,
                             cond=self.cond)
            acquire(th, self.done.get(self.counted.pop(tok)))

    def sync(self):
        self.wait(self.arrive())

    def thread_exited(self, th):
        """``th`` returned: its warp may now be whole here."""
        self.settle(th.thread_id // 32)

    def _stuck_text(self):
        part = "".join(f"; warp {w} has {len(got[0])} of its threads here, and the GPU counts a warp only when all "
                       f"its threads that have not exited arrive (threads "
                       f"{[t for t in range(32 * w, 32 * w + 32) if t not in got[0] and t not in self.cta.exited][:4]} "
                       f"are elsewhere)" for w, got in list(self.lanes.items())[:2])
        return f"waiting at the {self.name} ({self.count} of {self.parties} threads arrived, in whole warps{part})"


@impl("named_barrier_sync")
def _named(barrier_id, nthreads, _wait=True):
    th = me()
    barrier_id, nthreads = int(barrier_id), int(nthreads)
    if nthreads > th.cl.nthreads:  # on the GPU: a hang
        raise SimHazard(f"thread {th.thread_id} at {th.where}: named barrier {barrier_id} waits for {nthreads} "
                        f"threads, but the block has {th.cl.nthreads}: it can never complete"
                        f"{th.cl.fewer_threads_than_bounds()}")
    if barrier_id == 0 and nthreads == th.cl.nthreads:  # the barrier syncthreads is (bar.sync 0): one barrier
        if _wait:
            th.syncthreads()
        else:
            th.cta.syncthreads.arrive()
        return
    with th.cl.lock:
        if barrier_id == 0 and th.cta.syncthreads.count:
            raise SimHazard(f"thread {th.thread_id} at {th.where}: named barrier 0 with {nthreads} threads while "
                            f"threads wait at syncthreads, the same hardware barrier with all {th.cl.nthreads}: "
                            f"one barrier with two thread counts (give the named barrier another id)")
        bar = th.cta.named.get(barrier_id)
        if bar is None or bar.parties != nthreads:
            if bar is not None and (bar.count or bar.lanes):
                raise SimHazard(f"thread {th.thread_id} at {th.where}: named barrier {barrier_id} is in use with "
                                f"{bar.parties} threads; this call says {nthreads}")
            old = bar
            bar = th.cta.named[barrier_id] = NamedBarrier(th.cta, nthreads, f"named barrier {barrier_id}")
            bar.users = {}  # generation -> {thread: the line of its arrival} (this one and the last)
            if old is not None and old.gen:  # the id's last generation at its other count: the GPU's same barrier
                bar.users[-1], bar.done[-1] = old.users.get(old.gen - 1, {}), old.done[old.gen - 1]
        _check_users(th, bar, barrier_id, nthreads)
    tok = bar.arrive()
    if _wait:
        bar.wait(tok)


def _check_users(th, bar, barrier_id, nthreads):
    """A thread arriving at a generation of a named barrier whose previous generation other
    threads formed must have seen that one complete: the GPU counts arrivals from any warp, so two groups
    of threads sharing an id, unordered, can complete each other's generations (threads pass
    before their own group arrives), in orders this schedule need not have run."""
    g, me_ = bar.gen, th.thread_id
    prev = bar.users.get(g - 1)
    if prev is not None and me_ not in prev and not np.all(th.clock >= bar.done[g - 1]):
        sites = sorted(set(prev.values()))
        warps = sorted({t // 32 for t in prev})
        raise SimHazard(
            f"thread {me_} (warp {me_ // 32}) at {th.where}: named barrier {barrier_id} ({nthreads} threads) "
            f"was last completed by other threads (of warps {', '.join(map(str, warps))}, at {'; '.join(sites)}), "
            f"with nothing ordering that before this arrival: on the GPU one generation counts arrivals from any "
            f"warp, so groups of threads sharing an id can complete each other's generations and pass before "
            f"their own threads arrive. Give each group its own barrier id (the kit's tma_store_part uses 1 + cw)")
    bar.users.setdefault(g, {})[me_] = th.where
    bar.users.pop(g - 2, None)


IMPLS["named_barrier_arrive"] = lambda barrier_id, nthreads: _named(barrier_id, nthreads, _wait=False)


def _named_barriers_complete_at_exit(cta):
    """No named barrier of ``cta`` is left part-way (arrivals, no completion) when its last thread
    returns: a ``bar.arrive`` nobody completes (a turn passed to a warpgroup that takes none)."""
    for barrier_id, bar in sorted(cta.named.items()):
        if not (bar.count or bar.lanes):
            continue
        users = getattr(bar, "users", {}).get(bar.gen, {})
        sites = sorted(set(users.values()))
        ids = sorted(users)
        who = f"threads {ids[0]}-{ids[-1]}" if len(ids) > 1 else f"thread {ids[0]}" if ids else "threads"
        raise SimHazard(
            f"CTA rank {cta.rank} exits (its threads have all returned) with named barrier {barrier_id} "
            f"({bar.parties} threads) part-way: {bar.count} of its {bar.parties} threads arrived ({who}, at "
            f"{'; '.join(sites[:3]) or 'unknown lines'}) and none completed it. A named barrier left half-arrived "
            f"at exit is undefined (the next CTA on the SM may find it so); arrive only where the other threads "
            f"will sync (turn_pass only where the other warpgroup takes a turn after it: PingPong.tile's pass_turn "
            f"false for the last tile of the pair), and sync wherever a turn is passed to you (turn_wait before "
            f"each tile but warpgroup 0's first: PingPong.tile's wait_turn true there)")


CTA_EXIT_CHECKS.append(_named_barriers_complete_at_exit)


@impl("named_barrier_sync_id")
def _named_id(barrier_id, nthreads):
    if not 0 <= int(barrier_id) <= 15:
        th = me()
        raise SimHazard(f"thread {th.thread_id} at {th.where}: named barrier id {int(barrier_id)} is outside [0, 15]")
    _named(int(barrier_id), nthreads)


def _whole_warp(th, op, aligned):
    """An ``.aligned`` cluster barrier instruction is executed by every thread of the warp
    together (PTX ISA: barrier.cluster): a warp some of whose threads returned, or took another
    path, is reported as for any warp collective (use ``aligned=False`` for those)."""
    if aligned:
        collective(*warp_members(th), (f"{op}.aligned",), None)


@impl("cluster_arrive", "cluster_arrive_relaxed")
def _cluster_arrive(aligned=True):
    th = me()
    if th.cluster_token is not None:  # (PTX ISA, barrier.cluster: "each thread must arrive at the barrier only once
        # before the barrier completes"; a second arrival may complete a generation its peers have not reached)
        raise SimHazard(f"thread {th.thread_id} at {th.where}: cluster_arrive a second time with no cluster_wait "
                        f"after its first: each thread arrives once per phase of the cluster barrier, then waits")
    _whole_warp(th, "barrier.cluster.arrive", aligned)
    th.cluster_token = th.cl.barrier.arrive()


@impl("cluster_wait")
def _cluster_wait(aligned=True):
    th = me()
    if th.cluster_token is None:
        raise SimHazard(f"thread {th.thread_id} at {th.where}: cluster_wait without a preceding cluster_arrive")
    _whole_warp(th, "barrier.cluster.wait", aligned)
    th.cl.barrier.wait(th.cluster_token)
    th.cluster_token = None


@impl("cluster_sync")
def _cluster_sync(aligned=True):
    th = me()
    _whole_warp(th, "barrier.cluster", aligned)
    th.cl.barrier.sync()


@impl("elect_one_sync")
def _elect():
    th = me()
    collective(*warp_members(th), ("elect_one_sync",), None)
    return th.thread_id % 32 == 0  # the lowest lane of a full warp


def _registers(th, count, inc):
    """The warpgroup's register count becomes ``count`` in its CTA's pool, ``launch
    registers x threads``. ptxas gives a kernel with ``setmaxnreg`` the largest count it
    names, at most what the launch bounds allow (``65536 / threads`` rounded down to 8: 168
    for 384 threads); so an increase past that bound starts every warpgroup at the bound, and
    waits until the pool holds it, as on the GPU (a split asking for more than the launch
    allocated waits forever). Smaller increases cannot wait."""
    cta, cl = th.cta, th.cl
    if cta.reg_start is None:  # no launch bounds: the launch's registers are unknown
        return
    pool = cta.reg_start * cl.nthreads
    wg = th.thread_id // 128
    n = th.rounds[("setmaxnreg", wg)] = th.rounds.get(("setmaxnreg", wg), 0) + 1
    key = (wg, n)
    with cl.lock:
        if key in cta.reg_done:
            return
        owned = cta.reg_of.get(wg, cta.reg_start)
        # (the count at launch is the launch bounds' only where they bind below what ptxas would
        # give anyway: checked from there, or from the warpgroup's last setmaxnreg)
        known = wg in cta.reg_of or cta.reg_start < 248
        if known and ((count < owned) if inc else (count > owned)):  # PTX ISA, setmaxnreg: otherwise undefined
            raise SimHazard(
                f"thread {th.thread_id} at {th.where}: setmaxnreg_{'inc' if inc else 'dec'}({count}) in warpgroup {wg}, "
                f"which owns {owned} registers per thread: .{'inc' if inc else 'dec'} must ask for "
                f"{'at least' if inc else 'at most'} what it owns (the ISA leaves it undefined otherwise)")
        nwg = -(-cl.nthreads // 128)

        def used(new):
            return sum(min(128, cl.nthreads - 128 * w) * (new if w == wg else cta.reg_of.get(w, cta.reg_start))
                       for w in range(nwg))

        if inc and count > cta.reg_start:
            cl.wait_for(lambda: key in cta.reg_done or used(count) <= pool,
                        lambda: f"setmaxnreg_inc({count}) waits for registers the CTA's pool never frees: the "
                                f"launch allocated {cta.reg_start} per thread ({pool} for {cl.nthreads} "
                                f"threads) and the warpgroups' counts " + ", ".join(
                                    f"{cta.reg_of.get(w, cta.reg_start)}" for w in range(nwg)) +
                                f" with this one at {count} need {used(count)}")
        if key not in cta.reg_done:
            cta.reg_done.add(key)
            cta.reg_of[wg] = int(count)
            cl.cond.notify_all()


def _roles_filled(th):
    """A kernel with ``setmaxnreg`` gives its warpgroups roles: a block below its launch bounds
    leaves one without threads, its part undone (the GPU runs it; ``launch`` refuses it there
    from the compiled code, here at the first ``setmaxnreg``)."""
    cl = th.cl
    if cl.bound_threads is not None and cl.nthreads < cl.bound_threads:
        raise LaunchError(roles_unfilled(cl.kernel_name, cl.nthreads, cl.bound_threads, f" at {th.where}"))


def _synced_since_last(th, op):
    """PTX ISA, setmaxnreg: after one, all warps of the warpgroup must synchronize explicitly before
    the next. ``th``, at its warpgroup's ``n``-th, must be ordered after every thread's ``n - 1``-th
    (a barrier of the warpgroup or the CTA between them); its own is noted for the next."""
    wg = th.thread_id // 128
    n = th.rounds[("setmaxnreg sync", wg)] = th.rounds.get(("setmaxnreg sync", wg), 0) + 1
    marks = th.cta.reg_marks
    with th.cl.lock:
        for gid, (epoch, at) in marks.get((wg, n - 1), {}).items():
            if gid != th.gid and th.clock[gid] < epoch:
                raise SimHazard(
                    f"thread {th.thread_id} at {th.where}: {op} in warpgroup {wg} with nothing ordering after it "
                    f"the warpgroup's previous setmaxnreg (at {at}) in thread {gid % th.cl.nthreads}: the PTX ISA "
                    f"requires the warps of the warpgroup to synchronize explicitly between two setmaxnreg (a "
                    f"barrier of the warpgroup, warpgroup_sync, between them)")
        marks.setdefault((wg, n), {})[th.gid] = (int(th.clock[th.gid]), th.where)
        marks.pop((wg, n - 2), None)


@impl("setmaxnreg_inc")
def _setmaxnreg_inc(count):
    th = me()
    _roles_filled(th)
    collective(*warpgroup_members(th), ("setmaxnreg", int(count)), None, orders=False)  # (registers: no memory order)
    _synced_since_last(th, f"setmaxnreg_inc({int(count)})")
    _registers(th, int(count), True)


@impl("setmaxnreg_dec")
def _setmaxnreg_dec(count):
    th = me()
    _roles_filled(th)
    collective(*warpgroup_members(th), ("setmaxnreg", int(count)), None, orders=False)  # (registers: no memory order)
    _synced_since_last(th, f"setmaxnreg_dec({int(count)})")
    _registers(th, int(count), False)


@impl("trap")
def _trap():
    th = me()
    raise SimStopped(f"trap at {th.where} (block {tuple(th.blockIdx)} thread {th.thread_id})")
