"""The block-scaled fp8 GEMM: ``C = alpha * sum_kb (A_kb @ B_kb^T) * sa[row, kb] * sb[nb, kb]``.

fp8 A [M, K] (K contiguous) times B [N, K] (K contiguous: the weight of ``x @ w.T``), e4m3
or e5m2 each, written with the kit: a persistent grid (:class:`~nbwgmma.kit.TileScheduler`,
tiles of 128 x 128 in grouped order; 128 x 64 for products of few tiles), one producer thread
streaming 128-K stages of 32 KiB through a ring of 6 (:class:`~nbwgmma.kit.TmaPipeline`), with
block scales whose rows are contiguous (``a_columns``) the producer warpgroup's other three warps
copying each stage's scales beside it (taking the stages in turn), and two consumer warpgroups
sharing each tile (:class:`~nbwgmma.kit.BlockScaled`: the wgmma sums a 128-K block, the consumer
scales it and adds it into its f32 accumulator: promotion, every block, in registers). With ``bm=256`` the
tiles are 256 x 128 in a ring of 4 stages of 48 KiB, the TMA thread staging the scales (no
scale warps) and each consumer promoting its 64 rows of both 128-row halves; with ``bm=192`` they
are 192 x 128, three consumer warpgroups of 64 rows (512 threads), the scales staged the same
way, so each consumer's promotion hides behind two other consumers' wgmmas (with ``last_row``,
the last tile row walked after the others). With ``bn`` one of
:data:`~nbwgmma.kit.WIDE_COLS` the tiles are 128 rows by 144-176 columns (one temporary a
consumer, B's scales of the up to three 128-column blocks a tile spans staged by the scale
warps, C stored in two unswizzled halves): fewer tiles where 128-wide ones leave the SMs' last
round mostly idle. With ``strip`` the 256 x 128 tiles leave N's last block, at most 64 columns,
to 256 x 64 tiles two a unit (:class:`ScaledConfig`). With ``stream_k``
the CTAs share the tiles' k-blocks evenly (stream-K: every SM busy whatever the tile count)
and a :class:`~nbwgmma.kit.StreamFixup` sums the tiles they share.

Scales, chosen at compile time per side:

* A: ``"block"`` one per row and 128-K block (1 x 128), ``sa`` [M, ceil(K/128)]; ``"row"``
  one per row, ``sa`` [M, 1] (applied in the epilogue); None: only ``alpha``.
* B: ``"block"`` one per 128 x 128 block of the weight, ``sb`` [ceil(N/128), ceil(K/128)];
  ``"col"`` one per column of C, ``sb`` [1, N] (epilogue); None.

Either side's block scales make the kernel promote; with neither (``promote`` false) the
tensor cores accumulate the whole K (the fp8 fast path) and every scale goes in the
epilogue. ``promote=True`` without block scales keeps the accuracy of promotion for
per-tensor or rowwise scales.

The epilogue applies ``alpha`` and the row / column scales, then a bias (one per column or
per row, f32, f16 or bf16) and an activation where the configuration has them, and writes C:
bf16/f16 through
swizzled 64 x 64 shared blocks (two per consumer, one with staged scales) and TMA stores
(``"tma"``), or any type and strides straight from the registers (``"direct"``). TMA fills A's and B's tails with zeros,
so any M, N and K (with 16-byte aligned rows) works; a block scale past the end of K meets
zeros.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from ..errors import ConfigError
from ..intrinsics import (acc_stmatrix_swizzled, acc_store, acc_zeros, bulk_wait_group, bulk_wait_group_read,
                          griddep_launch_dependents, setmaxnreg_dec, setmaxnreg_inc)
from ..kit import (ACTIVATIONS, VECTOR_TYPES, WIDE_COLS, BlockScaled, StreamFixup, TileScheduler, TmaPipeline, acc_map,
                   activation, box_rows, box_rows_device, clear_rows, inlined, stream_range, stream_segment,
                   stream_walk, stream_whole_units, tile_producer, tma_store_block, tma_store_part, warpgroup_index,
                   warpgroup_sync)
from ..launch import H100_LIMITS, dynamic_smem_bytes

__all__ = ["ScaledConfig", "scaled_kernel", "strip_units", "A_SCALES", "B_SCALES", "OUTS", "THREADS"]

A_SCALES = (None, "row", "block")
B_SCALES = (None, "col", "block")
OUTS = ("bf16", "f16", "f32")
FP8 = ("e4m3", "e5m2")

BK = 128
STAGES = 6  # 32 KiB stages of 128 x 128 tiles (24 KiB of 128 x 64 ones)
TALL_STAGES = 4  # 48 KiB stages of 256-row tiles
# C leaves in 64-row parts (ScaledConfig.c_cols columns: 64 x 64 16-bit blocks, or half a wide tile)
# through blocks of shared memory, two per consumer taking the parts in turn; with staged block
# scales one per consumer (the parts through it in turn) and the scales' slots after them (two
# blocks per consumer would not fit beside the slots).
THREADS = 384  # (192-row tiles: 512, ScaledConfig.threads)
STATIC_SMEM = 1024  # bytes of static shared memory beside the dynamic (the ring's barriers, a flag)


def strip_units(m: int, n: int) -> int | None:
    """Units of an M x N product in a strip kernel (``ScaledConfig(strip=True)``): its 256 x 128
    whole tiles, then N's last block's 256 x 64 tiles two a unit; None where N's last block holds
    more than 64 columns, where the kernel runs whole tiles only. The kernel's walk counts them
    alike."""
    if not 0 < n % 128 <= 64:
        return None
    t256 = -(-m // 256)
    return t256 * (n // 128) + (t256 + 1) // 2


class ScaledConfig:
    """Compile-time choices of a block-scaled fp8 GEMM: ``a_type``/``b_type`` ("e4m3" or
    "e5m2"), ``out`` ("bf16", "f16", "f32"), the scale kinds ``a_scale`` (:data:`A_SCALES`)
    and ``b_scale`` (:data:`B_SCALES`), ``promote`` (None: where a side has block scales;
    True with none keeps per-tensor or rowwise products accurate over long K), ``epilogue``
    ("tma": 16-bit C row-major with 16-byte aligned rows; "direct": any), ``group_m``,
    ``a_columns`` (A's block scales with contiguous rows and 16-byte aligned columns, which the
    caller guarantees: staged beside each stage, :class:`~nbwgmma.kit.BlockScaled`), ``bm``
    (tile rows: 128, or 256 with ``a_columns`` and M a multiple of 4, which the caller
    guarantees: the TMA thread stages the scales, 4 stages of 48 KiB; or 192 likewise, with the
    "tma" epilogue and no stream-K: three consumer warpgroups, :attr:`threads` 512), ``bn`` (tile columns: 128,
    or 64 with 128 rows: twice the tiles where 128-wide ones would leave most SMs idle; or one of
    :data:`~nbwgmma.kit.WIDE_COLS` with 128 rows, ``a_columns`` and the "tma" epilogue, no
    stream-K: fewer, wider tiles where 128-wide ones leave the last round mostly idle, C stored in
    parts of :attr:`c_cols` columns; the B map's box, :attr:`b_box`, has ``bn`` rows), ``stream_k`` (the CTAs
    share the tiles' k-blocks evenly; the launch passes scratch of :meth:`workspace_floats` f32
    values and one int32 zero per tile), ``strip`` (256 x 128 tiles, the "tma" epilogue, no
    stream-K: where N's last 128-column block holds at most 64 columns, that block's tiles run 64
    wide, two 256 x 64 tiles a unit after the whole tiles, so a unit costs about what a whole tile
    does: 4096 x 2112 makes 264 units, 2 rounds on 132 SMs, where 128 x 128 tiles make 544 in 5;
    B's map box is then :attr:`b_box`, 64 rows, and a whole tile's B two boxes),
    ``bias`` ("col": one per column of C, "row": one per row, or None) of ``bias_type`` ("f32",
    "f16", or "bf16" as uint16 bits) and ``activation`` (one of
    :data:`~nbwgmma.kit.ACTIVATIONS` or None), applied after the scales."""

    def __init__(self, a_type: str = "e4m3", b_type: str = "e4m3", out: str = "bf16", a_scale: str | None = "block",
                 b_scale: str | None = "block", promote: bool | None = None, epilogue: str = "tma", group_m: int = 8,
                 a_columns: bool = False, bm: int = 128, bn: int = 128, stream_k: bool = False,
                 bias: str | None = None, bias_type: str = "f32", activation: str | None = None,
                 strip: bool = False, last_row: bool = False):
        for name, v, ok in (("a_type", a_type, FP8), ("b_type", b_type, FP8), ("out", out, OUTS),
                            ("a_scale", a_scale, A_SCALES), ("b_scale", b_scale, B_SCALES),
                            ("epilogue", epilogue, ("tma", "direct")), ("bias", bias, (None, "col", "row")),
                            ("bias_type", bias_type, VECTOR_TYPES), ("activation", activation,
                                                                     (None,) + tuple(sorted(ACTIVATIONS)))):
            if v not in ok:
                raise ConfigError(name, f"ScaledConfig: {name} must be one of {ok}; got {v!r}")
        blocks = a_scale == "block" or b_scale == "block"
        if promote is None:
            promote = blocks
        if blocks and not promote:
            raise ConfigError("promote", "ScaledConfig: block scales need promotion (each 128-K block has its own scale); "
                                         "got promote=False")
        if epilogue == "tma" and out == "f32":
            raise ConfigError("epilogue", "ScaledConfig: the 'tma' epilogue writes 16-bit C; got out='f32' (use 'direct')")
        if not isinstance(group_m, int) or group_m < 1:
            raise ConfigError("group_m", f"ScaledConfig: group_m must be a positive integer; got {group_m!r}")
        self.a_type, self.b_type, self.out = a_type, b_type, out
        self.a_scale, self.b_scale, self.promote = a_scale, b_scale, bool(promote)
        self.epilogue, self.group_m = epilogue, group_m
        self.a_columns = bool(a_columns) and a_scale == "block"
        if bm not in (128, 192, 256) or isinstance(bm, bool) or (bm != 128 and not self.a_columns) \
                or (bm == 192 and (stream_k or epilogue != "tma")):
            raise ConfigError("bm", f"ScaledConfig: bm must be 128, or 192 or 256 with A's block scales in columns "
                                    f"(a_scale='block', a_columns=True; 192: the 'tma' epilogue, no stream-K); got "
                                    f"bm={bm!r}, a_scale={a_scale!r}, a_columns={a_columns!r}, epilogue={epilogue!r}, "
                                    f"stream_k={stream_k!r}")
        #: a wide tile (bn one of WIDE_COLS)
        self.wide = wide = bn in WIDE_COLS
        if bn not in (64, 128) + WIDE_COLS or isinstance(bn, bool) or (bn != 128 and bm != 128) \
                or (wide and (not self.a_columns or epilogue != "tma" or stream_k)):
            raise ConfigError("bn", f"ScaledConfig: bn must be 128, 64 with bm=128, or one of {WIDE_COLS} with bm=128, A's "
                                    f"block scales in columns, the 'tma' epilogue and no stream-K; got bn={bn!r}, bm={bm!r}, "
                                    f"a_columns={a_columns!r}, epilogue={epilogue!r}, stream_k={stream_k!r}")
        self.bm, self.bn = bm, bn
        #: consumer warpgroups (three of 64 rows with 192-row tiles) and threads a CTA
        self.consumers = 3 if bm == 192 else 2
        self.threads = 128 * (1 + self.consumers)
        self.stream_k = bool(stream_k)
        #: 256 x 128 tiles whose N leaves a last block of at most 64 columns: that block's tiles
        #: 64 wide, two a unit, after the whole tiles
        self.strip = bool(strip)
        if self.strip and (bm != 256 or bn != 128 or self.stream_k or epilogue != "tma"):
            raise ConfigError("strip", f"ScaledConfig: strip takes 256 x 128 tiles (bm=256, bn=128), the 'tma' "
                                       f"epilogue and no stream-K; got bm={bm!r}, bn={bn!r}, epilogue={epilogue!r}, "
                                       f"stream_k={stream_k!r}")
        #: B's map box: (bn, 128), or (64, 128) with ``strip`` (a whole tile's B in two boxes)
        self.b_box = (64 if self.strip else bn, BK)
        self.bias, self.bias_type, self.activation = bias, (bias_type if bias else "f32"), activation
        self.kind = f"f32.{a_type}.{b_type}"
        #: 192-row tiles with the last tile row walked after the others (TileScheduler's
        #: ``last_row``): where M leaves it at most 64 rows, its tiles are light (the warpgroups
        #: past M skip their wgmmas) and fill the last round
        self.last_row = bool(last_row)
        if not isinstance(last_row, (bool, np.bool_)) or (self.last_row and bm != 192):
            raise ConfigError("last_row", f"ScaledConfig: last_row must be a bool, True only with bm=192; got "
                                          f"last_row={last_row!r}, bm={bm!r}")
        self.sched = TileScheduler(bm, bn, BK, group_m=group_m, last_row=self.last_row)
        #: columns of each part of C the "tma" epilogue stores: 64 (128B-swizzled blocks), or half a wide
        #: tile (unswizzled rows, one box a part)
        self.c_cols = bn // 2 if wide else 64
        #: the C map's swizzle ((64, c_cols) boxes)
        self.c_swizzle = "128B" if self.c_cols == 64 else "none"
        self.c_part = 64 * self.c_cols * 2
        # smem: the stages, the C blocks (two per consumer; one with staged scales), the scales' slots
        self.stage_bytes = (bm + bn) * BK
        self.stages = STAGES if bm == 128 and not wide else TALL_STAGES
        room = H100_LIMITS["max_smem_optin"] - STATIC_SMEM
        while (wide and self.stages < STAGES or bn == 64) and self._smem(self.stages + 1) <= room:
            self.stages += 1  # (wide tiles: as many as fit, 5 at 176 columns; 128 x 64 tiles: 8)
        self.c_off = self.stages * self.stage_bytes
        self.s_off = self.c_off + self.consumers * self.c_part
        #: dynamic shared memory to launch with
        self.smem = self._smem(self.stages)

    def _smem(self, stages):
        c_off = stages * self.stage_bytes
        slots = c_off + (3 if self.bm == 192 else 2) * self.c_part + stages * (4 * self.bm + 128)  # (wide, 192: staged)
        return dynamic_smem_bytes(slots if self.wide or self.bm == 192 else max(c_off + 4 * self.c_part, slots))

    def a_box(self, m: int) -> tuple:
        """The box of A's tensor map for ``m`` rows: (:func:`~nbwgmma.kit.box_rows` rows, 128) with
        128-row tiles (a decoding product's few rows alone: the kernel expects those bytes), (128,
        128) with 256-row ones."""
        return (box_rows(m, 128) if self.bm == 128 else 128 if self.bm == 256 else 192, BK)

    def key(self):
        return (self.a_type, self.b_type, self.out, self.a_scale, self.b_scale, self.promote, self.epilogue,
                self.group_m, self.a_columns, self.bm, self.bn, self.stream_k, self.bias, self.bias_type,
                self.activation, self.strip, self.last_row)

    def units(self, m: int, n: int) -> int:
        """Tiles of an M x N product (with ``strip``: the whole tiles, then the last column's
        64-wide tiles two a unit)."""
        strip = strip_units(m, n) if self.strip else None
        return strip if strip is not None else -(-m // self.bm) * -(-n // self.bn)

    def grid(self, m: int, n: int, k: int, sms: int) -> int:
        """CTAs of the persistent grid on a GPU of ``sms`` SMs (one tile at a time per CTA;
        stream-K: one per SM, at most one per k-block)."""
        if self.stream_k:
            return max(1, min(sms, self.sched.units(m, n, k) * -(-k // BK)))
        return max(1, min(sms, self.units(m, n)))

    def workspace_floats(self, ctas: int) -> int:
        """f32 scratch values a stream-K launch of ``ctas`` CTAs parks its partial tiles in
        (two tiles per CTA)."""
        return 2 * ctas * self.bm * self.bn

    def __repr__(self):
        return (f"ScaledConfig({self.kind} -> {self.out}, a_scale={self.a_scale}, b_scale={self.b_scale}, "
                f"promote={self.promote}, epilogue={self.epilogue}, tile={self.bm}x{self.bn}"
                f"{', stream_k' if self.stream_k else ''}{', strip' if self.strip else ''}"
                f"{', last_row' if self.last_row else ''})")


def _epilogue(cfg: ScaledConfig):
    """``(acc, ct, row0, col0, sa, sb, m, n, alpha, bias) -> fragment`` of one 64-row part
    (``cfg.c_cols`` columns for the "tma" epilogue, else the tile's width): ``alpha`` times the
    row scale (A "row") and the column scale (B "col"), plus the bias, through the activation,
    packed to 16-bit pairs for the "tma" epilogue."""
    rows, cols = cfg.a_scale == "row", cfg.b_scale == "col"
    bcol, brow = cfg.bias == "col", cfg.bias == "row"
    # the vectors acc_map reads per column, then per row: their values' names, the arrays' slices, types
    vecs = [("cb", "sb[0, col0:n]", "f32")] * cols + [("bc", "bias[col0:n]", cfg.bias_type)] * bcol \
        + [("ra", "sa[row0:m, 0]", "f32")] * rows + [("br", "bias[row0:m]", cfg.bias_type)] * brow
    params = ["v", "row", "col"] + [v[0] for v in vecs] + ["alpha"]
    body = "v * alpha" + (" * ra" if rows else "") + (" * cb" if cols else "") + (" + bc" if bcol else "") \
        + (" + br" if brow else "")
    ns: dict = {"act": activation(cfg.activation, cfg.out) if cfg.activation else None}
    if cfg.activation:
        body = f"act({body})"
    exec(compile(f"def value({', '.join(params)}):\n    return {body}\n", "<nbwgmma.kernels.scaled value>", "exec"),
         ns)
    value = inlined(ns["value"])
    tma = cfg.epilogue == "tma"
    ns["part"] = acc_map(value, cfg.c_cols if tma else cfg.bn, cols=int(cols) + int(bcol), rows=int(rows) + int(brow),
                         nextra=1, pack=cfg.out if tma else None, vtype=tuple(v[2] for v in vecs) or "f32")
    args = [v[1] for v in vecs] + ["alpha"]
    src = f"def epilogue(acc, ct, row0, col0, sa, sb, m, n, alpha, bias):\n    return part(acc, ct, row0, col0, " \
          f"{', '.join(args)})\n"
    exec(compile(src, "<nbwgmma.kernels.scaled epilogue>", "exec"), ns)
    return inlined(ns["epilogue"])


def scaled_kernel(cfg: ScaledConfig):
    """The ``@cuda.jit`` kernel of ``cfg`` (built once per configuration). Its arguments:
    ``(tmap_a, tmap_b, tmap_c, c, sa, sb, m, n, k, alpha, ws, counters, bias)``: tensor-map addresses of A [M, K]
    and B [N, K] (fp8, boxes of ``cfg.a_box(m)`` and ``cfg.b_box``, 128-byte swizzle) and, for the "tma" epilogue, of C
    [M, N] (box 64 x 64; 0 otherwise); ``c`` C as a 2-D array for the "direct" epilogue (bf16
    as uint16 bits; any 2-D array otherwise); ``sa`` and ``sb`` the 2-D f32 scales of the
    module docstring (any strides; a stand-in where a side has none); int32 sizes; f32
    ``alpha``; ``ws`` (f32) and ``counters`` (int32, zeros) stream-K's scratch, 1-D (any
    stand-ins without ``stream_k``); ``bias`` the 1-D bias vector (of ``cfg.bias_type``;
    any 1-D stand-in without ``cfg.bias``). Launch it with ``cfg.threads`` threads (:data:`THREADS` but with
    192-row tiles), ``cfg.smem`` bytes of dynamic shared
    memory and ``cfg.grid(...)`` CTAs."""
    return _build(cfg.key())


@functools.lru_cache(maxsize=None)
def _build(key):
    cfg = ScaledConfig(*key)
    # Block scales are staged with the stage (scale warps, cp.async) where A's are column vectors,
    # else the consumers read them from global memory (direct: faster for row-major A scales).
    staged = cfg.a_columns
    direct = (cfg.a_scale == "block" or cfg.b_scale == "block") and not staged
    TALL = cfg.bm == 256  # one temporary per consumer for the stage's two 128-row waves
    TRIO = cfg.bm == 192  # three consumers of 64 rows, one temporary each
    TMA_SCALES = TALL or TRIO  # the TMA thread stages the scales (no scale warps)
    NTHREADS = cfg.threads
    B_BLOCK = cfg.b_scale == "block"
    ONE = np.float32(1.0)
    pipe = TmaPipeline(cfg.stages, consumers=128 * cfg.consumers if staged else 2,
                       producers=BlockScaled.PRODUCERS if staged and not TMA_SCALES else 1)
    # Promotion keeps three 64-register fragments per consumer thread (the sum and two blocks in
    # turn; 256-row tiles: two sums and one block). 168 x 384 registers are allocated at launch,
    # so 128 x PREGS + 256 x CREGS must fit: the scale warps need 40, which leaves the consumers
    # 232; promoting without them, 24 and 240; the fast path (one fragment) 40 and 232.
    # (256 rows: 240 measured faster than 232)
    # (wide tiles: a sum and one temporary of up to 96 registers; the scale warps need more than 40)
    # (192 rows: 512 threads, 128 x 24 + 384 x 160 of the 64 K; a sum and a temporary a consumer)
    PREGS, CREGS = (24, 160) if TRIO else (24, 240) if cfg.promote and (not staged or TALL) \
        else (56, 224) if cfg.wide else (40, 232)
    bs = BlockScaled(cfg.kind, pipe, a_block=cfg.a_scale == "block", b_block=cfg.b_scale == "block",
                     promote=cfg.promote, a_columns=staged, rows=cfg.bm, cols=cfg.bn, b_box=cfg.b_box[0])
    STRIP = cfg.strip
    # the strip's 256 x 64 tiles: in the same ring (a stage's B half filled)
    bs64 = BlockScaled(cfg.kind, pipe, a_block=cfg.a_scale == "block", b_block=cfg.b_scale == "block",
                       promote=cfg.promote, a_columns=staged, rows=cfg.bm, cols=64, stride=bs.stage_bytes) \
        if STRIP else bs
    BM, BN, STAGE, C_OFF, S_OFF, NSTAGES = cfg.bm, cfg.bn, cfg.stage_bytes, cfg.c_off, cfg.s_off, cfg.stages
    WIDE = cfg.wide
    CC, C_BYTES, SWIZZLED_C = cfg.c_cols, cfg.c_part, cfg.c_swizzle == "128B"
    ROW_C, NPARTS = 2 * cfg.c_cols, cfg.bn // cfg.c_cols
    H, H2 = cfg.c_cols // 2, cfg.c_cols  # a part's values per thread; twice that (static slices)
    sched = cfg.sched
    epilogue = _epilogue(cfg)
    TMA = cfg.epilogue == "tma"
    KIND = cfg.kind
    NSW = BlockScaled.SCALE_WARPS

    @cuda.jit(device=True, inline=True)
    def load(slot, full, kb, tm, tn, maps):  # the producer's TMA loads of one stage
        bs.load(slot, full, maps[0], maps[1], kb * BK, tm * BM, tn * BN)

    @cuda.jit(device=True, inline=True)
    def stage_tx(maps):  # A's box of kit.box_rows rows, B's
        return maps[2]

    STREAM = cfg.stream_k
    produce = tile_producer(pipe, sched, STAGE, load, stream=STREAM, stage_tx=stage_tx)
    fix = StreamFixup(KIND, BN, fragments=2 if TALL else 1)  # (stream-K only)

    def filler(b):
        @cuda.jit(device=True, inline=True)
        def fill_tile(ring, base, sbase, s, ph, tmap_a, tmap_b, sa, sb, m, tm, tn, kb0, kb1):
            """256 rows: the TMA thread's fills of k-blocks ``kb0 .. kb1 - 1`` of tile (tm, tn)."""
            sbr = sb[(tn * BN) >> 7 if B_BLOCK else 0]  # B's scale row: its 128-column block
            nxt = sbr[kb0] if B_BLOCK else ONE
            for kb in range(kb0, kb1):
                sc = nxt
                if B_BLOCK and kb + 1 < kb1:  # a fill ahead
                    nxt = sbr[kb + 1]
                b.fill(ring, base, sbase, s, ph, tmap_a, tmap_b, sa, sc, m, kb, tm * BM, tn * BN)
                s, ph = pipe.advance(s, ph)
            return s, ph
        return fill_tile

    fill_tile, fill_tile64 = filler(bs), filler(bs64)

    @cuda.jit(device=True, inline=True)
    def put_tile(ring, sbase, s, ph, turn, w, lane, sa, sb, m, tm, tn, kb0, kb1):
        """Scale warp ``w``'s turns among the fills of k-blocks ``kb0 .. kb1 - 1`` of tile (tm, tn)."""
        nb = (tn * BN) >> 7 if B_BLOCK else 0
        if WIDE and B_BLOCK:  # lane l copies the scale of the tile's (l % 4)-th block (clamped inside sb)
            nb = min(nb + (lane & 3), sb.shape[0] - 1)
        rows, sbr = bs.scale_rows(sa, tm * BM, m, lane), sb[nb]
        for kb in range(kb0, kb1):
            if turn == w:
                bs.put_scales(ring, sbase, s, ph, lane, rows, sbr, kb)
            turn = 0 if turn == NSW - 1 else turn + 1
            s, ph = pipe.advance(s, ph)
        return s, ph, turn

    # A consumer's fragments of k-blocks kb0 .. kb1 - 1 of a tile, as a tuple (two with 256 rows)
    if TALL:
        @cuda.jit(device=True, inline=True)
        def consume(ring, base, sbase, s, ph, kb0, kb1, ct, cw, sa, sb, r0, tn, m):
            acc0, acc1, s, ph = bs.tile_tall(ring, base, sbase, s, ph, kb1 - kb0, ct, cw)
            return (acc0, acc1), s, ph

        @cuda.jit(device=True, inline=True)
        def consume64(ring, base, sbase, s, ph, kblocks, ct, cw):  # a strip's 256 x 64 tile
            acc0, acc1, s, ph = bs64.tile_tall(ring, base, sbase, s, ph, kblocks, ct, cw)
            return (acc0, acc1), s, ph
    elif direct:
        @cuda.jit(device=True, inline=True)
        def consume(ring, base, sbase, s, ph, kb0, kb1, ct, cw, sa, sb, r0, tn, m):
            lr = ((ct >> 5) << 4) + ((ct >> 2) & 7)  # the thread's first row in its 64 (fragment layout)
            ra0 = min(r0 + lr, m - 1)  # scale rows inside A (rows past M hold zeros)
            ra1 = min(r0 + lr + 8, m - 1)
            nb = (tn * BN) >> 7 if B_BLOCK else 0  # B's scale row (column scales: the epilogue's)
            if STREAM:  # the scales from k-block kb0
                acc, s, ph = bs.tile_direct(ring, base, s, ph, kb1 - kb0, ct, cw, sa[:, kb0:], sb[:, kb0:], ra0, ra1,
                                            nb)
            else:
                acc, s, ph = bs.tile_direct(ring, base, s, ph, kb1 - kb0, ct, cw, sa, sb, ra0, ra1, nb)
            return (acc,), s, ph
    elif TRIO:
        @cuda.jit(device=True, inline=True)
        def consume(ring, base, sbase, s, ph, kb0, kb1, ct, cw, sa, sb, r0, tn, m):
            acc, s, ph = bs.tile_trio(ring, base, sbase, s, ph, kb1 - kb0, ct, cw)
            return (acc,), s, ph
    elif WIDE:
        @cuda.jit(device=True, inline=True)
        def consume(ring, base, sbase, s, ph, kb0, kb1, ct, cw, sa, sb, r0, tn, m):
            acc, s, ph = bs.tile_wide(ring, base, sbase, s, ph, kb1 - kb0, ct, cw, (tn * BN) & 127)
            return (acc,), s, ph
    else:
        @cuda.jit(device=True, inline=True)
        def consume(ring, base, sbase, s, ph, kb0, kb1, ct, cw, sa, sb, r0, tn, m):
            acc, s, ph = bs.tile(ring, base, sbase, s, ph, kb1 - kb0, ct, cw)
            return (acc,), s, ph

    CP = 1 if staged else 2  # C blocks per consumer

    @inlined
    def half(p, cbuf, ct, cw, tmap_c, col, row):  # one 64 x CC part through a block of the warpgroup
        if CP == 1:  # one block: the previous part's store must have read it
            if ct == 0:
                bulk_wait_group_read(0)
            warpgroup_sync(cw)
        if SWIZZLED_C:
            tma_store_part(p, cbuf, ct, cw, tmap_c, col, row)
        else:  # whole unswizzled rows, one (64, CC) box
            acc_stmatrix_swizzled(p, cbuf, ct, ROW_C, "none")
            tma_store_block(cbuf, ct, cw, tmap_c, col, row)

    def putter(width):  # C's stores of a tile ``width`` columns wide
        NP = width // CC

        @inlined
        def store(acc, cbuf, ct, cw, tmap_c, c, sa, sb, r0, col0, m, n, alpha, bias):  # a consumer's 64 x width of C
            if TMA:  # the parts in turn through the warpgroup's one or two blocks
                half(epilogue(acc[:H], ct, r0, col0, sa, sb, m, n, alpha, bias), cbuf, ct, cw, tmap_c, col0, r0)
                if NP >= 2:
                    half(epilogue(acc[H:H2], ct, r0, col0 + CC, sa, sb, m, n, alpha, bias), cbuf + (CP - 1) * C_BYTES,
                         ct, cw, tmap_c, col0 + CC, r0)
            else:
                acc_store(epilogue(acc, ct, r0, col0, sa, sb, m, n, alpha, bias), KIND, c, ct, r0, col0)

        @cuda.jit(device=True, inline=True)
        def put(accs, cbuf, cb, ct, cw, tmap_c, c, sa, sb, r0, col0, m, n, alpha, bias):
            """A consumer's fragments of a tile to C (256 rows: the second 128-row half's after the
            first's); the C block the next tile's first part takes."""
            store(accs[0], cb, ct, cw, tmap_c, c, sa, sb, r0, col0, m, n, alpha, bias)
            if TALL:
                store(accs[1], cb, ct, cw, tmap_c, c, sa, sb, r0 + 128, col0, m, n, alpha, bias)
            if width == 64 and CP == 2:  # one part a tile: the two blocks take the tiles in turn
                cb = cbuf + C_BYTES if cb == cbuf else cbuf
            return cb
        return put

    put, put64 = putter(BN), putter(64) if STRIP else None

    # The producer roles walk the CTA's tiles with kit.stream_walk (stream-K: whole tiles in waves,
    # then its share of the rest's k-blocks): the TMA thread of 256-row tiles, the scale warps. The
    # consumers walk alike, written out: through stream_walk the 256-row tiles' consumer loop was
    # scheduled differently and ran 2-4% slower (an A/B on an H200).
    @cuda.jit(device=True, inline=True)
    def fill_whole(st, tm, tn, kblocks, a):
        ring, base, sbase, tmap_a, tmap_b, sa, sb, m = a
        return fill_tile(ring, base, sbase, st[0], st[1], tmap_a, tmap_b, sa, sb, m, tm, tn, 0, kblocks)

    @cuda.jit(device=True, inline=True)
    def fill_piece(st, t, tm, tn, kb0, kb1, kblocks, first, total, a):
        ring, base, sbase, tmap_a, tmap_b, sa, sb, m = a
        return fill_tile(ring, base, sbase, st[0], st[1], tmap_a, tmap_b, sa, sb, m, tm, tn, kb0, kb1)

    @cuda.jit(device=True, inline=True)
    def put_whole(st, tm, tn, kblocks, a):
        ring, sbase, w, lane, sa, sb, m = a
        return put_tile(ring, sbase, st[0], st[1], st[2], w, lane, sa, sb, m, tm, tn, 0, kblocks)

    @cuda.jit(device=True, inline=True)
    def put_piece(st, t, tm, tn, kb0, kb1, kblocks, first, total, a):
        ring, sbase, w, lane, sa, sb, m = a
        return put_tile(ring, sbase, st[0], st[1], st[2], w, lane, sa, sb, m, tm, tn, kb0, kb1)

    fill_walk = stream_walk(sched, fill_whole, fill_piece if STREAM else None)
    put_walk = stream_walk(sched, put_whole, put_piece if STREAM else None)

    @cuda.jit(device=True, inline=True)
    def strip_shape(n, tiles_m, tiles_n):
        """``(cols, nwhole, nunits)``: with a strip (``strip`` and N's last block at most 64
        columns), the whole tiles' columns, their units (first, in tile order over ``cols``
        columns) and all units (then the strip's 64-wide tiles, two a unit); else the tiles."""
        if STRIP and 0 < (n & 127) <= 64:
            return tiles_n - 1, tiles_m * (tiles_n - 1), tiles_m * (tiles_n - 1) + (tiles_m + 1) // 2
        return tiles_n, tiles_m * tiles_n, tiles_m * tiles_n

    @cuda.jit(device=True, inline=True)
    def fill_strip(ring, base, sbase, tmap_a, tmap_b, sa, sb, m, n, tiles_m, tiles_n, kblocks):
        """The TMA thread's fills of a strip kernel's units."""
        cols, nwhole, nall = strip_shape(n, tiles_m, tiles_n)
        s, ph = 0, 0
        for u in range(cuda.blockIdx.x, nall, cuda.gridDim.x):
            if u < nwhole:
                tm, tn = sched.tile(u, tiles_m, cols, 0)
                s, ph = fill_tile(ring, base, sbase, s, ph, tmap_a, tmap_b, sa, sb, m, tm, tn, 0, kblocks)
            else:
                tm = 2 * (u - nwhole)
                s, ph = fill_tile64(ring, base, sbase, s, ph, tmap_a, tmap_b, sa, sb, m, tm, cols, 0, kblocks)
                if tm + 1 < tiles_m:
                    s, ph = fill_tile64(ring, base, sbase, s, ph, tmap_a, tmap_b, sa, sb, m, tm + 1, cols, 0,
                                        kblocks)

    @cuda.jit(launch_bounds=(NTHREADS, 1))
    def scaled_gemm(tmap_a, tmap_b, tmap_c, c, sa, sb, m, n, k, alpha, ws, counters, bias):
        base, ring = pipe.setup()  # stages' base (1 KiB aligned), the ring's barriers initialized
        flag = cuda.shared.array(1, np.int32)  # (stream-K's fix-up)
        sbase = base + S_OFF
        tid = cuda.threadIdx.x
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        ar = box_rows_device(m, BM)  # A's box rows (the host's map: ScaledConfig.a_box)
        if not TMA_SCALES and ar < BM:  # M's rows alone: the slots' other rows of A cleared, by every thread, once
            clear_rows(base, STAGE, NSTAGES, BK, ar, BM, tid, NTHREADS)
            cuda.syncthreads()
        cta, ctas = cuda.blockIdx.x, cuda.gridDim.x
        # Stream-K: the CTAs take the first `whole` tiles whole, in waves, and share the rest's
        # `total` k-blocks evenly
        whole = stream_whole_units(nunits, ctas) if STREAM else nunits
        total = (nunits - whole) * kblocks
        if tid < 128:  # producer warpgroup: one thread keeps TMA busy; warps 1-3 (or, 256 rows, it) stage the scales
            setmaxnreg_dec(PREGS)
            if tid == 0 and STRIP:
                fill_strip(ring, base, sbase, tmap_a, tmap_b, sa, sb, m, n, tiles_m, tiles_n, kblocks)
                griddep_launch_dependents()
            elif tid == 0 and TMA_SCALES:  # the TMA thread fills the stages and their scales
                fill_walk((0, 0), nunits, kblocks, tiles_mc, tiles_n, (ring, base, sbase, tmap_a, tmap_b, sa, sb, m))
                griddep_launch_dependents()
            elif tid == 0:
                produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, (tmap_a, tmap_b, STAGE - (BM - ar) * BK))
            elif staged and not TMA_SCALES and 32 <= tid < 32 * (1 + NSW):  # the scale warps take the fills in turn
                put_walk((0, 0, 0), nunits, kblocks, tiles_mc, tiles_n,
                         (ring, sbase, tid // 32 - 1, tid % 32, sa, sb, m))
        else:  # two consumer warpgroups (three with 192-row tiles), 64 rows of each tile each
            setmaxnreg_inc(CREGS)
            # Staged scales: a warp-uniform index (kit.warpgroup_index), so the wgmma descriptors stay
            # in uniform registers (6-9% faster on an H200); stream-K's kernels (two loops and the
            # fix-up) spilled with it and ran 5% slower; the direct scale reads were not measured.
            cw, ct = (warpgroup_index() if staged and not STREAM else tid // 128) - 1, tid % 128
            cbuf = base + C_OFF + cw * CP * C_BYTES
            s, ph, cb = 0, 0, cbuf
            cols, nwhole, nall = strip_shape(n, tiles_m, tiles_n)  # (without a strip: tiles_n, whole, whole)
            for u in range(cta, nall if STRIP else whole, ctas):
                if STRIP and u >= nwhole:  # the strip's tiles, two a unit
                    tm = 2 * (u - nwhole)
                    for h in range(2):
                        r0 = (tm + h) * BM + cw * 64
                        if tm + h < tiles_m and r0 < m:
                            accs, s, ph = consume64(ring, base, sbase, s, ph, kblocks, ct, cw)
                            cb = put64(accs, cbuf, cb, ct, cw, tmap_c, c, sa, sb, r0, cols * BN, m, n, alpha, bias)
                        elif tm + h < tiles_m:
                            s, ph = bs.tile_skip(ring, s, ph, kblocks, ct)
                    continue
                tm, tn = sched.tile(u, tiles_mc, cols if STRIP else tiles_n, 0)
                r0, col0 = tm * BM + cw * 64, tn * BN
                if r0 < m:
                    accs, s, ph = consume(ring, base, sbase, s, ph, 0, kblocks, ct, cw, sa, sb, r0, tn, m)
                    cb = put(accs, cbuf, cb, ct, cw, tmap_c, c, sa, sb, r0, col0, m, n, alpha, bias)
                else:  # every row of the warpgroup's lies past M (decoding, M <= 64): the tensor cores left to the other
                    s, ph = bs.tile_skip(ring, s, ph, kblocks, ct)
            if STREAM:
                g0, g1 = stream_range(cta, ctas, total)
                g = g0
                while g < g1:
                    t, kb0, kb1 = stream_segment(g, g1, kblocks)  # (t counted from the first shared tile)
                    tm, tn = sched.tile(whole + t, tiles_mc, tiles_n, 0)
                    r0, col0 = tm * BM + cw * 64, tn * BN
                    if r0 < m or TALL:
                        accs, s, ph = consume(ring, base, sbase, s, ph, kb0, kb1, ct, cw, sa, sb, r0, tn, m)
                    else:  # rows all past M: the stages passed on unread, nothing parked or summed
                        s, ph = bs.tile_skip(ring, s, ph, kb1 - kb0, ct)
                        accs = (acc_zeros(KIND, BN),)
                    accs, last = fix.finish(accs, ws, counters, flag, tid, ct, cw, t, cta, ctas, total, kblocks,
                                            g == g0, kb0 == 0 and kb1 == kblocks, m - r0)
                    if last and r0 < m:
                        cb = put(accs, cbuf, cb, ct, cw, tmap_c, c, sa, sb, r0, col0, m, n, alpha, bias)
                    g += kb1 - kb0
            if TMA and ct == 0:
                bulk_wait_group(0)

    return scaled_gemm
