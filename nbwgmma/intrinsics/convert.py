"""Conversions between two f32 values and a 32-bit register of two 16-bit floats.

PTX ISA, "Data Movement and Conversion Instructions: cvt" (``cvt.rn.bf16x2.f32``,
``cvt.rn.f16x2.f32``, ``cvt.f32.bf16``, ``cvt.f32.f16``) and "mov" (a ``.b32`` split into its
two ``.b16`` halves). For code that works on packed 16-bit data rather than on a fragment
(the fragment forms are :func:`~nbwgmma.intrinsics.acc_to_bf16x2` and its kin), such as a
pass over a tile staged in shared memory:

* :func:`x2_to_f32` ``(w, fmt) -> (lo, hi)``: the two halves of ``w`` as f32 (exact);
* :func:`f32_to_x2` ``(lo, hi, fmt) -> w``: both rounded to ``fmt`` (nearest even), ``lo``
  in the low half, as the fragment packers and ``stmatrix`` lay pairs out.

``fmt`` is ``"bf16"`` or ``"f16"`` (a compile-time constant).
"""

from __future__ import annotations

from ._asm import Imm, Out, Reg, f32, ptx_intrinsic, u32

__all__ = ["x2_to_f32", "f32_to_x2", "X2_FORMATS"]

#: The 16-bit formats of the packed pairs.
X2_FORMATS = ("bf16", "f16")
_FMT = Imm("fmt", choices=X2_FORMATS)

x2_to_f32 = ptx_intrinsic(
    "x2_to_f32",
    lambda fmt: ("{ .reg .b16 lo16, hi16; mov.b32 {lo16, hi16}, $w; "
                 f"cvt.f32.{fmt} $lo, lo16; cvt.f32.{fmt} $hi, hi16; }}"),
    params=[Reg("w", u32), _FMT],
    outs=[Out("lo", f32), Out("hi", f32)],
    side_effect=False,
    memory=False,
    doc="``mov.b32 {l, h}, w`` then ``cvt.f32.{bf16,f16}`` of each half (PTX ISA: mov, cvt). "
    "``lo, hi = x2_to_f32(w, fmt)``: the low and high 16-bit halves of ``w`` as f32 values (exact).",
)

f32_to_x2 = ptx_intrinsic(
    "f32_to_x2",
    lambda fmt: f"cvt.rn.{fmt}x2.f32 $w, $hi, $lo;",
    params=[Reg("lo", f32), Reg("hi", f32), _FMT],
    outs=[Out("w", u32)],
    side_effect=False,
    memory=False,
    doc="``cvt.rn.{bf16x2,f16x2}.f32`` (PTX ISA: cvt). ``w = f32_to_x2(lo, hi, fmt)``: both "
    "values rounded to ``fmt`` (nearest even; f16 overflows to infinity), ``lo`` in the low half.",
)
