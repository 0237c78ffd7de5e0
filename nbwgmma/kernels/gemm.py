"""The library GEMM: persistent, warp-specialized, TMA + wgmma, written with nbwgmma.

``C[M, N] = alpha * A[M, K] @ B[N, K]^T``, any M, N, K. Each operand reaches the
kernel K-major (K contiguous) or, for 16-bit types, MN-major (a column-major A, a
row-major B of ``a @ b``): the tile lands in shared memory as TMA wrote it and
wgmma's transpose bit reads it, so no layout costs a copy.

One CTA per SM loops over output tiles of BM x BN (grouped order, so CTAs
running together share A rows and B columns in L2). Its warpgroups:

* warpgroup 0, the producer, gives registers back (``setmaxnreg.dec``) and one
  thread streams A and B boxes of BK = 128 bytes of K through a ring of
  ``stages`` shared-memory slots with TMA (128-byte swizzle), each slot guarded
  by a "full" mbarrier (transaction bytes) and an "empty" one (consumer
  releases);
* warpgroups 1.. (the consumers) take more registers (``setmaxnreg.inc``); each
  owns 64 rows of the tile and issues m64nBNkK wgmmas straight from the swizzled
  slots, keeping one wgmma group in flight, then writes its accumulator to C.

Epilogues: "tma" converts the fragment to 16-bit pairs, writes it with
``stmatrix`` into a 128B-swizzled shared tile (one per consumer) and hands it to
TMA stores; the consumer goes straight on to its next tile and only waits for
those stores to have *read* the tile before it writes the tile again. "direct"
stores each value to global memory (any output type or strides).

Clusters (``cluster`` > 1): CTAs of a cluster take vertically adjacent tiles of one
column at a time; each loads its share of the common B tile with a multicast TMA
into every CTA's slot, so a stage's "full" barrier collects A's bytes and all the
shares, and its "empty" barrier waits for the consumers of every CTA of the cluster
(remote ``mbarrier.arrive`` through ``mapa``) before the slot is refilled.

Tails: TMA fills out-of-bounds elements of A and B with zeros, which add
nothing; TMA stores clip at C's edges, and the direct stores skip elements
outside C.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from ..intrinsics import (
    acc_add_strided, acc_scale, acc_stmatrix_swizzled, acc_stmatrix_transposed, acc_store, acc_store_strided,
    acc_to_bf16x2, acc_to_f16x2, acc_zeros, bulk_commit_group, bulk_wait_group, bulk_wait_group_read, cluster_ctarank, cluster_sync,
    dynamic_smem_base, fence_proxy_async_shared, named_barrier_sync, setmaxnreg_dec, setmaxnreg_inc, smem_addr,
    tma_store_2d,
)
from ..errors import ConfigError
from ..layout.kinds import wgmma_kind
from ..layout.wgmma_model import ELEMENT_BYTES
from ..kit.cluster_k import ClusterSplitK
from ..kit.cooperative import Cooperative
from ..kit.device import inlined
from ..kit.pipeline import TmaPipeline, check_b_shares
from ..kit.scheduler import TileScheduler, stream_owner, stream_range, stream_segment
from ..kit.warpgroup import launch_regs, warpgroup_sync

__all__ = ["GemmConfig", "gemm_kernel", "DEFAULT_STAGES", "NARROW_STAGES"]

_OUT_BYTES = {"bf16": 2, "f16": 2, "f32": 4}
#: Default stages per (bm, bn) where more than 4 pay: 128 x 128 tiles (32 KiB stages) with 6
#: ran 3-9% faster than with 4 on an H100 at 384-2048 rows, 16-bit and fp8, long K most
#: (BENCHMARKS.md, 2026-11-25); narrow tiles (a width that is not a multiple of 64) take as many
#: as fit up to :data:`NARROW_STAGES`; other tiles fit at most 4 beside their C tile.
DEFAULT_STAGES = {(128, 128): 6}
NARROW_STAGES = 8


class GemmConfig:
    """Compile-time parameters of one GEMM kernel.

    ``a_major``/``b_major`` say how A [M, K] and B [N, K] sit in global memory: "K"
    (K contiguous) or "MN" (M resp. N contiguous: a column-major A, a row-major B of
    ``a @ b``); "MN" exists for 16-bit inputs only (wgmma's transpose bits).
    ``epilogue`` "tma" writes C through a swizzled shared tile (``stmatrix``) and TMA
    stores that overlap the next tile's main loop (16-bit outputs); "direct" stores
    the fragments straight to global memory (any output type and strides).
    ``stages`` defaults to the most that fit in shared memory, up to :data:`DEFAULT_STAGES`
    for the tile (6 for 128 x 128, 8 for a width that is not a multiple of 64, 4 otherwise).
    ``cluster`` (1, 2 or 4) launches the CTAs in thread-block clusters of that many along
    M: the cluster works on vertically adjacent tiles that share their B tile, and each
    CTA loads 1/cluster of it and multicasts it to all (less L2 traffic for B).
    ``split`` (1-4) cuts K into that many slices, each a separate work unit (more units
    than tiles for small M x N): every slice writes its f32 partial tile to a workspace,
    and the last one to finish a tile (a per-tile counter) sums the slices in order and
    stores C, so results do not depend on which finished first. The kernel then takes two
    more arguments: ``ws``, a 1-D f32 array of at least ``tiles x split x BM x BN``
    elements, and ``counters``, an int32 array of one zero per tile (each count is reset to zero by
    the tile's last slice, ready for the next launch).
    ``stream_k`` (no clusters, no ``split``) cuts the tiles' k-blocks, in tile order, evenly
    over the CTAs of the grid (stream-K: a problem of few tiles still fills every SM). A CTA
    stores the tiles its share covers whole; a tile shared by several CTAs gets each one's
    partial tile parked in ``ws`` (two slots per CTA: its share's first and last tiles), and the
    CTA that counts last sums them in K order and stores C. The grid must be at most the
    number of k-blocks (``tiles x ceil(K / BK)``); ``ws`` holds ``2 x grid x BM x BN`` f32
    elements, ``counters`` one zero per tile, as for ``split``.
    ``cluster_k`` = 2 (128-row tiles, no ``cluster``, ``split`` or ``stream_k``) launches clusters
    of two CTAs that take the same tile, each half of its k-blocks, and sum the halves through
    distributed shared memory (:class:`~nbwgmma.kit.ClusterSplitK`): twice the work units of
    the tiles without split-K's global workspace; each CTA keeps a ``64 x bn`` f32 exchange
    buffer in shared memory (fewer stages).
    ``producer_regs``/``consumer_regs`` split the CTA's registers with ``setmaxnreg``
    (default 40 for the producer, 48 for a cluster of 4 with MN-major B, 56 for some split-K kernels and
    for ``cluster_k``; the rest shared
    out among the consumers, at most 240 each).
    """

    def __init__(self, kind="f32.bf16.bf16", bm=128, bn=256, stages=None, group_m=8, scaled=False,
                 producer_regs=None, consumer_regs=None, a_major="K", b_major="K", out="bf16",
                 epilogue="direct", c_parts=None, cluster=1, split=1, stream_k=0, cluster_k=1, consumers=None,
                 c_transposed=False):
        self.kind = kind
        self.k = wgmma_kind(kind)
        if self.k.dtype != "f32":
            raise ConfigError("kind", f"the GEMM accumulates in f32; got {kind}")
        if bm % 64 or not 64 <= bm <= 256:
            raise ConfigError("bm", f"bm must be 64, 128, 192 or 256; got {bm}")
        if epilogue not in ("tma", "direct"):
            raise ConfigError("epilogue", f"epilogue must be 'tma' or 'direct'; got {epilogue!r}")
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
        if c_transposed and (epilogue != "tma" or bn % 64):
            raise ConfigError("epilogue", f"a transposed C (swapped products) goes out through the TMA epilogue in "
                                          f"64 x 64 blocks: bn a multiple of 64; got epilogue={epilogue!r}, bn={bn}")
        #: the TMA epilogue stores each consumer's 64 x bn block transposed (C^T's 64 x 64 boxes)
        self.c_transposed = bool(c_transposed)
        if out not in _OUT_BYTES:
            raise ConfigError("out", f"out must be one of {sorted(_OUT_BYTES)}; got {out!r}")
        if epilogue == "tma" and _OUT_BYTES[out] != 2:
            raise ConfigError("epilogue", f"the TMA epilogue stores 16-bit outputs; got out={out}")
        if cluster not in (1, 2, 4):
            raise ConfigError("cluster", f"cluster must be 1, 2 or 4 CTAs; got {cluster}")
        try:
            check_b_shares("GemmConfig", bn, b_major, cluster)
        except ValueError as e:
            raise ConfigError("cluster", str(e)) from None
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
        if cluster_k == 2 and (bm != 128 or cluster > 1 or split > 1 or stream_k):
            raise ConfigError("cluster_k", f"cluster_k=2 takes 128-row tiles and no cluster, split or stream_k (each "
                                           f"CTA keeps one consumer's 64 rows); got bm={bm}, cluster={cluster}, "
                                           f"split={split}, stream_k={stream_k}")
        if cluster_k == 2 and epilogue == "direct" and bn > 192:
            raise ConfigError("cluster_k", f"cluster_k=2 with the direct epilogue takes tiles of at most 192 columns "
                                           f"(at 256 the consumers spill 24-32 bytes); got bn={bn}")
        self.cluster_k = cluster_k
        if consumers is None:  # 256 rows: two consumers of 128 (four of 64 spill and ran slower)
            consumers = 2 if bm == 256 and split == 1 and not stream_k and cluster_k == 1 else bm // 64
        if consumers not in (bm // 64, bm // 128) or consumers < 1:
            raise ConfigError("consumers", f"consumers (warpgroups sharing the tile) must be bm / 64 or bm / 128 "
                                           f"(64 or 128 rows each); got {consumers} for bm={bm}")
        #: 64-row blocks per consumer warpgroup (2: 128 rows each, two accumulators)
        self.blocks = bm // 64 // consumers
        if self.blocks == 2 and (split > 1 or stream_k or cluster_k > 1):
            raise ConfigError("consumers", f"consumers of 128 rows work without split, stream_k or cluster_k; got "
                                           f"split={split}, stream_k={stream_k}, cluster_k={cluster_k}")
        #: CTAs per launched cluster (clusters along M times the K halves)
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
        self.consumers = consumers
        self.threads = 128 * (self.consumers + 1)
        self.a_bytes = bm * 128
        self.b_bytes = bn * 128
        self.stage_bytes = self.a_bytes + self.b_bytes
        # Each consumer's C tile: 64 rows x BN / c_parts columns as 64-column (128-byte)
        # swizzled blocks (or unswizzled rows of a narrow tile); with c_parts = 2 the tile goes
        # out in two halves through half the shared memory, which leaves room for a fourth stage
        # at BN = 256 (and 224: 128 x 224 with 4 stages 1.03-1.05x faster than with 3 on an H100).
        smem = 227 * 1024 - 1023 - 64  # opt-in limit, alignment slack, the barriers

        def c_bytes(parts):
            return self.consumers * 64 * (bn // parts) * 2 if epilogue == "tma" else 0

        if c_parts is None:
            halves = bn % 128 == 0 or (bn % 64 and bn % 16 == 0 and not c_transposed)
            fits = [(smem - c_bytes(p)) // self.stage_bytes for p in (1, 2)]
            c_parts = 2 if epilogue == "tma" and halves and fits[0] < 4 and fits[1] > fits[0] else 1
        # halves of 64-column multiples (swizzled blocks), or of 8-column multiples (unswizzled boxes)
        if c_parts not in (1, 2) or (epilogue == "tma" and c_parts == 2 and (bn // 2) % 64
                                     and (bn % 16 or c_transposed)):
            raise ConfigError("c_parts", f"c_parts must be 1, or 2 with BN / 2 a multiple of 8 (64 for a transposed "
                                         f"C); got {c_parts} for bn={bn}")
        self.c_parts = c_parts
        #: columns of one TMA store box of C: 64 (128-byte swizzled blocks), or a narrow tile's
        #: whole part (unswizzled rows of 2 bn bytes)
        self.c_box = 64 if (bn // c_parts) % 64 == 0 else bn // c_parts
        self.c_bytes = c_bytes(c_parts)
        self.x_bytes = ClusterSplitK(bn).buffer_bytes if cluster_k == 2 else 0  # the K halves' exchange buffer
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
            if self.uses_workspace and (self.consumers == 1 or epilogue == "direct") or cluster_k == 2:
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
                self.c_transposed)

    def __repr__(self):
        return (f"GemmConfig({self.kind}, {self.bm}x{self.bn}x{self.bk}, stages={self.stages}, "
                f"consumers={self.consumers}, {self.a_major}/{self.b_major}-major, epilogue={self.epilogue}"
                f"{'/' + str(self.c_parts) if self.epilogue == 'tma' else ''}"
                f"{', cluster=' + str(self.cluster) if self.cluster > 1 else ''}"
                f"{', split=' + str(self.split) if self.split > 1 else ''}"
                f"{', stream_k' if self.stream_k else ''}{', cluster_k=2' if self.cluster_k == 2 else ''}"
                f"{', 128 rows each' if self.blocks == 2 else ''}{', C transposed' if self.c_transposed else ''})")


@functools.lru_cache(maxsize=None)
def _build(key):
    cfg = GemmConfig(*key)
    KIND, BM, BN, BK = cfg.kind, cfg.bm, cfg.bn, cfg.bk
    STAGES, GROUP_M, NCONS = cfg.stages, cfg.group_m, cfg.consumers
    assert BK // cfg.k.k == 4
    A_BYTES, STAGE_BYTES = cfg.a_bytes, cfg.stage_bytes
    SCALED = cfg.scaled
    PREGS, CREGS = cfg.producer_regs, cfg.consumer_regs
    TMA_EPI = cfg.epilogue == "tma"
    C_OFF = STAGES * STAGE_BYTES
    PART_COLS = BN // cfg.c_parts
    C_CONS = 64 * PART_COLS * 2
    PART_REGS = PART_COLS // 4  # packed 16-bit registers per part
    SWIZZLED_C = cfg.c_box == 64  # else one unswizzled (64, PART_COLS) box: a narrow tile
    ROW_BYTES_C = 2 * PART_COLS
    C_T = cfg.c_transposed
    BF16_OUT = cfg.out == "bf16"
    CL = cfg.cluster
    pipe = TmaPipeline(STAGES, NCONS, cluster=CL)
    coop = Cooperative(KIND, pipe, BM, BN, a_major=cfg.a_major, b_major=cfg.b_major, blocks=cfg.blocks)
    CROWS = 64 * cfg.blocks  # rows of the tile per consumer
    KC = cfg.cluster_k
    sched = TileScheduler(BM, BN, BK, group_m=GROUP_M, cluster=CL, split=cfg.split, cluster_k=KC)
    ck = ClusterSplitK(BN)
    X_OFF = C_OFF + cfg.c_bytes  # the K halves' exchange buffer (cluster_k = 2)
    XBARS = ck.barrier_words
    NBARS = pipe.barrier_words
    B_PART_ROWS = BN // CL  # rows of B (N) per CTA
    B_PART_BYTES = coop.b_share_bytes  # their bytes in the slot, in either layout
    SPLIT = cfg.split
    STREAM = cfg.stream_k
    ALL_CONS = 128 * NCONS  # threads of the consumer warpgroups
    TILE_FLOATS = BM * BN
    CONS_FLOATS = 64 * BN

    @inlined
    def store_direct(acc, c, ctid, cw, row0, col0, cbase):
        acc_store(acc, KIND, c, ctid, row0, col0)

    @inlined
    def put_part(regs, tmap_c, ctid, cw, row0, col0, cbase):
        # The previous TMA stores must have read the C tile before it is rewritten.
        if ctid == 0:
            bulk_wait_group_read(0)
        warpgroup_sync(cw)
        if C_T:  # C^T's 64 x 64 blocks, one per 64 columns, stacked (the stored rows are C's columns)
            acc_stmatrix_transposed(regs, cbase, ctid)
        elif SWIZZLED_C:
            acc_stmatrix_swizzled(regs, cbase, ctid, 128, "128B")
        else:
            acc_stmatrix_swizzled(regs, cbase, ctid, ROW_BYTES_C, "none")
        # Generic-proxy writes of every thread become visible to the TMA unit.
        fence_proxy_async_shared()
        warpgroup_sync(cw)
        if ctid == 0:
            if C_T:
                for j in range(PART_COLS // 64):
                    tma_store_2d(cbase + j * 8192, tmap_c, row0, col0 + j * 64)
            elif SWIZZLED_C:
                for j in range(PART_COLS // 64):
                    tma_store_2d(cbase + j * 8192, tmap_c, col0 + j * 64, row0)
            else:
                tma_store_2d(cbase, tmap_c, col0, row0)
            bulk_commit_group()

    @inlined
    def packed(acc):
        if BF16_OUT:
            return acc_to_bf16x2(acc)
        return acc_to_f16x2(acc)

    @inlined
    def store_tma1(acc, tmap_c, ctid, cw, row0, col0, cbase):
        put_part(packed(acc), tmap_c, ctid, cw, row0, col0, cbase)

    @inlined
    def store_tma2(acc, tmap_c, ctid, cw, row0, col0, cbase):
        regs = packed(acc)
        put_part(regs[:PART_REGS], tmap_c, ctid, cw, row0, col0, cbase)
        put_part(regs[PART_REGS:], tmap_c, ctid, cw, row0, col0 + PART_COLS, cbase)

    store = (store_tma1 if cfg.c_parts == 1 else store_tma2) if TMA_EPI else store_direct

    @inlined
    def finish_tile(acc, c, ws, counters, flag, tid, ctid, cw, t, sp, nsplit, row0, col0, cbase, m):
        store(acc, c, ctid, cw, row0, col0, cbase)

    @inlined
    def counted_last(counters, t, others, flag, tid, add=1):
        """After the CTA's part of tile ``t`` is parked: count it; True in every consumer
        thread of the CTA whose count completes the tile (``others`` parts counted before),
        which resets the count for the next launch. With ``add=0`` (stream-K, the CTA holding
        the tile's first k-blocks, its part still in its registers) only read the count: True
        where the other CTAs' ``others`` parts have all counted (reset too). Nothing waits."""
        if add:
            cuda.threadfence()  # the part is visible GPU-wide before the count says so
        named_barrier_sync(5, ALL_CONS)  # (also: every consumer read the previous answer)
        if tid == 128:
            is_last = cuda.atomic.add(counters, t, add) == others  # (add 0: an atomic read, from L2)
            if is_last:
                counters[t] = 0  # every part has counted: ready for the next launch
            flag[0] = 1 if is_last else 0
        named_barrier_sync(5, ALL_CONS)
        last = flag[0] != 0
        if last:
            cuda.threadfence()
        return last

    @inlined
    def finish_slice(acc, c, ws, counters, flag, tid, ctid, cw, t, sp, nsplit, row0, col0, cbase, m):
        """Split-K: park this slice's partial tile in ``ws``; the tile's last slice sums all
        of them in slice order (deterministic) and stores C."""
        last = True
        if nsplit > 1:
            # Slice s of tile t: BM x BN floats at (t * nsplit + s) * TILE_FLOATS, each
            # consumer's fragments as rows of 128 threads (coalesced; read back by the same
            # thread layout). A warp holds 16 rows of the fragment: one whose rows all lie
            # past M (a small M's padding) neither parks nor sums anything.
            mine = (t * nsplit) * TILE_FLOATS + cw * CONS_FLOATS + ctid
            real = 16 * (ctid // 32) < m - row0
            if real:
                acc_store_strided(acc, ws, mine + sp * TILE_FLOATS, 128)
            last = counted_last(counters, t, nsplit - 1, flag, tid)
            if last:
                acc = acc_zeros(KIND, BN)
                if real:
                    for s in range(nsplit):  # 0 + p0 + p1 + ...: the same sum whichever slice is last
                        acc = acc_add_strided(acc, ws, mine + s * TILE_FLOATS, 128)
        if last:
            store(acc, c, ctid, cw, row0, col0, cbase)

    finish = finish_slice if SPLIT > 1 else finish_tile

    @inlined
    def finish_one(acc, alpha, c, ws, counters, flag, tid, ctid, cw, t, sp, nsplit, row0, col0, cbase, m):
        if SCALED:
            acc = acc_scale(acc, alpha)
        finish(acc, c, ws, counters, flag, tid, ctid, cw, t, sp, nsplit, row0, col0, cbase, m)

    @inlined
    def finish_two(accs, alpha, c, ws, counters, flag, tid, ctid, cw, t, sp, nsplit, row0, col0, cbase, m):
        """A consumer of 128 rows: its two 64-row blocks, one after the other (through the same C
        tile in shared memory, which the TMA epilogue waits to have been read before rewriting)."""
        acc0, acc1 = accs
        finish_one(acc0, alpha, c, ws, counters, flag, tid, ctid, cw, t, sp, nsplit, row0, col0, cbase, m)
        finish_one(acc1, alpha, c, ws, counters, flag, tid, ctid, cw, t, sp, nsplit, row0 + 64, col0, cbase, m)

    finish_blocks = finish_one if cfg.blocks == 1 else finish_two

    @inlined
    def finish_stream(acc, c, ws, counters, flag, tid, ctid, cw, t, cta, ctas, total, kblocks, first_seg, whole, row0,
                      col0, cbase, m):
        """Stream-K: a tile this CTA's share covers whole is stored. A tile shared by CTAs
        ``c0 .. c1`` is finished by ``c0``, which reaches its first k-blocks at the end of its
        share, after the others parked their parts at the start of theirs: where all have
        counted it adds them, in K order, to its own accumulator and stores C, parking
        nothing. Otherwise (``c0`` came early, or this is another CTA) the part is parked in
        the CTA's slot (0: its share's first tile, 1: its last) and the tile's last CTA to
        count sums every part in K order and stores C. Either way the sum is the same."""
        last = whole
        if not whole:
            real = 16 * (ctid // 32) < m - row0  # (a warp of padding rows parks and sums nothing)
            c0 = stream_owner(t * kblocks, ctas, total)
            c1 = stream_owner((t + 1) * kblocks - 1, ctas, total)
            done = False
            if cta == c0:
                done = counted_last(counters, t, c1 - c0, flag, tid, 0)
            if done:
                last = True
                if real:
                    for o in range(c0 + 1, c1 + 1):  # the others' first tile is t: slot 0
                        acc = acc_add_strided(acc, ws, 2 * o * TILE_FLOATS + cw * CONS_FLOATS + ctid, 128)
            else:
                slot = 2 * cta + (0 if first_seg else 1)
                if real:
                    acc_store_strided(acc, ws, slot * TILE_FLOATS + cw * CONS_FLOATS + ctid, 128)
                last = counted_last(counters, t, c1 - c0, flag, tid)
                if last:
                    acc = acc_zeros(KIND, BN)
                    if real:
                        for o in range(c0, c1 + 1):  # 0 + part of c0 + part of c0 + 1 + ...
                            # the part's slot: 0 where tile t is the first of CTA o's share
                            first_of_o = stream_range(o, ctas, total)[0] // kblocks == t
                            acc = acc_add_strided(acc, ws, (2 * o + (0 if first_of_o else 1)) * TILE_FLOATS
                                                  + cw * CONS_FLOATS + ctid, 128)
        if last:
            store(acc, c, ctid, cw, row0, col0, cbase)

    @inlined
    def body(tmap_a, tmap_b, c, m, n, k, alpha, ws, counters):
        dyn = cuda.shared.array(0, np.uint8)
        bars = cuda.shared.array(NBARS, np.uint64)
        flag = cuda.shared.array(1, np.int32)
        xb = cuda.shared.array(XBARS, np.uint64)
        base = dynamic_smem_base(dyn, 1024)
        ring = smem_addr(bars)
        xbars = smem_addr(xb)
        tid = cuda.threadIdx.x
        wg = tid // 128
        if tid == 0:
            pipe.init(ring)
            if KC > 1:
                ck.init(xbars)
        if CL * KC == 1:
            cuda.syncthreads()
        else:
            cluster_sync()  # the peers' barriers are initialized before anyone uses them
        rank = cluster_ctarank() if CL > 1 else 0  # the CTA's row in a cluster along M
        half = cluster_ctarank() if KC > 1 else 0  # the CTA's half of K (cluster_k)

        # A cluster of CL CTAs takes CL vertically adjacent tiles at a time (one "cluster tile");
        # work units are (tile, K slice), a tile's slices neighbours, so they run together.
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        first = sched.first()
        step = sched.step()

        if wg == 0:
            setmaxnreg_dec(PREGS)
            if tid == 0:
                b_dst = A_BYTES + rank * B_PART_BYTES
                # One k-block count, slot and phase derived from it (the consumers advance the
                # two as counters; here those cost ptxas an 8-byte spill in the producer's 40
                # registers with clusters).
                it = 0
                if STREAM:  # this CTA's share of the tiles' k-blocks, tile by tile
                    total = tiles_m * tiles_n * kblocks
                    g, g1 = stream_range(cuda.blockIdx.x, cuda.gridDim.x, total)
                    while g < g1:
                        t, kb0, kb1 = stream_segment(g, g1, kblocks)
                        pm, pn = sched.tile(t, tiles_mc, tiles_n, 0)
                        for kb in range(kb0, kb1):
                            s, ph = pipe.stage_of(it)
                            full = pipe.producer_acquire(ring, s, ph, STAGE_BYTES)
                            coop.load(base + s * STAGE_BYTES, full, tmap_a, tmap_b, kb * BK, pm * BM, pn * BN, b_dst)
                            it += 1
                        g += kb1 - kb0
                else:
                    for u in range(first, nunits, step):
                        t, sp = sched.split_unit(u, nsplit)
                        pm, pn = sched.tile(t, tiles_mc, tiles_n, rank)
                        # Past M's last tile (tiles_m not a multiple of CL) a CTA still loads and
                        # multicasts its share of B for its peers; its own A rows are a copy.
                        if pm >= tiles_m:
                            pm = tiles_m - 1
                        b_row = pn * BN + rank * B_PART_ROWS
                        kb0, kb1 = sched.k_range(sp, kblocks, nsplit)
                        if KC > 1:  # this CTA's half of the tile's k-blocks (the peer loads the same rows)
                            kb0, kb1 = ck.k_half(kblocks, half)
                        for kb in range(kb0, kb1):
                            s, ph = pipe.stage_of(it)
                            full = pipe.producer_acquire(ring, s, ph, STAGE_BYTES)
                            coop.load(base + s * STAGE_BYTES, full, tmap_a, tmap_b, kb * BK, pm * BM, b_row, b_dst)
                            it += 1
            elif CL > 1:
                # The idle threads leave now: waiting at the closing cluster barrier beside the
                # producer thread of their warp, they slowed its loop (clusters 12-20% slower on an
                # H100). (With cluster_k they made no difference, and leaving made ptxas spill.)
                return
        else:
            setmaxnreg_inc(CREGS)
            cw = wg - 1
            ctid = tid % 128
            cbase = base + C_OFF + cw * C_CONS
            s = 0  # the slot of the next k-block, and the parity of its "full" phase
            ph = 0
            if STREAM:
                total = tiles_m * tiles_n * kblocks
                cta, ctas = cuda.blockIdx.x, cuda.gridDim.x
                g0, g1 = stream_range(cta, ctas, total)
                g = g0
                while g < g1:
                    t, kb0, kb1 = stream_segment(g, g1, kblocks)
                    pm, pn = sched.tile(t, tiles_mc, tiles_n, 0)
                    acc, s, ph = coop.tile(ring, base, s, ph, kb0, kb1, cw, ctid)
                    if SCALED:
                        acc = acc_scale(acc, alpha)
                    finish_stream(acc, c, ws, counters, flag, tid, ctid, cw, t, cta, ctas, total, kblocks, g == g0,
                                  kb0 == 0 and kb1 == kblocks, pm * BM + cw * 64, pn * BN, cbase, m)
                    g += kb1 - kb0
            elif KC > 1:
                kb0, kb1 = ck.k_half(kblocks, half)
                j = 0  # this CTA's tiles so far: the exchange barriers' phase
                for u in range(first, nunits, step):
                    pm, pn = sched.tile(u, tiles_mc, tiles_n, 0)
                    if kb1 > kb0:
                        acc, s, ph = coop.tile(ring, base, s, ph, kb0, kb1, cw, ctid)
                    else:  # K of one block: rank 0's half is empty
                        acc = acc_zeros(KIND, BN)
                    acc, keep = ck.exchange(acc, base + X_OFF, xbars, j, cw, ctid, half)
                    if keep:
                        if SCALED:
                            acc = acc_scale(acc, alpha)
                        store(acc, c, ctid, cw, pm * BM + cw * 64, pn * BN, cbase)
                    j += 1
            else:
                for u in range(first, nunits, step):
                    t, sp = sched.split_unit(u, nsplit)
                    pm, pn = sched.tile(t, tiles_mc, tiles_n, rank)
                    kb0, kb1 = sched.k_range(sp, kblocks, nsplit)
                    acc, s, ph = coop.tile(ring, base, s, ph, kb0, kb1, cw, ctid)
                    if pm < tiles_m:
                        finish_blocks(acc, alpha, c, ws, counters, flag, tid, ctid, cw, t, sp, nsplit,
                                      pm * BM + cw * CROWS, pn * BN, cbase, m)
            if TMA_EPI and ctid == 0:
                bulk_wait_group(0)
        if CL * KC > 1:
            # No CTA leaves while a peer may still arrive on its barriers (or send into its buffer);
            # not .aligned: of the producer's warp only its one thread may be left.
            cluster_sync(False)

    if SPLIT == 1 and not STREAM:
        @cuda.jit(launch_bounds=(cfg.threads, 1))
        def gemm(tmap_a, tmap_b, c, m, n, k, alpha):
            body(tmap_a, tmap_b, c, m, n, k, alpha, c, m)  # no workspace: unused stand-ins
    else:
        @cuda.jit(launch_bounds=(cfg.threads, 1))
        def gemm(tmap_a, tmap_b, c, m, n, k, alpha, ws, counters):
            body(tmap_a, tmap_b, c, m, n, k, alpha, ws, counters)

    return gemm


def gemm_kernel(cfg: GemmConfig):
    """The ``@cuda.jit`` kernel for ``cfg`` (compiled once per configuration)."""
    return _build(cfg.key())
