"""The wgmma type table: every legal ``"<dtype>.<atype>.<btype>"`` combination of sm_90a,
with its K, its accumulator registers and its legal N (PTX ISA, "Asynchronous Warpgroup Level
Matrix Multiply-Accumulate Instructions"). Host-side: the intrinsics check their arguments
against it while Numba types a kernel, and the models (:mod:`~nbwgmma.layout.fragment`,
:mod:`~nbwgmma.layout.wgmma_model`) read it."""

from __future__ import annotations

from dataclasses import dataclass

from numba import types

__all__ = ["WgmmaKind", "WGMMA_KINDS", "wgmma_kind", "acc_regs", "FP8_TYPES", "INT8_TYPES"]

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


def wgmma_kind(key: str) -> WgmmaKind:
    """The row of the table for ``key`` (``"f32.bf16.bf16"``); ``ValueError`` for a combination
    PTX does not have."""
    try:
        return WGMMA_KINDS[key]
    except KeyError:
        raise ValueError(
            f"wgmma: unknown type combination {key!r}; expected one of {', '.join(WGMMA_KINDS)}"
        ) from None


def acc_regs(key: str, n: int) -> int:
    """Accumulator registers per thread for ``kind`` and ``N``."""
    return wgmma_kind(key).acc_regs(n)
