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
  owns 64 rows of the tile (or 128: two 64-row blocks, two accumulators) and issues
  m64nBNkK wgmmas straight from the swizzled slots, keeping one wgmma group in flight,
  then writes its accumulator to C.

Epilogues: "tma" converts the fragment to 16-bit pairs, writes it with
``stmatrix`` into a shared tile (one per consumer: 128B-swizzled 64-column blocks; a
width that is not a multiple of 64 as whole unswizzled rows; for a swapped product C^T's
64 x 64 blocks, transposed, or for other widths its rows in TMA boxes of 8; f32 values as
128B-swizzled 32-column blocks; fp8 codes as 64B-swizzled 64-column blocks) and hands it to
TMA stores; the consumer goes straight on to its next tile and only waits for those stores
to have *read* the tile before it writes the tile again. "direct" stores each value to
global memory (any output type or strides).

Clusters (``cluster`` > 1): CTAs of a cluster take vertically adjacent tiles of one
column at a time; each loads its share of the common B tile with a multicast TMA
into every CTA's slot, so a stage's "full" barrier collects A's bytes and all the
shares, and its "empty" barrier waits for the consumers of every CTA of the cluster
(remote ``mbarrier.arrive`` through ``mapa``) before the slot is refilled. With
``multicast="A"`` the CTAs take side-by-side tiles of one row and share A's tile instead.

Tails: TMA fills out-of-bounds elements of A and B with zeros, which add
nothing; TMA stores clip at C's edges, and the direct stores skip elements
outside C.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from ..intrinsics import (
    acc_add_strided, acc_scale, acc_store, acc_store_fp8, acc_store_strided, acc_zeros, bulk_wait_group,
    cluster_ctarank, cluster_sync, dynamic_smem_base, griddep_launch_dependents, griddep_wait,
    mbarrier_wait_parity_timeout, named_barrier_sync, prefetch_tensormap, setmaxnreg_dec, setmaxnreg_inc,
    smem_addr,
)
from ..kit.amax import acc_absmax, amax_flush, amax_note, amax_start
from ..kit.cluster_k import ClusterSplitK
from ..kit.cooperative import Cooperative
from ..kit.device import inlined
from ..kit.epilogue import col_values
from ..kit.pipeline import TmaPipeline
from ..kit.scheduler import TileScheduler, stream_range, stream_segment, stream_walk, stream_whole_units
from ..kit.short_rows import box_rows_device, clear_rows, short_map
from ..kit.stream_k import StreamFixup
from ..kit.timeline import timeline_stamp, timeline_start
from ..kit.warpgroup import warpgroup_sync
from .gemm_config import DEFAULT_STAGES, NARROW_STAGES, GemmConfig
from .gemm_epilogue import fused_epilogue, part_writers, parts_hook, parts_store

__all__ = ["GemmConfig", "gemm_kernel", "DEFAULT_STAGES", "NARROW_STAGES"]


