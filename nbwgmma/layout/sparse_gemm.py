"""Host-side layout of a 2:4-sparse weight as the sparse GEMM reads it
(:mod:`nbwgmma.kernels.sparse`), built from raw element bits in a few vectorized passes.

PTX ISA, "wgmma.mma_async.sp": "Sparse matrix storage" (2:4 chunks, the 4-bit codes) and
"Matrix fragments for warpgroup-level multiply-accumulate operation with sparse matrix A"
(which thread holds which codes; :func:`nbwgmma.layout.sparse.meta_coords`).

**Stage.** One stage of the GEMM covers 128 bytes of dense K (:func:`stage_k`: 64 elements of
16-bit types, 128 of fp8): two sparse wgmma K steps (m64nNk32, resp. m64nNk64).

**Compressed values.** ``[rows, cols]`` in the weight's element type: the kept elements of
each chunk of 4, lower position first (as :func:`~nbwgmma.layout.sparse.compress_24`), each
row zero-padded to a multiple of 16 bytes (a TMA row pitch). TMA reads ``[128 rows, 64
bytes]`` boxes of it with the 64-byte swizzle: the compressed A of one stage.

**Metadata.** ``uint32 [kblocks, mblocks, R, 128]`` (:func:`gemm_meta`): for stage ``kb`` and
64-row block ``mb``, the metadata register of each of the warpgroup's 128 threads, ready to
use: R = 1 for 16-bit types (one register carries both K steps, the thread pair T0, T1 of each
quad the first, read with ``spsel=0``, T2, T3 the second, ``spsel=1``:
:func:`~nbwgmma.layout.sparse.meta_registers_pair`), R = 2 for fp8 (one register per K step,
``spsel=0``, :func:`~nbwgmma.layout.sparse.meta_registers`). ``mblocks`` is rounded up to
an even count (a CTA's 128 rows load two blocks in one box) and ``kblocks`` covers K rounded up
to the stage; padding holds a valid code (positions 0 and 1 of zero values), never the
undefined ``0b0000``. Per stage a consumer warpgroup thus reads ``R`` coalesced 32-bit words
per thread, 1/8 of the compressed A's bytes.
"""

from __future__ import annotations

import numpy as np

from ..errors import LayoutError
from .sparse import meta_coords

__all__ = ["STAGE_BYTES_K", "PAD_CODE", "stage_k", "meta_regs_per_stage", "chunk_masks", "first_violation",
           "prune_bits", "compress_bits", "decompress_bits", "gemm_meta"]

#: Bytes of dense K per stage of the sparse GEMM (one 128-byte swizzle row of B).
STAGE_BYTES_K = 128
#: The code of padding chunks: positions 0 and 1 (``0b0100``).
PAD_CODE = 0b0100
#: The bits of an element other than its sign, by element size (f16/bf16; e4m3/e5m2): zero
#: means +-0, and for these sign-magnitude formats their unsigned order is the order of |x|.
MAGNITUDE = {2: 0x7FFF, 1: 0x7F}
_KEPT = 2


def stage_k(esize: int) -> int:
    """Dense K elements per stage for ``esize``-byte elements."""
    return STAGE_BYTES_K // esize


def meta_regs_per_stage(esize: int, paired: bool = True) -> int:
    """Metadata registers per thread and stage: 1 (16-bit, a pair of K steps in one), 2 (fp8,
    or 16-bit with ``paired`` false: one register per K step, read with ``spsel=0``)."""
    return 1 if esize == 2 and paired else 2


def _kept_table():
    """[16, 2]: the positions a chunk with nonzero mask ``m`` keeps (its nonzeros, then its
    lowest zeros: the codes must name two distinct positions); -1 where it holds more than 2."""
    t = np.full((16, 2), -1, np.int64)
    for m in range(16):
        nz = [p for p in range(4) if m >> p & 1]
        if len(nz) <= 2:
            t[m] = sorted(nz + [p for p in range(4) if p not in nz][:2 - len(nz)])
    return t


_KEPT_POS = _kept_table()


def _bits2(bits: np.ndarray, esize: int) -> np.ndarray:
    bits = np.asarray(bits)
    if bits.ndim != 2 or bits.shape[1] % 4:
        raise LayoutError(f"a 2:4 sparse weight is a [rows, K] matrix with K a multiple of 4; got shape {bits.shape}")
    return bits.view(np.uint16 if esize == 2 else np.uint8)


def chunk_masks(bits: np.ndarray, esize: int) -> np.ndarray:
    """uint8 ``[rows, K/4]``: bit ``p`` set where position ``p`` of the chunk is nonzero."""
    nz = (_bits2(bits, esize) & MAGNITUDE[esize]) != 0
    g = nz.reshape(nz.shape[0], -1, 4).astype(np.uint8)
    return g[..., 0] | g[..., 1] << 1 | g[..., 2] << 2 | g[..., 3] << 3


