"""GEMM step 5: your own fused GEMM on the authoring kit, ``C = gelu_tanh(A @ B^T + bias)``.

The library kernel's structure in a page, with every host step in the open: a persistent
grid walks 128x256 tiles in grouped order (``TileScheduler``); one producer thread feeds a
ring of 3 TMA stages (``TmaPipeline``); two consumer warpgroups each own 64 rows, issue
four m64n256k16 wgmmas per stage and keep one group in flight; the epilogue is a user
function of (value, row, col, bias, n) mapped over the accumulator (``acc_map``), written
to shared memory with ``stmatrix`` and stored by TMA while the next tile's loop runs.

    python examples/gemm_5_fused_epilogue.py [M [N K]]

On an H100: checks C against float64 and times it against PyTorch's fused cuBLASLt epilogue
(``torch._addmm_activation(..., use_gelu=True)``) and the unfused expression. Without a GPU
it prints the compile report; in the simulator (``NUMBA_ENABLE_CUDASIM=1``) it runs one
tile of small integers with ReLU (exact) instead.
"""

import sys

import numpy as np
from numba import cuda, types

from nbwgmma.intrinsics import (
    acc_stmatrix_swizzled, acc_undef, bulk_commit_group, bulk_wait_group, bulk_wait_group_read,
    desc_advance, dynamic_smem_base, fence_proxy_async_shared, make_desc, setmaxnreg_dec, setmaxnreg_inc, smem_addr,
    tma_load_2d, tma_store_2d, wgmma_commit_group, wgmma_fence, wgmma_mma_async, wgmma_wait_group,
)
from nbwgmma.layout import SWIZZLE_CODE
from nbwgmma.kit import TileScheduler, TmaPipeline, acc_map, activation, warpgroup_sync
from nbwgmma.launch import dynamic_smem_bytes, launch
from nbwgmma.tma import TensorMap

KIND = "f32.bf16.bf16"
BM, BN, BK, STAGES = 128, 256, 64, 3
A_BYTES, STAGE = BM * 128, (BM + BN) * 128  # one 128-byte swizzled row of K per operand row
C_OFF, C_CONS = STAGES * STAGE, 64 * BN * 2  # each consumer's 64 x 256 bf16 C tile
SW128 = SWIZZLE_CODE["128B"]
pipe = TmaPipeline(STAGES, consumers=2)
sched = TileScheduler(BM, BN, BK, group_m=8)
NBARS = pipe.barrier_words


