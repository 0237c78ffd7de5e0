"""The repeat-launch path behind :func:`nbwgmma.launch.launch` and :func:`nbwgmma.launch.prepare`.

Launching a ``@cuda.jit`` kernel through Numba costs 50-200 us of host time per call: the
arguments are typed (``typeof`` of every array), the compiled kernel is looked up, and each
array is wrapped and its stream synchronized. A kernel launched again with the same grid,
block, shared memory, cluster and kinds of arguments needs none of that: it keeps a
:class:`~nbwgmma.launch.PreparedKernel` per such *launch signature*, whose per-argument
:func:`reader` checks what fixes the compiled code and reads the pointer, shape and strides
(a PyTorch tensor's ``data_ptr()``, ``shape`` and ``stride()``; a Numba or CuPy array's
attributes), and whose :class:`~nbwgmma.launch.PreparedLaunch` packs them into a fixed
parameter buffer and calls ``cuLaunchKernelEx`` through ctypes.

An argument kind is what fixes its Numba type: for an array its element type, number of
dimensions and layout (C-contiguous, Fortran-contiguous or neither); for a scalar its Python
or NumPy type. Arrays are PyTorch tensors, CuPy arrays, Numba device arrays or any object
with ``__cuda_array_interface__``; scalars are ``int``, ``float`` and NumPy integers and
floats. Anything else (records, booleans, host arrays) takes Numba's own path every time.

Unlike Numba's path, a repeated launch does not synchronize the stream an array's
``__cuda_array_interface__`` names: like a PyTorch operator, it is ordered on the launch
stream only.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["arg_kind", "stream_handle", "LaunchCache", "array_arg_types", "array_arg_values", "reader",
           "Mismatch"]

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


class Mismatch(Exception):
    """An argument is not of the kind a prepared kernel was compiled for (the message says
    which and why); :func:`nbwgmma.launch.launch` then takes another entry or Numba's path,
    a prepared kernel's call raises it as a :class:`~nbwgmma.launch.LaunchError`."""


_NUMBER_TYPES = (int, float, np.integer, np.floating)
_PLAIN_NUMBERS = frozenset((int, float, np.int32, np.int64, np.uint32, np.uint64, np.float32, np.float64))


def _describe_kind(kind) -> str:
    """'float32 array, 2-D, C layout' or 'float32 scalar' for an :func:`arg_kind` kind."""
    if kind[0] == "scalar":
        return f"{kind[1]} scalar"
    elem, ndim, layout, _ = _array_expect(kind)
    return f"{elem} array, {ndim}-D, {layout} layout"


def _array_expect(kind):
    """(element type name, ndim, layout, device or None) of an array :func:`arg_kind` kind."""
    if kind[0] == "torch":
        return kind[1].rpartition(".")[2], kind[2], kind[3], kind[4]
    return np.dtype(kind[2]).name, kind[3], kind[4], None


def _fits(want, got, exact):
    """Whether an array of layout ``got`` may go where ``want`` was compiled: a C or F
    kernel takes only its own layout; an A kernel takes any (only 'A' when ``exact``:
    :func:`nbwgmma.launch.launch` keeps Numba's choice of specialization)."""
    return got == want or (want == "A" and not exact)


def _contig(shape, strides, itemsize, order):
    """Whether byte ``strides`` are contiguous in ``order`` ('C' or 'F'), ignoring unit dims."""
    expect = itemsize
    dims = zip(reversed(shape), reversed(strides)) if order == "C" else zip(shape, strides)
    for n, s in dims:
        if n != 1 and s != expect:
            return False
        expect *= n
    return True


def _layout_fits(want, shape, strides, itemsize, exact):
    if want == "A":
        return not exact or _layout(shape, strides, itemsize) == "A"
    return _contig(shape, strides, itemsize, want)


def reader(kind, example, index: int, exact: bool = False):
    """A function of one argument giving its slot values (:func:`array_arg_values`, or a
    1-tuple for a scalar), for arguments of ``kind`` (from :func:`arg_kind` of ``example``).

    It checks what fixes the compiled type: an array's element type, number of dimensions,
    layout (and a PyTorch tensor's device); a scalar's being a number. Shapes, strides and
    pointers are values and may change. A wrong argument raises :class:`Mismatch`. The
    example's own type takes a fast path specialized here (a PyTorch tensor reads
    ``data_ptr()``, ``shape`` and ``stride()``; a Numba device array its attributes; a CuPy
    array ``data.ptr``); another type is read through ``__cuda_array_interface__``.
    ``index`` names the argument in messages."""
    want = _describe_kind(kind)

    def wrong(a, why):
        return Mismatch(f"argument {index} must be a {want}; got {why}")

    if kind[0] == "scalar":
        def scalar(v):
            if type(v) in _PLAIN_NUMBERS or isinstance(v, _NUMBER_TYPES) and not isinstance(v, (bool, np.bool_)):
                return (v,)
            raise wrong(v, f"a {type(v).__name__}")
        return scalar

    elem, ndim, layout, device = _array_expect(kind)

    def slow(a):
        k = arg_kind(a)
        if k is None or k[0][0] == "scalar":
            where = "host " if getattr(a, "is_cuda", True) is False or isinstance(a, np.ndarray) else ""
            raise wrong(a, f"a {where}{type(a).__name__}")
        e, nd, lay, dev = _array_expect(k[0])
        if e != elem or nd != ndim or not _fits(layout, lay, exact):
            raise wrong(a, f"a {e} array, {nd}-D, {lay} layout")
        if device is not None and dev is not None and dev != device:
            raise wrong(a, f"a tensor on device {dev} (compiled for device {device})")
        return k[2]

    t = type(example)
    if kind[0] == "torch":
        return _torch_reader(t, example, ndim, layout, exact, slow)
    mod = t.__module__ or ""
    if mod.startswith("numba") and hasattr(example, "device_ctypes_pointer") and hasattr(example, "is_c_contiguous"):
        return _numba_reader(t, example, ndim, layout, exact, slow)
    if mod.startswith("cupy") and hasattr(example, "data") and hasattr(example, "flags"):
        return _cupy_reader(t, example, ndim, layout, exact, slow)
    return slow


