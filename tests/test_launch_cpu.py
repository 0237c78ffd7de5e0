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
