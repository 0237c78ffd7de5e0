"""Non-bulk asynchronous copies from global to shared memory, completed on an mbarrier, and
the prefetch of global memory into the L1 cache.

PTX ISA, "Data Movement and Conversion Instructions: cp.async",
"cp.async.mbarrier.arrive" and "prefetch, prefetchu". A thread issues small copies (4, 8 or 16 bytes) that run
without holding its registers; ``cp.async.mbarrier.arrive.noinc`` then makes an mbarrier
count one arrival of the thread once all of its earlier copies have landed. So a warp can
gather scattered values (a column of per-row scales, say) into a pipeline's slot and move on
at once: count its threads in the barrier's expected arrivals, and the consumers' wait on
the barrier both sees the bytes and orders them. ``prefetch_l1`` only warms the SM's L1
cache with a line of global memory that a later load of any thread of the CTA will read.
"""

from __future__ import annotations

from ._asm import ArrayPtr, Imm, Reg, ptx_intrinsic, ranged, u32, u64

__all__ = ["cp_async", "cp_async_zfill", "cp_async_mbarrier_arrive_noinc", "prefetch_l1"]

cp_async = ptx_intrinsic(
    "cp_async",
    """{
.reg .u64 %nbw_g;
cvta.to.global.u64 %nbw_g, $array;
add.u64 %nbw_g, %nbw_g, $offset;
cp.async.ca.shared::cta.global [$dst], [%nbw_g], $size;
}""",
    params=[Reg("dst", u32), ArrayPtr("array"), Reg("offset", u64), Imm("size", choices=(4, 8, 16))],
    doc="``cp.async.ca.shared::cta.global [dst], [src], size`` (PTX ISA: cp.async). Start a copy of "
    "``size`` bytes (4, 8 or 16; ``dst`` and the source aligned to it) from byte ``offset`` of the "
    "global array ``array`` to the ``.shared::cta`` address ``dst``. Nothing may read ``dst`` before "
    "the copy is known complete: follow the thread's copies with "
    ":func:`cp_async_mbarrier_arrive_noinc` and wait on that barrier.",
)

cp_async_zfill = ptx_intrinsic(
    "cp_async_zfill",
    """{
.reg .u64 %nbw_g;
cvta.to.global.u64 %nbw_g, $array;
add.u64 %nbw_g, %nbw_g, $offset;
cp.async.cg.shared::cta.global [$dst], [%nbw_g], 16, $nvalid;
}""",
    params=[Reg("dst", u32), ArrayPtr("array"), Reg("offset", u64),
            ranged("nvalid", u32, 0, 16, source="cp.async, src-size <= cp-size")],
    doc="``cp.async.cg.shared::cta.global [dst], [src], 16, src-size`` (PTX ISA: cp.async). Start a "
    "16-byte copy (both addresses 16-byte aligned, cached in L2 only) from byte ``offset`` of the global "
    "array ``array`` to the ``.shared::cta`` address ``dst`` of which only the first ``nvalid`` bytes "
    "(0 to 16) are read: the rest of the 16 are written as zeros (a vector that runs past the end of "
    "its data). Complete it as :func:`cp_async`.",
)

cp_async_mbarrier_arrive_noinc = ptx_intrinsic(
    "cp_async_mbarrier_arrive_noinc",
    "cp.async.mbarrier.arrive.noinc.shared::cta.b64 [$bar];",
    params=[Reg("bar", u32)],
    doc="``cp.async.mbarrier.arrive.noinc.shared::cta.b64 [bar]`` (PTX ISA: cp.async.mbarrier.arrive). "
    "Once every earlier :func:`cp_async` of this thread has completed, arrive once on the mbarrier "
    "``bar`` (``.noinc``: the arrival counts against the barrier's expected count, so count this "
    "thread in it); a wait on the barrier then sees the copied bytes.",
)

prefetch_l1 = ptx_intrinsic(
    "prefetch_l1",
    """{
.reg .u64 %nbw_g;
cvta.to.global.u64 %nbw_g, $array;
add.u64 %nbw_g, %nbw_g, $offset;
prefetch.global.L1 [%nbw_g];
}""",
    params=[ArrayPtr("array"), Reg("offset", u64)],
    memory=False,
    doc="``prefetch.global.L1 [a]`` (PTX ISA: prefetch, prefetchu). Bring the cache line holding byte "
    "``offset`` of the global array ``array`` into the SM's L1 cache; it changes no value, so later "
    "loads of the line by any thread of the CTA hit L1 instead of waiting for L2 (the line stays "
    "while nothing evicts it: TMA loads into shared memory do not pass through L1, but a fence of "
    "GPU scope or a cluster barrier's wait invalidates L1). Keep ``offset`` inside the array.",
)
