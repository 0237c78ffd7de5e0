"""A deliberately broken kernel and the debug-wait mode that stops it.

The producer announces 16 bytes more (``expect_tx``) than its TMA copy delivers, so
the barrier's phase never completes and every thread waits forever. With
``NBWGMMA_DEBUG_WAIT=1`` each mbarrier wait loop has a deadline (``NBWGMMA_DEBUG_WAIT_S``,
default 2 s): the kernel prints the block, thread, barrier and phase it waited for,
traps, and :func:`nbwgmma.launch.launch` raises ``KernelStoppedError`` naming it.

    NBWGMMA_DEBUG_WAIT=1 python examples/debug_wait_broken_expect_tx.py
    NUMBA_ENABLE_CUDASIM=1 python examples/debug_wait_broken_expect_tx.py

On a GPU without debug mode this example refuses to run (it would hang). In the simulator no
setting is needed: it stops the moment every thread waits, naming the barrier and the line.
Without a GPU it prints the kernel's compile report. Exit status 0 when the hang was stopped
(the example's purpose) or the report printed, 1 if the kernel finished, 2 when it refused.
"""

import sys
import time

import numpy as np
from numba import cuda, types

from nbwgmma.demo import compile_report_instead, gpu_available, simulated
from nbwgmma.intrinsics import (
    DEBUG_WAIT_TIMEOUT_S, fence_mbarrier_init, mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_wait_parity,
    dynamic_smem_base, smem_addr, tma_load_2d,
)

BOX = 64 * 64 * 2  # bytes one 64x64 bf16 box delivers
SIG = (types.uint64, types.int32[::1])


@cuda.jit
def broken_expect_tx(tmap, out):
    dyn = cuda.shared.array(0, np.uint8)
    bars = cuda.shared.array(1, np.uint64)
    base = dynamic_smem_base(dyn, 1024)
    bar = smem_addr(bars)
    if cuda.threadIdx.x == 0:
        mbarrier_init(bar, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        mbarrier_arrive_expect_tx(bar, BOX + 16)  # the bug: 16 bytes that never arrive
        tma_load_2d(base, tmap, bar, 0, 0)
    mbarrier_wait_parity(bar, 0)
    out[cuda.threadIdx.x] = 1


def main():
    if not simulated() and not gpu_available():
        compile_report_instead(broken_expect_tx, SIG)
        return 0
    if DEBUG_WAIT_TIMEOUT_S is None and not simulated():
        print("this kernel never finishes; run it with NBWGMMA_DEBUG_WAIT=1 (or in the simulator, "
              "NUMBA_ENABLE_CUDASIM=1)")
        return 2
    from nbwgmma.launch import KernelStoppedError, dynamic_smem_bytes, launch
    from nbwgmma.sim import SimStopped
    from nbwgmma.tma import TensorMap

    x = cuda.to_device(np.arange(64 * 64, dtype=np.uint16).reshape(64, 64))
    tm = TensorMap(x, (64, 64), dtype="bf16", swizzle="128B")
    out = cuda.to_device(np.zeros(128, np.int32))
    t0 = time.perf_counter()
    try:
        launch(broken_expect_tx, 1, 128, (tm.address, out), smem=dynamic_smem_bytes(BOX))
    except (KernelStoppedError, SimStopped) as e:  # the GPU's trap, or the simulator finding the hang
        print(f"stopped after {time.perf_counter() - t0:.1f} s: {e}")
        return 0
    print("the kernel finished: the bug did not show")
    return 1


if __name__ == "__main__":
    sys.exit(main())
