"""TMA on the GPU: loads compared byte for byte with the box-copy model, stores, edges,
multicast and reduce."""

import functools

import numpy as np
import pytest
from numba import cuda

from nbwgmma.intrinsics import *  # noqa: F401,F403
from nbwgmma.launch import dynamic_smem_bytes, launch
from nbwgmma.layout import box_copy_model
from nbwgmma.tma import TensorMap

pytestmark = pytest.mark.gpu

_SRC = """
def kernel(tmap, tmap_out, nbytes, raw_out, do_store, op):
    dyn = cuda.shared.array(0, np.uint8)
    bars = cuda.shared.array(1, np.uint64)
    base = dynamic_smem_base(dyn, 1024)
    off = base - smem_addr(dyn)
    bar = smem_addr(bars)
    tid = cuda.threadIdx.x
    if tid == 0:
        mbarrier_init(bar, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    if tid == 0:
        mbarrier_arrive_expect_tx(bar, nbytes)
        tma_load_{r}d(base, tmap, bar, {lc})
    mbarrier_wait_parity(bar, 0)
    for i in range(tid, nbytes, cuda.blockDim.x):
        raw_out[cuda.blockIdx.x, i] = dyn[off + i]
    cuda.syncthreads()
    if tid == 0 and do_store:
        if op == 1:
            tma_reduce_{r}d(base, tmap_out, {sc}, "add")
        else:
            tma_store_{r}d(base, tmap_out, {sc})
        bulk_commit_group()
        bulk_wait_group(0)
"""


@functools.lru_cache(maxsize=None)
def copy_kernel(rank, load_coords, store_coords):
    lc = ", ".join(str(c) for c in load_coords[::-1])  # TMA order: innermost first
    sc = ", ".join(str(c) for c in store_coords[::-1])
    ns = dict(globals())
    exec(_SRC.format(r=rank, lc=lc, sc=sc), ns)
    return cuda.jit(ns["kernel"])


def roundtrip(x, box, coords, swizzle, dtype=None, store_coords=None, op=0, out_init=None):
    d_x = cuda.to_device(x)
    tm = TensorMap(d_x, box, swizzle=swizzle, dtype=dtype)
    out = cuda.to_device(out_init if out_init is not None else np.full_like(x, 77))
    tm_out = TensorMap(out, box, swizzle=swizzle, dtype=dtype)
    raw = cuda.to_device(np.full((1, tm.box_bytes), 0xAB, np.uint8))
    kern = copy_kernel(len(box), tuple(coords), tuple(store_coords if store_coords is not None else coords))
    launch(kern, 1, 128, (tm.address, tm_out.address, tm.box_bytes, raw, store_coords is not None, op),
           smem=dynamic_smem_bytes(tm.box_bytes + 1024))
    cuda.synchronize()
    return raw.copy_to_host()[0], out.copy_to_host()


WIDTHS = {1: np.uint8, 2: np.uint16, 4: np.float32}


@pytest.mark.parametrize("swizzle", ["none", "32B", "64B", "128B"])
@pytest.mark.parametrize("width", [1, 2, 4])
def test_2d_roundtrip_every_swizzle_and_width(swizzle, width, rng):
    span = {"none": 64, "32B": 32, "64B": 64, "128B": 128}[swizzle]
    cols = span // width
    dt = WIDTHS[width]
    x = (rng.integers(1, 250, (96, cols * 3)) if width < 4 else rng.standard_normal((96, cols * 3))).astype(dt)
    box, coords = (32, cols), (40, cols)
    raw, out = roundtrip(x, box, coords, swizzle, store_coords=coords)
    np.testing.assert_array_equal(raw, box_copy_model(x, box, coords, swizzle))
    want = np.full_like(x, 77)
    want[40:72, cols:2 * cols] = x[40:72, cols:2 * cols]
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
def test_every_rank(rank, rng):
    shape = (5, 6, 7, 9, 32)[-rank:]
    box = (2, 3, 4, 4, 16)[-rank:]
    coords = (1, 2, 3, 4, 8)[-rank:]
    x = rng.standard_normal(shape).astype(np.float32)
    raw, out = roundtrip(x, box, coords, "none", store_coords=coords)
    np.testing.assert_array_equal(raw, box_copy_model(x, box, coords, "none"))
    want = np.full_like(x, 77)
    sl = tuple(slice(c, c + b) for c, b in zip(coords, box))
    want[sl] = x[sl]
    np.testing.assert_array_equal(out, want)


