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
