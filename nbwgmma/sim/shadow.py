"""The shadow of a simulated CTA's shared-memory image (:class:`Shadow`; the CTA itself is
:mod:`nbwgmma.sim.cta`): who last wrote each byte, and which asynchronous reads of it are in
flight. The hazard checks live here.

Per byte the shadow keeps

* the last generic-proxy writer (thread and its clock epoch), so that an async-proxy read
  (wgmma operand, TMA store source) can require ``fence.proxy.async`` by that writer and
  the write ordered before the read;
* the last TMA / bulk copy that wrote it, so that a read can require the phase of the
  mbarrier that copy completes on to have been observed;
* per async reader (a warpgroup's wgmmas, a thread's bulk stores) the sequence number of
  the latest read of it, so that a write can require that read to be complete (waited
  for) and its completion ordered before the write;
* the last generic reader (thread and epoch), so that another thread's store or copy can
  require that read ordered before it;
* whether anything has written it since the launch (the image starts as ``POISON`` bytes).
"""

from __future__ import annotations

import numpy as np

from .atomics import AtomicMarks
from .core import DYN_BASE, SMEM_BYTES, SimHazard


#: aw_swizzle's marks of a TMA tile copy's swizzle; 0 for bytes no swizzling copy laid out. A copy
#: without swizzle is a plain copy: data arranged beforehand in global memory (a shared-memory
#: image, say) may be read through a descriptor of any swizzle, so it makes no claim.
SWIZZLE_MARK = {"32B": 2, "64B": 3, "128B": 4}
#: a fragment store's layout claims "none" too: its block read by a swizzled TMA store is scrambled
#: (a TMA copy through a map without swizzle stays no claim: a plain copy of data arranged beforehand)
FRAGMENT_SWIZZLE_MARK = {**SWIZZLE_MARK, "none": 1}
SWIZZLE_OF_MARK = {v: k for k, v in FRAGMENT_SWIZZLE_MARK.items()}
#: aw_type's marks of a TMA tile copy's element type where the map's type names a number format
#: (tf32 reads f32 values); 0 for bytes of a map of integers (u8, s8, u16, ...: containers for any
#: format's bits, as NumPy holds bf16 and fp8, so an s8 tile read as u8 or e4m3 is not reported)
#: or that no TMA tile copy wrote.
TYPE_MARK = {"f16": 1, "bf16": 2, "f32": 3, "tf32": 3, "e4m3": 4, "e5m2": 5}
TYPE_OF_MARK = {1: "f16", 2: "bf16", 3: "f32", 4: "e4m3", 5: "e5m2"}


class AsyncRead:
    """One asynchronous read of shared memory (a wgmma's operands, a TMA store's source).
    ``done_by``: (thread, its clock entry, line) of each wait that saw it complete (every thread
    of a warpgroup passing the ``wgmma_wait_group`` that covers a wgmma); a write after it must
    be ordered after one of them. ``issue_clock``: a wgmma's, the join of its threads' clocks at
    issue, which its wait passes on (:mod:`nbwgmma.sim.wgmma`)."""

    __slots__ = ("what", "where", "done", "done_by", "issue_clock")

    def __init__(self, what, where):
        self.what, self.where = what, where
        self.done = False
        self.done_by = []
        self.issue_clock = None

    def complete(self, th):
        self.done = True
        self.done_by.append((th.gid, int(th.clock[th.gid]), th.where))

    def seen_by(self, th) -> bool:
        """Whether ``th`` is ordered after a wait that saw this read complete."""
        return any(th.clock[g] >= e for g, e, _ in self.done_by)


class AsyncWrite:
    """One TMA load / bulk copy into shared memory, completing on an mbarrier phase."""

    __slots__ = ("where", "slot", "phase", "name")

    def __init__(self, where, slot, phase, name):
        self.where, self.slot, self.phase, self.name = where, slot, phase, name


def unique_offsets(parts):
    """The distinct shared-memory offsets in the arrays ``parts``, sorted (``np.unique`` of them):
    through a mask over the image where they lie in it, some 50 times quicker for a wgmma's
    operands (about 50,000 offsets)."""
    flat = [p.reshape(-1) for p in parts]
    if any(f.size and (f.min() < 0 or f.max() >= SMEM_BYTES) for f in flat):  # out of the image: the checks say so
        return np.unique(np.concatenate(flat))
    mask = np.zeros(SMEM_BYTES, bool)
    for f in flat:
        mask[f] = True
    return np.flatnonzero(mask)


