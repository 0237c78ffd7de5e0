"""The repeat-launch cache's host side (nbwgmma.fastlaunch): argument kinds, layouts, streams."""

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
