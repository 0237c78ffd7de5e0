"""The 64-bit shared-memory matrix descriptor of wgmma, and the swizzle address map: host-side
models (ints or numpy arrays), with the constants the device-side intrinsics take
(:func:`nbwgmma.intrinsics.make_desc`).

PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions:
Matrix Descriptor Format" and "Shared Memory Matrix Layout":

======  ===========================================================
bits    field
======  ===========================================================
0-13    start address >> 4
16-29   leading dimension byte offset (LBO) >> 4
32-45   stride dimension byte offset (SBO) >> 4
49-51   base offset (swizzle pattern phase when the start is not aligned)
62-63   swizzle: 0 none, 1 128B, 2 64B, 3 32B
======  ===========================================================

Canonical layouts (T = 16 bytes; S = swizzle span in bytes):

* K-major, no swizzle: 8x16-byte core matrices; the next core matrix along K is
  LBO bytes away, along M/N SBO bytes away.
* K-major, swizzled: rows of S bytes (the K extent of one atom), 8 rows per
  atom; the next 8 rows SBO bytes away; LBO unused. A K step inside the atom is
  a plain byte offset added to the start address.
* MN-major, no swizzle: core matrices of 8 K-rows x 16 bytes of M/N; LBO along
  K, SBO along M/N.
* MN-major, swizzled: rows of S bytes along M/N, 8 K-rows per atom; the next
  S bytes of M/N LBO bytes away, the next 8 K-rows SBO bytes away.

The swizzle permutes 16-byte chunks by address bits: ``addr ^ ((addr >> 7) & m) << 4``
with ``m`` = 7, 3, 1 for 128B, 64B, 32B (pattern period 1024, 512, 256 bytes), so
swizzled tiles start on a multiple of that period.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from ..errors import LayoutError

if TYPE_CHECKING:
    import numpy as np

#: An int, or a numpy integer array of addresses or offsets (the maps work elementwise).
Addr = TypeVar("Addr", int, "np.ndarray")

__all__ = [
    "SWIZZLES",
    "SWIZZLE_CODE",
    "SWIZZLE_NAME",
    "SWIZZLE_BYTES",
    "SWIZZLE_PERIOD",
    "encode_desc",
    "decode_desc",
    "swizzle_addr",
    "kmajor_offset",
    "mnmajor_offset",
    "canonical_strides",
    "SWIZZLE_MASK",
]

SWIZZLES = ("none", "32B", "64B", "128B")
#: Descriptor encoding of the swizzle mode (bits 62-63).
SWIZZLE_CODE = {"none": 0, "128B": 1, "64B": 2, "32B": 3}
#: The swizzle mode of each descriptor code (the inverse of :data:`SWIZZLE_CODE`).
SWIZZLE_NAME = {code: name for name, code in SWIZZLE_CODE.items()}
#: Bytes of a swizzled row (for "none": one core-matrix row).
SWIZZLE_BYTES = {"none": 16, "32B": 32, "64B": 64, "128B": 128}
#: Bytes after which the swizzle pattern repeats: tiles start on a multiple.
SWIZZLE_PERIOD = {"none": 16, "32B": 256, "64B": 512, "128B": 1024}
#: The address bits 7-9 the swizzle XORs into bits 4-6 (``addr ^ ((addr >> 7) & mask) << 4``).
SWIZZLE_MASK = {"none": 0, "32B": 1, "64B": 3, "128B": 7}


def _check_swizzle(swizzle: str) -> None:
    if swizzle not in SWIZZLE_CODE:
        raise LayoutError(f"swizzle must be one of {SWIZZLES}; got {swizzle!r}")


def encode_desc(addr: int, lbo: int, sbo: int, swizzle: str = "none", base_offset: int = 0) -> int:
    """Host encoding of a descriptor (same bits as :func:`nbwgmma.intrinsics.make_desc` on the device)."""
    _check_swizzle(swizzle)
    for name, v in (("addr", addr), ("lbo", lbo), ("sbo", sbo)):
        if v % 16 or not 0 <= v < (1 << 18):
            raise LayoutError(f"{name} must be a multiple of 16 in [0, 2^18); got {v}")
    if not 0 <= base_offset < 8:
        raise LayoutError(f"base_offset must be in [0, 8); got {base_offset}")
    return (
        ((addr >> 4) & 0x3FFF)
        | (((lbo >> 4) & 0x3FFF) << 16)
        | (((sbo >> 4) & 0x3FFF) << 32)
        | ((base_offset & 7) << 49)
        | (SWIZZLE_CODE[swizzle] << 62)
    )


def decode_desc(desc: int) -> dict[str, int | str]:
    """Fields of a descriptor, in bytes, for tests and debugging."""
    code = (desc >> 62) & 3
    swizzle = SWIZZLE_NAME[code]
    return {
        "addr": (desc & 0x3FFF) << 4,
        "lbo": ((desc >> 16) & 0x3FFF) << 4,
        "sbo": ((desc >> 32) & 0x3FFF) << 4,
        "base_offset": (desc >> 49) & 7,
        "swizzle": swizzle,
    }


def swizzle_addr(addr: Addr, swizzle: str) -> Addr:
    """Physical shared-memory byte address of logical address ``addr`` (ints or numpy arrays)."""
    _check_swizzle(swizzle)
    m = SWIZZLE_MASK[swizzle]
    return addr ^ (((addr >> 7) & m) << 4)


def kmajor_offset(row: Addr, kbyte: Addr, swizzle: str, sbo: int, lbo: int = 0) -> Addr:
    """Logical byte offset (before swizzling) of byte ``kbyte`` of row ``row`` in a K-major tile."""
    _check_swizzle(swizzle)
    if swizzle == "none":
        return (row // 8) * sbo + (kbyte // 16) * lbo + (row % 8) * 16 + kbyte % 16
    s = SWIZZLE_BYTES[swizzle]
    return (row // 8) * sbo + (row % 8) * s + kbyte


def mnmajor_offset(mnbyte: Addr, k: Addr, swizzle: str, sbo: int, lbo: int) -> Addr:
    """Logical byte offset of byte ``mnbyte`` (along M/N) of K-row ``k`` in an MN-major tile."""
    _check_swizzle(swizzle)
    if swizzle == "none":
        return (k // 8) * lbo + (mnbyte // 16) * sbo + (k % 8) * 16 + mnbyte % 16
    s = SWIZZLE_BYTES[swizzle]
    return (mnbyte // s) * lbo + (k // 8) * sbo + (k % 8) * s + mnbyte % s


def canonical_strides(swizzle: str, kbytes: int) -> tuple[int, int]:
    """(LBO, SBO) of a densely packed K-major tile whose rows hold ``kbytes`` bytes of K.

    Dense means: for "none", the K core matrices of each 8 rows side by side
    (LBO = 128), then the next 8 rows (SBO = 8 * kbytes); for a swizzle, rows of
    exactly one atom (``kbytes`` equal to the swizzle span), 8 rows per atom
    (SBO = 8 * span; LBO unused, encoded as 16).
    """
    _check_swizzle(swizzle)
    s = SWIZZLE_BYTES[swizzle]
    if swizzle == "none":
        if kbytes % 16:
            raise LayoutError(f"K extent must be a multiple of 16 bytes; got {kbytes}")
        return 128, 8 * kbytes
    if kbytes != s:
        raise LayoutError(f"a dense K-major {swizzle} tile has rows of {s} bytes; got {kbytes}")
    return 16, 8 * s
