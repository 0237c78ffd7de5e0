"""2:4 structured sparsity for ``wgmma.mma_async.sp``: host-side models of the compressed A
operand and of the metadata registers, and the numpy model of the sparse wgmma.

PTX ISA, "Asynchronous Warpgroup Level Multiply-and-Accumulate Operation using
wgmma.mma_async.sp instruction": "Sparse matrix storage" and "Matrix fragments for
warpgroup-level multiply-accumulate operation with sparse matrix A".

**Sparsity.** Each row of A (64 x K) is cut into chunks along K: chunks of 4 elements of
which at most 2 are nonzero (2:4) for f16, bf16, e4m3, e5m2, s8 and u8; chunks of 2 with at
most 1 nonzero (1:2) for tf32. The instruction reads A *compressed*, 64 x K/2: the kept
elements of each chunk side by side, lower position first.

**Metadata.** One 4-bit code per chunk says where its kept elements sat: for a 4-chunk, the
position of the first kept element in bits 0-1 and of the second in bits 2-3 (two equal
positions, 0b0000, 0b0101, 0b1010, 0b1111, are undefined behaviour); for a tf32 2-chunk,
0b0100 (element 0 kept) or 0b1110 (element 1 kept), the only meaningful values. Here the
codes of a matrix are a ``uint8`` array ``[rows, K / chunk]``.

**Metadata registers.** Each thread passes one 32-bit register holding 8 codes, code ``i`` in
bits ``4i..4i+3``. For thread ``t`` (warp ``w = t // 32``, lane ``l``, ``g = l // 4``,
``q = l % 4``), code ``i`` describes row and chunk (:func:`meta_coords`):

* f16/bf16 (m64nNk32, 8 chunks per row) and tf32 (m64nNk16, 8 chunks of 2 per row):
  row ``16w + g + 8*(i // 4)``, chunk ``4*(q % 2) + i % 4``. A thread *pair* of each quad holds
  the 16 rows x 8 chunks of its warp: ``sp-sel`` 0 reads threads T0, T1 (q = 0, 1), ``sp-sel``
  1 reads T2, T3 (q = 2, 3), which then stand for T0, T1. So one register can carry the
  metadata of two K steps: T0, T1 the first (``spsel=0``), T2, T3 the second (``spsel=1``)
  (:func:`meta_registers_pair`).
* e4m3/e5m2/s8/u8 (m64nNk64, 16 chunks per row): row ``16w + g + 8*(q % 2)``, chunk
  ``8*(q // 2) + i``. All four threads of a quad hold metadata; ``sp-sel`` must be 0.

**Compressed A.** In shared memory the compressed A is an ordinary 64 x K/2 operand (either
major-ness where the type allows it), packed with :func:`~nbwgmma.layout.wgmma_model.pack_operand`
and read through its descriptor as the dense wgmma reads a 64 x K/2 A. In registers it is the
dense A fragment of that 64 x K/2 tile (:func:`~nbwgmma.layout.fragment.a_frag_coords` of the
same type key: the dense K of a type is half its sparse K), :func:`sparse_a_registers`.
"""

from __future__ import annotations

import numpy as np

from ..errors import LayoutError
from .descriptor import SWIZZLE_BYTES, decode_desc
from .fragment import a_frag_coords
from .kinds import wgmma_sp_kind
from .wgmma_model import ELEMENT_BYTES, decode_elements, encode_elements, read_operand

__all__ = [
    "sparse_chunk",
    "TF32_META",
    "prune_24",
    "sparse_violations",
    "compress_24",
    "decompress_24",
    "meta_coords",
    "meta_readers",
    "meta_registers",
    "meta_registers_pair",
    "read_meta_registers",
    "sparse_a_registers",
    "read_sparse_a_registers",
    "wgmma_sp_reference",
]

#: The tf32 metadata code of each kept position of a 1:2 chunk (PTX ISA, "Sparse matrix storage").
TF32_META = {0: 0b0100, 1: 0b1110}
_TF32_POS = {code: pos for pos, code in TF32_META.items()}