@functools.lru_cache(maxsize=None)
def _build(key):
    cfg = GemmConfig(*key)
    KIND, BM, BN, BK = cfg.kind, cfg.bm, cfg.bn, cfg.bk
    STAGES, GROUP_M, NCONS = cfg.stages, cfg.group_m, cfg.consumers
    assert BK // cfg.k.k == 4
    STAGE_BYTES = cfg.stage_bytes
    SCALED = cfg.scaled
    PREGS, CREGS = cfg.producer_regs, cfg.consumer_regs
    TMA_EPI = cfg.epilogue == "tma"
    ROWS = cfg.epilogue == "rows"  # 16-bit parts through one shared block, stored a row per warp
    C_OFF = STAGES * STAGE_BYTES
    WIDTHS = cfg.c_widths  # each part's columns (all alike but a transposed C's last)
    PART_COLS = WIDTHS[0]
    FP8_OUT, F32_OUT = cfg.fp8_out, cfg.f32_out
    FMT = cfg.out if FP8_OUT else "e4m3"
    AMAX = cfg.amax
    VALUES = FP8_OUT or F32_OUT  # parts of f32 values (converted as they are stored), not packed 16-bit pairs
    SLOT_BYTES = 64 * PART_COLS * (1 if FP8_OUT else 4 if F32_OUT else 2) if not ROWS else 8192  # a part's tile
    C_CONS = cfg.c_slots * SLOT_BYTES
    C_SLOTS = cfg.c_slots
    CL = cfg.cluster
    pipe = TmaPipeline(STAGES, NCONS, cluster=CL)
    MC_A = cfg.multicast == "A"  # clusters along N sharing A (else along M sharing B)
    coop = Cooperative(KIND, pipe, BM, BN, a_major=cfg.a_major, b_major=cfg.b_major, blocks=cfg.blocks,
                       multicast=cfg.multicast, broadcast=cfg.broadcast)
    CROWS = 64 * cfg.blocks  # rows of the tile per consumer
    KC = cfg.cluster_k
    sched = TileScheduler(BM, BN, BK, group_m=GROUP_M, cluster=CL, split=cfg.split, cluster_k=KC,
                          along="N" if MC_A else "M")
    ck = ClusterSplitK(BN, consumers=NCONS if KC > 1 else 2)  # (used with cluster_k only)
    X_OFF = C_OFF + cfg.c_bytes  # the K halves' exchange buffer (cluster_k = 2)
    XBARS = ck.barrier_words
    NBARS = pipe.barrier_words
    SPLIT = cfg.split
    STREAM = cfg.stream_k
    ALL_CONS = 128 * NCONS  # threads of the consumer warpgroups
    CLEAR_BAR = 7  # the consumers' barrier after zeroing the tail rows (1-4: warpgroup_sync; 5: StreamFixup)
    # A batch of products (3-D maps of A, B and C): the walk covers batches x units; the C map
    # reaches the stores as (map, the product's index)
    BATCHED = cfg.batched
    # a fused bias, activation, beta * C, user function
    EPI = cfg.fused
    # A bias per column, in the persistent tile loop (no split-K, stream-K or cluster_k), is
    # loaded into registers while the tile's last wgmmas run (Cooperative.tile_open, col_values)
    # and its parts mapped from there: loaded part by part, each part waited for its loads with
    # the tensor cores idle (4.7% of a 256 x 160 bf16 product at 4096 x 14336 x 4096 on an H200,
    # 10 parts per consumer; 1.6% in two parts at 128 x 256). Only for a 16-bit bias and 16-bit
    # outputs through TMA without C, a user function or amax, where the tile leaves in parts or
    # has one 64-row block of at most 192 columns: other epilogues are near their registers'
    # limit already (fp8 codes with amax and a bias at 128 x 256 spilled 508 bytes, an f32 bias
    # with gelu 20-116, 256 x 168 in one part 696 instead of 88, 64 x 256 128 instead of 120, the
    # register-store epilogue 2256 instead of 1216).
    HOIST = cfg.bias == "col" and not cfg.with_c and cfg.user is None and not STREAM and KC == 1 \
        and SPLIT == 1 and TMA_EPI and not VALUES and not AMAX and cfg.bias_type != "f32" \
        and (cfg.c_parts > 1 or (cfg.blocks == 1 and BN <= 192))
    STARTS = [sum(WIDTHS[:p]) for p in range(len(WIDTHS))]  # each part's first column in the tile
    epi_parts = [fused_epilogue(cfg, w, cfg.out if (TMA_EPI or ROWS) and not VALUES else None, c0 if HOIST else None)
                 for w, c0 in zip(WIDTHS, STARTS)] if EPI else None
    epi_all = fused_epilogue(cfg, BN, None) if EPI and not TMA_EPI and not ROWS else None  # (register stores)
    colv = col_values(BN, vtype=cfg.bias_type) if HOIST else None

    if HOIST:
        @inlined
        def tile_ep(ring, base, s, ph, kb0, kb1, cw, ctid, ep, col0):
            """The tile's main loop, and ``ep`` with the thread's bias values for the tile at column
            ``col0`` in place of the bias, loaded while the last stage's wgmmas run."""
            acc, s, ph, prev = coop.tile_open(ring, base, s, ph, kb0, kb1, cw, ctid)
            ept = (colv(ep[0][col0:ep[2]], ctid),) + ep[1:]
            coop.drain(ring, ctid, prev)
            return acc, s, ph, ept
    else:
        @inlined
        def tile_ep(ring, base, s, ph, kb0, kb1, cw, ctid, ep, col0):
            acc, s, ph = coop.tile(ring, base, s, ph, kb0, kb1, cw, ctid)
            return acc, s, ph, ep
    TILE_FLOATS = BM * BN
    CONS_FLOATS = 64 * BN

    largest_all = acc_absmax(BN, not cfg.zero_padding) if AMAX else None
    SLOTS = ALL_CONS // 32 if AMAX else 1  # a running |value| maximum per consumer warp (amax)

    @inlined
    def store_direct(acc, c, ctid, cw, row0, col0, cbase, ep):
        if EPI:
            acc = epi_all(acc, ctid, row0, col0, ep)
        if FP8_OUT:
            if AMAX:  # (before the store: the values die at it)
                amax_note(largest_all(acc, ctid, row0, col0, ep[1], ep[2]), ep[7], ctid + 128 * cw)
            acc_store_fp8(acc_scale(acc, ep[6]), KIND, c, ctid, row0, col0, FMT)
        else:
            acc_store(acc, KIND, c, ctid, row0, col0)

    if BATCHED and cfg.with_c:
        @inlined
        def product_ep(ep, bt):
            """The epilogue's operands for product ``bt`` of the batch: C's matrix of it."""
            return ep[:3] + (ep[3][bt],) + ep[4:]
    else:
        @inlined
        def product_ep(ep, bt):
            return ep

    if BATCHED and not TMA_EPI:  # (c: the 3-D out and the tile's product: its matrix)
        store_matrix = store_direct

        @inlined
        def store_direct(acc, c, ctid, cw, row0, col0, cbase, ep):
            store_matrix(acc, c[0][c[1]], ctid, cw, row0, col0, cbase, ep)

    put_part, packed, put_rows = part_writers(cfg)

    store = parts_store(WIDTHS, 2 if VALUES else 4, SLOT_BYTES, C_SLOTS, put_part, packed, epi_parts) \
        if TMA_EPI else parts_store(WIDTHS, 4, SLOT_BYTES, 1, put_rows, packed, epi_parts) if ROWS else store_direct
    # A plain 16-bit C through TMA, one 64-row block per consumer, in the persistent tile loop:
    # each tile's results are packed as its main loop ends and stored part by part during the next
    # tile's first stages (Cooperative.beside), not between the tiles with the tensor cores idle.
    # Measured on an H200 against storing between the tiles, in one process: 128 x 256 +0.3-0.7%;
    # fused epilogues (whose parts' mapping already hid the stores' waits) -0.5-1.4% and two 64-row
    # blocks a consumer (256 x 128) -0.3-1.1%, so those store between the tiles (BENCHMARKS.md).
    BESIDE = TMA_EPI and not VALUES and not EPI and cfg.blocks == 1 and SPLIT == 1 and not STREAM and KC == 1
    if BESIDE:
        put_hook = parts_hook(WIDTHS, SLOT_BYTES, C_SLOTS, put_part)
        open_beside = coop.beside(put_hook, len(WIDTHS))

    @inlined
    def finish_tile(acc, c, ws, counters, flag, tid, ctid, cw, t, sp, nsplit, row0, col0, cbase, m, ep):
        store(acc, c, ctid, cw, row0, col0, cbase, ep)

    # the tile counters of split-K and stream-K (named barrier 5 among the consumer threads)
    fix = StreamFixup(KIND, BN, consumers=NCONS) if SPLIT > 1 or STREAM else None

    @inlined
    def finish_slice(acc, c, ws, counters, flag, tid, ctid, cw, t, sp, nsplit, row0, col0, cbase, m, ep):
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
            last = fix.count(counters, t, nsplit - 1, flag, tid)
            if last:
                acc = acc_zeros(KIND, BN)
                if real:
                    for s in range(nsplit):  # 0 + p0 + p1 + ...: the same sum whichever slice is last
                        acc = acc_add_strided(acc, ws, mine + s * TILE_FLOATS, 128)
        if last:
            store(acc, c, ctid, cw, row0, col0, cbase, ep)

    finish = finish_slice if SPLIT > 1 else finish_tile

    @inlined
    def finish_one(acc, alpha, c, ws, counters, flag, tid, ctid, cw, t, sp, nsplit, row0, col0, cbase, m, ep):
        if SCALED:
            acc = acc_scale(acc, alpha)
        finish(acc, c, ws, counters, flag, tid, ctid, cw, t, sp, nsplit, row0, col0, cbase, m, ep)

    @inlined
    def finish_two(accs, alpha, c, ws, counters, flag, tid, ctid, cw, t, sp, nsplit, row0, col0, cbase, m, ep):
        """A consumer of 128 rows: its two 64-row blocks, one after the other (through the same C
        tile in shared memory, which the TMA epilogue waits to have been read before rewriting)."""
        acc0, acc1 = accs
        finish_one(acc0, alpha, c, ws, counters, flag, tid, ctid, cw, t, sp, nsplit, row0, col0, cbase, m, ep)
        finish_one(acc1, alpha, c, ws, counters, flag, tid, ctid, cw, t, sp, nsplit, row0 + 64, col0, cbase, m, ep)

    finish_blocks = finish_one if cfg.blocks == 1 else finish_two

    # Stream-K's producer walks the CTA's tiles with kit.stream_walk (whole tiles in waves, then
    # its share of the rest's k-blocks); the consumers walk alike, written out in the kernel.
    @inlined
    def fill_tile(st, tm, tn, kb0, kb1, a):
        ring, base, tmap_a, tmap_b = a
        it = st[0]
        a_row, b_row, dst = coop.share(tm, tn, 0)
        for kb in range(kb0, kb1):
            s, ph = pipe.stage_of(it)
            full = pipe.producer_acquire(ring, s, ph, STAGE_BYTES)
            coop.load(base + s * STAGE_BYTES, full, tmap_a, tmap_b, kb * BK, a_row, b_row, dst)
            it += 1
        return (it,)

    @inlined
    def fill_whole(st, tm, tn, kblocks, a):
        return fill_tile(st, tm, tn, 0, kblocks, a)

    @inlined
    def fill_piece(st, t, tm, tn, kb0, kb1, kblocks, first, total, a):
        return fill_tile(st, tm, tn, kb0, kb1, a)

    fill_walk = stream_walk(sched, fill_whole, fill_piece) if STREAM else None

    B_TAIL = cfg.b_tail
    A_TAIL = cfg.a_tail
    A_BYTES = cfg.a_bytes
    THREADS = cfg.threads
    TRACE = cfg.trace
    if A_TAIL:
        @inlined
        def a_source(pm, tiles_m, tmap_a, tmap_at, a_rows, nbytes):
            """(A's map, the stage's bytes) of tile row ``pm``: the last one through the map of the
            ``a_rows`` rows M has there (``nbytes``: the stage's bytes as B's column leaves them)."""
            return short_map(pm == tiles_m - 1, tmap_a, tmap_at, nbytes, BM, a_rows, 128)
    else:
        @inlined
        def a_source(pm, tiles_m, tmap_a, tmap_at, a_rows, nbytes):
            return tmap_a, nbytes
    if B_TAIL:
        @inlined
        def b_source(pn, tiles_n, tmap_b, tmap_bt, b_rows):
            """(B's map, the stage's bytes) of tile column ``pn``: the last one through the map whose box
            holds the ``b_rows`` rows N has there (TMA moves a box's rows past N as zeros at the cost of
            real ones, and the last column's CTAs fell behind: kit.short_rows)."""
            return short_map(pn == tiles_n - 1, tmap_b, tmap_bt, STAGE_BYTES, BN, b_rows, 128)
    else:
        @inlined
        def b_source(pn, tiles_n, tmap_b, tmap_bt, b_rows):
            return tmap_b, STAGE_BYTES

    @inlined
    def body(tmap_a, tmap_b, tmap_at, tmap_bt, c, m, n, k, alpha, ws, counters, vec, cmat, beta, xs, scale_out, amax,
             batches, trace):
        dyn = cuda.shared.array(0, np.uint8)
        bars = cuda.shared.array(NBARS, np.uint64)
        flag = cuda.shared.array(1, np.int32)
        xb = cuda.shared.array(XBARS, np.uint64)
        biggest = cuda.shared.array(SLOTS, np.float32)
        base = dynamic_smem_base(dyn, 1024)
        ring = smem_addr(bars)
        xbars = smem_addr(xb)
        tid = cuda.threadIdx.x
        wg = tid // 128
        ep = (vec, m, n, cmat, beta, xs, scale_out, biggest)  # what the epilogue reads (unused ones: stand-ins)
        if TRACE and tid == 0:  # (the timeline: kit.timeline, TRACE_EVENTS from column 2)
            timeline_start(trace)
        if tid == 0:
            pipe.init(ring)
            if KC > 1:
                ck.init(xbars)
        b_rows = BN  # the rows of B the last tile column has (A's last tile row: a_rows)
        if B_TAIL:
            b_rows = box_rows_device(n - (n - 1) // BN * BN, BN)
        a_rows = BM
        if A_TAIL:
            a_rows = box_rows_device(m - (m - 1) // BM * BM, BM)
        clear_b = False  # the consumers zero the stages' rows past B's (A's) tail box beside the first loads
        clear_a = False
        if B_TAIL or A_TAIL:
            # The stages' rows past the tail boxes are zeroed once, where a tail tile may read them
            # before any whole box wrote them. Where the CTA's first tile fills every stage: not at all
            # if that tile is whole (a later tail tile reads earlier tiles' rows), by the consumers
            # while the first loads fly if it is the tail tile (its boxes leave those rows alone, and a
            # later box waits for the consumers' release); else by every thread before the loads start.
            # (Zeroing in every CTA first held every first load back by 0.7 us: 1876 x 480 x 8192 on
            # an H100, kit.timeline.)
            tm, tmc, tn, kbs, ns, units = sched.shape(m, n, k)
            u0 = sched.first()
            fills = False
            pm0 = pn0 = 0
            if KC == 1 and u0 < units:  # (no unit, as at K = 0: nothing to split or place)
                t0, sp0 = sched.split_unit(u0, ns)
                pm0, pn0 = sched.tile(t0, tmc, tn, cluster_ctarank() if CL > 1 else 0)
                kb0, kb1 = sched.k_range(sp0, kbs, ns)
                fills = kb1 - kb0 >= STAGES
            if b_rows < BN:
                if not fills:
                    clear_rows(base + A_BYTES, STAGE_BYTES, STAGES, 128, b_rows, BN, tid, THREADS)
                else:
                    clear_b = pn0 >= tn - 1
            if a_rows < BM:
                if not fills:
                    clear_rows(base, STAGE_BYTES, STAGES, 128, a_rows, BM, tid, THREADS)
                else:
                    clear_a = pm0 >= tm - 1
        if CL * KC == 1:
            cuda.syncthreads()
        else:
            cluster_sync()  # the peers' barriers are initialized before anyone uses them
        # Launched with programmatic dependent launch (matmul's launches are), the grid may start
        # while the stream's previous kernel still runs: nothing reads or writes global memory
        # before this wait.
        griddep_wait()
        rank = cluster_ctarank() if CL > 1 else 0  # which of its cluster's tiles the CTA takes
        half = cluster_ctarank() if KC > 1 else 0  # the CTA's half of K (cluster_k)

        # A cluster of CL CTAs takes CL adjacent tiles at a time (one "cluster tile": vertically
        # adjacent sharing B, side by side sharing A);
        # work units are (tile, K slice), a tile's slices neighbours, so they run together.
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        walk = nunits * batches if BATCHED else nunits  # (a batch: each product's units in turn)
        first = sched.first()
        step = sched.step()

        if wg == 0:
            setmaxnreg_dec(PREGS)
            if tid == 0:
                if B_TAIL:  # (their first use may come in the middle of the walk)
                    prefetch_tensormap(tmap_bt)
                if A_TAIL:
                    prefetch_tensormap(tmap_at)
                if TRACE:
                    timeline_stamp(trace, 2)
                # One k-block count, slot and phase derived from it (the consumers advance the
                # two as counters; here those cost ptxas an 8-byte spill in the producer's 40
                # registers with clusters).
                it = 0
                if STREAM:  # whole tiles in waves, then this CTA's share of the rest's k-blocks, tile by tile
                    fill_walk((0,), nunits, kblocks, tiles_mc, tiles_n, (ring, base, tmap_a, tmap_b))
                else:
                    for w in range(first, walk, step):
                        bt, u = sched.batch_unit(w, nunits) if BATCHED else (0, w)
                        t, sp = sched.split_unit(u, nsplit)
                        pm, pn = sched.tile(t, tiles_mc, tiles_n, rank)
                        # Past M's last tile (tiles_m not a multiple of CL) a CTA still loads and
                        # multicasts its share of B for its peers; its own A rows are a copy
                        # (along N: past N's last tile, its share of A; its B rows a copy).
                        if MC_A and pn >= tiles_n:
                            pn = tiles_n - 1
                        if not MC_A and pm >= tiles_m:
                            pm = tiles_m - 1
                        a_row, b_row, dst = coop.share(pm, pn, rank)
                        kb0, kb1 = sched.k_range(sp, kblocks, nsplit)
                        if KC > 1:  # this CTA's half of the tile's k-blocks (the peer loads the same rows)
                            kb0, kb1 = ck.k_half(kblocks, half)
                        tmb, nbytes = b_source(pn, tiles_n, tmap_b, tmap_bt, b_rows)
                        tma, nbytes = a_source(pm, tiles_m, tmap_a, tmap_at, a_rows, nbytes)
                        for kb in range(kb0, kb1):
                            s, ph = pipe.stage_of(it)
                            full = pipe.producer_acquire(ring, s, ph, nbytes)
                            if BATCHED:
                                coop.load_3d(base + s * STAGE_BYTES, full, tma, tmb, kb * BK, a_row, b_row, dst,
                                             bt)
                            else:
                                coop.load(base + s * STAGE_BYTES, full, tma, tmb, kb * BK, a_row, b_row, dst)
                            it += 1
                if TRACE:
                    timeline_stamp(trace, 4)
                # Every load issued: the next kernel may be scheduled (its CTAs take SMs as ours leave).
                griddep_launch_dependents()
            elif TRACE and tid == 32 and not STREAM and KC == 1 and first < walk:
                # A thread of an idle warp sees the first stage land (a wait in a consumer made ptxas
                # spill its registers); it gives up after a millisecond (the event then missing).
                if mbarrier_wait_parity_timeout(ring, 0, 1000000):
                    timeline_stamp(trace, 3)
            elif CL > 1:
                # The idle threads leave now: waiting at the closing cluster barrier beside the
                # producer thread of their warp, they slowed its loop (clusters 12-20% slower on an
                # H100). (With cluster_k they made no difference, and leaving made ptxas spill.)
                return
        else:
            setmaxnreg_inc(CREGS)
            cw = wg - 1
            ctid = tid % 128
            if AMAX:
                amax_start(biggest, tid - 128)
            cbase = base + C_OFF + cw * C_CONS
            s = 0  # the slot of the next k-block, and the parity of its "full" phase
            ph = 0
            if (B_TAIL or A_TAIL) and (clear_a or clear_b):  # (every consumer of the CTA alike)
                if clear_b:
                    clear_rows(base + A_BYTES, STAGE_BYTES, STAGES, 128, b_rows, BN, tid - 128, ALL_CONS)
                if clear_a:
                    clear_rows(base, STAGE_BYTES, STAGES, 128, a_rows, BM, tid - 128, ALL_CONS)
                named_barrier_sync(CLEAR_BAR, ALL_CONS)  # (all of them before any consumer's first wgmma)
            if STREAM:
                cta, ctas = cuda.blockIdx.x, cuda.gridDim.x
                # (kit.stream_whole_units: every full wave but the last whole, so the tiles running
                # together stay neighbours; with every tile shared, each CTA a stretch of its own
                # read from DRAM, 128 x 256 tiles ran at 0.46x cuBLAS at 8192^3 on an H100)
                whole = stream_whole_units(tiles_m * tiles_n, ctas)
                for u in range(cta, whole, ctas):
                    pm, pn = sched.tile(u, tiles_mc, tiles_n, 0)
                    acc, s, ph = coop.tile(ring, base, s, ph, 0, kblocks, cw, ctid)
                    if SCALED:
                        acc = acc_scale(acc, alpha)
                    store(acc, c, ctid, cw, pm * BM + cw * 64, pn * BN, cbase, ep)
                total = (tiles_m * tiles_n - whole) * kblocks
                g0, g1 = stream_range(cta, ctas, total)
                g = g0
                while g < g1:
                    t, kb0, kb1 = stream_segment(g, g1, kblocks)  # (t counted from the first shared tile)
                    pm, pn = sched.tile(whole + t, tiles_mc, tiles_n, 0)
                    acc, s, ph = coop.tile(ring, base, s, ph, kb0, kb1, cw, ctid)
                    if SCALED:
                        acc = acc_scale(acc, alpha)
                    # a tile the CTAs share is summed from their parts (StreamFixup), stored by one
                    accs, last = fix.finish((acc,), ws, counters, flag, tid, ctid, cw, t, cta, ctas, total, kblocks,
                                            g == g0, kb0 == 0 and kb1 == kblocks, m - pm * BM - cw * 64)
                    if last:
                        store(accs[0], c, ctid, cw, pm * BM + cw * 64, pn * BN, cbase, ep)
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
                        store(acc, c, ctid, cw, pm * BM + cw * 64, pn * BN, cbase, ep)
                    j += 1
            elif BESIDE:
                pend = packed(acc_zeros(KIND, BN))  # the last tile's packed results (none yet)
                prow = 0
                pcol = 0
                live = False
                pc = (c, 0) if BATCHED else c  # the C map (batched: and the last tile's product)
                for w in range(first, walk, step):
                    bt, u = sched.batch_unit(w, nunits) if BATCHED else (0, w)
                    pm, pn = sched.tile(u, tiles_mc, tiles_n, rank)
                    acc, s, ph, prev = open_beside(ring, base, s, ph, 0, kblocks, cw, ctid,
                                                   (pend, prow, pcol, live, ctid, cw, cbase, pc, ep))
                    coop.drain(ring, ctid, prev)
                    if SCALED:
                        acc = acc_scale(acc, alpha)
                    pend = packed(acc)
                    prow = pm * BM + cw * 64
                    pcol = pn * BN
                    live = pm < tiles_m and pn < tiles_n
                    pc = (c, bt) if BATCHED else c
                for j in range(len(WIDTHS)):
                    put_hook(j, (pend, prow, pcol, live, ctid, cw, cbase, pc, ep))
            else:
                for w in range(first, walk, step):
                    bt, u = sched.batch_unit(w, nunits) if BATCHED else (0, w)
                    t, sp = sched.split_unit(u, nsplit)
                    pm, pn = sched.tile(t, tiles_mc, tiles_n, rank)
                    kb0, kb1 = sched.k_range(sp, kblocks, nsplit)
                    acc, s, ph, ept = tile_ep(ring, base, s, ph, kb0, kb1, cw, ctid, ep, pn * BN)
                    if pm < tiles_m and pn < tiles_n:
                        finish_blocks(acc, alpha, (c, bt) if BATCHED else c, ws, counters, flag, tid, ctid, cw, t, sp,
                                      nsplit, pm * BM + cw * CROWS, pn * BN, cbase, m, product_ep(ept, bt))
            if TRACE and cw == 0 and ctid == 0:
                timeline_stamp(trace, 5)
            if TMA_EPI and ctid == 0:
                bulk_wait_group(0)
            if TRACE and cw == 0 and ctid == 0:
                timeline_stamp(trace, 6)
            if AMAX:
                amax_flush(amax, biggest, tid - 128)  # the warp's maximum of all its tiles: one atomic
        if CL * KC > 1:
            # No CTA leaves while a peer may still arrive on its barriers (or send into its buffer);
            # not .aligned: of the producer's warp only its one thread may be left.
            cluster_sync(False)

    # The kernel's parameters: the bias vector, C and beta, a user function's extras and the
    # workspace (split-K, stream-K) only where used (unused ones get stand-ins).
    ws = SPLIT > 1 or STREAM
    xs = [f"x{j}" for j in range(len(cfg.extras))]
    fp8 = (["scale_out"] + (["amax"] if AMAX else [])) if FP8_OUT else []
    params = ["tmap_a", "tmap_b"] + (["tmap_bt"] if B_TAIL else []) + (["tmap_at"] if A_TAIL else []) \
        + ["c", "m", "n", "k", "alpha"] \
        + (["vec"] if cfg.bias else []) \
        + (["cmat", "beta"] if cfg.with_c else []) + xs + fp8 + (["ws", "counters"] if ws else []) \
        + (["batches"] if BATCHED else []) + (["trace"] if TRACE else [])
    passed = ", ".join(["tmap_a", "tmap_b", "tmap_at" if A_TAIL else "tmap_a", "tmap_bt" if B_TAIL else "tmap_b", "c",
                        "m", "n", "k", "alpha"]
                       + (["ws", "counters"] if ws else ["c", "m"]) + (["vec"] if cfg.bias else ["m"])
                       + (["cmat", "beta"] if cfg.with_c else ["c", "alpha"]) + [f"({''.join(x + ', ' for x in xs)})"]
                       + ["scale_out" if FP8_OUT else "alpha", "amax" if AMAX else "m", "batches" if BATCHED else "m", "trace" if TRACE else "m"])
    src = [f"def gemm({', '.join(params)}):", f"    body({passed})"]
    ns = {"body": body, "__name__": __name__}  # (the kernel's symbol names this module)
    exec(compile("\n".join(src), "<nbwgmma.kernels.gemm kernel>", "exec"), ns)
    return cuda.jit(launch_bounds=(cfg.threads, 1))(ns["gemm"])


def gemm_kernel(cfg: GemmConfig):
    """The ``@cuda.jit`` kernel for ``cfg`` (compiled once per configuration)."""
    return _build(cfg.key())
