"""Collective instructions: the threads of a warp, a warpgroup or a whole CTA execute one
instruction together (a rendezvous per instruction and round), and the CTA-wide reductions
``syncthreads_count``/``_and``/``_or`` built on it."""

from __future__ import annotations

import numpy as np

from .core import SimHazard, SimStopped, acquire, me
from .site import where




class _Rendezvous:
    def __init__(self):
        self.rounds = {}


def collective(key, members, op, value, compute=None, orders=True, exited_ok=False):
    """The calling thread's part of one collective instruction ``op`` (a hashable: name and
    immediates) executed by the threads ``members`` (thread ids of the CTA) together.

    Every member passes ``value``; once all have arrived, ``compute(values in member
    order)`` runs once and every member gets its result (default: the list of values).
    Members reaching different instructions, or one that exited, are reported; with
    ``exited_ok`` (Numba's ``*_sync`` warp functions: "every non-exited thread named in the
    mask") a member that exited instead drops out, and the default result is a dict of the
    present members' values. With ``orders`` the clocks of all members are joined (the
    collective orders what each member did before it); without (``setmaxnreg``: a register
    operation, no memory ordering), not."""
    th = me()
    cta, cl = th.cta, th.cl
    if members[-1] >= cl.nthreads:
        raise SimHazard(f"thread {th.thread_id} at {th.where or where()}: {_op_text(op)} is collective over the "
                        f"{_group_name(len(members))} of threads {members[0]}..{members[-1]}, but the block has "
                        f"{cl.nthreads} threads")

    def finish(r, n):  # under the lock: every member that will come has come
        _check_same_op(r, len(members))
        present = [m for m in members if m in r["vals"]]
        vals = [r["vals"][m] for m in present]
        if orders:
            acquire(th, r["clock"])  # compute() sees what every member did before
        if compute is not None:
            r["result"] = compute(vals)
        else:
            r["result"] = dict(zip(present, vals)) if exited_ok else vals
        del rz.rounds[n]

    def complete(r):
        if not exited_ok:
            return len(r["vals"]) == len(members)
        return all(m in r["vals"] or m in cta.exited for m in members)

    with cl.lock:
        rz = cta.rendezvous.get(key)
        if rz is None:
            rz = cta.rendezvous[key] = _Rendezvous()
        n = th.rounds[key] = th.rounds.get(key, 0) + 1
        r = rz.rounds.get(n)
        if r is None:
            r = rz.rounds[n] = {"vals": {}, "ops": {}, "clock": None, "waiters": []}  # (clock: an ordering member's)
        r["vals"][th.thread_id] = value
        r["ops"][th.thread_id] = (op, th)  # (its line read if the ops differ: each member is still in this call)
        if orders:
            if r["clock"] is None:
                r["clock"] = cl.new_clock()
            np.maximum(r["clock"], th.clock, out=r["clock"])
        last = complete(r)
        if last:
            finish(r, n)
        else:
            r["waiters"].append(th)
    if last:
        for w in r["waiters"]:
            w.wake()
    else:
        def missing_text():
            gone = [m for m in members if m not in r["vals"] and m in cta.exited]
            late = [m for m in members if m not in r["vals"]]
            head = f"{_op_text(op)} is collective over the {_group_name(len(members))}; "
            if gone:
                return head + f"thread(s) {gone[:8]} exited without reaching it"
            return head + f"thread(s) {late[:8]} never reached it" + whereabouts(cta, late)

        def ready():
            if "result" in r:
                return True
            # (set operations first: a thread's exit is the rare case to look for)
            ex = cta.exited
            if ex and not ex.isdisjoint(members) and any(m not in r["vals"] for m in ex.intersection(members)):
                if not exited_ok:
                    raise SimStopped(f"block {tuple(th.blockIdx)} thread {th.thread_id} at {th.where or where()}: "
                                     + missing_text())
                with cl.lock:  # the members still missing exited: the round is complete without them
                    done = "result" not in r and complete(r)
                    if done:
                        finish(r, n)
                if done:
                    for w in r["waiters"]:
                        if w is not th:
                            w.wake()
                return "result" in r
            return False

        cl.wait_woken(th, ready, missing_text)
    if orders:
        acquire(th, r["clock"])
    th.clock[th.gid] += 1
    return r["result"]


def whereabouts(cta, tids) -> str:
    """Where the threads ``tids`` of ``cta`` are: the intrinsic each is in (a wait, most likely)."""
    spots = {}
    for t in tids:
        th = cta.threads.get(t)
        spots.setdefault(getattr(th, "where", None) or "between intrinsics", []).append(t)
    return "; they are at " + "; ".join(f"{at} (thread(s) {ts[:4]}{'...' if len(ts) > 4 else ''})"
                                          for at, ts in list(spots.items())[:3])


def _check_same_op(r, size):
    ops = {o for o, _ in r["ops"].values()}
    if len(ops) > 1:
        seen = sorted(((t, o, w.where) for t, (o, w) in r["ops"].items()), key=lambda x: x[0])
        first = seen[0]
        other = next(s for s in seen if s[1] != first[1])
        raise SimHazard(
            f"threads of one {_group_name(size)} reached different collective instructions: "
            f"thread {first[0]} {_op_text(first[1])} at {first[2]}, thread {other[0]} {_op_text(other[1])} "
            f"at {other[2]}; every thread of the group must execute the same one")


def _group_name(size):
    return {32: "warp", 128: "warpgroup"}.get(size, f"group of {size} threads")


def _op_text(op):
    return op[0] if isinstance(op, tuple) else str(op)


def warp_members(th):
    w = th.thread_id // 32
    return ("warp", w), range(32 * w, 32 * w + 32)


def warpgroup_members(th):
    g = th.thread_id // 128
    return ("warpgroup", g), range(128 * g, 128 * g + 128)


def _syncthreads_reduce(name, val, op):
    th = me()
    return op(collective(("syncthreads", 0), range(th.cl.nthreads), (name,), val))


def syncthreads_count(val):
    return _syncthreads_reduce("syncthreads_count", bool(val), lambda v: sum(bool(x) for x in v))


def syncthreads_and(val):
    return _syncthreads_reduce("syncthreads_and", val, lambda v: int(all(v)))


def syncthreads_or(val):
    return _syncthreads_reduce("syncthreads_or", val, lambda v: int(any(v)))
