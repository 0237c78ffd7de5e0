"""GEMM step 9: an int8 GEMM with its dequantization fused, the W8A8 recipe of int8 inference.

Activations quantized per row (token) and weights per output channel give ``out = bf16(rs[m] *
cs[n] * (A @ B^T)[m, n] + bias[n])`` with A [M, K] and B [N, K] int8 and the product summed
exactly in int32. PyTorch runs it as ``torch._int_mm`` (cuBLASLt's int8 GEMM, an int32 [M, N]
written out) and an elementwise kernel that reads it back. Here it is one kernel of the kit's
blocks: ``Cooperative`` with the ``s32.s8.s8`` kind (a stage is 128 K: one 128-byte swizzle row
of int8), two consumer warpgroups of 64 rows. The epilogue maps the s32 accumulator with
``acc_map(..., dtype="f32")``: its values reach the function as f32 with the tile's column
scales and bias (loaded by ``col_values`` while the last wgmmas run) and the row scale, and
the results are packed to bf16 and stored by TMA. (``dtype="s32"`` keeps everything integers:
an integer epilogue such as adding a zero point; it refuses float vectors.)

    python examples/gemm_9_w8a8.py [M [N K]]

On an H100: checks the output against float64 and times it against PyTorch's two steps, and
against ``torch._int_mm`` alone. Without a GPU it prints the compile report; in the simulator
(``NUMBA_ENABLE_CUDASIM=1``) it runs two CTAs over four tiles, three cut short by M's or N's
end, K not a multiple of 128, with scales that are powers of two: exact after the one rounding
to bf16.
"""

import sys

import numpy as np
from numba import cuda, types

from nbwgmma.intrinsics import bulk_wait_group, setmaxnreg_dec, setmaxnreg_inc, tma_load_2d
from nbwgmma.kit import (Cooperative, TileScheduler, TmaPipeline, acc_map, col_values, inlined, tile_producer,
                         tma_store_part, warpgroup_index)
from nbwgmma.launch import dynamic_smem_bytes, launch
from nbwgmma.tma import TensorMap

KIND = "s32.s8.s8"
BM, BN, STAGES = 128, 128, 4
pipe = TmaPipeline(STAGES, consumers=2)
coop = Cooperative(KIND, pipe, BM, BN)
BK = coop.bk  # 128 int8 elements of K a stage
sched = TileScheduler(BM, BN, BK, group_m=8)
C_OFF, C_PART = pipe.stages * coop.stage_bytes, 64 * 64 * 2
SMEM = dynamic_smem_bytes(C_OFF + 4 * C_PART)


@cuda.jit(device=True, inline=True)
def load(slot, full, kb, tm, tn, maps):
    tmap_a, tmap_b = maps
    tma_load_2d(slot, tmap_a, full, kb * BK, tm * BM)  # coordinates innermost first: (column, row)
    tma_load_2d(slot + coop.a_bytes, tmap_b, full, kb * BK, tn * BN)


produce = tile_producer(pipe, sched, coop, load)


@inlined
def dequant(v, row, col, cs, b, rs):  # v: the s32 sum, as f32
    return v * rs * cs + b


part = acc_map(dequant, 64, cols=2, rows=1, pack="bf16", loaded=True)  # a 64 x 64 part, bf16 pairs
tile_values = col_values(BN)  # a thread's values of a per-column vector for its 64 x 128 fragment


@cuda.jit(launch_bounds=(384, 1))
def w8a8(tmap_a, tmap_b, tmap_o, row_scale, col_scale, bias, m, n, k):
    base, ring = pipe.setup()
    tid = cuda.threadIdx.x
    tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
    if tid < 128:  # producer warpgroup: one thread keeps TMA busy
        setmaxnreg_dec(40)
        if tid == 0:
            produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, (tmap_a, tmap_b))
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
            acc, s, ph, prev = coop.tile_open(ring, base, s, ph, 0, kblocks, cw, ct)
            row0, col0 = tm * BM + cw * 64, tn * BN
            cs = tile_values(col_scale[col0:n], ct)  # loaded under the tile's last wgmmas
            bv = tile_values(bias[col0:n], ct)
            coop.drain(ring, ct, prev)
            rs = row_scale[row0:m]
            tma_store_part(part(acc[:32], ct, row0, col0, cs[:16], bv[:16], rs), c0, ct, cw, tmap_o, col0, row0)
            tma_store_part(part(acc[32:], ct, row0, col0 + 64, cs[16:], bv[16:], rs), c1, ct, cw, tmap_o,
                           col0 + 64, row0)
        if ct == 0:
            bulk_wait_group(0)
    pipe.teardown()


