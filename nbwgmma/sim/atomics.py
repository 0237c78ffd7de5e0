"""Atomics on simulated shared memory (``cuda.atomic.add(shared, i, v)``, ``cas``, ...).

An atomic is a read-modify-write: other threads' atomics on the same bytes may come before or
after it in any order without a race, but another thread's plain load or store of those bytes
must be ordered after every one of them (a barrier between), and an atomic after every plain
store and load of them by another thread. So, per byte an atomic reached, the shadow keeps each
thread's clock entry at its last atomic there (all of them, not only the last thread's, must be
ordered before a plain access); a plain store or a copy replaces them (whatever is ordered
after it is ordered after them).
"""

from __future__ import annotations

import numpy as np

from .core import SimHazard

__all__ = ["AtomicMarks"]


class AtomicMarks:
    """The atomics of one CTA's shared memory of ``nbytes`` bytes."""

    def __init__(self, nbytes):
        self.hit = np.zeros(nbytes, bool)  # bytes with atomics since their last plain store or copy
        self.clocks = {}  # byte -> each cluster thread's clock entry at its last atomic on it (0: none)
        self.sites = {}  # byte -> (thread id, where) of its last atomic, for the messages

    def record(self, th, idx):
        """``th`` updated ``idx`` atomically."""
        idx = np.atleast_1d(idx)
        self.hit[idx] = True
        for b in idx.tolist():
            v = self.clocks.get(b)
            if v is None:
                v = self.clocks[b] = np.zeros(len(th.clock), np.int64)
            v[th.gid] = th.clock[th.gid]
            self.sites[b] = (th.thread_id, th.where)

    def check(self, th, idx, what):
        """A plain access of ``idx`` by ``th`` must come after every other thread's atomic on
        those bytes."""
        idx = np.atleast_1d(idx)
        hit = self.hit[idx]
        if not hit.any():
            return
        for b in idx[hit].tolist():
            v = self.clocks[b]
            late = np.flatnonzero(th.clock[:len(v)] < v)
            late = late[late != th.gid]
            if late.size:
                tid, at = self.sites[b]
                raise SimHazard(
                    f"thread {th.thread_id} ({what} at {th.where}) accesses shared memory at 0x{b:x} that other "
                    f"threads update atomically (the last: thread {tid} at {at}), with nothing ordering "
                    f"every one of those atomics before this access: a barrier after the atomics is missing")

    def clear(self, idx):
        """A plain store or a copy replaced the bytes ``idx``."""
        idx = np.atleast_1d(idx)
        hit = self.hit[idx]
        if not hit.any():
            return
        hits = idx[hit]
        self.hit[hits] = False
        for b in hits.tolist():
            self.clocks.pop(b, None)
            self.sites.pop(b, None)
