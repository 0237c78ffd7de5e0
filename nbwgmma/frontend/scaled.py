"""``matmul(a, b, scale_a=..., scale_b=...)`` with scales that are tensors: scaled fp8.

They run the block-scaled fp8 GEMM (:mod:`nbwgmma.kernels.scaled`). The product is
``out = alpha * (sa * A) @ (B * sb)`` with A [M, K] and B [K, N] fp8 (e4m3 or e5m2 each),
the scales f32 CUDA arrays on A's device (any strides) of these shapes (KB = ceil(K / 128),
NB = ceil(N / 128)):

============  ===========================================  =================================
side          shape                                        meaning
============  ===========================================  =================================
A, per row    (M,) or (M, 1)                               ``sa[m]`` scales row m of A
A, 1 x 128    (M, KB)                                      ``sa[m, kb]``: row m, K block kb
B, per col    (N,) or (1, N)                               ``sb[n]`` scales column n of B
B, 128 x 128  (KB, NB), as ``b`` = w.T is [K, N]            ``sb[kb, nb]``: a 128 x 128 block
B, 128 x 128  (NB, KB), the weight w [N, K]'s own order    ``sb[nb, kb]`` (not square, not (1, N))
either        a number, or an array of one element         per tensor (folded into alpha)
============  ===========================================  =================================

These are ``torch._scaled_mm``'s layouts: its rowwise scales ((M, 1) and (1, N)) and its
blockwise ones (scale_a (M, KB) with strides (1, M), scale_b (KB, NB) with strides (1, KB):
the transpose of a row-major (NB, KB) weight scale) are read as they are; so are row-major
ones. A square B scale (NB == KB) is read in ``b``'s order, [kb, nb], and one of shape (1, N)
is one scale per column, also where it is a weight's (NB, KB) (N at most 128 and KB == N): pass
a weight's (NB, KB) scale as its transpose ``sw.T`` (a view) and neither can be misread. Any 1 x 128 or 128 x 128 scale makes the
kernel promote each 128-K block into f32 (see the guide); rowwise and per-tensor scales alone
run the fp8 fast path (the tensor cores accumulate the whole K; ``promote=True`` in
:class:`~nbwgmma.kernels.scaled.ScaledConfig` keeps promotion's accuracy for them).

What the kernel takes so far: A row-major (K contiguous) and B the transpose of a row-major
weight (``x @ w.T``: K contiguous), each with 16-byte aligned rows (K a multiple of 16 for
contiguous operands); a ``bias`` (one per column or per row, f32, f16 or bf16) and an
``activation``, applied after the scales (``activation(alpha * product + bias)``), as the
plain ``matmul`` takes them; no user epilogue or C. Anything else is a
:class:`~nbwgmma.errors.MatmulError` (a :class:`~nbwgmma.errors.MatmulTypeError` for a wrong
type) raised before anything is launched; so is a scale of the wrong shape, type, layout
(negative or unaligned strides) or device.
"""

from __future__ import annotations

import functools

import numpy as np

from .. import sim
from ..capture import call_captured, calling, refuse_host_read
from ..errors import MatmulError, MatmulTypeError
from ..intrinsics.mbarrier import DEBUG_WAIT_TIMEOUT_S
from ..kernels.scaled import ScaledConfig, scaled_kernel, strip_units
from ..kit import SCALE_BLOCK, WIDE_COLS
from ..launch import array_arg_types, array_arg_values, device_limits
from .args import NP_OF, check_reads_apart, described, lib_of, output, real_arg, stand_in, stream_key, stream_of, stream_scratch, torch_dtype
from .arrays import ArrayInfo, numba_layout
from .fused import bias_operand, check_epilogue
from .views import numba_view, tensor_map, zero_fill

__all__ = ["is_tensor_scale", "scale_kinds", "scaled_matmul", "tall_tiles", "narrow_tiles", "stream_tiles",
           "wide_tiles", "strip_tiles", "QUICK", "quick_key", "ScaledQuick", "TALL_GAIN", "WIDE_EFF", "WIDE_GAIN", "STREAM_BELOW",
           "STRIP_GAIN"]

