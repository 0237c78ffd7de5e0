"""The repeat-launch host side (nbwgmma.fastlaunch, PreparedLaunch, PreparedKernel): argument kinds, layouts,
streams, per-argument readers and their checks, and the packed launch, with no GPU."""

import ctypes

import numpy as np
import pytest

from nbwgmma.fastlaunch import LaunchCache, arg_kind, array_arg_types, pack, slots_of, stream_handle


class _CAI:
    def __init__(self, shape, strides, typestr="<f4", ptr=4096):
        self.__cuda_array_interface__ = {"shape": shape, "strides": strides, "typestr": typestr,
                                         "data": (ptr, False), "version": 3}


@pytest.mark.parametrize("shape, strides, layout", [
    ((4, 5), None, "C"), ((4, 5), (20, 4), "C"), ((4, 5), (4, 16), "F"), ((4, 5), (40, 4), "A"), ((7,), (4,), "C"),
    ((1, 5), (999, 4), "C"),
])
def test_array_kinds_carry_what_fixes_numba_s_type(shape, strides, layout):
    kind, spec, first = arg_kind(_CAI(shape, strides))
    assert kind[2:] == ("<f4", len(shape), layout)
    assert first == pack(spec, _CAI(shape, strides))  # the key's values are the packer's
    values = pack(spec, _CAI(shape, strides, ptr=8192))
    assert len(values) == len(array_arg_types(len(shape)))
    assert values[4] == 8192 and values[5:5 + len(shape)] == shape
    assert values[2] == int(np.prod(shape)) and values[3] == 4


def test_scalar_kinds_follow_numba_s_typing():
    assert arg_kind(3)[0] == ("scalar", "int64")
    assert arg_kind(2.5)[0] == ("scalar", "float64")
    assert arg_kind(np.int32(3))[0] == ("scalar", "int32")
    assert arg_kind(np.uint64(3))[0] == ("scalar", "uint64")
    assert arg_kind(np.float32(1))[0] == ("scalar", "float32")
    # Numba's own path takes what the cache does not: booleans, host arrays, other objects.
    for a in (True, np.zeros(3), "x", np.int8(1), object()):
        assert arg_kind(a) is None


def test_stream_handles():
    assert stream_handle(0) == 0 and stream_handle(None) == 0 and stream_handle(12345) == 12345

    class Proto:
        def __cuda_stream__(self):
            return (0, 777)

    class TorchLike:
        cuda_stream = 888

    assert stream_handle(Proto()) == 777 and stream_handle(TorchLike()) == 888
    assert stream_handle(object()) is None


def test_keys_differ_by_kind_and_launch_shape():
    a, b = _CAI((4, 5), None), _CAI((4, 5), (40, 4))
    k1, _ = LaunchCache.key("kern", (1, 1, 1), (128, 1, 1), 0, None, (a, 3))
    k2, _ = LaunchCache.key("kern", (1, 1, 1), (128, 1, 1), 0, None, (b, 3))
    k3, _ = LaunchCache.key("kern", (2, 1, 1), (128, 1, 1), 0, None, (a, 3))
    k4, _ = LaunchCache.key("kern", (1, 1, 1), (128, 1, 1), 0, None, (a, np.int32(3)))
    assert len({k1, k2, k3, k4}) == 4
    assert LaunchCache.key("kern", (1, 1, 1), (128, 1, 1), 0, None, (a, True)) == (None, None)


def test_slots_of_compiled_argument_types():
    from numba import types

    assert slots_of((types.float32[:, ::1], types.int32, types.float64)) == array_arg_types(2) + ("i32", "f64")
    assert slots_of((types.boolean,)) is None


# --- per-argument readers of prepared kernels -------------------------------------------------

class FakeTensor:
    """Stands in for a CUDA ``torch.Tensor`` (the readers recognize PyTorch by module name)."""

    def __init__(self, shape, dtype="torch.float32", ptr=1 << 20, strides=None, device=0):
        self.shape, self.dtype, self._ptr, self._device = tuple(shape), dtype, ptr, device
        if strides is None:
            strides, s = [], 1
            for n in reversed(self.shape):
                strides.append(s)
                s *= n
            strides = tuple(reversed(strides))
        self._strides = tuple(strides)
        self.is_cuda = device >= 0

    def element_size(self):
        return 4

    def data_ptr(self):
        return self._ptr

    def stride(self, i=None):
        return self._strides if i is None else self._strides[i]

    def get_device(self):
        return self._device

    def dim(self):
        return len(self.shape)

    def is_contiguous(self):
        return _layout_of(self.shape, self._strides) == "C"


