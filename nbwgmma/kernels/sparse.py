"""The 2:4-sparse GEMM: ``D[M, N] = W[M, K] @ B[N, K]^T`` with W 2:4 sparse, written with the kit.

W is the sparse A operand of ``wgmma.mma_async.sp`` (PTX ISA, "wgmma.mma_async.sp"), given as
its compressed values [M, K/2] and its metadata registers
(:mod:`nbwgmma.layout.sparse_gemm`); B is dense, K contiguous (``b_major="K"``: the
activations ``x`` [tokens, K] of ``x @ w.T``) or N contiguous (``"MN"``, 16-bit only: a
row-major ``y`` [K, N] of ``w @ y``). D is written into any 2-D array view of the output, so
``x @ w.T`` stores the transposed accumulator (D = out^T, a view with swapped strides).

Persistent and warp-specialized: one CTA per SM (with clusters, as many as fit whole) walks
128 x ``bn`` tiles in grouped order (:class:`~nbwgmma.kit.TileScheduler`), alone or in
clusters of 2 or 4 CTAs along M that share B's tile, each loading its share and multicasting it
to the others (``cluster``); warpgroup 0 gives registers back and one of its threads streams
stages through a ring of ``stages`` slots (:class:`~nbwgmma.kit.TmaPipeline`):
per 128 bytes of dense K, the compressed A (8 KiB), B (``bn`` x 128 bytes) and the metadata of
the tile's two 64-row blocks (1 or 2 KiB). The two consumer warpgroups
(:class:`~nbwgmma.kit.sparse.SparseConsumers`) each issue two m64n``bn``k32 (k64 for fp8) sparse
wgmmas per stage with one group in flight, then store their 64 rows. The sparse wgmma does
twice the math of the dense one per instruction over the same B bytes, so a stage of the same
B bytes lasts half as long; half of A's bytes (and 1/8 of them in metadata) is what the ring
carries for it, which leaves shared memory for 5 stages of 41 KiB.

The epilogue: for ``x @ w.T`` into a row-major out (``out_blocks`` 1 or 2), each consumer's
64 x ``bn`` rows of D = out^T leave as transposed 64 x 64 blocks: ``stmatrix.trans`` into a
shared block (:func:`~nbwgmma.intrinsics.acc_stmatrix_transposed`), then a TMA store into out,
which clips at its edges; the next tile's main loop starts while the store reads. Otherwise
(``out_blocks`` 0) the values go to D's view one by one from the registers (measured on an H100,
the transposed blocks ran 1.13-1.36x faster: BENCHMARKS.md, 2026-11-25).

Tails: TMA fills A, B and the metadata past their edges with zeros (the metadata array is
padded so that no box reaches past it: a zero code is undefined), and the stores skip elements
outside D.
"""

from __future__ import annotations

import functools

from numba import cuda

from ..errors import ConfigError
from ..intrinsics import (acc_stmatrix_transposed, acc_store, acc_to_bf16x2, acc_to_f16x2, bulk_wait_group,
                          bulk_wait_group_read, cluster_ctarank, cluster_sync, setmaxnreg_dec, setmaxnreg_inc)
from ..kit import TileScheduler, TmaPipeline, launch_regs, tile_producer, tma_store_block, warpgroup_sync
from ..kit.sparse import SparseConsumers
from ..launch import dynamic_smem_bytes

__all__ = ["SparseConfig", "sparse_kernel", "THREADS", "TYPES"]

#: Input element types; 16-bit inputs give their own type out, fp8 inputs bf16.
TYPES = ("bf16", "f16", "e4m3", "e5m2")
THREADS = 384
_SMEM_LIMIT = 227 * 1024
_OUT_BLOCK = 64 * 64 * 2  # one transposed 64 x 64 block of 16-bit outputs


