"""TMA tensor maps (``CUtensorMap``) for tiled bulk copies, validated before the driver sees them.

``TensorMap(array, box, swizzle="128B")`` describes copies of ``box``-shaped
tiles of a 1- to 5-D CUDA array. Shapes are given in array order (outermost
first, as numpy writes them); the driver's order (innermost first) is handled
here. Every rule of the driver documentation for ``cuTensorMapEncodeTiled`` is
checked first, and a broken one raises :class:`TensorMapError` naming the rule
and the value.

Kernels receive the map by its global-memory address (``tmap.address``, a
``uint64`` kernel argument): the 128-byte map is copied once into a device
buffer. That keeps Numba's ordinary argument passing (a by-value
``__grid_constant__`` parameter has no Numba spelling) at the cost of one
descriptor fetch per CTA, which the TMA unit caches; ``prefetch_tensormap``
hides it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np

from .errors import NbwgmmaError, is_int
from .frontend.arrays import array_info
from .layout.tma import TMA_DTYPES

__all__ = ["TensorMap", "TensorMapError", "TensorMapTypeError"]


class TensorMapError(NbwgmmaError, ValueError):
    """A tensor map request breaks a rule of cuTensorMapEncodeTiled, or its arguments have
    the wrong types (one of nbwgmma's errors: :mod:`nbwgmma.errors`)."""


class TensorMapTypeError(TensorMapError, TypeError):
    """The array of a tensor map is not a CUDA array of a type a map can have (a host array,
    an unknown object or element type)."""


_FLOAT_TYPES = {"f16", "bf16", "f32", "tf32", "f64"}
_SWIZZLE_BYTES = {"none": 0, "32B": 32, "64B": 64, "128B": 128}
_L2 = {"none": "NONE", "64B": "L2_64B", "128B": "L2_128B", "256B": "L2_256B"}


@dataclass(frozen=True)
class TensorMapParams:
    """What the map encodes, in the driver's order (innermost dimension first)."""

    dtype: str
    rank: int
    address: int
    dims: tuple
    strides: tuple  # bytes, dimensions 1..rank-1
    box: tuple
    element_strides: tuple
    swizzle: str
    oob_fill: str
    l2_promotion: str

    @property
    def box_bytes(self) -> int:
        return math.prod(self.box) * TMA_DTYPES[self.dtype][1]


def _fail(rule: str, value: Any, p: TensorMapParams | None = None) -> NoReturn:
    about = ""
    if p is not None:  # the map in the array's order, as the user gave it
        shape = "x".join(str(d) for d in reversed(p.dims))
        box = ", ".join(str(b) for b in reversed(p.box))
        about = f" (a {shape} {p.dtype} array, box ({box}))"
    raise TensorMapError(f"tensor map{about}: {rule}; got {value}")


def validate(p: TensorMapParams) -> None:
    """Every rule of cuTensorMapEncodeTiled for tiled, non-interleaved maps. ``p`` is in the
    driver's order (innermost first); the errors speak of the array's order (``box[0]`` the
    outermost, as :class:`TensorMap` takes them)."""
    es = TMA_DTYPES[p.dtype][1]
    last = p.rank - 1  # array dimension of the driver's dimension 0

    def fail(rule, value):
        _fail(rule, value, p)

    if not 1 <= p.rank <= 5:
        _fail("rank must be in [1, 5]", p.rank)
    if p.address % 16:
        fail("the global address must be 16-byte aligned", hex(p.address))
    for i, d in enumerate(p.dims):
        if not 1 <= d <= 2**32:
            fail(f"shape[{last - i}] must be in [1, 2^32]", d)
    for i, s in enumerate(p.strides):  # the stride of array dimension last - 1 - i
        if s < 0:  # (the driver takes unsigned strides: a reversed view's cannot be encoded)
            fail(f"the stride of dimension {last - 1 - i} (in bytes) must not be negative (TMA reads an array "
                 f"forwards: copy a reversed view first)", f"{s} bytes")
        if s % 16:
            fail(f"the stride of dimension {last - 1 - i} (from one index of it to the next, in bytes) must be a "
                 f"multiple of 16 bytes (rows TMA cannot address: load them another way, and store a GEMM's C "
                 f"from the registers, kit.store_rows_part)", f"{s} bytes")
        if s >= 2**40:
            fail(f"the stride of dimension {last - 1 - i} (in bytes) must be < 2^40", s)
    # (A stride below the extent of the dimensions inside it, 0 included, is taken: the driver
    # encodes such maps (measured on an H200, CUDA 13), so loads may read elements twice; a store
    # through one would write an element twice, in no set order.)
    for i, b in enumerate(p.box):
        if not 1 <= b <= 256:
            fail(f"box[{last - i}] must be in [1, 256]", b)
    if (p.box[0] * es) % 16:
        fail(f"the inner box dimension (box[{last}]) in bytes must be a multiple of 16", f"{p.box[0] * es} bytes")
    if len(p.element_strides) != p.rank:
        fail(f"element_strides must have one entry per dimension ({p.rank})", tuple(reversed(p.element_strides)))
    for i, e in enumerate(p.element_strides):
        if not 1 <= e <= 8:
            fail(f"element_strides[{last - i}] must be in [1, 8]", e)
    if not isinstance(p.swizzle, str) or p.swizzle not in _SWIZZLE_BYTES:
        fail("swizzle must be one of none, 32B, 64B, 128B", p.swizzle)
    span = _SWIZZLE_BYTES[p.swizzle]
    if span and p.box[0] * es > span:
        fail(f"with the {p.swizzle} swizzle the inner box dimension (box[{last}]) must be at most {span} bytes",
             f"{p.box[0] * es} bytes")
    if p.oob_fill not in ("zero", "nan"):
        fail("oob_fill must be 'zero' or 'nan'", p.oob_fill)
    if p.oob_fill == "nan" and p.dtype not in _FLOAT_TYPES:
        fail("NaN out-of-bounds fill needs a floating-point element type", p.dtype)
    if not isinstance(p.l2_promotion, str) or p.l2_promotion not in _L2:
        fail("l2_promotion must be one of none, 64B, 128B, 256B", p.l2_promotion)


def encode_args(p: TensorMapParams) -> tuple[Any, ...]:
    """The arguments of ``cuTensorMapEncodeTiled`` for ``p`` (sized integers wrapped as the
    bindings require)."""
    from cuda.bindings import driver as drv

    dt = getattr(drv.CUtensorMapDataType, "CU_TENSOR_MAP_DATA_TYPE_" + TMA_DTYPES[p.dtype][0])
    sw = getattr(drv.CUtensorMapSwizzle, "CU_TENSOR_MAP_SWIZZLE_" + ("NONE" if p.swizzle == "none" else p.swizzle))
    l2 = getattr(drv.CUtensorMapL2promotion, "CU_TENSOR_MAP_L2_PROMOTION_" + _L2[p.l2_promotion])
    fill = drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE
    if p.oob_fill == "nan":
        fill = drv.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    # A rank-1 map has no strides; an empty list reaches the driver as NULL, which it
    # rejects, so pass one (unread) stride.
    strides = list(p.strides) or [-(-p.dims[0] * TMA_DTYPES[p.dtype][1] // 16) * 16]
    return (
        dt, p.rank, p.address, [u64(d) for d in p.dims], [u64(s) for s in strides],
        [u32(b) for b in p.box], [u32(e) for e in p.element_strides],
        drv.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE, sw, l2, fill,
    )


def _encode(p: TensorMapParams) -> np.ndarray:
    from cuda.bindings import driver as drv

    err, tmap = drv.cuTensorMapEncodeTiled(*encode_args(p))
    if err != drv.CUresult.CUDA_SUCCESS:
        raise TensorMapError(f"cuTensorMapEncodeTiled failed: {err} for {p}")
    return np.array(tmap.opaque, dtype=np.uint64)


def _int_tuple(name: str, value: Any) -> tuple:
    """``value`` as a tuple of Python ints: integers only (no floats, no bare int)."""
    if is_int(value) or not hasattr(value, "__iter__"):
        raise TensorMapError(f"tensor map: {name} must be a sequence of integers, one per dimension; got {value!r}")
    out = tuple(value)
    if not all(is_int(v) for v in out):
        raise TensorMapError(f"tensor map: {name} must hold integers; got {out!r}")
    return tuple(int(v) for v in out)


def _check_inside(info, shape, strides_b, es) -> None:
    """A view given by ``shape`` / ``strides`` (bytes) must lie inside the array it describes: TMA
    reads (and stores write) every byte of the view the boxes reach, and past the array that is
    another allocation or a fault."""
    if any(n <= 0 for n in shape):
        return  # (validate() refuses it)
    view_end = sum((n - 1) * st for n, st in zip(shape, strides_b)) + es
    array_end = 0 if any(n == 0 for n in info.shape) else \
        sum(max(0, (n - 1) * st) for n, st in zip(info.shape, info.strides)) + info.itemsize
    if view_end > array_end:
        raise TensorMapError(f"tensor map: shape {tuple(shape)} with strides {tuple(st // es for st in strides_b)} "
                             f"(elements) spans {view_end} bytes from the array's start; the array (shape "
                             f"{info.shape}, strides {info.strides} bytes) holds {array_end}")


#: Device copies of encoded maps, by their parameters. The 128 bytes depend on nothing
#: else, so a map made again for the same tensor (every call of a user's launch function,
#: say) reuses the copy: no allocation and no synchronous host-to-device copy (made on a
#: stream of its own, so it waits for no queued kernel). Copies are never freed: a kernel
#: queued, or captured into a CUDA graph and replayed at any time, may read any of them (each
#: distinct map keeps a small allocation for the life of the process).
_DEVICE_MAPS: dict = {}


def _device_map(params: TensorMapParams) -> tuple:
    """(opaque 128 bytes, device array, address) of the map for ``params``."""
    hit = _DEVICE_MAPS.get(params)
    if hit is None:
        from numba import cuda

        from .capture import relaxed

        opaque = _encode(params)
        # (allowed while a capture is under way; a stream of its own waits for no queued work)
        with relaxed():
            up = _upload_stream()
            dev = cuda.to_device(opaque, stream=up)  # 256-byte aligned allocation
            up.synchronize()
        hit = _DEVICE_MAPS[params] = (opaque, dev, int(dev.__cuda_array_interface__["data"][0]))
    return hit


_UPLOAD: dict = {}  # device id -> the maps' upload stream


def _upload_stream():
    """A non-blocking stream of the current device for the maps' uploads (made once)."""
    from numba import cuda

    dev = cuda.get_current_device().id
    s = _UPLOAD.get(dev)
    if s is None:
        from cuda.bindings import driver as drv

        err, handle = drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
        if err != drv.CUresult.CUDA_SUCCESS:
            raise RuntimeError(f"tensor map: cuStreamCreate failed: {err}")
        s = _UPLOAD[dev] = cuda.external_stream(int(handle))
    return s


class TensorMap:
    """A tiled TMA descriptor for ``array`` with ``box``-shaped tiles (array order).

    ``dtype`` overrides the element type read off the array (e.g. ``"bf16"`` for
    a ``uint16`` array holding bf16 bits, ``"e4m3"`` for fp8 bytes). ``shape``
    and ``strides`` (elements, array order) override the array's own, e.g. to
    describe a view; ``element_strides`` (array order, each 1-8; the simulator models 1 only)
    takes every n-th element of a dimension into the box. The map lives in device memory;
    kernels take ``.address``. Maps with the same parameters share one device copy, so building
    one per launch costs no synchronization after the first.

    A box may reach past the array's edges, or lie wholly outside them (a box larger than a
    small array, the last tiles of a problem whose sizes are not multiples of the tile): a load
    writes the elements outside as ``oob_fill`` gives, ``"zero"`` (the default: padding that
    adds nothing to a product's K sum) or ``"nan"`` (floating-point types only; a NaN that
    shows where padding was read), and still delivers the whole box's bytes to its mbarrier,
    so a stage's ``expect_tx`` counts full boxes whatever their position. A store writes only
    the elements inside. ``l2_promotion`` (``"none"``, ``"64B"``, ``"128B"``, ``"256B"``) is
    the size of the L2 requests a load makes (the driver's ``CU_TENSOR_MAP_L2_PROMOTION``).
    Strides may be smaller than the extent of the dimensions inside them, 0 included (a matrix
    read once for every index of a batch, rows that overlap): loads read such elements more than
    once; a store through such a map writes them more than once, in no set order.
    """

    def __init__(self, array: Any, box: Sequence[int], *, dtype: str | None = None, swizzle: str = "128B",
                 oob_fill: str = "zero", l2_promotion: str = "256B", element_strides: Sequence[int] | None = None,
                 shape: Sequence[int] | None = None, strides: Sequence[int] | None = None,
                 encode: bool = True) -> None:
        try:
            info = array_info(array)
        except TypeError as e:
            raise TensorMapTypeError(f"tensor map: {e}") from None
        dtype = dtype or info.dtype
        if not isinstance(dtype, str) or dtype not in TMA_DTYPES:
            raise TensorMapError(f"tensor map: element type must be one of {sorted(TMA_DTYPES)}; got {dtype}")
        es = TMA_DTYPES[dtype][1]
        if es != info.itemsize:
            raise TensorMapError(f"tensor map: {dtype} has {es}-byte elements; the array has {info.itemsize}-byte ones")
        a_view = shape is not None or strides is not None
        shape = _int_tuple("shape", shape) if shape is not None else info.shape
        strides_b = tuple(s * es for s in _int_tuple("strides", strides)) if strides is not None else info.strides
        rank = len(shape)
        if rank == 0 or len(strides_b) != rank:
            given = f"strides {tuple(strides)}" if strides is not None else \
                f"the array's strides {info.strides} (give strides= for a view of another rank)"
            raise TensorMapError(f"tensor map: shape and strides need one entry per dimension; got shape {shape} "
                                 f"and {given}")
        box = _int_tuple("box", box)
        if len(box) != rank:
            raise TensorMapError(f"tensor map: box must have one entry per dimension ({rank}); got {box}")
        if strides_b[-1] != es:
            _fail("the innermost dimension must be contiguous (stride of one element)", f"{strides_b[-1]} bytes")
        if a_view:
            _check_inside(info, shape, strides_b, es)
        estrides = (1,) * rank if element_strides is None else \
            tuple(int(e) for e in reversed(_int_tuple("element_strides", element_strides)))
        self.array = array
        self.params = TensorMapParams(
            dtype=dtype,
            rank=rank,
            address=info.ptr,
            dims=tuple(int(d) for d in reversed(shape)),
            strides=tuple(int(s) for s in reversed(strides_b[:-1])),
            box=tuple(int(b) for b in reversed(box)),
            element_strides=estrides,
            swizzle=swizzle,
            oob_fill=oob_fill,
            l2_promotion=l2_promotion,
        )
        validate(self.params)
        self._dev = None
        from . import sim

        if encode and sim.enabled():  # the simulated TMA reads the params, not the 128 bytes
            self._dev = True
            self._address = sim.register_tensor_map(self)
        elif encode:
            self.opaque, self._dev, self._address = _device_map(self.params)

    @property
    def address(self) -> int:
        """Global-memory address of the 128-byte map: the kernel argument."""
        if self._dev is None:
            raise TensorMapError("tensor map: built with encode=False, so it has no device copy")
        return self._address

    @property
    def box_bytes(self) -> int:
        """Bytes one box copy moves: the ``expect_tx`` count of a load."""
        return self.params.box_bytes

    def decode(self) -> dict[str, Any]:
        """The fields of this map, in array order (outermost first)."""
        p = self.params
        return {
            "dtype": p.dtype,
            "rank": p.rank,
            "address": p.address,
            "shape": tuple(reversed(p.dims)),
            "strides_bytes": tuple(reversed(p.strides)) + (TMA_DTYPES[p.dtype][1],),
            "box": tuple(reversed(p.box)),
            "element_strides": tuple(reversed(p.element_strides)),
            "swizzle": p.swizzle,
            "oob_fill": p.oob_fill,
            "l2_promotion": p.l2_promotion,
        }
