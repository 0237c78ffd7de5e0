"""nbwgmma's exceptions, in one place.

Every bad input to :func:`nbwgmma.matmul` raises a :class:`MatmulError` with one line
that says what was expected and what was given. The classes also derive from the
built-in exception a caller would catch without knowing nbwgmma (``ValueError`` for
bad values, shapes and configurations, ``TypeError`` for wrong types), so existing
``except ValueError`` / ``except TypeError`` clauses keep working::

    NbwgmmaError(Exception)              anything nbwgmma rejects on purpose
    +-- MatmulError(ValueError)          a bad value, shape, device or config given to matmul
    |   +-- MatmulTypeError(TypeError)   a wrong array kind, element type or argument type
    +-- ConfigError(ValueError)          a kernel configuration (GemmConfig, ScaledConfig, ...) the
    |                                    kernel cannot be built with
    +-- LayoutError(ValueError)          a host-side layout model given values PTX does not define
    +-- KitError(ValueError)             a kit block asked for with parameters it cannot take
    +-- KindError(ValueError)            a wgmma kind PTX does not have (host-side models)
    +-- ToolchainError(RuntimeError)     no ptxas/nvdisasm, or no compiler (CUDA simulator)
    +-- ReportError(ValueError)          compile_report's kernel, sig, cc or launch_bounds unusable
    +-- LaunchError(ValueError)          a launch asks for more than the device allows, or an
    |                                    argument of a kind it cannot take (nbwgmma.launch)
    +-- KernelStoppedError(RuntimeError) a debug-wait launch trapped

:class:`ConfigError` has a ``key`` naming the parameter at fault; ``matmul`` reports it as
a :class:`MatmulError` that names ``config['key']``.

Older exceptions stay where they are defined and are re-exported here (on first use, so
that importing this module imports nothing else):

* ``TensorMapError`` (``NbwgmmaError``, ``ValueError``, :mod:`nbwgmma.tma`): a tensor map breaks
  a TMA rule or gets arguments of the wrong type;
* ``NbwgmmaTypingError`` (``NbwgmmaError`` and Numba's ``NumbaTypeError``,
  :mod:`nbwgmma.intrinsics.errors`): an intrinsic called with the wrong arguments inside a
  kernel; its ``NbwgmmaLiteralError`` (also Numba's ``RequireLiteralValue``): an argument that
  must be a compile-time constant given a run-time value;
* ``SimError`` (``NbwgmmaError``, ``RuntimeError``, :mod:`nbwgmma.sim`), the simulator's
  reports: ``SimStopped``, a simulated kernel would hang; ``SimHazard``, it does what the
  hardware leaves undefined.
"""

from __future__ import annotations

import numbers
import os

__all__ = ["own_source", "is_int", "NbwgmmaError", "MatmulError", "MatmulTypeError", "ConfigError", "ToolchainError", "ReportError",
           "LayoutError",
           "LaunchError", "KernelStoppedError", "TensorMapError", "NbwgmmaTypingError", "NbwgmmaLiteralError",
           "SimError", "SimStopped", "SimHazard"]


_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def own_source(filename: str) -> bool:
    """Whether ``filename`` (a code object's or a Numba location's) is nbwgmma's own code: its
    package, or a function it generated ("<nbwgmma...>"). Errors name the first line that is
    not, the user's."""
    if filename.startswith("<"):
        return filename.startswith("<nbwgmma")
    return (filename if os.path.isabs(filename) else os.path.abspath(filename)).startswith(_PACKAGE)


def bad_call_message(fn, exc: TypeError, given: str, npos: int | None = None) -> str:
    """The message for a call of nbwgmma's device function ``fn`` (a kit block, or one a kit
    class made: named as ``kit.TmaPipeline.consumer_wait``) whose arguments ``given`` (as
    written; ``npos`` of them positional) its signature cannot bind, ``exc`` the binding's error."""
    import inspect

    sig = inspect.signature(fn)
    npar = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in sig.parameters.values())
    if npos and npos < npar and "missing a required argument" in str(exc):
        # (Python names the first parameter left unbound; the argument left out may be any earlier one)
        exc = (f"{exc} ({npos} argument{'' if npos == 1 else 's'} given where it takes {npar}: the one left out may be "
               f"any of them)")
    made = getattr(getattr(fn, "__code__", None), "co_filename", "")
    if made.startswith("<nbwgmma.") and made.endswith(">"):  # made by a builder (acc_row_reduce('max', 256), ...)
        name = made[len("<nbwgmma."):-1]
        return f"{name}: {exc}: it takes {sig}; got ({given})"
    owner = fn.__qualname__.split(".")[0]
    name = ("kit." if (getattr(fn, "__module__", None) or "").startswith("nbwgmma.kit") else "") + \
        (f"{owner}.{fn.__name__}" if owner[:1].isupper() and owner != fn.__name__ else fn.__name__)
    return f"{name}: {exc}: its signature is {fn.__name__}{sig}; got {fn.__name__}({given})"