FakeTensor.__module__ = "torch"


def _layout_of(shape, strides):
    from nbwgmma.fastlaunch import _layout

    return _layout(shape, strides, 1)


def _reader_of(example, exact=False):
    from nbwgmma.fastlaunch import reader

    return reader(arg_kind(example)[0], example, 3, exact)


@pytest.mark.parametrize("shape", [(7,), (4, 5), (2, 3, 4)])
def test_torch_reader_gives_the_key_s_values_and_takes_new_shapes(shape):
    r = _reader_of(FakeTensor(shape))
    t = FakeTensor(tuple(n + 1 for n in shape), ptr=8192)
    assert r(t) == arg_kind(t)[2]
    assert r(t)[4] == 8192


@pytest.mark.parametrize("bad, why", [
    (FakeTensor((7,), dtype="torch.float64"), "float64 array"),
    (FakeTensor((7, 1)), "2-D"),
    (FakeTensor((4, 5), strides=(1, 4)), "F layout"),
    (FakeTensor((7,), device=1), "device 1"),
    (FakeTensor((7,), device=-1), "host"),
    (np.zeros(7, np.float32), "host ndarray"),
    (3, "a int"),
])
def test_torch_reader_refuses_what_changes_the_compiled_type(bad, why):
    from nbwgmma.fastlaunch import Mismatch

    r = _reader_of(FakeTensor((7, 5)) if "F layout" in why else FakeTensor((7,)))
    with pytest.raises(Mismatch, match=f"argument 3 must be a float32 array, .*; got .*{why}"):
        r(bad)


def test_readers_take_other_array_types_of_the_same_kind():
    r = _reader_of(FakeTensor((4, 5)))
    cai = _CAI((6, 5), None, ptr=4096)
    assert r(cai) == arg_kind(cai)[2]
    with pytest.raises(Exception, match="float16 array"):
        r(_CAI((6, 5), None, typestr="<f2"))


def test_layouts_c_and_f_kernels_take_only_their_own_an_a_kernel_any_unless_exact():
    from nbwgmma.fastlaunch import Mismatch

    f_example = _CAI((4, 5), (4, 16))
    assert _reader_of(f_example)(_CAI((3, 8), (4, 12)))[5:] == (3, 8, 4, 12)
    with pytest.raises(Mismatch, match="F layout; got a float32 array, 2-D, C layout"):
        _reader_of(f_example)(_CAI((3, 8), None))
    a_example = _CAI((4, 5), (40, 4))
    assert _reader_of(a_example)(_CAI((4, 5), None))  # an A kernel runs a C array too
    with pytest.raises(Mismatch):  # but launch() keeps Numba's specialization for it
        _reader_of(a_example, exact=True)(_CAI((4, 5), None))
    assert _reader_of(a_example, exact=True)(_CAI((4, 5), (80, 4)))


def test_scalar_readers_take_numbers_only():
    from nbwgmma.fastlaunch import Mismatch

    r = _reader_of(np.float32(1))
    assert r(2.5) == (2.5,) and r(np.float64(3)) == (3.0,) and r(4) == (4,)
    for bad in (True, "1", FakeTensor((1,)), None):
        with pytest.raises(Mismatch, match="argument 3 must be a float32 scalar"):
            r(bad)


class FakeNumbaArray:
    """Stands in for a Numba ``DeviceNDArray`` (recognized by module and attributes)."""

    def __init__(self, shape, ptr=1 << 16, dtype=np.float32):
        self.shape, self.dtype, self.ndim = tuple(shape), np.dtype(dtype), len(shape)
        self.size = int(np.prod(shape))
        self.strides = tuple(np.zeros(shape, dtype).strides)
        self._ptr = ptr

    @property
    def device_ctypes_pointer(self):
        import ctypes

        return ctypes.c_void_p(self._ptr)

    def is_c_contiguous(self):
        return True

    def is_f_contiguous(self):
        return self.ndim == 1

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "strides": self.strides, "typestr": self.dtype.str, "data": (self._ptr, False),
                "version": 3}


