"""(b) A 64B-swizzled m64n8k32: two m64n8k16 wgmmas over one swizzle atom.

With the 64-byte swizzle each row of the tile holds 64 bytes = 32 bf16 of K, and
8 rows form a 512-byte atom whose 16-byte chunks are permuted by
``addr ^ ((addr >> 7) & 3) << 4``. LBO is unused; SBO = 512 (the next 8 rows).
The second wgmma reads K = 16..31 by starting 32 bytes further: a plain byte
offset, because the hardware applies the swizzle to the address it forms.

    python examples/wgmma_m64n8k32_swizzle64.py
"""

import numpy as np
from numba import types

from nbwgmma.demo import report_or_run
from nbwgmma.layout import decode_desc
from nbwgmma.kernels.wgmma_tile import TileProblem, run_tile, tile_kernel

KIND, N, KSTEPS = "f32.bf16.bf16", 8, 2
SIG = (types.uint8[:], types.uint64[:], types.uint64[:], types.uint32[:, :, :], types.float32[:, :])


def main():
    rng = np.random.default_rng(1)
    a = rng.integers(-4, 5, (64, 32)).astype(np.float64)
    b = rng.integers(-4, 5, (N, 32)).astype(np.float64)
    p = TileProblem(KIND, N, KSTEPS, a, b, swizzle="64B")
    for s in range(KSTEPS):
        print(f"k-step {s}: A {decode_desc(int(p.desc_a[s]))}")
    return report_or_run(
        "m64n8k32 bf16 as two k16 wgmmas, 64B swizzle",
        p,
        lambda: (tile_kernel(KIND, N, KSTEPS), SIG),
        lambda: run_tile(p),
    )


if __name__ == "__main__":
    main()