def make_kernel(act):
    @cuda.jit(device=True, inline=True)
    def bias_act(v, row, col, bias, n):  # the user's epilogue: any scalar device code
        if col < n:
            v += bias[col]
        return act(v)

    part = acc_map(bias_act, 64, nextra=2, pack="bf16")  # 64 columns -> packed bf16 pairs

    @cuda.jit(launch_bounds=(384, 1))
    def gemm_bias_act(tmap_a, tmap_b, tmap_c, bias, m, n, k):
        dyn = cuda.shared.array(0, np.uint8)
        bars = cuda.shared.array(NBARS, np.uint64)
        base = dynamic_smem_base(dyn, 1024)
        ring = smem_addr(bars)
        tid = cuda.threadIdx.x
        if tid == 0:
            pipe.init(ring)
        cuda.syncthreads()
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        s, ph = 0, 0
        if tid < 128:  # producer warpgroup: one thread keeps TMA busy
            setmaxnreg_dec(40)
            if tid == 0:
                for u in range(sched.first(), nunits, sched.step()):
                    tm, tn = sched.tile(u, tiles_mc, tiles_n, 0)
                    for kb in range(kblocks):
                        full = pipe.producer_acquire(ring, s, ph, STAGE)
                        slot = base + s * STAGE
                        tma_load_2d(slot, tmap_a, full, kb * BK, tm * BM)
                        tma_load_2d(slot + A_BYTES, tmap_b, full, kb * BK, tn * BN)
                        s, ph = pipe.advance(s, ph)
        else:  # two consumer warpgroups, 64 rows each
            setmaxnreg_inc(232)
            cw, ct = tid // 128 - 1, tid % 128
            ctile = base + C_OFF + cw * C_CONS
            prev = 0
            for u in range(sched.first(), nunits, sched.step()):
                tm, tn = sched.tile(u, tiles_mc, tiles_n, 0)
                acc = acc_undef(KIND, BN)
                for kb in range(kblocks):
                    pipe.consumer_wait(ring, s, ph)
                    slot = base + s * STAGE
                    da = make_desc(slot + cw * 64 * 128, 16, 1024, SW128)
                    db = make_desc(slot + A_BYTES, 16, 1024, SW128)
                    wgmma_fence()
                    acc = wgmma_mma_async(acc, da, db, KIND, kb > 0)  # scale-d 0 first: no zero fill
                    acc = wgmma_mma_async(acc, desc_advance(da, 32), desc_advance(db, 32), KIND)
                    acc = wgmma_mma_async(acc, desc_advance(da, 64), desc_advance(db, 64), KIND)
                    acc = wgmma_mma_async(acc, desc_advance(da, 96), desc_advance(db, 96), KIND)
                    wgmma_commit_group()
                    wgmma_wait_group(1)  # the previous stage's wgmmas are done: release it
                    if kb > 0 and ct == 0:
                        pipe.consumer_release(ring, prev)
                    prev = s
                    s, ph = pipe.advance(s, ph)
                wgmma_wait_group(0)
                if ct == 0:
                    pipe.consumer_release(ring, prev)
                row0, col0 = tm * BM + cw * 64, tn * BN
                if ct == 0:
                    bulk_wait_group_read(0)  # the last tile's TMA stores have read the C tile
                warpgroup_sync(cw)
                # 64 columns at a time, each part stored before the next is computed, so the
                # epilogue never holds more than a quarter of the tile's results.
                acc_stmatrix_swizzled(part(acc[:32], ct, row0, col0, bias, n), ctile, ct, 128, "128B")
                acc_stmatrix_swizzled(part(acc[32:64], ct, row0, col0 + 64, bias, n), ctile + 8192, ct, 128, "128B")
                acc_stmatrix_swizzled(part(acc[64:96], ct, row0, col0 + 128, bias, n), ctile + 16384, ct, 128, "128B")
                acc_stmatrix_swizzled(part(acc[96:], ct, row0, col0 + 192, bias, n), ctile + 24576, ct, 128, "128B")
                fence_proxy_async_shared()  # generic writes -> the TMA unit
                warpgroup_sync(cw)
                if ct == 0:
                    for j in range(BN // 64):
                        tma_store_2d(ctile + j * 8192, tmap_c, col0 + j * 64, row0)
                    bulk_commit_group()
            if ct == 0:
                bulk_wait_group(0)

    return gemm_bias_act


SMEM = dynamic_smem_bytes(C_OFF + 2 * C_CONS)
SIG = (types.uint64, types.uint64, types.uint64, types.float32[::1], types.int32, types.int32, types.int32)


def run(kernel, a, b, bias, c, ctas):
    """C = act(A @ B^T + bias): A [M, K], B [N, K] bf16 (K contiguous), bias [N] f32, C [M, N]
    bf16, on a persistent grid of at most ``ctas`` CTAs (one per SM)."""
    m, k = a.shape
    n = b.shape[0]
    ta = TensorMap(a, (BM, BK), dtype="bf16")  # 128-byte swizzle, the layout the descriptors read
    tb = TensorMap(b, (BN, BK), dtype="bf16")
    tc = TensorMap(c, (64, 64), dtype="bf16")  # 64-column blocks of the swizzled C tile
    grid = sched.grid(m, n, k, ctas)
    launch(kernel, grid, 384, (ta.address, tb.address, tc.address, bias, np.int32(m), np.int32(n), np.int32(k)),
           smem=SMEM)


def simulate():
    """One 128x256 tile of small integers, ReLU epilogue, exact (Numba's CUDA simulator)."""
    from nbwgmma.layout.wgmma_model import encode_elements

    rng = np.random.default_rng(0)
    a, b = rng.integers(-2, 3, (BM, 2 * BK)).astype(np.float64), rng.integers(-2, 3, (BN, 2 * BK)).astype(np.float64)
    bias = rng.integers(-8, 9, BN).astype(np.float32)
    bits = [cuda.to_device(encode_elements(x, "bf16").view(np.uint16).reshape(x.shape)) for x in (a, b)]
    c = cuda.to_device(np.full((BM, BN), 0x7FC0, np.uint16))  # bf16 NaN: every element must be written
    run(make_kernel(activation("relu")), bits[0], bits[1], cuda.to_device(bias), c, 1)
    got = (c.copy_to_host().astype(np.uint32) << 16).view(np.float32)
    ref = np.maximum(a @ b.T + bias, 0)
    err = float(np.max(np.abs(got - ref)))
    print(f"simulated {BM}x{BN}x{2 * BK} relu(A @ B^T + bias): max |C - ref| = {err:g}")
    if err != 0.0:
        raise SystemExit("mismatch")
    return err


def benchmark(m, n, k, repeats=20):
    import statistics

    import torch
    import torch.nn.functional as F

    from nbwgmma import matmul

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
    times = {name: [] for name in peers}
    for _ in range(3):
        for f in peers.values():
            f()
    inner = 10  # launches per timing: the host stays ahead of the GPU for every contender
    for _ in range(repeats):  # the contenders take turns
        for name, f in peers.items():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(inner):
                f()
            e.record()
            e.synchronize()
            times[name].append(s.elapsed_time(e) * 1e-3 / inner)
    flops = 2 * m * n * k
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, t in med.items():
        print(f"{name:36s} {m}x{n}x{k}: {t * 1e3:.3f} ms = {flops / t / 1e12:.1f} TFLOP/s "
              f"({med[name] / med['nbwgmma']:.3f}x nbwgmma's time)")
    print(f"relative error vs float64: {err:.2e}")
    if not err < 1e-2:
        raise SystemExit("mismatch")
    return err


def main(m=8192, n=None, k=None):
    """Returns the relative error against float64 (0.0 where nothing ran on a GPU)."""
    n = m if n is None else n
    k = m if k is None else k
    from nbwgmma import sim
    from nbwgmma.demo import gpu_available
    from nbwgmma.report import compile_report

    if sim.enabled():
        return simulate()
    if not gpu_available():  # an sm_90 GPU
        print("no sm_90 GPU here: compile report of the fused kernel instead\n")
        print(compile_report(make_kernel(activation("gelu_tanh")), SIG))
        return 0.0
    return benchmark(m, n, k)


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:4]))
