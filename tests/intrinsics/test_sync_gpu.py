"""GPU tests of the synchronization, control and address intrinsics (H100)."""

import numpy as np
import pytest
from numba import cuda, types

from nbwgmma.intrinsics import *  # noqa: F401,F403
from nbwgmma.launch import LaunchError, dynamic_smem_bytes, launch
from nbwgmma.report import compile_report

pytestmark = pytest.mark.gpu

ROUNDS = 9  # an odd count so the last phase differs from the first


@cuda.jit
def _producer_consumer(values, out, waits):
    """Warp 0 produces into a one-slot buffer; warp 1 consumes; parity flips every round."""
    slot = cuda.shared.array(1, np.int32)
    bars = cuda.shared.array(2, np.uint64)
    full = smem_addr(bars)
    empty = full + 8
    tid = cuda.threadIdx.x
    lane = tid % 32
    if tid == 0:
        mbarrier_init(full, 1)
        mbarrier_init(empty, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    if tid < 32:
        for r in range(values.size):
            # A fresh barrier's "previous phase" (parity 1) counts as complete.
            mbarrier_wait_parity(empty, (r & 1) ^ 1)
            if lane == 0:
                slot[0] = values[r]
                mbarrier_arrive(full)
    else:
        for r in range(values.size):
            st_ok = mbarrier_try_wait_parity(full, r & 1)
            while not st_ok:
                st_ok = mbarrier_try_wait_parity(full, r & 1)
            v = slot[0]
            cuda.syncwarp()
            if lane == 0:
                out[r] = v
                state = mbarrier_arrive(empty)
                # The phase just arrived on completes at once (count 1).
                waits[r] = 1 if mbarrier_test_wait(empty, state) else 0


def test_mbarrier_producer_consumer_phase_flips(rng):
    values = rng.integers(1, 1 << 30, ROUNDS).astype(np.int32)
    out = np.full(ROUNDS, -1, np.int32)
    waits = np.full(ROUNDS, -1, np.int32)
    d_out, d_waits = cuda.to_device(out), cuda.to_device(waits)
    _producer_consumer[1, 64](cuda.to_device(values), d_out, d_waits)
    np.testing.assert_array_equal(d_out.copy_to_host(), values)
    np.testing.assert_array_equal(d_waits.copy_to_host(), np.ones(ROUNDS, np.int32))


@cuda.jit
def _expect_tx(out):
    """expect_tx bytes are retired by complete_tx; here by arrive.expect_tx on a zero count."""
    bars = cuda.shared.array(1, np.uint64)
    bar = smem_addr(bars)
    if cuda.threadIdx.x == 0:
        mbarrier_init(bar, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        state = mbarrier_arrive(bar)
        out[0] = 1 if mbarrier_test_wait(bar, state) else 0
        out[1] = 1 if mbarrier_test_wait_parity(bar, 0) else 0
        out[2] = 1 if mbarrier_test_wait_parity(bar, 1) else 0
        mbarrier_inval(bar)


def test_mbarrier_test_wait_semantics():
    out = cuda.to_device(np.full(3, -1, np.int32))
    _expect_tx[1, 32](out)
    # Phase 0 completed, so the barrier is now in phase 1: parity 0 names the
    # completed phase, parity 1 the current, incomplete one.
    np.testing.assert_array_equal(out.copy_to_host(), [1, 1, 0])


@cuda.jit
def _named_barriers(src, out):
    buf = cuda.shared.array(128, np.float32)
    tid = cuda.threadIdx.x
    wg = tid // 128
    i = tid % 128
    if wg == 0:
        buf[i] = src[i] * 2.0
        named_barrier_arrive(1, 256)
    else:
        named_barrier_sync(1, 256)
        out[i] = buf[127 - i]


def test_named_barriers_between_warpgroups(rng):
    src = rng.standard_normal(128).astype(np.float32)
    out = cuda.to_device(np.full(128, np.nan, np.float32))
    _named_barriers[1, 256](cuda.to_device(src), out)
    np.testing.assert_array_equal(out.copy_to_host(), (src * 2)[::-1])


@cuda.jit
def _elect(counts, lanes):
    w = cuda.threadIdx.x // 32
    if elect_one_sync():
        cuda.atomic.add(counts, w, 1)
        lanes[w] = cuda.threadIdx.x % 32


def test_elect_sync_picks_one_lane():
    counts = cuda.to_device(np.zeros(8, np.int32))
    lanes = cuda.to_device(np.full(8, -1, np.int32))
    _elect[1, 256](counts, lanes)
    np.testing.assert_array_equal(counts.copy_to_host(), np.ones(8, np.int32))
    assert ((lanes.copy_to_host() >= 0) & (lanes.copy_to_host() < 32)).all()


@cuda.jit(launch_bounds=(384, 1))
def _setmaxnreg(x, out):
    tid = cuda.threadIdx.x
    wg = tid // 128
    if wg == 0:
        setmaxnreg_dec(40)
        out[tid] = x[tid] + 1.0
    else:
        setmaxnreg_inc(232)
        out[tid] = x[tid] * 3.0


def test_setmaxnreg_three_warpgroups(rng):
    sig = (types.float32[:], types.float32[:])
    rep = compile_report(_setmaxnreg, sig)
    assert not rep.setmaxnreg_ignored, rep.warnings
    assert rep.sass.get("USETMAXREG", 0) == 2
    x = rng.standard_normal(384).astype(np.float32)
    out = cuda.to_device(np.full(384, np.nan, np.float32))
    _setmaxnreg[1, 384](cuda.to_device(x), out)
    want = np.concatenate([x[:128] + 1, x[128:] * 3])
    np.testing.assert_array_equal(out.copy_to_host(), want)


SMEM_PAYLOAD = 200 * 1024


@cuda.jit
def _big_smem(n_words, base_out, out):
    dyn = cuda.shared.array(0, np.uint32)
    base = dynamic_smem_base(dyn, 1024)
    base_out[0] = base
    # Word index of the aligned base inside `dyn`.
    off = (base - smem_addr(dyn)) // 4
    tid = cuda.threadIdx.x
    for i in range(tid, n_words, cuda.blockDim.x):
        dyn[off + i] = i * 2654435761
    cuda.syncthreads()
    acc = np.uint32(0)
    for i in range(tid, n_words, cuda.blockDim.x):
        acc ^= dyn[off + n_words - 1 - i]
    out[tid] = acc


def test_launch_200k_dynamic_shared_memory():
    n_words = SMEM_PAYLOAD // 4
    base_out = cuda.to_device(np.zeros(1, np.uint32))
    out = cuda.to_device(np.zeros(256, np.uint32))
    launch(_big_smem, 1, 256, (n_words, base_out, out), smem=dynamic_smem_bytes(SMEM_PAYLOAD, 1024))
    cuda.synchronize()
    assert int(base_out.copy_to_host()[0]) % 1024 == 0
    words = (np.arange(n_words, dtype=np.uint64) * 2654435761) % (1 << 32)
    words = words.astype(np.uint32)[::-1]
    want = np.array([np.bitwise_xor.reduce(words[t::256]) for t in range(256)], np.uint32)
    np.testing.assert_array_equal(out.copy_to_host(), want)


def test_launch_rejects_requests_beyond_the_device():
    out = cuda.to_device(np.zeros(256, np.uint32))
    base_out = cuda.to_device(np.zeros(1, np.uint32))
    with pytest.raises(LaunchError, match="opt-in limit"):
        launch(_big_smem, 1, 256, (16, base_out, out), smem=300 * 1024)
    with pytest.raises(LaunchError, match="exceeds the device limit"):
        launch(_big_smem, 1, 2048, (16, base_out, out))
    with pytest.raises(LaunchError, match="portable limit"):
        launch(_big_smem, 16, 32, (16, base_out, out), cluster=16)
    with pytest.raises(LaunchError, match="not a multiple"):
        launch(_big_smem, 3, 32, (16, base_out, out), cluster=2)


@cuda.jit
def _cluster_exchange(out):
    box = cuda.shared.array(1, np.uint32)
    a = smem_addr(box)
    rank = cluster_ctarank()
    box[0] = 0
    cluster_sync()
    if cuda.threadIdx.x == 0:
        peer = rank ^ 1
        st_shared_cluster_u32(mapa(a, peer), 1000 + rank * 7 + cuda.blockIdx.x)
    cluster_sync()
    if cuda.threadIdx.x == 0:
        out[cuda.blockIdx.x, 0] = box[0]
        out[cuda.blockIdx.x, 1] = rank
        out[cuda.blockIdx.x, 2] = cluster_nctarank()
        out[cuda.blockIdx.x, 3] = cluster_id()


def test_two_cta_cluster_mapa_and_cluster_barrier():
    nblocks = 8
    out = cuda.to_device(np.zeros((nblocks, 4), np.uint32))
    launch(_cluster_exchange, nblocks, 64, (out,), cluster=2)
    got = out.copy_to_host()
    ranks = np.arange(nblocks) % 2
    np.testing.assert_array_equal(got[:, 1], ranks)
    np.testing.assert_array_equal(got[:, 2], 2)
    np.testing.assert_array_equal(got[:, 3], np.arange(nblocks) // 2)
    peer_block = np.arange(nblocks) ^ 1
    np.testing.assert_array_equal(got[:, 0], 1000 + (ranks ^ 1) * 7 + peer_block)


@cuda.jit
def _remote_arrivals(done, timeout_ns):
    """Lane 0 of every warp of every CTA arrives once on the barrier of every CTA of the cluster."""
    bars = cuda.shared.array(1, np.uint64)
    bar = smem_addr(bars)
    n = cluster_nctarank()
    nwarps = cuda.blockDim.x // 32
    if cuda.threadIdx.x == 0:
        mbarrier_init(bar, n * nwarps)
        fence_mbarrier_init()
    cluster_sync()
    if cuda.threadIdx.x % 32 == 0:
        for r in range(n):
            mbarrier_arrive_cluster(bar, r)
    ok = mbarrier_wait_parity_timeout(bar, 0, timeout_ns, "cluster")
    if cuda.threadIdx.x == 0:
        done[cuda.blockIdx.x] = 1 if ok else 0
    cluster_sync()


@pytest.mark.parametrize("csize", [2, 4])
def test_remote_mbarrier_arrivals_complete_every_ctas_phase(csize):
    done = cuda.to_device(np.full(2 * csize, 7, np.int32))
    launch(_remote_arrivals, 2 * csize, 128, (done, np.uint64(2_000_000_000)), cluster=csize)
    np.testing.assert_array_equal(done.copy_to_host(), 1)
