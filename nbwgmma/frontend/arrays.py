"""Read pointer, shape, strides and element type off any CUDA array.

CuPy, Numba device arrays and most libraries expose ``__cuda_array_interface__``;
PyTorch does too, except for bfloat16 and the fp8 types, so torch tensors are
read through their own accessors. In Numba's CUDA simulator "device" arrays are
numpy arrays in host memory, and only those can be read by the simulated threads.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
from numba import config

__all__ = ["ArrayInfo", "array_info", "host_view", "numpy_dtype", "numba_layout"]

#: Numba's CUDA simulator is chosen once, when Numba is imported.
_SIM = bool(config.ENABLE_CUDASIM)

_TORCH_TYPES = {
    "torch.float16": "f16",
    "torch.bfloat16": "bf16",
    "torch.float32": "f32",
    "torch.float64": "f64",
    "torch.float8_e4m3fn": "e4m3",
    "torch.float8_e5m2": "e5m2",
    "torch.int8": "s8",
    "torch.uint8": "u8",
    "torch.int16": "s16",
    "torch.int32": "s32",
    "torch.int64": "s64",
}

_TORCH_BY_DTYPE: dict = {}  # torch.dtype -> name, filled on first sight

_NP_TYPES = {
    np.dtype(np.float16): "f16",
    np.dtype(np.float32): "f32",
    np.dtype(np.float64): "f64",
    np.dtype(np.int8): "s8",
    np.dtype(np.uint8): "u8",
    np.dtype(np.int16): "s16",
    np.dtype(np.uint16): "u16",
    np.dtype(np.int32): "s32",
    np.dtype(np.uint32): "u32",
    np.dtype(np.int64): "s64",
    np.dtype(np.uint64): "u64",
}


_NP_OF_NAME = {name: dt for dt, name in _NP_TYPES.items()}


def numpy_dtype(name: str) -> np.dtype:
    """The numpy type of an nbwgmma type name among NumPy's own (``"u16"``: uint16)."""
    return _NP_OF_NAME[name]


class ArrayInfo(NamedTuple):  # a tuple: built on every matmul call, so cheap to build
    ptr: int
    shape: tuple
    strides: tuple  # in bytes
    itemsize: int
    dtype: str  # nbwgmma type name: f16, bf16, f32, e4m3, s8, ...
    device: int | None
    kind: str  # "torch", "cupy", "numba", "cai"

    def byte_range(self) -> tuple:
        """[first, last) bytes the array's elements occupy (negative strides reach below ``ptr``)."""
        if 0 in self.shape:
            return self.ptr, self.ptr
        lo = self.ptr + sum((d - 1) * s for d, s in zip(self.shape, self.strides) if s < 0)
        hi = self.ptr + sum((d - 1) * s for d, s in zip(self.shape, self.strides) if s > 0) + self.itemsize
        return lo, hi

    @property
    def contiguous(self) -> bool:
        expect, s = [], self.itemsize
        for d in reversed(self.shape):
            expect.append(s)
            s *= d
        return all(st == e or d == 1 for st, e, d in zip(self.strides, reversed(expect), self.shape))


@functools.lru_cache(maxsize=1024)  # (asked on every block-scaled call; Numba's own rule is slow)
def numba_layout(shape: tuple, strides: tuple, itemsize: int) -> str:
    """The layout Numba gives a device array of ``shape`` and byte ``strides`` ("C", "F" or
    "A"): C before F, neither with a zero stride. A kernel compiled for it runs as one launched
    with such an array (the layout changes the code: a 256 x 128 block-scaled kernel ran 5%
    slower with its scales typed "A" than "F", measured on an H200)."""
    from numba.cuda.cudadrv.dummyarray import Array

    flags = Array.from_desc(0, shape, strides, itemsize).flags
    plain = 0 not in strides
    return "C" if flags["C_CONTIGUOUS"] and plain else "F" if flags["F_CONTIGUOUS"] and plain else "A"


def array_info(a) -> ArrayInfo:
    """Describe a CUDA array; raise ``TypeError`` for host arrays and unknown objects."""
    mod = type(a).__module__
    if _SIM and type(a).__name__ != "FakeCUDAArray" and not isinstance(a, np.ndarray):
        raise TypeError(
            f"in Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1) arrays must be the simulator's own "
            f"(numba.cuda.to_device, numba.cuda.device_array): simulated threads read host memory; "
            f"got {_lib_name(mod, a)}")
    if mod.startswith("torch"):
        if not a.is_cuda:
            raise TypeError(f"expected a CUDA tensor; got a torch tensor on {a.device}")
        tdt = a.dtype
        dt = _TORCH_BY_DTYPE.get(tdt)
        if dt is None:
            dt = _TORCH_BY_DTYPE[tdt] = _TORCH_TYPES.get(str(tdt))
            if dt is None:
                del _TORCH_BY_DTYPE[tdt]
                raise TypeError(f"unsupported torch dtype {a.dtype}")
        es = a.element_size()
        return ArrayInfo(a.data_ptr(), tuple(a.shape), tuple([s * es for s in a.stride()]), es, dt,
                         a.get_device(), "torch")
    if isinstance(a, np.ndarray):
        raise TypeError("expected a CUDA array (CuPy, PyTorch, Numba device array); got a host numpy array")
    cai = getattr(a, "__cuda_array_interface__", None)
    if cai is None and type(a).__name__ == "FakeCUDAArray":  # Numba's simulator: host memory
        h = a._ary
        cai = {"typestr": h.dtype.str, "shape": h.shape, "strides": h.strides, "data": (h.ctypes.data, False)}
        mod = "simulator"
    if cai is None:
        raise TypeError(f"expected a CUDA array with __cuda_array_interface__; got {type(a).__name__}")
    dtype = np.dtype(cai["typestr"])
    dt = _NP_TYPES.get(dtype)
    if dt is None:
        raise TypeError(f"unsupported element type {dtype}")
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    if strides is None:
        s, st = dtype.itemsize, []
        for d in reversed(shape):
            st.append(s)
            s *= d
        strides = tuple(reversed(st))
    ptr = cai["data"][0]
    kind = "cupy" if mod.startswith("cupy") else ("numba" if "numba" in mod else "cai")
    device = None
    if kind == "cupy":
        device = a.device.id
    elif kind == "numba" and mod != "simulator":
        from numba import cuda

        device = cuda.get_current_device().id
    return ArrayInfo(ptr, shape, tuple(strides), dtype.itemsize, dt, device, kind)


def _lib_name(mod, a):
    return {"cupy": "a CuPy array", "torch": "a PyTorch tensor"}.get(mod.split(".")[0], f"a {type(a).__name__}")


def host_view(a, dtype, shape=None, strides=None):
    """In the CUDA simulator: the simulator array ``a`` with its elements seen as ``dtype``
    (same size), sharing its memory, reshaped to ``shape`` if given, or its transpose where
    ``shape`` and ``strides`` (bytes) are ``a``'s reversed; the counterpart of a Numba device
    array built from ``a``'s ``__cuda_array_interface__`` on the GPU."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    v = a._ary.view(dtype)
    if strides is not None and v.ndim == 2 and tuple(strides) != v.strides and tuple(strides) == v.strides[::-1] \
            and tuple(shape) == v.shape[::-1]:
        return FakeCUDAArray(v.T)
    if shape is not None and strides is not None and len(shape) != v.ndim:  # (a batch's view: any strides, even 0)
        return FakeCUDAArray(np.lib.stride_tricks.as_strided(v, tuple(shape), tuple(strides)))
    return FakeCUDAArray(v if shape is None or v.shape == tuple(shape) else v.reshape(shape))
