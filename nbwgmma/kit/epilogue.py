"""Epilogues on accumulator fragments, unrolled at compile time.

A thread of a warpgroup holds ``N / 2`` values of a 64 x N f32 (or s32) accumulator; value
``i`` of thread ``t`` sits at row ``16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) % 2)`` and
column ``8 * (i // 4) + 2 * (t % 4) + i % 2`` (PTX ISA, "Asynchronous Warpgroup Level Matrix
Accumulator Fragment", the D layout of m64nNk*). :func:`acc_map` turns a scalar function
``fn(value, row, col, *extra) -> value`` into a device function over the whole fragment:
its generated source indexes the tuple with constants only and computes each coordinate as
a base plus a constant, so the fragment stays in registers (no local memory) and the row
and column cost one add each::

    @cuda.jit(device=True, inline=True)
    def bias_gelu(v, row, col, bias, n):
        if col < n:
            v += bias[col]
        return gelu_tanh(v)

    epilogue = acc_map(bias_gelu, 256, nextra=2, pack="bf16")
    ...
    regs = epilogue(acc, tid, row0, col0, bias, n)   # inside the kernel, after wgmma_wait_group

Row and column are signed integers: compare them with the kernel's int32 sizes as they are.
With ``pack="bf16"`` the results come out as packed bf16 pairs, ready for ``stmatrix``.
The activations are device functions of one value.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from ..intrinsics import acc_to_bf16x2, acc_to_f16x2
from .. import sim

if sim.enabled():  # the simulator runs device code as Python: the exact functions stand in
    def fast_expf(x):
        return np.float32(math.exp(x))

    def fast_fdividef(x, y):
        return np.float32(x / y)
else:
    from numba.cuda.libdevice import fast_expf, fast_fdividef

__all__ = ["acc_map", "activation", "ACTIVATIONS", "relu", "gelu", "gelu_tanh", "silu", "sigmoid",
           "value_coords"]


@cuda.jit(device=True, inline=True)
def relu(v):
    return max(v, np.float32(0.0))


@cuda.jit(device=True, inline=True)
def gelu(v):
    """x * Phi(x), with the error function (PyTorch's ``gelu``, approximate='none')."""
    return np.float32(0.5) * v * (np.float32(1.0) + math.erf(v * np.float32(0.7071067811865476)))


@cuda.jit(device=True, inline=True)
def gelu_tanh(v):
    """The tanh approximation (PyTorch's ``gelu(approximate='tanh')``), written as
    ``x * sigmoid(2u)`` with ``u = sqrt(2/pi) (x + 0.044715 x^3)``: the same function
    (0.5 (1 + tanh u) = sigmoid(2u)) with one fast exp and one fast division (``ex2.approx``,
    ``div.approx``: a few ulp of f32, far below the bf16 or f16 the result is stored in)."""
    u2 = np.float32(1.5957691216057308) * v * (np.float32(1.0) + np.float32(0.044715) * v * v)
    return fast_fdividef(v, np.float32(1.0) + fast_expf(-u2))


@cuda.jit(device=True, inline=True)
def sigmoid(v):
    return np.float32(1.0) / (np.float32(1.0) + math.exp(-v))


@cuda.jit(device=True, inline=True)
def silu(v):
    return v / (np.float32(1.0) + math.exp(-v))


ACTIVATIONS = {"relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh, "silu": silu, "sigmoid": sigmoid}


def activation(name: str):
    """The device function of activation ``name`` (one of :data:`ACTIVATIONS`)."""
    try:
        return ACTIVATIONS[name]
    except (KeyError, TypeError):
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}; got {name!r}") from None


@cuda.jit(device=True, inline=True)
def value_coords(tid, i):
    """(row, col) of accumulator value ``i`` held by warpgroup thread ``tid`` (``i`` a constant
    where the fragment is indexed, so both fold to a base plus a constant)."""
    w = tid // 32
    lane = tid % 32
    return 16 * w + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2


_DTYPES = {"f32": np.float32, "s32": np.int32}
_PACKS = {None: None, "bf16": acc_to_bf16x2, "f16": acc_to_f16x2}


def acc_map(fn, n: int, *, nextra: int = 0, dtype: str = "f32", pack: str | None = None):
    """A device function ``(acc, tid, row0, col0, *extra) -> fragment`` applying the device
    function ``fn(value, row, col, *extra)`` to every value of a 64 x ``n`` accumulator
    fragment of thread ``tid`` (0-127 in its warpgroup) whose tile starts at (``row0``,
    ``col0``). ``nextra`` extra arguments (vectors, scalars) are passed through to ``fn``.

    Each result is converted back to the accumulator's type (``dtype`` "f32" or "s32"); with
    ``pack`` "bf16" or "f16" adjacent results are packed into 32-bit registers as they are
    made (the ``acc_to_bf16x2`` layout, ready for ``acc_stmatrix_swizzled``), so the f32
    results never need registers of their own: the epilogue keeps at most the fragment live."""
    if not isinstance(n, int) or n % 8 or not 8 <= n <= 256:
        raise ValueError(f"acc_map: n must be a wgmma N (a multiple of 8 in [8, 256]); got {n!r}")
    if dtype not in _DTYPES:
        raise ValueError(f"acc_map: dtype must be one of {sorted(_DTYPES)}; got {dtype!r}")
    if pack not in _PACKS or (pack and dtype != "f32"):
        raise ValueError(f"acc_map: pack must be None, 'bf16' or 'f16' (f32 accumulators); got {pack!r}")
    if not isinstance(nextra, int) or not 0 <= nextra <= 8:
        raise ValueError(f"acc_map: nextra must be an integer in [0, 8]; got {nextra!r}")
    extra = "".join(f", e{j}" for j in range(nextra))
    # Coordinates are signed (int64): comparing them with an int32 bound stays an integer
    # compare (an unsigned one against a signed bound would go through float64).
    lines = [f"def mapped(acc, tid, row0, col0{extra}):",
             "    lane = tid % 32",
             "    r = row0 + 16 * (tid // 32) + lane // 4",
             "    c = col0 + 2 * (lane % 4)",
             "    return ("]

    def value(i):
        dr, dc = 8 * ((i // 2) % 2), 8 * (i // 4) + i % 2
        return f"T(fn(acc[{i}], r + {dr}, c + {dc}{extra}))"

    for i in range(0, n // 2, 2):
        if pack:
            lines.append(f"        P(({value(i)}, {value(i + 1)}))[0],")
        else:
            lines.append(f"        {value(i)}, {value(i + 1)},")
    lines.append("    )")
    ns = {"fn": fn, "T": _DTYPES[dtype], "P": _PACKS[pack]}
    exec(compile("\n".join(lines), f"<nbwgmma.kit.acc_map {getattr(fn, '__name__', 'fn')} n={n}>", "exec"), ns)
    return cuda.jit(device=True, inline=True)(ns["mapped"])
