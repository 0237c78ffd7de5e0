"""GEMM step 10: a row reduction in the epilogue, the log-sum-exp of an LM head's logits.

A language model's loss needs, for every token ``i``, ``lse[i] = log(sum_j exp(L[i, j]))`` over
the vocabulary, with ``L = X @ W^T`` (X [tokens, hidden], W [vocab, hidden]). PyTorch writes
the logits (8192 tokens x a 128256-word vocabulary: 2.1 GB in bf16) and reads them back. Here
no logit leaves the registers: the kit's ``Cooperative`` consumers compute a 128 x 256 tile,
each reduces its 64 rows with ``acc_row_reduce`` (the row's maximum, then the sum of
``exp(v - max)`` with the maximum passed as a row pair; columns past the vocabulary masked) and
``pair_store`` writes each row's pair, from one lane of its quad, to a small workspace of one
pair per row and tile column; a second, small kernel combines a row's pairs (``max +
log(sum)`` over the tiles, rescaled to one maximum). Clusters of two CTAs on vertically adjacent tiles share B's
rows (``multicast="B"``), as the library GEMM's 128 x 256 tiles do.

    python examples/gemm_10_lse.py [M [N K]]

On an H100: checks lse against float64 and times it against PyTorch's ``torch.logsumexp(x @
w.T, 1)`` and against the GEMM alone (cuBLAS and the library writing the logits). Without a
GPU it prints the compile report; in the simulator (``NUMBA_ENABLE_CUDASIM=1``) it runs one
cluster over two tile rows and three tile columns, the last cut by the vocabulary's end.
"""

import math
import sys

import numpy as np
from numba import cuda, types

from nbwgmma.intrinsics import ex2_approx, setmaxnreg_dec, setmaxnreg_inc
from nbwgmma.kit import (Cooperative, TileScheduler, TmaPipeline, acc_row_reduce, pair_store, tile_producer,
                         warpgroup_index)
from nbwgmma.launch import dynamic_smem_bytes, launch
from nbwgmma.tma import TensorMap

KIND = "f32.bf16.bf16"
BM, BN, BK, STAGES = 128, 256, 64, 4  # two consumers of 64 rows; no C tile in shared memory
pipe = TmaPipeline(STAGES, consumers=2, cluster=2)
coop = Cooperative(KIND, pipe, BM, BN, multicast="B")
sched = TileScheduler(BM, BN, BK, group_m=8, cluster=2)  # cluster tiles along M: they share B's rows
SMEM = dynamic_smem_bytes(pipe.stages * coop.stage_bytes)
LOG2E = np.float32(math.log2(math.e))


@cuda.jit(device=True, inline=True)
def load(slot, full, kb, tm, tn, maps):
    tmap_a, tmap_b = maps
    coop.load_tile(slot, full, tmap_a, tmap_b, kb, tm, tn)


produce = tile_producer(pipe, sched, coop, load)
row_max = acc_row_reduce("max", BN)  # (lo, hi): the thread's rows lr and lr + 8
# exp(v - max) as 2^(v log2 e - max log2 e): one FFMA (max log2 e computed once a row) and one MUFU a value
row_sumexp = acc_row_reduce("sum", BN, fn=lambda v, r, c, mx: ex2_approx(v * LOG2E - mx * LOG2E), pairs=1)


@cuda.jit(launch_bounds=(384, 1))
def gemm_lse_parts(tmap_a, tmap_b, pmax, psum, m, n, k):
    """pmax[tn, r], psum[tn, r]: row r's maximum over tile column tn and its sum of exp(v - max)."""
    base, ring = pipe.setup()
    tid = cuda.threadIdx.x
    tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
    if tid < 128:  # producer warpgroup: one thread keeps TMA busy
        setmaxnreg_dec(40)
        if tid == 0:
            produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, (tmap_a, tmap_b))
        else:
            return  # idle threads leave (waiting at the cluster barrier below slows the producer)
    else:  # two consumer warpgroups, 64 rows of each tile apiece
        setmaxnreg_inc(232)
        cw, ct = warpgroup_index() - 1, tid % 128
        s, ph, rank = 0, 0, sched.rank()
        for u in range(sched.first(), nunits, sched.step()):
            tm, tn = sched.tile(u, tiles_mc, tiles_n, rank)
            acc, s, ph = coop.tile(ring, base, s, ph, 0, kblocks, cw, ct)
            row0, col0 = tm * BM + cw * 64, tn * BN
            mx = row_max(acc, ct, row0, col0, n)
            se = row_sumexp(acc, ct, row0, col0, n, mx)
            pair_store(mx, pmax[tn, row0:m], ct)  # one lane of each quad writes its two rows
            pair_store(se, psum[tn, row0:m], ct)
    pipe.teardown()


