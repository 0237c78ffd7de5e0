"""Repeated launches through launch()'s cache compute what Numba's own path computes, for
PyTorch tensors and Numba device arrays, with new arrays, shapes and scalars each call."""

import numpy as np
import pytest
from numba import cuda

pytestmark = pytest.mark.gpu

from nbwgmma import launch as launch_module  # noqa: E402
from nbwgmma.launch import launch  # noqa: E402


@cuda.jit
def _axpy(out, x, y, alpha, offset):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = alpha * x[i] + y[i] + offset


def _check(make, n, alpha, offset, seed):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = make(np.full(n, np.nan, np.float32))
    launch(_axpy, (n + 127) // 128, 128, (out, make(x), make(y), np.float32(alpha), offset))
    got = out.cpu().numpy() if hasattr(out, "cpu") else out.copy_to_host()
    np.testing.assert_allclose(got, alpha * x.astype(np.float64) + y + offset, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["numba", "torch"])
def test_repeated_launches_take_the_cache_and_stay_right(kind):
    if kind == "torch":
        torch = pytest.importorskip("torch")
        make = lambda a: torch.from_numpy(a).cuda()  # noqa: E731
    else:
        make = cuda.to_device
    before = len(launch_module.LAUNCH_CACHE.entries)
    for i, n in enumerate((1000, 1000, 1000, 777)):  # the same grid for the first three: cached
        _check(make, n, alpha=1.5 + i, offset=i - 2, seed=i)
    cuda.synchronize()
    assert len(launch_module.LAUNCH_CACHE.entries) > before
