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

ex2_approx = ptx_intrinsic(
    "ex2_approx",
    "ex2.approx.ftz.f32 $y, $x;",
    params=[Reg("x", f32)],
    outs=[Out("y", f32)],
    side_effect=False,
    memory=False,
    doc="``ex2.approx.ftz.f32`` (PTX ISA: ex2): ``2**x`` in f32, one MUFU.EX2; relative "
    "error about 2**-22; subnormal inputs and results flush to zero.",
)

rcp_approx = ptx_intrinsic(
    "rcp_approx",
    "rcp.approx.ftz.f32 $y, $x;",
    params=[Reg("x", f32)],
    outs=[Out("y", f32)],
    side_effect=False,
    memory=False,
    doc="``rcp.approx.ftz.f32`` (PTX ISA: rcp): ``1/x`` in f32, one MUFU.RCP, at most 1 ulp; "
    "subnormal inputs and results flush to zero.",
)
