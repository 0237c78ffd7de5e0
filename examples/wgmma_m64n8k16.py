"""(a) One m64n8k16 bf16 wgmma on unswizzled, core-matrix-repacked operands.

Shared memory holds "core matrices" of 8 rows x 16 bytes (8 bf16), each
contiguous. A (64 x 16, K-major) is 8 x 2 core matrices: the next one along K is
128 bytes away (LBO = 128), the next 8 rows 256 bytes away (SBO = 256). B
(8 x 16 as N x K) is 1 x 2 core matrices with the same strides.

    python examples/wgmma_m64n8k16.py
"""

import numpy as np
from numba import types

from nbwgmma.demo import report_or_run
from nbwgmma.layout import decode_desc
from nbwgmma.kernels.wgmma_tile import TileProblem, run_tile, tile_kernel

KIND, N, KSTEPS = "f32.bf16.bf16", 8, 1
SIG = (types.uint8[:], types.uint64[:], types.uint64[:], types.uint32[:, :, :], types.float32[:, :])


def main():
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, (64, 16)).astype(np.float64)
    b = rng.integers(-4, 5, (N, 16)).astype(np.float64)
    p = TileProblem(KIND, N, KSTEPS, a, b, swizzle="none")
    print("A descriptor:", decode_desc(int(p.desc_a[0])))
    print("B descriptor:", decode_desc(int(p.desc_b[0])))
    return report_or_run(
        "m64n8k16 bf16 -> f32, no swizzle",
        p,
        lambda: (tile_kernel(KIND, N, KSTEPS), SIG),
        lambda: run_tile(p),
    )


if __name__ == "__main__":
    main()
