"""TMA: bulk tensor copies between global and shared memory, and plain bulk copies.

PTX ISA, "Data Movement and Conversion Instructions: cp.async.bulk.tensor",
"cp.reduce.async.bulk.tensor", "cp.async.bulk", "cp.async.bulk.prefetch.tensor",
"cp.async.bulk.commit_group", "cp.async.bulk.wait_group" and "prefetch".

The variants come from tables: one intrinsic per rank (1-5) and form, named
``tma_load_2d``, ``tma_load_multicast_3d``, ``tma_store_2d``,
``tma_reduce_2d`` (with ``op``), ``tma_prefetch_2d``. Coordinates are in
elements, innermost dimension first (the tensor map's order). ``tmap`` is the
64-bit global address of a tensor map (:attr:`nbwgmma.tma.TensorMap.address`),
``dst``/``src``/``bar`` 32-bit shared addresses.

A load completes on the mbarrier ``bar`` by its byte count: arm the barrier with
``mbarrier_arrive_expect_tx(bar, box_bytes)`` in the issuing thread. The count
is the whole box, also where it hangs over the tensor's edge (those elements
arrive as the fill value).

Rules the hardware enforces at run time (measured on an H100): the innermost
coordinate times the element size must be a multiple of 16 bytes (an unaligned
one stops the kernel with an illegal-instruction error); ``dst``/``src`` must
be aligned to 128 bytes, and to the swizzle period (up to 1024 bytes) with a
swizzled map. Coordinates may be negative or past the end: such elements load
as the fill value and are not stored.
"""

from __future__ import annotations

from ._asm import ArrayPtr, Imm, Reg, ptx_intrinsic, ranged, u32, u64
from numba import types

__all__ = [
    "bulk_commit_group",
    "bulk_wait_group",
    "bulk_wait_group_read",
    "prefetch_tensormap",
    "bulk_copy_g2s",
    "bulk_copy_g2s_array",
    "bulk_copy_s2g",
    "TMA_REDUCE_OPS",
]

RANKS = (1, 2, 3, 4, 5)
#: Reduction operations of cp.reduce.async.bulk.tensor (the type decides which are legal).
TMA_REDUCE_OPS = ("add", "min", "max", "inc", "dec", "and", "or", "xor")


# A bulk copy's size is a multiple of 16 (PTX ISA: cp.async.bulk); into shared memory it also
# completes as an mbarrier's transaction bytes, at most 2^20 - 1
_G2S_BYTES = ranged("nbytes", u32, 0, 2**20 - 16, 16, "cp.async.bulk, and the mbarrier tx-count it completes")
_S2G_BYTES = ranged("nbytes", u32, 0, 2**32 - 16, 16, "cp.async.bulk")


def _coords(rank):
    return [Reg(f"c{i}", types.int32) for i in range(rank)]


def _clist(rank):
    return "{" + ", ".join(f"$c{i}" for i in range(rank)) + "}"


def _coords_doc(rank):
    if rank == 1:
        return " The coordinate is in elements."
    return (" Coordinates are in elements, innermost first: ``c0`` is the column of a row-major 2-D "
            "map, ``c1`` its row (a ``TensorMap``'s box is given in array order, rows then columns).")


def _define(name, template, params, doc):
    rank = sum(p.name.startswith("c") and p.name[1:].isdigit() for p in params)
    fn = ptx_intrinsic(name, template, params=params, doc=doc + _coords_doc(rank))
    globals()[name] = fn
    __all__.append(name)
    return fn


