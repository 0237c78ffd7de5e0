"""The 2:4-sparse GEMM: ``D[M, N] = W[M, K] @ B[N, K]^T`` with W 2:4 sparse, written with the kit.

W is the sparse A operand of ``wgmma.mma_async.sp`` (PTX ISA, "wgmma.mma_async.sp"), given as
its compressed values [M, K/2] and its metadata registers
(:mod:`nbwgmma.layout.sparse_gemm`); B is dense, K contiguous (``b_major="K"``: the
activations ``x`` [tokens, K] of ``x @ w.T``) or N contiguous (``"MN"``, 16-bit only: a
row-major ``y`` [K, N] of ``w @ y``). D is written into any 2-D array view of the output, so
``x @ w.T`` stores the transposed accumulator (D = out^T, a view with swapped strides).

Persistent and warp-specialized: one CTA per SM walks 128 x ``bn`` tiles in grouped order
(:class:`~nbwgmma.kit.TileScheduler`); warpgroup 0 gives registers back and one of its
threads streams stages through a ring of :data:`STAGES` slots (:class:`~nbwgmma.kit.TmaPipeline`):
per 128 bytes of dense K, the compressed A (8 KiB), B (``bn`` x 128 bytes) and the metadata of
the tile's two 64-row blocks (1 or 2 KiB). The two consumer warpgroups
(:class:`~nbwgmma.kit.sparse.SparseConsumers`) each issue two m64n``bn``k32 (k64 for fp8) sparse
wgmmas per stage with one group in flight, then store their 64 rows. The sparse wgmma does
twice the math of the dense one per instruction over the same B bytes, so a stage of the same
B bytes lasts half as long; half of A's bytes (and 1/8 of them in metadata) is what the ring
carries for it, which leaves shared memory for 5 stages of 41 KiB.

Tails: TMA fills A, B and the metadata past their edges with zeros (the metadata array is
padded so that no box reaches past it: a zero code is undefined), and the stores skip elements
outside D.
"""

from __future__ import annotations

import functools

from numba import cuda

from ..intrinsics import acc_store, setmaxnreg_dec, setmaxnreg_inc
from ..kit import TileScheduler, TmaPipeline, tile_producer
from ..kit.sparse import SparseConsumers
from ..launch import dynamic_smem_bytes

__all__ = ["SparseConfig", "sparse_kernel", "THREADS", "TYPES"]

#: Input element types; 16-bit inputs give their own type out, fp8 inputs bf16.
TYPES = ("bf16", "f16", "e4m3", "e5m2")
THREADS = 384
_SMEM_LIMIT = 227 * 1024


