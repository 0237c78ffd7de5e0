"""nbwgmma's exception family and every bad input to ``matmul``, without a GPU.

The operands are fake CUDA arrays (a ``__cuda_array_interface__`` and nothing behind
it): every check below runs before anything touches a device, so each case says which
error class comes out and that its message is one line naming what was wrong.
"""

import sys

import numpy as np
import pytest

import nbwgmma
from nbwgmma import errors, matmul
from nbwgmma.errors import ConfigError, MatmulError, MatmulTypeError, NbwgmmaError


class Fake:
    """A CUDA array as far as ``matmul``'s checks can tell (its pointer is never read)."""

    _next = [0x7F0000000000]

    def __init__(self, shape, dtype):
        ptr = Fake._next[0]
        Fake._next[0] += 1 << 30
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": np.dtype(dtype).str,
                                         "data": (ptr, False), "strides": None, "version": 3}


def _pitched(shape, dtype, pitch):
    """A row-major Fake whose rows are ``pitch`` bytes apart."""
    x = Fake(shape, dtype)
    x.__cuda_array_interface__["strides"] = (pitch, np.dtype(dtype).itemsize)
    return x


def _strided(shape, dtype, strides, base=None, offset=0):
    """A Fake with byte ``strides``, at ``offset`` bytes into ``base``'s memory if given."""
    x = Fake(shape, dtype)
    if base is not None:
        x.__cuda_array_interface__["data"] = (base.__cuda_array_interface__["data"][0] + offset, False)
    x.__cuda_array_interface__["strides"] = strides
    return x


def test_an_out_with_negative_strides_overlapping_an_operand_is_refused():
    """The overlap check took the first element for the lowest byte: an out read backwards into
    B's rows ran, and B's values were overwritten while the product read them."""
    b = f16(16, 8)
    out = _strided((8, 8), np.float16, (-16, 2), base=b, offset=16 * 16 + 8 * 16)  # rows 23 down to 16 past B's
    with pytest.raises(MatmulError, match="out overlaps B"):
        matmul(f16(8, 16), b, out=_strided((8, 8), np.float16, (-16, 2), base=b, offset=12 * 16))
    matmul_args = (f16(8, 16), b)
    try:  # apart from B: the check passes (the call then needs a device)
        matmul(*matmul_args, out=out)
    except MatmulError as e:
        assert "overlaps" not in str(e), e
    except Exception:  # noqa: BLE001 - whatever a device-less launch raises
        pass


class _Device:
    def __init__(self, i):
        self.id = i


class FakeCupy(Fake):
    """A CuPy array on device ``dev`` (its module and ``.device.id`` are all that is read)."""

    __module__ = "cupy._core.core"

    def __init__(self, shape, dtype, dev):
        super().__init__(shape, dtype)
        self.device = _Device(dev)


class FakeHostTensor:
    """A PyTorch tensor in host memory, as far as ``array_info`` asks."""

    __module__ = "torch"
    is_cuda = False
    device = "cpu"


def f16(*shape):
    return Fake(shape, np.float16)


def _c_in_out(out_shape, c_shape, c_strides):
    """``out`` and a ``c`` of the given shape and strides over out's first bytes."""
    out = f16(*out_shape)
    return {"out": out, "c": _strided(c_shape, np.float16, c_strides, base=out)}


def _cols_of_one_buffer(*starts):
    """(8, 16) f16 column blocks of one (8, 32) buffer, starting at the given columns."""
    base = f16(8, 32)
    return tuple(_strided((8, 16), np.float16, (64, 2), base=base, offset=2 * c) for c in starts)


def _out():
    return f16(8, 8)


def _in_out(name, shape, strides, out_shape=(8, 8)):
    """``out`` and argument ``name`` (a vector of ``shape`` and byte ``strides``) in out's first bytes."""
    out = f16(*out_shape)
    v = _strided(shape, np.float16, strides, base=out)
    v.shape = shape  # (an epilogue's vector is told from a number by its shape)
    return {"out": out, name: (v,) if name == "epilogue_args" else v}


