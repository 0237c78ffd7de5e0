"""ldmatrix / stmatrix: warp-collective 8x8 matrix moves between shared memory and registers.

PTX ISA, "Warp Level Matrix Load Instruction: ldmatrix" and "Warp Level Matrix
Store Instruction: stmatrix" (16-bit elements, shape ``.m8n8``, ``.x1/.x2/.x4``,
optional ``.trans``; stmatrix needs sm_90).

Lane map (:func:`nbwgmma.layout.ldmatrix_lane_map`): lanes ``8j..8j+7`` give the row addresses
of matrix ``j``; afterwards lane ``l`` holds, in register ``j``, elements
``(l // 4, 2 * (l % 4))`` and ``(l // 4, 2 * (l % 4) + 1)`` of matrix ``j``
(low half first). ``.trans`` delivers the transpose: lane ``l`` then holds
``(2 * (l % 4), l // 4)`` and ``(2 * (l % 4) + 1, l // 4)``.
"""

from __future__ import annotations

from ._asm import Frag, Imm, NbwgmmaTypingError, Out, Reg, ptx_intrinsic, u32

__all__ = ["ldmatrix", "stmatrix", "MATRIX_COUNTS"]

MATRIX_COUNTS = (1, 2, 4)

_TRANS = Imm("trans", choices=(0, 1), default=0)

ldmatrix = ptx_intrinsic(
    "ldmatrix",
    lambda num, trans: f"ldmatrix.sync.aligned.m8n8.x{num}{'.trans' if trans else ''}.shared::cta.b16 $d, [$addr];",
    params=[Reg("addr", u32), Imm("num", choices=MATRIX_COUNTS), _TRANS],
    outs=lambda num, trans: [Out("d", u32, count=num)],
    doc="``ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared::cta.b16`` (PTX ISA: ldmatrix). "
    "``regs = ldmatrix(addr, num, trans=0)``: each lane passes the shared address of one "
    "16-byte row; returns a tuple of ``num`` u32 registers (two 16-bit elements each).",
)


def _check_st(imms, argtypes):
    if imms["len_regs"] not in MATRIX_COUNTS:
        raise NbwgmmaTypingError(
            f"stmatrix: 'regs' must be a tuple of 1, 2 or 4 u32 registers; got {imms['len_regs']}"
        )


stmatrix = ptx_intrinsic(
    "stmatrix",
    lambda len_regs, trans: f"stmatrix.sync.aligned.m8n8.x{len_regs}{'.trans' if trans else ''}.shared::cta.b16 [$addr], $regs;",
    params=[Reg("addr", u32), Frag("regs", u32), _TRANS],
    validate=_check_st,
    doc="``stmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared::cta.b16`` (PTX ISA: stmatrix). "
    "``stmatrix(addr, regs, trans=0)``: the inverse of :func:`ldmatrix`; ``regs`` is a tuple "
    "of 1, 2 or 4 u32 registers.",
)