#: Every byte of a CTA's shared memory at launch: an earlier kernel's leftovers on the GPU.
POISON = 0xFF

#: The phase of a copy issued but not landed yet (a ``cp.async`` before its thread's arrival):
#: no thread has seen it complete; its own landing replaces it.
PENDING = 1 << 62


class Shadow:
    def __init__(self, cta):
        self.cta = cta
        self.gw_tid = np.zeros(SMEM_BYTES, np.int32)  # generic writer's cluster thread id + 1
        self.gw_epoch = np.zeros(SMEM_BYTES, np.int64)
        self.gw_site = np.zeros(SMEM_BYTES, np.int32)  # index into self.sites of the generic write
        self.gw_swizzle = np.zeros(SMEM_BYTES, np.int8)  # a fragment store's layout (FRAGMENT_SWIZZLE_MARK)
        self.sites = [("", "")]  # (what, where) of the generic writes, for the hazards' messages
        self.site_ids = {}
        self.aw = np.zeros(SMEM_BYTES, np.int32)  # index + 1 into self.writes
        self.aw_swizzle = np.zeros(SMEM_BYTES, np.int8)  # a TMA tile's swizzle (SWIZZLE_MARK), 0 for other writes
        self.aw_type = np.zeros(SMEM_BYTES, np.int8)  # a TMA tile's element type (TYPE_MARK), 0 for other writes
        self.writes = []
        self.readers = {}  # key -> (seq per byte, [AsyncRead, ...] with index = seq - 1)
        self.written = np.zeros(SMEM_BYTES, bool)  # bytes any write (generic or a copy's) reached since launch
        self.gr_tid = np.zeros(SMEM_BYTES, np.int32)  # the last generic reader's cluster thread id + 1
        self.gr_epoch = np.zeros(SMEM_BYTES, np.int64)
        self.gr_site = np.zeros(SMEM_BYTES, np.int32)  # index into self.sites of that read
        self.atomics = AtomicMarks(SMEM_BYTES)  # bytes updated by atomics (nbwgmma.sim.atomics)

    # -- records -------------------------------------------------------------------------

    def generic_write(self, th, idx, what, swizzle=None, data=None):
        """``th`` writes ``idx`` through the generic proxy; ``swizzle``: the layout a swizzled
        fragment store (``acc_stmatrix_swizzled``, ...) gave the bytes. ``data``: a function
        giving the bytes stored (uint8, in ``idx``'s order), called only when another thread's
        store to these bytes is unordered with this one: bytes it leaves as they are (every
        thread storing one flag's value) are not reported, whatever the order, the result is one."""
        note_remote(th, self.cta, what)
        self.check_write(th, idx, what)
        self.check_copies(th, idx, what, store=True)
        b = _first_unordered(th, idx, self.gw_tid, self.gw_epoch)
        if b is not None and data is not None:
            idx1 = np.atleast_1d(idx)
            b = _first_unordered(th, idx1[self.cta.image[idx1] != data()], self.gw_tid, self.gw_epoch)
        if b is not None:
            raise SimHazard(
                f"thread {th.thread_id} ({what} at {th.where}) writes shared memory at 0x{b:x} that "
                f"{self._writer_at(b)} also wrote, with nothing ordering that write before this one: which value "
                f"stays is up to the order the threads run in (two threads or warpgroups writing the same bytes: "
                f"an index, a consumer's cw or a part of a tile given twice?)"
                f"{self._placed(b, th.gid, int(self.gw_tid[b]) - 1)}")
        self.atomics.check(th, idx, what)
        self.atomics.clear(idx)
        self.gw_swizzle[idx] = FRAGMENT_SWIZZLE_MARK.get(swizzle, 0)
        self.gw_tid[idx] = th.gid + 1
        self.gw_epoch[idx] = th.clock[th.gid]
        self.gw_site[idx] = self._site(what, th.where)
        self.written[idx] = True
        self.aw[idx] = 0
        self.aw_swizzle[idx] = self.aw_type[idx] = 0

    def _site(self, what, at) -> int:
        site = (what, at)
        sid = self.site_ids.get(site)
        if sid is None:
            sid = self.site_ids[site] = len(self.sites)
            self.sites.append(site)
        return sid

    def async_write(self, th, idx, what, mbar, swizzle=None, dtype=None):
        """A copy issued by ``th`` lands on ``idx`` and completes on ``mbar`` (its current phase);
        another copy completing on the same phase must not write the same bytes (which of the
        two lands last is undefined). ``swizzle``, ``dtype``: the layout and the element type
        of a TMA tile copy's map."""
        note_remote(th, self.cta, what)
        self.check_write(th, idx, what, copy=True)
        self.atomics.check(th, idx, what)
        self.atomics.clear(idx)
        prev = self.aw[idx]
        for i in np.unique(prev[prev > 0]):
            aw = self.writes[int(i) - 1]
            if aw.slot == mbar.slot and aw.phase == mbar.phase:
                raise SimHazard(
                    f"thread {th.thread_id} ({what} at {th.where}) writes shared memory at "
                    f"{self._first(idx, self.aw, i)} that a copy issued at {aw.where} also writes, both completing "
                    f"on phase {aw.phase} of {aw.name}: which lands last is undefined (do the two copies' "
                    f"destinations overlap?)")
            if aw.phase != PENDING and th.clock[aw.slot] < aw.phase + 1:
                raise SimHazard(
                    f"thread {th.thread_id} ({what} at {th.where}) writes shared memory at "
                    f"{self._first(idx, self.aw, i)} that a copy issued at {aw.where} also writes, and nothing "
                    f"tells this thread that copy has landed (phase {aw.phase} of {aw.name}, on which it "
                    f"completes, is not known complete here): both are in flight, which lands last is "
                    f"undefined (does one copy's destination run past its stage into the other's?)")
        self.writes.append(AsyncWrite(th.where, mbar.slot, mbar.phase, mbar.label()))
        self.aw[idx] = len(self.writes)
        self.written[idx] = True
        self.gw_swizzle[idx] = 0
        self.gw_tid[idx] = 0
        self.aw_swizzle[idx] = SWIZZLE_MARK.get(swizzle, 0)
        self.aw_type[idx] = TYPE_MARK.get(dtype, 0)

    def async_read(self, key, idx, op: AsyncRead):
        seqs, ops = self.readers.get(key) or self.readers.setdefault(key, (np.zeros(SMEM_BYTES, np.int32), []))
        ops.append(op)
        seqs[idx] = len(ops)

    # -- checks --------------------------------------------------------------------------

    def check_copies(self, th, idx, what, store=False):
        """Reading ``idx`` (or, ``store``, writing it through the generic proxy) needs the phase
        each TMA, bulk or ``cp.async`` copy of those bytes completes on observed by ``th``: a
        copy's writes are async-proxy writes, unordered with a generic store until then (PTX
        ISA, "Memory Consistency Model", proxies: which of the two lands last is undefined)."""
        w = self.aw[idx]
        hit = w[w > 0] if np.ndim(w) else (np.array([w]) if w else ())
        if not len(hit):
            return
        for i in np.unique(hit):
            aw = self.writes[int(i) - 1]
            if th.clock[aw.slot] < aw.phase + 1:
                wait = (f"before {aw.name}" if aw.phase == PENDING else
                        f"without having waited for phase {aw.phase} of {aw.name}, on which that copy completes")
                if not store:
                    last = th.last_phase
                    other = "" if last is None or last[0].slot == aw.slot or aw.phase == PENDING else (
                        f". This thread last waited on {last[0].label()} (phase {last[1]}): if the read is that "
                        f"stage's, it reaches past the stage's copies into another's (a K step or descriptor too "
                        f"far, boxes smaller than the wgmma reads, a stage of another size than the copies')")
                    raise SimHazard(
                        f"thread {th.thread_id} ({what} at {th.where}) reads shared memory at "
                        f"{self._first(idx, self.aw, i)} that a copy issued at {aw.where} writes, {wait}{other}")
                if aw.phase == PENDING:
                    wait = f"before {aw.name}"
                raise SimHazard(
                    f"thread {th.thread_id} ({what} at {th.where}) stores to shared memory at "
                    f"{self._first(idx, self.aw, i)} that a copy issued at {aw.where} also writes, {wait}: nothing orders "
                    f"the copy's asynchronous write with this store, which lands last is undefined (PTX ISA, "
                    f"memory consistency model: an async-proxy write and a generic one); wait for the copy first")

    def atomic_access(self, th, idx, what):
        """An atomic read-modify-write of ``idx`` by ``th``: after other threads' stores, loads
        and copies of those bytes (ordered before it), in any order with their atomics. Bytes
        nothing wrote since the launch hold the poison, as for a plain load (an ``exch`` whose
        old value goes nowhere is no mistake)."""
        note_remote(th, self.cta, what)
        self.check_write(th, idx, what)  # bounds; async reads done; other threads' loads ordered before
        self.check_copies(th, idx, what)
        b = _first_unordered(th, idx, self.gw_tid, self.gw_epoch)
        if b is not None:
            raise SimHazard(
                f"thread {th.thread_id} ({what} at {th.where}) updates shared memory at 0x{b:x} that "
                f"{self._writer_at(b)} stored to, with nothing ordering that store before this atomic (a "
                f"barrier between them is missing){self._placed(b, th.gid, int(self.gw_tid[b]) - 1)}")
        self.atomics.record(th, idx)
        self.written[idx] = True

    def check_bounds(self, th, idx, what):
        """``idx`` must lie in shared memory the kernel has: the launch's dynamic shared memory
        or a static array (the image beyond them is out of bounds on the GPU)."""
        idx1 = np.atleast_1d(idx)
        inside = (idx1 >= 0) & (idx1 < SMEM_BYTES)  # (past the image: an access running off its end)
        if inside.all() and self.cta.valid[idx1].all():
            return
        valid = inside.copy()
        valid[inside] = self.cta.valid[idx1[inside]]
        if np.all(valid):
            return
        bad = int(idx1[~valid][0])
        dyn = self.cta.dyn_bytes
        raise SimHazard(
            f"thread {th.thread_id} ({what} at {th.where}) accesses shared memory at 0x{bad:x}, outside what the "
            f"kernel has: the launch's {dyn} bytes of dynamic shared memory ([0x{DYN_BASE:x}, 0x{DYN_BASE + dyn:x})) "
            f"and its static arrays; launch with more (nbwgmma.launch.dynamic_smem_bytes)")

    def check_write(self, th, idx, what, copy=False):
        """Writing ``idx`` must wait for every async read of it to be complete and ordered
        (``copy``: the write is a copy's, whose destination may be the mistake), and come after
        the last generic read of each byte by another thread."""
        self.check_bounds(th, idx, what)
        b = _first_unordered(th, idx, self.gr_tid, self.gr_epoch)
        if b is not None:
            what_r, at_r = self.sites[int(self.gr_site[b])]
            raise SimHazard(
                f"thread {th.thread_id} ({what} at {th.where}) writes shared memory at 0x{b:x} that thread "
                f"{self._local(int(self.gr_tid[b]) - 1)} ({what_r} at {at_r}) read, with nothing ordering that "
                f"read before this write: on the GPU the write may land first (a barrier, or a release the "
                f"writer waits for, after the read is missing){self._placed(b, th.gid, int(self.gr_tid[b]) - 1)}")
        for key, (seqs, ops) in self.readers.items():
            q = int(seqs[idx].max()) if np.size(idx) else 0
            if not q:
                continue
            op = ops[q - 1]
            if not op.done:
                raise SimHazard(
                    f"thread {th.thread_id} ({what} at {th.where}) writes shared memory at "
                    f"{self._addr(idx, seqs, q)} while {op.what} issued at {op.where} still reads it: "
                    f"{_finish_advice(key)} before the memory is released for rewriting{_STRAY_COPY if copy else ''}")
            if not op.seen_by(th):
                raise SimHazard(
                    f"thread {th.thread_id} ({what} at {th.where}) writes shared memory at "
                    f"{self._addr(idx, seqs, q)} that {op.what} issued at {op.where} reads; that read is "
                    f"waited for at {op.done_by[0][2]}, but nothing orders that wait before this write "
                    f"(the release that let this write happen comes before the wait{_release_sites(th)})")

    def check_observed(self, th, idx, what, generic=False):
        """Reading ``idx`` (generic or async proxy) needs every TMA write of it observed; a
        ``generic`` read (``ld.shared``, ``ldmatrix``, ...) also every other thread's generic
        write of it ordered before it (a barrier, an mbarrier phase, ... between them). A wgmma or
        a copy (not ``generic``) must not read bytes nothing has written since the launch (they
        hold what an earlier kernel left there); a thread's own load of them reads ``POISON``
        bytes, as harmless as on the GPU where the values go nowhere (a scale of a row past M)."""
        note_remote(th, self.cta, what)
        self.check_bounds(th, idx, what)
        if generic:
            b = _first_unordered(th, idx, self.gw_tid, self.gw_epoch)
            if b is not None:
                raise SimHazard(
                    f"thread {th.thread_id} ({what} at {th.where}) reads shared memory at 0x{b:x} that "
                    f"{self._writer_at(b)} wrote, with nothing ordering that write before this read (a barrier "
                    f"between them is missing, or the two threads should not share that memory)"
                    f"{self._placed(b, th.gid, int(self.gw_tid[b]) - 1)}")
            self.atomics.check(th, idx, what)
        self.check_copies(th, idx, what)
        if generic:  # the last reader of each byte, which later writes by other threads must follow
            self.gr_tid[idx] = th.gid + 1
            self.gr_epoch[idx] = th.clock[th.gid]
            self.gr_site[idx] = self._site(what, th.where)
            return  # (its own load of bytes nothing wrote reads the poison)
        fresh = ~self.written[idx]
        if np.any(fresh):
            b = int(np.atleast_1d(idx)[np.atleast_1d(fresh)][0])
            raise SimHazard(
                f"thread {th.thread_id} ({what} at {th.where}) reads shared memory at 0x{b:x} that nothing has "
                f"written since the launch (on the GPU it holds whatever an earlier kernel left there): a wait "
                f"for the copy or the stores that fill it is missing, or a load's destination, a box or an "
                f"offset into the stage is wrong")

    def check_layout(self, th, idx, swizzle, elem, what, operand):
        """A wgmma operand read through a descriptor of ``swizzle`` must find bytes a swizzling TMA
        tile copy laid out with the same swizzle (or bytes no such copy wrote): with another, the
        descriptor's rows and 16-byte chunks are not where the copy put them. Read as ``elem``
        (the kind's type of the operand), they must not come through a map whose element type
        names another number format (f16 data read as bf16 is a wrong answer, not an error, on
        the GPU)."""
        head = f"thread {th.thread_id} ({what} at {th.where}) reads its {operand} operand at"
        bad = self._claimed_otherwise(idx, self.aw_type, TYPE_MARK.get(elem, 0))
        if bad is not None:
            at, got, aw = bad
            raise SimHazard(
                f"{head} {at} as {elem} values, but the TMA load issued at {aw.where} copied those bytes through a "
                f"tensor map of {TYPE_OF_MARK[got]} elements: the map's type and the wgmma kind's must agree (build "
                f"the map with dtype='{elem}', or pass a kind that reads {TYPE_OF_MARK[got]}; a map of raw bits "
                f"takes an integer type such as 'u16' or 'u8')")
        bad = self._claimed_otherwise(idx, self.aw_swizzle, SWIZZLE_MARK.get(swizzle, 0))
        if bad is not None:
            at, got, aw = bad
            raise SimHazard(
                f"{head} {at} through a descriptor with the {swizzle} swizzle, but the TMA load issued at {aw.where} "
                f"laid those bytes out with the {SWIZZLE_OF_MARK[got]} swizzle (its tensor map's): the map's swizzle "
                f"and box and the descriptor must describe the same layout (for a kit pipeline, build the maps with "
                f"the Cooperative's box_a/box_b and the default 128B swizzle; data arranged for this in global "
                f"memory on purpose loads with swizzle='none', a plain copy)")

    def check_store_layout(self, th, idx, swizzle, what):
        """A TMA store through a map of ``swizzle`` must find the bytes a swizzled fragment store
        wrote laid out with the same swizzle (or bytes no such store wrote). A map without
        swizzle is a plain copy and makes no claim, as for loads."""
        want = SWIZZLE_MARK.get(swizzle, 0)
        bad = self._first_claim(idx, self.gw_swizzle, want) if want else None
        if bad is not None:
            i, got = bad
            wrote, at = self.sites[int(self.gw_site[idx[i]])]
            layout = SWIZZLE_OF_MARK[got]
            fix = "a map without swizzle (swizzle='none')" if layout == "none" else f"a map of the {layout} swizzle"
            raise SimHazard(
                f"thread {th.thread_id} ({what} at {th.where}) stores shared memory at 0x{int(idx[i]):x} through a "
                f"tensor map with the {swizzle} swizzle, but {wrote} at {at} wrote those bytes laid out "
                f"{'unswizzled' if layout == 'none' else f'with the {layout} swizzle'}: the map's swizzle and box "
                f"must describe the layout the block was written in (store it through {fix} whose box is the "
                f"block's, or write the block in the map's swizzle)")

    def _claimed_otherwise(self, idx, marks, want):
        """The first byte of ``idx`` whose TMA copy's mark in ``marks`` is neither 0 (no claim)
        nor ``want``: (its address as text, the mark, the copy's AsyncWrite), or None."""
        bad = self._first_claim(idx, marks, want)
        if bad is None:
            return None
        i, got = bad
        return f"0x{int(idx[i]):x}", got, self.writes[int(self.aw[idx[i]]) - 1]

    @staticmethod
    def _first_claim(idx, marks, want):
        """(position in ``idx``, mark) of the first byte whose mark is neither 0 nor ``want``, or None."""
        got = marks[idx]
        bad = (got != 0) & (got != want)
        if not bad.any():
            return None
        i = int(np.flatnonzero(bad)[0])
        return i, int(got[i])

    def check_proxy(self, th, idx, what, note=""):
        """An async-proxy read of ``idx`` needs each byte's generic write followed by a
        ``fence.proxy.async`` of its writer, and that fence ordered before the read (a release
        after the fence that the reader acquired: the write alone ordered before the read, with
        the fence after the release, leaves the async proxy free to read the old bytes). ``note``
        ends each report (what the reader is)."""
        idx1 = np.atleast_1d(idx)
        tids = self.gw_tid[idx1]
        sel = tids > 0
        if not np.any(sel):
            return
        writers = tids[sel] - 1
        epochs = self.gw_epoch[idx1][sel]
        fence = np.full(writers.shape, -1, np.int64)  # the writer's first fence at or after the write
        fences = self.cta.cl.fences
        for w in np.unique(writers):
            f = fences.get(int(w))
            if f is None:
                continue
            on = writers == w
            at = np.searchsorted(f[0], epochs[on])
            fence[on] = np.where(at < len(f[0]), np.asarray(f[0] + [-1])[at], -1)
        seen = th.clock[writers]
        fenced, ordered = fence >= 0, seen >= epochs
        fence_seen = seen > fence  # the writer's clock entry moved past the fence's epoch
        ok = fenced & ordered & fence_seen
        if ok.all():
            return
        first = int(np.flatnonzero(~ok)[0])
        b = int(idx1[np.flatnonzero(sel)[first]])  # the first byte at fault
        if not fenced[first]:
            raise SimHazard(
                f"thread {th.thread_id} ({what} at {th.where}) reads shared memory at 0x{b:x} through the async "
                f"proxy, but {self._writer_at(b)} wrote it with generic stores and issued no fence_proxy_async "
                f"after them (each writing thread fences, then a barrier: the documented pattern; a fence by the "
                f"reading thread alone is not accepted, the PTX memory model defines no ordering for it){note}")
        if not ordered[first]:
            raise SimHazard(
                f"thread {th.thread_id} ({what} at {th.where}) reads shared memory at 0x{b:x} that "
                f"{self._writer_at(b)} wrote, with nothing ordering that write before this read (a barrier between "
                f"them is missing, or the two threads should not share that memory; a C block written again for "
                f"the next part while this store still reads it: one block where tma_store_part wants two, used in "
                f"turn?)"
                f"{self._placed(b, th.gid, int(self.gw_tid[b]) - 1)}{note}")
        w = int(writers[first])
        f = fences[w]
        site = f[1][f[0].index(int(fence[first]))]
        raise SimHazard(
            f"thread {th.thread_id} ({what} at {th.where}) reads shared memory at 0x{b:x} through the async proxy; "
            f"{self._writer_at(b)} wrote it and fenced it (fence_proxy_async at {site}), but nothing orders that "
            f"fence before this read: the barrier or release that orders the write comes before the fence. Each "
            f"writing thread fences between its stores and the barrier (or arrive) the reader waits for"
            f"{self._placed(b, th.gid, w)}{note}")

    # -- helpers -------------------------------------------------------------------------

    def _local(self, gid):
        n = self.cta.cl.nthreads
        r, t = divmod(gid, n)
        return f"{t}" if len(self.cta.cl.ctas) == 1 else f"{t} of CTA rank {r}"

    def _addr(self, idx, seqs, q):
        return self._first(idx, seqs, q)

    def _first(self, idx, arr, value):
        idx = np.atleast_1d(idx)
        hit = idx[np.atleast_1d(arr[idx]) == value]
        return f"0x{int(hit[0] if hit.size else idx[0]):x}"

    def _placed(self, b, *gids):
        """Where byte ``b`` and the threads ``gids`` are, as a closing sentence: the warpgroup of
        each thread (in a block of more than one) and the byte's place in the kernel's shared
        memory, so that two warpgroups' overlapping buffers show as such."""
        parts = []
        if self.cta.cl.nthreads > 128:
            parts.append(", ".join(f"thread {self._local(g)} is in warpgroup {(g % self.cta.cl.nthreads) // 128}"
                                   for g in dict.fromkeys(gids)))
        parts.append(f"0x{b:x} is {self.cta.place(b)}")
        return " (" + "; ".join(parts) + ")"

    def _writer_at(self, b):
        """"thread T (what at file:line)" of the last generic write to byte ``b``."""
        what, at = self.sites[int(self.gw_site[b])]
        return f"thread {self._local(int(self.gw_tid[b]) - 1)}" + (f" ({what} at {at})" if what else "")


