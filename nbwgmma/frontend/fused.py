"""``matmul(a, b, bias=..., activation=..., epilogue=..., c=..., out_dtype="e4m3")``: the checks and
operands of calls with a fused epilogue.

A bias, an activation, ``beta * C``, a user function and fp8 outputs (with ``scale_out`` and
``amax``) run in the library GEMM's own epilogue (:mod:`nbwgmma.kernels.gemm`), on every path
of :mod:`nbwgmma.frontend.plan` and for any types and layouts ``matmul`` takes. The bias and a
user function's vectors are read in their own type (f32, bf16 or f16) where they are
contiguous; a strided one is first copied into a contiguous f32 vector (by its array's
library, or a copy kernel for Numba arrays) on the call's stream.

The bias is a 1-D vector of N values (one per column of C, PyTorch's ``addmm`` bias), or a
column vector of shape (M, 1) (one per row); f32, bf16 or f16.

A user epilogue (``epilogue=fn``) is a device function ``fn(value, row, col, *extra) ->
value`` (a plain Python function is compiled as one), applied after the bias and the
activation; ``epilogue_args`` are its extras, up to four: vectors shaped like a bias (one
value per column or per row) or real numbers (f32). The kernel is compiled once per function
and kinds of extras (in each process: not kept in the disk cache). The function is first
compiled alone for its argument types (half a second): a function Numba cannot type fails
there, where inside the whole GEMM kernel Numba took two and a half minutes to say so.
"""

from __future__ import annotations

import builtins
import contextlib
import dis
import inspect
import math
import re

import numpy as np
from numba import config, cuda, types
from numba.core.errors import NumbaError

from ..capture import keep_if_captured
from ..errors import MatmulError, MatmulTypeError
from ..kernels.gemm_config import FP8_OUTS, MAX_EXTRAS
from ..kit import ACTIVATIONS
from ..kit.device import plain_device_function
from .args import described, is_real, real_arg
from .arrays import ArrayInfo, array_info
from .views import vector_f32

__all__ = ["check_epilogue", "user_epilogue", "check_c", "check_fp8_out", "FP8_OUTS", "bias_vector", "bias_operand",
           "epilogue_error"]

_TYPED = set()  # (a device function, its number of extras) that compiled alone


def check_epilogue(activation, bias_info: ArrayInfo | None, m: int, n: int, device) -> str | None:
    """The bias kind ("col", "row" or None) after checking ``activation`` and the bias."""
    if activation is not None and (not isinstance(activation, str) or activation not in ACTIVATIONS):
        raise MatmulError(f"matmul: activation must be one of {sorted(ACTIVATIONS)} or None; got {activation!r}")
    if bias_info is None:
        return None
    if bias_info.dtype not in ("f32", "bf16", "f16"):
        raw = " (a uint16 array's values cannot be told apart: give bf16 values as float32)" \
            if bias_info.dtype == "u16" else ""
        raise MatmulTypeError(f"matmul: bias must be f32, bf16 or f16; got {bias_info.dtype}{raw}")
    if bias_info.device != device:
        raise MatmulError(f"matmul: bias must be on device {device} like A; got device {bias_info.device}")
    shape = bias_info.shape
    kind = _vector_kind(shape, m, n)
    if kind is not None:
        return kind
    raise MatmulError(f"matmul: bias must have shape ({n},) or (1, {n}) (one per column of C) or ({m}, 1) "
                      f"(one per row); got {shape}")


def _vector_kind(shape, m, n) -> str | None:
    if shape in ((n,), (1, n)):
        return "col"
    if shape == (m, 1):
        return "row"
    return None