def sparse_chunk(atype: str) -> int:
    """Elements per metadata chunk of a sparse A of element type ``atype``: 2 for tf32 (1:2),
    else 4 (2:4). Half of each chunk is kept."""
    if atype == "b1":
        raise LayoutError("wgmma.mma_async.sp has no b1 form")
    return 2 if atype == "tf32" else 4


def _chunks(x: np.ndarray, atype: str):
    x = np.asarray(x)
    c = sparse_chunk(atype)
    if x.ndim != 2 or x.shape[1] % c:
        raise LayoutError(f"a sparse {atype} A is a [rows, K] matrix with K a multiple of {c}; got shape {x.shape}")
    return x.reshape(x.shape[0], -1, c), c


def prune_24(x, atype: str = "f16") -> np.ndarray:
    """``x`` with all but the largest-magnitude half of each chunk zeroed (2 of 4; 1 of 2 for
    tf32), along K (the last axis). Of equal magnitudes the lower position is kept."""
    g, c = _chunks(x, atype)
    order = np.argsort(-np.abs(g.astype(np.float64)), axis=-1, kind="stable")
    keep = np.zeros(g.shape, bool)
    np.put_along_axis(keep, order[..., : c // 2], True, axis=-1)
    return np.where(keep, g, np.zeros_like(g)).reshape(np.shape(x))


def sparse_violations(x, atype: str = "f16") -> np.ndarray:
    """``[(row, column of the chunk's first element), ...]`` of the chunks of ``x`` holding more
    nonzeros than the sparsity keeps (more than 2 of 4; more than 1 of 2 for tf32)."""
    g, c = _chunks(x, atype)
    bad = np.argwhere((g != 0).sum(-1) > c // 2)
    return np.stack([bad[:, 0], bad[:, 1] * c], -1) if len(bad) else np.zeros((0, 2), np.int64)


def compress_24(x, atype: str = "f16") -> tuple[np.ndarray, np.ndarray]:
    """``(values, meta)`` of a sparse ``x`` [rows, K]: ``values`` [rows, K/2] (the kept elements,
    lower position first, in ``x``'s dtype) and ``meta`` [rows, K/chunk] uint8 codes.

    A chunk with fewer nonzeros than it keeps also keeps its lowest zero positions (the codes
    must name distinct positions). ``ValueError`` naming the first row that holds too many
    nonzeros in a chunk: prune it first (:func:`prune_24`)."""
    g, c = _chunks(x, atype)
    bad = sparse_violations(x, atype)
    if len(bad):
        r, col = (int(v) for v in bad[0])
        raise LayoutError(
             f"row {r} of A is not {c // 2}:{c} sparse: columns {col}..{col + c - 1} hold "
             f"{int((g[r, col // c] != 0).sum())} nonzeros ({len(bad)} such chunks in all); prune it with prune_24"
        )
    # Nonzeros first (stable: in position order), then zeros; keep the first half, sorted.
    order = np.argsort(g == 0, axis=-1, kind="stable")[..., : c // 2]
    pos = np.sort(order, axis=-1)
    values = np.take_along_axis(g, pos, axis=-1).reshape(g.shape[0], -1)
    if c == 2:
        meta = np.where(pos[..., 0] == 0, TF32_META[0], TF32_META[1])
    else:
        meta = pos[..., 0] | (pos[..., 1] << 2)
    return values, meta.astype(np.uint8)


def _positions(meta: np.ndarray, atype: str) -> np.ndarray:
    """Kept positions [rows, chunks, kept] of metadata codes; ``ValueError`` for a code that is
    undefined behaviour."""
    meta = np.asarray(meta, np.uint8)
    if sparse_chunk(atype) == 2:
        ok = np.isin(meta, list(_TF32_POS))
        if not ok.all():
            r, ch = np.argwhere(~ok)[0]
            raise LayoutError(f"tf32 metadata code 0b{int(meta[r, ch]):04b} at row {r}, chunk {ch} is undefined; "
                              f"only 0b0100 and 0b1110 are meaningful")
        return np.where(meta == TF32_META[0], 0, 1)[..., None]
    lo, hi = meta & 3, (meta >> 2) & 3
    if (lo == hi).any() or (meta > 15).any():
        r, ch = np.argwhere((lo == hi) | (meta > 15))[0]
        raise LayoutError(f"metadata code 0b{int(meta[r, ch]):04b} at row {r}, chunk {ch} is undefined: its two "
                          f"2-bit positions must differ")
    return np.stack([lo, hi], -1)


def decompress_24(values, meta, atype: str = "f16") -> np.ndarray:
    """The dense [rows, K] matrix of compressed ``values`` [rows, K/2] and codes ``meta``
    (the inverse of :func:`compress_24`); ``ValueError`` for a code that is undefined."""
    values = np.asarray(values)
    c = sparse_chunk(atype)
    pos = _positions(meta, atype)
    rows, chunks, kept = pos.shape
    if values.shape != (rows, chunks * kept):
        raise LayoutError(f"{rows} x {chunks} metadata codes describe {rows} x {chunks * kept} values; "
                          f"got {values.shape}")
    out = np.zeros((rows, chunks, c), values.dtype)
    np.put_along_axis(out, pos, values.reshape(rows, chunks, kept), axis=-1)
    return out.reshape(rows, chunks * c)


def meta_coords(kind: str) -> np.ndarray:
    """``[128, 8, 2]``: (row, chunk) of the 64 x K tile that code ``i`` (bits ``4i..4i+3``) of
    thread ``t``'s metadata register describes. For 16- and 32-bit types threads T2, T3 of each
    quad cover what T0, T1 cover (read with ``sp-sel`` 1 instead of 0)."""
    k = wgmma_sp_kind(kind)
    t = np.arange(128)[:, None]
    i = np.arange(8)[None, :]
    w, lane = t // 32, t % 32
    g, q = lane // 4, lane % 4
    if k.input_bits == 8:
        row = 16 * w + g + 8 * (q % 2)
        chunk = 8 * (q // 2) + i
    else:
        row = 16 * w + g + 8 * (i // 4)
        chunk = 4 * (q % 2) + i % 4
    return np.stack(np.broadcast_arrays(row, chunk), -1)


def meta_readers(kind: str, spsel: int) -> np.ndarray:
    """``[128]`` bool: the threads whose metadata register the instruction reads with selector
    ``spsel``; ``ValueError`` for a selector the ISA leaves undefined for the type."""
    k = wgmma_sp_kind(kind)
    if spsel not in k.spsel_values:
        raise LayoutError(f"sp-sel {spsel} is undefined for {kind}; legal: {list(k.spsel_values)}")
    q = np.arange(128) % 4
    return np.ones(128, bool) if k.input_bits == 8 else (q // 2 == spsel)


def _check_meta_tile(meta, kind):
    k = wgmma_sp_kind(kind)
    meta = np.asarray(meta, np.uint8)
    want = (64, k.k // k.chunk)
    if meta.shape != want:
        raise LayoutError(f"the metadata of one {kind} wgmma.sp is {want[0]} x {want[1]} codes; got {meta.shape}")
    return meta


def meta_registers(meta, kind: str) -> np.ndarray:
    """``[128]`` uint32: each thread's metadata register for one wgmma.sp, from the codes
    ``meta`` [64, K/chunk] of its 64 x K tile. Every thread holds its part (T2, T3 a copy of
    T0, T1's for 16- and 32-bit types), so any legal ``spsel`` reads the same codes."""
    meta = _check_meta_tile(meta, kind)
    coords = meta_coords(kind)
    codes = meta[coords[..., 0], coords[..., 1]].astype(np.uint32)
    return (codes << (4 * np.arange(8, dtype=np.uint32))).sum(-1).astype(np.uint32)


def meta_registers_pair(meta_sel0, meta_sel1, kind: str) -> np.ndarray:
    """``[128]`` uint32 carrying two wgmma.sp's metadata (16- and 32-bit types only): T0, T1 of
    each quad hold ``meta_sel0``'s codes (read with ``spsel=0``), T2, T3 ``meta_sel1``'s
    (``spsel=1``)."""
    if wgmma_sp_kind(kind).input_bits == 8:
        raise LayoutError(f"{kind}: all four threads of a quad hold the metadata of 8-bit types; there is no pair")
    upper = np.arange(128) % 4 >= 2
    return np.where(upper, meta_registers(meta_sel1, kind), meta_registers(meta_sel0, kind)).astype(np.uint32)


def read_meta_registers(regs, kind: str, spsel: int = 0) -> np.ndarray:
    """The codes [64, K/chunk] a wgmma.sp reads from the threads' metadata registers ``regs``
    [128] with selector ``spsel`` (the registers of the other threads are not read)."""
    k = wgmma_sp_kind(kind)
    regs = np.asarray(regs, np.uint64).reshape(128)
    readers = meta_readers(kind, spsel)
    coords = meta_coords(kind)[readers]
    codes = (regs[readers][:, None] >> (4 * np.arange(8, dtype=np.uint64))) & 15
    out = np.zeros((64, k.k // k.chunk), np.uint8)
    out[coords[..., 0], coords[..., 1]] = codes
    return out


def sparse_a_registers(values, kind: str) -> np.ndarray:
    """``[128, 4]`` uint32: the A registers of ``wgmma_mma_async_sp_rs`` holding the compressed
    64 x K/2 tile ``values`` (the dense A-fragment layout of that tile)."""
    k = wgmma_sp_kind(kind)
    values = np.asarray(values)
    if values.shape != (64, k.a_cols):
        raise LayoutError(f"the compressed A of one {kind} wgmma.sp is 64 x {k.a_cols}; got {values.shape}")
    coords = a_frag_coords(kind)  # [128, 4, E, 2]
    vals = values[coords[..., 0], coords[..., 1]]
    raw = encode_elements(vals.reshape(128 * 4, -1), k.atype)
    return raw.view(np.uint32).reshape(128, 4)


def read_sparse_a_registers(regs, kind: str) -> np.ndarray:
    """The compressed 64 x K/2 A (float64 or int64) that ``wgmma_mma_async_sp_rs`` reads from
    the registers ``regs`` [128, 4]."""
    k = wgmma_sp_kind(kind)
    regs = np.ascontiguousarray(regs, np.uint32).reshape(128 * 4, 1)
    dec = decode_elements(regs.view(np.uint8).reshape(-1, 4), k.atype)
    coords = a_frag_coords(kind)
    out = np.zeros((64, k.a_cols), dec.dtype)
    out[coords[..., 0], coords[..., 1]] = dec.reshape(coords.shape[:-1])
    return out


def _check_b_layout(desc_b: int, kind, trans_b: int):
    sw = decode_desc(desc_b)["swizzle"]
    kbytes = int(kind.k * ELEMENT_BYTES[kind.btype])
    if not trans_b and sw != "none" and kbytes > SWIZZLE_BYTES[sw]:
        raise NotImplementedError(
            f"{kind.key}: a K-major B of a wgmma.sp spans {kbytes} bytes of K, more than one {sw} swizzle row; "
            f"the model does not say where the hardware reads the rest (use no swizzle or a wider one)"
        )


def wgmma_sp_reference(image, kind: str, n: int, desc_a: int, desc_b: int, meta_regs, *, spsel: int = 0,
                       trans_a: int = 0, trans_b: int = 0, scale_a: int = 1, scale_b: int = 1, d=None,
                       a_values=None):
    """D (64 x N, float64 or int64) of one ``wgmma.mma_async.sp`` over the shared-memory
    ``image``, plus ``d`` if given.

    The compressed A (64 x K/2) is read through ``desc_a`` (``trans_a``: M-major), or given as
    ``a_values`` (A from registers: :func:`read_sparse_a_registers`); the codes come from the
    threads' ``meta_regs`` [128] with selector ``spsel``; B (N x K) is read through ``desc_b``.
    ``ValueError`` where the metadata or the selector is undefined behaviour.
    """
    k = wgmma_sp_kind(kind)
    if a_values is None:
        a_values = read_operand(image, desc_a, 64, k.a_cols, k.atype, "MN" if trans_a else "K")
    a = decompress_24(a_values, read_meta_registers(meta_regs, kind, spsel), k.atype)
    _check_b_layout(desc_b, k, trans_b)
    b = read_operand(image, desc_b, n, k.k, k.btype, "MN" if trans_b else "K")
    out = (scale_a * a) @ (scale_b * b).T
    return out if d is None else out + d
