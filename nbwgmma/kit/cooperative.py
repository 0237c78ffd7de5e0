"""Cooperative consumers: warpgroups that share one BM x BN tile, 64 or 128 rows each.

The consumer side of the library GEMM (:mod:`nbwgmma.kernels.gemm`) as one block: a stage
holds A's BM rows and B's BN rows (or columns) of 128 bytes of K, 128-byte swizzle; each of
the ``BM / 64`` consumer warpgroups issues four m64nBNkK wgmmas per stage on its 64 rows of
A and the whole B, keeps one wgmma group in flight and releases a stage once the group that
read it is complete. Both warpgroups work on the same tile at the same time, so each holds
a 64 x BN accumulator (BN / 2 registers per thread: 128 at BN = 256) and the epilogue runs
after the main loop, with the tensor cores idle: the schedule of the largest tiles (the
fewest bytes loaded per FLOP), where :class:`~nbwgmma.kit.PingPong` hides the epilogue under
the other warpgroup's main loop with tiles of half the size.

    coop = Cooperative("f32.bf16.bf16", TmaPipeline(4, consumers=2), bm=128, bn=256)
    ...
    coop.load(slot, full, tmap_a, tmap_b, kcol, a_row, b_row, b_dst)  # the producer, per stage
    ...
    acc, s, ph = coop.tile(ring, base, s, ph, kb0, kb1, cw, ct)     # each consumer warpgroup
    ...                                                               # epilogue of rows 64 cw ...

With ``blocks=2`` each warpgroup owns 128 rows, two m64 blocks: per stage it issues the four
wgmmas of each block (eight, one group), on the same B, and holds two 64 x BN accumulators
(BN registers per thread). A 256 x 128 tile then takes two consumers, as a 128 x 256 tile
does, with the same bytes loaded per FLOP: the tile cuBLAS's "coop" kernels use where a
wave of 128 x 256 tiles fills the SMs poorly.

Operands are K-major (K contiguous: one box [rows, 128 bytes of K]) or, for 16-bit inputs,
MN-major (M or N contiguous: boxes of [BK K-rows, 64 elements], read with wgmma's transpose
bits). With ``cluster`` > 1 each CTA loads 1/cluster of one operand's rows and multicasts them
into every CTA of the cluster: B's (``multicast="B"``, the default: the CTAs of a cluster take
vertically adjacent tiles, ``TileScheduler(..., along="M")``) or A's (``multicast="A"``: tiles
side by side along N, ``along="N"``, the way cuBLAS's kernels share a 256-row operand).
``load_tile`` works the share out from the tile and the CTA's rank; ``box_a`` and ``box_b`` are
the TMA boxes that go with it.
"""

from __future__ import annotations

import types

from numba import cuda

from ..errors import KitError, is_int
from ..intrinsics import (
    acc_undef, cluster_ctarank, desc_advance, make_desc, tma_load_2d, tma_load_3d, tma_load_multicast_2d,
    tma_load_multicast_3d, wgmma_commit_group,
    wgmma_fence, wgmma_mma_async, wgmma_wait_group,
)
from ..layout import SWIZZLE_CODE, wgmma_kind
from ..layout.wgmma_model import ELEMENT_BYTES
from .pipeline import MAX_CLUSTER, TmaPipeline, check_shares, check_stages

__all__ = ["Cooperative", "operand_loads"]

_SW128 = SWIZZLE_CODE["128B"]


