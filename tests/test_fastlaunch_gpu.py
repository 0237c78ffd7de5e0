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


@pytest.mark.parametrize("kind", ["numba", "torch"])
def test_a_prepared_kernel_launches_new_arguments(kind):
    from nbwgmma.launch import LaunchError, prepare

    if kind == "torch":
        torch = pytest.importorskip("torch")
        make = lambda a: torch.from_numpy(a).cuda()  # noqa: E731
    else:
        make = cuda.to_device
    n = 1000
    rng = np.random.default_rng(7)
    proto = [make(np.zeros(n, np.float32)) for _ in range(3)]
    pk = prepare(_axpy, (n + 127) // 128, 128, (*proto, np.float32(1), 0))
    for i in range(3):
        x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        out = make(np.full(n, np.nan, np.float32))
        pk(out, make(x), make(y), np.float32(0.5 * i), i)
        got = out.cpu().numpy() if hasattr(out, "cpu") else out.copy_to_host()
        np.testing.assert_allclose(got, 0.5 * i * x.astype(np.float64) + y + i, rtol=1e-6, atol=1e-6)
    with pytest.raises(LaunchError, match="takes 5 arguments; got 2"):
        pk(out, out)