@pytest.fixture(autouse=True)
def _h100(monkeypatch):
    """The tile model asks the device for its SM count: an H100's, with no GPU here."""
    monkeypatch.setattr(sys.modules["nbwgmma.launch"], "device_limits", lambda device=None: {"multiprocessors": 132})


# (A, B, keyword arguments, error class, text the one-line message holds). Each keyword set
# gives ``out`` where the call would otherwise allocate one (that needs a device).
CASES = {
    # operands that are not CUDA arrays, or hold types nothing here reads: MatmulTypeError
    "host-numpy-A": (np.zeros((8, 16), np.float16), f16(16, 8), {}, MatmulTypeError,
                     "matmul: A: expected a CUDA array (CuPy, PyTorch, Numba device array); got a host numpy array"),
    "object-B": (f16(8, 16), "not an array", {}, MatmulTypeError, "matmul: B: expected a CUDA array with "
                 "__cuda_array_interface__; got str"),
    "host-torch-A": (FakeHostTensor(), f16(16, 8), {}, MatmulTypeError, "matmul: A: expected a CUDA tensor; got a "
                     "torch tensor on cpu"),
    "host-out": (f16(8, 16), f16(16, 8), {"out": np.zeros((8, 8), np.float16)}, MatmulTypeError,
                 "matmul: out: expected a CUDA array"),
    "element-type": (Fake((8, 16), np.complex64), f16(16, 8), {}, MatmulTypeError,
                     "matmul: A: unsupported element type complex64"),
    "mixed-types": (f16(8, 16), Fake((16, 8), np.float32), {}, MatmulTypeError,
                    "A and B must have the same type (or both fp8); got f16 and f32"),
    "int-inputs": (Fake((8, 16), np.int32), Fake((16, 8), np.int32), {}, MatmulTypeError,
                   "unsupported input type s32; expected bf16, f16, f32"),
    "in_dtype-name": (f16(8, 16), f16(16, 8), {"in_dtype": "f64"}, MatmulTypeError, "in_dtype must be among"),
    "in_dtype-pair": (f16(8, 16), f16(16, 8), {"in_dtype": ("bf16",)}, MatmulTypeError,
                      "in_dtype must be a type name or a pair of them (A's, B's); got ('bf16',)"),
    "in_dtype-size": (Fake((8, 16), np.uint16), Fake((16, 8), np.uint16), {"in_dtype": "e4m3"}, MatmulTypeError,
                      "in_dtype=e4m3 reads raw 1-byte integers; A holds u16"),
    "out_dtype": (f16(8, 16), f16(16, 8), {"out_dtype": "s8", "out": _out()}, MatmulTypeError,
                  "out_dtype (or the type of out) must be bf16, f16, f32, e4m3 or e5m2; got s8"),
    "tf32-out": (Fake((8, 16), np.float32), Fake((16, 8), np.float32), {"out_dtype": "bf16"}, MatmulTypeError,
                 "f32 (tf32) inputs give f32 outputs; got out_dtype=bf16"),
    "out-type": (f16(8, 16), f16(16, 8), {"out": Fake((8, 8), np.float32), "out_dtype": "f16"}, MatmulTypeError,
                 "out must have type f16; got f32"),
    "scale-type": (Fake((8, 16), np.uint8), Fake((16, 8), np.uint8), {"in_dtype": "e4m3", "scale_a": "two",
                   "out": Fake((8, 8), np.uint16)}, MatmulTypeError, "scale_a and scale_b must be numbers"),
    "stream-type": (f16(8, 16), f16(16, 8), {"stream": "default", "out": _out()}, MatmulTypeError,
                    "stream must be a CUDA stream object or a raw handle; got str"),
    # values, shapes, devices: MatmulError
    "1-D": (f16(4), f16(4, 4), {}, MatmulError, "A and B must be 2-D, or batches of matrices (batch..., rows, "
            "columns); got shapes (4,) and (4, 4)"),
    "batches": (f16(2, 4, 4), f16(3, 4, 4), {}, MatmulError, "A's and B's batch dimensions must be equal; got (2,) "
                "and (3,) (shapes (2, 4, 4) and (3, 4, 4))"),
    "inner": (f16(8, 16), f16(8, 16), {}, MatmulError, "inner dimensions differ: A is (8, 16), B is (8, 16); "
              "B must be (K, N): for a weight stored (N, K), as nn.Linear keeps it, pass its transpose (w.T)"),
    "inner-other": (f16(8, 16), f16(12, 8), {}, MatmulError, "inner dimensions differ: A is (8, 16), B is (12, 8)"),
    "devices": (FakeCupy((8, 16), np.float16, 0), FakeCupy((16, 8), np.float16, 1), {}, MatmulError,
                "B is on device 1, A on device 0"),
    "out-device": (FakeCupy((8, 16), np.float16, 0), FakeCupy((16, 8), np.float16, 0),
                   {"out": FakeCupy((8, 8), np.float16, 1)}, MatmulError, "out is on device 1, A on device 0"),
    "out-shape": (f16(8, 16), f16(16, 8), {"out": f16(8, 9)}, MatmulError, "out must have shape (8, 8); got (8, 9)"),
    "scale-not-fp8": (f16(8, 16), f16(16, 8), {"scale_a": 2.0, "out": _out()}, MatmulError,
                      "scale_a/scale_b apply to fp8 inputs only"),
    # config: its type, its keys, the Python types of its values, then GemmConfig's rules
    "config-str": (f16(8, 16), f16(16, 8), {"config": "fast", "out": _out()}, MatmulError,
                   "config must be a dict or 'auto'; got 'fast'"),
    "config-type": (f16(8, 16), f16(16, 8), {"config": 5, "out": _out()}, MatmulTypeError,
                    "config must be a dict or 'auto'; got int"),
    "config-key": (f16(8, 16), f16(16, 8), {"config": {"tile": 1}, "out": _out()}, MatmulError,
                   "unknown config keys ['tile']; expected among"),
    "config-int": (f16(8, 16), f16(16, 8), {"config": {"bm": "128"}, "out": _out()}, MatmulTypeError,
                   "config['bm'] must be an integer; got '128'"),
    "config-bool": (f16(8, 16), f16(16, 8), {"config": {"cluster": True}, "out": _out()}, MatmulTypeError,
                    "config['cluster'] must be an integer; got True"),
    "config-str-value": (f16(8, 16), f16(16, 8), {"config": {"epilogue": 1}, "out": _out()}, MatmulTypeError,
                         "config['epilogue'] must be a string; got 1"),
    "config-bm": (f16(8, 16), f16(16, 8), {"config": {"bm": 100}, "out": _out()}, MatmulError,
                  "matmul: config['bm'] must be 64, 128, 192 or 256; got 100"),
    "config-bn": (f16(8, 16), f16(16, 8), {"config": {"bn": 100}, "out": _out()}, MatmulError,
                  "config['bn'] must be a wgmma N"),
    "config-stages": (f16(8, 16), f16(16, 8), {"config": {"bm": 128, "bn": 256, "stages": 9}, "out": _out()},
                      MatmulError, "config['stages'] must be 2 to 4 for a 128x256 tile"),
    "config-cluster": (f16(8, 16), f16(16, 8), {"config": {"cluster": 3}, "out": _out()}, MatmulError,
                       "config['cluster'] must be 1, 2 or 4 CTAs; got 3"),
    "config-cluster-0": (f16(8, 16), f16(16, 8), {"config": {"cluster": 0}, "out": _out()}, MatmulError,
                         "config['cluster'] must be 1, 2 or 4 CTAs; got 0"),
    "config-cluster-5": (f16(8, 16), f16(16, 8), {"config": {"cluster": 5}, "out": _out()}, MatmulError,
                         "config['cluster'] must be 1, 2 or 4 CTAs; got 5"),
    "config-split": (f16(8, 16), f16(16, 8), {"config": {"split": 2, "cluster": 2}, "out": _out()}, MatmulError,
                     "config['split']: split-K works without clusters"),
    "config-group_m": (f16(8, 16), f16(16, 8), {"config": {"group_m": 0}, "out": _out()}, MatmulError,
                       "config['group_m'] must be 1 or more tile rows; got 0"),
    "config-regs": (f16(8, 16), f16(16, 8), {"config": {"producer_regs": 41}, "out": _out()}, MatmulError,
                    "config['producer_regs'] must be a multiple of 8 from 24 to 256"),
    "config-epilogue": (f16(8, 16), f16(16, 8), {"config": {"epilogue": "fast"}, "out": _out()}, MatmulError,
                        "config['epilogue'] must be 'tma', 'direct' or 'rows'; got 'fast'"),
    "config-tma-pitch": (f16(8, 16), f16(16, 8), {"config": {"epilogue": "tma"}, "out": _pitched((8, 8), np.float32, 36)},
                         MatmulError, "config['epilogue'] 'tma' needs a row-major out with 16-byte aligned rows; got f32 "
                                      "with strides (36, 4)"),
    # from a hunt for bad input that gave wrong answers or bare Python errors
    "activation-list": (f16(8, 16), f16(16, 8), {"activation": ["relu"], "out": _out()}, MatmulError,
                        "activation must be one of"),
    "config-swap": (f16(8, 16), f16(16, 8), {"config": {"swap": 2}, "out": _out()}, MatmulError,
                    "config['swap'] must be 0 (never swap) or 1 (swap); got 2"),
    "stream-bool": (f16(8, 16), f16(16, 8), {"stream": True, "out": _out()}, MatmulTypeError,
                    "stream must be a CUDA stream object or a raw handle (an integer in [0, 2^64)); got True"),
    "out-zero-stride": (f16(8, 16), f16(16, 8), {"out": _strided((8, 8), np.float16, (0, 2))}, MatmulError,
                        "out's elements overlap one another (a zero stride); got strides (0, 2)"),
    "out-zero-stride-k0": (f16(8, 0), f16(0, 8), {"out": _strided((8, 8), np.float16, (0, 2))}, MatmulError,
                           "out's elements overlap one another (a zero stride)"),
    # beta * C where C shares out's memory without being out itself: read where a tile was written
    "c-overlaps-out": (f16(8, 16), f16(16, 16), dict(zip(("out", "c"), _cols_of_one_buffer(0, 1))), MatmulError,
                       "c overlaps out without being out itself (got c at byte offset 2 from out, shape (8, 16), "
                       "strides (64, 2) bytes; out has shape (8, 16), strides (64, 2)): pass out itself as c, or a copy"),
    "c-is-out-transposed": (f16(8, 16), f16(16, 8), _c_in_out((8, 8), (8, 8), (2, 16)), MatmulError,
                            "c overlaps out without being out itself"),
    "batch-c-is-out's-first": (f16(2, 8, 16), f16(2, 16, 8), _c_in_out((2, 8, 8), (8, 8), (16, 2)), MatmulError,
                               "c overlaps out without being out itself"),
    # a second hunt: wrong answers with no error (the first five) and bare Python errors
    "out-rows-overlap": (f16(8, 16), f16(16, 8), {"out": _strided((8, 8), np.float16, (4, 2))}, MatmulError,
                         "out's elements overlap one another: shape (8, 8) with strides (4, 2) bytes"),
    "batch-out-overlap": (f16(2, 8, 16), f16(2, 16, 8), {"out": _strided((2, 8, 8), np.float16, (128, 4, 2))},
                          MatmulError, "out's elements overlap one another"),
    "bias-in-out": (f16(8, 16), f16(16, 8), _in_out("bias", (8,), (2,)), MatmulError, "out overlaps bias"),
    "epilogue-vector-in-out": (f16(8, 16), f16(16, 8),
                               {**_in_out("epilogue_args", (8,), (2,)), "epilogue": lambda v, r, c, x: v + x},
                               MatmulError, "out overlaps epilogue_args[0]"),
    "batch-bias-in-out": (f16(2, 8, 16), f16(2, 16, 8), _in_out("bias", (8,), (2,), (2, 8, 8)), MatmulError,
                          "out overlaps bias"),
    "alpha-array": (f16(8, 16), f16(16, 8), {"alpha": np.ones(2), "out": _out()}, MatmulTypeError,
                    "alpha must be a real number; got ndarray"),
    "beta-array-no-c": (f16(8, 16), f16(16, 8), {"beta": np.ones(2), "out": _out()}, MatmulTypeError,
                        "beta must be a real number; got ndarray"),
    "alpha-past-floats": (f16(8, 16), f16(16, 8), {"alpha": 10 ** 400, "out": _out()}, MatmulError,
                          "alpha must be a finite f32 number; got an integer of 1329 bits"),
    "epilogue-arg-past-floats": (f16(8, 16), f16(16, 8), {"epilogue": lambda v, r, c, x: v * x,
                                                          "epilogue_args": (10 ** 400,), "out": _out()},
                                 MatmulError, "epilogue_args[0] must be a finite f32 number"),
    # past the f32 range, NaN or inf: the kernel's f32 would be inf (inf or NaN where the result is finite)
    "alpha-past-f32": (f16(8, 16), f16(16, 8), {"alpha": 1e39, "out": _out()}, MatmulError,
                       "alpha must be a finite f32 number (at most 3.402823e+38 in magnitude); got 1e+39"),
    "alpha-int-past-f32": (f16(8, 16), f16(16, 8), {"alpha": 10 ** 40, "out": _out()}, MatmulError,
                           "alpha must be a finite f32 number"),
    "alpha-nan": (f16(8, 16), f16(16, 8), {"alpha": float("nan"), "out": _out()}, MatmulError,
                  "alpha must be a finite f32 number (at most 3.402823e+38 in magnitude); got nan"),
    "beta-inf": (f16(8, 16), f16(16, 8), {"c": Fake((8, 8), np.float32), "beta": np.float64("-inf"), "out": _out()},
                 MatmulError, "beta must be a finite f32 number"),
    "epilogue-arg-past-f32": (f16(8, 16), f16(16, 8), {"epilogue": lambda v, r, c, x: v * x,
                                                       "epilogue_args": (-1e39,), "out": _out()},
                              MatmulError, "epilogue_args[0] must be a finite f32 number"),
    "scales-past-f32": (Fake((8, 16), np.uint8), Fake((16, 8), np.uint8), {"in_dtype": "e4m3", "scale_a": 1e20,
                        "scale_b": 1e20, "out": Fake((8, 8), np.uint16)}, MatmulError,
                        "alpha * scale_a * scale_b must be a finite f32 number"),
    "epilogue-builtin": (f16(8, 16), f16(16, 8), {"epilogue": abs, "out": _out()}, MatmulTypeError,
                         "epilogue must be a Python function (a def or a lambda) or a @cuda.jit(device=True) "
                         "function (value, row, col, *extra) -> value; got builtin_function_or_method abs"),
    "c-odd-strides": (f16(8, 16), f16(16, 8), {"c": _strided((8, 8), np.float16, (35, 2)), "out": _out()},
                      MatmulError, "c has strides (35, 2) bytes, not multiples of its element size (2 bytes)"),
    "out-odd-strides": (f16(8, 16), f16(16, 8), {"out": _strided((8, 8), np.float16, (17, 2))}, MatmulError,
                        "out has strides (17, 2) bytes, not multiples of its element size"),
    "empty-activation": (f16(0, 16), f16(16, 8), {"activation": "bogus", "out": f16(0, 8)}, MatmulError,
                         "activation must be one of"),
    "empty-k0-activation": (f16(0, 0), f16(0, 8), {"activation": "bogus", "out": f16(0, 8)}, MatmulError,
                            "activation must be one of"),
    "empty-batch-bias": (f16(2, 0, 16), f16(2, 16, 8), {"bias": f16(9), "out": f16(2, 0, 8)}, MatmulError,
                         "bias must have shape"),
    "scale-string": (Fake((8, 16), np.uint8), Fake((16, 8), np.uint8), {"in_dtype": "e4m3", "scale_a": "2",
                     "out": Fake((8, 8), np.uint16)}, MatmulTypeError,
                     "scale_a and scale_b must be numbers (or one-element tensors); got scale_a='2'"),
    "scale-bool": (Fake((8, 16), np.uint8), Fake((16, 8), np.uint8), {"in_dtype": "e4m3", "scale_b": True,
                   "out": Fake((8, 8), np.uint16)}, MatmulTypeError, "got scale_b=True"),
    "stream-junk-handle": (f16(8, 16), f16(16, 8), {"stream": type("S", (), {"ptr": "junk"})(), "out": _out()},
                           MatmulTypeError, "stream must be a CUDA stream object or a raw handle; got S"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_every_bad_input_raises_a_documented_error_in_one_line(name):
    a, b, kw, cls, text = CASES[name]
    with pytest.raises(NbwgmmaError) as exc:
        matmul(a, b, **kw)
    e = exc.value
    assert type(e) is cls, (type(e), e)
    msg = str(e)
    assert msg.startswith("matmul: ") and "\n" not in msg, msg
    assert text in msg, msg


def test_the_family_keeps_the_builtin_bases():
    """``except ValueError`` / ``except TypeError`` written before the family still catch."""
    assert issubclass(MatmulError, ValueError) and issubclass(MatmulError, NbwgmmaError)
    assert issubclass(MatmulTypeError, TypeError) and issubclass(MatmulTypeError, MatmulError)
    assert issubclass(ConfigError, ValueError) and issubclass(ConfigError, NbwgmmaError)
    assert issubclass(errors.ToolchainError, RuntimeError) and issubclass(errors.ToolchainError, NbwgmmaError)
    with pytest.raises(TypeError):
        matmul(f16(8, 16), Fake((16, 8), np.float32))
    with pytest.raises(ValueError):
        matmul(f16(8, 16), f16(16, 8), config={"bm": 100}, out=_out())


def test_the_errors_are_importable_where_they_were():
    import importlib

    mod = {n: importlib.import_module(f"nbwgmma.{n}") for n in ("frontend.args", "report", "launch", "tma", "sim",
                                                                 "intrinsics.errors")}
    assert nbwgmma.MatmulError is mod["frontend.args"].MatmulError is MatmulError
    assert nbwgmma.MatmulTypeError is mod["frontend.args"].MatmulTypeError is MatmulTypeError
    assert nbwgmma.NbwgmmaError is NbwgmmaError
    assert mod["report"].ToolchainError is errors.ToolchainError
    assert errors.LaunchError is mod["launch"].LaunchError
    assert errors.KernelStoppedError is mod["launch"].KernelStoppedError
    assert errors.TensorMapError is mod["tma"].TensorMapError
    assert errors.NbwgmmaTypingError is mod["intrinsics.errors"].NbwgmmaTypingError
    assert errors.SimStopped is mod["sim"].SimStopped and errors.SimHazard is mod["sim"].SimHazard
    assert set(errors.__all__) <= set(dir(errors))
    with pytest.raises(AttributeError):
        errors.NoSuchError  # noqa: B018


def test_gemm_config_names_the_parameter_at_fault():
    from nbwgmma.kernels.gemm import GemmConfig

    for kw, key in (({"bm": 96}, "bm"), ({"stages": 5}, "stages"), ({"cluster": 3}, "cluster"),
                    ({"split": 2, "cluster": 2}, "split"),
                    ({"producer_regs": 48, "consumer_regs": 232}, "consumer_regs"),
                    ({"out": "f32", "epilogue": "tma", "c_transposed": True}, "epilogue"), ({"group_m": 0}, "group_m")):
        with pytest.raises(ConfigError) as exc:
            GemmConfig(**kw)
        assert exc.value.key == key and "\n" not in str(exc.value), (kw, exc.value)


def test_the_other_kernel_configs_and_the_layout_models_raise_documented_errors():
    """They raised plain ValueErrors."""
    from nbwgmma.kernels.scaled import ScaledConfig
    from nbwgmma.kernels.sparse import SparseConfig
    from nbwgmma.layout import encode_desc, from_bits

    for make, key in ((lambda: ScaledConfig(bm=96), "bm"), (lambda: ScaledConfig(out="f64"), "out"),
                      (lambda: SparseConfig(cluster=3), "cluster"), (lambda: SparseConfig(dtype="f64"), "dtype")):
        with pytest.raises(ConfigError) as exc:
            make()
        assert exc.value.key == key, exc.value
    for call, message in ((lambda: encode_desc(8, 16, 16), "addr must be a multiple of 16"),
                          (lambda: from_bits(np.zeros(4, np.uint8), "f64"), "t must be one of")):
        with pytest.raises(errors.LayoutError, match=message):
            call()
    assert issubclass(errors.LayoutError, ValueError) and issubclass(errors.ReportError, ValueError)


def test_a_config_fault_in_a_defaulted_parameter_names_the_whole_config():
    """A given parameter can make a defaulted one impossible: the message then shows the config."""
    from nbwgmma.frontend.args import config_error

    e = config_error(ConfigError("stages", "stages must be 2 to 1; got 1"), {"bm": 256})
    assert type(e) is MatmulError and str(e) == "matmul: config {'bm': 256}: stages must be 2 to 1; got 1"


def test_out_beside_a_in_one_buffer_passes_the_overlap_check_and_sharing_columns_does_not():
    """From a newcomer's trial: A = buf[:, :16] and out = buf[:, 16:] share no element, yet out was
    refused as overlapping A (their byte ranges interleave). Columns shared are refused."""
    a, out = _cols_of_one_buffer(0, 16)
    try:
        matmul(a, f16(16, 16), out=out)
    except MatmulError as e:
        assert "overlaps" not in str(e), e
    except Exception:  # noqa: BLE001 - whatever a device-less launch raises
        pass
    a, out = _cols_of_one_buffer(0, 8)
    with pytest.raises(MatmulError, match="out overlaps A"):
        matmul(a, f16(16, 16), out=out)


def test_c_beside_out_in_one_buffer_passes_the_overlap_check():
    """Two column blocks of one buffer interleave in their byte ranges yet share no element: C
    beside out is taken (the call then needs a device)."""
    out, c = _cols_of_one_buffer(0, 16)
    try:
        matmul(f16(8, 16), f16(16, 16), out=out, c=c)
    except MatmulError as e:
        assert "overlaps" not in str(e), e
    except Exception:  # noqa: BLE001 - whatever a device-less launch raises
        pass


def test_the_c_overlap_check_agrees_with_numpy_on_views_of_one_buffer():
    """check_c_apart against numpy.shares_memory on random slices (and transposes, steps) of one
    3-D buffer: never a miss; exact where the two views step alike."""
    from nbwgmma.frontend.args import check_c_apart
    from nbwgmma.frontend.arrays import ArrayInfo

    base = np.zeros((3, 12, 20), np.float32)

    def info(v):
        ptr = v.__array_interface__["data"][0] - base.__array_interface__["data"][0] + (1 << 40)
        return ArrayInfo(ptr, v.shape, v.strides, v.itemsize, "f32", 0, "numba")

    rng = np.random.default_rng(5)

    def view():
        lo = [int(rng.integers(0, d)) for d in base.shape]
        v = base[tuple(slice(x, int(rng.integers(x + 1, d + 1))) for x, d in zip(lo, base.shape))]
        return v[:, ::2] if rng.random() < 0.2 else v

    alike = 0
    for _ in range(3000):
        x, y = view(), view()
        if rng.random() < 0.2:
            x = x.transpose(0, 2, 1)
        same = x.shape == y.shape and x.strides == y.strides and x.ctypes.data == y.ctypes.data
        try:
            check_c_apart(info(x), info(y))
            refused = False
        except MatmulError:
            refused = True
        assert refused or same or not np.shares_memory(x, y), (x.shape, x.strides, y.shape, y.strides)
        if x.strides == y.strides:
            alike += 1
            assert refused == (np.shares_memory(x, y) and not same), (x.shape, y.shape, x.ctypes.data - y.ctypes.data)
    assert alike > 1000


def test_out_dtype_takes_numpy_scalar_types():
    """out_dtype=np.float32 reads as "f32", as np.dtype("float32") and torch.float32 do."""
    from nbwgmma.frontend.args import type_name

    assert [type_name(t) for t in (np.float32, np.float16, np.dtype("float32"), "f32")] == ["f32", "f16", "f32", "f32"]
    try:
        matmul(f16(8, 16), f16(16, 8), out=Fake((8, 8), np.float32), out_dtype=np.float32)
    except MatmulTypeError as e:
        raise AssertionError(e) from None
    except Exception:  # noqa: BLE001 - whatever a device-less launch raises
        pass


def test_c_beside_out_is_taken_at_any_size_and_c_as_out_whatever_its_unit_strides():
    """The exact check bounds each dimension's offsets by what the smaller strides can reach, so
    40000 rows (or a batch of 17 x 1024) cost a few candidates, not a refusal past a limit; a c
    that is out with another stride on a dimension of one element is out itself."""
    from nbwgmma.frontend.args import check_c_apart
    from nbwgmma.frontend.arrays import ArrayInfo

    def half(shape, cols, first):  # columns [0, cols) or [cols, 2 cols) of a buffer (..., 2 cols)
        strides = tuple(int(np.prod(shape[i + 1:-1])) * 4 * cols for i in range(len(shape) - 1)) + (2,)
        return ArrayInfo((1 << 40) + (0 if first else 2 * cols), shape[:-1] + (cols,), strides, 2, "f16", 0, "numba")

    for shape in ((40000, 16), (17, 1024, 16)):
        check_c_apart(half(shape, 8, True), half(shape, 8, False))
        wide = half(shape, 8, True)._replace(shape=shape[:-1] + (9,))  # one column into the other half
        with pytest.raises(MatmulError, match="c overlaps out"):
            check_c_apart(wide, half(shape, 8, False))
    out = ArrayInfo(1 << 40, (1, 64, 16), (2048, 32, 2), 2, "f16", 0, "numba")
    check_c_apart(out._replace(strides=(4096, 32, 2)), out)


def test_a_typing_error_leaves_the_compilers_frames_out_of_its_traceback(monkeypatch):
    """From a newcomer's trial: a typing error's one line came after about 145 lines of traceback
    through Numba's compiler. compile_report (as launch and prepare) raises it again from its own
    frame; NBWGMMA_FULL_TYPING_ERRORS=1 keeps the compiler's frames."""
    import traceback

    from numba import cuda, types

    from nbwgmma.intrinsics import setmaxnreg_inc
    from nbwgmma.intrinsics.errors import NbwgmmaTypingError

    @cuda.jit
    def kernel(out):
        setmaxnreg_inc(100)  # not a multiple of 8
        out[0] = 1

    for full in ("0", "1"):
        monkeypatch.setenv("NBWGMMA_FULL_TYPING_ERRORS", full)
        with pytest.raises(NbwgmmaTypingError, match="setmaxnreg_inc") as exc:
            nbwgmma.compile_report(kernel, (types.int32[::1],))
        files = [f.filename for f in traceback.extract_tb(exc.value.__traceback__)]
        in_numba = [f for f in files if "numba" in f]
        assert (in_numba if full == "1" else not in_numba), files
