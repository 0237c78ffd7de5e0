"""GEMM step 8: a fusion no vendor library offers, the SwiGLU MLP's dual GEMM.

The gated MLP of most LLMs computes ``silu(x @ Wg^T) * (x @ Wu^T)`` from one activation ``x``
[M, K] and two weights Wg, Wu [N, K] (``nn.Linear``'s layout). PyTorch runs it as two GEMMs
(or one over the weights concatenated) and two elementwise kernels that read and write the
[M, N] products again. Here it is one kernel: each CTA computes a 128 x 128 tile of the output
as one 128 x 256 GEMM tile whose B is Wg's 128 rows of the tile followed by Wu's 128 rows. The
producer loads them with two TMA copies into one stage (128-row blocks of a 128B-swizzled
K-major operand stack into the layout of one 256-row block: no interleaved copy of the weights),
so the kit's ``Cooperative`` runs its ordinary 128 x 256 main loop, two consumer warpgroups of 64
rows. In each consumer's 64 x 256 f32 accumulator, columns 0-127 are the gate and 128-255 the up
projection, and value ``i`` of the gate and value ``64 + i`` of the up hold the same (row, col):
the epilogue is ``acc_map`` (the activation) over the gate's values, ``acc_scale`` by the up's,
packed to bf16 and stored by TMA. The activation sees the f32 accumulator, before any rounding.

``TileScheduler`` walks the tiles of the *output* (128 x 128), the tile each unit writes, while
``Cooperative`` computes 128 x 256: the scheduler only counts and orders tiles, and the loads
are the kernel's own (``load`` below).

    python examples/gemm_8_swiglu.py [M [N K]]

On an H100: checks the output against float64 and times it against PyTorch's two forms (two
GEMMs and ``silu(g) * u``; one GEMM over the concatenated weights, then the same) and the
library's plain GEMM of the same FLOPs. Without a GPU it prints the compile report; in the
simulator (``NUMBA_ENABLE_CUDASIM=1``) it runs two CTAs over four tiles of small integers, three
of them cut short by M's or N's end, with ReLU in place of SiLU (exact after the one rounding to bf16).
"""

import sys

import numpy as np
from numba import cuda, types

from nbwgmma.intrinsics import acc_scale, acc_to_bf16x2, bulk_wait_group, setmaxnreg_dec, setmaxnreg_inc, tma_load_2d
from nbwgmma.kit import (Cooperative, TileScheduler, TmaPipeline, acc_map, activation, inlined, tile_producer,
                         tma_store_part, warpgroup_index)
from nbwgmma.launch import dynamic_smem_bytes, launch
from nbwgmma.tma import TensorMap

KIND = "f32.bf16.bf16"
BM, BN, BK, STAGES = 128, 128, 64, 4  # the output tile 128 x 128; 64 K (128 bytes) a stage
pipe = TmaPipeline(STAGES, consumers=2)
coop = Cooperative(KIND, pipe, BM, 2 * BN)  # the GEMM tile: B is the gate's 128 rows, then the up's
sched = TileScheduler(BM, BN, BK, group_m=8)  # walks the output's tiles
A_BYTES, W_BYTES = BM * BK * 2, BN * BK * 2
C_OFF, C_PART = pipe.stages * coop.stage_bytes, 64 * 64 * 2
SMEM = dynamic_smem_bytes(C_OFF + 4 * C_PART)


@cuda.jit(device=True, inline=True)
def load(slot, full, kb, tm, tn, maps):  # one stage: x's 128 rows, Wg's 128 rows, Wu's 128 rows after them
    tmap_x, tmap_g, tmap_u = maps
    kc = kb * BK
    tma_load_2d(slot, tmap_x, full, kc, tm * BM)  # coordinates innermost first: (column, row)
    tma_load_2d(slot + A_BYTES, tmap_g, full, kc, tn * BN)
    tma_load_2d(slot + A_BYTES + W_BYTES, tmap_u, full, kc, tn * BN)


produce = tile_producer(pipe, sched, coop, load)


def make_kernel(act):
    @inlined
    def gate(v, row, col):  # the user's function of the gate's values
        return act(v)

    gate_part = acc_map(gate, 64)  # a 64 x 64 part of the fragment, f32 in and out

    @cuda.jit(launch_bounds=(384, 1))
    def swiglu(tmap_x, tmap_g, tmap_u, tmap_o, m, n, k):
        base, ring = pipe.setup()
        tid = cuda.threadIdx.x
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        if tid < 128:  # producer warpgroup: one thread keeps TMA busy
            setmaxnreg_dec(40)
            if tid == 0:
                produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, (tmap_x, tmap_g, tmap_u))
            else:
                return
        else:  # two consumers, 64 rows of each tile apiece
            setmaxnreg_inc(232)
            cw, ct = warpgroup_index() - 1, tid % 128
            c0 = base + C_OFF + cw * 2 * C_PART
            c1 = c0 + C_PART
            s, ph = 0, 0
            for u in range(sched.first(), nunits, sched.step()):
                tm, tn = sched.tile(u, tiles_mc, tiles_n, 0)
                acc, s, ph = coop.tile(ring, base, s, ph, 0, kblocks, cw, ct)  # 64 x 256: gate | up
                row0, col0 = tm * BM + cw * 64, tn * BN
                h0 = acc_to_bf16x2(acc_scale(gate_part(acc[0:32], ct, row0, col0), acc[64:96]))
                tma_store_part(h0, c0, ct, cw, tmap_o, col0, row0)
                h1 = acc_to_bf16x2(acc_scale(gate_part(acc[32:64], ct, row0, col0 + 64), acc[96:128]))
                tma_store_part(h1, c1, ct, cw, tmap_o, col0 + 64, row0)
            if ct == 0:
                bulk_wait_group(0)
        pipe.teardown()

    return swiglu


