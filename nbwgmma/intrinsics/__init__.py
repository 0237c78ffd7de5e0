"""Inline-PTX intrinsics for Hopper (sm_90a), one module per PTX family.

Everything here is usable inside ``@cuda.jit`` kernels. Star-importing this
package gives the whole instruction set::

    from nbwgmma.intrinsics import *
"""

from . import address, control, fence, mbarrier
from .address import *  # noqa: F401,F403
from .control import *  # noqa: F401,F403
from .fence import *  # noqa: F401,F403
from .mbarrier import *  # noqa: F401,F403

__all__ = address.__all__ + control.__all__ + fence.__all__ + mbarrier.__all__