def user_epilogue(fn, args, m, n, device):
    """``(device function, extras kinds, infos)`` of an ``epilogue=`` and its ``epilogue_args``."""
    if fn is None:
        if args:
            raise MatmulError("matmul: epilogue_args are the extra arguments of an epilogue function; got no epilogue")
        return None, (), ()
    if not callable(fn):
        raise MatmulTypeError(f"matmul: epilogue must be a function (value, row, col, *extra) -> value; "
                              f"got {type(fn).__name__}")
    if not hasattr(fn, "py_func"):  # a plain Python function: compile it as an inlined device function
        if not inspect.isfunction(fn):
            raise MatmulTypeError(f"matmul: epilogue must be a Python function (a def or a lambda) or a "
                                  f"@cuda.jit(device=True) function (value, row, col, *extra) -> value; got "
                                  f"{type(fn).__name__} {getattr(fn, '__name__', '')}".rstrip())
        fn = plain_device_function(fn)
    if not isinstance(args, (tuple, list)):
        raise MatmulTypeError(f"matmul: epilogue_args must be a tuple of the epilogue function's extra arguments "
                              f"(numbers or vectors); got {type(args).__name__}")
    args = tuple(args)
    if len(args) > MAX_EXTRAS:
        raise MatmulError(f"matmul: epilogue_args takes up to {MAX_EXTRAS} extras; got {len(args)}")
    kinds, infos = [], []
    for i, x in enumerate(args):
        if is_real(x):
            real_arg(x, f"epilogue_args[{i}]")  # (a finite number: an int past the floats is refused)
            kinds.append("scalar")
            infos.append(None)
            continue
        want = f"a number or a vector of shape ({n},) or (1, {n}) (per column) or ({m}, 1) (per row)"
        if not hasattr(x, "shape"):
            raise MatmulTypeError(f"matmul: epilogue_args[{i}] must be {want}; got {type(x).__name__}")
        info = described(x, f"epilogue_args[{i}]")
        kind = _vector_kind(info.shape, m, n)
        if kind is None:
            raise MatmulError(f"matmul: epilogue_args[{i}] must be {want}; got shape {info.shape}")
        if info.dtype not in ("f32", "bf16", "f16"):
            raise MatmulTypeError(f"matmul: epilogue_args[{i}] must be f32, bf16 or f16; got {info.dtype}")
        if info.device != device:
            raise MatmulError(f"matmul: epilogue_args[{i}] must be on device {device} like A; got device {info.device}")
        kinds.append(kind)
        infos.append(info)
    _compiles_alone(fn, tuple(kinds))
    return fn, tuple(kinds), tuple(infos)


def _compiles_alone(fn, kinds):
    """Raise the :func:`epilogue_error` of a user function that does not compile for the types the
    kernel calls it with (value, row, col, extras: f32, int64, int64, f32...) or returns no number.
    (In the simulator, which has no compiler and runs the function as Python: that it takes that
    many arguments, and a call on the host with such values, :func:`_runs_on_the_host`.)"""
    if config.ENABLE_CUDASIM:
        try:
            inspect.signature(fn.py_func).bind(*range(3 + len(kinds)))
        except TypeError as e:
            raise epilogue_error(fn, kinds, e) from None
        missing = _undefined_globals(fn.py_func)
        if missing:  # (in any branch, as the compiler finds them; one call would find only its path's)
            raise epilogue_error(fn, kinds, NameError(f"name '{missing[0]}' is not defined"))
        _runs_on_the_host(fn, kinds)
        return
    if (fn, len(kinds)) in _TYPED:
        return
    sig = (types.float32, types.int64, types.int64) + (types.float32,) * len(kinds)
    try:
        _, resty = cuda.compile_ptx(fn.py_func, sig, device=True, cc=(9, 0))
    except NumbaError as e:
        raise epilogue_error(fn, kinds, e) from e
    if not isinstance(resty, (types.Number, types.Boolean)):
        raise epilogue_error(fn, kinds, f"it returns {resty}, not a number", _return_line(fn.py_func.__code__))
    if len(_TYPED) >= 256:
        _TYPED.clear()
    _TYPED.add((fn, len(kinds)))


def _undefined_globals(py) -> list:
    """The global names ``py``'s code reads that neither its module nor Python's builtins define
    (what Numba refuses as "untyped global name" when it compiles the function)."""
    names = {i.argval for i in dis.get_instructions(py) if i.opname == "LOAD_GLOBAL"}
    return sorted(x for x in names if x not in py.__globals__ and not hasattr(builtins, x))


