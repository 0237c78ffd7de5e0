"""GEMM step 5: your own fused GEMM on the authoring kit, ``C = gelu_tanh(A @ B^T + bias)``.

The kernel a user writes for a fused epilogue, with every host step in the open, from the
blocks the library GEMM is built of. One producer thread feeds a ring of 4 TMA stages
(``TmaPipeline``, ``tile_producer``); two consumer warpgroups share each 256 x 128 tile, 128
rows each in two 64-row accumulators (``Cooperative``, ``blocks=2``), on a persistent grid
that walks the tiles in grouped order (``TileScheduler``), in clusters of two CTAs on
neighbouring tiles of one tile row: each loads half of their 256 rows of A and multicasts it
into both (``multicast="A"``; cuBLASLt's fused kernel shares its operand the same way). While
a tile's last wgmmas run, each thread loads the bias values its columns need
(``col_values``); then the epilogue maps your function over each 64 x 64 part (``acc_map``;
gelu_tanh on ``tanh.approx``, one MUFU a value, as the library does for 16-bit outputs) and
stores it through two shared blocks per consumer (``stmatrix``, then a TMA store that runs
while the next part is computed). The epilogue runs with the tensor cores idle, on tiles
large enough to keep them fed the rest of the time; ``PingPong`` (the guide) hides it
instead, with 128 x 128 tiles that read more shared memory per FLOP than an SM delivers.

    python examples/gemm_5_fused_epilogue.py [M [N K]]

On an H100: checks C against float64 and times it against PyTorch's fused cuBLASLt epilogue
(``torch._addmm_activation(..., use_gelu=True)``), the unfused expression and the library's
plain and fused products. Without a GPU it prints the compile report; in the simulator
(``NUMBA_ENABLE_CUDASIM=1``) it runs one cluster over three tiles of small integers and one
past N's end, each CTA's ring turning over, with ReLU (exact).
"""

import sys

import numpy as np
from numba import cuda, types

from nbwgmma.intrinsics import bulk_wait_group, setmaxnreg_dec, setmaxnreg_inc
from nbwgmma.kit import (Cooperative, TileScheduler, TmaPipeline, acc_map, activation, col_values, gelu_tanh_approx,
                         inlined, tile_producer, tma_store_part, warpgroup_index)
from nbwgmma.launch import dynamic_smem_bytes, launch
from nbwgmma.tma import TensorMap

KIND = "f32.bf16.bf16"
BM, BN, BK, STAGES = 256, 128, 64, 4  # a CTA's tile: two consumers of 128 rows, 64 K (128 bytes) a stage
# clusters of 2 CTAs on side-by-side tiles: each loads half of their shared 256 rows of A and
# multicasts it to both, a third less data moved from L2 per FLOP
pipe = TmaPipeline(STAGES, consumers=2, cluster=2)
coop = Cooperative(KIND, pipe, BM, BN, blocks=2, multicast="A")  # two m64n128 accumulators a consumer
sched = TileScheduler(BM, BN, BK, group_m=8, cluster=2, along="N")
C_OFF, C_PART = pipe.stages * coop.stage_bytes, 64 * 64 * 2


@cuda.jit(device=True, inline=True)
def load(slot, full, kb, tm, tn, maps):  # the producer's TMA loads of one stage: its half of A, B's 128 rows
    tmap_a, tmap_b = maps
    coop.load_tile(slot, full, tmap_a, tmap_b, kb, tm, tn)


produce = tile_producer(pipe, sched, coop, load)  # the producer thread's walk over the tiles
bias_values = col_values(BN)  # a thread's 32 bias values of a 128-column tile


def make_kernel(act):
    @inlined  # compiled once, inlined by the compiler (Numba's inline=True copies it 32 times)
    def bias_act(v, row, col, b):  # the user's epilogue: any scalar device code; b = bias[col]
        return act(v + b)

    part = acc_map(bias_act, 64, cols=1, pack="bf16", loaded=True)  # 64 columns -> packed bf16 pairs

    @cuda.jit(launch_bounds=(384, 1))
    def gemm_bias_act(tmap_a, tmap_b, tmap_c, bias, m, n, k):
        base, ring = pipe.setup()  # stages' base (1 KiB aligned), the ring's barriers initialized
        tid = cuda.threadIdx.x
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        if tid < 128:  # producer warpgroup: one thread keeps TMA busy
            setmaxnreg_dec(40)
            if tid == 0:
                produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, (tmap_a, tmap_b))
            else:
                return  # idle threads leave (waiting at the cluster barrier below slows the producer)
        else:  # two consumer warpgroups, 128 rows of each tile apiece
            setmaxnreg_inc(232)
            cw, ct = warpgroup_index() - 1, tid % 128  # (warp-uniform: descriptors in uniform registers)
            c0 = base + C_OFF + cw * 2 * C_PART
            c1 = c0 + C_PART
            s, ph, rank = 0, 0, sched.rank()  # rank: the CTA's tile of each cluster tile
            for u in range(sched.first(), nunits, sched.step()):
                tm, tn = sched.tile(u, tiles_mc, tiles_n, rank)
                # the main loop, returning with its last wgmmas in flight: load the bias meanwhile
                (acc0, acc1), s, ph, prev = coop.tile_open(ring, base, s, ph, 0, kblocks, cw, ct)
                b = bias_values(bias[tn * BN:n], ct)
                coop.drain(ring, ct, prev)  # the last wgmmas done, their stage released
                row0, col0 = tm * BM + cw * 128, tn * BN
                # 64 columns at a time through the consumer's two shared blocks, in turn
                tma_store_part(part(acc0[:32], ct, row0, col0, b[:16]), c0, ct, cw, tmap_c, col0, row0)
                tma_store_part(part(acc0[32:], ct, row0, col0 + 64, b[16:]), c1, ct, cw, tmap_c, col0 + 64, row0)
                tma_store_part(part(acc1[:32], ct, row0 + 64, col0, b[:16]), c0, ct, cw, tmap_c, col0, row0 + 64)
                tma_store_part(part(acc1[32:], ct, row0 + 64, col0 + 64, b[16:]), c1, ct, cw, tmap_c, col0 + 64,
                               row0 + 64)
            if ct == 0:
                bulk_wait_group(0)
        pipe.teardown()  # no CTA leaves while its peer may still multicast into it or arrive on its barriers

    return gemm_bias_act


