"""A simulated CTA (:class:`CTA`): its shared-memory image with the image's shadow
(:mod:`nbwgmma.sim.shadow`), its shared arrays (:class:`SharedArray`, whose loads and stores go
through the shadow's checks), mbarriers, named barriers and collective rendezvous; and what a
CTA's exit must come after: its peers' accesses to its memory and barriers, and the completion
of every copy into it."""

from __future__ import annotations

import contextlib

import numpy as np

from .core import CTA_EXIT_CHECKS, DYN_BASE, SMEM_BYTES, PhasedBarrier, SimError, SimHazard, SimThread, me
from .sched import current
from .shadow import PENDING, POISON, Shadow
from .site import where

def _peers_done_before_exit(cta):
    """Every peer's access to ``cta`` (its memory, its barriers) ordered before ``cta`` exits."""
    for gid, (epoch, what, at, tid, rank) in cta.remote.items():
        if cta.exit_clock[gid] < epoch:
            raise SimHazard(
                f"CTA rank {cta.rank} exits (its threads have all returned) while nothing orders before that the "
                f"access of thread {tid} of CTA rank {rank} to its shared memory ({what} at {at}): on the GPU the "
                f"peer may reach that memory after it belongs to another CTA. End the kernel with a cluster "
                f"barrier (cluster_sync(False) by every thread still running; "
                f"the kit's pipe.teardown() does it for a TmaPipeline with cluster > 1, not for one of cluster=1 "
                f"beside a ClusterSplitK), so that no CTA leaves while a peer may still reach it")


def _copies_done_before_exit(cta):
    """Every copy into ``cta``'s shared memory seen complete (its barrier phase waited for) by a
    thread of ``cta`` before it exits."""
    for w in cta.shadow.writes:
        if w.phase != PENDING and cta.exit_clock[w.slot] < w.phase + 1:
            raise SimHazard(
                f"CTA rank {cta.rank} exits (its threads have all returned) with a copy into its shared memory, "
                f"issued at {w.where}, that none of its threads saw complete (phase {w.phase} of {w.name}, on "
                f"which it completes, was not waited for): on the GPU the copy may still land in memory the next "
                f"CTA on the SM is given. Wait for every copy a kernel issues (or issue none it does not use)")


CTA_EXIT_CHECKS.extend([_peers_done_before_exit, _copies_done_before_exit])


class SharedArray(np.ndarray):
    """A shared-memory array of a simulated CTA: loads and stores go through the hazard
    checks (a generic load must have observed the TMA writes it reads; a generic store must
    not hit memory an async read still holds)."""

    def _bytes(self, index):
        cta = me().cta
        base = self.__array_interface__["data"][0] - cta.image.__array_interface__["data"][0]
        if not 0 <= base < SMEM_BYTES:
            return None, cta
        try:
            v = np.ndarray.__getitem__(self.view(np.ndarray), index)
        except IndexError as e:  # on the GPU: another array's bytes, or an out-of-bounds fault
            th = me()
            raise SimHazard(f"thread {th.thread_id} at {where()}: a shared array of shape {self.shape} indexed "
                            f"with {index!r}: {e}") from None
        size = self.itemsize
        if isinstance(v, np.ndarray):
            if v.size == 0:
                return np.zeros(0, np.int64), cta
            start = v.__array_interface__["data"][0] - cta.image.__array_interface__["data"][0]
            grid = np.zeros(v.shape, np.int64) + start
            for ax, st in enumerate(v.strides):
                shape = [1] * v.ndim
                shape[ax] = v.shape[ax]
                grid = grid + (np.arange(v.shape[ax]) * st).reshape(shape)
            return (grid.reshape(-1, 1) + np.arange(size)).reshape(-1), cta
        idx = index if isinstance(index, tuple) else (index,)
        off = base
        for i, st, n in zip(idx, self.strides, self.shape):
            i = int(i)
            off += (i + n if i < 0 else i) * st
        return np.arange(off, off + size), cta

    def __getitem__(self, index):
        try:
            res = super().__getitem__(index)
        except IndexError:
            if _sim_thread() is not None:
                self._bytes(index)  # raises the SimHazard naming the kernel's line
            raise
        if isinstance(res, np.ndarray) and np.may_share_memory(res, self):
            return res  # a view (a row, a slice): an address computation; its elements are checked when read
        th = _sim_thread()
        if th is not None:
            idx, cta = self._bytes(index)
            if idx is not None:
                with _located(th), th.cl.lock:
                    cta.shadow.check_observed(th, idx, "a shared-memory load", generic=True)
        return res

    def atomic_view(self, index, what):
        """The running thread's atomic ``what`` on ``self[index]``, checked and recorded; the
        array as a plain ndarray for the operation itself (its load and store are the atomic's)."""
        th = _sim_thread()
        if th is not None:
            idx, cta = self._bytes(index)
            if idx is not None:
                with _located(th), th.cl.lock:
                    cta.shadow.atomic_access(th, idx, what)
        return self.view(np.ndarray)

    def __setitem__(self, index, value):
        th = _sim_thread()
        if th is not None:
            idx, cta = self._bytes(index)
            if idx is not None:
                with _located(th), th.cl.lock:
                    cta.shadow.generic_write(th, idx, "a shared-memory store", data=lambda: self._stored(index, value))
        super().__setitem__(index, value)

    def _stored(self, index, value):
        """The bytes ``self[index] = value`` writes, in :meth:`_bytes`' order."""
        new = np.array(np.ndarray.__getitem__(self.view(np.ndarray), index))
        new[...] = value
        return new.reshape(-1).view(np.uint8)


