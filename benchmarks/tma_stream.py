"""How fast TMA streams a decoding product's weight, by box shape, CTAs and what rides beside it.

A 7168 x 7168 fp8 weight (a DeepSeek-V3 projection) is read once, as a decoding product's
kernel reads it: each CTA takes ``rows`` of it (its tile's B rows) in 128-byte-wide boxes, one
per 128-K stage, through a ring of ``stages`` slots; a consumer warp releases each stage as it
lands (no math: the time is the loads'). Beside each B box, optionally, a box of A: 16 rows of a
16 x 7168 activation (``a16``, a decoding product's A in a box of its rows), or a 128-row box of
it, 112 of them past its end (``a128``: the zeros TMA writes for rows past M, what the
block-scaled kernel loaded before its boxes took M's rows alone). With ``split`` 2, two CTAs
share each tile's rows, each half the K blocks. Median of 5 rounds of 30 launches (CUDA events;
the launches are prepared, so the host keeps ahead).

    python benchmarks/tma_stream.py

Prints, per case, microseconds per pass over the weight and its bytes per second.
"""
import numpy as np
import torch
from numba import cuda

from nbwgmma.intrinsics import tma_load_2d
from nbwgmma.kit import TmaPipeline
from nbwgmma.launch import prepare
from nbwgmma.tma import TensorMap

N = K = 7168
KB = K // 128
SMEM = 200 * 1024
_KERNELS = {}


def kernel(stages: int, rows: int, a_rows: int):
    """The streaming kernel: thread 0 fills the ring (B's box of ``rows`` rows, A's of ``a_rows``
    if any), thread 32 releases each stage once full."""
    key = (stages, rows, a_rows)
    if key not in _KERNELS:
        B_OFF = 128 * 128  # B after a 128-row A slot, as the block-scaled kernel lays a stage out
        STAGE = B_OFF + rows * 128
        TX = rows * 128 + a_rows * 128
        pipe = TmaPipeline(stages, consumers=1)

        @cuda.jit(launch_bounds=(64, 1))
        def stream(tmap_b, tmap_a, kblocks, split):
            base, ring = pipe.setup()
            tid = cuda.threadIdx.x
            tile, part = cuda.blockIdx.x // split, cuda.blockIdx.x % split
            per = kblocks // split
            s, ph = 0, 0
            if tid == 0:
                for kb in range(part * per, part * per + per):
                    full = pipe.producer_acquire(ring, s, ph, TX)
                    slot = base + s * STAGE
                    if a_rows:
                        tma_load_2d(slot, tmap_a, full, kb * 128, 0)
                    tma_load_2d(slot + B_OFF, tmap_b, full, kb * 128, tile * rows)
                    s, ph = pipe.advance(s, ph)
            elif tid == 32:
                for kb in range(per):
                    pipe.consumer_wait(ring, s, ph)
                    pipe.consumer_release(ring, s)
                    s, ph = pipe.advance(s, ph)

        _KERNELS[key] = (stream, STAGE)
    return _KERNELS[key]


def run(w, x, stages, rows, a, split, reps=30):
    a_rows = {"none": 0, "a16": 16, "a128": 128}[a]
    stream, stage = kernel(stages, rows, a_rows)
    if stages * stage + 1024 > SMEM:
        return
    tb = TensorMap(w, (rows, 128), dtype="e4m3")
    ta = TensorMap(x, (max(a_rows, 8), 128), dtype="e4m3")
    args = (tb.address, ta.address, np.int32(KB), np.int32(split))
    ctas = N // rows * split
    launch = prepare(stream, ctas, 64, args, smem=SMEM)
    for _ in range(3):
        launch(*args)
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(reps):
            launch(*args)
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) / reps)
    ms = sorted(times)[2]
    print(f"B box {rows:3d} rows, A {a:4s}, {stages:2d} stages, split {split}: {ctas:3d} CTAs  {ms * 1e3:6.1f} us  "
          f"{N * K / ms / 1e6:5.0f} GB/s", flush=True)


def main():
    print(torch.cuda.get_device_name(), torch.__version__)
    w = torch.randint(-100, 100, (N, K), device="cuda", dtype=torch.int8).view(torch.uint8)
    x = torch.randint(-100, 100, (16, K), device="cuda", dtype=torch.int8).view(torch.uint8)
    for rows, split in ((128, 1), (128, 2), (64, 1)):
        for a in ("none", "a16", "a128"):
            for stages in (6, 8):
                run(w, x, stages, rows, a, split)


if __name__ == "__main__":
    main()
