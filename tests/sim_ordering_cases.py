"""The simulator's memory ordering between threads: what orders a write before an asynchronous
read, and what does not (run by tests/test_sim.py in a child process with
NUMBA_ENABLE_CUDASIM=1; also by hand: NUMBA_ENABLE_CUDASIM=1 python -m pytest
tests/sim_ordering_cases.py).

Each mistake has a kernel the simulator must report, whatever order the threads run in, and a
correct twin that must give the exact answer:

* the wgmma instructions are no barrier between a warpgroup's warps (PTX ISA, wgmma.mma_async:
  ``.sync`` waits for the threads of the warp): a stage that every thread reads after its
  issue needs every thread's release (what a thread did before its issue, its wait passes
  on); stores of other warps that a wgmma reads, with no barrier or with the proxy fence after
  it, are tests/sim_hazard_cases.py's tile cases;
* ``fence.proxy.async`` must come between a thread's stores and the release the async reader
  acquires, not after it;
* a named barrier counts whole warps (PTX ISA, bar/barrier: a warp arrives once its threads
  that have not exited have);
* a state token may be tested only in the phase after its arrival (mbarrier.test_wait);
* barrier 0 is the one ``syncthreads`` uses: a named barrier 0 of the whole block is the same
  barrier, one of fewer threads beside it is a barrier with two counts;
* ``setmaxnreg``: ``.inc`` to at least, ``.dec`` to at most what the warpgroup owns; a thread
  arrives at the cluster barrier once before it waits; a shuffle from a lane that exited reads
  an undefined value (the poison, here).
"""

import os

import numpy as np
import pytest
from numba import config, cuda

from nbwgmma import sim
from nbwgmma.intrinsics import (
    acc_store, acc_zeros, bulk_commit_group, bulk_wait_group, cluster_arrive, cluster_wait, dynamic_smem_base,
    fence_mbarrier_init, fence_proxy_async_shared, mbarrier_arrive, mbarrier_init, mbarrier_wait, mbarrier_wait_parity,
    named_barrier_sync, setmaxnreg_dec, setmaxnreg_inc, smem_addr, tma_store_2d, wgmma_commit_group, wgmma_fence,
    wgmma_mma_async, wgmma_wait_group,
)
from nbwgmma.kernels.wgmma_tile import TileProblem
from nbwgmma.launch import dynamic_smem_bytes, launch
from nbwgmma.tma import TensorMap

assert config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1"

KIND = "f32.bf16.bf16"
SCHEDULES = ["fifo", "random:1", "random:2"]


@pytest.fixture(params=SCHEDULES)
def schedule(request, monkeypatch):
    monkeypatch.setenv("NBWGMMA_SIM_SCHEDULE", request.param)
    return request.param


# --- a TMA store of a block the CTA's threads wrote ----------------------------------------

def _block_store(fence_late, rounds=1):
    """The CTA's 64 threads write a 64 x 64 block, then thread 0 stores it by TMA; ``rounds``
    times (each round's writes fenced once more: the check takes each write's first fence after
    it, not the thread's latest)."""
    @cuda.jit
    def kernel(tmap, vals):
        dyn = cuda.shared.array(0, np.uint16)
        base = dynamic_smem_base(dyn, 1024)
        off = (base - smem_addr(dyn)) // 2
        tid = cuda.threadIdx.x
        for r in range(rounds):
            for i in range(tid, 64 * 64, 64):
                dyn[off + i] = vals[r, i]
            if not fence_late:
                fence_proxy_async_shared()
            cuda.syncthreads()
            if fence_late:
                fence_proxy_async_shared()
            if tid == 0:
                tma_store_2d(base, tmap, 64 * r, 0)
                bulk_commit_group()
                bulk_wait_group(0)
            fence_proxy_async_shared()  # (a later fence of the same thread, ordered after nothing)
            cuda.syncthreads()
    return kernel


def _run_block(fence_late, rounds=1):
    vals = np.arange(rounds * 64 * 64, dtype=np.uint16).reshape(rounds, 64 * 64) * 3 + 1
    y = cuda.to_device(np.zeros((64, 64 * rounds), np.uint16))
    launch(_block_store(fence_late, rounds), 1, 64, (TensorMap(y, (64, 64), dtype="u16", swizzle="none").address,
                                                     cuda.to_device(vals)), smem=dynamic_smem_bytes(64 * 64 * 2))
    return y.copy_to_host(), np.concatenate([v.reshape(64, 64) for v in vals], axis=1)


def test_a_block_fenced_before_the_barrier_stores_exactly_round_after_round(schedule):
    got, ref = _run_block(False, rounds=3)
    np.testing.assert_array_equal(got, ref)


def test_a_block_fenced_after_the_barrier_is_a_hazard(schedule):
    """(Whether the writer has fenced yet when thread 0 stores depends on the order the threads
    run in; either way it is reported.)"""
    with pytest.raises(sim.SimHazard, match=r"a TMA store at .*sim_ordering_cases.py:\d+\) reads shared memory at "
                                            r"0x[0-9a-f]+ through the async proxy.*(but nothing orders that fence "
                                            r"before this read|issued no fence_proxy_async after them)"):
        _run_block(True)


