"""The repeat-launch cache behind :func:`nbwgmma.launch.launch`.

Launching a ``@cuda.jit`` kernel through Numba costs 150-200 us of host time per call: the
arguments are typed (``typeof`` of every array), the compiled kernel is looked up, and each
array is wrapped and its stream synchronized. A kernel launched again with the same grid,
block, shared memory, cluster and kinds of arguments needs none of that: this module keeps,
per such *launch signature*, a :class:`~nbwgmma.launch.PreparedLaunch`, so a repeated call only
reads each argument's pointer, shape and strides (once, while forming the key) and calls
``cuLaunchKernelEx``.

An argument kind is what fixes its Numba type: for an array its element type, number of
dimensions and layout (C-contiguous, Fortran-contiguous or neither); for a scalar its Python
or NumPy type. Arrays are PyTorch tensors, Numba device arrays or any object with
``__cuda_array_interface__``; scalars are ``int``, ``float`` and NumPy integers and floats.
Anything else (records, booleans, host arrays) takes Numba's own path every time.

Unlike Numba's path, a repeated launch does not synchronize the stream an array's
``__cuda_array_interface__`` names: like a PyTorch operator, it is ordered on the launch
stream only.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["arg_kind", "stream_handle", "LaunchCache", "array_arg_types", "array_arg_values", "packer"]

#: Numba scalar type name -> PreparedLaunch slot code.
_SCALAR_SLOTS = {"int64": "i64", "uint64": "u64", "int32": "i32", "uint32": "u32", "float32": "f32",
                 "float64": "f64"}
_PY_SCALARS = {int: "int64", float: "float64"}


def _layout(shape, strides, itemsize):
    """Numba's array layout letter for these byte strides: 'C', 'F' or 'A'."""
    c = f = True
    expect = itemsize
    for n, s in zip(reversed(shape), reversed(strides)):
        if n != 1 and s != expect:
            c = False
        expect *= n
    expect = itemsize
    for n, s in zip(shape, strides):
        if n != 1 and s != expect:
            f = False
        expect *= n
    return "C" if c else ("F" if f else "A")


def _torch_view(a):
    es = a.element_size()
    shape = tuple(a.shape)
    strides = tuple(s * es for s in a.stride())
    return a.data_ptr(), shape, strides, es


def _cai_view(a, cai=None):
    cai = cai or a.__cuda_array_interface__
    dt = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    if strides is None:
        strides, s = [], dt.itemsize
        for n in reversed(shape):
            strides.append(s)
            s *= n
        strides = tuple(reversed(strides))
    return cai["data"][0], shape, tuple(strides), dt.itemsize


def arg_kind(a):
    """(kind key, packer spec, slot values) of a launch argument, or None where Numba's path
    must take it. The values are those :func:`pack` would give: each argument is read once."""
    t = type(a)
    if t in _PY_SCALARS:
        name = _PY_SCALARS[t]
        return ("scalar", name), ("scalar", name), (a,)
    if isinstance(a, (np.integer, np.floating)) and a.dtype.name in _SCALAR_SLOTS:
        return ("scalar", a.dtype.name), ("scalar", a.dtype.name), (a,)
    if t.__module__.startswith("torch") and hasattr(a, "data_ptr"):
        if not a.is_cuda:
            return None
        ptr, shape, strides, es = _torch_view(a)
        kind = ("torch", str(a.dtype), len(shape), _layout(shape, strides, es), a.get_device())
        return kind, ("torch", len(shape)), array_arg_values(ptr, shape, strides, es)
    cai = getattr(a, "__cuda_array_interface__", None)  # a property: Numba builds it anew each time
    if cai is not None:
        ptr, shape, strides, es = _cai_view(a, cai)
        kind = ("cai", t, cai["typestr"], len(shape), _layout(shape, strides, es))
        return kind, ("cai", len(shape)), array_arg_values(ptr, shape, strides, es)
    return None