@cuda.jit
def combine(pmax, psum, lse, m, tiles_n):
    """lse[r] from row r's pairs (a thread a row: the workspace's rows are read coalesced)."""
    r = cuda.grid(1)
    if r < m:
        big = pmax[0, r]
        for j in range(1, tiles_n):
            big = max(big, pmax[j, r])
        total = np.float32(0.0)
        for j in range(tiles_n):
            total += psum[j, r] * ex2_approx((pmax[j, r] - big) * LOG2E)
        lse[r] = big + math.log(total)


SIG = (types.uint64, types.uint64, types.float32[:, ::1], types.float32[:, ::1], types.int32, types.int32,
       types.int32)


def run(a, b, lse, work, ctas):
    """lse = logsumexp(A @ B^T, 1): A [M, K], B [N, K] bf16 (K contiguous), lse [M] f32; ``work``
    two f32 arrays of (N / 256 rounded up, M) (each call overwrites them), on a persistent grid of at
    most ``ctas`` CTAs."""
    m, k = a.shape
    n = b.shape[0]
    ta = TensorMap(a, coop.box_a, dtype="bf16")
    tb = TensorMap(b, coop.box_b, dtype="bf16")
    pmax, psum = work
    launch(gemm_lse_parts, sched.grid(m, n, k, ctas), 384,
           (ta.address, tb.address, pmax, psum, np.int32(m), np.int32(n), np.int32(k)), smem=SMEM, cluster=(2, 1, 1),
           pdl=True)
    launch(combine, (m + 127) // 128, 128, (pmax, psum, lse, np.int32(m), np.int32(pmax.shape[0])))


def reference(a, b):
    """float64 log-sum-exp of each row of A @ B^T."""
    x = a @ b.T
    big = x.max(1)
    return big + np.log(np.exp(x - big[:, None]).sum(1))


def simulate():
    """One cluster of two CTAs over two tile rows and three tile columns (N = 600: the third
    column of tiles stops inside it, its padding masked), three k-blocks, values of a few units
    (Numba's CUDA simulator); returns the relative error of lse against float64."""
    from nbwgmma.layout import from_bits, to_bits

    rng = np.random.default_rng(0)
    m, n, k = 2 * BM, 600, 3 * BK
    a = from_bits(to_bits(rng.standard_normal((m, k)) / 4, "bf16"), "bf16")  # bf16 values, held as float64
    b = from_bits(to_bits(rng.standard_normal((n, k)) / 4, "bf16"), "bf16")
    work = [cuda.to_device(np.full((-(-n // BN), m), np.nan, np.float32)) for _ in range(2)]
    lse = cuda.to_device(np.full(m, np.nan, np.float32))
    run(cuda.to_device(to_bits(a, "bf16")), cuda.to_device(to_bits(b, "bf16")), lse, work, 1)
    ref = reference(a, b)
    err = float(np.max(np.abs(lse.copy_to_host() - ref) / np.abs(ref)))
    print(f"simulated {m}x{n}x{k} logsumexp(A @ B^T, 1): max |lse - ref| / |ref| = {err:.2e}")
    if not err < 1e-5:
        raise SystemExit("mismatch")
    return err


def benchmark(m, n, k, repeats=10):
    import torch

    from nbwgmma import matmul
    from nbwgmma.bench import side_by_side
    from nbwgmma.demo import gemm_operands

    a, b = gemm_operands(m, n, k)
    lse = torch.full((m,), float("nan"), device="cuda")
    work = [torch.empty((-(-n // BN), m), device="cuda") for _ in range(2)]
    ctas = torch.cuda.get_device_properties(0).multi_processor_count
    run(a, b, lse, work, ctas)
    ref = torch.logsumexp(a.double() @ b.double().t(), 1)
    err = float(torch.max(torch.abs(lse.double() - ref) / torch.abs(ref)))
    logits = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    peers = {"nbwgmma fused": lambda: run(a, b, lse, work, ctas),
             "torch.logsumexp(x @ w.T, 1)": lambda: torch.logsumexp(a @ b.t(), 1),
             "the logits alone (cuBLAS)": lambda: torch.mm(a, b.t(), out=logits),
             "the logits alone (nbwgmma.matmul)": lambda: matmul(a, b.t(), out=logits)}
    side_by_side(torch, peers, 2 * m * n * k, f"{m}x{n}x{k}", "nbwgmma", repeats)
    print(f"relative error vs float64: {err:.2e} (PyTorch's, from bf16 logits: "
          f"{float(torch.max(torch.abs(torch.logsumexp(a @ b.t(), 1).double() - ref) / torch.abs(ref))):.2e})")
    if not err < 1e-3:
        raise SystemExit("mismatch")
    return err


def main(m=8192, n=128256, k=4096):
    """Returns the relative error against float64."""
    from nbwgmma.demo import run_example

    return run_example("the log-sum-exp kernel", simulate, lambda: (gemm_lse_parts, SIG), benchmark, m, n, k)


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:4]))