def first_violation(masks: np.ndarray):
    """``(row, chunk, nonzeros, count)`` of the first chunk (row-major order) holding more than 2
    nonzeros, and how many such chunks there are; None if every chunk is 2:4."""
    bad = _KEPT_POS[masks, 0] < 0
    count = int(bad.sum())
    if not count:
        return None
    r, c = np.unravel_index(int(np.argmax(bad)), bad.shape)
    return int(r), int(c), int(bin(int(masks[r, c])).count("1")), count


def prune_bits(bits: np.ndarray, esize: int) -> np.ndarray:
    """The weight (raw bits) with all but the 2 largest-magnitude elements of each chunk of 4
    zeroed (ties: the lower position kept, as :func:`~nbwgmma.layout.sparse.prune_24`)."""
    b = _bits2(bits, esize)
    g = b.reshape(b.shape[0], -1, 4)
    mag = (g & MAGNITUDE[esize]).astype(np.int32)
    order = np.argsort(-mag, axis=-1, kind="stable")
    keep = np.zeros(g.shape, bool)
    np.put_along_axis(keep, order[..., :_KEPT], True, axis=-1)
    return np.where(keep, g, np.zeros_like(g)).reshape(b.shape)


def compress_bits(bits: np.ndarray, esize: int):
    """``(values, codes)`` of a 2:4 sparse weight given as raw bits ``[rows, K]``: ``values``
    ``[rows, K/2]`` (same bits type) and the uint8 codes ``[rows, K/4]``. ``ValueError`` naming
    the first row and chunk holding more than 2 nonzeros."""
    b = _bits2(bits, esize)
    masks = chunk_masks(b, esize)
    bad = first_violation(masks)
    if bad is not None:
        r, c, nz, count = bad
        raise LayoutError(f"row {r} is not 2:4 sparse: columns {4 * c}..{4 * c + 3} hold {nz} nonzeros "
                          f"({count} such groups of 4 in all)")
    pos = _KEPT_POS[masks]  # [rows, chunks, 2]
    g = b.reshape(b.shape[0], -1, 4)
    values = np.take_along_axis(g, pos, axis=-1).reshape(b.shape[0], -1)
    return values, (pos[..., 0] | pos[..., 1] << 2).astype(np.uint8)


def decompress_bits(values: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """The dense raw bits ``[rows, K]`` of ``values`` ``[rows, >= K/2]`` and ``codes``
    ``[rows, K/4]`` (padding columns of ``values`` past ``K/2`` ignored)."""
    codes = np.asarray(codes, np.uint8)
    rows, chunks = codes.shape
    v = np.asarray(values)[:, :2 * chunks].reshape(rows, chunks, 2)
    pos = np.stack([codes & 3, codes >> 2 & 3], -1).astype(np.int64)
    out = np.zeros((rows, chunks, 4), v.dtype)
    np.put_along_axis(out, pos, v, axis=-1)
    return out.reshape(rows, 4 * chunks)


def gemm_meta(codes: np.ndarray, esize: int, paired: bool = True) -> np.ndarray:
    """``uint32 [kblocks, mblocks, R, 128]``: the metadata registers of every stage and 64-row
    block of a weight with codes ``[rows, K/4]`` (the module docstring gives the layout;
    ``paired`` false: 16-bit types too get one register per K step, every thread holding its
    rows' codes, :func:`~nbwgmma.layout.sparse.meta_registers`)."""
    codes = np.asarray(codes, np.uint8)
    rows, chunks = codes.shape
    sk = stage_k(esize) // 4  # chunks per stage
    per_step = sk // 2  # chunks per K step
    regs = meta_regs_per_stage(esize, paired)
    mb = max(2, -(-rows // 128) * 2)
    kb = max(1, -(-chunks // sk))
    padded = np.full((mb * 64, kb * sk), PAD_CODE, np.uint8)
    padded[:rows, :chunks] = codes
    blocks = padded.reshape(mb, 64, kb, sk)
    coords = meta_coords("f32.f16.f16" if esize == 2 else "f32.e4m3.e4m3")  # [128, 8, (row, chunk)]
    q = np.arange(128)[:, None] % 4
    out = np.zeros((regs, 128, mb, kb), np.uint32)
    for j in range(regs):
        # 16-bit: T2, T3 of each quad hold the second K step's codes (their coords repeat
        # T0, T1's); fp8: register j is K step j, held by all four threads.
        step = q // 2 if regs == 1 else j
        chunk = step * per_step + coords[..., 1]
        codes_ti = blocks[:, coords[..., 0], :, chunk].astype(np.uint32)  # [128, 8, mb, kb]
        shifts = (4 * np.arange(8, dtype=np.uint32))[None, :, None, None]
        out[j] = (codes_ti << shifts).sum(axis=1, dtype=np.uint32)
    return np.ascontiguousarray(out.transpose(3, 2, 0, 1))
