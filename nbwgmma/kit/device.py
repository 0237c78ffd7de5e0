"""Device functions that cost little to compile: :func:`inlined`; plain Python functions given to the
kit's builders made device functions (:func:`plain_device_function`), their arity checked at the
builder's call (:func:`check_fn_arity`; both in turn: :func:`device_function`).

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

import inspect

from numba import config, cuda

from ..errors import KitError

__all__ = ["inlined", "select", "plain_device_function", "check_fn_arity", "device_function"]


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


def check_fn_arity(block: str, fn, count: int, what: str, name: str = "fn"):
    """A :class:`KitError` (at the user's call of the builder ``block``, not deep in a kernel's
    typing) where the device function ``fn`` (the builder's argument ``name``) cannot take ``count``
    positional arguments (``what`` names them)."""
    if not callable(fn):
        raise KitError(f"{block}: {name} must be a device function (@cuda.jit(device=True)) taking {count} "
                       f"arguments {what}; got {type(fn).__name__} {fn!r}")
    py = getattr(fn, "py_func", fn)
    try:
        sig = inspect.signature(py)
    except (TypeError, ValueError):  # a builtin or an object without a Python signature: let Numba judge
        return
    try:
        sig.bind(*range(count))
    except TypeError:
        raise KitError(f"{block}: {name} {getattr(py, '__name__', py)}{sig} must take {count} arguments {what}; "
                       f"it takes {_positional(sig)}") from None


def _positional(sig) -> str:
    """How many positional arguments a signature takes, said as a user counts them."""
    ps = sig.parameters.values()
    pos = [p for p in ps if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    need = sum(p.default is p.empty for p in pos)
    kw = [p.name for p in ps if p.kind == p.KEYWORD_ONLY and p.default is p.empty]
    if any(p.kind == p.VAR_POSITIONAL for p in ps):
        said = f"{need} or more"
    else:
        said = f"{need}" if need == len(pos) else f"{need} to {len(pos)}"
    return said + (f", and keyword-only {', '.join(kw)} without a default (a kit block passes none)" if kw else "")


_PLAIN: dict = {}  # plain Python functions given to acc_map and the like -> their device functions


def plain_device_function(fn):
    """``fn``, a plain Python function (a ``def`` or a lambda), as the inlined device function a
    kernel can call (once per function: Numba compiled a plain global it met in a kernel with
    "Untyped global name"). :func:`~nbwgmma.kit.inlined`, not Numba's ``inline=True``: a mapped
    function is called once per fragment value, and copying its IR at each of 128-256 calls
    took 40% of the compile of a 64 x 256 log-sum-exp (the same SASS either way)."""
    dev = _PLAIN.get(fn)
    if dev is None:
        dev = _PLAIN[fn] = inlined(fn)
    return dev


def device_function(block: str, fn, count: int, what: str, name: str = "fn"):
    """``fn`` as a kit builder ``block`` calls it in a kernel: a plain ``def`` or lambda made a device
    function (:func:`plain_device_function`), its arity checked at the builder's call
    (:func:`check_fn_arity`: ``count`` positional arguments, ``what`` names them; ``name`` the
    builder's argument)."""
    if inspect.isfunction(fn):
        fn = plain_device_function(fn)
    check_fn_arity(block, fn, count, what, name)
    return fn