def is_int(v) -> bool:
    """Whether ``v`` is an integer an argument check takes: Python's or NumPy's, not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


class NbwgmmaError(Exception):
    """Base of the errors nbwgmma raises on purpose."""


class MatmulError(NbwgmmaError, ValueError):
    """Bad input to :func:`nbwgmma.matmul`: a value, shape, device or ``config``."""


class MatmulTypeError(MatmulError, TypeError):
    """An operand of :func:`nbwgmma.matmul` of the wrong kind (a host array, an unknown
    object), an unsupported element type, or an argument of the wrong Python type."""


class ConfigError(NbwgmmaError, ValueError):
    """A kernel configuration the kernel cannot be built with: a
    :class:`nbwgmma.kernels.gemm.GemmConfig`, ``ScaledConfig``, ``SparseConfig`` or the grouped
    kernels' parameters. ``key`` names the parameter at fault (the one to change)."""

    def __init__(self, key: str, message: str):
        super().__init__(message)
        self.key = key


class KitError(NbwgmmaError, ValueError):
    """A block of :mod:`nbwgmma.kit` (``TmaPipeline``, ``Cooperative``, ``TileScheduler``,
    ``acc_map``, ...) asked for with parameters it cannot be built with, where the kernel's
    module builds it (the message names the block and the parameter)."""


class KindError(NbwgmmaError, ValueError):
    """A wgmma kind (``"f32.bf16.bf16"``: accumulator, A and B types) that PTX does not have,
    given to a host-side model or a kit block (inside a kernel the same mistake is a
    typing error at the kernel's line)."""


class LaunchError(NbwgmmaError, ValueError):
    """The launch asks for more than the device allows, or its arguments are of a kind the
    call cannot take (raised by :mod:`nbwgmma.launch`)."""


class KernelStoppedError(NbwgmmaError, RuntimeError):
    """In debug-wait mode (``NBWGMMA_DEBUG_WAIT=1``) a launched kernel failed, typically an
    mbarrier wait that ran past its deadline and trapped."""


class ReportError(NbwgmmaError, ValueError):
    """Arguments :func:`nbwgmma.report.compile_report` (or ``compile_reports``, ``compile_cubin``)
    cannot compile with: a kernel that is not one, a signature of the wrong length or kind, a
    ``cc`` or ``launch_bounds`` of the wrong form. (A kernel that does not type-check for the
    signature is Numba's typing error at the kernel's line.)"""


class LayoutError(NbwgmmaError, ValueError):
    """A host-side model of :mod:`nbwgmma.layout` (descriptors, fragments, the wgmma and sparse
    models, element encodings) given values PTX does not define: a descriptor field off its
    16-byte steps, a swizzle or element type it does not have, a matrix that is not 2:4 sparse."""


class ToolchainError(NbwgmmaError, RuntimeError):
    """ptxas or nvdisasm is missing or failed, or Numba's CUDA compiler is not there (in its
    CUDA simulator)."""


# The older exceptions live beside the code that raises them; importing those modules here
# would make ``import nbwgmma.errors`` pull in Numba's CUDA target, so they are looked up
# when first asked for.
_ELSEWHERE = {
    "TensorMapError": "nbwgmma.tma",
    "TensorMapTypeError": "nbwgmma.tma",
    "NbwgmmaTypingError": "nbwgmma.intrinsics.errors",
    "NbwgmmaLiteralError": "nbwgmma.intrinsics.errors",
    "SimError": "nbwgmma.sim",
    "SimStopped": "nbwgmma.sim",
    "SimHazard": "nbwgmma.sim",
}


def roles_unfilled(name, nthreads, bound, where="") -> str:
    """The message of a launch of a kernel that sets its warpgroups' registers (``setmaxnreg``,
    ``where`` the first such call if known) with a block of ``nthreads`` below its launch
    bounds' ``bound``: its warpgroups have roles, and a missing one leaves its part undone
    (CUDA runs it; the output would be wrong without an error)."""
    missing = f"warpgroup {nthreads // 128}" if nthreads % 128 == 0 and bound - nthreads == 128 else \
        f"threads {nthreads}-{bound - 1}"
    return (f"launch of {name}: block of {nthreads} threads is below the {bound} of its launch bounds, and the kernel "
            f"sets its warpgroups' registers (setmaxnreg{where}), so each warpgroup has a role: {missing} would not "
            f"exist and its part of the work would be left undone; launch it with block={bound}")


def __getattr__(name):
    mod = _ELSEWHERE.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(mod), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_ELSEWHERE))
