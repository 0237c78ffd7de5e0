import functools

import pytest


@functools.lru_cache(maxsize=None)
def gpu_skip_reason():
    """None when an sm_90 GPU is usable, else why the GPU tests are skipped."""
    try:
        from numba import cuda

        if not cuda.is_available():
            return "no CUDA GPU available"
        cc = cuda.get_current_device().compute_capability
        if cc < (9, 0):
            return f"needs compute capability 9.0 (sm_90a); device has {cc}"
    except Exception as exc:  # a broken driver install is a skip, not an error
        return f"CUDA unusable: {exc}"
    return None


def pytest_collection_modifyitems(config, items):
    reason = gpu_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(1234)
