"""Which implementation the intrinsics are built with: inline PTX for Numba's CUDA target (the
default), or Python functions that a simulator registers here.

:mod:`nbwgmma.intrinsics` never imports a simulator: when Numba's CUDA simulator is on
(``NUMBA_ENABLE_CUDASIM=1``), the package's ``__init__`` runs :func:`nbwgmma.sim.install`
first thing, before anything imports the intrinsics, and the simulator registers its
implementations with :func:`register`. Each intrinsic then asks this module while it is
declared: :func:`python_intrinsic` for one declared from a PTX template, :func:`python_functions`
for the hand-written Numba intrinsics (the fragment operations).
"""

from __future__ import annotations

from typing import Callable

__all__ = ["register", "active", "python_intrinsic", "python_functions", "typing_error"]

# (declare, functions, where) once a simulator has registered, else None
_registered: list = [None]


def register(declare: Callable, functions: dict, where: Callable[[], tuple | None] | None = None) -> None:
    """Build every intrinsic as Python: ``declare(name, params, imms, doc)`` makes the
    function for a PTX-template intrinsic (its operand spec ``params``, the compile-time
    ones among them ``imms``); ``functions`` replace hand-written intrinsics by name;
    ``where()`` gives the kernel line a simulated thread is at and nbwgmma's own line under it
    (None where the thread is in the kernel's own code), or None outside a simulated kernel
    (see :func:`typing_error`)."""
    _registered[0] = (declare, dict(functions), where)


def typing_error(message: str):
    """The :class:`~nbwgmma.intrinsics.errors.NbwgmmaTypingError` a compiled kernel's typing
    raises for ``message``, as a simulator raises it: its text led by "file:line: " of the
    simulated kernel's line (where a simulator has registered a locator and the call is in a
    simulated kernel; for nbwgmma's own code called from the kernel, the kernel's line, then
    nbwgmma's line after the message), as a compiled one's is, without terminal escapes;
    ``.message`` the message alone."""
    from .intrinsics.errors import NbwgmmaTypingError  # (the intrinsics import after a simulator registers)

    where = _registered[0][2] if _registered[0] is not None else None
    located = where() if where is not None else None
    if located is None:
        text = message
    else:
        at, inner = located
        text = f"{at}: {message}" + (f" (at {inner})" if inner else "")
    e = NbwgmmaTypingError(text, highlighting=False)
    e.message = message
    return e


def active() -> bool:
    """Whether a simulator has registered its implementations."""
    return _registered[0] is not None


def python_intrinsic(name: str, params: list, imms: list, doc: str | None, validate=None):
    """The registered Python implementation of intrinsic ``name``, or None (inline PTX);
    ``validate(imms, argtypes)`` the intrinsic's own rules across its arguments, for the
    implementation to apply to the values it is called with."""
    if _registered[0] is None:
        return None
    return _registered[0][0](name, params, imms, doc, validate)


def python_functions(names, namespace: dict | None = None) -> dict:
    """The registered replacements among ``names`` (empty with no simulator). With
    ``namespace`` (the module's globals, the compiled intrinsics in it), a replacement without a
    docstring takes its intrinsic's, so that ``help()`` reads the same in the simulator."""
    if _registered[0] is None:
        return {}
    functions = _registered[0][1]
    out = {n: functions[n] for n in names if n in functions}
    for n, f in out.items():
        doc = getattr((namespace or {}).get(n), "__doc__", None)
        if doc and not f.__doc__:
            f.__doc__ = doc
    return out
