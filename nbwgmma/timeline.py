"""The host's side of a kernel's timeline (:mod:`nbwgmma.kit.timeline`): the array a kernel records
into, read back as each CTA's times from the grid's first start.

    tl = Timeline(ctas=grid, events=("loads issued", "tiles done"))
    launch(kernel, grid, block, (..., tl.array))
    print(tl.summary())          # per event: earliest, median, latest; the latest CTAs and their SMs

Columns of a row: 0 the SM's number, 1 the CTA's start, 2... the events in the order named. An entry
the kernel did not write stays -1 (the array is poisoned when made): :meth:`Timeline.times` reports
it as NaN and :meth:`Timeline.summary` counts it as missing, never as a time.
"""

from __future__ import annotations

import numpy as np

from .errors import KitError

__all__ = ["Timeline"]


class Timeline:
    """A timeline of ``ctas`` CTAs, each with its SM, its start and ``events`` (names, in column
    order from column 2)."""

    def __init__(self, ctas: int, events=()):
        if not isinstance(ctas, (int, np.integer)) or isinstance(ctas, bool) or ctas < 1:
            raise KitError(f"Timeline: ctas must be a positive integer (the grid's CTAs); got {ctas!r}")
        events = tuple(events)
        if not all(isinstance(e, str) for e in events):
            raise KitError(f"Timeline: events must be names (strings); got {events!r}")
        from numba import cuda

        self.ctas, self.events = int(ctas), events
        #: the device array the kernel records into: int64, one row per CTA, poisoned with -1
        self.array = cuda.to_device(np.full((self.ctas, 2 + len(events)), -1, np.int64))

    def column(self, event: str) -> int:
        """The column of ``event`` (a name given when made): what the kernel's ``timeline_stamp(rec,
        col)`` takes for it. A column past the row is not checked on the GPU (a store out of bounds),
        so pass the kernel these rather than counting."""
        if event not in self.events:
            raise KitError(f"Timeline.column: no event {event!r}; this timeline's events are {self.events!r}")
        return 2 + self.events.index(event)

    def read(self) -> np.ndarray:
        """The rows as the kernel left them (int64; -1 where nothing was written)."""
        return self.array.copy_to_host()

    def times(self) -> tuple:
        """``(sm, t)``: each CTA's SM (-1 where not recorded) and its times in microseconds from the
        earliest start, one column per start and event (NaN where not recorded)."""
        rows = self.read()
        sm = rows[:, 0]
        stamps = rows[:, 1:]
        seen = stamps >= 0
        if not seen[:, 0].any():
            return sm, np.full(stamps.shape, np.nan)
        t0 = stamps[:, 0][seen[:, 0]].min()
        return sm, np.where(seen, (stamps - t0) / 1e3, np.nan)

    def summary(self, worst: int = 3, times=None) -> str:
        """Per column (start, then the events): the earliest, median and latest CTA in microseconds
        from the first start, and the CTAs missing it; then the ``worst`` CTAs whose last recorded
        time is latest, with their SMs and all their times. ``times``: :meth:`times` kept from an
        earlier launch (default: read now)."""
        sm, t = self.times() if times is None else times
        names = ("start",) + self.events
        width = max(len(n) for n in names)
        lines = [f"{self.ctas} CTAs on {len(set(sm[sm >= 0].tolist()))} SMs; us from the first start"]
        for j, name in enumerate(names):
            col = t[:, j]
            ok = col[~np.isnan(col)]
            missing = self.ctas - ok.size
            if ok.size == 0:
                lines.append(f"  {name:<{width}}  not recorded")
                continue
            lines.append(f"  {name:<{width}}  earliest {ok.min():8.2f}  median {np.median(ok):8.2f}  "
                         f"latest {ok.max():8.2f}" + (f"  ({missing} CTAs missing)" if missing else ""))
        last = np.array([np.nanmax(r) if not np.isnan(r).all() else -np.inf for r in t])
        for c in np.argsort(-last)[:worst]:
            if not np.isfinite(last[c]):
                break
            stamps = "  ".join(f"{n} {v:.2f}" for n, v in zip(names, t[c]) if not np.isnan(v))
            lines.append(f"  CTA {c} (SM {sm[c]}): {stamps}")
        return "\n".join(lines)