def test_box_across_the_edge_zero_fill_and_clipped_store(rng):
    x = rng.standard_normal((50, 72)).astype(np.float32)  # 288-byte rows: TMA needs 16-byte pitches
    box = (16, 32)
    # The innermost coordinate must be a multiple of 16 bytes (48 floats = 192 B); an
    # unaligned one (50) traps with an illegal instruction on an H100.
    raw, out = roundtrip(x, box, (-5, 48), "128B", store_coords=(40, 60))
    np.testing.assert_array_equal(raw, box_copy_model(x, box, (-5, 48), "128B"))
    got = np.frombuffer(box_copy_model(x, box, (-5, 48), "none").tobytes(), np.float32).reshape(box)
    assert (got[:5] == 0).all() and (got[:, 24:] == 0).all()
    # The store writes rows 40..49 and columns 60..71 only: the sentinel survives elsewhere.
    want = np.full_like(x, 77)
    want[40:50, 60:72] = got[:10, :12]
    np.testing.assert_array_equal(out, want)


def test_reduce_add(rng):
    x = rng.integers(1, 100, (64, 32)).astype(np.float32)
    init = rng.integers(1, 100, (64, 32)).astype(np.float32)
    _, out = roundtrip(x, (32, 32), (0, 0), "128B", store_coords=(16, 0), op=1, out_init=init)
    want = init.copy()
    want[16:48] += x[0:32]
    np.testing.assert_array_equal(out, want)


_MC = """
def kernel(tmap, nbytes, raw_out):
    dyn = cuda.shared.array(0, np.uint8)
    bars = cuda.shared.array(1, np.uint64)
    base = dynamic_smem_base(dyn, 1024)
    off = base - smem_addr(dyn)
    bar = smem_addr(bars)
    tid = cuda.threadIdx.x
    rank = cluster_ctarank()
    n = cluster_nctarank()
    if tid == 0:
        mbarrier_init(bar, 1)
        fence_mbarrier_init()
    cluster_sync()
    if tid == 0:
        mbarrier_arrive_expect_tx(bar, nbytes)
    cluster_sync()
    if tid == 0 and rank == 0:
        tma_load_multicast_2d(base, tmap, bar, (1 << n) - 1, 0, 8)
    mbarrier_wait_parity(bar, 0)
    for i in range(tid, nbytes, cuda.blockDim.x):
        raw_out[cuda.blockIdx.x, i] = dyn[off + i]
    cluster_sync()
"""


@pytest.mark.parametrize("csize", [2, 4])
def test_multicast_to_every_cta_of_the_cluster(csize, rng):
    ns = dict(globals())
    exec(_MC, ns)
    kern = cuda.jit(ns["kernel"])
    x = rng.integers(0, 1 << 15, (64, 64)).astype(np.uint16)
    tm = TensorMap(cuda.to_device(x), (16, 64), swizzle="128B", dtype="bf16")
    raw = cuda.to_device(np.zeros((2 * csize, tm.box_bytes), np.uint8))
    launch(kern, 2 * csize, 128, (tm.address, tm.box_bytes, raw), smem=dynamic_smem_bytes(tm.box_bytes + 1024),
           cluster=csize)
    want = box_copy_model(x, (16, 64), (8, 0), "128B")
    for b in range(2 * csize):
        np.testing.assert_array_equal(raw.copy_to_host()[b], want)


def test_tma_wgmma_example():
    from tests.sim_vs_gpu import load_example

    assert load_example("tma_wgmma_tile").main(time_it=True) == 0.0