FakeNumbaArray.__module__ = "numba.cuda.cudadrv.devicearray"


class FakeCupyArray(FakeNumbaArray):
    class _Flags:
        c_contiguous, f_contiguous = True, False

    flags = _Flags()

    @property
    def data(self):
        return type("MemoryPointer", (), {"ptr": self._ptr})()


FakeCupyArray.__module__ = "cupy"


@pytest.mark.parametrize("cls, fast", [(FakeNumbaArray, "numba"), (FakeCupyArray, "cupy")])
@pytest.mark.parametrize("shape, other", [((4, 5), (20,)), ((9,), (3, 3))])
def test_numba_and_cupy_readers_read_attributes_not_the_interface(cls, fast, shape, other):
    from nbwgmma.fastlaunch import Mismatch

    r = _reader_of(cls(shape))
    assert r.__name__.startswith(fast)
    a = cls(tuple(n + 2 for n in shape), ptr=12288)
    assert r(a) == arg_kind(a)[2]
    with pytest.raises(Mismatch, match="float64 array"):
        r(cls(shape, dtype=np.float64))
    with pytest.raises(Mismatch, match=f"{len(shape)}-D, C layout; got a float32 array, {len(other)}-D"):
        r(cls(other))
    strided = cls(shape)
    strided.strides = tuple(2 * s for s in strided.strides)
    with pytest.raises(Mismatch, match="C layout; got a float32 array, .*A layout"):
        r(strided)


# --- prepared launches, with the driver's cuLaunchKernelEx replaced by a recorder ---------------

class _Recorder:
    """A ctypes function with cuLaunchKernelEx's signature that records each launch."""

    def __init__(self, slots, result=0):
        from nbwgmma.cudriver import LaunchAttribute, LaunchConfig
        from nbwgmma.launch import param_struct

        self.calls, self.result = [], result
        st = param_struct(slots)

        def record(cfg, func, params, extra):
            c = LaunchConfig.from_address(cfg)
            ptrs = (ctypes.c_void_p * len(slots)).from_address(params)
            raw = b"".join(ctypes.string_at(p, 8) for p in ptrs)
            cluster = None
            if c.numAttrs:
                at = LaunchAttribute.from_address(c.attrs)
                cluster = (at.x, at.y, at.z)
            self.calls.append({"grid": (c.gridDimX, c.gridDimY, c.gridDimZ), "smem": c.sharedMemBytes,
                               "stream": c.hStream or 0, "func": func, "values": st.unpack(raw), "cluster": cluster})
            return self.result

        self.fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_void_p)(record)


class _Kernel:
    """Stands in for a cuda.core Kernel."""

    class attributes:
        shared_size_bytes, max_threads_per_block = 0, 1024

    handle = 0x5150


@pytest.fixture
def driver(monkeypatch):
    from nbwgmma import cudriver
    from nbwgmma import launch as L

    monkeypatch.setattr(L, "device_limits", lambda device=None: dict(L.H100_LIMITS))
    holder = {}

    def install(slots, result=0):
        rec = _Recorder(slots, result)
        monkeypatch.setattr(cudriver, "driver_launch", lambda: rec.fn)
        holder["rec"] = rec
        return rec

    return install


def test_prepared_launch_calls_the_driver_with_packed_values(driver):
    from nbwgmma.launch import PreparedLaunch

    slots = ("u64", "i32", "f32", "f64")
    rec = driver(slots)
    pl = PreparedLaunch(_Kernel(), grid=(6, 2), block=128, arg_types=slots, smem=4096, cluster=2)
    assert pl.binding == "ctypes"
    pl(0, 2**63, -7, 1.5, 0.25)
    pl(0xABC, 1, 2, 3.0, 4.0)
    assert rec.calls[0] == {"grid": (6, 2, 1), "smem": 4096, "stream": 0, "func": 0x5150,
                            "values": (2**63, -7, 1.5, 0.25), "cluster": (2, 1, 1)}
    assert rec.calls[1]["stream"] == 0xABC and rec.calls[1]["values"] == (1, 2, 3.0, 4.0)