def _finish_advice(key):
    if key[0] == "wgmma":
        return "wgmma_wait_group must cover that wgmma"
    return "bulk_wait_group_read must cover that store"


def _first_unordered(th, idx, tid_of, epoch_of):
    """The first byte of ``idx`` whose last access by another thread (``tid_of``: its cluster
    thread id + 1, 0 for none; ``epoch_of``: that thread's clock entry then) ``th`` has not seen
    ordered before it, or None."""
    idx1 = np.atleast_1d(idx)
    tids = tid_of[idx1]
    sel = (tids > 0) & (tids != th.gid + 1)  # (a thread's own accesses are in program order)
    if not sel.any():
        return None
    late = th.clock[tids[sel] - 1] < epoch_of[idx1][sel]
    if not late.any():
        return None
    return int(idx1[np.flatnonzero(sel)[np.flatnonzero(late)[0]]])


def _release_sites(th) -> str:
    """Where the arrivals came from that completed the barrier phase ``th`` waited for last (a
    producer's wait for a free slot: the consumers' releases, one of them too early)."""
    last = th.last_phase
    if last is None:
        return ""
    m, phase = last
    sites = m.done_sites.get(phase)
    if not sites:
        return ""
    return f"; this thread last waited for phase {phase} of {m.label()}, whose arrivals came from {'; '.join(sites)}"


