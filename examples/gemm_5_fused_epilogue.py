"""GEMM step 5: your own fused GEMM on the authoring kit, ``C = gelu_tanh(A @ B^T + bias)``.

The kernel a user writes for a fused epilogue, with every host step in the open. One
producer thread feeds a ring of 6 TMA stages (``TmaPipeline``); two consumer warpgroups
each compute a whole 128 x 128 tile and take tiles in turn (``PingPong``): while one runs
its main loop on the tensor cores, the other runs its epilogue, so the epilogue's math
(a bias, an activation, any user function mapped with ``acc_map``) costs no tensor-core
time. A persistent grid walks pairs of vertically adjacent tiles in grouped order
(``TileScheduler``), one tile of each pair per consumer. The epilogue goes out in 64 x 64
parts through two shared blocks per consumer (``stmatrix``, then a TMA store that runs
while the next part is computed).

    python examples/gemm_5_fused_epilogue.py [M [N K]]

On an H100: checks C against float64 and times it against PyTorch's fused cuBLASLt epilogue
(``torch._addmm_activation(..., use_gelu=True)``), the unfused expression and the plain
library product. Without a GPU it prints the compile report; in the simulator
(``NUMBA_ENABLE_CUDASIM=1``) it runs one pair of tiles of small integers with ReLU (exact).
"""

import sys

import numpy as np
from numba import cuda, types

from nbwgmma.intrinsics import (
    bulk_wait_group, setmaxnreg_dec, setmaxnreg_inc, tma_load_2d,
)
from nbwgmma.kit import (PingPong, TileScheduler, TmaPipeline, acc_map, activation, inlined, tile_producer,
                         tma_store_part)
from nbwgmma.launch import dynamic_smem_bytes, launch
from nbwgmma.tma import TensorMap

KIND = "f32.bf16.bf16"
BM, BN, BK, STAGES = 128, 128, 64, 6  # one warpgroup's tile; the two consumers take tiles in turn
A_BYTES, STAGE = BM * 128, (BM + BN) * 128
C_OFF, C_PART = STAGES * STAGE, 64 * 64 * 2
pipe = TmaPipeline(STAGES, consumers=1)
pp = PingPong(KIND, pipe)  # the consumers' side: main loop of a 128 x 128 tile, turns, ring
sched = TileScheduler(BM, BN, BK, group_m=8)


@cuda.jit(device=True, inline=True)
def load(slot, full, kb, tm, tn, maps):  # the producer's TMA loads of one stage: A's rows, then B's
    tmap_a, tmap_b = maps
    tma_load_2d(slot, tmap_a, full, kb * BK, tm * BM)
    tma_load_2d(slot + A_BYTES, tmap_b, full, kb * BK, tn * BN)


produce = tile_producer(pipe, sched, STAGE, load, pairs=True)  # the producer thread's walk over pairs of tiles


def make_kernel(act):
    @inlined  # compiled once, inlined by the compiler (Numba's inline=True copies it 32 times)
    def bias_act(v, row, col, b):  # the user's epilogue: any scalar device code; b = bias[col]
        return act(v + b)

    part = acc_map(bias_act, 64, cols=1, pack="bf16")  # 64 columns -> packed bf16 pairs

    @cuda.jit(launch_bounds=(384, 1))
    def gemm_bias_act(tmap_a, tmap_b, tmap_c, bias, m, n, k):
        base, ring = pipe.setup()  # stages' base (1 KiB aligned), the ring's barriers initialized
        tid = cuda.threadIdx.x
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        if tid < 128:  # producer warpgroup: one thread keeps TMA busy
            setmaxnreg_dec(40)
            if tid == 0:
                produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, (tmap_a, tmap_b))
        else:  # two consumer warpgroups, each a whole 128 x 128 tile, taking tiles in turn
            setmaxnreg_inc(232)
            cw, ct = tid // 128 - 1, tid % 128
            c0 = base + C_OFF + cw * 2 * C_PART
            c1 = c0 + C_PART
            s, ph = pp.start(cw, kblocks)
            for u in range(2 * sched.first() + cw, nunits, 2 * sched.step()):  # tiles 2p + cw
                tm, tn = sched.tile(u, tiles_mc, tiles_n, 0)
                other_next = u + 1 if cw == 0 else u + 2 * sched.step() - 1  # the other's next tile
                # wait for the turn, main loop, pass the turn if the other has a tile left
                acc0, acc1, s, ph = pp.tile(ring, base, s, ph, kblocks, ct, cw, u != 2 * sched.first(),
                                            other_next < nunits)
                row0, col0 = tm * BM, tn * BN
                # 64 columns at a time through the consumer's two shared blocks, in turn
                tma_store_part(part(acc0[:32], ct, row0, col0, bias[col0:n]), c0, ct, cw, tmap_c, col0, row0)
                tma_store_part(part(acc0[32:], ct, row0, col0 + 64, bias[col0 + 64:n]), c1, ct, cw, tmap_c,
                               col0 + 64, row0)
                tma_store_part(part(acc1[:32], ct, row0 + 64, col0, bias[col0:n]), c0, ct, cw, tmap_c,
                               col0, row0 + 64)
                tma_store_part(part(acc1[32:], ct, row0 + 64, col0 + 64, bias[col0 + 64:n]), c1, ct, cw, tmap_c,
                               col0 + 64, row0 + 64)
            if ct == 0:
                bulk_wait_group(0)

    return gemm_bias_act


