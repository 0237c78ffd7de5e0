"""The grouped GEMM of mixture-of-experts layers, written with the kit.

``out[r] = A[r] @ B[g]^T`` for every row ``r`` of group ``g``: A [total, K] holds the
groups' rows one after another, ``offs`` [G] (int32, on the device) their running ends
(group ``g`` is rows ``offs[g-1]`` .. ``offs[g]``, from 0 for the first), B [G, N, K] one
weight per group (K contiguous), out [total, N]. One launch for all groups, and the host
never reads ``offs``: every thread walks the groups on the device.

Two schedules. Ping-pong (:class:`~nbwgmma.kit.PingPong`, 6 stages): work units are the
128 x 128 tiles of every group in order (within a group, ``group_m`` tile rows at a time, as
the library GEMM walks its tiles), a CTA takes pairs of units, one per consumer (for groups of
few rows, in :func:`~nbwgmma.kit.wave_order`). Cooperative (:class:`~nbwgmma.kit.Cooperative`,
3 stages): both consumers on each 128 x 256 tile, the producer warpgroup's idle warps storing
it (:class:`~nbwgmma.kit.EpilogueWarps`). The walk over the groups is
:func:`~nbwgmma.kit.group_walk`.
A's rows past a group's end belong to the next group: their results are computed and not
stored (each group's rows are stored through a slice of ``out`` that ends with the group).
B's rows past N are the next group's weight: their columns fall outside ``out``. Values of
``offs`` are clamped to [0, total] and made non-decreasing, so bad offsets cannot make the
kernel touch memory outside A or ``out``.

The masked layout (decoding under CUDA graphs, fixed shapes): A [G, T, K] and out [G, T, N],
seen as [G * T, K] and [G * T, N], with ``counts`` [G] in place of ``offs``: group ``g`` is
rows ``g * T`` .. ``g * T + counts[g]`` (counts clamped into [0, T]); the rows past a
group's count are neither computed nor written.
"""

from __future__ import annotations

import functools

from numba import cuda

from ..errors import ConfigError
from ..intrinsics import (
    acc_store, acc_to_bf16x2, acc_to_f16x2, setmaxnreg_dec, setmaxnreg_inc, tma_load_2d, tma_load_3d,
)
from ..kit import (Cooperative, EpilogueWarps, PingPong, TmaPipeline, acc_map, activation, clear_rows, group_walk,
                   inlined, no_epilogue_warps, short_map)
from ..launch import dynamic_smem_bytes

__all__ = ["grouped_kernel", "part_store", "THREADS", "SMEM", "TYPES", "units_bound"]

TYPES = ("bf16", "f16")
BM = 128
BK = 64
THREADS = 384
#: The schedules: name -> (tile columns, stages, tiles a CTA holds at a time); tiles of 128 rows.
SCHEDULES = {"pingpong": (128, 6, 2), "cooperative": (256, 3, 1)}
_C_TILE = 128 * 256 * 2  # the cooperative schedule's 16-bit C tile in shared memory
#: Dynamic shared memory of a launch, per schedule.
SMEM = {"pingpong": dynamic_smem_bytes(6 * (128 + 128) * 128),
        "cooperative": dynamic_smem_bytes(3 * (128 + 256) * 128 + _C_TILE)}


