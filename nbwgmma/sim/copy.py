"""Simulated bulk copies: TMA tensor loads (multicast too), stores and reductions, and the
plain bulk copies, through the tensor maps registered by :class:`nbwgmma.tma.TensorMap`.

A load lands when issued and completes its bytes on the destination CTA's mbarrier; its
bytes are marked as written by that copy, so a read before the barrier phase is observed is
reported. A non-bulk ``cp_async`` lands at its thread's ``cp_async_mbarrier_arrive_noinc``
(one arrival on that barrier), its bytes unreadable until then. A store reads its shared
source when issued and stays in flight in the issuing thread's bulk async-group until
``bulk_wait_group_read`` / ``bulk_wait_group`` covers it.
"""

from __future__ import annotations

import ctypes
import itertools
import os

import numpy as np

from ..layout.descriptor import SWIZZLE_PERIOD, swizzle_addr
from ..layout.fragment import exchange_offset
from ..layout.tma import TMA_DTYPES, box_copy_model
from ..layout.wgmma_model import decode_elements, encode_elements
from .address import addr_of, check_clustered, split, split_local
from .core import EXIT_CHECKS, RANK_SHIFT, SimError, SimHazard, SimStopped, me
from .declare import IMPLS, impl
from .shadow import PENDING, AsyncRead, AsyncWrite
from .sync import complete_tx, mbar
from .wgmma import read_acc

_KIT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "kit") + os.sep
_TMAPS: dict = {}
_TMAP_NEXT = itertools.count(0x7E0000000000, 256)


def register_tensor_map(tm) -> int:
    """A fake global address under which the simulated TMA finds ``tm``."""
    addr = next(_TMAP_NEXT)
    _TMAPS[addr] = tm
    return addr


def _tmap(addr, rank=None, op=None):
    """The tensor map registered at ``addr``; ``rank``: the dimensions of the TMA operation ``op``
    that names it (a map of another rank is a hazard: the operation's ``.dim`` and the map's
    rank must agree, PTX ISA cp.async.bulk.tensor; on the GPU the copy is undefined)."""
    tm = _TMAPS.get(int(addr))
    if tm is not None and rank is not None and tm.params.rank != rank:
        th = me()
        dims = tuple(reversed(tm.params.dims))
        raise SimHazard(f"thread {th.thread_id} at {th.where}: {op}_{rank}d is given a {tm.params.rank}-D tensor map "
                        f"(of {dims}): a {rank}-D TMA operation takes a map of rank {rank}, with {rank} "
                        f"coordinates; use {op}_{tm.params.rank}d, or a {rank}-D map of the array"
                        + (" (the kit's stage loads and part stores are 2-D: for a batch, issue the 3-D copies "
                           "yourself, or give them a 2-D map of the (batch * rows, columns) view where no tile "
                           "crosses from one batch into the next)"
                           if th.where.startswith(_KIT_DIR) else ""))
    if tm is None:
        th = me()
        raise SimStopped(f"thread {th.thread_id} at {th.where}: no tensor map at 0x{int(addr):x} "
                         f"(pass TensorMap(...).address)")
    if any(e != 1 for e in tm.params.element_strides):  # the box model reads every element
        th = me()
        raise SimError(f"thread {th.thread_id} at {th.where}: the simulator does not model TMA element strides "
                       f"other than 1; the map has element_strides={tuple(reversed(tm.params.element_strides))}")
    return tm


def _tensor(tm):
    """The tensor a map describes, as raw elements (array order) over the host memory."""

    p = tm.params
    es = TMA_DTYPES[p.dtype][1]
    shape = tuple(reversed(p.dims))
    strides = tuple(reversed(p.strides)) + (es,)
    span = sum((d - 1) * s for d, s in zip(shape, strides)) + es
    buf = (ctypes.c_uint8 * span).from_address(p.address)
    flat = np.frombuffer(buf, np.dtype(f"u{es}") if es > 1 else np.uint8)
    return np.lib.stride_tricks.as_strided(flat, shape, strides), es


def _coords_of(kw, rank):
    return tuple(int(kw[f"c{i}"]) for i in reversed(range(rank)))  # array order


class _BulkState:
    def __init__(self):
        self.open = []
        self.groups = []


def _bulk(th):
    if th.bulk is None:
        th.bulk = _BulkState()
    return th.bulk


