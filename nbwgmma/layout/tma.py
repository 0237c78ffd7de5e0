"""The TMA box model: what one tiled tensor-map copy puts in shared memory (the box at
given coordinates, out-of-bounds elements filled, rows swizzled), and the element types a
tensor map takes. Host-side (numpy): the reference the TMA tests and the simulator's copies
use. Tensor maps themselves are built by :class:`nbwgmma.tma.TensorMap`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .descriptor import swizzle_addr

__all__ = ["TMA_DTYPES", "box_copy_model"]

#: nbwgmma element type -> (driver data type name, bytes)
TMA_DTYPES = {
    "f16": ("FLOAT16", 2),
    "bf16": ("BFLOAT16", 2),
    "f32": ("FLOAT32", 4),
    "tf32": ("TFLOAT32", 4),
    "f64": ("FLOAT64", 8),
    "e4m3": ("UINT8", 1),
    "e5m2": ("UINT8", 1),
    "s8": ("UINT8", 1),
    "u8": ("UINT8", 1),
    "u16": ("UINT16", 2),
    "s16": ("UINT16", 2),
    "s32": ("INT32", 4),
    "u32": ("UINT32", 4),
    "s64": ("INT64", 8),
    "u64": ("UINT64", 8),
}


def box_copy_model(tensor: np.ndarray, box: Sequence[int], coords: Sequence[int], swizzle: str = "none",
                   oob_fill: str = "zero") -> np.ndarray:
    """Shared-memory bytes of one tiled load: the box at ``coords`` (array order, may be
    negative or past the edge), out-of-bounds elements filled, rows swizzled.

    ``tensor`` may hold a float type's raw bits in unsigned integers of its size (as the
    simulator reads a map's memory): a NaN fill then writes the NaN whose bits are all ones but
    the sign's, a NaN in every float format of that size.

    Returns a flat ``uint8`` array of ``prod(box) * itemsize`` bytes.
    """
    tensor = np.asarray(tensor)
    box = tuple(box)
    out = np.zeros(box, tensor.dtype)
    if oob_fill == "nan":
        out[...] = np.nan if tensor.dtype.kind == "f" else (1 << (8 * tensor.dtype.itemsize - 1)) - 1
    src, dst = [], []
    for c, b, n in zip(coords, box, tensor.shape):
        lo, hi = max(c, 0), min(c + b, n)
        if hi <= lo:
            return _swizzled(out, swizzle)
        src.append(slice(lo, hi))
        dst.append(slice(lo - c, hi - c))
    out[tuple(dst)] = tensor[tuple(src)]
    return _swizzled(out, swizzle)


def _swizzled(box_values: np.ndarray, swizzle: str) -> np.ndarray:
    raw = np.ascontiguousarray(box_values).view(np.uint8).reshape(-1)
    if swizzle == "none":
        return raw.copy()
    out = np.empty_like(raw)
    out[swizzle_addr(np.arange(raw.size), swizzle)] = raw
    return out
