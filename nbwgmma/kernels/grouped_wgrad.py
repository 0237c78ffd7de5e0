"""The K-grouped GEMM of mixture-of-experts weight gradients, written with the kit.

``out[g] = A[:, s_g:e_g] @ B[s_g:e_g, :]`` for every group ``g``: A [M, total] and B [total, N]
share the grouped dimension (the tokens, sorted by expert), ``offs`` [G] (int32, on the device)
holds the groups' running ends (``s_g = offs[g-1]``, 0 for the first; ``e_g = offs[g]``), out is
[G, M, N]. The typical call is the weight gradient ``dW_g = dY_g^T @ X_g``: A = ``dy.t()`` and
B = ``x`` for row-major ``dy`` [total, M] and ``x`` [total, N], so both operands reach the kernel
M- resp. N-contiguous ("MN-major") and are read in place through wgmma's transpose bits (TMA
boxes of 64 K-rows x 64 elements, 128-byte swizzle, as :class:`~nbwgmma.kit.Cooperative` loads
MN-major operands). One launch for all groups; the host never reads ``offs``.

Work units are the 128 x 128 tiles of every group's output, ``G * tiles(M) * tiles(N)`` of them
(known on the host; group ``g``'s tiles are units ``g * tiles(M) * tiles(N)`` onwards, walked
``GROUP_M`` tile rows at a time). The schedule is ping-pong: two consumer warpgroups take the
CTA's tiles in turn, one's epilogue under the other's main loop, 6 stages of 32 KiB, a TMA
producer thread. A tile's K length is its group's, so tiles differ in k-blocks: the consumers run
:class:`~nbwgmma.kit.PingPong`'s ``ragged`` tiles, each starting at the ring's fill that the
running count of the CTA's fills gives (both consumers count every tile's k-blocks).

**Group boundaries.** A group's k-blocks start at its own first row: block ``j`` of group ``g``
is rows ``s_g + 64 j`` .. ``s_g + 64 j + 63`` (TMA takes any start coordinate), so no block holds
rows of the previous group. The last block of a group whose length is not a multiple of 64 holds
``e_g - kcol`` rows of the group and then rows of the next group (or zeros past ``total``, TMA's
out-of-bounds fill); ``ragged`` clears those K-rows of both operands in shared memory before the
stage's wgmmas. Clearing both, not one, keeps a non-finite value of the next group out of the
sums (Inf * 0 is NaN). An empty group has no k-blocks: its tiles store zeros
(``torch._grouped_mm``'s result for it).

Values of ``offs`` are clamped into [0, total] and made non-decreasing, so bad offsets cannot
make the kernel read outside A or B. The output goes out through shared memory and TMA stores of
64 x 64 parts of a 3-D tensor map of out [G, M, N], which clip at M and N.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from ..errors import ConfigError
from ..intrinsics import acc_to_bf16x2, acc_to_f16x2, bulk_wait_group, setmaxnreg_dec, setmaxnreg_inc
from ..kit import PingPong, TmaPipeline, inlined, tma_store_part_3d
from ..launch import dynamic_smem_bytes

__all__ = ["grouped_wgrad_kernel", "THREADS", "SMEM", "TYPES", "BM", "BN", "BK", "units"]

TYPES = ("bf16", "f16")
BM = BN = 128
BK = 64
THREADS = 384
STAGES = 6
STAGE = PingPong.STAGE_BYTES  # A's two 64 x 64 boxes (128 rows of M), then B's two (128 columns of N)
C_PART = 64 * 64 * 2  # 64 x 64 16-bit blocks of C, two per consumer after the stages
C_OFF = STAGES * STAGE
#: Dynamic shared memory of a launch.
SMEM = dynamic_smem_bytes(C_OFF + 4 * C_PART)
GROUP_M = 8


def units(groups: int, m: int, n: int) -> int:
    """Work units (128 x 128 output tiles) of ``groups`` groups of an M x N output."""
    return groups * -(-m // BM) * -(-n // BN)


def grouped_wgrad_kernel(dtype: str):
    """The ``@cuda.jit`` kernel for ``dtype`` ("bf16" or "f16"), arguments ``(tmap_a, tmap_b,
    tmap_c, offs, m, n, total)``: tensor maps (128-byte swizzle) of A seen as [total, M] (M
    contiguous; box 64 x 64), of B [total, N] (N contiguous; box 64 x 64) and of out [G, M, N]
    (box 1 x 64 x 64); ``offs`` int32 [G]; int32 sizes, ``total`` >= 1. :data:`THREADS` threads,
    :data:`SMEM` bytes of dynamic shared memory, at most ``ceil(units(G, M, N) / 2)`` CTAs."""
    if dtype not in TYPES:
        raise ConfigError("dtype", f"grouped_wgrad_kernel: dtype must be one of {TYPES}; got {dtype!r}")
    return _build(dtype)


@inlined
def div32(a, b):
    """``a // b`` for 0 <= a, 0 < b < 2^31 as an unsigned 32-bit division (Numba's integers are
    64-bit: a signed 64-bit division is a call, whose saved registers spilled here)."""
    return np.int32(np.uint32(a) // np.uint32(b))


@functools.lru_cache(maxsize=None)
def _build(dtype):
    KIND = f"f32.{dtype}.{dtype}"
    BF16 = dtype == "bf16"
    pipe = TmaPipeline(STAGES, consumers=1)
    pp = PingPong(KIND, pipe, a_major="MN", b_major="MN")

    @inlined
    def group_rows(offs, g, total):
        """Rows [start, end) of group ``g`` along the shared dimension, clamped into [0, total]
        and non-decreasing."""
        start = 0 if g == 0 else min(max(offs[g - 1], 0), total)
        return start, min(max(offs[g], start), total)

    @inlined
    def kblocks_of(offs, u, per_group, total):
        """k-blocks of unit ``u``'s group (0 for an empty group)."""
        start, end = group_rows(offs, div32(u, per_group), total)
        return (end - start + BK - 1) // BK

    @inlined
    def tile_of(t, tiles_m, tiles_n):
        """Tile ``t`` of a group -> (tile row, tile col), ``GROUP_M`` tile rows at a time (as
        :func:`nbwgmma.kit.tile_order`, with 32-bit divisions)."""
        per = GROUP_M * tiles_n
        band = div32(t, per)
        first = band * GROUP_M
        rows = min(tiles_m - first, GROUP_M)
        r = t - band * per
        tn = div32(r, rows)
        return first + r - tn * rows, tn

    @inlined
    def put(frag, buf, ct, cw, tmap_c, g, row, col):
        """A 64 x 64 part of group ``g``'s output through the shared block ``buf`` and a TMA
        store into the 3-D map's matrix ``g`` (:func:`nbwgmma.kit.tma_store_part_3d`): two blocks
        used in turn, thread 0 waits before its store until the previous store has read its block."""
        tma_store_part_3d(acc_to_bf16x2(frag) if BF16 else acc_to_f16x2(frag), buf, ct, cw, tmap_c, col, row, g)

    @inlined
    def shape(offs, m, n):
        """(tiles_m, tiles_n, tiles per group, units, pairs of units)."""
        tiles_m = (m + BM - 1) // BM
        tiles_n = (n + BN - 1) // BN
        per_group = tiles_m * tiles_n
        nunits = offs.shape[0] * per_group
        return tiles_m, tiles_n, per_group, nunits, (nunits + 1) // 2

    @cuda.jit(launch_bounds=(THREADS, 1))
    def grouped_wgrad(tmap_a, tmap_b, tmap_c, offs, m, n, total):
        base, ring = pipe.setup()  # stages' base (1 KiB aligned), the ring's barriers initialized
        tid = cuda.threadIdx.x
        if tid < 128:  # producer warpgroup: one thread keeps TMA busy
            setmaxnreg_dec(40)
            if tid == 0:
                tiles_m, tiles_n, per_group, nunits, npairs = shape(offs, m, n)
                s, ph = 0, 0
                for pair in range(cuda.blockIdx.x, npairs, cuda.gridDim.x):
                    for u in range(2 * pair, min(2 * pair + 2, nunits)):  # the two consumers' tiles
                        g = div32(u, per_group)
                        start, end = group_rows(offs, g, total)
                        tm, tn = tile_of(u - g * per_group, tiles_m, tiles_n)
                        for kb in range((end - start + BK - 1) // BK):
                            full = pipe.producer_acquire(ring, s, ph, STAGE)
                            # blocks aligned to the group's first row
                            pp.load(base + s * STAGE, full, tmap_a, tmap_b, start + kb * BK, tm * BM, tn * BN)
                            s, ph = pipe.advance(s, ph)
        else:  # two consumer warpgroups taking the CTA's tiles in turn
            setmaxnreg_inc(232)
            tiles_m, tiles_n, per_group, nunits, npairs = shape(offs, m, n)
            first, step = cuda.blockIdx.x, cuda.gridDim.x
            cw, ct = tid // 128 - 1, tid % 128
            c0 = base + C_OFF + cw * 2 * C_PART  # the warpgroup's two shared blocks of C
            c1 = c0 + C_PART
            it = 0  # the ring's fills before this pair's first tile
            for pair in range(first, npairs, step):
                u0 = 2 * pair
                kb0 = kblocks_of(offs, u0, per_group, total)
                kb1 = kblocks_of(offs, u0 + 1, per_group, total) if u0 + 1 < nunits else 0
                u = u0 + cw
                if u < nunits:
                    g = div32(u, per_group)
                    start, end = group_rows(offs, g, total)
                    pass_turn = u0 + 1 < nunits if cw == 0 else pair + step < npairs
                    acc0, acc1 = pp.ragged(ring, base, it + cw * kb0, kb1 if cw else kb0, end - start, ct, cw,
                                           cw == 1 or pair != first, pass_turn)
                    tm, tn = tile_of(u - g * per_group, tiles_m, tiles_n)
                    r0, col = tm * BM, tn * BN
                    put(acc0[:32], c0, ct, cw, tmap_c, g, r0, col)
                    put(acc0[32:], c1, ct, cw, tmap_c, g, r0, col + 64)
                    put(acc1[:32], c0, ct, cw, tmap_c, g, r0 + 64, col)
                    put(acc1[32:], c1, ct, cw, tmap_c, g, r0 + 64, col + 64)
                it += kb0 + kb1
            if ct == 0:
                bulk_wait_group(0)  # the stores have read shared memory before the CTA exits

    return grouped_wgrad
