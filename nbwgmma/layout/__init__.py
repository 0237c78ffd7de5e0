"""Host-side models of Hopper's data layouts: numpy (or plain int) functions and tables that
say where bytes and values sit, with no device code. The intrinsics (:mod:`nbwgmma.intrinsics`)
and the simulator (:mod:`nbwgmma.sim`) follow them; tests compare the GPU with them.

* :mod:`~nbwgmma.layout.descriptor`: the wgmma shared-memory matrix descriptor (encode,
  decode) and the swizzle modes, their constants and address maps, the K-major and MN-major
  tile offsets;
* :mod:`~nbwgmma.layout.kinds`: the wgmma type table (K, accumulator registers, legal N);
* :mod:`~nbwgmma.layout.fragment`: where each value of a register fragment sits (accumulator,
  A from registers, ``ldmatrix``'s lanes, the swizzled C tile of the epilogue stores);
* :mod:`~nbwgmma.layout.wgmma_model`: one wgmma computed in numpy from a shared-memory image
  through its descriptors, and the element encodings (bf16, tf32, fp8...);
* :mod:`~nbwgmma.layout.tma`: what one TMA box copy puts in shared memory.

Everything is importable from the package: ``from nbwgmma.layout import SWIZZLE_CODE, acc_coords``.
"""

from . import descriptor, fragment, kinds, tma, wgmma_model
from .descriptor import *  # noqa: F401,F403
from .fragment import *  # noqa: F401,F403
from .kinds import *  # noqa: F401,F403
from .tma import *  # noqa: F401,F403
from .wgmma_model import *  # noqa: F401,F403

__all__ = descriptor.__all__ + fragment.__all__ + kinds.__all__ + tma.__all__ + wgmma_model.__all__
