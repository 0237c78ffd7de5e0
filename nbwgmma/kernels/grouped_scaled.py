"""The block-scaled fp8 grouped GEMM (mixture-of-experts layers in the DeepSeek-V3 recipe).

``out[r] = sum_kb (A[r, kb] @ B[g][:, kb]^T) * sa[r, kb] * sb[g, nb, kb]`` for every row ``r``
of group ``g``: A [total, K] fp8 (the groups' rows one after another, K contiguous) with one
f32 scale per row and 128-K block, ``sa`` [total, ceil(K/128)]; B one fp8 weight [N, K] per
group (K contiguous; the kernel reads B as [G * N, K]) with one scale per 128 x 128 block,
``sb`` [G, ceil(N/128), ceil(K/128)]; ``offs`` [G] int32 on the device, their running ends (or
the masked layout's counts, :func:`~nbwgmma.kit.group_walk`). One launch, the host never reads
``offs``.

Written with the kit: the grouped walk (:func:`~nbwgmma.kit.group_walk`, 128-row tiles of
each group in order) feeds the block-scaled consumers of the dense kernel
(:class:`~nbwgmma.kit.BlockScaled`: two consumer warpgroups on each 128 x 128 tile, every 128-K
block summed by the wgmma, then scaled and added into an f32 accumulator in registers; the
consumers read the scales from global memory: a group's rows start anywhere, and staged row
by row the scales were slower), one producer thread streaming 128-K stages through
a ring of 6. The results go from the registers
into the group's rows of ``out`` (bf16, f16 or f32), with a bias per group and column and an
activation where asked: rows of a tile past its group's end
belong to the next group and are computed but not stored; B's rows past N (the next group's
weight) give columns outside ``out``. TMA fills K's tail with zeros and a block scale past it
meets zeros, so any K (16-byte aligned rows) works.

Decoding (groups of a few tokens): a tile whose group holds at most ``short_rows`` of its rows
loads A through a second map whose box has only that many rows (:func:`~nbwgmma.kit.box_rows`),
the stage armed with those bytes: a 128-row box of other groups' rows cost TMA what data does.
The slots' rows past the short box are cleared once at the start (they hold rows past the
group's end afterwards, which are never stored).
"""

from __future__ import annotations

import functools

from numba import cuda

from ..errors import ConfigError
from ..intrinsics import acc_store, setmaxnreg_dec, setmaxnreg_inc
from ..kit import BlockScaled, TmaPipeline, activation, clear_rows, group_walk, short_map
from ..launch import dynamic_smem_bytes
from .grouped import part_store

__all__ = ["grouped_scaled_kernel", "THREADS", "SMEM", "BM", "BN"]

BM = BN = BK = 128
STAGES = 6
STAGE = BlockScaled.STAGE_BYTES
THREADS = 384
SMEM = dynamic_smem_bytes(STAGES * STAGE)
FP8 = ("e4m3", "e5m2")
OUTS = ("bf16", "f16", "f32")


def grouped_scaled_kernel(a_type: str = "e4m3", b_type: str = "e4m3", masked: bool = False, group_m: int = 4,
                          bias: bool = False, act: str | None = None, out: str = "bf16", short: bool = False):
    """The ``@cuda.jit`` kernel (built once per choice): arguments ``(tmap_a, tmap_b, out, offs,
    sa, sb, n, k, t, bias, gb, tmap_as, short_rows)``: tensor maps of A [total, K] and of B seen
    as [G * N, K] (fp8, box 128 x 128, 128-byte swizzle); ``out`` [total, N] (a 2-D array: uint16 for bf16 bits,
    float16 or float32, as ``out`` names it); ``offs`` int32 [G] (the counts when ``masked``);
    ``sa`` [total, ceil(K/128)] and ``sb`` [G, ceil(N/128), ceil(K/128)] f32 (any strides);
    int32 ``n``, ``k`` (k >= 1) and ``t`` (rows per group when ``masked``, else unused); with
    ``bias``, ``bias`` a 2-D f32 array whose row ``g * gb`` is group ``g``'s bias per column
    (``gb`` 1 for one row per group, 0 for one row shared; any 2-D f32 array and 0 without);
    ``act`` an activation of :data:`nbwgmma.kit.ACTIVATIONS` applied after the bias, in f32
    (gelu_tanh on ``tanh.approx`` for 16-bit outputs, as the 16-bit GEMMs); ``tmap_as`` a map of
    A with a box of ``short_rows`` rows (a multiple of 8 below 128), which tiles holding at most
    that many of their group's rows load through (with ``short``; else, and with ``short_rows`` 0,
    unused: a kernel without ``short`` keeps the producer's loop of whole boxes, which ran 2%
    faster for groups of 512 rows on an H200). :data:`THREADS`
    threads, :data:`SMEM` bytes of dynamic shared memory, at most one CTA per 128 x 128 tile.
    ``group_m``: the walk's order (:func:`~nbwgmma.kit.group_walk`; the wave order is not
    offered: its indices, live across the main loop beside three 64-register fragments, spilled
    536 bytes)."""
    for name, v in (("a_type", a_type), ("b_type", b_type)):
        if v not in FP8:
            raise ConfigError(name, f"grouped_scaled_kernel: {name} must be one of {FP8}; got {v!r}")
    if not isinstance(group_m, int) or group_m < 1:
        raise ConfigError("group_m", f"grouped_scaled_kernel: group_m must be a positive integer; got {group_m!r}")
    if out not in OUTS:
        raise ConfigError("out", f"grouped_scaled_kernel: out must be one of {OUTS}; got {out!r}")
    if act is not None:
        activation(act)  # a ValueError naming the choices
    return _build(a_type, b_type, bool(masked), group_m, bool(bias), act, out, bool(short))


