"""GEMM step 12: an MoE layer's weight gradients, a product grouped along K, on the kit's ping-pong.

The experts' weight gradients are ``dW[g] = x[s:e]^T @ dy[s:e]`` over each expert's own tokens
(rows ``s:e`` of ``total``, ``offs`` their running ends): G products of one shape whose K differ
and may be 0. x [total, M] and dy [total, N] are read in place, row-major, through wgmma's two
transpose bits: A = x^T is M-contiguous and B = dy is N-contiguous, both MN-major (64 x 64 TMA
boxes, ``pp.box_a`` / ``pp.box_b``). The consumers are the kit's ``PingPong`` with its ``ragged``
tiles: two warpgroups take a CTA's 128 x 128 tiles in turn, each tile from zeros over its group's
k-blocks, the K-rows of the last block past the group's end (the next group's tokens) cleared
before its wgmmas. A tile finds its stages in the ring from the count of fills before it (``it``),
as the producer loaded them: every tile's k-blocks, in the walk both sides share.

    python examples/gemm_12_wgrad.py [M [N TOKENS]]

On an H100: eight experts of TOKENS / 8 tokens (default 8 * M), checked against float64 and timed
against the library's ``grouped_matmul(x.t(), dy, offs)`` and ``torch._grouped_mm``. Without a GPU
it prints the compile report; in the simulator (``NUMBA_ENABLE_CUDASIM=1``) it runs two CTAs over
four groups (one empty, one of 130 tokens: three k-blocks, the last cut short) of 192 x 136
(tiles cut short by M's and N's ends): exact on small integers.
"""

import sys

import numpy as np
from numba import cuda, types

from nbwgmma.intrinsics import acc_store, griddep_launch_dependents, setmaxnreg_dec, setmaxnreg_inc
from nbwgmma.kit import PingPong, TmaPipeline, inlined, warpgroup_index
from nbwgmma.launch import dynamic_smem_bytes, launch
from nbwgmma.tma import TensorMap

KIND = "f32.bf16.bf16"
STAGES = 4
pipe = TmaPipeline(STAGES, consumers=1)  # (each stage is one consumer's)
pp = PingPong(KIND, pipe, a_major="MN", b_major="MN")
BM, BN, BK, STAGE = pp.BM, pp.BN, pp.bk, pp.STAGE_BYTES
SMEM = dynamic_smem_bytes(STAGES * STAGE)