for _r in RANKS:
    _define(
        f"tma_load_{_r}d",
        f"cp.async.bulk.tensor.{_r}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
        f"[$dst], [$tmap, {_clist(_r)}], [$bar];",
        [Reg("dst", u32), Reg("tmap", u64), Reg("bar", u32)] + _coords(_r),
        f"``cp.async.bulk.tensor.{_r}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes`` "
        f"(PTX ISA: cp.async.bulk.tensor). Copy the box at ({', '.join(f'c{i}' for i in range(_r))}) "
        "into shared memory at ``dst``; bytes complete on the mbarrier ``bar``.",
    )
    _define(
        f"tma_load_multicast_{_r}d",
        f"cp.async.bulk.tensor.{_r}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster "
        f"[$dst], [$tmap, {_clist(_r)}], [$bar], $mask;",
        [Reg("dst", u32), Reg("tmap", u64), Reg("bar", u32),
         ranged("mask", types.uint16, 1, 0xFFFF, source="cp.async.bulk.tensor, ctaMask: one bit per destination CTA")]
        + _coords(_r),
        f"``cp.async.bulk.tensor.{_r}d...multicast::cluster`` (PTX ISA: cp.async.bulk.tensor). The "
        "same box into ``dst`` of every CTA of the cluster whose bit is set in ``mask`` (bit r: the CTA of "
        "rank r; at least one bit, none past the cluster's CTAs); each "
        "destination CTA's mbarrier at offset ``bar`` receives the bytes.",
    )
    _define(
        f"tma_store_{_r}d",
        f"cp.async.bulk.tensor.{_r}d.global.shared::cta.tile.bulk_group [$tmap, {_clist(_r)}], [$src];",
        [Reg("src", u32), Reg("tmap", u64)] + _coords(_r),
        f"``cp.async.bulk.tensor.{_r}d.global.shared::cta.tile.bulk_group`` (PTX ISA: "
        "cp.async.bulk.tensor). Write the box in shared memory at ``src`` to the tensor; elements "
        "outside the tensor are not written. Complete with ``bulk_commit_group`` / ``bulk_wait_group``.",
    )
    _define(
        f"tma_reduce_{_r}d",
        f"cp.reduce.async.bulk.tensor.{_r}d.global.shared::cta.$op.tile.bulk_group [$tmap, {_clist(_r)}], [$src];",
        [Reg("src", u32), Reg("tmap", u64)] + _coords(_r) + [Imm("op", choices=TMA_REDUCE_OPS, default="add")],
        f"``cp.reduce.async.bulk.tensor.{_r}d.global.shared::cta.<op>.tile.bulk_group`` (PTX ISA: "
        "cp.reduce.async.bulk.tensor). Combine the box into the tensor with ``op``.",
    )
    _define(
        f"tma_prefetch_{_r}d",
        f"cp.async.bulk.prefetch.tensor.{_r}d.L2.global.tile [$tmap, {_clist(_r)}];",
        [Reg("tmap", u64)] + _coords(_r),
        f"``cp.async.bulk.prefetch.tensor.{_r}d.L2.global.tile`` (PTX ISA: "
        "cp.async.bulk.prefetch.tensor). Bring the box into L2.",
    )

bulk_commit_group = ptx_intrinsic(
    "bulk_commit_group",
    "cp.async.bulk.commit_group;",
    doc="``cp.async.bulk.commit_group`` (PTX ISA: cp.async.bulk.commit_group). Close this "
    "thread's outstanding bulk stores into a group.",
)

_N = Imm("n", rule=lambda v: isinstance(v, int) and 0 <= v <= 63, expect="an integer in [0, 63]", default=0)

bulk_wait_group = ptx_intrinsic(
    "bulk_wait_group",
    "cp.async.bulk.wait_group $n;",
    params=[_N],
    doc="``cp.async.bulk.wait_group N`` (PTX ISA: cp.async.bulk.wait_group). Wait until at most "
    "N bulk groups of this thread are pending (their writes done).",
)

bulk_wait_group_read = ptx_intrinsic(
    "bulk_wait_group_read",
    "cp.async.bulk.wait_group.read $n;",
    params=[_N],
    doc="``cp.async.bulk.wait_group.read N`` (PTX ISA: cp.async.bulk.wait_group). Wait until the "
    "sources of all but N pending groups have been read, so their shared memory may be reused.",
)

prefetch_tensormap = ptx_intrinsic(
    "prefetch_tensormap",
    "prefetch.tensormap [$tmap];",
    params=[Reg("tmap", u64)],
    doc="``prefetch.tensormap [tmap]`` (PTX ISA: prefetch). Fetch the tensor map into the cache.",
)

bulk_copy_g2s = ptx_intrinsic(
    "bulk_copy_g2s",
    "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$dst], [$src], $nbytes, [$bar];",
    params=[Reg("dst", u32), Reg("src", u64), _G2S_BYTES, Reg("bar", u32)],
    doc="``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`` (PTX ISA: "
    "cp.async.bulk). Copy ``nbytes`` (a multiple of 16) from global ``src`` to shared ``dst``.",
)

bulk_copy_g2s_array = ptx_intrinsic(
    "bulk_copy_g2s_array",
    """{
.reg .u64 %nbw_g;
cvta.to.global.u64 %nbw_g, $array;
add.u64 %nbw_g, %nbw_g, $offset;
cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [$dst], [%nbw_g], $nbytes, [$bar];
}""",
    params=[Reg("dst", u32), ArrayPtr("array"), Reg("offset", u64), _G2S_BYTES, Reg("bar", u32)],
    doc="``cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes`` (PTX ISA: cp.async.bulk) "
    "from byte ``offset`` of the global array ``array``: copy ``nbytes`` (a multiple of 16; both "
    "addresses 16-byte aligned) to shared ``dst``, completing on the mbarrier ``bar``.",
)

bulk_copy_s2g = ptx_intrinsic(
    "bulk_copy_s2g",
    "cp.async.bulk.global.shared::cta.bulk_group [$dst], [$src], $nbytes;",
    params=[Reg("dst", u64), Reg("src", u32), _S2G_BYTES],
    doc="``cp.async.bulk.global.shared::cta.bulk_group`` (PTX ISA: cp.async.bulk). Copy ``nbytes`` "
    "from shared ``src`` to global ``dst``; complete with the bulk group calls.",
)