class SparseConfig:
    """Compile-time choices of a sparse GEMM: ``dtype`` (the weight's and B's element type),
    ``bn`` (columns of D per CTA tile: 64, 128, 192 or 256), ``b_major`` ("K" or "MN"),
    ``group_m`` (tile rows per group of the walk) and ``stages`` (default: as many as fit,
    at most 6)."""

    def __init__(self, dtype: str = "bf16", bn: int = 256, b_major: str = "K", group_m: int = 8, stages=None,
                 paired: bool = True):
        if dtype not in TYPES:
            raise ValueError(f"SparseConfig: dtype must be one of {TYPES}; got {dtype!r}")
        if not isinstance(group_m, int) or group_m < 1:
            raise ValueError(f"SparseConfig: group_m must be a positive integer; got {group_m!r}")
        self.dtype, self.bn, self.b_major, self.group_m = dtype, bn, b_major, group_m
        self.kind = f"f32.{dtype}.{dtype}"
        self.paired = bool(paired)
        probe = SparseConsumers(self.kind, TmaPipeline(2, consumers=2), bn=bn, b_major=b_major,
                                paired=self.paired)  # checks the rest
        self.bk, self.stage_bytes, self.meta_regs = probe.bk, probe.stage_bytes, probe.meta_regs
        most = min(6, (_SMEM_LIMIT - 1024 - 64) // self.stage_bytes)
        stages = most if stages is None else stages
        if not isinstance(stages, int) or not 2 <= stages <= most:
            raise ValueError(f"SparseConfig: stages must be 2 to {most} for stages of {self.stage_bytes} bytes; "
                             f"got {stages!r}")
        self.stages = stages
        self.smem = dynamic_smem_bytes(stages * self.stage_bytes)
        self.sched = TileScheduler(SparseConsumers.BM, bn, self.bk, group_m=group_m)

    def key(self):
        return (self.dtype, self.bn, self.b_major, self.group_m, self.stages, self.paired)

    def grid(self, m: int, n: int, k: int, sms: int) -> int:
        """CTAs of the persistent grid on a GPU of ``sms`` SMs."""
        return self.sched.grid(m, n, k, sms)

    def __repr__(self):
        return (f"SparseConfig({self.dtype}, 128x{self.bn}x{self.bk}, b_major={self.b_major}, stages={self.stages}, "
                f"group_m={self.group_m})")


def sparse_kernel(cfg: SparseConfig):
    """The ``@cuda.jit`` kernel of ``cfg`` (built once per configuration). Its arguments:
    ``(tmap_a, tmap_b, tmap_meta, d, m, n, k, mblocks)``: tensor-map addresses of the compressed
    W [M, K/2] (box 128 x 64 bytes, 64-byte swizzle), of B ([N, K], box ``bn`` x 128 bytes; with
    ``b_major="MN"`` [K, N], box 64 x 64; 128-byte swizzle) and of the metadata (int32
    [kblocks * mblocks, R * 128], box 2 x R * 128, no swizzle); ``d`` the 2-D output [M, N] (any
    strides; bf16 as uint16 bits); int32 sizes and ``mblocks``, the metadata's 64-row blocks.
    Launch it with :data:`THREADS` threads, ``cfg.smem`` bytes of dynamic shared memory and
    ``cfg.grid(...)`` CTAs."""
    return _build(cfg.key())


@functools.lru_cache(maxsize=None)
def _build(key):
    cfg = SparseConfig(*key)
    KIND, BM, BN = cfg.kind, SparseConsumers.BM, cfg.bn
    pipe = TmaPipeline(cfg.stages, consumers=2)
    sc = SparseConsumers(KIND, pipe, bn=BN, b_major=cfg.b_major, paired=cfg.paired)
    sched = cfg.sched
    STAGE = sc.stage_bytes

    @cuda.jit(device=True, inline=True)
    def load(slot, full, kb, tm, tn, args):  # the producer's TMA loads of one stage
        tmap_a, tmap_b, tmap_meta, mblocks = args
        sc.load(slot, full, tmap_a, tmap_b, tmap_meta, kb, tm * BM, tn * BN, mblocks)

    produce = tile_producer(pipe, sched, STAGE, load)

    @cuda.jit(launch_bounds=(THREADS, 1))
    def sparse_gemm(tmap_a, tmap_b, tmap_meta, d, m, n, k, mblocks):
        base, ring = pipe.setup()  # stages' base (1 KiB aligned), the ring's barriers initialized
        tid = cuda.threadIdx.x
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        if tid < 128:  # producer warpgroup: one thread keeps TMA busy
            setmaxnreg_dec(40)
            if tid == 0:
                produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, (tmap_a, tmap_b, tmap_meta, mblocks))
        else:  # two consumer warpgroups, 64 rows of the tile each
            setmaxnreg_inc(232)
            cw, ct = tid // 128 - 1, tid % 128
            s, ph = 0, 0
            for u in range(sched.first(), nunits, sched.step()):
                tm, tn = sched.tile(u, tiles_mc, tiles_n, 0)
                acc, s, ph = sc.tile(ring, base, s, ph, kblocks, ct, cw)
                acc_store(acc, KIND, d, ct, tm * BM + cw * 64, tn * BN)

    return sparse_gemm
