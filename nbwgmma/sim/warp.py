"""Simulated warp-collective instructions: ``ldmatrix``/``stmatrix`` (the warp's row
addresses exchanged, data moved by the lane map) and Numba's warp shuffles, votes and
``syncwarp``, each executed by the threads of the mask together."""

from __future__ import annotations

import numpy as np

from ..layout.fragment import ldmatrix_lane_map
from .address import split_local
from .collective import collective, warp_members
from .core import SimHazard, me
from .declare import impl


def _lane_elements(trans):

    return ldmatrix_lane_map(bool(trans))  # [32, 2 halves, (row, col)]


def _element_bytes(addr):
    cta, off = split_local(addr)
    return cta, np.arange(off, off + 2)


def _check_rows(th, addrs, count, op):
    """The row addresses the warp's lanes give (lanes ``0 .. 8 * count - 1``; the others' are
    unused): the executing CTA's, each 16-byte aligned (PTX ISA, ldmatrix / stmatrix: "each
    row ... address must be 16-byte aligned" for .m8n8 .b16 rows of 16 bytes)."""
    for lane in range(8 * count):
        a = int(addrs[lane])
        split_local(a)
        if a % 16:
            raise SimHazard(f"thread {th.thread_id} ({op} at {th.where}): lane {lane}'s row address 0x{a:x} is not "
                            f"16-byte aligned: each of the 8 * {count} rows must start at a 16-byte aligned address "
                            f"(PTX ISA, {op})")


@impl("ldmatrix")
def _ldmatrix(addr, num, trans=0):
    th = me()
    key, members = warp_members(th)
    addrs = collective(key, members, ("ldmatrix", int(num), int(trans)), int(addr))
    _check_rows(th, addrs, int(num), "ldmatrix")
    lane = th.thread_id % 32
    out = []
    with th.cl.lock:
        for j in range(num):
            halves = []
            for r, c in _lane_elements(trans)[lane]:
                cta, idx = _element_bytes(addrs[8 * j + r] + 2 * c)
                cta.shadow.check_observed(th, idx, "ldmatrix", generic=True)
                halves.append(int(cta.image[idx].view(np.uint16)[0]))
            out.append(np.uint32(halves[0] | (halves[1] << 16)))
    return tuple(out)


@impl("stmatrix")
def _stmatrix(addr, regs, trans=0):
    th = me()
    key, members = warp_members(th)
    addrs = collective(key, members, ("stmatrix", len(regs), int(trans)), int(addr))
    _check_rows(th, addrs, len(regs), "stmatrix")
    lane = th.thread_id % 32
    with th.cl.lock:
        for j, reg in enumerate(regs):
            reg = int(reg)
            for h, (r, c) in enumerate(_lane_elements(trans)[lane]):
                cta, idx = _element_bytes(addrs[8 * j + r] + 2 * c)
                half = np.array([(reg >> (16 * h)) & 0xFFFF], np.uint16)
                cta.shadow.generic_write(th, idx, "stmatrix", data=lambda: half.view(np.uint8))
                cta.image[idx[0]:idx[0] + 2].view(np.uint16)[:] = half


# Numba's warp intrinsics (cuda.shfl_sync, cuda.ballot_sync, ...) -----------------------


def _mask_members(th, mask):
    """The key and the threads of a ``*_sync`` warp function with ``mask``: lanes past the
    block's last thread do not exist and take no part (a partial warp)."""
    w = th.thread_id // 32
    lanes = [i for i in range(32) if (int(mask) >> i) & 1]
    if th.thread_id % 32 not in lanes:
        from .core import SimHazard

        raise SimHazard(f"thread {th.thread_id} at {th.where}: lane {th.thread_id % 32} executes a warp "
                        f"instruction whose mask 0x{int(mask) & 0xFFFFFFFF:08x} does not include it")
    return ("warp", w, int(mask) & 0xFFFFFFFF), [32 * w + i for i in lanes if 32 * w + i < th.cl.nthreads]


def _exchange(name, mask, value):
    """{lane: value} of the mask's lanes that take part (CUDA: every non-exited thread named in
    the mask; one that exited drops out), and the calling thread's lane."""
    th = me()
    key, members = _mask_members(th, mask)
    vals = collective(key, members, (name,), value, exited_ok=True)
    return {m % 32: v for m, v in vals.items()}, th.thread_id % 32