SMEM = dynamic_smem_bytes(C_OFF + 4 * C_PART)
SIG = (types.uint64, types.uint64, types.uint64, types.float32[::1], types.int32, types.int32, types.int32)


def run(kernel, a, b, bias, c, ctas):
    """C = act(A @ B^T + bias): A [M, K], B [N, K] bf16 (K contiguous), bias [N] f32, C [M, N]
    bf16, on a persistent grid of at most ``ctas`` CTAs (one per SM)."""
    m, k = a.shape
    n = b.shape[0]
    ta = TensorMap(a, (BM, BK), dtype="bf16")  # 128-byte swizzle, the layout the descriptors read
    tb = TensorMap(b, (BN, BK), dtype="bf16")
    tc = TensorMap(c, (64, 64), dtype="bf16")  # 64-column blocks of the swizzled C tile
    grid = sched.grid(m, n, k, ctas, at_once=2)  # a pair of tiles per CTA at a time
    # pdl: the kernel may start while the previous one in the stream ends (pipe.setup() waits for
    # it with griddep_wait; the producer lets the next one in once its last load is issued)
    launch(kernel, grid, 384, (ta.address, tb.address, tc.address, bias, np.int32(m), np.int32(n), np.int32(k)),
           smem=SMEM, pdl=True)


def simulate():
    """One pair of 128x128 tiles (one per consumer) of small integers, ReLU epilogue, exact
    (Numba's CUDA simulator)."""
    from nbwgmma.layout.wgmma_model import encode_elements

    rng = np.random.default_rng(0)
    a = rng.integers(-2, 3, (2 * BM, 2 * BK)).astype(np.float64)
    b = rng.integers(-2, 3, (BN, 2 * BK)).astype(np.float64)
    bias = rng.integers(-8, 9, BN).astype(np.float32)
    bits = [cuda.to_device(encode_elements(x, "bf16").view(np.uint16).reshape(x.shape)) for x in (a, b)]
    c = cuda.to_device(np.full((2 * BM, BN), 0x7FC0, np.uint16))  # bf16 NaN: every element must be written
    run(make_kernel(activation("relu")), bits[0], bits[1], cuda.to_device(bias), c, 1)
    got = (c.copy_to_host().astype(np.uint32) << 16).view(np.float32)
    ref = np.maximum(a @ b.T + bias, 0)
    err = float(np.max(np.abs(got - ref)))
    print(f"simulated {2 * BM}x{BN}x{2 * BK} relu(A @ B^T + bias): max |C - ref| = {err:g}")
    if err != 0.0:
        raise SystemExit("mismatch")
    return err


def benchmark(m, n, k, repeats=20):
    import torch
    import torch.nn.functional as F

    from nbwgmma import matmul
    from nbwgmma.bench import side_by_side

    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
    bias = torch.randn(n, device="cuda", generator=g)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kernel = make_kernel(activation("gelu_tanh"))
    ctas = torch.cuda.get_device_properties(0).multi_processor_count
    ours = lambda: run(kernel, a, b, bias, c, ctas)  # noqa: E731
    run(kernel, a, b, bias, c, ctas)
    ref = F.gelu(a.double() @ b.double().t() + bias.double(), approximate="tanh")
    err = float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))
    bias16 = bias.to(torch.bfloat16)
    plain = torch.empty_like(c)
    peers = {"nbwgmma": ours,
             "nbwgmma.matmul, no epilogue": lambda: matmul(a, b.t(), out=plain),
             "cuBLASLt fused (_addmm_activation)": lambda: torch._addmm_activation(bias16, a, b.t(), use_gelu=True),
             "unfused F.gelu(a @ b.T + bias)": lambda: F.gelu(a @ b.t() + bias16, approximate="tanh")}
    # batches of 10 back-to-back calls, the contenders taking turns, median of the rounds
    side_by_side(torch, peers, 2 * m * n * k, f"{m}x{n}x{k}", "nbwgmma", repeats)
    print(f"relative error vs float64: {err:.2e}")
    if not err < 1e-2:
        raise SystemExit("mismatch")
    return err


def main(m=8192, n=None, k=None):
    """Returns the relative error against float64 (0.0 where nothing ran on a GPU)."""
    from nbwgmma.demo import run_example

    return run_example("the fused kernel", simulate, lambda: (make_kernel(activation("gelu_tanh")), SIG),
                       benchmark, m, n, k)


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:4]))