def _land(th, cta, off, raw, bar_off, what, swizzle=None, dtype=None, detail=""):
    """Bytes ``raw`` of a copy issued by ``th`` land at ``off`` of ``cta`` and complete on its
    mbarrier at ``bar_off`` (call with the lock held); ``swizzle``, ``dtype``: a TMA tile's
    layout, as it lies, and its map's element type; ``detail`` (its map) names the copy in the
    barrier's list of the phase's copies."""
    m = mbar(addr_of(cta, bar_off), peer=True)
    idx = np.arange(off, off + raw.size)
    cta.shadow.async_write(th, idx, what, m, swizzle, dtype)
    cta.image[off:off + raw.size] = raw
    complete_tx(th, m, raw.size, f"{what} ({detail})" if detail else what)


def _check_box_aligned(th, addr, swizzle, what):
    """A TMA tile's shared box starts 128-byte aligned, and on a swizzle's period (1024 bytes for
    128B) where the map swizzles: the swizzle pattern repeats from there (PTX ISA,
    cp.async.bulk.tensor: shared memory address alignment; tensor-map swizzle modes)."""
    align = max(128, SWIZZLE_PERIOD[swizzle])
    if int(addr) % align:
        raise SimHazard(f"thread {th.thread_id} at {th.where}: {what} at shared address 0x{int(addr):x}: the shared "
                        f"box must be aligned to {align} bytes (its map's swizzle: {swizzle})")


def _check_bulk_aligned(th, shared, glob, nbytes, what):
    """cp.async.bulk: both addresses 16-byte aligned, the size a multiple of 16 (PTX ISA, cp.async.bulk)."""
    if int(nbytes) % 16 or int(shared) % 16 or int(glob) % 16:
        raise SimHazard(f"thread {th.thread_id} at {th.where}: {what} (cp.async.bulk) needs 16-byte aligned addresses "
                        f"and a size in 16-byte steps; got {int(nbytes)} bytes between shared 0x{int(shared):x} and "
                        f"global 0x{int(glob):x}")


def _map_text(p):
    """A map as the user gave it: "a 200x16 bf16 map, box (128, 64)"."""
    return (f"a {'x'.join(str(d) for d in reversed(p.dims))} {p.dtype} map, box "
            f"({', '.join(str(b) for b in reversed(p.box))})")


def _tma_load(rank, multicast, dst, tmap, bar, mask=1, **kw):

    th = me()
    tm = _tmap(tmap, rank, "tma_load_multicast" if multicast else "tma_load")
    p = tm.params
    _check_box_aligned(th, dst, p.swizzle, "TMA load")
    tensor, _ = _tensor(tm)
    raw = box_copy_model(tensor, tuple(reversed(p.box)), _coords_of(kw, rank), p.swizzle, p.oob_fill)
    off = int(dst) & ((1 << RANK_SHIFT) - 1)
    boff = int(bar) & ((1 << RANK_SHIFT) - 1)
    if multicast and (int(mask) == 0 or int(mask) >> len(th.cl.ctas)):
        raise SimHazard(f"thread {th.thread_id} at {th.where}: a multicast TMA load's mask 0x{int(mask):x} must name "
                        f"at least one CTA and none past the cluster's {len(th.cl.ctas)} (bit r: the CTA of rank r; "
                        f"PTX ISA: cp.async.bulk.tensor, ctaMask)")
    targets = [c for c in th.cl.ctas if (int(mask) >> c.rank) & 1] if multicast else [split(dst)[0]]
    with th.cl.lock:
        for cta in targets:
            _land(th, cta, off, raw, boff, "a TMA load", p.swizzle, p.dtype, _map_text(p))


def _box_bytes(tm, src):
    """(CTA, byte addresses in box order) of the shared box a TMA store reads."""

    p = tm.params
    cta, off = split_local(src)
    pos = np.arange(p.box_bytes)
    return cta, off + (swizzle_addr(pos, p.swizzle) if p.swizzle != "none" else pos)


def _tma_store(rank, src, tmap, op=None, **kw):
    th = me()
    tm = _tmap(tmap, rank, "tma_store" if op is None else "tma_reduce")
    p = tm.params
    tensor, es = _tensor(tm)
    box = tuple(reversed(p.box))
    _check_box_aligned(th, src, p.swizzle, "TMA store")
    with th.cl.lock:
        cta, idx = _box_bytes(tm, src)
        what = "a TMA store" if op is None else f"a TMA reduce-{op}"
        cta.shadow.check_observed(th, idx, what)
        cta.shadow.check_proxy(th, idx, what)
        cta.shadow.check_store_layout(th, idx, p.swizzle, what)
        vals = np.ascontiguousarray(cta.image[idx]).view(tensor.dtype).reshape(box)
        rd = AsyncRead(f"{what} of thread {th.thread_id}", th.where)
        cta.shadow.async_read(("bulk", th.gid), idx, rd)
        _bulk(th).open.append(rd)
    src_sl, dst_sl = [], []
    for c, b, n in zip(_coords_of(kw, rank), box, tensor.shape):
        lo, hi = max(c, 0), min(c + b, n)
        if hi <= lo:
            return
        dst_sl.append(slice(lo, hi))
        src_sl.append(slice(lo - c, hi - c))
    piece = vals[tuple(src_sl)]
    view = tensor[tuple(dst_sl)]
    if op is None:
        view[...] = piece
        return
    with th.cl.lock:  # a reduction is atomic per element: another thread's reduce must not interleave
        view[...] = _reduce(view, piece, op, p.dtype)


