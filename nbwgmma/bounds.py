"""A kernel's launch bounds as its ``@cuda.jit(launch_bounds=...)`` gave them, for the launcher and the
simulator alike (a leaf module: the simulator cannot import :mod:`nbwgmma.launch`)."""

from __future__ import annotations

from .errors import is_int

__all__ = ["launch_bounds"]


def launch_bounds(kernel) -> tuple | None:
    """(threads, blocks) of ``kernel``'s launch bounds (``launch_bounds=(384, 1)`` or ``384``: (384, 1)),
    or None where it declares none. ``kernel`` is a dispatcher (its target options hold them), a
    compiled kernel or the simulator's kernel (an attribute)."""
    bounds = getattr(kernel, "launch_bounds", None) or getattr(kernel, "targetoptions", {}).get("launch_bounds")
    if not bounds:
        return None
    if is_int(bounds):
        return int(bounds), 1
    return int(bounds[0]), int(bounds[1]) if len(bounds) > 1 else 1
