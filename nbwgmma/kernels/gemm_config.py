"""The library GEMM's compile-time configuration: :class:`GemmConfig` checks a tile, its
pipeline, epilogue, clusters and K slices against the hardware's limits (shared memory,
registers, wgmma's N) and derives what the kernel needs (consumers, stages, the C tile's
parts and boxes, the ``setmaxnreg`` split). Host-side only; :mod:`nbwgmma.kernels.gemm` builds
the kernel from it."""

from __future__ import annotations

import math

from ..errors import ConfigError
from ..intrinsics.fragment import FP8_FORMATS
from ..kit.cluster_k import ClusterSplitK
from ..kit.epilogue import ACTIVATIONS, VECTOR_TYPES
from ..kit.cooperative import operand_loads
from ..kit.pipeline import check_shares
from ..kit.warpgroup import launch_regs
from ..layout.kinds import wgmma_kind
from ..layout.wgmma_model import ELEMENT_BYTES

__all__ = ["GemmConfig", "DEFAULT_STAGES", "NARROW_STAGES", "STAGE_BUDGET", "MAX_EXTRAS", "EXTRA_KINDS", "FP8_OUTS",
           "TRACE_EVENTS"]

#: Shared memory for a kernel's stages and C tile: the opt-in 227 KiB less the dynamic base's
#: alignment slack and the barriers.
STAGE_BUDGET = 227 * 1024 - 1023 - 64

_OUT_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "e4m3": 1, "e5m2": 1}
#: output types stored as fp8 codes (scaled by ``scale_out``, optionally with ``amax``)
FP8_OUTS = FP8_FORMATS
#: what a traced kernel (``trace=True``) records after its SM and start, one column each from column 2:
#: the producer's first load issued, the first stage's bytes landed (seen by the first consumer),
#: the producer's last load issued, the first consumer's last tile computed, its stores done
TRACE_EVENTS = ("loads start", "first stage in", "loads issued", "tiles done", "stores done")
#: Default stages per (bm, bn) where more than 4 pay: 128 x 128 tiles (32 KiB stages) with 6
#: ran 3-9% faster than with 4 on an H100 at 384-2048 rows, 16-bit and fp8, long K most
#: (BENCHMARKS.md, 2026-11-25); narrow tiles (a width that is not a multiple of 64) take as many
#: as fit up to :data:`NARROW_STAGES`; other tiles fit at most 4 beside their C tile.
DEFAULT_STAGES = {(128, 128): 6}
NARROW_STAGES = 8
#: a user epilogue's extra arguments: at most this many, each a vector per column or row of C or a scalar
MAX_EXTRAS = 4
EXTRA_KINDS = ("col", "row", "scalar")