# --- a stage released after its wgmma (the wgmma's own ordering, other warps' stores with no
# barrier and a proxy fence after the barrier, is tested on tests/sim_hazard_cases.py's tile) --

def _problem():
    rng = np.random.default_rng(5)
    return TileProblem(KIND, 8, 2, rng.integers(-4, 5, (64, 32)), rng.integers(-4, 5, (8, 32)), swizzle="none")


def _release_kernel(readers, count):
    """Warpgroup 0 stages the operands, issues its wgmma and waits for it; with ``readers``
    ("before" or "after" its issue) each of its threads loads a byte of the stage itself
    (after: unordered with another thread's release). ``count`` of its threads (1 or 128)
    release the stage on an mbarrier, and thread 128 of warpgroup 1, past that release, writes
    the stage again."""
    @cuda.jit
    def kernel(image, desc_a, desc_b, out, seen):
        dyn = cuda.shared.array(0, np.uint8)
        bars = cuda.shared.array(1, np.uint64)
        base = dynamic_smem_base(dyn, 1024)
        off = base - smem_addr(dyn)
        empty = smem_addr(bars)
        tid = cuda.threadIdx.x
        if tid == 0:
            mbarrier_init(empty, count)
            fence_mbarrier_init()
        cuda.syncthreads()
        if tid < 128:
            for i in range(tid, image.size, 128):
                dyn[off + i] = image[i]
            fence_proxy_async_shared()
            named_barrier_sync(1, 128)
            acc = acc_zeros(KIND, 8)
            if readers == "before":
                seen[tid] = dyn[off + tid]
            wgmma_fence()
            for s in range(2):
                acc = wgmma_mma_async(acc, desc_a[s] + (base >> 4), desc_b[s] + (base >> 4), KIND)
            wgmma_commit_group()
            wgmma_wait_group(0)
            if readers == "after":
                seen[tid] = dyn[off + tid]
            if count > 1 or tid == 0:
                mbarrier_arrive(empty)
            acc_store(acc, KIND, out, tid, 0, 0)
        elif tid == 128:
            mbarrier_wait_parity(empty, 0)
            for i in range(image.size):
                dyn[off + i] = 0
    return kernel


def _run_release(readers, count):
    p = _problem()
    out = cuda.to_device(np.full((64, 8), np.nan, np.float32))
    seen = cuda.to_device(np.zeros(128, np.uint8))
    launch(_release_kernel(readers, count), 1, 256, (cuda.to_device(p.image), cuda.to_device(p.desc_a),
                                                     cuda.to_device(p.desc_b), out, seen),
           smem=dynamic_smem_bytes(p.image.size))
    return out.copy_to_host(), p.reference()


@pytest.mark.parametrize("readers, count", [(None, 1), ("before", 1), ("after", 128)])
def test_a_stage_released_after_its_wgmma_is_rewritten_exactly(schedule, readers, count):
    """One thread's release after wgmma_wait_group frees the wgmma's reads (every thread past
    the wait has seen them complete) and the threads' loads before their issue (a sparse
    wgmma's metadata words); threads that read the stage after it each release it."""
    got, ref = _run_release(readers, count)
    np.testing.assert_array_equal(got, ref.astype(np.float32))


def test_a_stage_every_thread_read_released_by_one_thread_is_a_hazard(schedule):
    with pytest.raises(sim.SimHazard, match=r"thread 128 \(a shared-memory store at .*sim_ordering_cases.py:\d+\) "
                                            r"writes shared memory at 0x[0-9a-f]+ that thread \d+ \(.* at "
                                            r".*sim_ordering_cases.py:\d+\) read, with nothing ordering that read "
                                            r"before this write"):
        _run_release("after", 1)


# --- named barriers count warps ---------------------------------------------------------------

def _named_kernel(elsewhere):
    """Lanes 1-31 of warp 0 return (or, ``elsewhere``, wait at named barrier 2 for warp 1's
    threads, which never come); lane 0 and warp 1 meet at named barrier 7 of 64 threads."""
    @cuda.jit
    def kernel(out):
        tid = cuda.threadIdx.x
        if tid < 32 and tid > 0:
            if elsewhere:
                named_barrier_sync(2, 64)
            return
        out[tid] = 1
        named_barrier_sync(7, 64)
        out[tid] += 1
    return kernel


def test_a_warp_whose_other_threads_exited_arrives_whole_at_a_named_barrier(schedule):
    out = cuda.to_device(np.zeros(64, np.int32))
    launch(_named_kernel(False), 1, 64, (out,))
    got = out.copy_to_host()
    assert got[0] == 2 and np.all(got[32:] == 2) and np.all(got[1:32] == 0)


def test_a_warp_whose_other_threads_are_elsewhere_does_not_arrive():
    out = cuda.to_device(np.zeros(64, np.int32))
    with pytest.raises(sim.SimStopped, match=r"waiting at the named barrier 7 \(32 of 64 threads arrived, in whole "
                                             r"warps; warp 0 has 1 of its threads here, and the GPU counts a warp "
                                             r"only when all its threads that have not exited arrive"):
        launch(_named_kernel(True), 1, 64, (out,))