SIG = (types.uint64, types.uint64, types.uint64, types.uint64, types.int32, types.int32, types.int32)


def run(kernel, x, wg, wu, out, ctas):
    """out = act(x @ wg^T) * (x @ wu^T): x [M, K], wg and wu [N, K], out [M, N], bf16 (K and N
    multiples of 8: TMA wants rows of 16-byte multiples), on at most ``ctas`` CTAs."""
    m, k = x.shape
    n = wg.shape[0]
    tx = TensorMap(x, (BM, BK), dtype="bf16")
    tg = TensorMap(wg, (BN, BK), dtype="bf16")
    tu = TensorMap(wu, (BN, BK), dtype="bf16")
    to = TensorMap(out, (64, 64), dtype="bf16")  # tma_store_part's 64 x 64 blocks
    launch(kernel, sched.grid(m, n, k, ctas), 384,
           (tx.address, tg.address, tu.address, to.address, np.int32(m), np.int32(n), np.int32(k)),
           smem=SMEM, pdl=True)


def simulate():
    """Two CTAs over M = 200, N = 136 (two tile rows by two tile columns, each second one
    cut short), K = 192 (three k-blocks a tile, six fills of each CTA's ring of four stages: its
    phases turn over), small integers, ReLU: exact after rounding to bf16."""
    from nbwgmma.layout import from_bits, to_bits

    rng = np.random.default_rng(0)
    m, n, k = 200, 136, 3 * BK
    x = rng.integers(-2, 3, (m, k)).astype(np.float64)
    wg, wu = (rng.integers(-2, 3, (n, k)).astype(np.float64) for _ in range(2))
    out = cuda.to_device(np.full((m, n), 0x7FC0, np.uint16))  # bf16 NaN: every element must be written
    run(make_kernel(activation("relu")), *(cuda.to_device(to_bits(a, "bf16")) for a in (x, wg, wu)), out, 2)
    got = from_bits(out.copy_to_host(), "bf16")
    ref = from_bits(to_bits(np.maximum(x @ wg.T, 0) * (x @ wu.T), "bf16"), "bf16")  # one rounding
    err = float(np.max(np.abs(got - ref)))
    print(f"simulated {m}x{n}x{k} relu(x @ Wg^T) * (x @ Wu^T): max |out - ref| = {err:g}")
    if err != 0.0:
        raise SystemExit("mismatch")
    return err


def benchmark(m, n, k, repeats=20):
    import torch
    import torch.nn.functional as F

    from nbwgmma import matmul
    from nbwgmma.bench import side_by_side

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    wg, wu = (torch.randn(n, k, device="cuda", generator=g).mul(k ** -0.5).to(torch.bfloat16) for _ in range(2))
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    kernel = make_kernel(activation("silu"))
    ctas = torch.cuda.get_device_properties(0).multi_processor_count
    run(kernel, x, wg, wu, out, ctas)
    xd = x.double()
    ref = F.silu(xd @ wg.double().t()) * (xd @ wu.double().t())
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    w12 = torch.cat([wg, wu])  # PyTorch's usual fused-weight form
    plain = torch.empty(m, 2 * n, device="cuda", dtype=torch.bfloat16)

    def concatenated():
        h = x @ w12.t()
        return F.silu(h[:, :n]) * h[:, n:]

    peers = {"nbwgmma swiglu": lambda: run(kernel, x, wg, wu, out, ctas),
             "unfused silu(x @ Wg.T) * (x @ Wu.T)": lambda: F.silu(x @ wg.t()) * (x @ wu.t()),
             "one GEMM on [Wg; Wu], then silu * up": concatenated,
             "nbwgmma.matmul, the GEMM alone": lambda: matmul(x, w12.t(), out=plain)}
    side_by_side(torch, peers, 2 * m * 2 * n * k, f"{m}x{n}x{k}", "nbwgmma swiglu", repeats)
    print(f"relative error vs float64: {err:.2e}")
    if not err < 1e-2:
        raise SystemExit("mismatch")
    return err


def main(m=8192, n=14336, k=4096):
    """Returns the relative error against float64 (0.0 where nothing ran on a GPU)."""
    from nbwgmma.demo import run_example

    return run_example("the SwiGLU kernel", simulate, lambda: (make_kernel(activation("silu")), SIG),
                       benchmark, m, n, k)


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:4]))