@functools.lru_cache(maxsize=None)
def _build(a_type, b_type, masked, group_m, BIAS, ACT, OUT, SHORT):
    KIND = f"f32.{a_type}.{b_type}"
    pipe = TmaPipeline(STAGES, consumers=2)
    bs = BlockScaled(KIND, pipe, a_block=True, b_block=True)  # group rows start anywhere: scales read directly
    _, units, place = group_walk(masked, BM, group_m, False)
    store_part = part_store(BIAS, activation(ACT, OUT) if ACT is not None else None, KIND)
    EPI = store_part is not None

    @cuda.jit(launch_bounds=(THREADS, 1))
    def grouped_scaled_gemm(tmap_a, tmap_b, out, offs, sa, sb, n, k, t, bias, gb, tmap_as, short_rows):
        base, ring = pipe.setup()  # stages' base (1 KiB aligned), the ring's barriers initialized
        tid = cuda.threadIdx.x
        total = out.shape[0]
        tiles_n = (n + BN - 1) // BN
        kblocks = (k + BK - 1) // BK
        nunits = units(offs, total, t, tiles_n)
        first, step = cuda.blockIdx.x, cuda.gridDim.x
        g, gbase = 0, 0
        if SHORT and short_rows > 0:  # rows no short box loads: cleared once, by every thread
            clear_rows(base, STAGE, STAGES, BK, short_rows, BM, tid, THREADS)
            cuda.syncthreads()
        if tid < 128:  # producer warpgroup: one thread keeps TMA busy
            setmaxnreg_dec(24)
            if tid == 0:
                s, ph = 0, 0
                for u in range(first, nunits, step):
                    g, gbase, start, end, tm, tn = place(u, g, gbase, offs, total, t, tiles_n, nunits, step)
                    ta, tx = short_map(SHORT and end - start - tm * BM <= short_rows,  # (short_rows 0: never)
                                       tmap_a, tmap_as, STAGE, BM, short_rows, BK)
                    for kb in range(kblocks):
                        full = pipe.producer_acquire(ring, s, ph, tx)
                        bs.load(base + s * STAGE, full, ta, tmap_b, kb * BK, start + tm * BM, g * n + tn * BN)
                        s, ph = pipe.advance(s, ph)
        else:  # two consumer warpgroups, 64 rows of each tile each
            setmaxnreg_inc(240)
            cw, ct = tid // 128 - 1, tid % 128
            lr = ((ct >> 5) << 4) + ((ct >> 2) & 7)  # the thread's first row in its 64 (fragment layout)
            s, ph = 0, 0
            for u in range(first, nunits, step):
                g, gbase, start, end, tm, tn = place(u, g, gbase, offs, total, t, tiles_n, nunits, step)
                r0 = tm * BM + cw * 64  # within the group
                ra0 = min(start + r0 + lr, total - 1)  # scale rows inside A (past the group: not stored)
                ra1 = min(start + r0 + lr + 8, total - 1)
                acc, s, ph = bs.tile_direct(ring, base, s, ph, kblocks, ct, cw, sa, sb[g], ra0, ra1, tn)
                mine = out[start:end]  # this group's rows: the next group's are not ours to write
                if EPI:  # in 64 x 64 parts
                    store_part(acc[:32], bias, g * gb, mine, ct, r0, tn * BN, n)
                    store_part(acc[32:], bias, g * gb, mine, ct, r0, tn * BN + 64, n)
                else:
                    acc_store(acc, KIND, mine, ct, r0, tn * BN)

    return grouped_scaled_gemm