class GemmConfig:
    """Compile-time parameters of one GEMM kernel.

    ``a_major``/``b_major`` say how A [M, K] and B [N, K] sit in global memory: "K"
    (K contiguous) or "MN" (M resp. N contiguous: a column-major A, a row-major B of
    ``a @ b``); "MN" exists for 16-bit inputs only (wgmma's transpose bits).
    ``epilogue`` "tma" writes C through a swizzled shared tile (``stmatrix``; f32 values as
    128-byte swizzled blocks of 32 columns, ``acc_store_swizzled``) and TMA stores that overlap
    the next tile's main loop; "direct" stores the fragments straight to global memory (any
    output type and strides); "rows" (16-bit outputs whose rows TMA cannot write: an odd N; bn
    a multiple of 64) stages each 64 x 64 part in a swizzled shared block and stores it a row
    per warp, each warp's stores one contiguous run (:func:`nbwgmma.kit.store_rows_part`).
    ``stages`` defaults to the most that fit in shared memory, up to :data:`DEFAULT_STAGES`
    for the tile (6 for 128 x 128, 8 for a width that is not a multiple of 64, 4 otherwise).
    ``cluster`` (1, 2 or 4) launches the CTAs in thread-block clusters of that many along
    M: the cluster works on vertically adjacent tiles that share their B tile, and each
    CTA loads 1/cluster of it and multicasts it to all (less L2 traffic for B). With
    ``multicast="A"`` the cluster lies along N instead: side-by-side tiles that share their A
    tile, each CTA loading 1/cluster of A's rows (the 256-row tiles' larger operand).
    ``split`` (1-4) cuts K into that many slices, each a separate work unit (more units
    than tiles for small M x N): every slice writes its f32 partial tile to a workspace,
    and the last one to finish a tile (a per-tile counter) sums the slices in order and
    stores C, so results do not depend on which finished first. The kernel then takes two
    more arguments: ``ws``, a 1-D f32 array of at least ``tiles x split x BM x BN``
    elements, and ``counters``, an int32 array of one zero per tile (each count is reset to zero by
    the tile's last slice, ready for the next launch).
    ``stream_k`` (no clusters, no ``split``) takes every full wave of tiles but the last whole
    (:func:`~nbwgmma.kit.stream_whole_units`; CTA ``c`` tiles ``c``, ``c + grid``, ...) and cuts
    the other tiles' k-blocks, in tile order, evenly over the CTAs of the grid (stream-K: the
    last waves, or a problem of few tiles, still fill every SM). A CTA stores the tiles its
    share covers whole; a tile shared by several CTAs gets each one's
    partial tile parked in ``ws`` (two slots per CTA: its share's first and last tiles), and the
    CTA that counts last sums them in K order and stores C. The grid must be at most the
    number of k-blocks (``tiles x ceil(K / BK)``); ``ws`` holds ``2 x grid x BM x BN`` f32
    elements, ``counters`` one zero per tile, as for ``split``.
    ``cluster_k`` = 2 (64- or 128-row tiles, no ``cluster``, ``split`` or ``stream_k``) launches
    clusters of two CTAs that take the same tile, each half of its k-blocks, and sum the halves
    through distributed shared memory (:class:`~nbwgmma.kit.ClusterSplitK`): twice the work units
    of the tiles without split-K's global workspace; each CTA keeps a ``64 x bn`` f32 exchange
    buffer in shared memory (fewer stages).
    ``consumers``: the warpgroups sharing a tile, ``bm / 64`` (64 rows each) or, for 128 or 256
    rows, ``bm / 128`` (128 rows each: two 64-row blocks and two accumulators, ``blocks`` = 2;
    tiles of at most 168 columns, no split, stream-K or ``cluster_k``). A 256-row tile takes two
    consumers of 128 rows by default, four of 64 with split-K or stream-K (at most 128 columns).
    ``c_parts`` (TMA epilogue): each consumer's 64-row block of C leaves in ``c_parts`` parts of
    ``bn / c_parts`` columns (a multiple of 64, or of 8 for unswizzled rows) through ``c_slots``
    (1 or 2) shared tiles of ``64 x bn / c_parts`` per consumer, used in turn: with 2 a part is
    written while the one before is being stored. Defaults: 2 parts and 1 slot where that fits one
    more stage and fewer than 4 fit otherwise (e.g. 128 x 256 and 128 x 224); for 256-row tiles
    (two consumers of 128 rows) that would get fewer than 4 stages, 2 slots of the widest part of
    at least 32 columns that lets 4 fit (256 x 160: 5 parts of 32 columns), since a fourth stage
    ran 256 x 128 tiles 1.10-1.16x faster than three on an H100 (256 x 168 in 7 parts of 24 ran
    0.96-0.99x its 3 stages: the parts cost more than the stage gained). A width that is not a
    multiple of 64 is stored as unswizzled rows with one TMA box per part (``c_box`` columns).
    ``c_transposed`` (TMA epilogue): each consumer's block is stored transposed (for a swapped
    product whose C is out^T): C^T's 64 x 64 blocks, or for a width that is not a multiple of 64
    parts of one multiple of 8 columns but a narrower last one (``c_widths``: 152 in 2 parts of 80
    and 72, in 3 of 56, 56 and 40), each stored in boxes of ``c_box`` rows of out (8 there).
    ``bias`` ("col": one value per column of C, "row": per row) and ``act`` (an activation of
    :data:`nbwgmma.kit.ACTIVATIONS`) fuse ``act(alpha * A @ B^T + bias)`` into the epilogue
    (:func:`nbwgmma.kit.acc_map` over each part before it is packed); with a bias the kernel
    takes one more argument after ``alpha``: the vector, of ``bias_type`` ("f32", "f16", or "bf16"
    as uint16 bits) elements. ``with_c`` adds ``beta * C`` first (two more arguments after those:
    C as a 2-D array of any strides, bf16 as uint16 bits, and the f32 ``beta``).
    ``user`` (a device function ``fn(value, row, col, *extras) -> value``) is applied last, with
    each value's row and column of C (int64; ``user_t``: the kernel computes C^T, so it passes
    the column and row of its own C, the caller's row and column) and ``extras``, pairs (kind,
    type): a vector per column ("col") or row ("row") of C of that element type, read as
    ``acc_map`` reads a bias, or an f32 "scalar"; each is one more kernel argument after C and
    beta, in order.
    ``out`` "e4m3" or "e5m2" stores fp8 codes of each result times ``scale_out`` (round to
    nearest even, saturated; one more f32 argument after the extras): the "tma" epilogue writes
    them into 64B-swizzled shared blocks of 64 x 64 bytes (``acc_store_fp8_swizzled``) for TMA
    stores of a one-byte map, "direct" stores them from the registers (``acc_store_fp8``). With
    ``amax`` the kernel takes a one-element f32 array after ``scale_out`` and raises it to the
    largest |result| inside C (before the scale): each warp keeps its running maximum in shared
    memory, one atomic max per warp at the end.
    ``batched``: a batch of products of one shape (``torch.bmm``'s): A and B are 3-D maps
    ((batch, rows, columns), one matrix per box), C a 3-D map with the TMA epilogue or a 3-D array
    with the direct one (each tile's product stored into its matrix), and the kernel takes the
    batch's size as a last int32 argument; the walk covers every product's tiles in turn;
    ``with_c`` takes C as a 3-D array (any strides: a stride of 0 adds one C to every product).
    Without split, stream-K or ``cluster_k``. ``broadcast`` (``"A"``, ``"B"`` or ``"AB"``): those
    operands of a batch are one matrix for every product (``torch.matmul``'s broadcast of a 2-D
    operand; their maps one matrix deep, every product's loads reading it).
    ``b_tail`` (K-major B, no batch, stream-K or cluster sharing B): the kernel takes a second map of
    B after B's, whose box holds the rows of B's last tile column that N has (N - (tiles_n - 1) x bn,
    rounded up to 8: :func:`nbwgmma.kit.box_rows`), and loads that column through it, the stage
    expecting only those bytes (TMA moves a box's rows past N as zeros, at a cost); the stages'
    rows past them are zeroed once where a tail tile could read them first (not where the CTA's first
    tile is whole and fills every stage) and later keep earlier tiles' B rows, which feed
    only C's padding columns (never stored; an amax masks them). ``a_tail`` (K-major A, no batch,
    stream-K or cluster sharing A): the same for A's last tile row (its map after B's and B's
    last column's), the rows past M feeding only C's padding rows.
    ``trace``: the kernel takes a last argument, an int64 array of one row per CTA and 2 +
    ``len(TRACE_EVENTS)`` columns (:class:`nbwgmma.timeline.Timeline`), and records its timeline in it
    (:mod:`nbwgmma.kit.timeline`): the SM, the start and :data:`TRACE_EVENTS`.
    ``producer_regs``/``consumer_regs`` split the CTA's registers with ``setmaxnreg``
    (default 40 for the producer, 24 for consumers of 128 rows, 48 for a cluster of 4 with MN-major
    B, 56 for some split-K kernels and for ``cluster_k``; the rest shared out among the consumers,
    at most 240 each).
    """

    def __init__(self, kind="f32.bf16.bf16", bm=128, bn=256, stages=None, group_m=8, scaled=False,
                 producer_regs=None, consumer_regs=None, a_major="K", b_major="K", out="bf16",
                 epilogue="direct", c_parts=None, cluster=1, split=1, stream_k=0, cluster_k=1, consumers=None,
                 c_transposed=False, c_slots=None, bias=None, act=None, bias_type="f32", with_c=False, user=None,
                 extras=(), user_t=False, amax=False, multicast="B", batched=False, broadcast="", b_tail=False,
                 a_tail=False, trace=False):
        self.kind = kind
        self.k = wgmma_kind(kind)
        if self.k.dtype != "f32":
            raise ConfigError("kind", f"the GEMM accumulates in f32; got {kind}")
        if bm % 64 or not 64 <= bm <= 256:
            raise ConfigError("bm", f"bm must be 64, 128, 192 or 256; got {bm}")
        if epilogue not in ("tma", "direct", "rows"):
            raise ConfigError("epilogue", f"epilogue must be 'tma', 'direct' or 'rows'; got {epilogue!r}")
        # 64-column multiples for MN-major B's boxes; with K-major B any multiple of 8 (narrow
        # tiles), which the TMA epilogue stores as one unswizzled (64, bn) box per 64 rows.
        step = 8 if b_major == "K" else 64
        if bn not in self.k.n_values or bn % step:
            raise ConfigError("bn", f"bn must be a wgmma N for {kind} and a multiple of {step}"
                                    f"{' (64 with MN-major B)' if step == 64 else ''}; got {bn}")
        for name, major in (("a_major", a_major), ("b_major", b_major)):
            if major not in ("K", "MN"):
                raise ConfigError(name, f"{name} must be 'K' or 'MN'; got {major!r}")
            if major == "MN" and not self.k.transposable:
                raise ConfigError(name, f"{name}='MN' needs 16-bit inputs (wgmma transposes); got {kind}")
        if c_transposed and epilogue != "tma":
            raise ConfigError("epilogue", f"a transposed C (swapped products) goes out through the TMA epilogue; "
                                          f"got epilogue={epilogue!r}")
        #: the TMA epilogue stores each consumer's 64 x bn block transposed (C^T's blocks)
        self.c_transposed = bool(c_transposed)
        if bias not in (None, "col", "row"):
            raise ConfigError("bias", f"bias must be None, 'col' (one value per column of C) or 'row'; got {bias!r}")
        if act is not None and act not in ACTIVATIONS:
            raise ConfigError("act", f"act must be None or one of {sorted(ACTIVATIONS)}; got {act!r}")
        if bias_type not in VECTOR_TYPES:
            raise ConfigError("bias_type", f"bias_type must be one of {VECTOR_TYPES}; got {bias_type!r}")
        #: the epilogue's bias vector (the kernel then takes it as an argument of ``bias_type``
        #: elements: bf16 as uint16 bits) and activation
        self.bias, self.act, self.bias_type = bias, act, bias_type if bias else "f32"
        #: ``beta * C`` is added in the epilogue (C read there: any strides, the output itself too)
        self.with_c = bool(with_c)
        if user is not None and not callable(user):
            raise ConfigError("user", f"user must be a device function (value, row, col, *extras) -> value; got {user!r}")
        extras = tuple(tuple(e) for e in extras)
        if len(extras) > MAX_EXTRAS or any(len(e) != 2 or e[0] not in EXTRA_KINDS or e[1] not in VECTOR_TYPES
                                           or (e[0] == "scalar" and e[1] != "f32") for e in extras) \
                or (extras and user is None):
            raise ConfigError("extras", f"extras (a user function's) must be up to {MAX_EXTRAS} pairs (kind, type): kind "
                                        f"one of {EXTRA_KINDS}, type one of {VECTOR_TYPES} (f32 for a scalar); got "
                                        f"{extras!r}{' without a user function' if user is None else ''}")
        #: the user's epilogue function, applied last (``fn(value, row, col, *extras)``), its extras
        #: ((kind, type): a vector per column or row of C, or an f32 scalar; each one more argument of
        #: the kernel) and whether it gets C's coordinates transposed (a swapped product: C^T's)
        self.user, self.extras, self.user_t = user, extras, bool(user_t) and user is not None
        if out not in _OUT_BYTES:
            raise ConfigError("out", f"out must be one of {sorted(_OUT_BYTES)}; got {out!r}")
        fp8_out = out in FP8_OUTS
        f32_out = _OUT_BYTES[out] == 4
        if (fp8_out or f32_out) and c_transposed:
            raise ConfigError("epilogue", f"a transposed C (swapped products) goes out in 16 bits; "
                                          f"{'fp8 codes' if fp8_out else 'f32 values'} take epilogue='direct' there")
        if epilogue == "rows" and (_OUT_BYTES[out] != 2 or fp8_out or cluster_k != 1 or bn % 64):
            raise ConfigError("epilogue", f"epilogue='rows' stores 16-bit outputs (bf16, f16) in parts of 64 "
                                          f"columns, without cluster_k; got out={out}, bn={bn}, cluster_k={cluster_k}")
        if amax and not fp8_out:
            raise ConfigError("amax", f"amax goes with an fp8 output (out e4m3 or e5m2); got out={out}")
        #: the output's kind as the epilogue writes it: fp8 codes (one byte each, scaled by ``scale_out``)
        #: or f32 values (both kept as f32 values until they are stored), else packed 16-bit pairs
        self.fp8_out, self.f32_out = fp8_out, f32_out
        #: the largest |value| of C (before ``scale_out``) is kept in an f32 argument (fp8 outputs)
        self.amax = bool(amax)
        #: the values of a tile's padding (rows past M, columns past N: zeros loaded by TMA) stay
        #: zero through the epilogue (no bias, no user function, an activation with f(0) = 0), so an
        #: amax needs no mask
        self.zero_padding = not bias and user is None and act != "sigmoid"
        #: a fused epilogue maps C's values before they are stored (a bias, an activation, C, a user function)
        self.fused = bool(bias or act or with_c or user is not None)
        if cluster not in (1, 2, 4):
            raise ConfigError("cluster", f"cluster must be 1, 2 or 4 CTAs; got {cluster}")
        if multicast not in ("A", "B") or (multicast == "A" and cluster == 1):
            raise ConfigError("multicast", f"multicast (the operand a cluster shares) must be 'B', or 'A' with a "
                                           f"cluster of 2 or 4; got {multicast!r} with cluster={cluster}")
        try:
            if multicast == "A":
                check_shares("GemmConfig", bm, a_major, cluster, "A")
            else:
                check_shares("GemmConfig", bn, b_major, cluster)
        except ValueError as e:
            raise ConfigError("cluster", str(e)) from None
        #: the operand a cluster shares out ("B": clusters along M; "A": along N)
        self.multicast = multicast
        if split not in (1, 2, 3, 4):
            raise ConfigError("split", f"split must be 1, 2, 3 or 4 K slices; got {split}")
        if split > 1 and cluster > 1:
            raise ConfigError("split",
                              f"split-K works without clusters; got split={split}, cluster={cluster}")
        if stream_k not in (0, 1, False, True):
            raise ConfigError("stream_k", f"stream_k must be 0 or 1; got {stream_k!r}")
        if stream_k and (split > 1 or cluster > 1):
            raise ConfigError("stream_k", f"stream-K works without K slices or clusters; got split={split}, "
                                          f"cluster={cluster}")
        if stream_k and bn > 128:
            raise ConfigError("stream_k", f"stream-K takes tiles of at most 128 columns (wider ones spill in the "
                                          f"consumers); got bn={bn}")
        self.stream_k = int(stream_k)
        if cluster_k not in (1, 2):
            raise ConfigError("cluster_k", f"cluster_k must be 1 or 2 CTAs; got {cluster_k!r}")
        if cluster_k == 2 and (bm not in (64, 128) or cluster > 1 or split > 1 or stream_k):
            raise ConfigError("cluster_k", f"cluster_k=2 takes 64- or 128-row tiles and no cluster, split or stream_k "
                                           f"(each CTA keeps one consumer's 64 rows, or rank 0 the whole 64-row "
                                           f"tile); got bm={bm}, cluster={cluster}, split={split}, "
                                           f"stream_k={stream_k}")
        if cluster_k == 2 and epilogue == "direct" and bn > 192:
            raise ConfigError("cluster_k", f"cluster_k=2 with the direct epilogue takes tiles of at most 192 columns "
                                           f"(at 256 the consumers spill 24-32 bytes); got bn={bn}")
        self.cluster_k = cluster_k
        if batched and (split > 1 or stream_k or cluster_k > 1):
            raise ConfigError("batched", f"a batch of products runs without split, stream_k or cluster_k; got "
                                         f"split={split}, stream_k={stream_k}, cluster_k={cluster_k}")
        #: a batch of products: 3-D maps of A and B, C a 3-D map (the TMA epilogue) or a 3-D array (the
        #: register stores), the batch's size the last argument
        self.batched = bool(batched)
        if broadcast not in ("", "A", "B", "AB") or (broadcast and not batched):
            raise ConfigError("broadcast", f"broadcast names the operands of a batch that are one matrix for every "
                                           f"product: '', 'A', 'B' or 'AB', with batched=True; got {broadcast!r}"
                                           f"{'' if batched else ' without batched'}")
        #: the operands of a batch that are one matrix for every product (their maps one matrix deep)
        self.broadcast = broadcast
        for name, on, op, major, block, size in (("b_tail", b_tail, "B", b_major, "column", "N"),
                                                 ("a_tail", a_tail, "A", a_major, "row", "M")):
            if on and (major != "K" or batched or stream_k or (cluster > 1 and multicast == op)):
                raise ConfigError(name, f"{name} ({op}'s last tile {block} through a map of the rows {size} has) "
                                        f"takes K-major {op}, no batch, no stream_k and no cluster sharing {op}; got "
                                        f"{op.lower()}_major={major!r}, batched={batched}, stream_k={stream_k}, "
                                        f"cluster={cluster}, multicast={multicast!r}")
        #: the last tile column of B (row of A) is loaded through a second map (the kernel's arguments
        #: after B's map: B's, then A's) whose box holds only the rows N (M) has (:func:`nbwgmma.kit.box_rows`):
        #: the rows past them in the stage keep an earlier tile's rows (zeros before any), so the padding
        #: columns (rows) of C hold values that are never stored
        self.b_tail, self.a_tail = bool(b_tail), bool(a_tail)
        #: the kernel records its timeline (a last argument: :data:`TRACE_EVENTS`)
        self.trace = bool(trace)
        if self.b_tail or self.a_tail:
            self.zero_padding = False
        if consumers is None:  # 256 rows: two consumers of 128 (four of 64 spill and ran slower)
            consumers = 2 if bm == 256 and split == 1 and not stream_k and cluster_k == 1 else bm // 64
        if consumers != bm // 64 and not (bm % 128 == 0 and consumers == bm // 128):
            raise ConfigError("consumers", f"consumers (warpgroups sharing the tile) must be bm / 64, or bm / 128 for "
                                           f"bm 128 or 256 (64 or 128 rows each); got {consumers} for bm={bm}")
        #: 64-row blocks per consumer warpgroup (2: 128 rows each, two accumulators)
        self.blocks = bm // 64 // consumers
        if self.blocks == 2 and (split > 1 or stream_k or cluster_k > 1):
            raise ConfigError("consumers", f"consumers of 128 rows work without split, stream_k or cluster_k; got "
                                           f"split={split}, stream_k={stream_k}, cluster_k={cluster_k}")
        if self.blocks == 2 and bn > 168:
            raise ConfigError("bn", f"consumers of 128 rows take tiles of at most 168 columns (their two accumulators "
                                    f"spill from 176: 104 bytes, 840 at 192); got bn={bn}")
        if self.blocks == 2 and cluster > 1 and bn > 160:
            raise ConfigError("bn", f"consumers of 128 rows in clusters take tiles of at most 160 columns (the "
                                    f"producer keeps 40 registers, 232 each for them: 256 x 168 spilled 136 bytes); "
                                    f"got bn={bn} with cluster={cluster}")
        if consumers == 3 and bn > 176:
            raise ConfigError("bn", f"three consumers of 64 rows (a 192-row tile) take tiles of at most 176 columns "
                                    f"(wider ones spill: 12 bytes at 184, 424 at 192; 208 does not compile); got bn={bn}")
        if consumers == 4 and bn > 128:
            raise ConfigError("bn", f"four consumers of 64 rows (a 256-row tile with split or stream_k) take tiles of at "
                                    f"most 128 columns (about 100 registers each: wider ones do not compile); got bn={bn}")
        #: CTAs per launched cluster (the clusters' tiles, along M or N, times the K halves)
        self.cta_cluster = cluster * cluster_k
        #: the kernel takes the f32 workspace and the tile counters (split-K, stream-K)
        self.uses_workspace = split > 1 or bool(stream_k)
        if self.uses_workspace and ELEMENT_BYTES[self.k.atype] != 2 and bn > 64:
            raise ConfigError("stream_k" if stream_k else "split",
                              f"split-K and stream-K are built for 16-bit inputs and for fp8 tiles of at most 64 "
                              f"columns (wider fp8 tiles spill); got {kind} with bn={bn}")
        if group_m < 1:
            raise ConfigError("group_m", f"group_m must be 1 or more tile rows; got {group_m}")
        self.cluster, self.split = cluster, split
        self.bm, self.bn, self.group_m, self.scaled = bm, bn, group_m, scaled
        self.a_major, self.b_major, self.out, self.epilogue = a_major, b_major, out, epilogue
        self.esize = int(ELEMENT_BYTES[self.k.atype])
        self.bk = 128 // self.esize  # one 128-byte swizzle row of K per stage
        #: ((box, boxes) of A, of B): each operand's TMA box as a CTA loads it and the boxes a stage
        #: receives (kit.cooperative.operand_loads): the tensor maps' boxes and expect_tx's count
        self.loads = operand_loads(bm, bn, self.bk, a_major, b_major, cluster, multicast)
        self.consumers = consumers
        self.threads = 128 * (self.consumers + 1)
        self.a_bytes = bm * 128
        self.b_bytes = bn * 128
        self.stage_bytes = self.a_bytes + self.b_bytes
        # Each consumer's C tile: c_slots shared tiles of 64 rows x BN / c_parts columns, as
        # 64-column (128-byte) swizzled blocks or unswizzled rows; fewer bytes of C leave room
        # for a fourth stage at BN = 256 and 224 (halves: 128 x 224 with 4 stages 1.03-1.05x faster
        # than with 3 on an H100) and for 256 x 160 (parts through two slots).
        smem = STAGE_BUDGET

        def widths(parts):
            # Equal parts; a transposed C whose width is not a multiple of 64 in parts of the same
            # multiple of 8 columns but the last (152 in 2: 80 and 72), None where no such parts exist.
            if c_transposed and bn % 64:
                w = (-(-bn // parts) + 7) // 8 * 8
                last = bn - (parts - 1) * w
                return (w,) * (parts - 1) + (last,) if 0 < last <= w else None
            return (bn // parts,) * parts if bn % parts == 0 else None

        def c_bytes(parts, slots=1):  # (fp8 codes: one byte each; "rows": one 64 x 64 16-bit block a consumer)
            w = widths(parts)
            if epilogue == "rows":
                return self.consumers * 64 * 64 * 2
            return self.consumers * slots * 64 * (w[0] if w else bn) * _OUT_BYTES[out] if epilogue == "tma" else 0

        def splits(parts):  # parts of 64-column multiples (swizzled blocks) or 8-column ones (unswizzled boxes,
            w = (widths(parts) or (1,))[0]  # or a transposed C's 8-row boxes; c_transposed implies the TMA epilogue)
            if f32_out and epilogue == "tma":  # (f32 values: 128-byte swizzled blocks of 32 columns)
                return w % 32 == 0
            if c_transposed:
                return w % (8 if bn % 64 else 64) == 0
            if epilogue == "rows":  # (parts of one 64-column block)
                return w == 64
            return w % 64 == 0 or (w % 8 == 0 and not (fp8_out and epilogue == "tma"))

        if c_parts is None and f32_out and epilogue == "tma":
            # f32 values: the widest parts that leave room for the stages wanted (the tile's default;
            # a whole 64 x 256 f32 block per consumer is 64 KiB: 128 x 256 keeps 4 stages with parts of
            # 64 columns), else the narrowest (the most stages)
            want = DEFAULT_STAGES.get((bm, bn), NARROW_STAGES if bn % 64 else 4) if stages is None else stages
            ok = [p for p in range(1, bn // 32 + 1) if splits(p)] or [1]  # (else refused below)
            c_parts = next((p for p in ok if (smem - c_bytes(p)) // self.stage_bytes >= want), ok[-1])
        elif c_parts is None and epilogue == "rows":  # one 64-column block a part
            c_parts = bn // 64
        elif c_parts is None:  # (by default a width that is a multiple of 64 keeps its swizzled blocks whole)
            fits = [(smem - c_bytes(p)) // self.stage_bytes for p in (1, 2)]
            c_parts = 2 if epilogue == "tma" and splits(2) and (bn % 128 == 0 or bn % 64) and fits[0] < 4 \
                and fits[1] > fits[0] else 1
            want = 4 if stages is None else stages  # (given stages that only fit this way get it too)
            if c_slots is None and epilogue == "tma" and self.blocks == 2 and not c_transposed \
                    and (smem - c_bytes(c_parts)) // self.stage_bytes < want:
                for p in range(3, bn // 32 + 1):  # the widest part (of 32 columns or more) whose two
                    if splits(p) and (smem - c_bytes(p, 2)) // self.stage_bytes >= want:  # slots leave room
                        c_parts, c_slots = p, 2
                        break
            if c_transposed and self.consumers == 3 and bn > 160 and c_slots is None:
                # (three consumers' transposed C of 176 columns in halves spilled 72 bytes, in thirds none)
                c_parts = 3
            if fp8_out and amax and epilogue == "tma" and bn > 128 and self.fused:
                # fp8 codes with amax and a fused epilogue in parts of 64 columns (a whole 256-column
                # part spilled 1288-2100 bytes: its maxima beside the mapped values)
                c_parts = bn // 64
        if c_slots is None:
            c_slots = 1
        if not isinstance(c_parts, int) or c_parts < 1 or not splits(c_parts):
            raise ConfigError("c_parts", f"c_parts must divide BN into parts whose width is a multiple of 8 columns "
                                         f"(of 64 for fp8 codes or a transposed C of 64-column multiples, of 32 for "
                                         f"f32 values; a transposed C of other widths in parts of one multiple of 8 "
                                         f"but the last); got {c_parts} for bn={bn}")
        if epilogue == "rows" and c_slots != 1:
            raise ConfigError("c_slots", f"epilogue='rows' stages its parts through one block a consumer (c_slots=1); "
                                         f"got c_slots={c_slots}")
        if c_slots not in (1, 2) or (c_slots == 2 and c_parts == 1):
            raise ConfigError("c_slots", f"c_slots must be 1, or 2 with c_parts > 1 (the parts go through the two in "
                                         f"turn: give c_parts too); got {c_slots} with c_parts={c_parts}")
        self.c_parts, self.c_slots = c_parts, c_slots
        #: the columns of each part (all alike but a transposed C's last, see ``c_parts``)
        self.c_widths = widths(c_parts)
        #: columns of one TMA store box of C: 64 (128-byte swizzled blocks; 32 of f32 values), or a
        #: narrow tile's whole part (unswizzled rows of 2 bn bytes); transposed, the rows of C^T's
        #: boxes: 64, or the largest that divides every part (8 for 152 columns in parts of 80 and 72)
        if c_transposed:
            self.c_box = math.gcd(64, *self.c_widths)
        else:
            self.c_box = 32 if f32_out else 64 if (bn // c_parts) % 64 == 0 else bn // c_parts
        self.c_bytes = c_bytes(c_parts, c_slots)
        self.x_bytes = ClusterSplitK.bytes_for(bn) if cluster_k == 2 else 0  # the K halves' exchange buffer
        budget = smem - self.c_bytes - self.x_bytes
        if stages is None:
            stages = min(DEFAULT_STAGES.get((bm, bn), NARROW_STAGES if bn % 64 else 4), budget // self.stage_bytes)
        if stages < 2 or stages * self.stage_bytes > budget:
            most = budget // self.stage_bytes
            fits = f"2 to {most}" if most >= 2 else "2, which does not fit either"
            raise ConfigError("stages", f"stages must be {fits} for a {bm}x{bn} tile ({self.stage_bytes} B each + "
                                        f"{self.c_bytes + self.x_bytes} B of C tile and exchange buffer in 227 KiB "
                                        f"of shared memory); got {stages}")
        self.stages = stages
        self.smem_bytes = self.stages * self.stage_bytes + self.c_bytes + self.x_bytes
        # setmaxnreg moves registers between the warpgroups of one CTA: .dec returns them to
        # the CTA's pool and .inc waits until the pool has enough. The pool is what the CTA
        # was launched with, (launch-bound registers per thread) x (threads), so a split
        # that asks for more than that hangs (measured on an H100: 48 + 2 x 232 with 384
        # threads of 168 registers, 504 per thread slot, never got past setmaxnreg.inc).
        self.regs_per_slot = self.launch_regs() * (self.consumers + 1)
        if producer_regs is None:
            # A cluster of 4 with MN-major B needs 8 more for the producer's addresses (with
            # 40, ptxas spills 24-32 bytes). With split-K ptxas spills 136-140 bytes in the
            # producer at 40 for one consumer or the direct epilogue (56 is clean), and 48 bytes
            # in the consumers of 128x256 with the TMA epilogue at 56 (224 each; 40 is clean).
            if self.uses_workspace and (self.consumers == 1 or epilogue != "tma") or cluster_k == 2:
                producer_regs = 56  # (cluster_k: with 40 or 48 the producer's walk spills 112 / 48 bytes)
            elif self.blocks == 2 and cluster == 1:
                # Consumers of 128 rows hold two accumulators: 240 registers each (at 232 a
                # 256 x 168 tile spilled 88 bytes); the producer's walk fits in 24.
                producer_regs = 24
            else:
                producer_regs = 48 if cluster == 4 and b_major == "MN" else 40
        if consumer_regs is None:
            consumer_regs = min(240, (self.regs_per_slot - producer_regs) // self.consumers // 8 * 8)
        for name, regs in (("producer_regs", producer_regs), ("consumer_regs", consumer_regs)):
            if regs % 8 or not 24 <= regs <= 256:  # setmaxnreg's operand
                raise ConfigError(name, f"{name} must be a multiple of 8 from 24 to 256 (setmaxnreg); got {regs}")
        if producer_regs + self.consumers * consumer_regs > self.regs_per_slot:
            raise ConfigError(
                "consumer_regs",
                f"setmaxnreg split needs {producer_regs} + {self.consumers} x {consumer_regs} registers per "
                f"thread slot; a CTA of {self.threads} threads has {self.regs_per_slot} "
                f"({self.launch_regs()} per thread)"
            )
        self.producer_regs, self.consumer_regs = producer_regs, consumer_regs

    def launch_regs(self):
        """Registers per thread a CTA of ``threads`` gets with one CTA per SM (64K register
        file, 8-register granularity, at most 255 addressable)."""
        return launch_regs(self.threads)

    def key(self):
        return (self.kind, self.bm, self.bn, self.stages, self.group_m, self.scaled,
                self.producer_regs, self.consumer_regs, self.a_major, self.b_major, self.out, self.epilogue,
                self.c_parts, self.cluster, self.split, self.stream_k, self.cluster_k, self.consumers,
                self.c_transposed, self.c_slots, self.bias, self.act, self.bias_type, self.with_c, self.user,
                self.extras, self.user_t, self.amax, self.multicast) + (
            (self.batched, self.broadcast, self.b_tail, self.a_tail) + ((True,) if self.trace else ())
            if self.b_tail or self.a_tail or self.trace else
            ((True,) if self.batched else ()) + ((self.broadcast,) if self.broadcast else ()))  # (as before otherwise)

    def __repr__(self):
        return (f"GemmConfig({self.kind}, {self.bm}x{self.bn}x{self.bk}, stages={self.stages}, "
                f"consumers={self.consumers}, {self.a_major}/{self.b_major}-major, epilogue={self.epilogue}"
                f"{'/' + str(self.c_parts) if self.epilogue != 'direct' else ''}"
                f"{' in 2 slots' if self.c_slots == 2 else ''}"
                f"{', cluster=' + str(self.cluster) if self.cluster > 1 else ''}"
                f"{' sharing A' if self.multicast == 'A' else ''}"
                f"{', split=' + str(self.split) if self.split > 1 else ''}"
                f"{', stream_k' if self.stream_k else ''}{', cluster_k=2' if self.cluster_k == 2 else ''}"
                f"{', 128 rows each' if self.blocks == 2 else ''}{', C transposed' if self.c_transposed else ''}"
                f"{', batched' if self.batched else ''}{', B tail map' if self.b_tail else ''}{', A tail map' if self.a_tail else ''}{' over one ' + self.broadcast if self.broadcast else ''}{', traced' if self.trace else ''}"
                f"{', ' + self.bias_type + ' bias per ' + self.bias if self.bias else ''}{', beta * C' if self.with_c else ''}{', ' + self.act if self.act else ''}"
                f"{', epilogue ' + getattr(self.user, '__name__', '?') if self.user else ''})")
