import pytest

from nbwgmma.launch import LaunchError, _dim3, dynamic_smem_bytes


def test_dynamic_smem_bytes():
    assert dynamic_smem_bytes(200 * 1024, 1024) == 200 * 1024 + 1023


def test_dim3():
    assert _dim3(5, "grid") == (5, 1, 1)
    assert _dim3((2, 3), "grid") == (2, 3, 1)
    with pytest.raises(LaunchError, match="positive"):
        _dim3((0,), "block")
    with pytest.raises(LaunchError, match="1 to 3"):
        _dim3((1, 1, 1, 1), "cluster")


def test_launch_shapes_sizes_and_arguments_are_checked():
    """From a hunt for bad input: a grid given as a string launched as (1, 2), True as one CTA;
    a block of z 128 or a grid of y 70000 (past CUDA's limits) was accepted; smem as a string
    or a float converted; an array given as args unpacked into its elements; an align of 0
    made dynamic_smem_bytes return fewer bytes than the payload."""
    from nbwgmma.launch import launch

    for d, message in (("12", "1 to 3 positive integers; got '12'"), (True, "got True"), (2.0, "got 2.0"),
                       (None, "got None"), ((1, 70000), r"grid \(1, 70000\): its y dimension exceeds CUDA's limit "
                                                          r"of 65535")):
        with pytest.raises(LaunchError, match=message):
            _dim3(d, "grid")
    with pytest.raises(LaunchError, match=r"block \(1, 1, 128\): its z dimension exceeds CUDA's limit of 64"):
        _dim3((1, 1, 128), "block")
    with pytest.raises(LaunchError, match="args must be a tuple of the kernel's arguments; got ndarray"):
        launch(None, 1, 32, __import__("numpy").zeros(4))
    with pytest.raises(LaunchError, match="smem must be a non-negative integer"):
        launch(None, 1, 32, (), smem="4096")
    for args, message in (((100, 0), "align must be a positive power of two; got 0"),
                          ((100, 1000), "align must be a positive power of two; got 1000"),
                          ((-5000,), "payload must be a non-negative integer"), (("100",), "payload must be")):
        with pytest.raises(LaunchError, match=message):
            dynamic_smem_bytes(*args)


def test_param_struct_packs_8_byte_slots():
    from nbwgmma.launch import param_struct

    st = param_struct(("u64", "i32", "f32", "i64", "u32", "f64"))
    assert st.size == 48
    raw = st.pack(2**64 - 1, -5, 1.5, -(2**63), 7, 0.25)
    import struct

    assert struct.unpack_from("<Q", raw, 0)[0] == 2**64 - 1
    assert struct.unpack_from("<i", raw, 8)[0] == -5
    assert struct.unpack_from("<f", raw, 16)[0] == 1.5
    assert struct.unpack_from("<q", raw, 24)[0] == -(2**63)
    assert struct.unpack_from("<I", raw, 32)[0] == 7
    assert struct.unpack_from("<d", raw, 40)[0] == 0.25
    with pytest.raises(LaunchError, match="among"):
        param_struct(("u64", "int"))


def test_array_parameters_follow_numbas_layout():
    from nbwgmma.launch import array_arg_types, array_arg_values

    assert array_arg_types(1) == ("u64", "u64", "i64", "i64", "u64", "i64", "i64")
    assert len(array_arg_types(2)) == 9
    assert array_arg_values(4096, (3, 5), (40, 4), 4) == (0, 0, 15, 4, 4096, 3, 5, 40, 4)


# --- the driver's launch structures, as PreparedLaunch passes them through ctypes -----------------

import ctypes  # noqa: E402