class SparseConfig:
    """Compile-time choices of a sparse GEMM: ``dtype`` (the weight's and B's element type),
    ``bn`` (columns of D per CTA tile: 64, 128, 192 or 256), ``b_major`` ("K" or "MN"),
    ``group_m`` (tile rows per group of the walk) and ``stages`` (default: as many as fit,
    at most 6) and ``out_blocks`` (0: D stored from the registers; 1 or 2: transposed 64 x 64
    blocks per consumer through shared memory and TMA stores, ``d`` then the tensor map of
    out = D^T with a 64 x 64 box and the 128-byte swizzle; 2 blocks take turns, for ``bn`` 128
    or 256) and ``cluster`` (1, 2 or 4 CTAs along M sharing B's tile)."""

    def __init__(self, dtype: str = "bf16", bn: int = 256, b_major: str = "K", group_m: int = 8, stages=None,
                 paired: bool = True, out_blocks: int = 0, cluster: int = 1):
        if dtype not in TYPES:
            raise ConfigError("dtype", f"SparseConfig: dtype must be one of {TYPES}; got {dtype!r}")
        if out_blocks not in (0, 1, 2):
            raise ConfigError("out_blocks", f"SparseConfig: out_blocks must be 0 (direct stores), 1 or 2; got {out_blocks!r}")
        if out_blocks == 2 and bn % 128:
            raise ConfigError("bn", f"SparseConfig: two output blocks take turns over a tile's 64-column blocks: bn must be "
                                    f"128 or 256; got bn={bn}")
        self.out_blocks = out_blocks
        if not isinstance(group_m, int) or group_m < 1:
            raise ConfigError("group_m", f"SparseConfig: group_m must be a positive integer; got {group_m!r}")
        self.dtype, self.bn, self.b_major, self.group_m = dtype, bn, b_major, group_m
        self.kind = f"f32.{dtype}.{dtype}"
        self.paired = bool(paired)
        if cluster not in (1, 2, 4):
            raise ConfigError("cluster", f"SparseConfig: cluster must be 1, 2 or 4 CTAs; got {cluster!r}")
        self.cluster = cluster
        probe = SparseConsumers(self.kind, TmaPipeline(2, consumers=2, cluster=cluster), bn=bn, b_major=b_major,
                                paired=self.paired)  # checks the rest
        self.bk, self.stage_bytes, self.meta_regs = probe.bk, probe.stage_bytes, probe.meta_regs
        self.b_rows = probe.b_rows
        self.out_bytes = 2 * out_blocks * _OUT_BLOCK  # each consumer's transposed 64 x 64 blocks
        most = min(6, (_SMEM_LIMIT - 1024 - 64 - self.out_bytes) // self.stage_bytes)
        stages = most if stages is None else stages
        if not isinstance(stages, int) or not 2 <= stages <= most:
            raise ConfigError("stages", f"SparseConfig: stages must be 2 to {most} for stages of {self.stage_bytes} bytes; "
                                        f"got {stages!r}")
        self.stages = stages
        self.smem = dynamic_smem_bytes(stages * self.stage_bytes + self.out_bytes)
        self.sched = TileScheduler(SparseConsumers.BM, bn, self.bk, group_m=group_m, cluster=cluster)

    def key(self):
        return (self.dtype, self.bn, self.b_major, self.group_m, self.stages, self.paired, self.out_blocks,
                self.cluster)

    def grid(self, m: int, n: int, k: int, ctas: int) -> int:
        """CTAs of the persistent grid where ``ctas`` CTAs fit at once (whole clusters)."""
        return self.sched.grid(m, n, k, ctas)

    def __repr__(self):
        return (f"SparseConfig({self.dtype}, 128x{self.bn}x{self.bk}, b_major={self.b_major}, stages={self.stages}, "
                f"group_m={self.group_m}, out_blocks={self.out_blocks}, cluster={self.cluster})")


def sparse_kernel(cfg: SparseConfig):
    """The ``@cuda.jit`` kernel of ``cfg`` (built once per configuration). Its arguments:
    ``(tmap_a, tmap_b, tmap_meta, d, m, n, k, mblocks)``: tensor-map addresses of the compressed
    W [M, K/2] (box 128 x 64 bytes, 64-byte swizzle), of B ([N, K], box ``bn`` x 128 bytes; with
    ``b_major="MN"`` [K, N], box 64 x 64; 128-byte swizzle) and of the metadata (int32
    [kblocks * mblocks, R * 128], box 2 x R * 128, no swizzle); ``d`` the 2-D output [M, N] (any
    strides; bf16 as uint16 bits), or with ``cfg.out_blocks`` the tensor-map address of out =
    D^T (box 64 x 64, 128-byte swizzle); int32 sizes and ``mblocks``, the metadata's 64-row blocks.
    Launch it with :data:`THREADS` threads, ``cfg.smem`` bytes of dynamic shared memory and
    ``cfg.grid(...)`` CTAs (in clusters of ``(cfg.cluster, 1, 1)``); B's box has
    ``cfg.b_rows`` rows."""
    return _build(cfg.key())


@functools.lru_cache(maxsize=None)
def _build(key):
    cfg = SparseConfig(*key)
    KIND, BM, BN = cfg.kind, SparseConsumers.BM, cfg.bn
    CL = cfg.cluster
    pipe = TmaPipeline(cfg.stages, consumers=2, cluster=CL)
    # Registers per thread: a producer warpgroup's and two consumers' counts must fit the launch's
    # pool (168 x 384). With clusters the producer's walk over its rank's tiles takes 56
    # registers (64 with MN-major B; 40 or 48 spill).
    PRODUCER_REGS = 40 if CL == 1 else 64 if cfg.b_major == "MN" else 56
    CONSUMER_REGS = (launch_regs(THREADS) * THREADS // 128 - PRODUCER_REGS) // 2 // 8 * 8
    sc = SparseConsumers(KIND, pipe, bn=BN, b_major=cfg.b_major, paired=cfg.paired)
    sched = cfg.sched
    STAGE = sc.stage_bytes

    @cuda.jit(device=True, inline=True)
    def load(slot, full, kb, tm, tn, args):  # the producer's TMA loads of one stage
        tmap_a, tmap_b, tmap_meta, mblocks = args
        a_row = tm * BM
        if a_row >= mblocks * 64:  # past M's last tile in a cluster: a copy of the last one's A
            a_row = (mblocks - 1) // 2 * BM
        sc.load(slot, full, tmap_a, tmap_b, tmap_meta, kb, a_row, tn * BN, mblocks,
                cluster_ctarank() if CL > 1 else 0)

    produce = tile_producer(pipe, sched, STAGE, load)

    OUT_BLOCKS = cfg.out_blocks
    OUT_OFF = cfg.stages * STAGE
    F16_OUT = cfg.dtype == "f16"

    @cuda.jit(device=True, inline=True)
    def put_block(regs, base, ct, cw, tmap_d, row0, col, j):
        """The ``j``-th transposed 64 x 64 block of this consumer's rows: stmatrix.trans into its
        shared block, then a TMA store at (row0, col) of the output (rows: D's columns)."""
        buf = base + OUT_OFF + (cw * OUT_BLOCKS + j % OUT_BLOCKS) * 8192
        if OUT_BLOCKS == 1:  # one block: the previous store has read it before it is rewritten
            if ct == 0:
                bulk_wait_group_read(0)
            warpgroup_sync(cw)
        acc_stmatrix_transposed(regs, buf, ct)
        tma_store_block(buf, ct, cw, tmap_d, row0, col)

    @cuda.jit(device=True, inline=True)
    def store_transposed(acc, base, ct, cw, tmap_d, row0, col0):
        """D's 64 x BN rows of consumer ``cw`` as 64-column blocks of ``out`` = D^T (TMA clips
        them at its edges)."""
        regs = acc_to_f16x2(acc) if F16_OUT else acc_to_bf16x2(acc)
        put_block(regs[0:16], base, ct, cw, tmap_d, row0, col0, 0)
        if BN >= 128:
            put_block(regs[16:32], base, ct, cw, tmap_d, row0, col0 + 64, 1)
        if BN >= 192:
            put_block(regs[32:48], base, ct, cw, tmap_d, row0, col0 + 128, 2)
        if BN >= 256:
            put_block(regs[48:64], base, ct, cw, tmap_d, row0, col0 + 192, 3)

    @cuda.jit(launch_bounds=(THREADS, 1))
    def sparse_gemm(tmap_a, tmap_b, tmap_meta, d, m, n, k, mblocks):
        base, ring = pipe.setup()  # stages' base (1 KiB aligned), the ring's barriers initialized
        tid = cuda.threadIdx.x
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        if tid < 128:  # producer warpgroup: one thread keeps TMA busy
            setmaxnreg_dec(PRODUCER_REGS)
            if tid == 0:
                produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, (tmap_a, tmap_b, tmap_meta, mblocks))
            elif CL > 1:
                return  # idle threads leave now (waiting at the closing cluster barrier, they slowed the producer)
        else:  # two consumer warpgroups, 64 rows of the tile each
            setmaxnreg_inc(CONSUMER_REGS)
            cw, ct = tid // 128 - 1, tid % 128
            rank = cluster_ctarank() if CL > 1 else 0
            s, ph = 0, 0
            for u in range(sched.first(), nunits, sched.step()):
                tm, tn = sched.tile(u, tiles_mc, tiles_n, rank)
                acc, s, ph = sc.tile(ring, base, s, ph, kblocks, ct, cw)
                if tm < tiles_m:
                    if OUT_BLOCKS:
                        store_transposed(acc, base, ct, cw, d, tm * BM + cw * 64, tn * BN)
                    else:
                        acc_store(acc, KIND, d, ct, tm * BM + cw * 64, tn * BN)
            if OUT_BLOCKS and ct == 0:
                bulk_wait_group(0)  # the last stores have read their blocks before the CTA ends
        if CL > 1:
            # no CTA leaves while a peer may still multicast into it or arrive on its barriers (not
            # .aligned: of the producer's warp only its one thread is left)
            cluster_sync(False)

    return sparse_gemm
