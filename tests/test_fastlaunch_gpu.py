"""Repeated launches through launch()'s cache and prepared kernels compute what Numba's own
path computes, for PyTorch tensors, CuPy arrays and Numba device arrays, with new arrays,
shapes and scalars each call; a wrong argument is refused before anything is launched."""

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


def _maker(kind):
    """(to device, to host) for an array kind."""
    if kind == "torch":
        torch = pytest.importorskip("torch")
        return (lambda a: torch.from_numpy(a).cuda()), (lambda d: d.cpu().numpy())
    if kind == "cupy":
        cupy = pytest.importorskip("cupy")
        return cupy.asarray, cupy.asnumpy
    return cuda.to_device, (lambda d: d.copy_to_host())


def _check(make, host, n, alpha, offset, seed):
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = make(np.full(n, np.nan, np.float32))
    launch(_axpy, (n + 127) // 128, 128, (out, make(x), make(y), np.float32(alpha), offset))
    got = host(out)
    np.testing.assert_allclose(got, alpha * x.astype(np.float64) + y + offset, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kind", ["numba", "torch", "cupy"])
def test_repeated_launches_take_the_cache_and_stay_right(kind):
    make, host = _maker(kind)
    before = len(launch_module.LAUNCH_CACHE.entries)
    for i, n in enumerate((1000, 1000, 1000, 777)):  # the same grid for the first three: cached
        _check(make, host, n, alpha=1.5 + i, offset=i - 2, seed=i)
    cuda.synchronize()
    assert len(launch_module.LAUNCH_CACHE.entries) > before
    hits = [pk for key, pks in launch_module._QUICK.items() if key[0] == id(_axpy) for pk in pks]
    assert hits and all(pk.launcher.binding == "ctypes" for pk in hits)


@pytest.mark.parametrize("kind", ["numba", "torch", "cupy"])
def test_a_prepared_kernel_launches_new_arguments(kind):
    from nbwgmma.launch import LaunchError, prepare

    make, host = _maker(kind)
    n = 1000
    rng = np.random.default_rng(7)
    proto = [make(np.zeros(n, np.float32)) for _ in range(3)]
    pk = prepare(_axpy, (n + 127) // 128, 128, (*proto, np.float32(1), 0))
    assert pk.launcher.binding == "ctypes"
    for i in range(3):
        m = n - 100 * i  # a new size each call: a value, not part of the compiled type
        x, y = rng.standard_normal(m).astype(np.float32), rng.standard_normal(m).astype(np.float32)
        out = make(np.full(m, np.nan, np.float32))
        pk(out, make(x), make(y), np.float32(0.5 * i), i)
        np.testing.assert_allclose(host(out), 0.5 * i * x.astype(np.float64) + y + i, rtol=1e-6, atol=1e-6)
    with pytest.raises(LaunchError, match="takes 5 arguments; got 2"):
        pk(out, out)
    wrong = make(np.zeros(n, np.float64))
    with pytest.raises(LaunchError, match="argument 1 must be a float32 array, 1-D, C layout; got a float64"):
        pk(out, wrong, out, np.float32(1), 0)
    with pytest.raises(LaunchError, match="argument 0 must be a float32 array.*got a host ndarray"):
        pk(np.zeros(n, np.float32), out, out, np.float32(1), 0)
    with pytest.raises(LaunchError, match="argument 4 .* does not fit the kernel's i64"):
        pk(out, out, out, np.float32(1), 2.5)


def test_prepared_kernels_take_each_array_kind_2d_layouts_and_streams():
    torch = pytest.importorskip("torch")
    cupy = pytest.importorskip("cupy")
    from nbwgmma.launch import LaunchError, prepare

    @cuda.jit
    def add_t(out, a, b):  # out = a + b.T
        i, j = cuda.grid(2)
        if i < out.shape[0] and j < out.shape[1]:
            out[i, j] = a[i, j] + b[j, i]

    r, c = 48, 80
    rng = np.random.default_rng(3)
    ha, hb = rng.standard_normal((r, c)).astype(np.float32), rng.standard_normal((c, r)).astype(np.float32)
    grid, block = ((r + 15) // 16, (c + 15) // 16), (16, 16)
    pk = prepare(add_t, grid, block, (torch.zeros(r, c, device="cuda"), torch.zeros(r, c, device="cuda"),
                                      torch.zeros(c, r, device="cuda")))
    stream = torch.cuda.Stream()
    for mk, host in ((lambda a: torch.from_numpy(a).cuda(), lambda d: d.cpu().numpy()),
                     (cupy.asarray, cupy.asnumpy), (cuda.to_device, lambda d: d.copy_to_host())):
        out, a, b = mk(np.full((r, c), np.nan, np.float32)), mk(ha), mk(hb)
        cuda.synchronize()  # the copies ran on the default stream
        pk(out, a, b, stream=stream)  # arrays of other libraries than the example's: the generic reader
        stream.synchronize()
        np.testing.assert_allclose(host(out), ha + hb.T, rtol=1e-6)
    ta = torch.from_numpy(np.ascontiguousarray(ha.T)).cuda().T  # Fortran order: the C kernel refuses it
    with pytest.raises(LaunchError, match="argument 1 must be a float32 array, 2-D, C layout; got .*F layout"):
        pk(torch.zeros(r, c, device="cuda"), ta, torch.zeros(c, r, device="cuda"))
    pf = prepare(add_t, grid, block, (torch.zeros(r, c, device="cuda"), ta, torch.zeros(c, r, device="cuda")))
    out = torch.full((r, c), float("nan"), device="cuda")
    pf(out, ta, torch.from_numpy(hb).cuda())
    np.testing.assert_allclose(out.cpu().numpy(), ha + hb.T, rtol=1e-6)
    torch.cuda.synchronize()


def test_launch_repeats_with_a_new_dtype_and_a_cluster_stay_right():
    torch = pytest.importorskip("torch")
    from nbwgmma.intrinsics import cluster_ctarank

    @cuda.jit
    def fill(out, v):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = v + cluster_ctarank()

    for dt in (torch.float32, torch.float64, torch.float32, torch.float64):
        out = torch.zeros(512, device="cuda", dtype=dt)
        launch(fill, 4, 128, (out, 2.0), cluster=(2, 1, 1), smem=60_000)
        want = 2.0 + (np.arange(512) // 128) % 2
        np.testing.assert_array_equal(out.cpu().numpy(), want)
    key = [k for k in launch_module._QUICK if k[0] == id(fill)]
    assert len(key) == 1 and len(launch_module._QUICK[key[0]]) == 2  # one prepared kernel per dtype