def _shfl(name, pick):
    def fn(mask, value, arg):
        by_lane, lane = _exchange(name, mask, value)
        src = pick(lane, int(arg))
        if not 0 <= src < 32:  # (past the warp's width: the lane's own value, as the ISA's clamp gives)
            return value
        if src not in by_lane:  # PTX ISA, shfl.sync: undefined from a lane that is inactive or not in the mask
            return _undefined(value)
        return by_lane[src]
    return fn


def _undefined(value):
    """What a shuffle reads from a lane that exited, is not in the mask or does not exist: the
    ISA leaves it undefined, so the poison of shared memory (NaN; every bit set for an
    integer). A lane whose result goes unused is no mistake; one that uses it computes garbage,
    as it may on the GPU."""
    if isinstance(value, (bool, np.bool_)):
        return value
    if isinstance(value, (float, np.floating)):
        return type(value)("nan")
    if isinstance(value, np.integer):
        return np.array(-1).astype(type(value))[()]
    return -1


def _mask(bits):
    """A 32-bit lane mask as an unsigned Python int, as Numba's simulator gives it: mask
    arithmetic with Python ints works as on the GPU (where Numba widens the int32 to int64);
    compared with 0, or stored into an int32 array, it stays unsigned (not modelled: on the GPU
    a mask with lane 31 set is a negative int32)."""
    return int(bits)


def _width(val) -> int:
    """Bits of an integer as the GPU holds it: a NumPy integer's own; a Python int's 32 when it
    fits in 32 unsigned bits (Numba's simulator formats them so), else 64."""
    if isinstance(val, np.integer):
        return 8 * val.itemsize
    return 32 if 0 <= val < 1 << 32 else 64


def _unsigned(val) -> int:
    return int(val) & ((1 << _width(val)) - 1)


def _ballot(mask, p):
    return _mask(sum(1 << lane for lane, v in _exchange("ballot_sync", mask, bool(p))[0].items() if v))


def _match_any(mask, value):
    by_lane, lane = _exchange("match_any_sync", mask, value)
    return _mask(sum(1 << other for other, v in by_lane.items() if v == by_lane[lane]))


def _match_all(mask, value):
    by_lane, _ = _exchange("match_all_sync", mask, value)
    same = len(set(by_lane.values())) == 1
    return (_mask(sum(1 << other for other in by_lane)) if same else _mask(0)), same


def _activemask():
    """The warp's lanes that exist (in a partial warp, not 0xFFFFFFFF). Lanes that returned
    early count too: the threads run one at a time here, so which have returned says nothing
    about which run together on the GPU."""
    th = me()
    w = th.thread_id // 32
    return sum(1 << i for i in range(32) if 32 * w + i < th.cl.nthreads)


def _popc(val):
    return bin(_unsigned(val)).count("1")


def _clz(val):
    return _width(val) - _unsigned(val).bit_length()


def _ffs(val):
    v = _unsigned(val)
    return (v & -v).bit_length()


def _brev(val):
    return int(format(_unsigned(val), f"0{_width(val)}b")[::-1], 2)


#: Numba's bit functions on an integer's bits at its width (Numba's simulator read a negative
#: value's Python digits: popc(-1) was 1)
BIT_FUNCTIONS = {"popc": _popc, "clz": _clz, "ffs": _ffs, "brev": _brev}

WARP_FUNCTIONS = {
    "shfl_sync": _shfl("shfl_sync", lambda lane, src: src % 32),
    "shfl_up_sync": _shfl("shfl_up_sync", lambda lane, d: lane - d),
    "shfl_down_sync": _shfl("shfl_down_sync", lambda lane, d: lane + d),
    "shfl_xor_sync": _shfl("shfl_xor_sync", lambda lane, m: lane ^ m),
    "all_sync": lambda mask, p: int(all(_exchange("all_sync", mask, bool(p))[0].values())),
    "any_sync": lambda mask, p: int(any(_exchange("any_sync", mask, bool(p))[0].values())),
    "eq_sync": lambda mask, p: int(len(set(_exchange("eq_sync", mask, bool(p))[0].values())) == 1),
    "ballot_sync": _ballot,
    "match_any_sync": _match_any,
    "match_all_sync": _match_all,
    "syncwarp": lambda mask=0xFFFFFFFF: (_exchange("syncwarp", mask, None), None)[1],
    "activemask": _activemask,
    "lanemask_lt": lambda: (1 << (me().thread_id % 32)) - 1,
}