def units_bound(total: int, groups: int, n: int, schedule: str = "pingpong") -> int:
    """At most this many tiles over ``groups`` groups of ``total`` rows in all (each group's
    last tile may be partial), with ``schedule``'s tiles."""
    return (-(-total // BM) + groups) * -(-n // SCHEDULES[schedule][0])


def grouped_kernel(dtype: str, masked: bool = False, group_m: int = 4, wave: bool = False, bias: bool = False,
                   act: str | None = None, b_major: str = "K", schedule: str = "pingpong", out: str | None = None,
                   short: bool = False):
    """The ``@cuda.jit`` kernel for ``dtype`` ("bf16" or "f16"): arguments ``(tmap_a, tmap_b,
    out, offs, n, k, t, bias, gb, tmap_as, short_rows)``: tensor maps of A [total, K] and of B, all with the 128-byte
    swizzle: with ``b_major="K"`` (each B[g] the transpose of a row-major weight [N, K]) B seen as
    [G * N, K], box BN x 64 (BN the schedule's tile columns); with ``b_major="MN"`` (B [G, K, N]
    with N contiguous) a 3-D map
    [G, K, N], box 1 x 64 x 64 (K past a group's end is zeros, not the next group's rows);
    ``out`` a 2-D array (uint16 for bf16 bits, or float16; with the cooperative schedule its
    bytes, uint8 [rows, 2 N], 16-byte aligned rows; float32 where the builder's ``out`` is "f32",
    ping-pong only),
    ``offs`` int32 [G] (the counts when ``masked``), int32 ``n``, ``k`` (k >= 1) and ``t``
    (rows per group when ``masked``, else unused); with ``bias``, ``bias`` a 2-D f32 array whose
    row ``g * gb`` is group ``g``'s bias per column (``gb`` 1 for one row per group, 0 for one
    row shared; any 2-D f32 array and 0 without a bias); ``act`` an activation of
    :data:`nbwgmma.kit.ACTIVATIONS` applied after the bias; with ``short`` (decoding: few rows a
    group), ``tmap_as`` a second map of A whose box holds ``short_rows`` rows (a multiple of 8
    below 128, :func:`~nbwgmma.kit.box_rows`): a tile holding at most that many of its group's
    rows loads A through it, the slots' other rows zeroed once (:func:`~nbwgmma.kit.clear_rows`;
    without ``short`` both are unused). :data:`THREADS` threads,
    ``SMEM[schedule]`` bytes of dynamic shared memory, at most ``ceil(units_bound(...) / h)``
    CTAs, h the tiles a CTA holds at a time (:data:`SCHEDULES`). ``schedule`` "pingpong" (two
    consumer warpgroups taking 128 x 128 tiles in turn) or "cooperative" (both on each 128 x 256
    tile, :class:`~nbwgmma.kit.Cooperative`: the library GEMM's main loop; the consumers add the
    bias and write the tile into shared memory, and the producer warpgroup's idle warps apply
    the activation and store its rows inside the group, :class:`~nbwgmma.kit.EpilogueWarps`).
    Within a group, tiles are walked ``group_m`` tile rows at a time
    (:func:`~nbwgmma.kit.tile_order`); with ``wave``, CTAs take units in
    :func:`~nbwgmma.kit.wave_order` (for groups of few rows: the CTAs computing a column's
    tiles then run together and share its B in L2)."""
    if dtype not in TYPES:
        raise ConfigError("dtype", f"grouped_kernel: dtype must be one of {TYPES}; got {dtype!r}")
    if not isinstance(group_m, int) or group_m < 1:
        raise ConfigError("group_m", f"grouped_kernel: group_m must be a positive integer; got {group_m!r}")
    if act is not None:
        activation(act)  # a ValueError naming the choices
    if b_major not in ("K", "MN"):
        raise ConfigError("b_major", f"grouped_kernel: b_major must be 'K' or 'MN'; got {b_major!r}")
    if schedule not in SCHEDULES:
        raise ConfigError("schedule", f"grouped_kernel: schedule must be one of {tuple(SCHEDULES)}; got {schedule!r}")
    if out not in (None, dtype, "f32") or (out == "f32" and schedule != "pingpong"):
        raise ConfigError("out", f"grouped_kernel: out must be the input type {dtype!r} (or None for it), or 'f32' with the "
                                 f"ping-pong schedule; got out={out!r} with schedule={schedule!r}")
    return _build(dtype, bool(masked), group_m, bool(wave), bool(bias), act, b_major, schedule, out or dtype,
                  bool(short))


def part_store(bias: bool, f, kind: str):
    """``store(frag, bias, brow, mine, ct, row0, col0, n)``: a 64 x 64 part of a ``kind``
    accumulator (thread ``ct``'s 32 values; its tile's rows ``row0 ..``, columns ``col0 ..``)
    stored into ``mine`` (a group's rows of C) with, where given, each value's column's bias
    (``bias[brow, col0:n]``: the group's row of a 2-D f32 array) added and the activation's
    device function ``f`` applied, in f32, before the rounding to C's type; None for neither (the
    kernels store the whole fragment then). The grouped GEMMs' epilogue from registers."""
    KIND = kind
    if not bias and f is None:
        return None
    if bias:
        if f is None:
            @inlined
            def value(v, row, col, b):
                return v + b
        else:
            @inlined
            def value(v, row, col, b):
                return f(v + b)
    else:
        @inlined
        def value(v, row, col):
            return f(v)
    part = acc_map(value, 64, cols=int(bias))

    if bias:
        @inlined
        def store(frag, bias, brow, mine, ct, row0, col0, n):
            acc_store(part(frag, ct, row0, col0, bias[brow, col0:n]), KIND, mine, ct, row0, col0)
    else:
        @inlined
        def store(frag, bias, brow, mine, ct, row0, col0, n):
            acc_store(part(frag, ct, row0, col0), KIND, mine, ct, row0, col0)
    return store


def _packed(dtype, bias):
    """``(frag, bias, brow, ct, r0, c0, n) -> packed`` of a 64 x 64 part: the group's bias
    (``bias[brow]`` from column ``c0``) added where there is one, the values packed in 16-bit
    pairs for ``stmatrix``."""
    if bias:
        @inlined
        def plus(v, row, col, b):
            return v + b

        part = acc_map(plus, 64, cols=1, pack=dtype)

        @inlined
        def packed(frag, bias, brow, ct, r0, c0, n):
            return part(frag, ct, r0, c0, bias[brow, c0:n])
    else:
        pack = acc_to_bf16x2 if dtype == "bf16" else acc_to_f16x2

        @inlined
        def packed(frag, bias, brow, ct, r0, c0, n):
            return pack(frag)
    return packed


@functools.lru_cache(maxsize=None)
def _build(dtype, masked, GROUP_M, WAVE, BIAS, ACT, B_MAJOR, SCHEDULE, OUT, SHORT):
    KIND = f"f32.{dtype}.{dtype}"
    BN, STAGES, _ = SCHEDULES[SCHEDULE]
    COOP = SCHEDULE == "cooperative"
    act = activation(ACT, OUT) if ACT is not None else None  # (16-bit outputs: gelu_tanh on tanh.approx)
    if COOP:
        pipe = TmaPipeline(STAGES, consumers=2)
        coop = Cooperative(KIND, pipe, BM, BN, b_major=B_MAJOR)
        STAGE, A_BYTES = coop.stage_bytes, coop.a_bytes
        ew = EpilogueWarps(act, BM, BN, dtype)
        esetup = ew.setup
        C_OFF = STAGES * STAGE
    else:
        pipe = TmaPipeline(STAGES, consumers=1)
        pp = PingPong(KIND, pipe, b_major=B_MAJOR)
        STAGE, A_BYTES = pp.STAGE_BYTES, pp.A_BYTES
        esetup, C_OFF = no_epilogue_warps, 0
    B_MN = B_MAJOR == "MN"

    @inlined
    def load(slot, full, tmap_a, tmap_b, kcol, a_row, g, n, ncol):
        """One stage: A's 128 rows from ``a_row``; B[g]'s BN columns from ``ncol``."""
        if B_MN:  # 64 x 64 boxes of the 3-D map [G, K, N]
            tma_load_2d(slot, tmap_a, full, kcol, a_row)
            for j in range(BN // 64):
                tma_load_3d(slot + A_BYTES + j * 8192, tmap_b, full, ncol + j * 64, kcol, g)
        elif COOP:  # [G * N, K]: group g's rows from g * n
            coop.load(slot, full, tmap_a, tmap_b, kcol, a_row, g * n + ncol, A_BYTES)
        else:
            pp.load(slot, full, tmap_a, tmap_b, kcol, a_row, g * n + ncol)
    store_part = part_store(BIAS, act, KIND)
    EPI = store_part is not None
    # setmaxnreg: the epilogue warps with the group walk take 56 registers (at 48, 80 bytes of
    # its scalars spilled per tile; 40 for a producer alone), the consumers the rest of the 504
    # per thread slot
    PREGS, CREGS = (56, 224) if COOP else (40, 232)

    _, units, place = group_walk(masked, BM, GROUP_M, WAVE)

    if COOP:
        packed = _packed(dtype, BIAS)

        @inlined
        def stage_tile(acc, bias, brow, ebar, eph, cbuf, cw, ct, r0, c0, n):
            """A warpgroup's 64 x 256 fragment, the bias added, as 16-bit values into the shared
            C tile for the epilogue warps (in 64 x 64 parts: no spills)."""
            p0 = packed(acc[:32], bias, brow, ct, r0, c0, n)
            p1 = packed(acc[32:64], bias, brow, ct, r0, c0 + 64, n)
            p2 = packed(acc[64:96], bias, brow, ct, r0, c0 + 128, n)
            p3 = packed(acc[96:], bias, brow, ct, r0, c0 + 192, n)
            return ew.stage(p0 + p1 + p2 + p3, cbuf, ebar, eph, cw, ct)  # once the previous tile is read
    else:
        @inlined
        def store_tile(acc, bias, brow, mine, ct, r0, c0, n):
            """A 64 x 128 fragment into the group's rows, as above."""
            if EPI:
                store_part(acc[:32], bias, brow, mine, ct, r0, c0, n)
                store_part(acc[32:], bias, brow, mine, ct, r0, c0 + 64, n)
            else:
                acc_store(acc, KIND, mine, ct, r0, c0)

    @cuda.jit(launch_bounds=(THREADS, 1))
    def grouped_gemm(tmap_a, tmap_b, out, offs, n, k, t, bias, gb, tmap_as, short_rows):
        base, ring = pipe.setup()  # stages' base (1 KiB aligned), the ring's barriers initialized
        ebar = esetup()  # the epilogue warps' barriers (cooperative; 0 otherwise)
        tid = cuda.threadIdx.x
        total = out.shape[0]
        tiles_n = (n + BN - 1) // BN
        kblocks = (k + BK - 1) // BK
        nunits = units(offs, total, t, tiles_n)
        first, step = cuda.blockIdx.x, cuda.gridDim.x
        g, gbase = 0, 0
        if SHORT and short_rows > 0:  # rows no short box loads: cleared once, by every thread
            clear_rows(base, STAGE, STAGES, 128, short_rows, BM, tid, THREADS)
            cuda.syncthreads()
        if tid < 128:  # producer warpgroup: one thread keeps TMA busy
            setmaxnreg_dec(PREGS)
            if tid == 0:
                s, ph = 0, 0
                if COOP:  # one tile at a time, both consumers on it
                    for u in range(first, nunits, step):
                        g, gbase, start, end, tm, tn = place(u, g, gbase, offs, total, t, tiles_n, nunits, step)
                        ta, tx = short_map(SHORT and end - start - tm * BM <= short_rows, tmap_a, tmap_as, STAGE, BM,
                                           short_rows, 128)
                        for kb in range(kblocks):
                            full = pipe.producer_acquire(ring, s, ph, tx)
                            load(base + s * STAGE, full, ta, tmap_b, kb * BK, start + tm * BM, g, n, tn * BN)
                            s, ph = pipe.advance(s, ph)
                else:
                    for pair in range(first, (nunits + 1) // 2, step):
                        for u in range(2 * pair, min(2 * pair + 2, nunits)):  # the two consumers' tiles
                            g, gbase, start, end, tm, tn = place(u, g, gbase, offs, total, t, tiles_n, nunits, step)
                            ta, tx = short_map(SHORT and end - start - tm * BM <= short_rows, tmap_a, tmap_as, STAGE,
                                               BM, short_rows, 128)
                            for kb in range(kblocks):
                                full = pipe.producer_acquire(ring, s, ph, tx)
                                load(base + s * STAGE, full, ta, tmap_b, kb * BK, start + tm * BM, g, n, tn * BN)
                                s, ph = pipe.advance(s, ph)
            elif COOP and tid >= 32:  # warps 1-3: the epilogue warps, storing each tile's rows in its group
                eph = 0
                for u in range(first, nunits, step):
                    g, gbase, start, end, tm, tn = place(u, g, gbase, offs, total, t, tiles_n, nunits, step)
                    eph = ew.drain_to(ebar, base + C_OFF, out[start:end], eph, tid - 32, tm * BM, tn * BN,
                                      end - start, n)
        elif COOP:  # two consumer warpgroups, 64 rows of each 128 x 256 tile each
            setmaxnreg_inc(CREGS)
            cw, ct = tid // 128 - 1, tid % 128
            s, ph, eph = 0, 0, 0
            for u in range(first, nunits, step):
                acc, s, ph = coop.tile(ring, base, s, ph, 0, kblocks, cw, ct)
                g, gbase, start, end, tm, tn = place(u, g, gbase, offs, total, t, tiles_n, nunits, step)
                eph = stage_tile(acc, bias, g * gb, ebar, eph, base + C_OFF, cw, ct, tm * BM + cw * 64, tn * BN, n)
        else:  # two consumer warpgroups taking tiles in turn
            setmaxnreg_inc(CREGS)
            cw, ct = tid // 128 - 1, tid % 128
            s, ph = pp.start(cw, kblocks)
            for u in range(2 * first + cw, nunits, 2 * step):
                other_next = u + 1 if cw == 0 else u + 2 * step - 1
                acc0, acc1, s, ph = pp.tile(ring, base, s, ph, kblocks, ct, cw, u != 2 * first, other_next < nunits)
                # where the tile goes, found after the main loop (fewer registers live across it)
                g, gbase, start, end, tm, tn = place(u, g, gbase, offs, total, t, tiles_n, nunits, step)
                mine = out[start:end]  # this group's rows: the next group's are not ours to write
                store_tile(acc0, bias, g * gb, mine, ct, tm * BM, tn * BN, n)
                store_tile(acc1, bias, g * gb, mine, ct, tm * BM + 64, tn * BN, n)

    return grouped_gemm
