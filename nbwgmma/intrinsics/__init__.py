"""Inline-PTX intrinsics for Hopper (sm_90a), one module per PTX family.

Everything here is usable inside ``@cuda.jit`` kernels. Star-importing this
package gives the whole instruction set::

    from nbwgmma.intrinsics import *
"""

from .. import sim as _sim

if _sim.enabled():
    _sim.install_jit_shim()

from . import address, control, descriptor, fastmath, fence, fragment, matrix, mbarrier, tma, wgmma
from .address import *  # noqa: F401,F403
from .control import *  # noqa: F401,F403
from .descriptor import *  # noqa: F401,F403
from .fastmath import *  # noqa: F401,F403
from .fence import *  # noqa: F401,F403
from .fragment import *  # noqa: F401,F403
from .matrix import *  # noqa: F401,F403
from .mbarrier import *  # noqa: F401,F403
from .tma import *  # noqa: F401,F403
from .wgmma import *  # noqa: F401,F403

__all__ = (
    address.__all__ + control.__all__ + descriptor.__all__ + fastmath.__all__ + fence.__all__
    + fragment.__all__ + matrix.__all__ + mbarrier.__all__ + tma.__all__ + wgmma.__all__
)

if _sim.enabled():  # the fragment helpers are Numba intrinsics on the GPU, models in the simulator
    for _name, _f in _sim.FRAGMENT_IMPLS.items():
        setattr(fragment, _name, _f)
        globals()[_name] = _f
