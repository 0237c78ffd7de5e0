"""Simulated wgmma: ``wgmma.fence``, ``mma_async``, ``commit_group`` and ``wait_group`` are
executed by the 128 threads of a warpgroup together (PTX ISA, "Asynchronous Warpgroup Level
Matrix Multiply-Accumulate": every one is ``.sync.aligned``).

``wgmma.mma_async.sp`` (the ``_sp`` intrinsics) runs the same way through
:func:`nbwgmma.layout.sparse.wgmma_sp_reference`: the metadata registers of the threads the
selector names are gathered from the warpgroup; metadata or a selector that the ISA leaves
undefined is a :class:`~nbwgmma.sim.core.SimHazard`.

An ``mma_async`` reads its operands when the warpgroup issues it and returns each thread's
fragment as an :class:`Acc`, which stays *in flight* until a ``wait_group`` completes its
group: reading it before then, or rewriting the shared memory it read before that wait is
ordered before the write, is a :class:`~nbwgmma.sim.core.SimHazard`. For a kernel without
such hazards, reading the operands at issue time is what the hardware computes.
"""

from __future__ import annotations

import numpy as np

from ..layout.descriptor import decode_desc
from ..layout.fragment import a_frag_coords, acc_value_coords
from ..layout.kinds import wgmma_kind, wgmma_sp_kind
from ..layout.sparse import read_sparse_a_registers, wgmma_sp_reference
from ..layout.wgmma_model import decode_elements, operand_addresses, wgmma_reference
from .collective import collective, warpgroup_members
from .core import SimHazard, acquire, me
from .declare import IMPLS
from .shadow import AsyncRead, unique_offsets
from .site import where


class Acc(tuple):
    """A wgmma's result fragment: a tuple that refuses to be read while its wgmma is in flight."""

    def __new__(cls, values, op):
        t = tuple.__new__(cls, values)
        t.op = op
        return t

    def check(self, what):
        if not self.op.done:
            th = me()
            raise SimHazard(
                f"thread {th.thread_id} ({what} at {th.where or where()}) reads an accumulator that {self.op.what} "
                f"issued at {self.op.where} is still writing: no wgmma_wait_group has covered it yet (commit its group, "
                f"then wait with wgmma_wait_group(n) for n smaller than the number of groups issued after it)")

    def __getitem__(self, i):
        if not self.op.done:
            self.check("an accumulator register read")
        return tuple.__getitem__(self, i)

    def __iter__(self):
        if not self.op.done:
            self.check("an accumulator register read")
        return tuple.__iter__(self)


def read_acc(acc, what):
    """The values of fragment ``acc`` as a list, after checking that its wgmma is complete."""
    if isinstance(acc, Acc) and not acc.op.done:
        acc.check(what)
    return list(tuple.__iter__(acc))


def raw_acc(acc):
    return list(tuple.__iter__(acc))


class _WarpgroupState:
    def __init__(self):
        self.open = []  # issued, not committed
        self.groups = []  # committed, not complete
        self.fenced = False  # a wgmma_fence seen (the ISA requires one before the warpgroup's first wgmma)


def _state(th):
    g = th.thread_id // 128
    return th.cta.wgmma.setdefault(g, _WarpgroupState())


def _acc_values(vals, k):
    """Accumulator registers -> values in value order (f16 halves unpacked)."""
    a = np.asarray(vals)
    if k.dtype == "f16":
        return a.astype(np.uint32).view(np.float16).astype(np.float64)
    return a.astype(np.float64)


def _registers(vals, k):
    """The registers of values ``vals`` (in value order, f16 pairs packed), along the last axis."""
    if k.dtype == "f16":
        return np.asarray(vals, np.float16).view(np.uint32)
    if k.dtype == "s32":
        return np.asarray(np.asarray(vals, np.int64) & 0xFFFFFFFF, np.uint32).view(np.int32)
    return np.asarray(vals, np.float32)


def acc_pack(vals, k):
    return tuple(_registers(vals, k))


def thread_coords(t, nvals):

    return acc_value_coords(t, np.arange(nvals))


def _fold(ufunc, clocks):
    """``ufunc.reduce`` of the clocks ``clocks`` (a new array): one element-wise call per clock,
    without stacking them."""
    out = clocks[0].copy()
    for c in clocks[1:]:
        ufunc(out, c, out=out)
    return out


