"""Device-side wgmma matrix descriptors: built and advanced in 32-bit PTX arithmetic.

The descriptor's fields and the swizzle modes are described with their host-side models in
:mod:`nbwgmma.layout.descriptor` (:func:`~nbwgmma.layout.descriptor.encode_desc` gives the
same bits as :func:`make_desc`; ``swizzle_code`` comes from
:data:`~nbwgmma.layout.descriptor.SWIZZLE_CODE`).
"""

from __future__ import annotations

from ..layout.descriptor import SWIZZLE_CODE
from ._asm import Out, Reg, ptx_intrinsic, ranged, u32, u64

__all__ = ["make_desc", "desc_advance"]

# An address, offset or stride field holds bytes / 16 in 14 bits (PTX ISA: "Matrix Descriptor
# Format"): a literal outside would lose its low 4 bits or its high ones.
_FIELD = "Matrix Descriptor Format, 14 bits of 16-byte units"
_CODE_NAMES = ", ".join(f"{c} ({s})" for s, c in sorted(SWIZZLE_CODE.items(), key=lambda sc: sc[1]))

# Device side: 32-bit arithmetic in PTX. Written in Python, the fields would be computed
# in 64-bit integers (Numba widens every integer operation), and each wgmma K step would
# cost a 64-bit add with carry; here the high word (SBO, swizzle) is built once and ptxas
# folds constant fields away, so a K step is one 32-bit add on the low word.
make_desc = ptx_intrinsic(
    "make_desc",
    """{
.reg .b32 %nbw_lo, %nbw_hi, %nbw_t;
bfe.u32 %nbw_lo, $addr, 4, 14;
bfe.u32 %nbw_t, $lbo, 4, 14;
bfi.b32 %nbw_lo, %nbw_t, %nbw_lo, 16, 14;
bfe.u32 %nbw_hi, $sbo, 4, 14;
bfi.b32 %nbw_hi, $swizzle_code, %nbw_hi, 30, 2;
mov.b64 $desc, {%nbw_lo, %nbw_hi};
}""",
    params=[ranged("addr", u32, 0, 2**18 - 16, 16, _FIELD), ranged("lbo", u32, 0, 2**18 - 16, 16, _FIELD),
            ranged("sbo", u32, 0, 2**18 - 16, 16, _FIELD),
            Reg("swizzle_code", u32, rule=lambda v: v in SWIZZLE_CODE.values(),
                expect=f"one of {_CODE_NAMES} (PTX ISA: Matrix Descriptor Format, a 2-bit field)")],
    outs=[Out("desc", u64)],
    memory=False,
    side_effect=False,
    doc="Device-side descriptor (PTX ISA: \"Matrix Descriptor Format\"): ``addr``, ``lbo``, "
    "``sbo`` in bytes, ``swizzle_code`` from :data:`nbwgmma.layout.SWIZZLE_CODE` (0 none, 1 128B, 2 64B, 3 32B). "
    "Same bits as :func:`nbwgmma.layout.encode_desc` (base offset 0).",
)

desc_advance = ptx_intrinsic(
    "desc_advance",
    """{
.reg .b32 %nbw_lo, %nbw_hi, %nbw_t;
mov.b64 {%nbw_lo, %nbw_hi}, $desc;
shr.u32 %nbw_t, $nbytes, 4;
add.u32 %nbw_lo, %nbw_lo, %nbw_t;
mov.b64 $out, {%nbw_lo, %nbw_hi};
}""",
    params=[Reg("desc", u64), ranged("nbytes", u32, 0, 2**18 - 16, 16, _FIELD)],
    outs=[Out("out", u64)],
    memory=False,
    side_effect=False,
    doc="Move a descriptor's start address by ``nbytes`` (a multiple of 16, within the 14-bit "
    "field), e.g. one K step inside a swizzled atom: a 32-bit add on the low word.",
)
