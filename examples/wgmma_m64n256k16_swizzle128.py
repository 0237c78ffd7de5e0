"""(d) m64n256k16 with the 128-byte swizzle: the GEMM building block.

Rows of 128 bytes (64 bf16 of K), 8 rows per 1024-byte atom, SBO = 1024, four
k16 steps per atom (start address + 32 bytes each). Each thread holds 128 f32
accumulators, which stay in registers.

    python examples/wgmma_m64n256k16_swizzle128.py
"""

import numpy as np
from numba import types

from nbwgmma.demo import report_or_run
from nbwgmma.kernels.wgmma_tile import TileProblem, run_tile, tile_kernel

KIND, N, KSTEPS = "f32.bf16.bf16", 256, 4
SIG = (types.uint8[:], types.uint64[:], types.uint64[:], types.uint32[:, :, :], types.float32[:, :])


def main():
    rng = np.random.default_rng(3)
    a = rng.integers(-4, 5, (64, 64)).astype(np.float64)
    b = rng.integers(-4, 5, (N, 64)).astype(np.float64)
    p = TileProblem(KIND, N, KSTEPS, a, b, swizzle="128B")
    return report_or_run(
        "m64n256k16 bf16 -> f32 x 4 k-steps, 128B swizzle",
        p,
        lambda: (tile_kernel(KIND, N, KSTEPS), SIG),
        lambda: run_tile(p),
    )


if __name__ == "__main__":
    main()
