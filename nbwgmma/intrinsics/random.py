"""Philox-4x32-10, the counter-based generator, as one block of integer instructions.

PTX ISA, "Integer Arithmetic Instructions: mul" (``mul.lo.u32``, ``mul.hi.u32``: the low and
high words of a 32 x 32-bit product, which ``ptxas`` fuses into one ``IMAD.WIDE.U32``), "add"
and "Logic and Shift Instructions: xor". Written in PTX so that every step is 32-bit: Numba
widens unsigned 32-bit products to 64 bits.

* :func:`philox4x32` ``(c0, c1, c2, c3, k0, k1) -> (r0, r1, r2, r3)``: ten rounds over the
  counter ``(c0..c3)`` under the key ``(k0, k1)``, every operand and result uint32 (an integer
  argument is taken modulo 2^32; a float is a typing error);
* :func:`uint_to_uniform` ``(w) -> u``: a word to an f32 in [0, 1): ``w`` read as a signed
  integer ``x``, folded to ``x`` or ``-x - 1`` (``x ^ (x >> 31)``), converted (nearest) and
  multiplied by 2^-31 (1 - 2^-24), rounded to nearest (``cvt.rn.f32.s32``, ``mul.rn.f32``: no
  contraction into a following add; PTX ISA "cvt", "mul", "shr").

The host model, the constants and the conventions (Triton's: the key is a 64-bit seed's two
words, the counter ``(offset's two words, 0, 0)``) are in :mod:`nbwgmma.random`; the kit's draws built on
this (:func:`nbwgmma.kit.rand` and its kin) in :mod:`nbwgmma.kit.random`.
"""

from __future__ import annotations

from ..random import PHILOX_M, PHILOX_ROUNDS, PHILOX_W
from ._asm import Out, Reg, f32, ptx_intrinsic, u32

__all__ = ["philox4x32", "uint_to_uniform"]


def _template():
    """The ten rounds on local registers (an output may share a register with an input, so the
    counter and key are copied in first and the results copied out last)."""
    lines = ["{", ".reg .b32 %nbw_c<4>, %nbw_k<2>, %nbw_h<2>, %nbw_l<2>;",
             "mov.b32 %nbw_c0, $c0; mov.b32 %nbw_c1, $c1; mov.b32 %nbw_c2, $c2; mov.b32 %nbw_c3, $c3;",
             "mov.b32 %nbw_k0, $k0; mov.b32 %nbw_k1, $k1;"]
    m0, m1 = (f"0x{m:08X}" for m in PHILOX_M)
    w0, w1 = (f"0x{w:08X}" for w in PHILOX_W)
    for r in range(PHILOX_ROUNDS):
        lines += [f"mul.hi.u32 %nbw_h0, %nbw_c0, {m0}; mul.lo.u32 %nbw_l0, %nbw_c0, {m0};",
                  f"mul.hi.u32 %nbw_h1, %nbw_c2, {m1}; mul.lo.u32 %nbw_l1, %nbw_c2, {m1};",
                  "xor.b32 %nbw_c0, %nbw_h1, %nbw_c1; xor.b32 %nbw_c0, %nbw_c0, %nbw_k0; mov.b32 %nbw_c1, %nbw_l1;",
                  "xor.b32 %nbw_c2, %nbw_h0, %nbw_c3; xor.b32 %nbw_c2, %nbw_c2, %nbw_k1; mov.b32 %nbw_c3, %nbw_l0;"]
        if r < PHILOX_ROUNDS - 1:
            lines.append(f"add.u32 %nbw_k0, %nbw_k0, {w0}; add.u32 %nbw_k1, %nbw_k1, {w1};")
    lines += ["mov.b32 $r0, %nbw_c0; mov.b32 $r1, %nbw_c1; mov.b32 $r2, %nbw_c2; mov.b32 $r3, %nbw_c3;", "}"]
    return "\n".join(lines)


philox4x32 = ptx_intrinsic(
    "philox4x32",
    _template(),
    params=[Reg("c0", u32), Reg("c1", u32), Reg("c2", u32), Reg("c3", u32), Reg("k0", u32), Reg("k1", u32)],
    outs=[Out("r0", u32), Out("r1", u32), Out("r2", u32), Out("r3", u32)],
    side_effect=False,
    memory=False,
    doc="Philox-4x32-10 (PTX ISA: mul.lo/mul.hi.u32, xor, add). ``r0, r1, r2, r3 = "
    "philox4x32(c0, c1, c2, c3, k0, k1)``: the generator's four uint32 words at counter "
    "``(c0, c1, c2, c3)`` under key ``(k0, k1)``, arguments taken modulo 2^32; "
    "``nbwgmma.random.philox4x32`` computes the same on the host.",
)

uint_to_uniform = ptx_intrinsic(
    "uint_to_uniform",
    "{ .reg .b32 %nbw_s, %nbw_t; shr.s32 %nbw_s, $w, 31; xor.b32 %nbw_t, $w, %nbw_s; "
    "cvt.rn.f32.s32 $u, %nbw_t; mul.rn.f32 $u, $u, 0f2FFFFFFF; }",
    params=[Reg("w", u32)],
    outs=[Out("u", f32)],
    side_effect=False,
    memory=False,
    doc="(PTX ISA: shr, xor, cvt.rn.f32.s32, mul.rn.f32). ``u = uint_to_uniform(w)``: the uint32 "
    "word ``w`` as a uniform f32 in [0, 1) (read as a signed ``x``, folded to ``x`` or ``-x - 1``, "
    "times 2^-31 (1 - 2^-24), Triton's 4.6566127342e-10 as an f32: at most 1 - 2^-24), as "
    "``nbwgmma.random.uniform`` and Triton's ``tl.rand`` convert a word.",
)