def test_launch_config_structs_match_the_driver_s():
    from cuda.bindings import driver as drv

    from nbwgmma.cudriver import LaunchAttribute as _LaunchAttribute, LaunchConfig as _LaunchConfig

    cfg = drv.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = 3, 5, 7
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = 11, 13, 17
    cfg.sharedMemBytes, cfg.hStream = 123456, drv.CUstream(0xBEEF)
    at = drv.CUlaunchAttribute()
    at.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    at.value.clusterDim.x, at.value.clusterDim.y, at.value.clusterDim.z = 2, 3, 4
    cfg.attrs, cfg.numAttrs = [at], 1
    assert ctypes.sizeof(_LaunchConfig) == 56 and ctypes.sizeof(_LaunchAttribute) == 72
    ours = _LaunchConfig.from_buffer_copy(ctypes.string_at(cfg.getPtr(), ctypes.sizeof(_LaunchConfig)))
    assert (ours.gridDimX, ours.gridDimY, ours.gridDimZ, ours.blockDimX, ours.blockDimY, ours.blockDimZ) == \
        (3, 5, 7, 11, 13, 17)
    assert (ours.sharedMemBytes, ours.hStream, ours.numAttrs) == (123456, 0xBEEF, 1)
    a = _LaunchAttribute.from_buffer_copy(ctypes.string_at(ours.attrs, ctypes.sizeof(_LaunchAttribute)))
    assert (a.id, a.x, a.y, a.z) == (4, 2, 3, 4)


class _DeviceArray:
    """A stand-in for a CUDA array (its interface only: nothing reads the memory)."""

    __cuda_array_interface__ = {"shape": (64, 64), "typestr": "<f2", "data": (0x7F0000000000, False),
                                "strides": None, "version": 3}


def test_a_tensor_map_passed_itself_is_refused_naming_its_address():
    from numba import cuda

    from nbwgmma.launch import launch
    from nbwgmma.tma import TensorMap

    tm = TensorMap(_DeviceArray(), (64, 64), dtype="f16", encode=False)

    @cuda.jit
    def kernel(tmap, n):
        pass

    with pytest.raises(LaunchError, match=r"launch\(\): argument 0 is a TensorMap; pass its address .*tmap.address"):
        launch(kernel, 1, 128, (tm, 3))


def _launch_errors():
    """(call, message) of launches refused before the simulator or the driver sees them."""
    import numpy as np
    from numba import cuda

    from nbwgmma.launch import launch, prepare

    @cuda.jit
    def k(x):
        x[0] = 1

    @cuda.jit(device=True)
    def dev(x):
        return x

    x = np.zeros(4, np.float32)
    return [
        (lambda: launch(lambda x: None, 1, 32, (x,)), r"^launch: kernel must be a @cuda\.jit kernel \(a Numba "
         r"dispatcher, not a device function\); got function"),
        (lambda: launch(dev, 1, 32, (x,)), r"^launch: kernel must be a @cuda\.jit kernel .*got a device function"),
        (lambda: launch(k, 1, 32, ()), r"^launch of .*k: missing a required argument: 'x': the kernel takes k\(x\); "
         r"got 0 argument\(s\)"),
        (lambda: launch(k, 1, 32, (x, x)), r"^launch of .*k: too many positional arguments: the kernel takes k\(x\); "
         r"got 2 argument\(s\)"),
        (lambda: launch(k, 1, 32, (x,), stream="junk"), r"^launch of .*k: stream must be 0, a raw handle \(an integer "
         r"in \[0, 2\^64\)\), a Numba or PyTorch stream or an object with __cuda_stream__; got str 'junk'"),
        (lambda: launch(k, 1, 32, (x,), stream=True), r"stream must be .*got bool True"),
        (lambda: launch(k, 1, 32, (x,), stream=-1), r"stream must be .*got int -1"),
        (lambda: launch(k, 1, 32, (x,), pdl="no"), r"^launch of .*k: pdl must be a bool \(or 0 or 1\); got str 'no'"),
        (lambda: launch(k, 1, 32, (x,), pdl=2), r"pdl must be a bool \(or 0 or 1\); got int 2"),
        (lambda: prepare(lambda x: None, 1, 32, (x,)), r"^prepare\(\): kernel must be a @cuda\.jit kernel"),
        (lambda: prepare(k, 1, 32, (x,), pdl="yes"), r"^prepare\(\): pdl must be a bool"),
    ]


def test_a_launch_of_something_not_a_kernel_the_wrong_arguments_a_bad_stream_or_pdl_is_refused():
    """They were AttributeErrors (no dispatcher), the simulator's TypeError (the argument count),
    Numba's TypeError (a stream) or taken (a string as pdl: programmatic dependent launch on).
    The same cases run in the simulator (tests/sim_frontend_cases.py)."""
    for call, message in _launch_errors():
        with pytest.raises(LaunchError, match=message):
            call()