def _reduce(old, new, op, dtype):

    if dtype in ("f16", "bf16", "f32", "tf32"):
        t = {"f32": "f32", "tf32": "f32"}.get(dtype, dtype)
        dec = (lambda x: x.view(np.float32).astype(np.float64)) if t == "f32" else (
            lambda x: decode_elements(x.view(np.uint8), t).reshape(x.shape))
        a, b = dec(np.ascontiguousarray(old)), dec(np.ascontiguousarray(new))
        r = {"add": a + b, "min": np.minimum(a, b), "max": np.maximum(a, b)}.get(op)
        if r is None:
            raise SimStopped(f"TMA reduce '{op}' is not defined for {dtype}")
        if t == "f32":
            return r.astype(np.float32).view(old.dtype)
        return encode_elements(r.reshape(-1, 1), t).view(old.dtype).reshape(old.shape)
    # integers: the map's data type says signed (INT32, INT64) or not; arithmetic wraps at its width
    signed = TMA_DTYPES[dtype][0].startswith("INT")
    if op in ("inc", "dec") and TMA_DTYPES[dtype][0] != "UINT32":
        raise SimStopped(f"TMA reduce '{op}' is defined for u32 maps only (PTX ISA, cp.reduce.async.bulk.tensor); "
                         f"the map holds {dtype}")
    raw = np.ascontiguousarray(old).dtype
    kind = np.dtype(f"i{raw.itemsize}") if signed else raw
    a, b = np.ascontiguousarray(old).view(kind), np.ascontiguousarray(new).view(kind)
    with np.errstate(over="ignore"):
        ops = {"add": lambda: a + b, "min": lambda: np.minimum(a, b), "max": lambda: np.maximum(a, b),
               "and": lambda: a & b, "or": lambda: a | b, "xor": lambda: a ^ b,
               "inc": lambda: np.where(a >= b, 0, a + 1), "dec": lambda: np.where((a == 0) | (a > b), b, a - 1)}
        if op not in ops:
            raise SimStopped(f"TMA reduce '{op}' is not simulated")
        return ops[op]().astype(kind).view(raw)


def _declare_tma():
    for r in (1, 2, 3, 4, 5):  # the ranks of nbwgmma.intrinsics.tma
        IMPLS[f"tma_load_{r}d"] = (lambda r: lambda dst, tmap, bar, **kw: _tma_load(r, False, dst, tmap, bar, **kw))(r)
        IMPLS[f"tma_load_multicast_{r}d"] = (
            lambda r: lambda dst, tmap, bar, mask, **kw: _tma_load(r, True, dst, tmap, bar, mask, **kw))(r)
        IMPLS[f"tma_store_{r}d"] = (lambda r: lambda src, tmap, **kw: _tma_store(r, src, tmap, **kw))(r)
        IMPLS[f"tma_reduce_{r}d"] = (lambda r: lambda src, tmap, op="add", **kw: _tma_store(r, src, tmap, op, **kw))(r)
        IMPLS[f"tma_prefetch_{r}d"] = (lambda r: lambda tmap, **kw: (_tmap(tmap, r, "tma_prefetch"), None)[1])(r)


_declare_tma()