def operand_loads(bm: int, bn: int, bk: int, a_major: str = "K", b_major: str = "K", cluster: int = 1,
                  multicast: str = "B"):
    """``((box_a, boxes_a), (box_b, boxes_b))``: the TMA box (rows, columns) of each operand as one
    CTA of :class:`Cooperative` loads it, and how many such boxes land in each CTA's stage (its own
    and, for the operand a cluster shares, its peers' shares): ``boxes x box bytes`` summed over the
    two is the stage's ``expect_tx``. K-major: one box of the rows, ``[rows, bk]`` (the shared
    operand: this CTA's share); MN-major: ``[bk, 64]`` boxes of 64 columns. Host-side: a tensor
    map is made with the box, and a plan checks its bytes against the stage. Parameters whose
    shares do not tile the stage (a cluster of 3 over 128 rows, 100 columns of MN-major B) are a
    :class:`~nbwgmma.errors.KitError`, as for :class:`Cooperative`."""
    check_tile("operand_loads", bm, bn, a_major, b_major, cluster, multicast)
    bm, bn, cluster = int(bm), int(bn), int(cluster)
    if bk not in (32, 64, 128):
        raise KitError(f"operand_loads: bk must be 128 bytes of K in elements, 32, 64 or 128 (4-, 2- or 1-byte inputs); "
                       f"got {bk!r}")

    def loads(rows, major, shared):
        if major == "MN":
            return (bk, 64), rows // 64
        return (rows // (cluster if shared else 1), bk), cluster if shared else 1
    return (loads(bm, a_major, cluster > 1 and multicast == "A"),
            loads(bn, b_major, cluster > 1 and multicast == "B"))


def check_tile(owner: str, bm: int, bn: int, a_major: str, b_major: str, cluster: int, multicast: str):
    """A :class:`~nbwgmma.errors.KitError` (naming ``owner``) unless a ``bm`` x ``bn`` tile of A and B
    of these majors tiles into the loads of a stage: 64-row blocks of A, B in 8-row swizzle atoms
    (K-major) or 64-column boxes (MN-major), the ``multicast`` operand's rows shared out in whole
    atoms over a cluster of ``cluster`` CTAs (1 to 8: the portable cluster sizes)."""
    for name, major in (("a_major", a_major), ("b_major", b_major)):
        if major not in ("K", "MN"):
            raise KitError(f"{owner}: {name} must be 'K' or 'MN'; got {major!r}")
    if not is_int(bm) or bm % 64 or not 64 <= bm <= 256:
        raise KitError(f"{owner}: bm must be 64, 128, 192 or 256; got {bm!r}")
    # K-major B is a stack of 8-row swizzle atoms: any wgmma N that is a multiple of 8 (a narrow
    # tile of a few rows, as the tokens of a decoding step); MN-major B comes in 64-column boxes.
    step = 8 if b_major == "K" else 64
    if not is_int(bn) or bn % step or not step <= bn <= 256:
        raise KitError(f"{owner}: bn must be a multiple of {step} in [{step}, 256] with {b_major}-major B; got {bn!r}")
    if not is_int(cluster) or not 1 <= cluster <= MAX_CLUSTER:
        raise KitError(f"{owner}: cluster must be an integer in [1, {MAX_CLUSTER}] (CTAs; larger clusters are not portable); "
                       f"got {cluster!r}")
    if multicast not in ("A", "B"):
        raise KitError(f"{owner}: multicast (the operand a cluster shares out) must be 'A' or 'B'; got {multicast!r}")
    if multicast == "A":
        check_shares(owner, bm, a_major, cluster, "A")
    else:
        check_shares(owner, bn, b_major, cluster)


def _rows_loader(mn, boxes, multicast, mask):
    """The TMA loads of one operand's rows in a stage: one K-major box, or ``boxes`` MN-major
    boxes of 64 columns 8 KiB apart; multicast into the CTAs of ``mask`` where ``multicast``."""
    @cuda.jit(device=True, inline=True)
    def load_rows(slot, full, tmap, kcol, row):
        if mn:
            for j in range(boxes):
                if multicast:
                    tma_load_multicast_2d(slot + j * 8192, tmap, full, mask, row + j * 64, kcol)
                else:
                    tma_load_2d(slot + j * 8192, tmap, full, row + j * 64, kcol)
        elif multicast:
            tma_load_multicast_2d(slot, tmap, full, mask, kcol, row)
        else:
            tma_load_2d(slot, tmap, full, kcol, row)
    return load_rows


def _rows_loader_3d(mn, boxes, multicast, mask):
    """:func:`_rows_loader` for a 3-D map of a batch of operands: the box at ``batch``, its outer
    coordinate (boxes of one matrix of the batch each: rows past the matrix's end are filled
    with zeros, never the next matrix's)."""
    @cuda.jit(device=True, inline=True)
    def load_rows(slot, full, tmap, kcol, row, batch):
        if mn:
            for j in range(boxes):
                if multicast:
                    tma_load_multicast_3d(slot + j * 8192, tmap, full, mask, row + j * 64, kcol, batch)
                else:
                    tma_load_3d(slot + j * 8192, tmap, full, row + j * 64, kcol, batch)
        elif multicast:
            tma_load_multicast_3d(slot, tmap, full, mask, kcol, row, batch)
        else:
            tma_load_3d(slot, tmap, full, kcol, row, batch)
    return load_rows


class Cooperative(types.ModuleType):
    """``bm / (64 blocks)`` consumer warpgroups of ``kind`` (f32 accumulators, or s32 ones of an
    8-bit integer kind such as "s32.s8.s8": an int8 GEMM, K-major only) sharing each ``bm``
    x ``bn`` tile over ``pipe`` (a :class:`TmaPipeline` with that many consumers), each owning
    ``blocks`` (1 or 2) blocks of 64 rows, A and B
    ``"K"``- or ``"MN"``-major (:data:`a_major`, :data:`b_major`), the rows of ``multicast``
    (``"B"`` or ``"A"``) shared out over a cluster of ``pipe.cluster`` CTAs. A stage is
    ``stage_bytes`` = (bm + bn) x 128 bytes: A's rows first (``a_bytes``), then B's. Device
    functions (2-D maps of A and B, or 3-D ones of a batch): ``load_tile(slot, full,
    tmap_a, tmap_b, kb, tm, tn)`` (the producer's TMA loads
    of k-block ``kb`` of tile (``tm``, ``tn``): this CTA's rows, its share of the multicast
    operand, boxes ``box_a`` and ``box_b``); ``load(slot, full, tmap_a, tmap_b, kcol, a_row,
    b_row, dst)`` (the same from element coordinates: A's ``bm`` rows from ``a_row``, B's from
    ``b_row``, except the multicast operand's, whose share starts at that row and lands at
    ``slot + dst``: ``a_bytes + rank * b_share_bytes`` for B, ``rank * a_share_bytes`` for A;
    ``a_bytes`` without a cluster; ``share(tm, tn, rank) -> (a_row, b_row, dst)`` works them
    out for a tile); ``load_tile_3d(slot, full, tmap_a, tmap_b, kb, tm, tn, batch)`` and
    ``load_3d(..., dst, batch)`` the same from 3-D maps of a batch of operands (``(batch, rows,
    K)`` K-major, ``(batch, K, rows)`` MN-major; boxes ``box_a_3d`` and ``box_b_3d``, one
    matrix deep, so a tile past a matrix's last row reads zeros, not the next matrix; the operands
    named in ``broadcast``, ``"A"``, ``"B"`` or ``"AB"``, are one matrix for every product, their
    maps one matrix deep, ``torch.matmul``'s broadcast of a 2-D operand over a batch) and
    ``tile(ring, base, s, ph, kb0, kb1, cw, ct) -> (acc, s, ph)`` (warpgroup ``cw``'s
    accumulator of k-blocks ``kb0 .. kb1 - 1``, ``kb1 > kb0``, every stage released; with
    ``blocks=2`` ``acc`` is the pair of accumulators of its rows ``128 cw ..`` and ``128 cw +
    64 ..``). ``tile`` is ``tile_open(...) -> (acc, s, ph, prev)``, which returns with the last
    stage's wgmmas still running, then ``drain(ring, ct, prev)``, which waits for them and
    releases that stage: code between the two (loads an epilogue needs) runs under them.
    :meth:`beside` builds a ``tile_open`` that runs a hook between a tile's first stages."""

    def __init__(self, kind: str, pipe: TmaPipeline, bm: int, bn: int, *, a_major: str = "K", b_major: str = "K",
                 blocks: int = 1, multicast: str = "B", broadcast: str = ""):
        k = wgmma_kind(kind)
        if not isinstance(broadcast, str) or broadcast not in ("", "A", "B", "AB"):
            raise KitError(f"Cooperative: broadcast (the operands that are one matrix for every product of a "
                           f"batch) must be '', 'A', 'B' or 'AB'; got {broadcast!r}")
        if k.dtype != "f32" and not (k.dtype == "s32" and k.atype in ("s8", "u8")):
            raise KitError(f"Cooperative: kind must have f32 accumulators, or s32 ones of 8-bit integers; got {kind!r}")
        for name, major in (("a_major", a_major), ("b_major", b_major)):
            if major == "MN" and not k.transposable:
                raise KitError(f"Cooperative: {name}='MN' needs 16-bit inputs (wgmma transposes); got {kind!r}")
        if not isinstance(pipe, TmaPipeline):
            raise KitError(f"Cooperative: pipe must be a TmaPipeline; got {pipe!r}")
        check_tile("Cooperative", bm, bn, a_major, b_major, pipe.cluster, multicast)
        bm, bn = int(bm), int(bn)  # (NumPy integers: the block's sizes and byte counts are Python ints)
        if bn not in k.n_values:
            raise KitError(f"Cooperative: bn must be a wgmma N for {kind}; got {bn!r}")
        if not is_int(blocks) or blocks not in (1, 2) or bm % (64 * blocks):
            raise KitError(f"Cooperative: blocks (64-row blocks per consumer warpgroup) must be 1, or 2 with bm 128 "
                             f"or 256; got blocks={blocks!r} with bm={bm}")
        if pipe.consumers != bm // (64 * blocks):
            raise KitError(f"Cooperative: pipe must be a TmaPipeline with consumers={bm // (64 * blocks)} (one per "
                             f"{64 * blocks} rows); got {pipe!r}")
        check_stages("Cooperative", pipe)
        super().__init__(f"Cooperative({kind})")
        self.kind, self.pipe, self.bm, self.bn, self.a_major, self.b_major = kind, pipe, bm, bn, a_major, b_major
        self.blocks, self.multicast, self.broadcast = int(blocks), multicast, broadcast
        self.esize = int(ELEMENT_BYTES[k.atype])
        self.bk = 128 // self.esize  # K elements per stage: one 128-byte swizzle row
        self.a_bytes = bm * 128
        self.stage_bytes = (bm + bn) * 128
        cl_a, cl_b = (pipe.cluster, 1) if multicast == "A" else (1, pipe.cluster)
        self.a_share_bytes = bm // cl_a * 128  # this CTA's share of A in the stage (all of it unless A is shared)
        self.b_share_bytes = bn // cl_b * 128  # and of B
        # TMA boxes (rows, columns) of this CTA's loads: K-major [rows, 128 bytes of K], MN-major [BK, 64]
        (self.box_a, _), (self.box_b, _) = operand_loads(bm, bn, self.bk, a_major, b_major, pipe.cluster, multicast)
        self.box_a_3d, self.box_b_3d = (1,) + self.box_a, (1,) + self.box_b  # one matrix of a batch
        self._build(k.k)

    def __repr__(self):
        return (f"Cooperative({self.kind}, {self.pipe!r}, bm={self.bm}, bn={self.bn}, a_major={self.a_major!r}, "
                f"b_major={self.b_major!r}{', blocks=2' if self.blocks == 2 else ''}"
                f"{', multicast=' + repr(self.multicast) if self.multicast != 'B' else ''}"
                f"{', broadcast=' + repr(self.broadcast) if self.broadcast else ''})")

    def _layout(self, major, kstep):
        """(LBO, SBO, bytes per wgmma K step) of one operand in the stage. K-major: 8-row atoms
        1024 B apart (SBO), a K step a 32-byte move inside the swizzled row (LBO unused).
        MN-major: the next 64 elements of M/N 8 KiB away (LBO), the next 8 K-rows 1024 B away
        (SBO); a K step of 16 rows is two atoms, 2048 B."""
        if major == "K":
            return 16, 1024, kstep * self.esize
        return 8192, 1024, 2048

    def _build(self, kstep):
        KIND, pipe = self.kind, self.pipe
        BM, BN, A_BYTES, STAGE = self.bm, self.bn, self.a_bytes, self.stage_bytes
        A_MN, B_MN = self.a_major == "MN", self.b_major == "MN"
        TRANS_A, TRANS_B = int(A_MN), int(B_MN)
        A_LBO, A_SBO, A_STEP = self._layout(self.a_major, kstep)
        B_LBO, B_SBO, B_STEP = self._layout(self.b_major, kstep)
        A_CONS = 64 * 128  # bytes between the consumers' 64-row A slices (either layout)
        CL = self.pipe.cluster
        CL_MASK = (1 << CL) - 1
        MC_A = CL > 1 and self.multicast == "A"
        MC_B = CL > 1 and self.multicast == "B"
        B_BOXES = BN // 64 // (CL if MC_B else 1)  # MN-major B boxes per CTA (64 N-columns each)
        A_BOXES = BM // 64 // (CL if MC_A else 1)
        A_ROWS, B_ROWS = self.a_share_bytes // 128, self.b_share_bytes // 128
        A_SHARE, B_SHARE, BK = self.a_share_bytes, self.b_share_bytes, self.bk

        load_a = _rows_loader(A_MN, A_BOXES, MC_A, CL_MASK)
        load_b = _rows_loader(B_MN, B_BOXES, MC_B, CL_MASK)
        BC_A, BC_B = "A" in self.broadcast, "B" in self.broadcast  # (one matrix for every product)
        load_a3 = _rows_loader_3d(A_MN, A_BOXES, MC_A, CL_MASK)
        load_b3 = _rows_loader_3d(B_MN, B_BOXES, MC_B, CL_MASK)

        # Numba-inlined (inline=True), as the library GEMM's loop was written out in its kernel.
        @cuda.jit(device=True, inline=True)
        def load(slot, full, tmap_a, tmap_b, kcol, a_row, b_row, dst):
            if MC_A:  # this CTA's share of A at slot + dst, all of B after A
                load_a(slot + dst, full, tmap_a, kcol, a_row)
                load_b(slot + A_BYTES, full, tmap_b, kcol, b_row)
            else:  # all of A, this CTA's share of B (all of it without a cluster) at slot + dst
                load_a(slot, full, tmap_a, kcol, a_row)
                load_b(slot + dst, full, tmap_b, kcol, b_row)

        @cuda.jit(device=True, inline=True)
        def share(tm, tn, rank):
            """(A's first row, B's first row, where the multicast share lands in the slot) of the
            CTA of cluster rank ``rank`` for tile (``tm``, ``tn``): ``load``'s last three
            arguments but ``kcol``."""
            if MC_A:
                return tm * BM + rank * A_ROWS, tn * BN, rank * A_SHARE
            return tm * BM, tn * BN + rank * B_ROWS, A_BYTES + rank * B_SHARE

        @cuda.jit(device=True, inline=True)
        def load_tile(slot, full, tmap_a, tmap_b, kb, tm, tn):
            a_row, b_row, dst = share(tm, tn, cluster_ctarank() if CL > 1 else 0)
            load(slot, full, tmap_a, tmap_b, kb * BK, a_row, b_row, dst)

        @cuda.jit(device=True, inline=True)
        def load_3d(slot, full, tmap_a, tmap_b, kcol, a_row, b_row, dst, batch):
            ba = 0 if BC_A else batch  # a broadcast operand: its one matrix
            bb = 0 if BC_B else batch
            if MC_A:
                load_a3(slot + dst, full, tmap_a, kcol, a_row, ba)
                load_b3(slot + A_BYTES, full, tmap_b, kcol, b_row, bb)
            else:
                load_a3(slot, full, tmap_a, kcol, a_row, ba)
                load_b3(slot + dst, full, tmap_b, kcol, b_row, bb)

        @cuda.jit(device=True, inline=True)
        def load_tile_3d(slot, full, tmap_a, tmap_b, kb, tm, tn, batch):
            a_row, b_row, dst = share(tm, tn, cluster_ctarank() if CL > 1 else 0)
            load_3d(slot, full, tmap_a, tmap_b, kb * BK, a_row, b_row, dst, batch)

        @cuda.jit(device=True, inline=True)
        def k_steps(d, step):
            """The descriptor ``d`` of a stage's first K step and those of the next three."""
            return d, desc_advance(d, step), desc_advance(d, 2 * step), desc_advance(d, 3 * step)

        @cuda.jit(device=True, inline=True)
        def retire(ring, after_first, ct, prev):
            """Keep the stage's committed wgmmas in flight; the previous group is then complete:
            release its stage (one thread of the warpgroup)."""
            wgmma_wait_group(1)
            if after_first and ct == 0:
                pipe.consumer_release(ring, prev)

        @cuda.jit(device=True, inline=True)
        def drain(ring, ct, prev):
            """``drain(ring, ct, prev)``: wait for the tile's last group of wgmmas (those of the
            stage ``prev`` that ``tile_open`` returned) and release that stage (thread ``ct == 0``
            of the warpgroup). Read no accumulator before it."""
            wgmma_wait_group(0)
            if ct == 0:
                pipe.consumer_release(ring, prev)

        A_BLK = 64 * 128  # bytes between 64-row A blocks (either layout)

        @cuda.jit(device=True, inline=True)
        def stage1(acc, slot, cw, first):
            """One consumer's four wgmmas of a stage on its 64 rows: one group."""
            # Descriptors in 32-bit arithmetic (make_desc, desc_advance), so little work
            # separates the four wgmmas (built with 64-bit integer math, 64-bit adds between
            # them, the library GEMM was 4-7% slower on an H100).
            da, da1, da2, da3 = k_steps(make_desc(slot + cw * A_CONS, A_LBO, A_SBO, _SW128), A_STEP)
            db, db1, db2, db3 = k_steps(make_desc(slot + A_BYTES, B_LBO, B_SBO, _SW128), B_STEP)
            wgmma_fence()
            # A stage is one 128-byte swizzle row of K: always four K steps, written out so
            # the four wgmmas issue back to back; scale-d 0 at the first (no fill needed).
            acc = wgmma_mma_async(acc, da, db, KIND, not first, 1, 1, TRANS_A, TRANS_B)
            acc = wgmma_mma_async(acc, da1, db1, KIND, 1, 1, 1, TRANS_A, TRANS_B)
            acc = wgmma_mma_async(acc, da2, db2, KIND, 1, 1, 1, TRANS_A, TRANS_B)
            acc = wgmma_mma_async(acc, da3, db3, KIND, 1, 1, 1, TRANS_A, TRANS_B)
            wgmma_commit_group()
            return acc

        @cuda.jit(device=True, inline=True)
        def stage2(accs, slot, cw, first):
            """The eight wgmmas of a stage on a consumer's two 64-row blocks: one group."""
            acc0, acc1 = accs
            da, da1, da2, da3 = k_steps(make_desc(slot + 2 * cw * A_BLK, A_LBO, A_SBO, _SW128), A_STEP)
            ea, ea1, ea2, ea3 = k_steps(make_desc(slot + (2 * cw + 1) * A_BLK, A_LBO, A_SBO, _SW128), A_STEP)
            db, db1, db2, db3 = k_steps(make_desc(slot + A_BYTES, B_LBO, B_SBO, _SW128), B_STEP)
            wgmma_fence()
            # The two blocks' K steps interleaved: each accumulator's chain of four wgmmas
            # has the other block's wgmma between its links.
            acc0 = wgmma_mma_async(acc0, da, db, KIND, not first, 1, 1, TRANS_A, TRANS_B)
            acc1 = wgmma_mma_async(acc1, ea, db, KIND, not first, 1, 1, TRANS_A, TRANS_B)
            acc0 = wgmma_mma_async(acc0, da1, db1, KIND, 1, 1, 1, TRANS_A, TRANS_B)
            acc1 = wgmma_mma_async(acc1, ea1, db1, KIND, 1, 1, 1, TRANS_A, TRANS_B)
            acc0 = wgmma_mma_async(acc0, da2, db2, KIND, 1, 1, 1, TRANS_A, TRANS_B)
            acc1 = wgmma_mma_async(acc1, ea2, db2, KIND, 1, 1, 1, TRANS_A, TRANS_B)
            acc0 = wgmma_mma_async(acc0, da3, db3, KIND, 1, 1, 1, TRANS_A, TRANS_B)
            acc1 = wgmma_mma_async(acc1, ea3, db3, KIND, 1, 1, 1, TRANS_A, TRANS_B)
            wgmma_commit_group()
            return acc0, acc1

        @cuda.jit(device=True, inline=True)
        def fresh1():
            return acc_undef(KIND, BN)

        @cuda.jit(device=True, inline=True)
        def fresh2():
            return acc_undef(KIND, BN), acc_undef(KIND, BN)

        stage, fresh = (stage2, fresh2) if self.blocks == 2 else (stage1, fresh1)

        def open_beside(hook, steps):
            """``tile_open`` that calls ``hook(j, carry)`` after committing the wgmmas of the tile's
            ``j``-th stage, for ``j < steps`` (those past the tile's last stage after it), with
            that group and the one before still running."""
            @cuda.jit(device=True, inline=True)
            def tile_open(ring, base, s, ph, kb0, kb1, cw, ct, carry):
                acc = fresh()
                prev = 0
                for kb in range(kb0, kb1):
                    pipe.consumer_wait(ring, s, ph)
                    acc = stage(acc, base + s * STAGE, cw, kb == kb0)
                    if steps > 0 and kb - kb0 < steps:
                        hook(kb - kb0, carry)
                    retire(ring, kb > kb0, ct, prev)
                    prev = s
                    s, ph = pipe.advance(s, ph)
                if steps > 0:
                    for j in range(steps):
                        if kb1 - kb0 <= j:
                            hook(j, carry)
                return acc, s, ph, prev
            return tile_open

        @cuda.jit(device=True, inline=True)
        def no_hook(j, carry):
            pass

        plain_open = open_beside(no_hook, 0)

        @cuda.jit(device=True, inline=True)
        def opened(ring, base, s, ph, kb0, kb1, cw, ct):
            """``tile_open(ring, base, s, ph, kb0, kb1, cw, ct) -> (acc, s, ph, prev)``: warpgroup
            ``cw``'s main loop over k-blocks ``kb0 .. kb1 - 1`` from the ring's slot ``s`` and phase
            ``ph``, returning with the last stage's wgmmas still running: ``acc`` (not to be read
            yet), the ring's next slot and phase, and ``prev``, the slot of that last stage, still
            held. Code up to :attr:`drain` ``(ring, ct, prev)`` runs under those wgmmas."""
            return plain_open(ring, base, s, ph, kb0, kb1, cw, ct, 0)

        @cuda.jit(device=True, inline=True)
        def tile(ring, base, s, ph, kb0, kb1, cw, ct):
            """``tile(ring, base, s, ph, kb0, kb1, cw, ct) -> (acc, s, ph)``: ``tile_open`` then
            ``drain``: warpgroup ``cw``'s accumulator of k-blocks ``kb0 .. kb1 - 1``, complete,
            every stage released, and the ring's next slot and phase."""
            acc, s, ph, prev = opened(ring, base, s, ph, kb0, kb1, cw, ct)
            drain(ring, ct, prev)
            return acc, s, ph

        self.load, self.load_tile, self.share = load, load_tile, share
        self.load_3d, self.load_tile_3d = load_3d, load_tile_3d
        self.tile, self.tile_open, self.drain = tile, opened, drain
        self._open_beside = open_beside

    def beside(self, hook, steps: int):
        """``tile_open(ring, base, s, ph, kb0, kb1, cw, ct, carry) -> (acc, s, ph, prev)``, a
        :attr:`tile_open` that calls the device function ``hook(j, carry)`` once
        for each ``j < steps``: right after committing the wgmmas of the tile's ``j``-th stage,
        while they and the stage before's run (a hook not reached because the tile has fewer
        stages runs after the last). Work that needs no tensor core goes there: the library GEMM
        stores the previous tile's packed results part by part (stage 0: the first part, stage 1
        the second, after the first part's TMA store has read the shared tile where they share
        one) instead of between the tiles with the tensor cores idle. ``carry`` is whatever the
        hook needs (a tuple)."""
        if not is_int(steps) or steps < 1:
            raise KitError(f"Cooperative.beside: steps must be a positive int; got {steps!r}")
        return self._open_beside(hook, int(steps))
