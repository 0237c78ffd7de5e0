"""(c) A from registers: ldmatrix.x4 loads the A fragment, B comes from a descriptor.

Warp w of the warpgroup owns rows 16w..16w+15 of A (64 x 16 bf16, row-major in
shared memory). ``ldmatrix.x4`` takes one row address per lane: lanes 0-15 point
at rows 0-15, columns 0-7; lanes 16-31 at rows 0-15, columns 8-15. The four
registers it returns are exactly the wgmma A fragment: (rows 0-7, cols 0-7),
(rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15, cols 8-15).

    python examples/wgmma_rs_ldmatrix.py
"""

import numpy as np
from numba import cuda, types

from nbwgmma.demo import report_or_run
from nbwgmma.intrinsics import (
    acc_store, acc_zeros, dynamic_smem_base, fence_proxy_async_shared, ldmatrix, smem_addr,
    wgmma_commit_group, wgmma_fence, wgmma_mma_async_rs, wgmma_wait_group,
)
from nbwgmma.layout.wgmma_model import encode_elements
from nbwgmma.kernels.wgmma_tile import TileProblem

KIND, N = "f32.bf16.bf16", 64


@cuda.jit(launch_bounds=(128, 1))
def rs_kernel(a_bits, image, desc_b, out):
    a_s = cuda.shared.array((64, 16), np.uint16)
    dyn = cuda.shared.array(0, np.uint8)
    base = dynamic_smem_base(dyn, 1024)
    off = base - smem_addr(dyn)
    tid = cuda.threadIdx.x
    for i in range(tid, 64 * 16, 128):
        a_s[i // 16, i % 16] = a_bits[i // 16, i % 16]
    for i in range(tid, image.size, 128):
        dyn[off + i] = image[i]
    fence_proxy_async_shared()
    cuda.syncthreads()
    warp, lane = tid // 32, tid % 32
    row = 16 * warp + lane % 16
    col = 8 * (lane // 16)
    a = ldmatrix(smem_addr(a_s) + (row * 16 + col) * 2, 4)
    acc = acc_zeros(KIND, N)
    wgmma_fence()
    acc = wgmma_mma_async_rs(acc, a, desc_b[0] + (base >> 4), KIND)
    wgmma_commit_group()
    wgmma_wait_group(0)
    acc_store(acc, KIND, out, tid, 0, 0)


SIG = (types.uint16[:, :], types.uint8[:], types.uint64[:], types.float32[:, :])


def problem(seed=2):
    rng = np.random.default_rng(seed)
    a = rng.integers(-4, 5, (64, 16)).astype(np.float64)
    b = rng.integers(-4, 5, (N, 16)).astype(np.float64)
    return TileProblem(KIND, N, 1, a, b, swizzle="128B")


def run(p):
    """D of the kernel for problem ``p`` (on the GPU, or in the simulator)."""
    from nbwgmma.launch import dynamic_smem_bytes, launch

    a_bits = encode_elements(p.a, "bf16").view(np.uint16)
    out = cuda.to_device(np.full((64, N), np.nan, np.float32))
    launch(rs_kernel, 1, 128, (cuda.to_device(a_bits), cuda.to_device(p.image), cuda.to_device(p.desc_b), out),
           smem=dynamic_smem_bytes(p.image.size))
    return out.copy_to_host()


def main():
    p = problem()
    return report_or_run("m64n64k16 bf16, A from registers via ldmatrix.x4", p, lambda: (rs_kernel, SIG),
                         lambda: run(p))


if __name__ == "__main__":
    main()
