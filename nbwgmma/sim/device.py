"""Device functions in the simulator, called without Numba's per-call module swap.

Numba's simulator runs a ``@cuda.jit(device=True)`` function by pointing the ``cuda`` names
of the function's module at the launch's fake CUDA module for the call (a lock, a scan of
the module's globals and a context manager per call), which made up most of the run time of
epilogue-heavy kernels (a call per accumulator value). Here the swap of every module that
defines device functions is held for a whole launch (:func:`device_modules_held`, entered by
:func:`nbwgmma.sim.run`), and a call inside it is a plain call.
"""

from __future__ import annotations

import contextlib
import threading

import numpy as np

from numba.cuda.simulator.kernel import BlockThread, FakeCUDAKernel
from numba.cuda.simulator.kernelapi import swapped_cuda_module

from ..errors import bad_call_message, own_source
from .core import python_only

__all__ = ["SimDeviceFunction", "fast_device_function", "device_modules_held"]

_MODULES: dict = {}  # id(a module's globals) -> a device function defined there
_HELD: set = set()  # the ids of the modules whose swap the running launch holds


class SimDeviceFunction(FakeCUDAKernel):
    """A device function: a plain call while :func:`device_modules_held` holds its module,
    else Numba's call."""

    def __call__(self, *args, **kwargs):
        if id(self.fn.__globals__) in _HELD:
            try:
                return self.fn(*args, **kwargs)
            except TypeError as e:
                if e.__traceback__.tb_next is None and own_source(self.fn.__code__.co_filename):
                    raise _bind_error(self.fn, args, kwargs) or e from None
                raise
            except (ArithmeticError, ValueError) as e:  # Python's arithmetic refusing what a kernel computes
                shown = ", ".join(repr(a) if isinstance(a, (int, float, np.number)) else _shown(a) for a in args)
                err = python_only(e, f" in {self.fn.__qualname__}({shown})")
                if err is None:
                    raise
                raise err
        if isinstance(threading.current_thread(), BlockThread) and own_source(self.fn.__code__.co_filename):
            # a kit block in a kernel Numba's own simulator launched (its threads are BlockThreads;
            # from the host it is a plain call)
            from .core import SimError

            raise SimError(f"{self.fn.__qualname__} (nbwgmma's) runs in the simulator only in a kernel launched "
                           f"with nbwgmma.launch.launch(kernel, grid, block, args, smem=...); kernel[grid, block](...) "
                           f"runs Numba's own simulator, which has none of nbwgmma's intrinsics")
        return super().__call__(*args, **kwargs)


def _shown(v) -> str:
    """An argument as a compiled kernel's typing error shows it (its Numba type: a fragment is
    ``UniTuple(float32 x 32)``, not its 32 values), else its ``repr``."""
    from numba import typeof

    try:
        return str(typeof(v))
    except (ValueError, TypeError):
        return repr(v)


def _bind_error(fn, args, kwargs):
    """The typing error a compiled kernel raises for a call of nbwgmma's device function ``fn``
    (a kit block) with arguments its signature cannot bind (as
    ``intrinsics.errors``' device-function hint words it), or None where they bind (the
    ``TypeError`` came from elsewhere)."""
    import inspect

    from ..backend import typing_error

    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as e:
        given = ", ".join([_shown(a) for a in args] + [f"{k}={_shown(v)}" for k, v in kwargs.items()])
        return typing_error(bad_call_message(fn, e, given, len(args)))
    return None


def fast_device_function(kernel):
    """``kernel`` (what the simulator's ``cuda.jit`` made) as a :class:`SimDeviceFunction`
    where it is a device function; its module is registered for :func:`device_modules_held`."""
    if type(kernel) is FakeCUDAKernel and kernel._device:
        kernel.__class__ = SimDeviceFunction
        _MODULES.setdefault(id(kernel.fn.__globals__), kernel.fn)
    return kernel


@contextlib.contextmanager
def device_modules_held(fake_cuda):
    """Point the ``cuda`` names of every module with device functions at ``fake_cuda`` (the
    launch's CUDA module) until the launch ends."""
    with contextlib.ExitStack() as stack:
        held = list(_MODULES.items())
        for _, fn in held:
            stack.enter_context(swapped_cuda_module(fn, fake_cuda))
        _HELD.update(gid for gid, _ in held)
        try:
            yield
        finally:
            _HELD.clear()