def _torch_reader(T, example, ndim, layout, exact, slow):
    # A C-contiguous tensor's strides are those of its shape (what Numba takes from the
    # ``__cuda_array_interface__``, which gives no strides for one): no ``stride()`` call.
    dt, dev, es = example.dtype, example.get_device(), example.element_size()
    if layout == "C" and ndim == 1:
        def torch_c1(a):
            if type(a) is T and a.dtype is dt and a.get_device() == dev and a.is_contiguous():
                shape = a.shape
                if len(shape) == 1:
                    n = shape[0]
                    return (0, 0, n, es, a.data_ptr(), n, es)
            return slow(a)
        return torch_c1
    if layout == "C" and ndim == 2:
        def torch_c2(a):
            if type(a) is T and a.dtype is dt and a.get_device() == dev and a.is_contiguous():
                shape = a.shape
                if len(shape) == 2:
                    r, c = shape
                    return (0, 0, r * c, es, a.data_ptr(), r, c, c * es, es)
            return slow(a)
        return torch_c2

    def torch_any(a):
        if type(a) is T and a.dtype is dt and a.get_device() == dev and a.dim() == ndim:
            shape = tuple(a.shape)
            if layout == "C":
                if a.is_contiguous():
                    return array_arg_values(a.data_ptr(), shape, _c_strides(shape, es), es)
            else:
                strides = tuple(s * es for s in a.stride())
                if _layout_fits(layout, shape, strides, es, exact):
                    return array_arg_values(a.data_ptr(), shape, strides, es)
        return slow(a)
    return torch_any


def _c_strides(shape, itemsize):
    strides, s = [], itemsize
    for n in reversed(shape):
        strides.append(s)
        s *= n
    return tuple(reversed(strides))


def _fits_1d(layout, shape, strides, itemsize, exact):
    """:func:`_layout_fits` for one dimension (C and F are the same there)."""
    if layout == "A":
        return not exact or (shape[0] != 1 and strides[0] != itemsize)
    return shape[0] == 1 or strides[0] == itemsize


def _numba_reader(T, example, ndim, layout, exact, slow):
    """Numba device arrays: plain attributes, the pointer from ``device_ctypes_pointer``."""
    dt, es = example.dtype, example.dtype.itemsize
    if ndim == 1 and layout == "C":
        def numba_c1(a):
            if type(a) is T and (a.dtype is dt or a.dtype == dt):
                shape, strides = a.shape, a.strides
                if len(shape) == 1 and (strides[0] == es or shape[0] == 1):
                    n = shape[0]
                    return (0, 0, n, es, a.device_ctypes_pointer.value or 0, n, strides[0])
            return slow(a)
        return numba_c1
    fits = _fits_1d if ndim == 1 else _layout_fits

    def numba_array(a):
        if type(a) is T and (a.dtype is dt or a.dtype == dt):
            shape, strides = a.shape, a.strides
            if len(shape) == ndim and fits(layout, shape, strides, es, exact):
                return (0, 0, a.size, es, a.device_ctypes_pointer.value or 0, *shape, *strides)
        return slow(a)
    return numba_array


def _cupy_reader(T, example, ndim, layout, exact, slow):
    """CuPy arrays: attributes, the pointer from ``data.ptr``."""
    dt, es = example.dtype, example.dtype.itemsize
    if ndim == 1 and layout == "C":
        def cupy_c1(a):
            if type(a) is T and (a.dtype is dt or a.dtype == dt):
                shape, strides = a.shape, a.strides
                if len(shape) == 1 and (strides[0] == es or shape[0] == 1):
                    n = shape[0]
                    return (0, 0, n, es, a.data.ptr, n, strides[0])
            return slow(a)
        return cupy_c1
    fits = _fits_1d if ndim == 1 else _layout_fits

    def cupy_array(a):
        if type(a) is T and (a.dtype is dt or a.dtype == dt):
            shape, strides = a.shape, a.strides
            if len(shape) == ndim and fits(layout, shape, strides, es, exact):
                return (0, 0, a.size, es, a.data.ptr, *shape, *strides)
        return slow(a)
    return cupy_array


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
    """Prepared launches by launch signature (kernel, grid, block, smem, cluster, programmatic
    dependent launch or not, argument kinds). :meth:`get` returns the entry or None; :meth:`put`
    stores one."""

    def __init__(self, limit: int = 1024):
        self.entries: dict = {}
        self.limit = limit

    @staticmethod
    def key(kernel, grid, block, smem, cluster, args, pdl=False):
        """(key, slot values of ``args``), or (None, None) where an argument is not cached."""
        kinds, values = [], []
        for a in args:
            k = arg_kind(a)
            if k is None:
                return None, None
            kinds.append(k[0])
            values.extend(k[2])
        return (id(kernel), grid, block, smem, cluster, bool(pdl), tuple(kinds)), values

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
