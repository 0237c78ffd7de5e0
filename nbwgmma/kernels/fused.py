"""The fused-epilogue GEMM: ``C = act(alpha * A @ B^T + bias)``, written with the kit.

The schedules (``FusedConfig(schedule=...)``), one epilogue:

* "pingpong", that of ``examples/gemm_5_fused_epilogue.py``: one producer thread feeds a ring
  of 6 TMA stages of 32 KiB; two consumer warpgroups each compute a whole 128 x 128 tile
  and take tiles in turn (``turn_wait`` / ``turn_pass``), so one's epilogue (the scale, the
  bias, the activation, the conversion) runs while the other's main loop keeps the tensor
  cores busy. A CTA walks pairs of adjacent tiles in grouped order, one per consumer.
* "pingpong192": the same with 128 x 192 tiles per consumer (``PingPong(bn=192)``, 4 stages of
  40 KiB): a quarter fewer bytes loaded per FLOP; measured level with the others, not a default.
* "cooperative", the library GEMM's (:class:`~nbwgmma.kit.Cooperative`): 128 x 256 tiles,
  each consumer warpgroup 64 rows of it, 4 stages of 48 KiB. Half the bytes loaded per
  FLOP of the 128 x 128 tiles, but the epilogue runs with the tensor cores idle: the
  better choice where the main loop is long against the epilogue (large K) or the loads
  bound the ping-pong tiles (fp8).
* "epilogue_warps": the cooperative main loop with 3 stages and a whole 128 x 256 C tile in
  shared memory (:class:`~nbwgmma.kit.EpilogueWarps`): the consumers add the scale, the bias
  and ``beta * C``, convert and write the tile, and go on; the producer warpgroup's idle warps
  apply the activation to the 16-bit values and store the tile with TMA. 16-bit outputs with
  an activation and no user function.

The epilogue goes out in 64 x 64 parts through two shared blocks per consumer (``stmatrix``,
then a TMA store that runs while the next part is computed), or (epilogue_warps) as one tile.

A [M, K] is 16-bit (bf16 or f16), K contiguous; B is [N, K] with K contiguous (the weight of
``x @ w.T``) or [K, N] with N contiguous (``x @ w``, read with wgmma's transpose bit); C
[M, N] has their type, N contiguous. TMA fills A's and B's tails with zeros
and clips C's stores, so any M, N, K (with 16-byte aligned rows) works.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from ..intrinsics import (
    FP8_FORMATS, acc_add, acc_load, acc_scale, acc_store_fp8, acc_store_fp8_swizzled, bulk_wait_group, setmaxnreg_dec,
    setmaxnreg_inc,
)
from ..kit import (Cooperative, EpilogueWarps, PingPong, TileScheduler, TmaPipeline, acc_map, activation, inlined,
                   no_epilogue_warps, tile_producer, tma_store_block, tma_store_part)
from ..launch import dynamic_smem_bytes
from .gemm_config import EXTRA_KINDS, MAX_EXTRAS

__all__ = ["FusedConfig", "fused_kernel", "BIASES", "TYPES", "FP8_OUTS", "OUTS_16", "SCHEDULES", "THREADS"]

#: Where a bias vector runs: one value per column of C (length N) or per row (length M).
BIASES = (None, "col", "row")
#: Input element types (A's and B's), and the wgmma kind of each; 16-bit inputs give their
#: own type out by default, fp8 inputs bf16.
TYPES = ("bf16", "f16", "e4m3", "e5m2")
KIND_OF = {t: f"f32.{t}.{t}" for t in TYPES}
OUTS_16 = ("bf16", "f16")
#: fp8 output types: the epilogue's result times a scale, rounded (nearest even, saturated).
FP8_OUTS = FP8_FORMATS

#: The schedules: name -> (tile rows, tile columns, stages, stage bytes).
SCHEDULES = {"pingpong": (128, 128, 6, (128 + 128) * 128), "pingpong192": (128, 192, 4, (128 + 192) * 128),
             "cooperative": (128, 256, 4, (128 + 256) * 128), "epilogue_warps": (128, 256, 3, (128 + 256) * 128)}
PINGPONG = ("pingpong", "pingpong192")
ROW = 128  # bytes of K per stage: one 128-byte swizzle row (64 K of 16-bit inputs, 128 of fp8)
C_PART = 64 * 64 * 2  # 64 x 64 16-bit blocks of C, two per consumer after the stages
THREADS = 384


class FusedConfig:
    """Compile-time choices of a fused GEMM: element type ``dtype`` ("bf16" or "f16", inputs
    and output), ``bias`` (None, "col" or "row"), ``act`` (None or an activation name of
    :data:`nbwgmma.kit.ACTIVATIONS`), ``group_m`` (tile rows per group of the walk), and a
    user ``epilogue``: a ``@cuda.jit(device=True)`` function ``(value, row, col, *extra) ->
    value`` applied last, whose extra arguments have the kinds ``extras`` (:data:`EXTRA_KINDS`,
    in the function's order); ``b_major`` "K" (B [N, K], the weight of ``x @ w.T``) or "MN"
    (B [K, N] row-major, ``x @ w``); ``with_c``: ``beta * C`` is added (C read in the
    epilogue, any strides, so it may be the output itself); ``out``: the output type, the input
    type (default) or fp8 (:data:`FP8_OUTS`: each result times ``scale_out``, stored as fp8
    codes); ``amax``: with fp8 out, the largest |result| of C (before the scale) is also
    written, by an atomic max into a one-element f32 array; ``fp8_tma``: with an fp8 out, the
    codes go through shared memory and TMA stores (C row-major, 16-byte aligned rows) instead
    of plain stores (any strides); ``schedule``: "pingpong", "pingpong192", "cooperative" or
    "epilogue_warps" (:data:`SCHEDULES`, see the module's text).
    ``bm``, ``bn``: the tile; ``b_box``: the rows of B's tensor-map box (K-major B);
    ``smem``: the dynamic shared memory a launch takes."""

    def __init__(self, dtype: str = "bf16", bias: str | None = None, act: str | None = None, group_m: int = 8,
                 epilogue=None, extras: tuple = (), b_major: str = "K", with_c: bool = False, out: str | None = None,
                 amax: bool = False, schedule: str = "pingpong", fp8_tma: bool = False):
        if dtype not in TYPES:  # (checked first: the output's default depends on it)
            raise ValueError(f"FusedConfig: dtype must be one of {TYPES}; got {dtype!r}")
        if bias not in BIASES:
            raise ValueError(f"FusedConfig: bias must be one of {BIASES}; got {bias!r}")
        if act is not None:
            activation(act)  # a ValueError naming the choices
        if not isinstance(group_m, int) or group_m < 1:
            raise ValueError(f"FusedConfig: group_m must be a positive integer; got {group_m!r}")
        extras = tuple(extras)
        if len(extras) > MAX_EXTRAS or any(e not in EXTRA_KINDS for e in extras):
            raise ValueError(f"FusedConfig: extras must be up to {MAX_EXTRAS} of {EXTRA_KINDS}; got {extras!r}")
        if extras and epilogue is None:
            raise ValueError("FusedConfig: extras are the arguments of an epilogue function; got no epilogue")
        self.dtype, self.bias, self.act, self.group_m = dtype, bias, act, group_m
        if b_major not in ("K", "MN"):
            raise ValueError(f"FusedConfig: b_major must be 'K' (B [N, K], K contiguous) or 'MN' (B [K, N], N "
                             f"contiguous); got {b_major!r}")
        self.epilogue, self.extras, self.b_major, self.with_c = epilogue, extras, b_major, bool(with_c)
        fp8_in = dtype not in OUTS_16
        out = ("bf16" if fp8_in else dtype) if out is None else out
        outs = (OUTS_16 if fp8_in else (dtype,)) + FP8_OUTS
        if out not in outs:
            raise ValueError(f"FusedConfig: out must be one of {outs} for {dtype} inputs; got {out!r}")
        if fp8_in and b_major != "K":
            raise ValueError("FusedConfig: fp8 inputs need B [N, K] with K contiguous (b_major='K'): the fp8 wgmma "
                             "has no transpose")
        if amax and out not in FP8_OUTS:
            raise ValueError("FusedConfig: amax goes with an fp8 out so far")
        if fp8_tma and out not in FP8_OUTS:
            raise ValueError("FusedConfig: fp8_tma (fp8 codes stored through TMA) goes with an fp8 out")
        self.out, self.amax, self.fp8_tma = out, bool(amax), bool(fp8_tma)
        if schedule not in SCHEDULES:
            raise ValueError(f"FusedConfig: schedule must be one of {tuple(SCHEDULES)}; got {schedule!r}")
        if schedule == "epilogue_warps" and (out not in OUTS_16 or act is None or epilogue is not None):
            raise ValueError("FusedConfig: the epilogue_warps schedule takes a 16-bit out with an activation and no "
                             f"user epilogue; got out={out!r}, act={act!r}, epilogue={epilogue!r}")
        self.schedule = schedule
        self.bm, self.bn, self.stages, self.stage_bytes = SCHEDULES[schedule]
        self.b_box = self.bn
        self.c_off = self.stages * self.stage_bytes
        self.smem = dynamic_smem_bytes(self.c_off + (self.bm * self.bn * 2 if schedule == "epilogue_warps"
                                                     else 4 * C_PART))
        self.bk = ROW // (1 if fp8_in else 2)  # K elements per stage
        self.sched = TileScheduler(self.bm, self.bn, self.bk, group_m=group_m)

    def key(self):
        return (self.dtype, self.bias, self.act, self.group_m, self.epilogue, self.extras, self.b_major, self.with_c,
                self.out, self.amax, self.schedule, self.fp8_tma)

    def grid(self, m: int, n: int, k: int, sms: int) -> int:
        """CTAs of the persistent grid on a GPU of ``sms`` SMs (ping-pong: a pair of tiles per CTA)."""
        return self.sched.grid(m, n, k, sms, at_once=2 if self.schedule in PINGPONG else 1)

    def __repr__(self):
        return (f"FusedConfig({self.dtype}, bias={self.bias}, act={self.act}, group_m={self.group_m}, out={self.out}, "
                f"amax={self.amax}, schedule={self.schedule}{', fp8 through TMA' if self.fp8_tma else ''})")


@inlined
def _identity(v):
    return v


def _epilogue(cfg, act):
    """The device function the kernel calls per 64 x 64 part, ``(acc, ct, row0, col0, vec, m,
    n, alpha, e0, e1, e2, e3, cmat, beta) -> packed registers``, generated for ``cfg``: with C,
    the part's C values (``acc_load``) are added to the scaled accumulator first; the scalar
    function mapped by ``acc_map`` (which takes column vectors, row vectors, then pass-through
    arguments) calls the user's function with its extras in its own order."""
    cols = ["b"] if cfg.bias == "col" else []
    rows = ["b"] if cfg.bias == "row" else []
    user = [f"x{i}" for i in range(len(cfg.extras))]
    for name, kind in zip(user, cfg.extras):
        (cols if kind == "col" else rows if kind == "row" else []).append(name)
    scalars = [x for x, kind in zip(user, cfg.extras) if kind == "scalar"]
    passed = ["alpha"] + scalars
    params = ", ".join(["v", "row", "col"] + cols + rows + passed)
    x = "v * alpha" + (" + b" if cfg.bias else "")
    body = f"f({x})" if cfg.epilogue is None else f"u(f({x}), row, col{''.join(', ' + a for a in user)})"
    src = [f"def value({params}):", f"    return {body}"]
    ns = {"f": activation(act) if act else _identity, "u": cfg.epilogue, "acc_load": acc_load,
          "acc_add": acc_add, "acc_scale": acc_scale, "ONE": np.float32(1.0)}
    exec(compile("\n".join(src), "<nbwgmma.kernels.fused epilogue>", "exec"), ns)
    value = inlined(ns["value"])

    def sliced(name, kind):
        arr = "vec" if name == "b" else "e" + name[1:]
        return f"{arr}[col0:n]" if kind == "col" else f"{arr}[row0:m]"

    args = [sliced(c, "col") for c in cols] + [sliced(r, "row") for r in rows]
    args += ["ONE" if cfg.with_c else "alpha"] + ["e" + x[1:] for x in scalars]  # with C, alpha is applied first
    pack = cfg.out if cfg.out in OUTS_16 else None  # fp8 out: f32 values, scaled and converted by the store
    ns["part"] = acc_map(value, 64, cols=len(cols), rows=len(rows), nextra=len(passed), pack=pack)
    # beta * C: the part's C values (acc_load) added to the scaled accumulator before the map
    acc = (f"acc_add(acc_scale(acc, alpha), acc_scale(acc_load('{KIND_OF[cfg.dtype]}', 64, cmat, ct, row0, col0), "
           f"beta))")
    src = ["def epilogue(acc, ct, row0, col0, vec, m, n, alpha, e0, e1, e2, e3, cmat, beta):",
           f"    return part({acc if cfg.with_c else 'acc'}, ct, row0, col0, {', '.join(args)})"]
    exec(compile("\n".join(src), "<nbwgmma.kernels.fused parts>", "exec"), ns)
    return inlined(ns["epilogue"])


def _output(cfg):
    """``store(part, buf, ct, cw, tmap_c, row0, col0, cout, scale_out, m, n, big) -> big`` and
    ``finish(big, amax)`` for ``cfg``'s output: 16-bit parts through shared memory and TMA
    (``tma_store_part``); fp8 parts scaled and stored as codes (``acc_store_fp8``, or with
    ``fp8_tma`` through a 64B-swizzled shared block and a TMA store), with amax the running
    largest |value| inside C, then one atomic max per warp."""
    if cfg.out not in FP8_OUTS:
        @inlined
        def store(part, buf, ct, cw, tmap_c, row0, col0, cout, scale_out, m, n, big):
            tma_store_part(part, buf, ct, cw, tmap_c, col0, row0)
            return big

        @inlined
        def finish(big, amax):
            pass

        return store, finish
    fmt, kind = cfg.out, KIND_OF[cfg.dtype]
    # |value| of each of the part's 32 values that lies inside C (the tile's rows past M and
    # columns past N hold epilogue results of padding: a bias, an activation of zero). The
    # coordinates are kit.value_coords's, with the thread's base computed once: calling
    # value_coords per value spilled 1316 bytes here instead of 240.
    # A part inside C (all but the last tile row and column) takes no compare per value.
    lines = ["def largest(v, ct, row0, col0, m, n, big):",
             "    if row0 + 64 <= m and col0 + 64 <= n:"]
    lines += [f"        big = max(big, abs(v[{i}]))" for i in range(32)]
    lines += ["        return big",
              "    r = row0 + ct // 32 * 16 + ct % 32 // 4", "    c = col0 + ct % 4 * 2"]
    for i in range(32):
        dr, dc = 8 * ((i // 2) % 2), 8 * (i // 4) + i % 2
        lines.append(f"    if r + {dr} < m and c + {dc} < n:")
        lines.append(f"        big = max(big, abs(v[{i}]))")
    lines.append("    return big")
    ns = {}
    exec(compile("\n".join(lines), "<nbwgmma.kernels.fused amax>", "exec"), ns)
    largest = inlined(ns["largest"])
    track = cfg.amax
    TMA = cfg.fp8_tma

    @inlined
    def store(part, buf, ct, cw, tmap_c, row0, col0, cout, scale_out, m, n, big):
        if TMA:  # as tma_store_part: two blocks in turn, each store overlapping the next part
            acc_store_fp8_swizzled(acc_scale(part, scale_out), buf, ct, 64, "64B", fmt)
            tma_store_block(buf, ct, cw, tmap_c, col0, row0)
        else:
            acc_store_fp8(acc_scale(part, scale_out), kind, cout, ct, row0, col0, fmt)
        if track:
            big = largest(part, ct, row0, col0, m, n, big)
        return big

    @inlined
    def finish(big, amax):
        if track:
            for off in (16, 8, 4, 2, 1):
                big = max(big, cuda.shfl_xor_sync(0xFFFFFFFF, big, off))
            if cuda.laneid == 0:
                cuda.atomic.max(amax, 0, big)

    return store, finish


def fused_kernel(cfg: FusedConfig):
    """The ``@cuda.jit`` kernel of ``cfg`` (built once per configuration). Its arguments:
    ``(tmap_a, tmap_b, tmap_c, vec, m, n, k, alpha, e0, e1, e2, e3, cmat, beta, cout, scale_out,
    amax)``: tensor-map addresses of A [M, K] (box 128 rows x 128 bytes: 64 K of 16-bit inputs,
    128 of fp8), B [N, K] (box ``cfg.b_box`` rows x 128 bytes; with ``b_major="MN"`` B [K, N],
    box 64 x 64) and C [M, N] (box 64 x 64), all with the 128-byte swizzle; ``vec`` the f32 bias (any f32 array where
    there is none); int32 sizes; f32 ``alpha``; the user epilogue's extras (1-D f32 vectors
    whole, or f32 scalars; an f32 zero in the slots it does not use); ``cmat`` C as a 2-D array
    (bf16 as uint16 bits; any 2-D array without C) and f32 ``beta``; with fp8 out, ``cout`` C
    as a 2-D uint8 array of fp8 codes (``tmap_c`` unused), f32 ``scale_out`` and ``amax`` a
    one-element f32 array (any of each otherwise). Launch it with :data:`THREADS` threads,
    ``cfg.smem`` bytes of dynamic shared memory and ``cfg.grid(...)`` CTAs."""
    return _build(cfg.key())


@functools.lru_cache(maxsize=None)
def _build(key):
    cfg = FusedConfig(*key)
    C_OFF = cfg.c_off
    sched = cfg.sched
    EW = cfg.schedule == "epilogue_warps"
    epilogue = _epilogue(cfg, None if EW else cfg.act)  # with epilogue warps the activation is theirs
    # setmaxnreg: 40 + 2 x 232 of the 504 registers per thread slot; the epilogue warps' loop
    # needs 48 (at 40 ptxas spilled 52 bytes around it), which leaves the consumers 224; ping-pong
    # consumers of 128 x 192 tiles hold 192 accumulator registers: 24 + 2 x 240.
    PREGS, CREGS = (48, 224) if EW else (24, 240) if cfg.bn == 192 else (40, 232)
    store, finish = _output(cfg)

    @cuda.jit(device=True, inline=True)
    def put(frag, buf, ct, cw, row, col, big, ea):
        """One 64 x 64 part of C: the epilogue of ``frag`` (its rows from ``row``, columns from
        ``col``), stored through the shared block ``buf``; ``ea`` the kernel's epilogue arguments."""
        tmap_c, vec, m, n, alpha, e0, e1, e2, e3, cmat, beta, cout, scale_out = ea
        p = epilogue(frag, ct, row, col, vec, m, n, alpha, e0, e1, e2, e3, cmat, beta)
        return store(p, buf, ct, cw, tmap_c, row, col, cout, scale_out, m, n, big)

    schedule = {"pingpong": _pingpong, "pingpong192": _pingpong, "cooperative": _cooperative,
                "epilogue_warps": _epilogue_warps}
    pipe, produce, consume, esetup, drain = schedule[cfg.schedule](cfg, put, epilogue)

    @cuda.jit(launch_bounds=(THREADS, 1))
    def fused_gemm(tmap_a, tmap_b, tmap_c, vec, m, n, k, alpha, e0, e1, e2, e3, cmat, beta, cout, scale_out, amax):
        base, ring = pipe.setup()  # stages' base (1 KiB aligned), the ring's barriers initialized
        ebar = esetup()  # the epilogue warps' barriers (0 without them)
        tid = cuda.threadIdx.x
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        if tid < 128:  # producer warpgroup: one thread keeps TMA busy
            setmaxnreg_dec(PREGS)
            if tid == 0:
                produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, (tmap_a, tmap_b))
            elif EW and tid >= 32:  # warps 1-3: the epilogue warps, if the schedule has them
                drain(ebar, base + C_OFF, tid - 32, nunits, tiles_mc, tiles_n, tmap_c)
        else:  # two consumer warpgroups
            setmaxnreg_inc(CREGS)
            cw, ct = tid // 128 - 1, tid % 128
            big = consume(ring, base, cw, ct, base + C_OFF, ebar, nunits, kblocks, tiles_mc, tiles_n,
                          (tmap_c, vec, m, n, alpha, e0, e1, e2, e3, cmat, beta, cout, scale_out))
            finish(big, amax)  # with amax: the largest |result| this thread stored
            if ct == 0:
                bulk_wait_group(0)

    return fused_gemm


@inlined
def _no_drain(ebar, cbase, ht, nunits, tiles_mc, tiles_n, tmap_c):
    pass


def _pingpong(cfg, put, epilogue):
    """``(pipe, produce, consume, esetup, drain)`` of the ping-pong schedules: each consumer warpgroup a whole
    128 x BN tile (BN 128 or 192), the two taking tiles in turn (pairs of adjacent tiles per CTA)."""
    KIND = KIND_OF[cfg.dtype]
    BK, BM, BN, STAGE = cfg.bk, cfg.bm, cfg.bn, cfg.stage_bytes
    pipe = TmaPipeline(cfg.stages, consumers=1)
    pp = PingPong(KIND, pipe, b_major=cfg.b_major, bn=BN)
    sched = cfg.sched

    @cuda.jit(device=True, inline=True)
    def load(slot, full, kb, tm, tn, maps):  # the producer's TMA loads of one stage
        tmap_a, tmap_b = maps
        pp.load(slot, full, tmap_a, tmap_b, kb * BK, tm * BM, tn * BN)

    @cuda.jit(device=True, inline=True)
    def put_cols(acc0, acc1, c0, c1, ct, cw, r0, col, big, ea):
        """64 columns of the tile: rows 0-63 (``acc0``'s part) then 64-127, the two shared blocks
        in turn."""
        big = put(acc0, c0, ct, cw, r0, col, big, ea)
        return put(acc1, c1, ct, cw, r0 + 64, col, big, ea)

    @cuda.jit(device=True, inline=True)
    def consume(ring, base, cw, ct, cbase, ebar, nunits, kblocks, tiles_mc, tiles_n, ea):
        c0 = cbase + cw * 2 * C_PART  # the warpgroup's two shared blocks of C
        c1 = c0 + C_PART
        s, ph = pp.start(cw, kblocks)
        big = np.float32(0.0)
        for u in range(2 * sched.first() + cw, nunits, 2 * sched.step()):  # tiles 2p + cw
            tm, tn = sched.tile(u, tiles_mc, tiles_n, 0)
            other_next = u + 1 if cw == 0 else u + 2 * sched.step() - 1  # the other's next tile
            acc0, acc1, s, ph = pp.tile(ring, base, s, ph, kblocks, ct, cw, u != 2 * sched.first(),
                                        other_next < nunits)
            r0, col = tm * BM, tn * BN
            if BN == 128:  # rows 0-63, then 64-127
                big = put(acc0[:32], c0, ct, cw, r0, col, big, ea)
                big = put(acc0[32:], c1, ct, cw, r0, col + 64, big, ea)
                big = put(acc1[:32], c0, ct, cw, r0 + 64, col, big, ea)
                big = put(acc1[32:], c1, ct, cw, r0 + 64, col + 64, big, ea)
            else:  # by columns (ptxas spilled less: a bias's values serve both rows, then die)
                big = put_cols(acc0[:32], acc1[:32], c0, c1, ct, cw, r0, col, big, ea)
                big = put_cols(acc0[32:64], acc1[32:64], c0, c1, ct, cw, r0, col + 64, big, ea)
                big = put_cols(acc0[64:], acc1[64:], c0, c1, ct, cw, r0, col + 128, big, ea)
        return big

    return pipe, tile_producer(pipe, sched, STAGE, load, pairs=True), consume, no_epilogue_warps, _no_drain


def _coop_ring(cfg):
    """``(pipe, coop, produce)`` of the schedules on :class:`~nbwgmma.kit.Cooperative`: the ring,
    the consumers' block and the producer thread's walk with its stage loads."""
    BK, BM, BN = cfg.bk, cfg.bm, cfg.bn
    pipe = TmaPipeline(cfg.stages, consumers=2)
    coop = Cooperative(KIND_OF[cfg.dtype], pipe, BM, BN, b_major=cfg.b_major)
    A_BYTES = coop.a_bytes

    @cuda.jit(device=True, inline=True)
    def load(slot, full, kb, tm, tn, maps):  # the producer's TMA loads of one stage
        tmap_a, tmap_b = maps
        coop.load(slot, full, tmap_a, tmap_b, kb * BK, tm * BM, tn * BN, A_BYTES)

    return pipe, coop, tile_producer(pipe, cfg.sched, coop.stage_bytes, load)


def _cooperative(cfg, put, epilogue):
    """``(pipe, produce, consume, esetup, drain)`` of the cooperative schedule: the two consumer warpgroups
    share each 128 x 256 tile, 64 rows each (:class:`~nbwgmma.kit.Cooperative`)."""
    BM, BN = cfg.bm, cfg.bn
    pipe, coop, produce = _coop_ring(cfg)
    sched = cfg.sched

    @cuda.jit(device=True, inline=True)
    def consume(ring, base, cw, ct, cbase, ebar, nunits, kblocks, tiles_mc, tiles_n, ea):
        c0 = cbase + cw * 2 * C_PART  # the warpgroup's two shared blocks of C
        c1 = c0 + C_PART
        s, ph = 0, 0
        big = np.float32(0.0)
        for u in range(sched.first(), nunits, sched.step()):
            tm, tn = sched.tile(u, tiles_mc, tiles_n, 0)
            acc, s, ph = coop.tile(ring, base, s, ph, 0, kblocks, cw, ct)
            r0, col = tm * BM + cw * 64, tn * BN
            big = put(acc[:32], c0, ct, cw, r0, col, big, ea)
            big = put(acc[32:64], c1, ct, cw, r0, col + 64, big, ea)
            big = put(acc[64:96], c0, ct, cw, r0, col + 128, big, ea)
            big = put(acc[96:], c1, ct, cw, r0, col + 192, big, ea)
        return big

    return pipe, produce, consume, no_epilogue_warps, _no_drain


def _epilogue_warps(cfg, put, epilogue):
    """``(pipe, produce, consume, esetup, drain)`` of the epilogue_warps schedule: the
    cooperative main loop; the consumers write the whole 16-bit tile (scale, bias, C added)
    into shared memory and go on, the epilogue warps apply the activation and store it."""
    BM, BN = cfg.bm, cfg.bn
    pipe, coop, produce = _coop_ring(cfg)
    ew = EpilogueWarps(activation(cfg.act), BM, BN, cfg.out)
    sched = cfg.sched

    @cuda.jit(device=True, inline=True)
    def consume(ring, base, cw, ct, cbase, ebar, nunits, kblocks, tiles_mc, tiles_n, ea):
        tmap_c, vec, m, n, alpha, e0, e1, e2, e3, cmat, beta, cout, scale_out = ea
        s, ph, eph = 0, 0, 0
        for u in range(sched.first(), nunits, sched.step()):
            tm, tn = sched.tile(u, tiles_mc, tiles_n, 0)
            acc, s, ph = coop.tile(ring, base, s, ph, 0, kblocks, cw, ct)
            r0, col = tm * BM + cw * 64, tn * BN
            p0 = epilogue(acc[:32], ct, r0, col, vec, m, n, alpha, e0, e1, e2, e3, cmat, beta)
            p1 = epilogue(acc[32:64], ct, r0, col + 64, vec, m, n, alpha, e0, e1, e2, e3, cmat, beta)
            p2 = epilogue(acc[64:96], ct, r0, col + 128, vec, m, n, alpha, e0, e1, e2, e3, cmat, beta)
            p3 = epilogue(acc[96:], ct, r0, col + 192, vec, m, n, alpha, e0, e1, e2, e3, cmat, beta)
            eph = ew.stage(p0 + p1 + p2 + p3, cbase, ebar, eph, cw, ct)  # once the previous tile is stored
        return np.float32(0.0)

    @cuda.jit(device=True, inline=True)
    def drain(ebar, cbase, ht, nunits, tiles_mc, tiles_n, tmap_c):
        eph = 0
        for u in range(sched.first(), nunits, sched.step()):
            tm, tn = sched.tile(u, tiles_mc, tiles_n, 0)
            eph = ew.drain(ebar, cbase, tmap_c, eph, ht, tm * BM, tn * BN)
        ew.finish(ht)

    return pipe, produce, consume, ew.setup, drain
