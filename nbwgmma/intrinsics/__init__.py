"""Inline-PTX intrinsics for Hopper (sm_90a), one module per PTX family.

Everything here is usable inside ``@cuda.jit`` kernels (device functions and compile-time
constants such as :data:`~nbwgmma.intrinsics.tma.TMA_REDUCE_OPS`). Star-importing this
package gives the whole instruction set::

    from nbwgmma.intrinsics import *

The host-side models these intrinsics follow (descriptor encoding, swizzles, fragment
coordinates, the numpy wgmma, the TMA box) are in :mod:`nbwgmma.layout`. In Numba's CUDA
simulator each intrinsic is the Python function :mod:`nbwgmma.sim` registers for it
(:mod:`nbwgmma.backend`).
"""

from . import (address, async_copy, control, convert, descriptor, fastmath, fence, fragment, fragment_smem, matrix,
               mbarrier, random, timer, tma, wgmma)
from .address import *  # noqa: F401,F403
from .async_copy import *  # noqa: F401,F403
from .control import *  # noqa: F401,F403
from .convert import *  # noqa: F401,F403
from .descriptor import *  # noqa: F401,F403
from .fastmath import *  # noqa: F401,F403
from .fence import *  # noqa: F401,F403
from .fragment import *  # noqa: F401,F403
from .fragment_smem import *  # noqa: F401,F403
from .matrix import *  # noqa: F401,F403
from .mbarrier import *  # noqa: F401,F403
from .random import *  # noqa: F401,F403
from .timer import *  # noqa: F401,F403
from .tma import *  # noqa: F401,F403
from .wgmma import *  # noqa: F401,F403

__all__ = (
    address.__all__ + async_copy.__all__ + control.__all__ + convert.__all__ + descriptor.__all__ + fastmath.__all__
    + fence.__all__ + fragment.__all__ + fragment_smem.__all__ + matrix.__all__ + mbarrier.__all__ + random.__all__
    + timer.__all__ + tma.__all__
    + wgmma.__all__
)


def _kernel_signatures():
    """``inspect.signature`` of each ``@intrinsic`` shows the kernel's arguments, without Numba's
    ``typingctx`` (the inline-PTX ones set theirs in ``_asm.ptx_intrinsic``)."""
    import inspect

    g = globals()
    for name in __all__:
        fn = g[name]
        if "__signature__" in getattr(fn, "__dict__", {}):
            continue
        try:
            params = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError):
            continue
        if params and params[0].name == "typingctx":
            fn.__signature__ = inspect.Signature(params[1:])


_kernel_signatures()

