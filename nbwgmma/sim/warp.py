"""Simulated warp-collective instructions: ``ldmatrix``/``stmatrix`` (the warp's row
addresses exchanged, data moved by the lane map) and Numba's warp shuffles, votes and
``syncwarp``, each executed by the threads of the mask together."""

from __future__ import annotations

import numpy as np

from ..layout.fragment import ldmatrix_lane_map
from .core import collective, me, split, warp_members
from .declare import impl


def _lane_elements(trans):

    return ldmatrix_lane_map(bool(trans))  # [32, 2 halves, (row, col)]


def _element_bytes(addr):
    cta, off = split(addr)
    return cta, np.arange(off, off + 2)


@impl("ldmatrix")
def _ldmatrix(addr, num, trans=0):
    th = me()
    key, members = warp_members(th)
    addrs = collective(key, members, ("ldmatrix", int(num), int(trans)), int(addr))
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
    lane = th.thread_id % 32
    with th.cl.lock:
        for j, reg in enumerate(regs):
            reg = int(reg)
            for h, (r, c) in enumerate(_lane_elements(trans)[lane]):
                cta, idx = _element_bytes(addrs[8 * j + r] + 2 * c)
                cta.shadow.generic_write(th, idx, "stmatrix")
                cta.image[idx[0]:idx[0] + 2].view(np.uint16)[0] = (reg >> (16 * h)) & 0xFFFF


# Numba's warp intrinsics (cuda.shfl_sync, cuda.ballot_sync, ...) -----------------------


def _mask_members(th, mask):
    w = th.thread_id // 32
    lanes = [i for i in range(32) if (int(mask) >> i) & 1]
    if th.thread_id % 32 not in lanes:
        from .core import SimHazard

        raise SimHazard(f"thread {th.thread_id} at {th.where}: lane {th.thread_id % 32} executes a warp "
                        f"instruction whose mask 0x{int(mask) & 0xFFFFFFFF:08x} does not include it")
    return ("warp", w, int(mask) & 0xFFFFFFFF), [32 * w + i for i in lanes]


def _exchange(name, mask, value):
    th = me()
    key, members = _mask_members(th, mask)
    vals = collective(key, members, (name,), value)
    return {m % 32: v for m, v in zip(members, vals)}, th.thread_id % 32


def _shfl(name, pick):
    def fn(mask, value, arg):
        by_lane, lane = _exchange(name, mask, value)
        src = pick(lane, int(arg))
        return by_lane.get(src, value) if 0 <= src < 32 else value
    return fn


WARP_FUNCTIONS = {
    "shfl_sync": _shfl("shfl_sync", lambda lane, src: src % 32),
    "shfl_up_sync": _shfl("shfl_up_sync", lambda lane, d: lane - d),
    "shfl_down_sync": _shfl("shfl_down_sync", lambda lane, d: lane + d),
    "shfl_xor_sync": _shfl("shfl_xor_sync", lambda lane, m: lane ^ m),
    "all_sync": lambda mask, p: int(all(_exchange("all_sync", mask, bool(p))[0].values())),
    "any_sync": lambda mask, p: int(any(_exchange("any_sync", mask, bool(p))[0].values())),
    "eq_sync": lambda mask, p: int(len(set(_exchange("eq_sync", mask, bool(p))[0].values())) == 1),
    "ballot_sync": lambda mask, p: sum(1 << lane for lane, v in _exchange("ballot_sync", mask, bool(p))[0].items()
                                       if v),
    "syncwarp": lambda mask=0xFFFFFFFF: (_exchange("syncwarp", mask, None), None)[1],
    "activemask": lambda: 0xFFFFFFFF,
    "lanemask_lt": lambda: (1 << (me().thread_id % 32)) - 1,
}