def _uniform(vals, i, what):
    first = vals[0][i]
    for t, v in enumerate(vals):
        if v[i] != first:
            th = me()
            raise SimHazard(f"wgmma_mma_async at {th.where}: the warpgroup's threads pass different {what} "
                            f"(thread 0: 0x{int(first):x}, thread {t}: 0x{int(v[i]):x}); it must be uniform")
    return int(first)


#: the end of a report of a wgmma's operand bytes stored, but not ordered before every issuing thread
_WHOLE = (". A wgmma reads for its whole warpgroup and is no barrier between its warps: the stores must be "
          "fenced and ordered before every thread's issue (fence_proxy_async by each writer, then a barrier of "
          "the warpgroup)")


def _wgmma(acc, a, b, kind, scale_d=1, scale_a=1, scale_b=1, trans_a=0, trans_b=0, satfinite=0, rs=False,
           sparse=None):
    """One wgmma of the calling thread's warpgroup; ``sparse`` = (this thread's metadata
    register, sp-sel) for ``wgmma.mma_async.sp``."""

    th = me()
    k = wgmma_sp_kind(kind) if sparse else wgmma_kind(kind)
    n = k.n_of(len(acc))
    name = "wgmma_mma_async" + ("_sp" if sparse else "") + ("_rs" if rs else "")
    spsel = sparse[1] if sparse else 0
    imms = (name, kind, n, scale_a, scale_b, trans_a, trans_b, satfinite, spsel)
    a_val = tuple(int(x) for x in a) if rs else int(a)
    # (its clock itself, not a copy: compute() runs once every member waits in the collective)
    mine = (raw_acc(acc), a_val, int(b), bool(scale_d), int(sparse[0]) & 0xFFFFFFFF if sparse else 0, th.clock)

    def compute(vals):
        me_ = me()
        cta = me_.cta
        if not _state(me_).fenced:
            raise SimHazard(f"{name} at {me_.where}: warpgroup {me_.thread_id // 128} issues its first wgmma with no "
                            f"wgmma_fence before it (the PTX ISA requires one before a warpgroup's first wgmma and "
                            f"after its threads access the accumulator or A registers)")
        db = _uniform(vals, 2, "B descriptors")
        if any(v[3] != vals[0][3] for v in vals):
            raise SimHazard(f"{name} at {me_.where}: scale-d differs between the warpgroup's threads")
        reads = [operand_addresses(db, n, k.k, k.btype, "MN" if trans_b else "K")]
        layouts = [(reads[0], decode_desc(db)["swizzle"], k.btype, "B")]
        a_values = None
        if rs:
            frags = np.array([v[1] for v in vals], np.uint32)  # [128, registers]
            if sparse:
                a_values = read_sparse_a_registers(frags, kind)
            else:
                dec = decode_elements(frags.reshape(-1, 1).view(np.uint8).reshape(-1, 4), k.atype)
                coords = a_frag_coords(kind)
                a_values = np.zeros((64, k.k))
                a_values[coords[..., 0], coords[..., 1]] = dec.reshape(coords.shape[:-1])
            da = 0
        else:
            da = _uniform(vals, 1, "A descriptors")
            reads.append(operand_addresses(da, 64, k.a_cols, k.atype, "MN" if trans_a else "K"))
            layouts.append((reads[1], decode_desc(da)["swizzle"], k.atype, "A"))
        idx = unique_offsets(reads)
        clocks = [v[5] for v in vals]
        own = me_.clock
        try:
            # copies (TMA) into the operands: observed (their mbarrier phase waited for) by a member
            me_.clock = joined = _fold(np.maximum, clocks)
            cta.shadow.check_observed(me_, idx, name)
            # generic stores into them: fenced and ordered before every member's issue (the
            # instruction is no barrier between the warpgroup's warps: PTX ISA, wgmma.mma_async,
            # .sync.aligned waits for the threads of the warp)
            me_.clock = _fold(np.minimum, clocks)
            cta.shadow.check_proxy(me_, idx, name, _WHOLE)
        finally:
            me_.clock = own
        for addrs, swizzle, elem, operand in layouts:
            cta.shadow.check_layout(me_, addrs.reshape(-1), swizzle, elem, name, operand)
        if sparse:
            try:
                d = wgmma_sp_reference(cta.image, kind, n, da, db, [v[4] for v in vals], spsel=spsel,
                                       trans_a=trans_a, trans_b=trans_b, scale_a=scale_a, scale_b=scale_b,
                                       a_values=a_values)
            except ValueError as e:  # metadata the ISA leaves undefined
                raise SimHazard(f"{name} at {me_.where}: {e}") from None
        else:
            d = wgmma_reference(cta.image, kind, n, da, db, trans_a=trans_a, trans_b=trans_b,
                                scale_a=scale_a, scale_b=scale_b, a_values=a_values)
        op = AsyncRead(f"the {name} ({kind}, N={n}) of warpgroup {me_.thread_id // 128}", me_.where)
        op.issue_clock = joined
        cta.shadow.async_read(("wgmma", me_.thread_id // 128), idx, op)
        _state(me_).open.append(op)
        r, c = thread_coords(np.arange(128)[:, None], n // 2)
        out = d[r, c]
        if vals[0][3]:
            out = out + np.array([_acc_values(v[0], k) for v in vals])
        if satfinite and k.dtype == "s32":
            out = np.clip(out, -(2 ** 31), 2 ** 31 - 1)
        try:
            with np.errstate(all="raise"):  # (a value the conversion warns of: row by row, as ever)
                regs = _registers(out, k)
        except FloatingPointError:
            regs = [acc_pack(row, k) for row in out]
        return [Acc(tuple(row), op) for row in regs]

    # (orders=False: none of the wgmma instructions orders memory between the warpgroup's threads)
    res = collective(*warpgroup_members(th), imms, mine, compute, orders=False)
    return res[th.thread_id % 128]


IMPLS["wgmma_mma_async"] = lambda acc, a, b, kind, scale_d=1, scale_a=1, scale_b=1, trans_a=0, trans_b=0, \
    satfinite=0: _wgmma(acc, a, b, kind, scale_d, scale_a, scale_b, trans_a, trans_b, satfinite)
IMPLS["wgmma_mma_async_rs"] = lambda acc, a, b, kind, scale_d=1, scale_a=1, scale_b=1, trans_b=0, \
    satfinite=0: _wgmma(acc, a, b, kind, scale_d, scale_a, scale_b, 0, trans_b, satfinite, rs=True)
IMPLS["wgmma_mma_async_sp"] = lambda acc, a, b, meta, kind, spsel=0, scale_d=1, scale_a=1, scale_b=1, trans_a=0, \
    trans_b=0, satfinite=0: _wgmma(acc, a, b, kind, scale_d, scale_a, scale_b, trans_a, trans_b, satfinite,
                                   sparse=(meta, spsel))
IMPLS["wgmma_mma_async_sp_rs"] = lambda acc, a, b, meta, kind, spsel=0, scale_d=1, scale_a=1, scale_b=1, \
    trans_b=0, satfinite=0: _wgmma(acc, a, b, kind, scale_d, scale_a, scale_b, 0, trans_b, satfinite, rs=True,
                                   sparse=(meta, spsel))


def _fence():
    def compute(vals):
        _state(me()).fenced = True
    collective(*warpgroup_members(me()), ("wgmma_fence",), None, compute, orders=False)


def _commit():
    def compute(vals):
        st = _state(me())
        st.groups.append(st.open)  # an empty group counts for wait_group too
        st.open = []
    collective(*warpgroup_members(me()), ("wgmma_commit_group",), None, compute, orders=False)


def _wait(n):
    n = int(n)

    def compute(vals):
        st = _state(me())
        done = []
        while len(st.groups) > n:
            done.extend(st.groups.pop(0))
        return done

    th = me()
    for op in collective(*warpgroup_members(th), ("wgmma_wait_group", n), None, compute, orders=False):
        # Each thread past the wait has seen the reads complete (a release by any one covers
        # them), and what every thread did before its issue: the wgmma could not start before
        # the last thread issued it, with its registers (a sparse wgmma's metadata words loaded
        # from the stage, say) ready. What a thread does after its issue stays its own.
        acquire(th, op.issue_clock)
        op.complete(th)


IMPLS["wgmma_fence"] = _fence
IMPLS["wgmma_commit_group"] = _commit
IMPLS["wgmma_wait_group"] = lambda n: _wait(n)
