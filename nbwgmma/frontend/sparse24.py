"""``nbwgmma.Sparse24``: a 2:4-sparse weight, compressed once, for :func:`nbwgmma.matmul`.

``Sparse24.from_dense(w)`` takes a 2-D CUDA array (PyTorch, CuPy, Numba) of f16, bf16, e4m3 or
e5m2 whose every row holds at most 2 nonzeros in each group of 4 consecutive elements (2:4
along K, PTX ISA "Sparse matrix storage"), and keeps, on ``w``'s device and in ``w``'s library:

* ``values``: the kept elements ``[M, K/2]`` (each chunk's two, lower position first), rows
  zero-padded to 16 bytes;
* ``meta``: the metadata registers of the sparse GEMM, ``int32 [kblocks * mblocks, R * 128]``,
  one word per consumer thread, stage and 64-row block, in the order the instruction reads
  them (:mod:`nbwgmma.layout.sparse_gemm`), so a consumer does one coalesced 32-bit shared
  load per stage for two sparse wgmmas.

A weight that is not 2:4 is refused with a :class:`~nbwgmma.errors.MatmulError` naming its
first row and columns that break it; ``prune=True`` keeps the 2 largest magnitudes of each group
of 4 instead (ties: the lower position). The work is done once, on the host (numpy over the
raw bits). ``w24.t()`` (or ``w24.T``) is the transposed weight as ``F.linear`` uses it:
``matmul(x, w24.t())`` is ``x @ w.T``; ``to_dense()`` gives the dense weight back.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .. import sim
from ..errors import MatmulError, MatmulTypeError
from ..layout.sparse_gemm import compress_bits, decompress_bits, gemm_meta, prune_bits
from .args import NP_OF, lib_of, torch_dtype
from .arrays import array_info

__all__ = ["Sparse24", "SPARSE_TYPES"]

_SIM = sim.enabled()
_ESIZE = {"f16": 2, "bf16": 2, "e4m3": 1, "e5m2": 1}
_RAW = {"u16": 2, "s16": 2, "u8": 1, "s8": 1}
#: 16-bit weights: one metadata register carries both K steps of a stage (T0, T1 of each quad the
#: first, T2, T3 the second); false: one register per K step.
PAIRED = True


def _host_bits(w, info, lib, esize):
    """The elements of ``w`` as raw bits in a host numpy array (uint16 or uint8)."""
    bits = np.uint16 if esize == 2 else np.uint8
    if lib == "torch":
        import torch

        return w.detach().contiguous().view(torch.int16 if esize == 2 else torch.uint8).cpu().numpy().view(bits)
    if lib == "cupy":
        import cupy

        return np.ascontiguousarray(cupy.asnumpy(w)).view(bits)
    return np.ascontiguousarray(w.copy_to_host()).view(bits)


def _device(lib, ref, host, dtype):
    """``host`` (raw bits or int32) as an array of ``ref``'s library and device; ``dtype`` the
    element type name of the bits (None: int32)."""
    if lib == "torch":
        import torch

        raw = {2: torch.int16, 1: torch.uint8, 4: torch.int32}[host.dtype.itemsize]
        t = torch.from_numpy(np.ascontiguousarray(host).view(np.dtype(str(raw).replace("torch.", "")))).to(ref.device)
        return t if dtype is None else t.view(torch_dtype(dtype))
    np_type = np.int32 if dtype is None else NP_OF[dtype]
    host = np.ascontiguousarray(host).view(np_type)
    if lib == "cupy":
        import cupy

        with cupy.cuda.Device(ref.device.id):
            return cupy.asarray(host)
    return cuda.to_device(host)


class Sparse24:
    """A 2:4-sparse weight W [M, K] held compressed (``values``, ``meta``); ``transposed``: this
    object stands for W^T [K, M] (made by :meth:`t`, sharing the arrays). Build it with
    :meth:`from_dense`."""

    def __init__(self, values, meta, codes, shape, mblocks, meta_regs, dtype, lib, device, transposed=False):
        self.values, self.meta, self.codes, self.mblocks, self.meta_regs = values, meta, codes, mblocks, meta_regs
        self.rows, self.k = shape
        self.dtype, self.lib, self.device, self.transposed = dtype, lib, device, transposed
        self._maps = None

    @classmethod
    def from_dense(cls, w, *, prune: bool = False, dtype: str | None = None) -> "Sparse24":
        """Compress the 2-D CUDA array ``w`` [M, K] (K a multiple of 4) of f16, bf16, e4m3 or
        e5m2 (``dtype`` names the type of raw ``uint16``/``uint8`` bits: NumPy, hence Numba and
        CuPy, has no bf16 or fp8). ``prune``: zero all but the 2 largest magnitudes of each group
        of 4 first; without it a weight that is not 2:4 is a :class:`MatmulError`."""
        if not isinstance(prune, (bool, np.bool_)):
            raise MatmulTypeError(f"Sparse24.from_dense: prune must be True or False; got {prune!r}")
        try:
            info = array_info(w)
        except TypeError as e:
            raise MatmulTypeError(f"Sparse24.from_dense: {e}") from None
        t = info.dtype
        if dtype is not None:
            if not isinstance(dtype, str) or dtype not in _ESIZE:
                raise MatmulTypeError(f"Sparse24.from_dense: dtype must be one of {sorted(_ESIZE)}; got {dtype!r}")
            if t not in _RAW:
                raise MatmulTypeError(f"Sparse24.from_dense: dtype= names the type of a weight held as raw bits "
                                      f"(uint16 for bf16/f16, uint8 for e4m3/e5m2); a weight of {t} has its own "
                                      f"type: leave dtype out (got dtype={dtype!r})")
            if _RAW[t] != _ESIZE[dtype]:
                raise MatmulTypeError(f"Sparse24.from_dense: dtype={dtype!r} reads {_ESIZE[dtype]}-byte raw bits; "
                                      f"got a weight of {t} ({_RAW[t]}-byte elements)")
            t = dtype
        if t not in _ESIZE:
            raise MatmulTypeError(f"Sparse24.from_dense: the weight must be f16, bf16, e4m3 or e5m2 (raw uint16/uint8 "
                                  f"bits with dtype=); got {info.dtype}")
        if len(info.shape) != 2 or info.shape[1] % 4 or 0 in info.shape:
            raise MatmulError(f"Sparse24.from_dense: the weight must be 2-D [M, K] with M > 0 and K a positive "
                              f"multiple of 4 (groups of 4 along K); got shape {info.shape}")
        esize = _ESIZE[t]
        lib = lib_of(w)
        bits = _host_bits(w, info, lib, esize)
        if prune:
            bits = prune_bits(bits, esize)
        try:
            values, codes = compress_bits(bits, esize)
        except ValueError as e:
            raise MatmulError(f"Sparse24.from_dense: {e}; prune it first (Sparse24.from_dense(w, prune=True))") \
                from None
        m, k = info.shape
        per_row = 16 // esize  # elements per 16 bytes: TMA row pitches
        padded = np.zeros((m, -(-(k // 2) // per_row) * per_row), values.dtype)
        padded[:, :k // 2] = values
        meta = gemm_meta(codes, esize, PAIRED)
        kblocks, mblocks, regs = meta.shape[:3]
        meta = meta.reshape(kblocks * mblocks, -1).view(np.int32)
        return cls(_device(lib, w, padded, t), _device(lib, w, meta, None), codes, (m, k), mblocks, regs, t, lib,
                   info.device)

    @property
    def shape(self) -> tuple:
        """(M, K), or (K, M) transposed."""
        return (self.k, self.rows) if self.transposed else (self.rows, self.k)

    def t(self) -> "Sparse24":
        """The transposed weight (the same arrays): ``matmul(x, w24.t())`` is ``x @ w.T``."""
        other = Sparse24(self.values, self.meta, self.codes, (self.rows, self.k), self.mblocks, self.meta_regs,
                         self.dtype, self.lib, self.device, not self.transposed)
        other._maps = self._maps
        return other

    T = property(t)

    def to_dense(self):
        """The dense weight [M, K] (W^T's [K, M] view if transposed) as an array of the weight's
        library, on its device (for tests)."""
        if self.lib == "torch":
            import torch

            host = self.values.view(torch.int16 if _ESIZE[self.dtype] == 2 else torch.uint8).cpu().numpy()
        elif self.lib == "cupy":
            import cupy

            host = cupy.asnumpy(self.values)
        else:
            host = self.values.copy_to_host()
        host = host.view(np.uint16 if _ESIZE[self.dtype] == 2 else np.uint8)
        dense = _device(self.lib, self.values, decompress_bits(host, self.codes), self.dtype)
        return dense.T if self.transposed else dense

    def maps(self):
        """(compressed values, metadata) tensor maps, built on first use and kept: the boxes of
        one stage of :class:`~nbwgmma.kit.sparse.SparseConsumers` (128 rows x 64 bytes with the
        64-byte swizzle; 2 blocks x R * 128 words)."""
        if self._maps is None:
            from ..tma import TensorMap

            ta = TensorMap(self.values, (128, 64 // _ESIZE[self.dtype]), dtype=self.dtype, swizzle="64B")
            tm = TensorMap(self.meta, (2, self.meta_regs * 128), dtype="s32", swizzle="none")
            self._maps = (ta, tm)
        return self._maps

    def __repr__(self):
        return f"Sparse24({self.dtype}, shape={self.shape}{', transposed' if self.transposed else ''}, {self.lib})"


#: The types :func:`nbwgmma.matmul` hands to :func:`nbwgmma.frontend.sparse.sparse_matmul`.
SPARSE_TYPES = (Sparse24,)
