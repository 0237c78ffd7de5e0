"""Where a simulated thread is: the ``file:line`` of the innermost kernel frame, skipping the
simulator, Numba and the standard library; for nbwgmma's own code (a kit block, an intrinsic)
called from a user's kernel, the user's line as well."""

from __future__ import annotations

import os
import sys

from ..errors import own_source
from .sched import current

_HERE = os.path.dirname(os.path.abspath(__file__))
#: the simulator, the standard library, and the backend's ``typing_error`` that asks where a thread is
_SKIP = (_HERE, os.path.dirname(os.__file__) + os.sep, os.path.join(os.path.dirname(_HERE), "backend.py"))


#: What each source file is to :func:`where` (by code filename): bits :data:`IN_SKIP` (the
#: simulator or the standard library), :data:`IN_NUMBA`, :data:`IN_OWN` (nbwgmma's own code).
_FILES: dict = {}
IN_SKIP, IN_NUMBA, IN_OWN = 1, 2, 4


def file_bits(filename: str) -> int:
    bits = _FILES.get(filename)
    if bits is None:
        bits = _FILES[filename] = (IN_SKIP * filename.startswith(_SKIP) + IN_OWN * own_source(filename)
                                   + IN_NUMBA * (f"{os.sep}numba{os.sep}" in filename or "numba_cuda" in filename))
    return bits


def where() -> str:
    """``file:line`` of the innermost kernel frame (outside the simulator and Numba); where that
    is nbwgmma's own code (a kit block, an intrinsic, a generated function) called from a kernel
    of yours, followed by "(called from ``file:line``)" of your line."""
    return where_from(sys._getframe(1), current())


def where_from(f, th) -> str:
    """:func:`where` of the stack from frame ``f`` down, thread ``th``'s (a suspended
    greenlet's stack too: its frames stand still at their lines)."""
    inner, caller = where_parts(f, th)
    return inner if caller is None else f"{inner} (called from {caller})"


def where_parts(f, th) -> tuple:
    """(``file:line`` of the innermost kernel frame from frame ``f`` down, that of the user's line
    that called it where it is nbwgmma's own code, else None): :func:`where_from`'s parts."""
    while f is not None and file_bits(f.f_code.co_filename) & (IN_SKIP | IN_NUMBA):
        f = f.f_back
    if f is None:
        return "<unknown>", None
    inner = f"{f.f_code.co_filename}:{f.f_lineno}"
    if not file_bits(f.f_code.co_filename) & IN_OWN:
        return inner, None
    kernel = getattr(getattr(th, "fn", None), "__code__", None)
    if kernel is not None and file_bits(kernel.co_filename) & IN_OWN:  # a kernel of nbwgmma's own
        return inner, None
    while f is not None and file_bits(f.f_code.co_filename) & (IN_OWN | IN_NUMBA):
        f = f.f_back
    if f is None or file_bits(f.f_code.co_filename) & IN_SKIP:  # a kernel of nbwgmma's own
        return inner, None
    return inner, f"{f.f_code.co_filename}:{f.f_lineno}"