SMEM = dynamic_smem_bytes(C_OFF + 4 * C_PART)
SIG = (types.uint64, types.uint64, types.uint64, types.float32[::1], types.int32, types.int32, types.int32)


def run(kernel, a, b, bias, c, ctas):
    """C = act(A @ B^T + bias): A [M, K], B [N, K] bf16 (K contiguous), bias [N] f32, C [M, N]
    bf16, on a persistent grid of at most ``ctas`` CTAs (one per SM)."""
    m, k = a.shape
    n = b.shape[0]
    ta = TensorMap(a, coop.box_a, dtype="bf16")  # 128-byte swizzle, the layout the descriptors read
    tb = TensorMap(b, coop.box_b, dtype="bf16")  # boxes: (128 rows, BK), A's half tile and B's tile
    tc = TensorMap(c, (64, 64), dtype="bf16")  # 64-column blocks of the swizzled C tile
    grid = sched.grid(m, n, k, ctas)
    # pdl: the kernel may start while the previous one in the stream ends (pipe.setup() waits for
    # it with griddep_wait; the producer lets the next one in once its last load is issued)
    launch(kernel, grid, 384, (ta.address, tb.address, tc.address, bias, np.int32(m), np.int32(n), np.int32(k)),
           smem=SMEM, cluster=(2, 1, 1), pdl=True)


def simulate():
    """One cluster of two CTAs over three 256 x 128 tiles along N of small integers (N = 328:
    the third stops inside it, the bias's slice and C's stores with it; the fourth, the second
    CTA's second tile, lies past N: it loads and multicasts its half of A and stores nothing),
    three k-blocks each (six fills of each CTA's ring of four stages: its phases turn over),
    ReLU epilogue, exact after the one rounding to bf16 (Numba's CUDA simulator)."""
    from nbwgmma.layout import from_bits, to_bits

    rng = np.random.default_rng(0)
    n, k = 328, 3 * BK  # (a row of 16-bit values must be a multiple of 16 bytes for TMA)
    a = rng.integers(-2, 3, (BM, k)).astype(np.float64)
    b = rng.integers(-2, 3, (n, k)).astype(np.float64)
    bias = rng.integers(-8, 9, n).astype(np.float32)
    bits = [cuda.to_device(to_bits(x, "bf16")) for x in (a, b)]  # bf16 as raw uint16
    c = cuda.to_device(np.full((BM, n), 0x7FC0, np.uint16))  # bf16 NaN: every element must be written
    run(make_kernel(activation("relu")), bits[0], bits[1], cuda.to_device(bias), c, 1)
    got = from_bits(c.copy_to_host(), "bf16")
    ref = from_bits(to_bits(np.maximum(a @ b.T + bias, 0), "bf16"), "bf16")  # exact in f32, one rounding
    err = float(np.max(np.abs(got - ref)))
    print(f"simulated {BM}x{n}x{k} relu(A @ B^T + bias): max |C - ref| = {err:g}")
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
    kernel = make_kernel(gelu_tanh_approx)
    ctas = torch.cuda.get_device_properties(0).multi_processor_count
    ours = lambda: run(kernel, a, b, bias, c, ctas)  # noqa: E731
    run(kernel, a, b, bias, c, ctas)
    ref = F.gelu(a.double() @ b.double().t() + bias.double(), approximate="tanh")
    err = float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))
    bias16 = bias.to(torch.bfloat16)
    plain = torch.empty_like(c)
    peers = {"nbwgmma": ours,
             "nbwgmma.matmul, no epilogue": lambda: matmul(a, b.t(), out=plain),
             "nbwgmma.matmul(bias, gelu_tanh)": lambda: matmul(a, b.t(), bias=bias16, activation="gelu_tanh",
                                                               out=plain),
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

    return run_example("the fused kernel", simulate, lambda: (make_kernel(gelu_tanh_approx), SIG),
                       benchmark, m, n, k)


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:4]))