def _sim_thread():
    th = current()
    return th if isinstance(th, SimThread) else None


@contextlib.contextmanager
def _located(th):
    outer = th.where
    if outer is None:
        th.where = where()
    try:
        yield
    finally:
        th.where = outer


class CTA:
    """One simulated CTA: its shared-memory image with the image's shadow, its static and
    dynamic shared arrays, mbarriers, named barriers and collective rendezvous."""

    def __init__(self, cluster, rank, nthreads, dyn_bytes):
        self.cl, self.rank = cluster, rank
        # poisoned as the GPU leaves it, never zeros: a read of bytes nothing wrote gives NaN
        # (as f32, bf16, f16) or all ones, not a plausible answer (Shadow.check_observed)
        self.image = np.full(SMEM_BYTES, POISON, np.uint8)
        self.shadow = Shadow(self)
        self.dyn_bytes = dyn_bytes
        self.smem_limit = None  # the bytes a block may have, dynamic and static (sim.run sets it)
        self.valid = np.zeros(SMEM_BYTES, bool)  # the bytes the kernel has: dynamic, then static arrays
        self.valid[DYN_BASE:DYN_BASE + dyn_bytes] = True
        self.next_static = -(-(DYN_BASE + dyn_bytes) // 1024) * 1024
        self.static = {}
        self.mbarriers = {}
        self.barrier_names = {}
        self.named = {}
        self.rendezvous = {}
        self.exited = set()
        self.returned, self.exit_clock, self.left = 0, None, False  # threads returned, their clocks, all gone
        self.remote = {}  # peer thread gid -> its latest access here (epoch, what, where, thread, rank)
        self.threads = {}  # thread id -> SimThread
        self.wgmma = {}  # warpgroup -> wgmma issue state (nbwgmma.sim.wgmma)
        self.syncthreads = PhasedBarrier(cluster, nthreads, "syncthreads barrier")
        self.reg_start = None  # registers per thread at launch, setmaxnreg's pool (nbwgmma.sim.barriers): set by run()
        self.reg_of, self.reg_done = {}, set()
        self.reg_marks = {}  # (warpgroup, n) -> {thread gid: (its clock entry, line) at its n-th setmaxnreg}

    def array(self, shape, dtype, caller):
        """A shared array over this CTA's image: dynamic (shape 0) or one static array per
        source line, as Numba's simulator identifies them, at the same offset in every CTA of
        the cluster. Threads run at once: the allocation holds the cluster's lock, or two
        threads reaching the line together could each allocate an array of their own."""
        dtype = np.dtype(dtype)
        if shape == 0:  # as many whole elements as the dynamic bytes hold
            n = self.dyn_bytes - self.dyn_bytes % dtype.itemsize
            return self.image[DYN_BASE:DYN_BASE + n].view(dtype).view(SharedArray)
        with self.cl.lock:  # the first thread to reach the line allocates; the others wait for it
            arr = self.static.get(caller)
            if arr is None:
                # in every CTA of the cluster at once, at one offset: on the GPU a static array exists
                # from the kernel's start, where a peer's mapa address finds it
                shape = (shape,) if np.isscalar(shape) else tuple(shape)
                nbytes = int(np.prod(shape)) * dtype.itemsize
                start = -(-self.next_static // 128) * 128
                if start + nbytes > SMEM_BYTES:
                    raise MemoryError("simulated shared memory exhausted")
                static = sum(a.nbytes for a in self.static.values()) + nbytes
                if self.smem_limit is not None and self.dyn_bytes + static > self.smem_limit:
                    raise SimError(
                        f"the static shared array at {where()} ({nbytes} B; {static} B of static arrays with "
                        f"it) and the launch's {self.dyn_bytes} B of dynamic shared memory exceed the "
                        f"{self.smem_limit} B a block may have: the launch fails on the GPU (take the static "
                        f"bytes off the dynamic request)")
                for cta in self.cl.ctas:
                    cta.next_static = start + nbytes
                    cta.valid[start:start + nbytes] = True
                    raw = cta.image[start:start + nbytes].view(dtype).reshape(shape)
                    cta.static[caller] = raw.view(SharedArray)
                arr = self.static[caller]
        return arr

    def place(self, off) -> str:
        """Where shared byte ``off`` lies: in the dynamic shared memory (its offset from the start,
        what the kernel's own offsets count) or a static array (its line and offset)."""
        if DYN_BASE <= off < DYN_BASE + self.dyn_bytes:
            return f"byte {off - DYN_BASE} of the dynamic shared memory"
        for (fname, line), arr in self.static.items():
            start = self.offset_of(arr)
            if start <= off < start + arr.nbytes:
                return f"byte {off - start} of the static shared array at {fname}:{line}"
        return "outside the kernel's shared memory"

    def offset_of(self, arr) -> int:
        off = arr.__array_interface__["data"][0] - self.image.__array_interface__["data"][0]
        if not 0 <= off < SMEM_BYTES:
            th = me()
            raise SimHazard(f"thread {th.thread_id} at {where()}: smem_addr of an array that is not in this CTA's "
                            f"shared memory (a global or local array?)")
        return off
