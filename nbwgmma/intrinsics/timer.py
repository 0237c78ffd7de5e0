"""Timers and the SM a thread runs on: what a kernel records to see where its time went.

PTX ISA section: "Special Registers: %globaltimer, %clock64, %smid, %nsmid, %ctaid, %nctaid". ``%globaltimer``
is a 64-bit nanosecond timer shared by every SM (its resolution is the implementation's: see
``docs/guide.md``, "A kernel's timeline"); ``%clock64`` counts the cycles of the SM the thread
runs on (one SM's counts compare, two SMs' do not); ``%smid`` is that SM's number (the ISA does
not promise the numbers are contiguous, nor that a thread stays on one SM under preemption), in
``[0, %nsmid)``.

Each read is ``volatile`` with a memory clobber, so a timer read stays where it is written
between the loads and stores around it (it is not merged with another read nor moved).
"""

from __future__ import annotations

from ._asm import Out, ptx_intrinsic, special_register, u32, u64

__all__ = ["globaltimer", "clock64", "smid", "nsmid", "cta_index"]

globaltimer = special_register(
    "globaltimer", "%globaltimer", u64, volatile=True,
    doc="``mov.u64 r, %globaltimer`` (PTX ISA: Special Registers, %globaltimer). The GPU's "
    "nanosecond timer, the same on every SM: the times of two CTAs compare.",
)

clock64 = special_register(
    "clock64", "%clock64", u64, volatile=True,
    doc="``mov.u64 r, %clock64`` (PTX ISA: Special Registers, %clock64). The cycles counted by "
    "the SM the thread runs on: differences on one SM are cycles, values of two SMs do not compare.",
)

smid = special_register(
    "smid", "%smid", volatile=True,
    doc="``mov.u32 r, %smid`` (PTX ISA: Special Registers, %smid). The number of the SM the "
    "thread runs on, in [0, nsmid()).",
)

nsmid = special_register(
    "nsmid", "%nsmid",
    doc="``mov.u32 r, %nsmid`` (PTX ISA: Special Registers, %nsmid). One more than the largest "
    "SM number (the numbers need not be contiguous).",
)

cta_index = ptx_intrinsic(
    "cta_index",
    """{
.reg .u32 %nbw_x, %nbw_y, %nbw_z, %nbw_nx, %nbw_ny;
mov.u32 %nbw_x, %ctaid.x;
mov.u32 %nbw_y, %ctaid.y;
mov.u32 %nbw_z, %ctaid.z;
mov.u32 %nbw_nx, %nctaid.x;
mov.u32 %nbw_ny, %nctaid.y;
mad.lo.u32 %nbw_z, %nbw_z, %nbw_ny, %nbw_y;
mad.lo.u32 $value, %nbw_z, %nbw_nx, %nbw_x;
}""",
    outs=[Out("value", u32)],
    doc="``%ctaid`` and ``%nctaid`` (PTX ISA: Special Registers): this CTA's linear index in the grid, "
    "``x + nx * (y + ny * z)``, read anew at each call (``cuda.blockIdx`` is read once and kept in a "
    "register: an address derived from it before a long loop stays live through it). A timeline's row.",
)
