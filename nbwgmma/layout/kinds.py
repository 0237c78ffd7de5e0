"""The wgmma type tables: every legal ``"<dtype>.<atype>.<btype>"`` combination of sm_90a,
with its K, its accumulator registers and its legal N (PTX ISA, "Asynchronous Warpgroup Level
Matrix Multiply-Accumulate Instructions"), for the dense ``wgmma.mma_async``
(:data:`WGMMA_KINDS`) and for ``wgmma.mma_async.sp`` with a 2:4-sparse A
(:data:`WGMMA_SP_KINDS`: the same types but ``b1``, twice the K, PTX ISA section
"wgmma.mma_async.sp"). Host-side: the intrinsics check their arguments against them while
Numba types a kernel, and the models (:mod:`~nbwgmma.layout.fragment`,
:mod:`~nbwgmma.layout.wgmma_model`, :mod:`~nbwgmma.layout.sparse`) read them."""

from __future__ import annotations

from dataclasses import dataclass

from numba import types

from ..errors import KindError

__all__ = ["WgmmaKind", "WGMMA_KINDS", "wgmma_kind", "acc_regs", "FP8_TYPES", "INT8_TYPES", "WGMMA_SP_KINDS",
           "wgmma_sp_kind"]

_N_FLOAT = tuple(range(8, 257, 8))
# Integer and single-bit forms: N = 8, 16, 24, 32, then multiples of 16.
_N_INT = (8, 16, 24) + tuple(range(32, 257, 16))

#: fp8 and 8-bit integer input types
FP8_TYPES = ("e4m3", "e5m2")
INT8_TYPES = ("s8", "u8")


@dataclass(frozen=True)
class WgmmaKind:
    """One row of the wgmma type table."""

    dtype: str
    atype: str
    btype: str
    k: int
    n_values: tuple
    #: A row of the ``wgmma.mma_async.sp`` table: A is 2:4 sparse (1:2 for tf32), stored with
    #: K/2 columns, and ``k`` is the K of the product.
    sparse: bool = False

    @property
    def key(self) -> str:
        return f"{self.dtype}.{self.atype}.{self.btype}"

    @property
    def input_bits(self) -> int:
        return {"f16": 16, "bf16": 16, "tf32": 32, "b1": 1}.get(self.atype, 8)

    @property
    def transposable(self) -> bool:
        """``imm-trans-a/b`` exist only for 16-bit inputs."""
        return self.input_bits == 16

    @property
    def is_float(self) -> bool:
        return self.dtype != "s32"

    @property
    def acc_type(self) -> types.Type:
        return {"f32": types.float32, "f16": types.uint32, "s32": types.int32}[self.dtype]

    def acc_regs(self, n: int) -> int:
        """Accumulator registers per thread: 64*N/128 values, two f16 per register."""
        return n // 4 if self.dtype == "f16" else n // 2

    def n_of(self, regs: int) -> int:
        return regs * 4 if self.dtype == "f16" else regs * 2

    def instruction(self, n: int) -> str:
        return f"m64n{n}k{self.k}"

    @property
    def a_cols(self) -> int:
        """Columns of A as stored (shared memory or registers): K, or K/2 for a sparse A."""
        return self.k // 2 if self.sparse else self.k

    @property
    def chunk(self) -> int:
        """Sparse A: elements of one metadata chunk of a row (4; 2 for tf32, whose 1:2 sparsity
        the ISA states on pairs), each chunk described by 4 bits of metadata."""
        return 2 if self.atype == "tf32" else 4

    @property
    def spsel_values(self) -> tuple:
        """Sparse A: the legal sparsity selectors (PTX ISA, "Sparse matrix storage"): a thread
        pair of each quad holds the metadata for 16- and 32-bit types (0: T0,T1; 1: T2,T3),
        all four threads for 8-bit types (0 only)."""
        return (0,) if self.input_bits == 8 else (0, 1)


def _table():
    kinds = [
        WgmmaKind("f16", "f16", "f16", 16, _N_FLOAT),
        WgmmaKind("f32", "f16", "f16", 16, _N_FLOAT),
        WgmmaKind("f32", "bf16", "bf16", 16, _N_FLOAT),
        WgmmaKind("f32", "tf32", "tf32", 8, _N_FLOAT),
    ]
    kinds += [WgmmaKind(d, a, b, 32, _N_FLOAT) for d in ("f16", "f32") for a in FP8_TYPES for b in FP8_TYPES]
    kinds += [WgmmaKind("s32", a, b, 32, _N_INT) for a in INT8_TYPES for b in INT8_TYPES]
    kinds.append(WgmmaKind("s32", "b1", "b1", 256, _N_INT))
    return {k.key: k for k in kinds}


#: Every wgmma type combination the PTX ISA allows on sm_90a.
WGMMA_KINDS: dict = _table()


def _sparse_table():
    # PTX ISA, "wgmma.mma_async.sp": every dense type but b1, K doubled (m64nNk32 for
    # f16/bf16, k16 for tf32, k64 for fp8 and s8/u8), the same N per type.
    return {key: WgmmaKind(k.dtype, k.atype, k.btype, 2 * k.k, k.n_values, sparse=True)
            for key, k in WGMMA_KINDS.items() if k.atype != "b1"}


#: Every ``wgmma.mma_async.sp`` type combination of sm_90a (keys as in :data:`WGMMA_KINDS`).
WGMMA_SP_KINDS: dict = _sparse_table()


def wgmma_kind(key: str) -> WgmmaKind:
    """The row of the table for ``key`` (``"f32.bf16.bf16"``); :class:`~nbwgmma.errors.KindError`
    (a ``ValueError``) for a combination PTX does not have."""
    try:
        return WGMMA_KINDS[key]
    except KeyError:
        raise KindError(
            f"wgmma: unknown type combination {key!r}; expected one of {', '.join(WGMMA_KINDS)}"
        ) from None


def wgmma_sp_kind(key: str) -> WgmmaKind:
    """The row of the sparse table for ``key``; :class:`~nbwgmma.errors.KindError` for a
    combination ``wgmma.mma_async.sp`` does not have."""
    try:
        return WGMMA_SP_KINDS[key]
    except KeyError:
        raise KindError(
            f"wgmma.mma_async.sp: unknown type combination {key!r}; expected one of {', '.join(WGMMA_SP_KINDS)}"
        ) from None


def acc_regs(key: str, n: int) -> int:
    """Accumulator registers per thread for ``kind`` and ``N``."""
    return wgmma_kind(key).acc_regs(n)