def acc_send_cluster(acc, base, bar, cta, tid):
    """Each four values of the fragment land in CTA ``cta`` at ``base`` plus their offset in the
    exchange layout (:func:`nbwgmma.layout.exchange_offset`) when issued, completing 16 bytes each on its barrier at ``bar``'s
    offset; their bytes are unreadable there until that phase is observed."""
    th = me()
    check_clustered("acc_send_cluster")
    vals = np.asarray(read_acc(acc, "acc_send_cluster"), np.float32)
    if len(vals) % 4 or int(base) % 16:
        raise SimHazard(f"thread {th.thread_id} at {th.where}: acc_send_cluster needs a multiple of 4 values and a "
                        f"16-byte aligned base; got {len(vals)} values at 0x{int(base):x}")
    mask = (1 << RANK_SHIFT) - 1
    peer = [c for c in th.cl.ctas if c.rank == int(cta)]
    if not peer:
        raise SimHazard(f"thread {th.thread_id} at {th.where}: acc_send_cluster to CTA rank {int(cta)}: the cluster "
                        f"has {len(th.cl.ctas)} CTA(s)")
    off0 = int(base) & mask
    with th.cl.lock:
        for q in range(len(vals) // 4):
            _land(th, peer[0], off0 + exchange_offset(int(tid), 4 * q), vals[4 * q:4 * q + 4].view(np.uint8),
                  int(bar) & mask, "an st.async (acc_send_cluster)")


@impl("bulk_copy_g2s")
def _bulk_g2s(dst, src, nbytes, bar):
    th = me()
    _check_bulk_aligned(th, dst, src, nbytes, "bulk_copy_g2s")
    data = np.frombuffer(ctypes.string_at(int(src), int(nbytes)), np.uint8)
    cta, off = split(dst)
    with th.cl.lock:
        _land(th, cta, off, data, int(bar) & ((1 << RANK_SHIFT) - 1), "a bulk copy")


@impl("bulk_copy_g2s_array")
def _bulk_g2s_array(dst, array, offset, nbytes, bar):
    th = me()
    a = np.asarray(array)
    off, n = int(offset), int(nbytes)
    _check_bulk_aligned(th, dst, a.ctypes.data + off, n, f"bulk_copy_g2s_array (byte {off} of the array)")
    lo = sum(st * (d - 1) for st, d in zip(a.strides, a.shape) if st < 0)
    hi = sum(st * (d - 1) for st, d in zip(a.strides, a.shape) if st > 0) + a.itemsize
    if off < lo or off + n > hi:
        raise SimHazard(f"thread {th.thread_id} at {th.where}: cp.async.bulk of {n} bytes from byte {off} runs "
                        f"outside the array's {hi} bytes")
    data = np.frombuffer(ctypes.string_at(a.ctypes.data + off, n), np.uint8)
    cta, doff = split(dst)
    with th.cl.lock:
        _land(th, cta, doff, data, int(bar) & ((1 << RANK_SHIFT) - 1), "a bulk copy")


@impl("bulk_copy_s2g")
def _bulk_s2g(dst, src, nbytes):
    th = me()
    _check_bulk_aligned(th, src, dst, nbytes, "bulk_copy_s2g")
    cta, off = split_local(src)
    idx = np.arange(off, off + int(nbytes))
    with th.cl.lock:
        cta.shadow.check_observed(th, idx, "a bulk copy to global memory")
        cta.shadow.check_proxy(th, idx, "a bulk copy to global memory")
        data = np.ascontiguousarray(cta.image[idx])
        rd = AsyncRead(f"the bulk copy of thread {th.thread_id}", th.where)
        cta.shadow.async_read(("bulk", th.gid), idx, rd)
        _bulk(th).open.append(rd)
    ctypes.memmove(int(dst), data.ctypes.data, int(nbytes))


@impl("bulk_commit_group")
def _bulk_commit():
    st = _bulk(me())
    st.groups.append(st.open)
    st.open = []


def _bulk_wait(n):
    th = me()
    st = _bulk(th)
    with th.cl.lock:
        while len(st.groups) > int(n):
            for rd in st.groups.pop(0):
                rd.complete(th)


IMPLS["bulk_wait_group"] = lambda n: _bulk_wait(n)
IMPLS["bulk_wait_group_read"] = lambda n: _bulk_wait(n)


def _stores_waited_at_exit(th):
    """A thread that leaves the kernel with bulk stores whose reads of shared memory no
    ``bulk_wait_group_read`` / ``bulk_wait_group`` covered: the CTA's shared memory may be freed
    (and given to the next CTA) while the TMA unit still reads it."""
    st = th.bulk
    if st is None:
        return
    reads = [rd for g in st.groups for rd in g] + list(st.open)
    if reads:
        raise SimHazard(f"thread {th.thread_id} of block ({th.blockIdx.x}, {th.blockIdx.y}) left the kernel with "
                        f"{len(reads)} bulk store(s) still reading shared memory{' (not committed)' if st.open else ''}"
                        f", the last issued at {reads[-1].where}: wait for "
                        f"them with bulk_wait_group_read(0) or bulk_wait_group(0) after the last "
                        f"bulk_commit_group, before the kernel ends")


def _cp_async_landed_at_exit(th):
    """A thread that leaves the kernel with ``cp.async`` copies it never tied to a barrier
    (``cp_async_mbarrier_arrive_noinc``): nothing waits for them, and they may still land in
    shared memory the next CTA on the SM is given."""
    if th.cp_async:
        raise SimHazard(f"thread {th.thread_id} of block ({th.blockIdx.x}, {th.blockIdx.y}) left the kernel with "
                        f"{len(th.cp_async)} cp.async copies that no cp_async_mbarrier_arrive_noinc tied to a barrier "
                        f"(nothing waits for them; the last issued at {th.cp_async[-1][3]})")


EXIT_CHECKS.extend([_stores_waited_at_exit, _cp_async_landed_at_exit])


def _byte_span(a):
    """Bytes from an array's first element to the end of its last (0 when it is empty)."""
    return (sum((d - 1) * st for d, st in zip(a.shape, a.strides)) + a.itemsize) if a.size else 0


@impl("cp_async")
def _cp_async(dst, array, offset, size):
    """A non-bulk copy: its bytes are read now and land at the thread's next
    ``cp_async_mbarrier_arrive_noinc``; until then a read of them is reported (their write
    completes on no barrier phase anyone can have observed)."""
    _copy(dst, array, offset, int(size), int(size))


def _copy(dst, array, offset, size, nvalid):
    """A cp.async of ``size`` bytes whose first ``nvalid`` come from byte ``offset`` of
    ``array`` (the rest zeros): both addresses aligned to ``size``, the source inside the
    array. Its bytes are read now and wait for the thread's arrival to land."""
    th = me()
    a = np.asarray(array)
    off_src = int(offset)
    cta, off = split_local(dst)
    if off % size or (a.ctypes.data + off_src) % size:
        raise SimHazard(f"thread {th.thread_id} at {th.where}: cp.async of {size} bytes needs both addresses aligned "
                        f"to {size}; got shared 0x{int(dst):x} and byte {off_src} of an array at 0x{a.ctypes.data:x}")
    span = _byte_span(a)
    if nvalid and not (0 <= off_src and off_src + nvalid <= span and all(st >= 0 for st in a.strides)):
        raise SimHazard(f"thread {th.thread_id} at {th.where}: cp.async reads bytes {off_src}..{off_src + nvalid - 1} "
                        f"of an array of {span} bytes (shape {a.shape}, strides {a.strides})")
    data = np.zeros(size, np.uint8)
    if nvalid:
        data[:nvalid] = np.frombuffer(ctypes.string_at(a.ctypes.data + off_src, nvalid), np.uint8)
    n = size
    with th.cl.lock:
        idx = np.arange(off, off + n)
        cta.shadow.check_write(th, idx, "cp.async", copy=True)
        cta.shadow.writes.append(AsyncWrite(th.where, 0, PENDING, f"the cp.async's arrival (thread {th.thread_id} "
                                            f"has not called cp_async_mbarrier_arrive_noinc after it)"))
        cta.shadow.aw[idx] = len(cta.shadow.writes)
        cta.shadow.gw_tid[idx] = cta.shadow.gw_swizzle[idx] = 0
        cta.shadow.aw_swizzle[idx] = cta.shadow.aw_type[idx] = 0
    th.cp_async = (th.cp_async or []) + [(cta, off, data, th.where)]


@impl("prefetch_l1")
def _prefetch_l1(array, offset):
    """A cache hint: no value changes; a byte outside the array is reported (on the GPU the
    address may be unmapped)."""
    a = np.asarray(array)
    off = int(offset)
    span = _byte_span(a)
    if not (0 <= off < span and all(st >= 0 for st in a.strides)):
        th = me()
        raise SimHazard(f"thread {th.thread_id} at {th.where}: prefetch_l1 of byte {off} of an array of {span} "
                        f"bytes (shape {a.shape}, strides {a.strides})")


@impl("cp_async_zfill")
def _cp_async_zfill(dst, array, offset, nvalid):
    n = int(nvalid)
    if not 0 <= n <= 16:
        th = me()
        raise SimHazard(f"thread {th.thread_id} at {th.where}: cp.async's source size must be in [0, 16]; got {n}")
    _copy(dst, array, offset, 16, n)


@impl("cp_async_mbarrier_arrive_noinc")
def _cp_async_arrive(bar):
    th = me()
    with th.cl.lock:
        m = mbar(bar)
        for cta, off, data, _ in th.cp_async or ():  # the bytes land, completing on this phase of m
            cta.shadow.async_write(th, np.arange(off, off + data.size), "cp.async", m)
            cta.image[off:off + data.size] = data
        m.update(th, arrivals=1)
    th.cp_async = None
