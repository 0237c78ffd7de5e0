"""Approximate math on the special function unit, for epilogues.

PTX ISA, "Floating Point Instructions: ex2" and "Floating Point Instructions: rcp"
(docs anchors ``#floating-point-instructions-ex2``, ``#floating-point-instructions-rcp``).
Numba's ``math.exp`` and ``/`` compile to the accurate (and longer) sequences; libdevice's
``fast_expf`` and ``fast_fdividef`` keep subnormal handling (extra multiplies and compares
around each ``MUFU``). These are one ``MUFU`` instruction each, flushing subnormal inputs
and results to zero (``.ftz``):

* :func:`ex2_approx` ``(x) -> 2**x``: ``ex2.approx.ftz.f32``, maximum relative error about
  ``2**-22`` (PTX ISA);
* :func:`rcp_approx` ``(x) -> 1/x``: ``rcp.approx.ftz.f32``, at most 1 ulp.

In the simulator both are the correctly rounded function (with the same flushing): within
the error bounds above of the GPU's result, not bit-identical to it.
"""

from __future__ import annotations

from ._asm import Out, Reg, f32, ptx_intrinsic

__all__ = ["ex2_approx", "rcp_approx"]

# name: (PTX opcode, what it computes, its SASS, its error bound per the PTX ISA)
_OPS = {
    "ex2_approx": ("ex2", "``2**x``", "MUFU.EX2", "relative error about 2**-22"),
    "rcp_approx": ("rcp", "``1/x``", "MUFU.RCP", "at most 1 ulp"),
}


def _declare(name, op, what, sass, error):
    return ptx_intrinsic(
        name,
        f"{op}.approx.ftz.f32 $y, $x;",
        params=[Reg("x", f32)],
        outs=[Out("y", f32)],
        side_effect=False,
        memory=False,
        doc=f"``{op}.approx.ftz.f32`` (PTX ISA: {op}): {what} in f32, one {sass}; {error}; "
        "subnormal inputs and results flush to zero.",
    )


ex2_approx = _declare("ex2_approx", *_OPS["ex2_approx"])
rcp_approx = _declare("rcp_approx", *_OPS["rcp_approx"])