@inlined
def place(u, offs, tiles_n, per_group):
    """Tile ``u`` of the walk -> (group, tile row, tile column, the group's first token, its
    tokens, its k-blocks); unsigned 32-bit divisions (a signed 64-bit one is a call)."""
    g = np.int32(np.uint32(u) // np.uint32(per_group))
    t = u - g * per_group
    tm = np.int32(np.uint32(t) // np.uint32(tiles_n))
    start = offs[g - 1] if g > 0 else 0
    rows = offs[g] - start
    return g, tm, t - tm * tiles_n, start, rows, (rows + BK - 1) // BK


@cuda.jit(launch_bounds=(384, 1))
def wgrad(tmap_x, tmap_dy, out, offs, m, n):
    base, ring = pipe.setup()
    tid = cuda.threadIdx.x
    tiles_n = (n + BN - 1) // BN
    per_group = (m + BM - 1) // BM * tiles_n
    nunits = np.int32(offs.shape[0]) * per_group
    first, step = cuda.blockIdx.x, cuda.gridDim.x
    if tid < 128:  # producer warpgroup: one thread keeps TMA busy
        setmaxnreg_dec(40)
        if tid == 0:
            s, ph = 0, 0
            for u in range(first, nunits, step):
                g, tm, tn, start, rows, kblocks = place(u, offs, tiles_n, per_group)
                for kb in range(kblocks):
                    full = pipe.producer_acquire(ring, s, ph, STAGE)
                    pp.load(base + s * STAGE, full, tmap_x, tmap_dy, start + kb * BK, tm * BM, tn * BN)
                    s, ph = pipe.advance(s, ph)
            griddep_launch_dependents()  # (a pdl=True launch's next kernel may take the SMs we leave)
        return
    setmaxnreg_inc(232)  # two consumers: the CTA's tiles in turn, 0, 2, 4, ... and 1, 3, 5, ...
    cw, ct = warpgroup_index() - 1, tid % 128
    ntiles = np.int32(np.uint32(nunits - first + step - 1) // np.uint32(step))
    it, i = 0, 0  # the ring's fills before tile i of the CTA's walk
    for u in range(first, nunits, step):
        g, tm, tn, start, rows, kblocks = place(u, offs, tiles_n, per_group)
        if i % 2 == cw:  # wait for the other's main loop except at the walk's first tile; pass the turn on
            acc0, acc1 = pp.ragged(ring, base, it, kblocks, rows, ct, cw, i > 0, i + 1 < ntiles)
            acc_store(acc0, KIND, out[g], ct, tm * BM, tn * BN)  # bf16 bits, rows and columns past the end skipped
            acc_store(acc1, KIND, out[g], ct, tm * BM + 64, tn * BN)
        it += kblocks
        i += 1


SIG = (types.uint64, types.uint64, types.uint16[:, :, ::1], types.int32[::1], types.int32, types.int32)


def run(x, dy, offs, out, ctas):
    """out[g] = x[s:e]^T @ dy[s:e] for the groups ``offs`` (int32 running ends, non-decreasing, the
    last at most total) delimits: x [total, M] and dy [total, N] bf16 (uint16 bits or bfloat16
    tensors), row-major, M and N multiples of 8 (16-byte rows for TMA); out [G, M, N] uint16 (bf16
    bits), on at most ``ctas`` CTAs. With no token at all TMA takes no map: out is zeroed instead."""
    g, m, n = out.shape
    if x.shape[0] == 0:
        out[:] = 0
        return
    tx, tdy = TensorMap(x, pp.box_a, dtype="bf16"), TensorMap(dy, pp.box_b, dtype="bf16")
    grid = max(1, min(ctas, g * -(-m // BM) * -(-n // BN)))
    launch(wgrad, grid, 384, (tx.address, tdy.address, out, offs, np.int32(m), np.int32(n)), smem=SMEM, pdl=True)


def simulate():
    """Two CTAs, four groups of 70, 0, 130 and 60 tokens, M = 192 and N = 136: exact."""
    from nbwgmma.layout import from_bits, to_bits

    rng = np.random.default_rng(0)
    sizes, m, n = [70, 0, 130, 60], 192, 136
    offs = np.cumsum(sizes).astype(np.int32)
    x = rng.integers(-2, 3, (offs[-1], m)).astype(np.float64)
    dy = rng.integers(-2, 3, (offs[-1], n)).astype(np.float64)
    out = cuda.to_device(np.full((len(sizes), m, n), 0x7FC0, np.uint16))  # bf16 NaN: every element written
    run(cuda.to_device(to_bits(x, "bf16")), cuda.to_device(to_bits(dy, "bf16")), cuda.to_device(offs), out, 2)
    ref = np.stack([x[e - c:e].T @ dy[e - c:e] for c, e in zip(sizes, offs)])
    err = float(np.max(np.abs(from_bits(out.copy_to_host(), "bf16") - ref)))
    print(f"simulated {len(sizes)} groups of {sizes} tokens, {m}x{n}: max |dW - ref| = {err:g}")
    if err != 0.0:
        raise SystemExit("mismatch")
    return err


def benchmark(m, n, tokens, repeats=20, groups=8):
    import torch

    from nbwgmma import grouped_matmul
    from nbwgmma.bench import side_by_side

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(tokens, m, device="cuda", generator=gen).bfloat16()
    dy = torch.randn(tokens, n, device="cuda", generator=gen).bfloat16()
    offs = torch.full((groups,), tokens // groups, device="cuda").cumsum(0).int()
    offs[-1] = tokens
    out = torch.full((groups, m, n), 0x7FC0, device="cuda", dtype=torch.uint16)  # bf16 NaN
    ctas = torch.cuda.get_device_properties(0).multi_processor_count
    run(x, dy, offs, out, ctas)
    ends = offs.tolist()
    ref = torch.stack([x[s:e].double().t() @ dy[s:e].double() for s, e in zip([0] + ends[:-1], ends)])
    err = float(torch.linalg.norm(out.view(torch.bfloat16).double() - ref) / torch.linalg.norm(ref))
    peers = {"nbwgmma example": lambda: run(x, dy, offs, out, ctas),
             "nbwgmma.grouped_matmul": lambda: grouped_matmul(x.t(), dy, offs),
             "torch._grouped_mm": lambda: torch._grouped_mm(x.t(), dy, offs=offs)}
    side_by_side(torch, peers, 2 * m * n * tokens, f"{groups} x {m}x{n}x{tokens // groups}", "nbwgmma example",
                 repeats)
    print(f"relative error vs float64: {err:.2e}")
    if not err < 1e-2:
        raise SystemExit("mismatch")
    return err


def main(m=4096, n=None, tokens=None):
    """Returns the relative error against float64 (0.0 where nothing ran on a GPU)."""
    from nbwgmma.demo import run_example

    return run_example("the weight-gradient kernel", simulate, lambda: (wgrad, SIG), benchmark, m, n,
                       tokens if tokens is not None else 8 * m)


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:4]))
