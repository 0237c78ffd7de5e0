"""GEMM step 11: random numbers in the epilogue, ``out = residual + dropout(A @ B^T + bias, p)``.

A transformer block's output projection in training, in one kernel: the bias, the dropout and
the residual add run in the epilogue of the fused example's schedule (step 5: 256 x 128 tiles,
two consumer warpgroups of two 64-row accumulators, clusters of two sharing A's rows). The
dropout draws its numbers with the kit's counter-based generator: ``acc_map4`` hands each 2 x 2
group a thread holds to one function, which makes one ``rand4x(seed, row * n + col)`` (Philox,
four uniforms) for its four values and reads their residual pair of each row as one 32-bit
word. The epilogue runs with the tensor cores idle (the residual's loads, the draws: about a
tenth of the time at 8192^3). Nothing is stored for the mask: ``nbwgmma.random.rand4x_2x2(seed, m, n) > p`` gives it
again, on the host for the check below, or in the backward pass's kernel with the same draw.

    python examples/gemm_11_dropout.py [M [N K]]

On an H100: checks ``out`` against float64 (with the host's mask) and times it against
PyTorch's ``residual + F.dropout(F.linear(x, w, bias), p)`` and the product alone. Without a
GPU it prints the compile report; in the simulator (``NUMBA_ENABLE_CUDASIM=1``) it runs one
cluster over three tiles of small integers and one past N's end, p = 0.5 (exact).
"""

import sys

import numpy as np
from numba import cuda, types

from nbwgmma.intrinsics import bulk_wait_group, setmaxnreg_dec, setmaxnreg_inc, x2_to_f32
from nbwgmma.kit import (Cooperative, TileScheduler, TmaPipeline, acc_map4, inlined, rand4x, tile_producer,
                         tma_store_part, warpgroup_index)
from nbwgmma.launch import dynamic_smem_bytes, launch
from nbwgmma.tma import TensorMap

KIND = "f32.bf16.bf16"
BM, BN, BK, STAGES = 256, 128, 64, 4
pipe = TmaPipeline(STAGES, consumers=2, cluster=2)
coop = Cooperative(KIND, pipe, BM, BN, blocks=2, multicast="A")
sched = TileScheduler(BM, BN, BK, group_m=8, cluster=2, along="N")
C_OFF, C_PART = pipe.stages * coop.stage_bytes, 64 * 64 * 2
ZERO = np.float32(0.0)


@cuda.jit(device=True, inline=True)
def load(slot, full, kb, tm, tn, maps):
    tmap_a, tmap_b = maps
    coop.load_tile(slot, full, tmap_a, tmap_b, kb, tm, tn)


produce = tile_producer(pipe, sched, coop, load)


@inlined
def keep(v, u, p, scale):
    return v * scale if u > p else ZERO


def dropout_residual(v00, v01, v10, v11, row, col, seed, p, scale, m, n, res, bias):
    """One 2 x 2 group: (row, col), (row, col + 1), (row + 8, col), (row + 8, col + 1); ``res``
    the residual as 32-bit words (two bf16 a word: columns col and col + 1 of a row). The loads
    are clamped into the arrays, not guarded by branches: what lands past M or N is never stored
    (the TMA store clips it), and loads without branches issue together, one latency a part.
    Guarded by ``if row < m`` each waited for its own DRAM latency in turn: 0.79x the bare
    product at 8192^3 against 0.90x now (an H200, BENCHMARKS.md 2026-12-03). The bias is read here
    too (L1 hits): loaded ahead for the whole tile (``col_values``) its 32 registers spilled."""
    u0, u1, u2, u3 = rand4x(seed, row * n + col)
    c = np.int32(min(col, n - 2))
    w = c >> 1
    b0, b1 = bias[c], bias[c + 1]
    r00, r01 = x2_to_f32(res[np.int32(min(row, m - 1)), w], "bf16")
    r10, r11 = x2_to_f32(res[np.int32(min(row + 8, m - 1)), w], "bf16")
    return (r00 + keep(v00 + b0, u0, p, scale), r01 + keep(v01 + b1, u1, p, scale),
            r10 + keep(v10 + b0, u2, p, scale), r11 + keep(v11 + b1, u3, p, scale))


