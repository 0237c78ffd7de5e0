"""TMA + wgmma on one tile: 64x64 bf16 A and B loaded by TMA with the 128-byte swizzle,
four m64n64k16 wgmmas over K = 64, D (f32) written into a 128B-swizzled shared tile as
two 64x32 halves and stored back with TMA.

    python examples/tma_wgmma_tile.py           # check D, then time many tiles
"""

import time

import numpy as np
from numba import cuda, types

from nbwgmma.demo import compile_report_instead, gpu_available
from nbwgmma.intrinsics import (
    acc_store_swizzled, acc_zeros, bulk_commit_group, bulk_wait_group, desc_advance, dynamic_smem_base,
    fence_mbarrier_init, fence_proxy_async_shared, make_desc, mbarrier_arrive_expect_tx, mbarrier_init,
    mbarrier_wait_parity, named_barrier_sync, smem_addr, tma_load_2d, tma_store_2d, wgmma_commit_group,
    wgmma_fence, wgmma_mma_async, wgmma_wait_group,
)
from nbwgmma.layout import SWIZZLE_CODE

KIND = "f32.bf16.bf16"
TILE = 64 * 64 * 2  # bytes of one bf16 64x64 tile
SW128 = SWIZZLE_CODE["128B"]


@cuda.jit(launch_bounds=(128, 1))
def tma_wgmma(tmap_a, tmap_b, tmap_d, reps):
    dyn = cuda.shared.array(0, np.uint8)
    bars = cuda.shared.array(1, np.uint64)
    base = dynamic_smem_base(dyn, 1024)
    sa, sb, sd = base, base + TILE, base + 2 * TILE  # A, B, then D (two 8 KiB halves)
    bar = smem_addr(bars)
    tid = cuda.threadIdx.x
    if tid == 0:
        mbarrier_init(bar, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    if tid == 0:
        mbarrier_arrive_expect_tx(bar, 2 * TILE)
        tma_load_2d(sa, tmap_a, bar, 0, 0)
        tma_load_2d(sb, tmap_b, bar, 0, 0)
    mbarrier_wait_parity(bar, 0)
    da = make_desc(sa, 16, 1024, SW128)
    db = make_desc(sb, 16, 1024, SW128)
    acc = acc_zeros(KIND, 64)
    for _ in range(reps):
        wgmma_fence()
        acc = wgmma_mma_async(acc, da, db, KIND)
        acc = wgmma_mma_async(acc, desc_advance(da, 32), desc_advance(db, 32), KIND)
        acc = wgmma_mma_async(acc, desc_advance(da, 64), desc_advance(db, 64), KIND)
        acc = wgmma_mma_async(acc, desc_advance(da, 96), desc_advance(db, 96), KIND)
        wgmma_commit_group()
        wgmma_wait_group(0)
    # Two 64x32 f32 halves of 128-byte rows, swizzled as the D tensor map expects.
    acc_store_swizzled(acc, KIND, sd, tid, 128, "128B")
    fence_proxy_async_shared()
    named_barrier_sync(1, 128)
    if tid == 0 and cuda.blockIdx.x == 0:
        tma_store_2d(sd, tmap_d, 0, 0)
        tma_store_2d(sd + 64 * 128, tmap_d, 32, 0)
        bulk_commit_group()
        bulk_wait_group(0)


SIG = (types.uint64, types.uint64, types.uint64, types.int32)


def run(a, b):
    """D = A B^T (f32) of 64x64 integer-valued A and B (N x K) through the kernel, on the GPU
    or in the simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    from nbwgmma.layout.wgmma_model import encode_elements
    from nbwgmma.launch import dynamic_smem_bytes, launch
    from nbwgmma.tma import TensorMap

    bits = [cuda.to_device(encode_elements(x, "bf16").view(np.uint16).reshape(64, 64)) for x in (a, b)]
    d = cuda.to_device(np.full((64, 64), np.nan, np.float32))
    maps = [TensorMap(x, (64, 64), dtype="bf16", swizzle="128B") for x in bits]
    maps.append(TensorMap(d, (64, 32), swizzle="128B"))
    launch(tma_wgmma, 1, 128, tuple(m.address for m in maps) + (1,), smem=dynamic_smem_bytes(4 * TILE))
    return d.copy_to_host(), maps


def main(time_it=True):
    from nbwgmma import sim

    if not gpu_available() and not sim.enabled():
        return compile_report_instead(tma_wgmma, SIG)
    rng = np.random.default_rng(0)
    a = rng.integers(-4, 5, (64, 64))
    b = rng.integers(-4, 5, (64, 64))  # N x K
    d, maps = run(a, b)
    err = float(np.abs(d.astype(np.float64) - a @ b.T).max())
    print(f"D[0, :6] = {d[0, :6].tolist()}\nmax |D - A B^T| = {err:g} over 4096 elements")
    if err != 0.0:
        raise SystemExit("mismatch")
    if time_it and not sim.enabled():
        from nbwgmma.launch import dynamic_smem_bytes, launch

        blocks, reps = 132 * 4, 2000
        args = tuple(m.address for m in maps) + (reps,)
        smem = dynamic_smem_bytes(4 * TILE)
        launch(tma_wgmma, blocks, 128, args, smem=smem)
        cuda.synchronize()
        t0 = time.perf_counter()
        launch(tma_wgmma, blocks, 128, args, smem=smem)
        cuda.synchronize()
        dt = time.perf_counter() - t0
        flops = blocks * reps * 2 * 64 * 64 * 64
        print(f"{blocks} CTAs x {reps} reps of 64x64x64: {flops / dt / 1e12:.1f} TFLOP/s "
              "(one warpgroup per CTA issuing m64n64k16 from shared memory)")
    return err


if __name__ == "__main__":
    main()
