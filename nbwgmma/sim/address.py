"""Shared-memory addresses in the simulator: a CTA's 32-bit ``.shared`` address is an offset
into its image (:mod:`nbwgmma.sim.cta`), with the CTA's rank in bits 24-31 in a cluster, as an
H100 shows them (``mapa``'s ``.shared::cluster`` addresses). :func:`split` reads one back for
the ``.shared::cluster`` forms, :func:`split_local` for the ``.shared::cta`` ones; an address
naming no memory is a :class:`~nbwgmma.sim.core.SimHazard` at the kernel's line. The
intrinsics that make addresses and descriptors (``smem_addr``, ``dynamic_smem_base``,
``make_desc``, ``desc_advance``, ``mapa``) are implemented here, and the plain loads and stores
of :mod:`nbwgmma.intrinsics.address` (shared, a peer's shared, global: at the first element's
address plus the byte offset, as the hardware stores)."""

from __future__ import annotations

import ctypes

import numpy as np

try:
    from numpy.lib.array_utils import byte_bounds
except ImportError:  # (NumPy 1.x)
    from numpy import byte_bounds

from ..layout.descriptor import SWIZZLE_NAME, encode_desc
from .core import RANK_SHIFT, SMEM_BYTES, SimHazard, me
from .declare import impl


def split(addr):
    """(CTA, offset) of a ``.shared::cluster`` address (own CTA's, or a ``mapa`` one); an
    address naming no CTA of the cluster, or past a CTA's shared memory, is a hazard."""
    th = me()
    a = int(addr)
    ctas = th.cl.ctas
    rank, off = (a >> RANK_SHIFT) & 0xFF, a & ((1 << RANK_SHIFT) - 1)
    if 0 <= a < 1 << 32 and off < SMEM_BYTES and rank < len(ctas):
        return ctas[rank], off
    head = f"thread {th.thread_id} ({th.op or 'a shared-memory access'} at {th.where}): shared address 0x{a:x}"
    if not 0 <= a < 1 << 32 or off >= SMEM_BYTES:
        raise SimHazard(f"{head} is past the CTA's {SMEM_BYTES >> 10} KiB shared memory (a 32-bit address, CTA "
                        f"rank in bits {RANK_SHIFT}-31 in a cluster: an mbarrier's value or a global pointer "
                        f"instead of smem_addr(...)?)")
    has = (f"the cluster has {len(ctas)} CTAs (mapa's rank must be below cluster_nctarank())" if len(ctas) > 1
           else "the cluster has 1 CTA")
    raise SimHazard(f"{head} names CTA rank {rank} (bits {RANK_SHIFT}-31), but {has}")


#: The ``.shared::cluster`` form to name when a ``.shared::cta`` intrinsic is given a peer's address.
CLUSTER_FORMS = {"mbarrier_arrive": "mbarrier_arrive_cluster(bar, cta)", "ld_shared_f32": "ld_shared_cluster_u32",
                 "st_shared_f32": "st_shared_cluster_u32", "ld_shared_v4_b32": "ld_shared_cluster_u32",
                 "ld_shared_b32": "ld_shared_cluster_u32",
                 "st_shared_v4_b32": "st_shared_cluster_u32"}


def split_local(addr):
    """:func:`split` of a ``.shared::cta`` address, which must be the executing CTA's (PTX ISA,
    "State Spaces": the ``.shared::cta`` window holds the CTA's own shared memory; a peer's
    ``mapa`` address there is undefined)."""
    cta, off = split(addr)
    th = me()
    if cta is not th.cta:
        form = CLUSTER_FORMS.get(th.op)
        use = (f"use {form} for a peer's" if form
               else "it has no form for a peer's: pass this CTA's own address (smem_addr, not mapa)")
        raise SimHazard(f"thread {th.thread_id} of CTA rank {th.cta.rank} ({th.op} at {th.where}): shared address "
                        f"0x{int(addr):x} is CTA rank {cta.rank}'s (a mapa address), but {th.op} is a .shared::cta "
                        f"instruction, which reaches only the executing CTA's shared memory (PTX ISA, state spaces: "
                        f".shared::cta); {use}")
    return cta, off


def addr_of(cta, off):
    return (cta.rank << RANK_SHIFT) | off if len(cta.cl.ctas) > 1 else off


@impl("smem_addr")
def _smem_addr(array):
    th = me()
    return np.uint32(addr_of(th.cta, th.cta.offset_of(np.asarray(array))))