drop = acc_map4(dropout_residual, 64, nextra=7, pack="bf16")  # 64 columns -> packed bf16 pairs


@inlined
def store_block(acc, bias, ct, cw, c0, c1, tmap_c, row, col0, seed, p, scale, m, n, res):
    """A 64 x 128 block of the tile in two 64-column parts, through the consumer's two shared
    blocks in turn."""
    lo = drop(acc[:32], ct, row, col0, seed, p, scale, m, n, res, bias)
    tma_store_part(lo, c0, ct, cw, tmap_c, col0, row)
    hi = drop(acc[32:], ct, row, col0 + 64, seed, p, scale, m, n, res, bias)
    tma_store_part(hi, c1, ct, cw, tmap_c, col0 + 64, row)


@cuda.jit(launch_bounds=(384, 1))
def gemm_dropout(tmap_a, tmap_b, tmap_c, bias, res, seed, p, scale, m, n, k):
    base, ring = pipe.setup()
    tid = cuda.threadIdx.x
    tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
    if tid < 128:  # the producer warpgroup: one thread keeps TMA busy
        setmaxnreg_dec(40)
        if tid == 0:
            produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, (tmap_a, tmap_b))
        else:
            return
    else:  # two consumer warpgroups, 128 rows of each tile apiece
        setmaxnreg_inc(232)
        cw, ct = warpgroup_index() - 1, tid % 128
        c0 = base + C_OFF + cw * 2 * C_PART
        c1 = c0 + C_PART
        s, ph, rank = 0, 0, sched.rank()
        for u in range(sched.first(), nunits, sched.step()):
            tm, tn = sched.tile(u, tiles_mc, tiles_n, rank)
            (acc0, acc1), s, ph = coop.tile(ring, base, s, ph, 0, kblocks, cw, ct)
            row0, col0 = tm * BM + cw * 128, tn * BN
            store_block(acc0, bias, ct, cw, c0, c1, tmap_c, row0, col0, seed, p, scale, m, n, res)
            store_block(acc1, bias, ct, cw, c0, c1, tmap_c, row0 + 64, col0, seed, p, scale, m, n, res)
        if ct == 0:
            bulk_wait_group(0)
    pipe.teardown()


SMEM = dynamic_smem_bytes(C_OFF + 4 * C_PART)
SIG = (types.uint64, types.uint64, types.uint64, types.float32[::1], types.uint32[:, ::1], types.int64,
       types.float32, types.float32, types.int32, types.int32, types.int32)


def run(a, b, bias, words, out, seed, p, ctas):
    """out = residual + dropout(A @ B^T + bias, p): A [M, K], B [N, K] bf16 (K contiguous), bias [N]
    f32, out [M, N] bf16, the residual as its 32-bit words ``words`` [M, N / 2] (two bf16 a word:
    ``residual.view(torch.int32)``; N even), the mask that of ``nbwgmma.random.rand4x_2x2(seed,
    M, N) > p``; a persistent grid of at most ``ctas`` CTAs."""
    m, k = a.shape
    n = b.shape[0]
    ta = TensorMap(a, coop.box_a, dtype="bf16")
    tb = TensorMap(b, coop.box_b, dtype="bf16")
    tc = TensorMap(out, (64, 64), dtype="bf16")
    scale = np.float32(1.0 / (1.0 - p)) if p < 1 else ZERO
    launch(gemm_dropout, sched.grid(m, n, k, ctas), 384,
           (ta.address, tb.address, tc.address, bias, words, np.int64(seed), np.float32(p), scale, np.int32(m),
            np.int32(n), np.int32(k)), smem=SMEM, cluster=(2, 1, 1), pdl=True)


