"""Device functions that cost little to compile: :func:`inlined`.

Numba inlines a device function declared ``inline=True`` into its Numba IR, copying the
function's IR at every call site and running Numba's passes on each copy again; a fused
epilogue that maps one scalar function over the 32 values of four accumulator parts took 30 s
to compile that way. Declared with :func:`inlined`, the function is compiled once per
argument types and the NVVM compiler inlines it (``forceinline``): the machine code is the
same (a fused GEMM's SASS was instruction for instruction the same) and the kernel compiles
in 4 s.

What Numba's inlining still does that this does not: arguments that must be compile-time
constants (an intrinsic's ``kind`` string, a register count) stay constants only through
``inline=True``; give such functions ``inline=True``.
"""

from __future__ import annotations

from numba import config, cuda

__all__ = ["inlined", "select"]


def inlined(fn):
    """``@inlined``: ``fn`` as a device function that the compiler inlines into every caller,
    compiled by Numba once per argument types (see the module's text). In the CUDA simulator,
    a plain device function."""
    if config.ENABLE_CUDASIM:
        return cuda.jit(device=True)(fn)
    return cuda.jit(device=True, forceinline=True)(fn)


@inlined
def select(cond, a, b):
    """``a if cond else b`` as one call: where code generated for every value of a fragment
    writes a conditional expression (or ``and``) per value, each is a branch in Numba's IR, and
    Numba's passes over hundreds of blocks cost seconds of compile time; the call is one
    statement, and the NVVM compiler makes it the same select (``FSEL``) after inlining."""
    return a if cond else b