def array_arg_types(ndim: int) -> tuple:
    """The parameter slots of one Numba array argument of ``ndim`` dimensions, as a compiled
    ``@cuda.jit`` kernel takes it: meminfo, parent, size, itemsize, data, shapes, strides."""
    return ("u64", "u64", "i64", "i64", "u64") + ("i64",) * (2 * ndim)


def array_arg_values(ptr: int, shape, strides, itemsize: int) -> tuple:
    """The values for :func:`array_arg_types` of an array at ``ptr`` (strides in bytes)."""
    return (0, 0, math.prod(shape), itemsize, ptr, *shape, *strides)


def pack(spec, a):
    """The slot values of argument ``a`` for its packer ``spec`` (see :func:`arg_kind`)."""
    kind = spec[0]
    if kind == "scalar":
        return (a,)
    ptr, shape, strides, es = _torch_view(a) if kind == "torch" else _cai_view(a)
    return array_arg_values(ptr, shape, strides, es)


def packer(spec, a):
    """A function of one argument giving its slot values, specialized for the kind of the
    example argument ``a`` (``spec`` from :func:`arg_kind`): what a prepared kernel calls
    per argument per launch, so it does as little as the kind allows."""
    kind = spec[0]
    if kind == "scalar":
        return lambda v: (v,)
    if kind == "torch":
        es = a.element_size()
        if spec[1] == 1:
            return lambda t: (0, 0, t.shape[0], es, t.data_ptr(), t.shape[0], t.stride(0) * es)
        if spec[1] == 2:
            def torch2(t):
                r, c = t.shape
                sr, sc = t.stride()
                return (0, 0, r * c, es, t.data_ptr(), r, c, sr * es, sc * es)
            return torch2
    return lambda v: pack(spec, v)


def stream_handle(stream):
    """The raw ``CUstream`` of ``stream`` (0, None, an int, an object with
    ``__cuda_stream__``, a PyTorch stream), or None for other objects."""
    if stream is None or (type(stream) is int and stream == 0):
        return 0
    if type(stream) is int:
        return stream
    proto = getattr(stream, "__cuda_stream__", None)
    if proto is not None and callable(proto):
        return int(proto()[1])
    handle = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream
    if isinstance(handle, int):
        return handle
    return None


class LaunchCache:
    """Prepared launches by launch signature (kernel, grid, block, smem, cluster, argument
    kinds). :meth:`get` returns the entry or None; :meth:`put` stores one."""

    def __init__(self, limit: int = 1024):
        self.entries: dict = {}
        self.limit = limit

    @staticmethod
    def key(kernel, grid, block, smem, cluster, args):
        """(key, slot values of ``args``), or (None, None) where an argument is not cached."""
        kinds, values = [], []
        for a in args:
            k = arg_kind(a)
            if k is None:
                return None, None
            kinds.append(k[0])
            values.extend(k[2])
        return (id(kernel), grid, block, smem, cluster, tuple(kinds)), values

    def get(self, key):
        return self.entries.get(key)

    def put(self, key, kernel, prepared):
        if len(self.entries) >= self.limit:
            self.entries.clear()
        # The kernel object is kept with the entry so that its id cannot be reused.
        self.entries[key] = (kernel, prepared)


def slots_of(numba_types) -> tuple | None:
    """PreparedLaunch slot codes of a compiled kernel's argument types, or None if one of
    them is not an array of numbers or a supported scalar."""
    out = []
    for t in numba_types:
        ndim = getattr(t, "ndim", None)
        if ndim is not None and hasattr(t, "dtype"):
            if str(t.dtype) not in ("float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32",
                                    "uint32", "int64", "uint64"):
                return None
            out.extend(array_arg_types(ndim))
        elif str(t) in _SCALAR_SLOTS:
            out.append(_SCALAR_SLOTS[str(t)])
        else:
            return None
    return tuple(out)