def test_prepared_launch_reports_the_driver_s_error(driver):
    from nbwgmma.launch import LaunchError, PreparedLaunch

    driver(("i32",), result=1)
    with pytest.raises(LaunchError, match="cuLaunchKernelEx failed: .*INVALID_VALUE"):
        PreparedLaunch(_Kernel(), 1, 32, ("i32",))(0, 5)


def _prepared(driver, args, grid=(4, 1, 1), exact=False):
    """A PreparedKernel for ``args`` on a recorder (what prepare() builds after compiling)."""
    from numba import typeof, types

    from nbwgmma.fastlaunch import arg_kind, slots_of
    from nbwgmma.launch import PreparedKernel

    argtypes = tuple(types.Array(types.float32, 1, "C") if hasattr(a, "data_ptr") else typeof(a) for a in args)
    rec = driver(slots_of(argtypes))
    kern = type("Compiled", (), {"argument_types": argtypes})()
    cufunc = type("Cufunc", (), {"kernel": _Kernel()})()
    kinds = [arg_kind(a)[0] for a in args]
    pk = PreparedKernel.__new__(PreparedKernel)
    pk._setup("kernel", kern, cufunc, grid, (128, 1, 1), args, kinds, 0, None, exact=exact)
    return pk, rec


def _tensor(n, **kw):
    return FakeTensor((n,), **kw)


def test_a_prepared_kernel_packs_new_arguments_and_checks_their_kinds(driver):
    from nbwgmma.launch import LaunchError

    pk, rec = _prepared(driver, (_tensor(1000), _tensor(1000), np.float32(2), np.int32(1000)))
    pk(_tensor(500, ptr=4096), _tensor(500, ptr=8192), 0.5, 500, stream=77)
    assert rec.calls[-1]["values"] == (0, 0, 500, 4, 4096, 500, 4, 0, 0, 500, 4, 8192, 500, 4, 0.5, 500)
    assert rec.calls[-1]["stream"] == 77
    n = len(rec.calls)
    with pytest.raises(LaunchError, match="argument 1 must be a float32 array, 1-D, C layout; got a float16"):
        pk(_tensor(5), _tensor(5, dtype="torch.float16"), 0.5, 5)
    with pytest.raises(LaunchError, match="argument 0 must be a float32 array.*got a float"):
        pk(1.0, _tensor(5), 0.5, 5)
    with pytest.raises(LaunchError, match=r"argument 3 \(1099511627776\) does not fit the kernel's i32 parameter"):
        pk(_tensor(5), _tensor(5), 0.5, 2**40)
    with pytest.raises(LaunchError, match="argument 3 .* does not fit"):
        pk(_tensor(5), _tensor(5), 0.5, 2.5)
    with pytest.raises(LaunchError, match="takes 4 arguments; got 2"):
        pk(_tensor(5), _tensor(5))
    with pytest.raises(LaunchError, match="stream must be"):
        pk(_tensor(5), _tensor(5), 0.5, 5, stream=object())
    assert len(rec.calls) == n  # nothing launched for a wrong call


class _StandIn:
    """A @cuda.jit kernel as launch() checks one before its full path: a dispatcher's py_func."""

    targetoptions = {}

    @staticmethod
    def py_func(x, scale):
        pass


def test_launch_repeats_through_prepared_kernels_by_argument_types(driver, monkeypatch):
    from nbwgmma import launch as L

    args = (_tensor(1000), np.float32(2))
    pk, rec = _prepared(driver, args, exact=True)
    monkeypatch.setattr(L, "_QUICK", {})
    kernel = _StandIn()
    key = (id(kernel), 4, 128, 0, None, False, *map(type, args))  # (pdl False)
    L._remember(key, pk)
    L.launch(kernel, 4, 128, (_tensor(10, ptr=4096), np.float32(3)))
    assert rec.calls[-1]["values"] == (0, 0, 10, 4, 4096, 10, 4, 3.0)
    # another element type: not this prepared kernel's; launch() goes on to its full path
    slow = []
    monkeypatch.setattr(L, "_repeat_launch", lambda *a: slow.append(a) or True)
    L.launch(kernel, 4, 128, (_tensor(10, dtype="torch.float64"), np.float32(3)))
    assert len(slow) == 1 and len(rec.calls) == 1
    L.launch(kernel, [4], 128, args)  # an unhashable grid: the full path too
    assert len(slow) == 2