#: For a copy's write: the other cause, a destination outside the stage it fills.
_STRAY_COPY = ("; or, if this copy should not write there, its destination is wrong (past the end of its "
               "stage, in memory that another stage's reader still uses)")


def note_remote(th, cta, what):
    """Thread ``th`` reaches ``cta``'s shared memory or an mbarrier in it: where that is a peer
    CTA of its cluster, the access must come before that CTA exits (checked then, by
    :mod:`nbwgmma.sim.cta` when the CTA exits; at once if it has exited already)."""
    if cta is th.cta:
        return
    if cta.left:
        raise SimHazard(
            f"thread {th.thread_id} of CTA rank {th.cta.rank} ({what} at {th.where}) reaches the shared memory of "
            f"CTA rank {cta.rank}, whose threads have all returned: on the GPU that memory may belong to another "
            f"CTA by now. End the kernel with a cluster barrier (cluster_sync(False) by every thread still running; "
            f"the kit's pipe.teardown() does it for a TmaPipeline with cluster > 1, not for one of cluster=1 beside "
            f"a ClusterSplitK), so that no CTA leaves while a peer may still reach it")
    epoch = int(th.clock[th.gid])
    old = cta.remote.get(th.gid)
    if old is None or old[0] <= epoch:
        cta.remote[th.gid] = (epoch, what, th.where, th.thread_id, th.cta.rank)
