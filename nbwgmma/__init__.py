"""nbwgmma: Hopper wgmma, TMA and mbarrier intrinsics for Numba-CUDA.

* :mod:`nbwgmma.intrinsics` - inline-PTX intrinsics for ``@cuda.jit`` kernels;
* :mod:`nbwgmma.report` - compile report (registers, spills, SASS) without a GPU;
* :mod:`nbwgmma.launch` - launches with large dynamic shared memory and clusters;
* :mod:`nbwgmma.kernels` - kernels written with them.
"""

__version__ = "0.1.0"

from .launch import launch  # noqa: E402,F401
from .report import compile_report  # noqa: E402,F401
from .errors import MatmulError, MatmulTypeError, NbwgmmaError  # noqa: E402,F401  (see nbwgmma.errors)
from .matmul import matmul  # noqa: E402,F401
