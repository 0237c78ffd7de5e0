"""Host-side models of Hopper's data layouts: numpy (or plain int) functions and tables that
say where bytes and values sit, with no device code. The intrinsics (:mod:`nbwgmma.intrinsics`)
and the simulator (:mod:`nbwgmma.sim`) follow them; tests compare the GPU with them.

* :mod:`~nbwgmma.layout.descriptor`: the wgmma shared-memory matrix descriptor (encode,
  decode) and the swizzle modes, their constants and address maps, the K-major and MN-major
  tile offsets;
* :mod:`~nbwgmma.layout.kinds`: the wgmma type tables, dense and sparse (K, accumulator
  registers, legal N, sparsity selectors);
* :mod:`~nbwgmma.layout.fragment`: where each value of a register fragment sits (accumulator,
  A from registers, ``ldmatrix``'s lanes, the swizzled C tile of the epilogue stores);
* :mod:`~nbwgmma.layout.wgmma_model`: one wgmma computed in numpy from a shared-memory image
  through its descriptors, and the element encodings (bf16, tf32, fp8...);
* :mod:`~nbwgmma.layout.sparse`: 2:4 sparsity for ``wgmma.mma_async.sp``: prune, compress
  into values + metadata codes, decompress, the per-thread metadata registers and the compressed
  A registers, and the numpy sparse wgmma;
* :mod:`~nbwgmma.layout.tma`: what one TMA box copy puts in shared memory.

Everything is importable from the package: ``from nbwgmma.layout import SWIZZLE_CODE, acc_coords``.
"""

from . import descriptor, fragment, kinds, sparse, tma, wgmma_model
from .descriptor import *  # noqa: F401,F403
from .fragment import *  # noqa: F401,F403
from .kinds import *  # noqa: F401,F403
from .sparse import *  # noqa: F401,F403
from .tma import *  # noqa: F401,F403
from .wgmma_model import *  # noqa: F401,F403

__all__ = (descriptor.__all__ + fragment.__all__ + kinds.__all__ + sparse.__all__ + tma.__all__
           + wgmma_model.__all__)
