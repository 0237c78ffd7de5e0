"""Approximate math on the special function unit, for epilogues.

PTX ISA, "Floating Point Instructions: ex2", "... rcp" and "... tanh" (docs anchors
``#floating-point-instructions-ex2``, ``#floating-point-instructions-rcp``,
``#floating-point-instructions-tanh``).
Numba's ``math.exp`` and ``/`` compile to the accurate (and longer) sequences; libdevice's
``fast_expf`` and ``fast_fdividef`` keep subnormal handling (extra multiplies and compares
around each ``MUFU``). These are one ``MUFU`` instruction each (``ex2`` and ``rcp`` flushing
subnormal inputs and results to zero, ``.ftz``):

* :func:`ex2_approx` ``(x) -> 2**x``: ``ex2.approx.ftz.f32``, maximum relative error about
  ``2**-22`` (PTX ISA);
* :func:`rcp_approx` ``(x) -> 1/x``: ``rcp.approx.ftz.f32``, at most 1 ulp;
* :func:`tanh_approx` ``(x) -> tanh(x)``: ``tanh.approx.f32`` (sm_75 on), maximum relative error
  ``2**-11`` per the PTX ISA; measured on an H100 against float64 (x in [-10, 10]): at most
  7.8e-6 absolute (``2**-17``), 1.1e-5 relative.

In the simulator each is the correctly rounded function (with the same flushing): within
the error bounds above of the GPU's result, not bit-identical to it.
"""

from __future__ import annotations

from ._asm import Out, Reg, f32, ptx_intrinsic

__all__ = ["ex2_approx", "rcp_approx", "tanh_approx"]

# name: (PTX opcode, its modifier, what it computes, its SASS, its error bound per the PTX ISA)
# (tanh.approx has no .ftz: it keeps subnormals)
_OPS = {
    "ex2_approx": ("ex2", ".ftz", "``2**x``", "MUFU.EX2", "relative error about 2**-22"),
    "rcp_approx": ("rcp", ".ftz", "``1/x``", "MUFU.RCP", "at most 1 ulp"),
    "tanh_approx": ("tanh", "", "``tanh(x)``", "MUFU.TANH", "relative error at most 2**-11 per the ISA, 2**-17 "
                    "absolute measured on an H100"),
}


def _declare(name, op, ftz, what, sass, error):
    return ptx_intrinsic(
        name,
        f"{op}.approx{ftz}.f32 $y, $x;",
        params=[Reg("x", f32)],
        outs=[Out("y", f32)],
        side_effect=False,
        memory=False,
        doc=f"``{op}.approx{ftz}.f32`` (PTX ISA: {op}): {what} in f32, one {sass}; {error}"
        + ("; subnormal inputs and results flush to zero." if ftz else "."),
    )


ex2_approx = _declare("ex2_approx", *_OPS["ex2_approx"])
rcp_approx = _declare("rcp_approx", *_OPS["rcp_approx"])
tanh_approx = _declare("tanh_approx", *_OPS["tanh_approx"])