# --- state tokens -----------------------------------------------------------------------------

def _token_kernel(count):
    @cuda.jit
    def kernel(out):
        bars = cuda.shared.array(1, np.uint64)
        bar = smem_addr(bars)
        tid = cuda.threadIdx.x
        if tid == 0:
            mbarrier_init(bar, count)
            fence_mbarrier_init()
        cuda.syncthreads()
        tok = mbarrier_arrive(bar)
        mbarrier_wait(bar, tok)
        out[tid] = 1
    return kernel


def test_a_state_token_of_the_last_phase_passes():
    out = cuda.to_device(np.zeros(64, np.int32))
    launch(_token_kernel(64), 1, 64, (out,))
    assert np.all(out.copy_to_host() == 1)


def test_a_state_token_two_phases_old_is_a_hazard():
    """A barrier of 32 arrivals that 64 threads arrive on: phases 0 and 1 complete, and a
    thread of phase 0 testing after both would compare parities on the GPU and may wait on."""
    os.environ["NBWGMMA_SIM_SCHEDULE"] = "fifo"
    out = cuda.to_device(np.zeros(64, np.int32))
    try:
        with pytest.raises(sim.SimHazard, match=r"at .*sim_ordering_cases.py:\d+: tests mbarrier at shared address "
                                                r"0x[0-9a-f]+ with the state of phase 0 \(its arrival's token\), but "
                                                r"phases 0-1 have completed: the PTX ISA defines the test only for "
                                                r"the current phase or the one before it"):
            launch(_token_kernel(32), 1, 64, (out,))
    finally:
        os.environ.pop("NBWGMMA_SIM_SCHEDULE", None)


# --- barrier 0, setmaxnreg, the cluster barrier, shuffles -----------------------------------

def _bar0_kernel(count):
    @cuda.jit
    def kernel(out):
        vals = cuda.shared.array(256, np.int32)
        tid = cuda.threadIdx.x
        vals[tid] = tid
        if tid < 128:
            cuda.syncthreads()
        else:
            named_barrier_sync(0, count)
        out[tid] = vals[(tid + 128) % 256]
    return kernel


def test_named_barrier_0_of_the_whole_block_is_syncthreads(schedule):
    out = cuda.to_device(np.zeros(256, np.int32))
    launch(_bar0_kernel(256), 1, 256, (out,))
    np.testing.assert_array_equal(out.copy_to_host(), (np.arange(256) + 128) % 256)


def test_named_barrier_0_of_fewer_threads_beside_syncthreads_is_a_hazard():
    with pytest.raises(sim.SimHazard, match=r"named barrier 0 with 128 threads while threads wait at syncthreads, the "
                                            r"same hardware barrier with all 256: one barrier with two thread counts"):
        launch(_bar0_kernel(128), 1, 256, (cuda.to_device(np.zeros(256, np.int32)),))


def _regs_kernel(inc):
    @cuda.jit(launch_bounds=(384, 1))
    def kernel(out):
        tid = cuda.threadIdx.x
        if tid < 128:
            setmaxnreg_dec(40)
        else:
            setmaxnreg_inc(inc)
        out[tid] = tid
    return kernel


def test_setmaxnreg_within_the_pool_runs():
    out = cuda.to_device(np.zeros(384, np.int32))
    launch(_regs_kernel(232), 1, 384, (out,))
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(384))


def test_setmaxnreg_inc_below_what_a_warpgroup_owns_is_a_hazard():
    with pytest.raises(sim.SimHazard, match=r"setmaxnreg_inc\(160\) in warpgroup [12], which owns 168 registers per "
                                            r"thread: .inc must ask for at least what it owns"):
        launch(_regs_kernel(160), 1, 384, (cuda.to_device(np.zeros(384, np.int32)),))


@cuda.jit
def _arrives_twice(out):
    cluster_arrive()
    cluster_arrive()
    cluster_wait()
    out[cuda.blockIdx.x, cuda.threadIdx.x] = 1


def test_a_second_cluster_arrival_before_the_wait_is_a_hazard():
    with pytest.raises(sim.SimHazard, match=r"at .*sim_ordering_cases.py:\d+: cluster_arrive a second time with no "
                                            r"cluster_wait after its first"):
        launch(_arrives_twice, 2, 32, (cuda.to_device(np.zeros((2, 32), np.int32)),), cluster=(2, 1, 1))


@cuda.jit
def _shuffle_down(out):
    lane = cuda.threadIdx.x
    if lane >= 16:
        return
    out[lane] = cuda.shfl_down_sync(0xFFFFFFFF, np.int32(lane + 100), 8)


def test_a_shuffle_from_a_lane_that_exited_reads_the_poison(schedule):
    out = cuda.to_device(np.zeros(32, np.int32))
    launch(_shuffle_down, 1, 32, (out,))
    got = out.copy_to_host()
    np.testing.assert_array_equal(got[:8], np.arange(8, 16) + 100)  # from lanes 8-15, which run
    assert np.all(got[8:16] == -1)  # from lanes 16-23, which returned: undefined on the GPU