def reference(a, b, bias, residual, seed, p):
    """float64: residual + where(mask, (A @ B^T + bias) / (1 - p), 0), the mask from the host model."""
    from nbwgmma.random import rand4x_2x2

    m, n = a.shape[0], b.shape[0]
    kept = rand4x_2x2(seed, m, n) > np.float32(p)
    y = a @ b.T + bias
    return residual + np.where(kept, y * np.float64(np.float32(1 / (1 - p))), 0.0), kept


def simulate():
    """One cluster of two CTAs over three 256 x 128 tiles along N of small integers (N = 328: the
    third stops inside it; the fourth, the second CTA's second tile, lies past N), three k-blocks,
    p = 0.5 (a scale of 2), exact after the one rounding to bf16 (Numba's CUDA simulator)."""
    from nbwgmma.layout import from_bits, to_bits

    rng = np.random.default_rng(0)
    m, n, k = BM, 328, 3 * BK
    a = rng.integers(-2, 3, (m, k)).astype(np.float64)
    b = rng.integers(-2, 3, (n, k)).astype(np.float64)
    bias = rng.integers(-8, 9, n).astype(np.float32)
    res = rng.integers(-8, 9, (m, n)).astype(np.float64)
    out = cuda.to_device(np.full((m, n), 0x7FC0, np.uint16))  # bf16 NaN: every element must be written
    run(cuda.to_device(to_bits(a, "bf16")), cuda.to_device(to_bits(b, "bf16")), cuda.to_device(bias),
        cuda.to_device(to_bits(res, "bf16").view(np.uint32)), out, 1234, 0.5, 1)
    want, kept = reference(a, b, bias, res, 1234, 0.5)
    err = float(np.max(np.abs(from_bits(out.copy_to_host(), "bf16") - from_bits(to_bits(want, "bf16"), "bf16"))))
    print(f"simulated {m}x{n}x{k} residual + dropout(A @ B^T + bias, 0.5): max |out - ref| = {err:g} "
          f"(kept {kept.mean():.3f})")
    if err != 0.0:
        raise SystemExit("mismatch")
    return err


def benchmark(m, n, k, repeats=20, p=0.1):
    import torch
    import torch.nn.functional as F

    from nbwgmma import matmul
    from nbwgmma.bench import side_by_side
    from nbwgmma.demo import gemm_operands
    from nbwgmma.random import rand4x_2x2

    a, b = gemm_operands(m, n, k)
    g = torch.Generator(device="cuda").manual_seed(1)
    bias = torch.randn(n, device="cuda", generator=g)
    res = torch.randn(m, n, device="cuda", generator=g).to(torch.bfloat16)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    ctas = torch.cuda.get_device_properties(0).multi_processor_count
    words = res.view(torch.int32)
    run(a, b, bias, words, out, 7, p, ctas)
    kept = torch.from_numpy(rand4x_2x2(7, m, n) > np.float32(p)).cuda()
    y = a.double() @ b.double().t() + bias.double()
    ref = res.double() + torch.where(kept, y * float(np.float32(1 / (1 - p))), 0.0)
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    bias16, plain = bias.to(torch.bfloat16), torch.empty_like(out)
    peers = {"nbwgmma fused": lambda: run(a, b, bias, words, out, 7, p, ctas),
             "residual + F.dropout(F.linear(x, w, b), p)": lambda: res + F.dropout(F.linear(a, b, bias16), p),
             "F.linear(x, w, b) alone (cuBLASLt)": lambda: F.linear(a, b, bias16),
             "nbwgmma.matmul(bias) alone": lambda: matmul(a, b.t(), bias=bias16, out=plain)}
    side_by_side(torch, peers, 2 * m * n * k, f"{m}x{n}x{k}", "nbwgmma fused", repeats)
    print(f"relative error vs float64: {err:.2e}; kept {float(kept.float().mean()):.4f} (1 - p = {1 - p})")
    if not err < 1e-2:
        raise SystemExit("mismatch")
    return err


def main(m=8192, n=None, k=None):
    """Returns the relative error against float64 (0.0 where nothing ran on a GPU)."""
    from nbwgmma.demo import run_example

    return run_example("the dropout kernel", simulate, lambda: (gemm_dropout, SIG), benchmark, m, n, k)


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:4]))
