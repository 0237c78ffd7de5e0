"""The simulator's scheduler: the threads of one cluster run as greenlets, one at a time.

Each simulated thread runs until it waits (a barrier, an mbarrier phase, a collective
instruction the rest of its group has not reached, a ``try_wait`` that fails) or yields
(after an atomic), then the next runnable thread runs. A switch is a few hundred nanoseconds
where an operating-system thread's hand-over of the interpreter lock costs tens of
microseconds: with hundreds of threads meeting at every collective, that hand-over was most
of a simulated kernel's time.

Whatever a waiting thread waits for changes only through a wake-up (:meth:`WaitQueue.notify_all`,
:meth:`Scheduler.wake`) or a thread's exit, and each of those counts as progress. When no
thread is runnable, every waiting thread looks again once (a *poll*: its wait re-checks
what it waits for); when nothing has progressed since the last poll, the cluster can never
move again, which on the GPU is a hang. Then a timed wait, or a ``try_wait`` whose thread
may do other work when it fails, gives up (one each per round without progress: it returns
False); when none can, the thread that has waited longest raises :class:`SimStopped` with
what it waits for, at once rather than after a deadline.

The order: first come, first run (the same every run), or with ``NBWGMMA_SIM_SCHEDULE=random:SEED``
the next thread drawn at random from the runnable ones at every switch (a kernel's result must
not depend on it; the hazard checks do not: :mod:`nbwgmma.sim.core`'s clocks).

What no wait sees: a thread that spins on memory with no intrinsic in its loop never lets
the others run (on the GPU such a loop is undefined without ``volatile`` or an atomic).
"""

from __future__ import annotations

from collections import deque

import greenlet

#: What a waiting thread is told when it runs again.
WOKEN, POLL, EXPIRED, STUCK = "woken", "poll", "expired", "stuck"


def current():
    """The running greenlet: a :class:`~nbwgmma.sim.core.SimThread` inside a simulated kernel."""
    return greenlet.getcurrent()


class WaitQueue:
    """The threads waiting for one thing (a barrier's next generation, an mbarrier's phase)."""

    __slots__ = ("sched", "waiters")

    def __init__(self, sched):
        self.sched, self.waiters = sched, []

    def notify_all(self):
        waiters, self.waiters = self.waiters, []
        self.sched.progress += 1
        for th in waiters:
            self.sched.wake(th, self)


class Scheduler:
    """Runs one cluster's threads (greenlets whose parent is the greenlet that made this)."""

    def __init__(self, rng=None):
        self.main = greenlet.getcurrent()
        self.runnable = deque()
        self.rng = rng  # a random.Random: the next thread drawn from the runnable ones; None: first come
        self.blocked = {}  # thread -> (its queue or None, may it give up), in the order they began to wait
        self.progress = 0
        self.polled = -1  # progress at the last poll

    def wake(self, th, queue=None):
        """Make ``th`` runnable if it waits (on ``queue``, where one is given)."""
        entry = self.blocked.get(th)
        if entry is None or (queue is not None and entry[0] is not queue):
            return
        del self.blocked[th]
        th.verdict = WOKEN
        self.progress += 1
        self.runnable.append(th)

    def wake_all(self):
        self.progress += 1
        for th in list(self.blocked):
            self.wake(th)

    def wait(self, th, queue=None, may_expire=False):
        """Suspend ``th`` until woken; returns WOKEN, POLL (look again), EXPIRED (give up:
        only where ``may_expire``) or STUCK (the cluster can never progress)."""
        if queue is not None:
            queue.waiters.append(th)
        self.blocked[th] = (queue, may_expire)
        self.main.switch()
        return th.verdict

    def pause(self, th):
        """Let the other runnable threads run first (``th`` stays runnable)."""
        th.verdict = WOKEN
        self.runnable.append(th)
        self.main.switch()

    def run(self, threads):
        """Run ``threads`` until every one has returned."""
        self.runnable.extend(threads)
        rng = self.rng
        while True:
            while self.runnable:
                if rng is not None:
                    self.runnable.rotate(-rng.randrange(len(self.runnable)))
                self.runnable.popleft().switch()
            if not self.blocked:
                return
            if self.polled != self.progress:  # something happened since the last look: look again
                self.polled = self.progress
                for th in self.blocked:
                    th.verdict = POLL
                self.runnable.extend(self.blocked)
                self.blocked.clear()
                continue
            # Nothing can change any more: one thread that may give up does, else the longest waiting is stuck.
            th = next((t for t, (_, may) in self.blocked.items() if may and t.expired_at != self.progress),
                      None)
            if th is not None:
                th.expired_at, th.verdict = self.progress, EXPIRED
            else:
                th = next(iter(self.blocked))
                th.verdict = STUCK
            del self.blocked[th]
            self.runnable.append(th)

