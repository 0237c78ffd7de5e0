"""nbwgmma: Hopper wgmma, TMA and mbarrier intrinsics for Numba-CUDA.

* :mod:`nbwgmma.intrinsics` - inline-PTX intrinsics for ``@cuda.jit`` kernels;
* :mod:`nbwgmma.layout` - host-side models of the data layouts (descriptors, swizzles,
  fragments, the numpy wgmma, the TMA box);
* :mod:`nbwgmma.report` - compile report (registers, spills, SASS) without a GPU;
* :mod:`nbwgmma.launch` - launches with large dynamic shared memory and clusters
  (``from nbwgmma.launch import launch``; the module, not the function, is
  ``nbwgmma.launch``, so ``help(nbwgmma.launch)`` shows ``PreparedLaunch``, the errors...);
* :mod:`nbwgmma.kit` - the authoring kit: pipeline, tile scheduler, epilogue and warpgroup helpers;
* :mod:`nbwgmma.kernels` - kernels written with them;
* :mod:`nbwgmma.frontend` - ``nbwgmma.matmul``'s parts (argument checks, plans, the tile
  model, autotuning);
* :mod:`nbwgmma.sim` - the kernels in Numba's CUDA simulator, thread by thread.
"""

__version__ = "0.1.0"

from . import sim

if sim.enabled():  # before anything imports the intrinsics: they are built as the simulator's
    sim.install()

from . import launch  # noqa: E402,F401  the module (its function is nbwgmma.launch.launch)
from .report import compile_report  # noqa: E402,F401
from .errors import MatmulError, MatmulTypeError, NbwgmmaError  # noqa: E402,F401  (see nbwgmma.errors)
from .frontend.matmul import matmul  # noqa: E402,F401
from .frontend.grouped import grouped_matmul  # noqa: E402,F401
from .frontend.sparse24 import Sparse24  # noqa: E402,F401