SIG = (types.uint64, types.uint64, types.uint64, types.float32[::1], types.float32[::1], types.float32[::1],
       types.int32, types.int32, types.int32)


def run(a, b, row_scale, col_scale, bias, out, ctas):
    """out = bf16(row_scale[:, None] * col_scale * (a @ b^T) + bias): a [M, K], b [N, K] int8
    (K a multiple of 16: TMA wants rows of 16-byte multiples), the scales and bias f32, out [M,
    N] bf16 (as uint16 bits or a bfloat16 tensor; N a multiple of 8), on at most ``ctas`` CTAs."""
    m, k = a.shape
    n = b.shape[0]
    ta, tb = TensorMap(a, (BM, BK)), TensorMap(b, (BN, BK))
    to = TensorMap(out, (64, 64), dtype="bf16")  # tma_store_part's 64 x 64 blocks
    launch(w8a8, sched.grid(m, n, k, ctas), 384, (ta.address, tb.address, to.address, row_scale, col_scale, bias,
                                                 np.int32(m), np.int32(n), np.int32(k)), smem=SMEM, pdl=True)


def simulate():
    """Two CTAs over M = 200, N = 136 (two tile rows by two tile columns, each second one cut
    short), K = 400 (four k-blocks, the last cut short), int8 values over their whole range,
    power-of-two scales and a small dyadic bias: f32 holds every step exactly, so the result is
    the float64 one rounded once to bf16."""
    from nbwgmma.layout import from_bits, to_bits

    rng = np.random.default_rng(0)
    m, n, k = 200, 136, 400
    a = rng.integers(-128, 128, (m, k), dtype=np.int8)
    b = rng.integers(-128, 128, (n, k), dtype=np.int8)
    rs = (2.0 ** rng.integers(-12, -6, m)).astype(np.float32)
    cs = (2.0 ** rng.integers(-8, -2, n)).astype(np.float32)
    bias = (rng.integers(-64, 64, n) / 8).astype(np.float32)
    out = cuda.to_device(np.full((m, n), 0x7FC0, np.uint16))  # bf16 NaN: every element must be written
    run(*(cuda.to_device(x) for x in (a, b, rs, cs, bias)), out, 2)
    got = from_bits(out.copy_to_host(), "bf16")
    exact = rs[:, None].astype(np.float64) * cs * (a.astype(np.float64) @ b.astype(np.float64).T) + bias
    err = float(np.max(np.abs(got - from_bits(to_bits(exact, "bf16"), "bf16"))))
    print(f"simulated {m}x{n}x{k} rs * cs * (A @ B^T) + bias, int8: max |out - ref| = {err:g}")
    if err != 0.0:
        raise SystemExit("mismatch")
    return err


def benchmark(m, n, k, repeats=20):
    import torch

    from nbwgmma.bench import side_by_side

    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randint(-128, 128, (m, k), device="cuda", generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (n, k), device="cuda", generator=g, dtype=torch.int8)
    rs = torch.rand(m, device="cuda", generator=g) / 128
    cs = torch.rand(n, device="cuda", generator=g) / 128
    bias = torch.randn(n, device="cuda", generator=g)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    ctas = torch.cuda.get_device_properties(0).multi_processor_count
    run(a, b, rs, cs, bias, out, ctas)
    ref = rs.double()[:, None] * cs.double() * (a.double() @ b.double().t()) + bias.double()
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    bt = b.t()
    peers = {"nbwgmma w8a8": lambda: run(a, b, rs, cs, bias, out, ctas),
             "torch._int_mm, then dequantized": lambda: (torch._int_mm(a, bt) * rs[:, None] * cs + bias).bfloat16(),
             "torch._int_mm alone (int32 out)": lambda: torch._int_mm(a, bt)}
    side_by_side(torch, peers, 2 * m * n * k, f"{m}x{n}x{k}", "nbwgmma w8a8", repeats)
    print(f"relative error vs float64: {err:.2e}")
    if not err < 1e-2:
        raise SystemExit("mismatch")
    return err


def main(m=8192, n=None, k=None):
    """Returns the relative error against float64 (0.0 where nothing ran on a GPU)."""
    from nbwgmma.demo import run_example

    return run_example("the W8A8 kernel", simulate, lambda: (w8a8, SIG), benchmark, m, n, k)


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:4]))
