"""PreparedLaunch and the disk cache on the GPU: a kernel loaded from a cached cubin and
launched with packed parameters computes what Numba's own launch computes."""

import numpy as np
import pytest
from numba import cuda, float32, int32

pytestmark = pytest.mark.gpu

from nbwgmma import cache  # noqa: E402
from nbwgmma.intrinsics import cluster_ctarank, griddep_launch_dependents, griddep_wait  # noqa: E402
from nbwgmma.launch import LaunchError, PreparedLaunch, array_arg_types, array_arg_values  # noqa: E402

ARRAY_1D = array_arg_types(1)


@cuda.jit
def _affine(out, x, y):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x * y + i + cluster_ctarank() * 1000


def _array_params(d):
    return array_arg_values(d.__cuda_array_interface__["data"][0], d.shape, d.strides, d.dtype.itemsize)


def _load(tmp_path, monkeypatch, d):
    monkeypatch.setenv("NBWGMMA_CACHE_DIR", str(tmp_path))
    sig = (_affine.typeof_pyval(d), int32, float32)
    return cache.cached_kernel(_affine, sig, "affine", cuda.get_current_device().compute_capability)


@pytest.mark.parametrize("cluster", [None, (2, 1, 1)])
def test_prepared_launch_from_the_disk_cache(tmp_path, monkeypatch, cluster):
    d = cuda.to_device(np.full(1000, np.nan, np.float32))
    kern, hit = _load(tmp_path, monkeypatch, d)
    assert not hit
    kern2, hit2 = _load(tmp_path, monkeypatch, d)  # the file this call wrote
    assert hit2
    pl = PreparedLaunch(kern2, grid=8, block=128, arg_types=ARRAY_1D + ("i32", "f32"), cluster=cluster)
    for x, y in ((3, 0.5), (-7, 2.25)):
        pl(0, *_array_params(d), x, y)
        cuda.synchronize()
        i = np.arange(1000)
        rank = (i // 128) % 2 if cluster else 0
        np.testing.assert_array_equal(d.copy_to_host(), np.float32(x * y) + i + rank * 1000)


def test_prepared_launch_checks_the_request(tmp_path, monkeypatch):
    d = cuda.to_device(np.zeros(4, np.float32))
    kern, _ = _load(tmp_path, monkeypatch, d)
    with pytest.raises(LaunchError, match="opt-in limit"):
        PreparedLaunch(kern, 1, 32, ARRAY_1D + ("i32", "f32"), smem=300 * 1024)
    with pytest.raises(LaunchError, match="threads"):
        PreparedLaunch(kern, 1, 2048, ARRAY_1D + ("i32", "f32"))
    with pytest.raises(LaunchError, match="multiple of cluster"):
        PreparedLaunch(kern, 3, 32, ARRAY_1D + ("i32", "f32"), cluster=2)


@cuda.jit
def _step(dst, src):
    griddep_wait()  # launched with pdl=True: the previous kernel may still run
    i = cuda.grid(1)
    if i < dst.size:
        dst[i] = src[i] + 1.0
    griddep_launch_dependents()


@pytest.mark.parametrize("cluster", [None, (2, 1, 1)])
def test_programmatic_dependent_launches_stay_ordered(cluster):
    """launch(..., pdl=True) (and prepare(..., pdl=True)) of a kernel that waits with
    griddep_wait: 200 back-to-back steps, each reading the previous one's output and
    overwriting what the one before read, give exactly 200 added to every element."""
    from nbwgmma.launch import launch, prepare

    n = 1 << 20
    bufs = [cuda.to_device(np.arange(n, dtype=np.float32) % 1000), cuda.device_array(n, np.float32)]
    for i in range(100):
        launch(_step, 4096, 256, (bufs[1 - i % 2], bufs[i % 2]), pdl=True, cluster=cluster)
    pk = prepare(_step, 4096, 256, (bufs[0], bufs[1]), pdl=True, cluster=cluster)
    for i in range(100, 200):
        pk(bufs[1 - i % 2], bufs[i % 2])
    np.testing.assert_array_equal(bufs[0].copy_to_host(), np.arange(n, dtype=np.float32) % 1000 + 200)


@cuda.jit
def _count_ctas(out):
    if cuda.threadIdx.x == 0:
        cuda.atomic.add(out, 0, 1)
        cuda.atomic.max(out, 1, cuda.gridDim.x)
        cuda.atomic.max(out, 2, cuda.blockIdx.x)


@pytest.mark.parametrize("pdl", [False, True])
def test_a_clustered_launch_starts_the_ctas_asked_for(pdl):
    """``launch(kernel, 6, ..., cluster=(2, 1, 1))`` starts 6 CTAs in 3 clusters: without ``pdl`` its
    first launch goes through cuda.core, which counts the grid in clusters (it started 12 until the
    grid was divided by the cluster), the repeats through the prepared kernel; with ``pdl`` every
    launch does."""
    from nbwgmma.launch import launch

    for _ in range(3):
        out = cuda.to_device(np.zeros(3, np.int32))
        launch(_count_ctas, 6, 32, (out,), cluster=(2, 1, 1), pdl=pdl)
        assert out.copy_to_host().tolist() == [6, 6, 5]