_SIM = sim.enabled()
_CONFIGS = {}
_SIM_SMS = 132  # the SMs tile choices assume under the simulator (an H100's), whatever runs it
_SIM_CTAS = 1  # CTAs of a launch under the simulator (it runs them one after the other)
_SCRATCH = {}  # (device, args.stream_key) -> stream-K's (partials, counters, their launch values), grown as asked
_RETIRED = []  # scratch outgrown on a stream
_LAUNCHERS = {}  # (configuration, grid, the arrays' layouts, device) -> PreparedLaunch
# the kernel's parameters as a prepared launch packs them: maps of A, B, C; C; the scales; m, n,
# k; alpha; stream-K's scratch and counters; the bias
_ARG_TYPES = ("u64",) * 3 + array_arg_types(2) * 3 + ("i32",) * 3 + ("f32",) + array_arg_types(1) * 3
#: How much faster a 256 x 128 tile runs than two 128 x 128 tiles (block-scaled, measured on an
#: H200 at 4096 x 7168 x 7168 and 4096 x 24576 x 1536: 1.066-1.075)
TALL_GAIN = 1.07


def _rounds(m: int, n: int, bm: int, bn: int, sms: int) -> int:
    """Rounds of ``bm`` x ``bn`` tiles an M x N product takes on ``sms`` SMs, one tile per SM at a
    time (the tile rules' model)."""
    return -(-(-(-m // bm) * -(-n // bn)) // sms)


def _whole_cost(m: int, n: int, sms: int) -> float:
    """The better of 128 x 128 and 256 x 128 tiles' rounds, in 128 x 128 tiles' time."""
    return min(_rounds(m, n, 128, 128, sms), 2 * _rounds(m, n, 256, 128, sms) / TALL_GAIN)


def _wide_cost(m: int, n: int, w: int, sms: int) -> float:
    """128 x ``w`` tiles' rounds (:data:`~nbwgmma.kit.WIDE_COLS`), in 128 x 128 tiles' time."""
    return _rounds(m, n, 128, w, sms) * w / 128 / WIDE_EFF


def tall_tiles(m: int, n: int, sms: int) -> bool:
    """Whether 256 x 128 tiles finish an M x N product of block-scaled fp8 sooner than 128 x 128
    tiles on ``sms`` SMs: rounds of tiles (one per SM at a time), a 256-row tile costing
    ``2 / TALL_GAIN`` of a 128-row one (4096 x 7168 on 132 SMs: 7 rounds against 14, taken;
    4096 x 2112: 3 against 5 and 128 x 7168: 1 against 1, not)."""
    return 2 * _rounds(m, n, 256, 128, sms) < TALL_GAIN * _rounds(m, n, 128, 128, sms)


#: Throughput per column of block-scaled 128-row tiles of :data:`~nbwgmma.kit.WIDE_COLS` columns
#: relative to 128 x 128 tiles (one temporary a consumer), from products whose rounds they cut
#: (measured on an H200: 0.75-0.86 at 144 columns; BENCHMARKS.md, 2026-11-29)
WIDE_EFF = 0.85
#: The least modeled gain a wide tile must bring (its rounds' cost against the best of 128 x 128 and
#: 256 x 128 tiles): 4096 x 2112 x 7168 in 128 x 176 tiles, modeled 1.03x, ran at 0.99x
WIDE_GAIN = 1.1


#: A 192 x 128 tile's time (three consumer warpgroups) relative to a 256 x 128 tile's (block-scaled,
#: measured on an H200 from products whose rounds both fill: 0.687-0.724; its promotion hides
#: behind two other warpgroups' wgmmas, where a 256-row tile's hides behind one)
TRIO_COST = 0.71
#: The least modeled gain 192-row tiles must bring over 128 x 128 and 256 x 128 ones (4224 x 5632
#: x 7168, modeled 1.036x against 128 x 128 tiles, ran at 0.98x; 8192 x 7168, 1.038x, at 1.03x)
TRIO_GAIN = 1.05


#: A tile of the last row holding at most 64 of M's rows (two of its three warpgroups past M, their
#: wgmmas skipped) in a whole 192-row tile's time (modeled: the one working warpgroup's promotion
#: has no other wgmmas to hide behind)
LIGHT = 0.5
#: The least modeled gain the last tile row walked last must bring (its tiles read B's columns from
#: DRAM again, the other rows' reads long done): measured on an H200 against the grouped walk,
#: 4096 x 14336 x 4096 (modeled 1.027x) 1.04x, 4096 x 7168 x 7168 (1.053x) 1.014x; with the last
#: row 128 rows high (not taken: two warpgroups working) 8192 x 7168 x 7168 0.985x, 2048 x 7168 x
#: 7168 0.984x
LAST_ROW_GAIN = 1.025
#: The whole tile rows that must come before a light last row for it to be walked last: measured
#: with 21 (M = 4096); with few the light row is much of the work and :data:`LIGHT` (a guess of its
#: cost) decides the choice, and no shape of so few rows was measured
LAST_ROW_AFTER = 16


@functools.lru_cache(maxsize=256)
def _last_row_rounds(m: int, n: int, sms: int) -> float | None:
    """192 x 128 tiles' rounds on ``sms`` SMs with the last tile row walked last, where it holds
    at most 64 of M's rows (its tiles :data:`LIGHT`) after at least :data:`LAST_ROW_AFTER` whole
    rows, else None: the most time any SM takes, in whole tiles' time (the CTAs take the tiles in
    turn)."""
    rest = m % 192
    if m < 192 * LAST_ROW_AFTER or not 0 < rest <= 64:
        return None
    cols = -(-n // 128)
    q, r = divmod(m // 192 * cols, sms)  # the other rows' tiles: q each, one more on the first r SMs
    lq, lr = divmod(cols, sms)  # the light tiles, from SM r on
    return max(q + (c < r) + LIGHT * (lq + ((c - r) % sms < lr)) for c in range(sms))


def last_row(m: int, n: int, sms: int) -> bool:
    """Whether 192 x 128 tiles walk the last tile row after the others (``ScaledConfig(last_row=
    True)``): where it holds at most 64 of M's rows and that cuts the rounds by
    :data:`LAST_ROW_GAIN`. On 132 SMs, 4096 x 14336: 18.5 rounds against 19; 4096 x 24576: not
    (31.5 against 32)."""
    light = _last_row_rounds(m, n, sms)
    return light is not None and light * LAST_ROW_GAIN <= _rounds(m, n, 192, 128, sms)


def trio_tiles(m: int, n: int, sms: int) -> bool:
    """Whether 192 x 128 tiles (``ScaledConfig(bm=192)``: three consumer warpgroups of 64 rows)
    finish an M x N product of block-scaled fp8 on ``sms`` SMs at least :data:`TRIO_GAIN` times
    sooner than 128 x 128 and 256 x 128 tiles: rounds of tiles (one per SM at a time), a 192-row
    tile costing :data:`TRIO_COST` of a 256-row one and a 128-row one ``TALL_GAIN / 2``. On 132
    SMs, 6144 x 7168: 14 rounds against 11 of 256 rows (1.11x modeled, 1.14x measured on an
    H200); 4096 x 7168: not (9.5 rounds, the last row of tiles a third full and walked last,
    against 7); 4096 x 14336: 18.5 against 14, taken (:func:`last_row`)."""
    r128 = _rounds(m, n, 128, 128, sms) * TALL_GAIN / 2
    r192 = (_last_row_rounds(m, n, sms) if last_row(m, n, sms) else _rounds(m, n, 192, 128, sms)) * TRIO_COST
    return r192 * TRIO_GAIN <= min(r128, _rounds(m, n, 256, 128, sms))


def wide_tiles(m: int, n: int, sms: int) -> int | None:
    """The width of :data:`~nbwgmma.kit.WIDE_COLS` whose 128-row tiles finish an M x N product of
    block-scaled fp8 on ``sms`` SMs at least :data:`WIDE_GAIN` times sooner than 128 x 128 and
    256 x 128 tiles, or None: rounds of tiles (one per SM at a time), a wide tile costing ``W /
    128 / WIDE_EFF`` of a 128 x 128 one, a 256-row one ``2 / TALL_GAIN``. On 132 SMs, 4096 x 576:
    144 (128 tiles in one round, against two rounds of 160 128 x 128 tiles; 1.24x measured on an
    H200); 4096 x 2112: none (3 rounds of 128 x 176 tiles against 5 of 128 x 128: 1.03x modeled)."""
    best = None
    cost = _whole_cost(m, n, sms)
    for w in WIDE_COLS:
        c = _wide_cost(m, n, w, sms)
        if c * WIDE_GAIN < cost:
            best, cost = w, c
    return best


#: The least modeled gain a strip kernel must bring over the best of the other tiles
STRIP_GAIN = 1.05


def strip_tiles(m: int, n: int, sms: int) -> bool:
    """Whether 256 x 128 tiles whose last column, N's last block of at most 64 columns, runs
    in 256 x 64 tiles two a unit (``ScaledConfig(strip=True)``) finish an M x N product of
    block-scaled fp8 on ``sms`` SMs at least :data:`STRIP_GAIN` times sooner than 128 x 128,
    256 x 128 and wide tiles: rounds of units (one per SM at a time), a unit costing ``2 /
    TALL_GAIN`` of a 128 x 128 tile. On 132 SMs, 4096 x 2112: 264 units in 2 rounds against 5
    rounds of 128 x 128 tiles (1.34x modeled); 1024 x 2112: not (1 round of 66 units against
    one of 120 tiles of 128 x 144)."""
    units = strip_units(m, n)
    if units is None or n < 128:
        return False
    cost = -(-units // sms) * 2 / TALL_GAIN
    best = _whole_cost(m, n, sms)
    w = wide_tiles(m, n, sms)
    if w:
        best = min(best, _wide_cost(m, n, w, sms))
    return cost * STRIP_GAIN < best


def narrow_tiles(m: int, n: int, sms: int) -> bool:
    """Whether 128 x 64 tiles serve an M x N product of block-scaled fp8 better than 128 x 128
    ones on ``sms`` SMs (asked for block scales only; rowwise products keep 128 x 128): where
    twice the 128 x 128 tiles still fit in one round. On an H200: 128 x 7168 x 7168 (56 tiles of
    128 columns, 112 of 64) 1.23x, 128 x 2112 x 7168 1.39x, 1 x 2112 x 7168 1.29x (256 x 7168 x
    7168, two rounds of 128 x 64 tiles, 0.76x); decoding products (M <= 64), since A's box holds
    only M's rows, 1.07-1.17x at 4 to 64 x 7168 x 7168 and 16 x 7168 x 2048 (before, when A's
    boxes carried 128 rows, 0.79-0.89x at 1 and 64 x 7168 x 7168)."""
    tiles = -(-m // 128) * -(-n // 128)
    return 2 * tiles <= sms


#: Stream-K is taken where 128 x 128 tiles would keep the SMs busy less than this fraction of
#: their rounds. Measured on an H200: 1.035x whole tiles at 4096 x 2112 x 7168 (82%) until the
#: consumers of whole tiles took a warp-uniform warpgroup index (stream-K's kernels spill with it);
#: after, 0.91x whole tiles there, at 2304 x 2048 x 7168 (73%) and at 2432 x 1920 x 7168 (73%)
#: (BENCHMARKS.md, 2026-11-29). Where wide or 256-row tiles serve, they are taken first.
STREAM_BELOW = 0.66


def stream_tiles(m: int, n: int, k: int, sms: int, bm: int = 128, bn: int = 128) -> bool:
    """Whether block-scaled fp8 in ``bm`` x ``bn`` tiles should run stream-K (the CTAs take
    whole tiles in waves, then share the last waves' k-blocks evenly): with 128 x 128 tiles
    (the only ones measured faster with it) where they fill at least one round of the ``sms``
    SMs and whole tiles, one per SM at a time, would keep them busy less than
    :data:`STREAM_BELOW` of their rounds (4096 x 2112 on 132 SMs: 544 tiles in 5 rounds, 82%: not;
    2304 x 2048: 288 in 3, 73%: not; 133 tiles in 2 rounds, 50%: taken),
    and K holds more than one block. (Products of fewer tiles than SMs, measured on an H200,
    ran slower with it: 0.70x at 128 x 7168 x 7168.)"""
    if (bm, bn) != (128, 128):
        return False
    tiles = -(-m // 128) * -(-n // 128)
    rounds = -(-tiles // sms)
    return k > 128 and tiles >= sms and tiles < STREAM_BELOW * rounds * sms


def _scratch(device, stream, floats: int, tiles: int):
    """Stream-K's scratch on one stream (launches on a stream run in order, so they share it):
    f32 partial tiles and one int32 counter per tile, zero (each launch leaves them so); it grows
    (doubling) for a larger launch, where a plan's (:meth:`Plan.workspace`) has its own launch's
    size. On a stream capturing into a CUDA graph: the graph's own (:mod:`nbwgmma.capture`)."""
    if not _SIM and call_captured():  # (the call recorded its stream, ``stream``)
        return stream_scratch(floats, tiles, stream)
    key = (device, stream_key(stream))
    have = _SCRATCH.get(key)
    if have is None or have[0].size < floats or have[1].size < tiles:
        if have is not None:  # kept: a launch still queued on the stream may use it (doubling bounds how many)
            _RETIRED.append(have)
        have = _SCRATCH[key] = stream_scratch(max(floats, 2 * have[0].size if have else 0),
                                              max(tiles, 2 * have[1].size if have else 0))
    return have


def _prepared(cfg: ScaledConfig, grid: int, layouts: tuple, device):
    """The kernel of ``cfg`` ready to launch on ``grid`` CTAs with raw argument values (from the
    disk cache or compiled): C (an f32 stand-in where TMA stores it) and the scales typed as
    Numba types device arrays of their ``layouts`` (:func:`~nbwgmma.frontend.arrays.numba_layout`),
    stream-K's scratch and the bias (scratch standing in without one) as contiguous vectors."""
    key = (cfg.key(), grid, layouts, device)
    pl = _LAUNCHERS.get(key)
    if pl is None:
        from numba import cuda, types
        from numba.cuda.np.numpy_support import from_dtype

        from ..cache import cached_kernel
        from ..launch import PreparedLaunch

        c = types.Array(from_dtype(np.dtype(NP_OF[cfg.out] if cfg.epilogue == "direct" else np.float32)), 2, layouts[0])
        sig = (types.uint64,) * 3 + (c,) + tuple(types.Array(types.float32, 2, lay) for lay in layouts[1:]) \
            + (types.int32,) * 3 + (types.float32,) \
            + (types.Array(types.float32, 1, "C"), types.Array(types.int32, 1, "C"),
               types.Array(from_dtype(np.dtype(NP_OF[cfg.bias_type])), 1, "C"))
        kern, _ = cached_kernel(scaled_kernel(cfg), sig, ("scaled", cfg.key()),
                                cuda.get_current_device().compute_capability)
        pl = _LAUNCHERS[key] = PreparedLaunch(kern, grid, cfg.threads, _ARG_TYPES, smem=cfg.smem, pdl=True)
    return pl


def is_tensor_scale(x) -> bool:
    """Whether ``x`` is a scale array of other than one element (the scaled path, which checks
    its shape: an empty product's empty scales pass); numbers and arrays of one element (any
    shape) are per-tensor scales."""
    if x is None or isinstance(x, (int, float, np.integer, np.floating)):
        return False
    shape = getattr(x, "shape", None)
    if shape is None:
        return False
    return int(np.prod(shape)) != 1


def scale_kinds(info: ArrayInfo | None, side: str, m: int, n: int, k: int):
    """``(kind, view shape, view strides in bytes)`` of one side's scale (``side`` "A" or "B"),
    the view indexed [row, k block] for A and [n block, k block] (or [0, column]) for B; kind
    None where the scale is a number (or absent)."""
    if info is None:
        return None, None, None
    name = f"scale_{side.lower()}"
    if info.dtype != "f32":
        raise MatmulTypeError(f"matmul: {name} must be f32; got {info.dtype}")
    if any(s < 0 or s % 4 for s in info.strides):
        raise MatmulError(f"matmul: {name} must have non-negative strides of whole f32 elements; got strides "
                          f"{info.strides} bytes")
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    shape, st = info.shape, info.strides
    if side == "A":
        if shape in ((m,), (m, 1)):
            return "row", (m, 1), (st[0], 4)
        if shape == (m, kb):
            return "block", shape, st
        want = f"({m},) or ({m}, 1) (per row) or ({m}, {kb}) (1 x 128: per row and 128-K block)"
    else:
        if shape in ((n,), (1, n)):  # (also where the weight's order (nb, kb) is (1, n): torch's rowwise meaning)
            return "col", (1, n), (4, st[-1])
        if shape == (kb, nb):  # b's order [kb, nb] (torch._scaled_mm's), seen as [nb, kb]
            return "block", (nb, kb), (st[1], st[0])
        if shape == (nb, kb):  # the weight's order
            return "block", shape, st
        want = f"({n},) or (1, {n}) (per column) or ({kb}, {nb}) / ({nb}, {kb}) (128 x 128 blocks)"
    raise MatmulError(f"matmul: {name} must be a number or an f32 array of shape {want} for A {m}x{k}, B {k}x{n}; "
                      f"got shape {shape}")


def _scale_info(x, name, device):
    info = described(x, name)
    if info.device != device:
        raise MatmulError(f"matmul: {name} must be on device {device} like A; got device {info.device}")
    return info


def _per_tensor(x, info, name) -> float:
    """A per-tensor scale's value (a number, or an array of one element: read once)."""
    if info is None:
        if isinstance(x, bool) or not isinstance(x, (int, float, np.integer, np.floating)):
            raise MatmulTypeError(f"matmul: {name} must be a number or an f32 CUDA array; got {type(x).__name__}")
        return float(x)
    if info.dtype != "f32":
        raise MatmulTypeError(f"matmul: {name} must be f32; got {info.dtype}")
    if _SIM:
        return float(x.copy_to_host().reshape(-1)[0])
    refuse_host_read(name)
    return float(x.reshape(-1)[0]) if info.kind == "torch" else float(x.reshape(-1)[0].get()) \
        if info.kind == "cupy" else float(x.copy_to_host().reshape(-1)[0])


def _view(x, info: ArrayInfo, shape, strides):
    """A Numba (or simulator) f32 array over ``x``'s memory with ``shape`` and byte ``strides``."""
    if _SIM:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        host = getattr(x, "_ary")  # the simulator's host memory
        return FakeCUDAArray(np.lib.stride_tricks.as_strided(host.view(np.float32), shape, strides))
    return numba_view(info._replace(shape=shape, strides=strides), x, np.float32)


def _stand_in_values(device) -> tuple:
    """A prepared launch's values for a 2-D array the kernel does not read (a side without a
    scale array, C where TMA stores it): :func:`~nbwgmma.frontend.args.stand_in`'s."""
    x = stand_in(device)
    return array_arg_values(x.__cuda_array_interface__["data"][0], x.shape, x.strides, x.dtype.itemsize)


def _pitch(info: ArrayInfo) -> int:
    """Elements between rows for a tensor map (a single row's pitch is never used: any legal one)."""
    rows, cols = info.shape
    if rows <= 1:
        return -(-cols * info.itemsize // 16) * 16 // info.itemsize
    return info.strides[0] // info.itemsize


def _columns(info: ArrayInfo, strides) -> bool:
    """A [row, k block] scale whose rows are contiguous, its columns 16-byte aligned."""
    return strides[0] == 4 and info.ptr % 16 == 0 and (info.shape[-1] <= 1 or strides[1] % 16 == 0)


def _tma_rows(info: ArrayInfo) -> bool:
    """[rows, cols] with cols contiguous, a 16-byte aligned base and row pitch (TMA)."""
    rows, cols = info.shape
    return (cols <= 1 or info.strides[1] == info.itemsize) and info.ptr % 16 == 0 \
        and (rows <= 1 or (info.strides[0] % 16 == 0 and info.strides[0] >= cols * info.itemsize))


def scaled_matmul(a, ia, b, ib, out, io, *, kind, odt, scale_a, scale_b, alpha, stream, config, fused, bias=None,
                  activation=None, quick=None):
    """``matmul`` with a tensor scale (``ia``/``ib`` checked by ``check_call``; ``out``/``io``
    the caller's or None; ``fused`` whether an epilogue function or C were given; ``bias`` and
    ``activation`` as ``matmul`` takes them; ``quick`` a :func:`quick_key` under which to keep
    the call for :class:`ScaledQuick`): every check, then the output, then one launch."""
    from ..launch import launch

    (m, k), n = ia.shape, ib.shape[1]
    if fused:
        raise MatmulError("matmul: an epilogue function or C do not take tensor scales yet; got both")
    if config is not None:
        raise MatmulError("matmul: config applies to calls without tensor scales so far; got both")
    alpha = real_arg(alpha, "alpha")
    dev = ia.device
    bi = described(bias, "bias") if bias is not None else None
    where = check_epilogue(activation, bi, m, n, dev)  # the bias's kind: "col", "row" or None
    infos = [None if x is None or not hasattr(x, "shape") else _scale_info(x, f"scale_{side}", dev)
             for x, side in ((scale_a, "a"), (scale_b, "b"))]
    if io is not None:  # a given out: nothing the epilogue reads may lie in it
        check_reads_apart(io, (("bias", bi), ("scale_a", infos[0]), ("scale_b", infos[1])))
    kinds = []
    for x, info, side in ((scale_a, infos[0], "A"), (scale_b, infos[1], "B")):
        if x is None:
            kinds.append((None, None, None))
        elif is_tensor_scale(x):
            kinds.append(scale_kinds(info, side, m, n, k))
        else:
            alpha = float(alpha) * _per_tensor(x, info, f"scale_{side.lower()}")
            kinds.append((None, None, None))
    alpha = real_arg(alpha, "alpha * scale_a * scale_b")  # (a per-tensor scale folded in: still an f32)
    bt = ArrayInfo(ib.ptr, (n, k), (ib.strides[1], ib.strides[0]), *tuple(ib)[3:])  # B^T = w [N, K]
    for name, info in (("A", ia), ("B (as w.T with w [N, K] row-major)", bt)):
        if not _tma_rows(info) and 0 not in info.shape:  # (an empty operand is never read: no kernel runs)
            raise MatmulError(f"matmul: with tensor scales, {name} must be row-major with a 16-byte aligned base and "
                              f"rows (K a multiple of 16) so far; got shape {info.shape}, strides {info.strides} "
                              f"bytes")
    lib = lib_of(a)
    out, io = output(lib, a, out, io, ia, ib, odt)
    st = stream_of(lib, stream)
    if m == 0 or n == 0:
        return out
    if k == 0:
        if bias is not None or activation is not None:
            raise MatmulError("matmul: a bias or an activation needs K > 0 so far; got K = 0")
        zero_fill(io, out, st)
        return out
    vec = bias_operand(bias, bi, st) if bi is not None else None  # (info, owner): contiguous, read in place
    tma = odt != "f32" and _tma_rows(io)
    # A's 1 x 128 scales with rows contiguous (torch's layout) and 16-byte aligned columns: the
    # kernel copies four rows at a time
    a_cols = kinds[0][0] == "block" and _columns(infos[0], kinds[0][2])
    sms = _SIM_SMS if _SIM else device_limits()["multiprocessors"]
    tall = a_cols and m % 4 == 0 and tall_tiles(m, n, sms)
    blocks = "block" in (kinds[0][0], kinds[1][0])  # promoted: where narrow, wide tiles and stream-K were measured
    # (wide tiles with B's block scales: with column scales the 176-wide epilogue spills)
    wide = wide_tiles(m, n, sms) if a_cols and tma and kinds[1][0] == "block" else None
    strip = a_cols and m % 4 == 0 and tma and strip_tiles(m, n, sms)
    wide = None if strip else wide
    tall = strip or (tall and not wide)
    # (192-row tiles with B's block scales: with its column scales, read in the epilogue, the
    # consumers' 160 registers spill)
    trio = a_cols and m % 4 == 0 and tma and kinds[1][0] == "block" and not strip and not wide \
        and trio_tiles(m, n, sms)
    order = trio and last_row(m, n, sms)  # (the last tile row walked last)
    bn = wide or (64 if blocks and not tall and not trio and narrow_tiles(m, n, sms) else 128)
    stream = blocks and not strip and not trio and stream_tiles(m, n, k, sms, 256 if tall else 128, bn)
    bias_type = vec[0].dtype if vec is not None else "f32"
    key = (kind, odt, kinds[0][0], kinds[1][0], tma, a_cols, tall, trio, bn, stream, where, bias_type, activation,
           strip, order)
    cfg = _CONFIGS.get(key)
    if cfg is None:
        _, ta, tb = kind.split(".")
        cfg = _CONFIGS[key] = ScaledConfig(ta, tb, odt, kinds[0][0], kinds[1][0], epilogue="tma" if tma else "direct",
                                           a_columns=a_cols, bm=192 if trio else 256 if tall else 128, bn=bn,
                                           stream_k=stream,
                                           bias=where, bias_type=bias_type, activation=activation, strip=strip,
                                           last_row=order)
    views = (((m, k), (_pitch(ia), 1)), ((n, k), (_pitch(bt), 1)), ((m, n), (_pitch(io), 1)))  # the maps' views
    grid = cfg.grid(m, n, k, _SIM_CTAS if _SIM else sms)
    if _SIM or DEBUG_WAIT_TIMEOUT_S is not None:  # checked launches (the simulator's arrays; a stopped kernel named)
        ta = tensor_map(a, ia.ptr, ia.dtype, cfg.a_box(m), views[0], keep=False)
        tb = tensor_map(b, ib.ptr, ib.dtype, cfg.b_box, views[1], keep=False)
        tc = tensor_map(out, io.ptr, odt, (64, cfg.c_cols), views[2], keep=False,
                        swizzle=cfg.c_swizzle).address if tma else 0
        ws, counters, _ = _scratch(dev, st, *_scratch_size(cfg, grid, m, n, k))
        sa, sb = (_view(x, info, shp, strd) if kd is not None else stand_in(dev)
                  for x, info, (kd, shp, strd) in zip((scale_a, scale_b), infos, kinds))
        c = stand_in(dev) if tma else numba_view(io, out, NP_OF[odt])
        args = (np.uint64(ta.address), np.uint64(tb.address), np.uint64(tc), c, sa, sb, np.int32(m), np.int32(n),
                np.int32(k), np.float32(alpha), ws, counters, numba_view(*vec) if vec is not None else ws)
        launch(scaled_kernel(cfg), grid, cfg.threads, args, stream=st, smem=cfg.smem, pdl=True)
        return out
    # the fast path: raw values into a prepared launch (no Numba arrays, no typing per call)
    c = None if tma else (io.shape, io.strides, io.itemsize)
    scales = [None if kd is None else (shp, strd) for kd, shp, strd in kinds]
    layouts = (numba_layout(*c) if c else "C",) + tuple(numba_layout(*d, 4) if d else "C" for d in scales)
    q = ScaledQuick(_prepared(cfg, grid, layouts, dev), cfg, (m, n, k), float(alpha), dev, (ia.dtype, ib.dtype, odt),
                    views, c, scales, None if vec is None else (vec[0].shape, vec[0].strides, vec[0].itemsize), grid)
    q.launch(st, a, ia.ptr, b, ib.ptr, out, io.ptr, *(info.ptr if info is not None else 0 for info in infos),
             vec[0].ptr if vec is not None else 0)
    # kept for the quick path where every value the launch took is read on the device: a bias read
    # in place (not a copy), and no one-element scale read once on the host into alpha (its next
    # value would not be read)
    if quick is not None and (vec is None or vec[0].ptr == bi.ptr) and None not in (kinds[0][0], kinds[1][0]):
        if len(QUICK) >= 256:
            QUICK.clear()
        QUICK[quick] = q
    return out


def _scratch_size(cfg: ScaledConfig, grid: int, m: int, n: int, k: int) -> tuple:
    """(f32 values, tile counters) of the scratch a launch of ``cfg`` on ``grid`` CTAs takes:
    stream-K's, else one each (stand-ins)."""
    return (cfg.workspace_floats(grid), cfg.sched.units(m, n, k)) if cfg.stream_k else (1, 1)


#: Block-scaled calls seen before (``matmul(a, b, scale_a=, scale_b=)`` of PyTorch tensors, with no
#: output, stream or configuration given): their key (:func:`quick_key`) -> :class:`ScaledQuick`
QUICK: dict = {}


def quick_key(a, b, scale_a, scale_b, out_dtype, bias, activation):
    """What a block-scaled call of PyTorch tensors is checked on, beyond its pointers: each
    tensor's type, shape, strides, 16-byte alignment and device; the output type, the bias's
    description and the activation."""
    return tuple((x.dtype, x.shape, x.stride(), x.data_ptr() & 15, x.get_device()) for x in (a, b, scale_a, scale_b)) \
        + (out_dtype, activation, None if bias is None else (bias.dtype, bias.shape, bias.stride(),
                                                             bias.data_ptr() & 15, bias.get_device()))


class ScaledQuick:
    """A block-scaled launch whose operands were checked: :meth:`launch` takes the pointers of a
    call (tensor maps cached by address, the scratch of the stream) into the prepared launch.
    Called, it is the quick path of a call whose tensors are like those of a call before
    (:func:`quick_key` names what): allocate the output, launch on PyTorch's current stream."""

    def __init__(self, launcher, cfg, mnk, alpha, device, types, views, c, scales, bias, grid):
        """``types``: A's, B's and the output's element types; ``views``: the tensor maps' views of
        A, B (as w [N, K]) and C; ``c``: C's (shape, byte strides, itemsize) where the kernel
        stores it from the registers, None where TMA does; ``scales``: each side's (shape,
        strides) as the kernel reads it, or None; ``bias``: its (shape, strides, itemsize) or
        None."""
        self.launcher, self.cfg, self.mnk, self.alpha, self.device = launcher, cfg, mnk, alpha, device
        self.types, self.views, self.c, self.scales, self.bias = types, views, c, scales, bias
        self.stand = _stand_in_values(device)  # (a (1, 1) f32 array: layout C)
        self.scratch = _scratch_size(cfg, grid, *mnk)
        self.tdt = None  # the output's torch dtype, at the first quick call (torch is imported there)

    def launch(self, st, a, pa, b, pb, out, po, psa, psb, pbias):
        """Launch on stream ``st`` with A, B and C at ``pa``, ``pb``, ``po``, the scales at
        ``psa``, ``psb`` and the bias at ``pbias`` (for a side without one: anything)."""
        calling(st)  # (maps made now ask whether it captures: nbwgmma.capture)
        m, n, k = self.mnk
        cfg, (adt, bdt, odt) = self.cfg, self.types
        ta = tensor_map(a, pa, adt, cfg.a_box(m), self.views[0], keep=False).address
        tb = tensor_map(b, pb, bdt, cfg.b_box, self.views[1], keep=False).address
        if self.c is None:
            tc = tensor_map(out, po, odt, (64, cfg.c_cols), self.views[2], keep=False, swizzle=cfg.c_swizzle).address
            values = self.stand
        else:
            tc, values = 0, array_arg_values(po, *self.c)
        for p, d in zip((psa, psb), self.scales):
            values += self.stand if d is None else array_arg_values(p, d[0], d[1], 4)
        ws_values = _scratch(self.device, st, *self.scratch)[2]
        bias_values = array_arg_values(pbias, *self.bias) if self.bias is not None \
            else ws_values[:len(ws_values) // 2]  # (the scratch stands in)
        self.launcher(st, ta, tb, tc, *values, m, n, k, self.alpha, *ws_values, *bias_values)

    def __call__(self, a, b, scale_a, scale_b, bias):
        """The result, or None (for the full path) if the new output is not 16-byte aligned."""
        if self.tdt is None:
            self.tdt = torch_dtype(self.types[2])
        out = a.new_empty(self.mnk[:2], dtype=self.tdt)
        po = out.data_ptr()
        if po & 15:
            return None
        self.launch(stream_of("torch", None), a, a.data_ptr(), b, b.data_ptr(), out, po, scale_a.data_ptr(),
                    scale_b.data_ptr(), bias.data_ptr() if bias is not None else 0)
        return out