@impl("dynamic_smem_base")
def _dyn_base(array, align):
    a = int(_smem_addr(array))
    return np.uint32(-(-a // align) * align)


@impl("make_desc")
def _make_desc(addr, lbo, sbo, swizzle_code):
    field = lambda v: ((int(v) >> 4) & 0x3FFF) << 4  # noqa: E731  the bits the descriptor keeps
    return np.uint64(encode_desc(field(addr), field(lbo), field(sbo), SWIZZLE_NAME[int(swizzle_code) & 3]))


@impl("desc_advance")
def _desc_advance(desc, nbytes):
    lo = (int(desc) + (int(nbytes) >> 4)) & 0xFFFFFFFF  # a 32-bit add on the low word
    return np.uint64((int(desc) & ~0xFFFFFFFF) | lo)


def check_clustered(op):
    """A hazard unless the launch has clusters: the ``.shared::cluster`` forms in a launch without
    them (``mapa``, ``st.async`` and cluster-scope arrivals, aimed at the CTA's own rank) stopped an
    H200 with an illegal instruction. Which one faulted was not isolated, and PTX describes such a
    launch as clusters of one CTA: the rule is stricter than the evidence, never looser."""
    th = me()
    if not th.cl.clustered:
        raise SimHazard(f"thread {th.thread_id} at {th.where}: {op} in a launch without clusters: the "
                        f".shared::cluster forms need a launch with cluster=... (even to reach this CTA's own shared "
                        f"memory: on an H200 that stopped with an illegal instruction); within one CTA use the "
                        f".shared::cta forms (acc_store_shared-like stores, mbarrier_arrive)")


@impl("mapa")
def mapa(addr, cta):
    check_clustered("mapa")
    return np.uint32((int(cta) << RANK_SHIFT) | (int(addr) & ((1 << RANK_SHIFT) - 1)))


@impl("st_shared_cluster_u32")
def _st_cluster(addr, value):
    th = me()
    cta, off = split(addr)
    word = np.array([value], np.uint32)
    with th.cl.lock:
        cta.shadow.generic_write(th, np.arange(off, off + 4), "st.shared::cluster", data=lambda: word.view(np.uint8))
    cta.image[off:off + 4].view(np.uint32)[:] = word


def _place(addr, op, align):
    """(thread, CTA, offset) of an ``align``-byte access to this CTA's shared memory, which must
    be ``align``-byte aligned."""
    th = me()
    cta, off = split_local(addr)
    if off % align:
        raise SimHazard(f"thread {th.thread_id} at {th.where}: {op} needs a {align}-byte aligned address; "
                        f"got 0x{int(addr):x}")
    return th, cta, off


@impl("st_shared_v4_b32")
def _st_v4(addr, x, y, z, w):
    th, cta, off = _place(addr, "st.shared.v4.b32", 16)
    words = np.array([x, y, z, w], np.uint32)
    with th.cl.lock:
        cta.shadow.generic_write(th, np.arange(off, off + 16), "st.shared.v4.b32", data=lambda: words.view(np.uint8))
    cta.image[off:off + 16].view(np.uint32)[:] = words


@impl("ld_shared_v4_b32")
def _ld_v4(addr):
    th, cta, off = _place(addr, "ld.shared.v4.b32", 16)
    with th.cl.lock:
        cta.shadow.check_observed(th, np.arange(off, off + 16), "ld.shared.v4.b32", generic=True)
    return tuple(np.uint32(v) for v in cta.image[off:off + 16].view(np.uint32))


def _global_store(array, offset, data: np.ndarray, op: str, align: int):
    """Write ``data``'s bytes at byte ``offset`` from the first element of ``array``, as the
    hardware does (the address of the first element plus ``offset``, any strides, negative ones
    too), which must be ``align``-byte aligned and inside the bytes the array spans."""
    a = np.asarray(array)
    th = me()
    addr = a.ctypes.data + int(offset)
    if addr % align:
        raise SimHazard(f"thread {th.thread_id} at {th.where}: {op} needs a {align}-byte aligned address; "
                        f"got byte {int(offset)} of an array at 0x{a.ctypes.data:x}")
    lo, hi = byte_bounds(a)
    if not lo <= addr <= addr + data.nbytes <= hi:
        raise SimHazard(f"thread {th.thread_id} at {th.where}: {op} of {data.nbytes} bytes at byte {int(offset)} of an "
                        f"array spanning bytes {lo - a.ctypes.data} to {hi - a.ctypes.data}: outside it")
    np.frombuffer((ctypes.c_uint8 * data.nbytes).from_address(addr), np.uint8)[:] = data.view(np.uint8)


@impl("st_global_v4_b32")
def _st_global_v4(array, offset, x, y, z, w):
    _global_store(array, offset, np.array([x, y, z, w], np.uint32), "st.global.v4.b32", 16)


@impl("st_global_b16x2")
def _st_global_b16x2(array, offset, v):
    _global_store(array, offset, np.array([v], np.uint32).view(np.uint16), "st.global.b16", 2)


@impl("st_global_b16")
def _st_global_b16(array, offset, v):
    _global_store(array, offset, np.array([int(v) & 0xFFFF], np.uint16), "st.global.b16", 2)


def _ld_word(addr, op, dtype):
    """The 4-byte word of ``dtype`` at a 4-byte aligned shared address (``ld.shared.f32`` / ``.b32``)."""
    th, cta, off = _place(addr, op, 4)
    with th.cl.lock:
        cta.shadow.check_observed(th, np.arange(off, off + 4), op, generic=True)
    return dtype(cta.image[off:off + 4].view(dtype)[0])


@impl("ld_shared_f32")
def _ld_f32(addr):
    return _ld_word(addr, "ld.shared.f32", np.float32)


@impl("ld_shared_b32")
def _ld_b32(addr):
    return _ld_word(addr, "ld.shared.b32", np.uint32)


@impl("st_shared_f32")
def _st_f32(addr, v):
    th, cta, off = _place(addr, "st.shared.f32", 4)
    word = np.array([v], np.float32)
    with th.cl.lock:
        cta.shadow.generic_write(th, np.arange(off, off + 4), "st.shared.f32", data=lambda: word.view(np.uint8))
    cta.image[off:off + 4].view(np.float32)[:] = word


@impl("ld_shared_cluster_u32")
def _ld_cluster(addr):
    th = me()
    cta, off = split(addr)
    with th.cl.lock:
        cta.shadow.check_observed(th, np.arange(off, off + 4), "ld.shared::cluster", generic=True)
    return np.uint32(cta.image[off:off + 4].view(np.uint32)[0])