def _runs_on_the_host(fn, kinds):
    """The simulator's stand-in for compiling ``fn`` alone: one call of its Python function with
    values of the kernel's types (1.0 as f32, row and column 0, each extra 1.0 as f32), before
    the launch. What no value would change is refused as the compiled path refuses it: a name
    that is not defined, an operation on the wrong types (raised in ``fn``'s own code), a
    result that is no number. Errors of the values (a logarithm of 0) and calls that run only
    in a kernel are left to the launch."""
    py = fn.py_func
    try:
        with np.errstate(all="ignore"):
            got = py(np.float32(1), np.int64(0), np.int64(0), *(np.float32(1),) * len(kinds))
    except (NameError, TypeError) as e:  # (not AttributeError: cuda.threadIdx, cuda.fma exist in a kernel only)
        tb = e.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        if tb.tb_frame.f_code.co_filename == py.__code__.co_filename:  # (raised in the user's code)
            raise epilogue_error(fn, kinds, e, tb.tb_lineno) from None
        return
    except Exception:  # noqa: BLE001 - value-dependent, or a call that runs in a kernel only
        return
    if not isinstance(got, (int, float, bool, np.number, np.bool_)):
        raise epilogue_error(fn, kinds, f"it returns {type(got).__name__}, not a number", _return_line(py.__code__))


def bias_vector(bias, info, stream=None):
    """A strided bias or vector (``info``: its 1-D view) as a contiguous f32 array the kernel
    reads, copied by its own array's library (PyTorch, CuPy; a copy kernel for Numba and other
    arrays) on ``stream``, a raw handle, where the call runs on a stream of its own (the kernel reads it
    there, and the library frees it there)."""
    if info.kind == "torch":
        import torch

        on = contextlib.nullcontext() if stream is None else \
            torch.cuda.stream(torch.cuda.ExternalStream(stream, device=bias.device))
        with on:
            return bias.reshape(-1).float().contiguous()
    if info.kind == "cupy":
        import cupy

        with contextlib.nullcontext() if stream is None else cupy.cuda.ExternalStream(stream):
            return keep_if_captured(cupy.ascontiguousarray(bias.reshape(-1), dtype=np.float32))
    if info.dtype not in ("f32", "f16"):
        raise MatmulTypeError(f"matmul: a strided bias or epilogue vector of this array kind is copied here as f32 "
                              f"or f16 only; got {info.dtype} (give it contiguous)")
    return keep_if_captured(vector_f32(info, bias, stream))  # (a graph's kernel reads it: nbwgmma.capture)


_C_TYPES = {"bf16": "bf16", "u16": "bf16", "f16": "f16", "f32": "f32"}


def check_c(c, beta, m, n, device, shapes=None, raw_f16=False):
    """``(info of C or None, beta as a float)``: C of shape (M, N) (or one of ``shapes``) on A's
    device, bf16, f16 or f32, any strides; ``beta`` a real number, 1 by default where C is given
    (C checked but not read where beta is 0). A uint16 C holds bf16 bits: refused where the
    call's operands are f16 given as uint16 bits (``raw_f16``: :func:`~.args.raw_f16`), whose
    bits it might as well be."""
    if c is None:
        if beta is not None and not is_real(beta):
            raise MatmulTypeError(f"matmul: beta must be a real number; got {type(beta).__name__}")
        if beta is not None and beta != 0:
            raise MatmulError(f"matmul: beta scales C; got beta={beta!r} and no c")
        return None, 0.0
    info = described(c, "c")
    if info.shape not in (shapes or ((m, n),)):
        want = " or ".join(str(x) for x in (shapes or ((m, n),)))
        raise MatmulError(f"matmul: c must have shape {want} like the output; got {info.shape}")
    if info.dtype not in _C_TYPES:
        raise MatmulTypeError(f"matmul: c must be bf16, f16 or f32; got {info.dtype}")
    if info.dtype == "u16" and raw_f16:
        raise MatmulTypeError("matmul: c is uint16, which nbwgmma reads as bf16 bits, and A or B holds f16 bits "
                              "(in_dtype='f16'): give C as float16 (f16 bits as .view(np.float16))")
    if info.device != device:
        raise MatmulError(f"matmul: c must be on device {device} like A; got device {info.device}")
    beta = real_arg(1.0 if beta is None else beta, "beta")
    # beta = 0: C is not read (NaN or inf in it stays out of the result), as torch.addmm does
    return (None, 0.0) if beta == 0 else (info, beta)


def check_fp8_out(odt, scale_out, amax, device):
    """``scale_out`` and ``amax`` of an fp8 output: ``(scale, amax info or None)``."""
    if odt not in FP8_OUTS:
        if scale_out is not None or amax is not None:
            raise MatmulError(f"matmul: scale_out and amax go with an fp8 output (out_dtype e4m3 or e5m2); got an "
                              f"output of {odt}")
        return 1.0, None
    scale = real_arg(1.0 if scale_out is None else scale_out, "scale_out")
    if amax is None:
        return scale, None
    info = described(amax, "amax")
    if info.dtype != "f32":  # (the wrong type: TypeError's side, as for the other arrays)
        raise MatmulTypeError(f"matmul: amax must be a one-element f32 array; got {info.dtype}")
    if info.shape not in ((1,), ()) or info.device != device:
        raise MatmulError(f"matmul: amax must be a one-element f32 array on device {device}; got shape {info.shape} "
                          f"on device {info.device}")
    return scale, info


def bias_operand(bias, info: ArrayInfo, stream=None):
    """``(info, owner)`` of the bias as the library GEMM reads it: a contiguous 1-D vector of f32,
    f16 or bf16 elements read in place, or (a strided one) an f32 copy (on ``stream``:
    :func:`bias_vector`)."""
    es, length = info.itemsize, math.prod(info.shape)
    steps = [st for st, d in zip(info.strides, info.shape) if d != 1]  # (a vector: one, or none)
    if length == 1 or es in steps:
        return info._replace(shape=(length,), strides=(es,)), bias
    vec = bias_vector(bias, info._replace(shape=(length,), strides=(steps[0],)), stream)
    vi = array_info(vec)
    return vi._replace(shape=(length,), strides=(4,)), vec


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _return_line(code) -> int | None:
    """The line of the first ``return`` of a tuple in ``code`` (``return v, s``), else of its first
    ``return``: where a function that returns no number says so; None where there is none."""
    first = prev = None
    for i in dis.get_instructions(code):
        if i.opname in ("RETURN_VALUE", "RETURN_CONST") and i.positions and i.positions.lineno:
            first = first or i.positions.lineno
            if i.opname == "RETURN_CONST":  # (3.12: a constant returned directly)
                pair = isinstance(i.argval, tuple)
            else:  # (the value the return takes: a tuple built, or a constant one loaded)
                pair = prev is not None and (prev.opname == "BUILD_TUPLE"
                                             or prev.opname == "LOAD_CONST" and isinstance(prev.argval, tuple))
            if pair:
                return i.positions.lineno
        prev = i
    return first


def epilogue_error(fn, kinds, e, line: int | None = None) -> MatmulError:
    """The error of a user epilogue ``fn`` (extras of ``kinds``) that Numba could not compile (or
    the simulator could not run): ``e``, Numba's error (or the exception, or a reason), as its
    reason in one line (Numba's terminal escapes and its pass names left out; for a call of no
    implementation, the signature it was called with), and where: the line ``line`` of ``fn``'s
    file, else the line that uses the undefined name, else the line of its ``def``."""
    text = _ANSI.sub("", str(e))
    lines = [x.strip() for x in text.splitlines()]
    lines = [x for x in lines if x and not x.startswith(("Failed in ", "During: "))]
    if not lines:
        reason = type(e).__name__
    elif lines[0].startswith("No implementation of function"):  # "... found for signature:", then ">>> add(...)"
        reason = " ".join([lines[0]] + [x for x in lines[1:2] if x.startswith(">>>")])
    else:
        reason = lines[0]
    if isinstance(e, Exception) and not isinstance(e, NumbaError) and not reason.startswith(type(e).__name__):
        reason = f"{type(e).__name__}: {reason}"
    py = getattr(fn, "py_func", fn)
    code = getattr(py, "__code__", None)
    where = ""
    if code is not None:
        if line is None:
            name = re.search(r"name '(\w+)' is not defined|[Uu]ntyped global name '(\w+)'", reason)
            line = next((i.positions.lineno for i in dis.get_instructions(code)
                         if name and i.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF")
                         and i.argval == (name.group(1) or name.group(2)) and i.positions), None)
        where = f" (at {code.co_filename}:{line or code.co_firstlineno})"
    return MatmulError(f"matmul: the epilogue function {getattr(fn, '__name__', fn)!s} does not compile with "
                       f"arguments (value: f32, row: int64, col: int64"
                       f"{''.join(', ' + ('f32' if k == 'scalar' else 'f32 (its ' + k + ')') for k in kinds)}): "
                       f"{reason}{where}")
