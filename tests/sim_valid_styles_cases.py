"""Correct kernels in less common but valid styles, which the simulator must run exactly in every
thread order (run by tests/test_sim.py in a child process with NUMBA_ENABLE_CUDASIM=1; also by
hand: NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/sim_valid_styles_cases.py). Each guards the
checks against false positives (a hazard reported on a correct kernel is a wrong answer); where
a style has a broken twin (a turn not taken, a setmaxnreg pair with no barrier between), the twin
is reported.

* a ring of stages whose producer takes its first pass over the "empty" barriers with the
  initial parity-1 trick (PTX ISA, mbarrier.test_wait: the phase before phase 0 counts as
  complete), consumers waiting by ``mbarrier_wait_parity``, by ``try_wait`` loops, or through one
  elected thread that a named barrier then releases (the elected thread fixed or rotating);
* one barrier that two consumer groups take in turns (ping-pong), the order given by named
  barriers, the last turn taken;
* a cluster whose consumers release the producer CTA's "empty" barriers remotely
  (``mbarrier_arrive_cluster``) after stores into their shared memory;
* stages completed by TMA transaction bytes only (``arrive_expect_tx``, or a standalone
  ``expect_tx`` before the arrival), other threads waiting;
* state tokens tested in ``try_wait`` / ``test_wait`` loops, and a late warp picking the
  barrier up at a later phase after a named barrier with the warp that waited for every phase;
* ``setmaxnreg``: once per warpgroup, and ``dec`` then ``inc`` with a named barrier, a
  ``syncthreads`` or an mbarrier between (PTX ISA, setmaxnreg: the warps of the warpgroup
  synchronize explicitly between two);
* threads storing one value to a flag, lanes storing distinct bytes of one word.
"""

import re

import numpy as np
import pytest
from numba import config, cuda

from nbwgmma import sim
from nbwgmma.intrinsics import (
    cluster_ctarank, cluster_sync, dynamic_smem_base, fence_mbarrier_init, mapa, mbarrier_arrive,
    mbarrier_arrive_cluster, mbarrier_arrive_expect_tx, mbarrier_expect_tx, mbarrier_init, mbarrier_test_wait,
    mbarrier_try_wait, mbarrier_try_wait_parity, mbarrier_wait_parity, named_barrier_arrive, named_barrier_sync,
    setmaxnreg_dec, setmaxnreg_inc, smem_addr, st_shared_cluster_u32, st_shared_f32, tma_load_2d,
)
from nbwgmma.launch import dynamic_smem_bytes, launch
from nbwgmma.tma import TensorMap

assert config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1"

SCHEDULES = ["fifo", "random:1", "random:2", "random:3"]
K = 6  # k-blocks (or tiles) of the rings below, over 2 stages


@pytest.fixture(params=SCHEDULES)
def schedule(request, monkeypatch):
    monkeypatch.setenv("NBWGMMA_SIM_SCHEDULE", request.param)
    return request.param


def _ring_want(n):
    return np.array([sum(k * 1000 + c for k in range(K)) for c in range(n)], np.int64)


# --- a ring of two stages: the parity-1 trick, waits by parity, try_wait or an elected thread ---

def _ring(how):
    """Thread 0 fills two stages K times; threads 32-159 each read one value of every stage.
    ``how``: "wait" (every consumer waits by parity), "spin" (a try_wait loop), "elected" (thread
    32 waits, a named barrier releases the others, thread 32 releases the stage after a second
    one), "rotating" (the elected waiter a different warp each k-block)."""
    elected = how in ("elected", "rotating")

    @cuda.jit
    def kernel(out):
        data = cuda.shared.array((2, 128), np.int32)
        bars = cuda.shared.array(4, np.uint64)  # full[0], full[1], empty[0], empty[1]
        tid = cuda.threadIdx.x
        full, empty = smem_addr(bars), smem_addr(bars) + 16
        if tid == 0:
            for s in range(2):
                mbarrier_init(full + 8 * s, 1)
                mbarrier_init(empty + 8 * s, 1 if elected else 128)
            fence_mbarrier_init()
        cuda.syncthreads()
        if tid < 32:
            if tid == 0:
                for k in range(K):
                    s, ph = k % 2, (k // 2) & 1
                    mbarrier_wait_parity(empty + 8 * s, ph ^ 1)  # the first pass: the phase "before 0"
                    for i in range(128):
                        data[s, i] = k * 1000 + i
                    mbarrier_arrive(full + 8 * s)
            return
        c = tid - 32
        acc = 0
        for k in range(K):
            s, ph = k % 2, (k // 2) & 1
            if elected:
                waiter = 32 * (k % 4) if how == "rotating" else 0
                if c == waiter:
                    mbarrier_wait_parity(full + 8 * s, ph)
                named_barrier_sync(1, 128)
            elif how == "spin":
                while not mbarrier_try_wait_parity(full + 8 * s, ph):
                    pass
            else:
                mbarrier_wait_parity(full + 8 * s, ph)
            acc += data[s, c]
            if elected:
                named_barrier_sync(1, 128)
                if c == 0:
                    mbarrier_arrive(empty + 8 * s)
            else:
                mbarrier_arrive(empty + 8 * s)
        out[c] = acc
    return kernel


@pytest.mark.parametrize("how", ["wait", "spin", "elected", "rotating"])
def test_a_ring_with_the_parity_trick_runs_exactly(how, schedule):
    out = cuda.to_device(np.zeros(128, np.int64))
    launch(_ring(how), 1, 160, (out,))
    np.testing.assert_array_equal(out.copy_to_host(), _ring_want(128))


# --- one barrier taken in turns by two consumer groups (ping-pong) ---------------------------

def _ping_pong(turns):
    """Thread 0 fills one stage per tile, K tiles; threads 32-159 (group 0) take the even tiles,
    threads 160-287 (group 1) the odd ones, each waiting for its turn (named barrier 2 + g) and
    passing it on where the other group takes a tile after it. ``turns`` false: no turns, group
    1 waiting for parity 1 while tile 0 may not be complete yet (a wrong answer on the GPU)."""
    @cuda.jit
    def kernel(out):
        data = cuda.shared.array(128, np.int32)
        bars = cuda.shared.array(2, np.uint64)  # full, empty
        tid = cuda.threadIdx.x
        full, empty = smem_addr(bars), smem_addr(bars) + 8
        if tid == 0:
            mbarrier_init(full, 1)
            mbarrier_init(empty, 128)
            fence_mbarrier_init()
        cuda.syncthreads()
        if tid < 32:
            if tid == 0:
                for t in range(K):
                    mbarrier_wait_parity(empty, (t & 1) ^ 1)
                    for i in range(128):
                        data[i] = t * 1000 + i
                    mbarrier_arrive(full)
            return
        g, c = (tid - 32) // 128, (tid - 32) % 128
        acc = 0
        for t in range(g, K, 2):
            if turns and t > 0:
                named_barrier_sync(2 + g, 256)  # my turn: the other group is done with tile t - 1
            mbarrier_wait_parity(full, t & 1)
            acc += data[c]
            mbarrier_arrive(empty)
            if turns and t + 1 < K:
                named_barrier_arrive(3 - g, 256)  # the other group's turn (the last tile passes none)
        out[g, c] = acc
    return kernel


def test_a_barrier_taken_in_turns_runs_exactly(schedule):
    out = cuda.to_device(np.zeros((2, 128), np.int64))
    launch(_ping_pong(True), 1, 288, (out,))
    want = [[sum(t * 1000 + c for t in range(g, K, 2)) for c in range(128)] for g in range(2)]
    np.testing.assert_array_equal(out.copy_to_host(), want)


def test_a_barrier_shared_without_turns_is_reported():
    with pytest.raises(sim.SimHazard):
        for s in SCHEDULES:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("NBWGMMA_SIM_SCHEDULE", s)
                launch(_ping_pong(False), 1, 288, (cuda.to_device(np.zeros((2, 128), np.int64)),))


# --- a cluster: stores into the peers, the empty barrier released remotely ---------------------

@cuda.jit
def _cluster_ring(out):
    data = cuda.shared.array((2, 32), np.uint32)
    bars = cuda.shared.array(4, np.uint64)  # full[0], full[1], empty[0], empty[1] (rank 0's are the producer's)
    tid = cuda.threadIdx.x
    r = cluster_ctarank()
    full, empty = smem_addr(bars), smem_addr(bars) + 16
    if tid == 0:
        for s in range(2):
            mbarrier_init(full + 8 * s, 1)
            mbarrier_init(empty + 8 * s, 64)  # 32 consumers in each of the 2 CTAs
        fence_mbarrier_init()
    cluster_sync()
    if tid == 0 and r == 0:
        for k in range(K):
            s, ph = k % 2, (k // 2) & 1
            mbarrier_wait_parity(empty + 8 * s, ph ^ 1)
            for peer in range(2):
                for i in range(32):
                    st_shared_cluster_u32(mapa(smem_addr(data[s, i:]), peer), k * 1000 + i + 100 * peer)
                mbarrier_arrive_cluster(full + 8 * s, peer)
    if tid >= 32:
        c = tid - 32
        acc = 0
        for k in range(K):
            s, ph = k % 2, (k // 2) & 1
            mbarrier_wait_parity(full + 8 * s, ph)
            acc += data[s, c]
            mbarrier_arrive_cluster(empty + 8 * s, 0)
        out[r, c] = acc
    cluster_sync()


def test_a_cluster_ring_released_remotely_runs_exactly(schedule):
    out = cuda.to_device(np.zeros((2, 32), np.int64))
    launch(_cluster_ring, 2, 64, (out,), cluster=2)
    want = [[sum(k * 1000 + c + 100 * r for k in range(K)) for c in range(32)] for r in range(2)]
    np.testing.assert_array_equal(out.copy_to_host(), want)


# --- stages completed by TMA transaction bytes ---------------------------------------------

def _tma_ring(standalone):
    """Thread 0 loads K boxes of 16 x 64 u16 through two stages, arming each with
    ``arrive_expect_tx`` (or ``standalone``: ``expect_tx``, the copy, then ``arrive``); threads
    32-95 wait (a try_wait loop) and sum a column each."""
    @cuda.jit
    def kernel(tmap, out):
        dyn = cuda.shared.array(0, np.uint16)
        bars = cuda.shared.array(4, np.uint64)
        base = dynamic_smem_base(dyn, 1024)
        off = (base - smem_addr(dyn)) // 2
        tid = cuda.threadIdx.x
        full, empty = smem_addr(bars), smem_addr(bars) + 16
        if tid == 0:
            for s in range(2):
                mbarrier_init(full + 8 * s, 1)
                mbarrier_init(empty + 8 * s, 64)
            fence_mbarrier_init()
        cuda.syncthreads()
        if tid == 0:
            for k in range(K):
                s, ph = k % 2, (k // 2) & 1
                mbarrier_wait_parity(empty + 8 * s, ph ^ 1)
                if standalone:
                    mbarrier_expect_tx(full + 8 * s, 2048)
                    tma_load_2d(base + 2048 * s, tmap, full + 8 * s, 0, 16 * k)
                    mbarrier_arrive(full + 8 * s)
                else:
                    mbarrier_arrive_expect_tx(full + 8 * s, 2048)
                    tma_load_2d(base + 2048 * s, tmap, full + 8 * s, 0, 16 * k)
        if tid >= 32:
            c = tid - 32
            acc = 0
            for k in range(K):
                s, ph = k % 2, (k // 2) & 1
                while not mbarrier_try_wait_parity(full + 8 * s, ph):
                    pass
                for row in range(16):
                    acc += dyn[off + 1024 * s + 64 * row + c]
                mbarrier_arrive(empty + 8 * s)
            out[c] = acc
    return kernel


@pytest.mark.parametrize("standalone", [False, True])
def test_stages_completed_by_tma_bytes_run_exactly(standalone, schedule):
    x = (np.arange(16 * K * 64) % 997).astype(np.uint16).reshape(16 * K, 64)
    tm = TensorMap(cuda.to_device(x), (16, 64), swizzle="none")
    out = cuda.to_device(np.zeros(64, np.int64))
    launch(_tma_ring(standalone), 1, 96, (tm.address, out), smem=dynamic_smem_bytes(4096))
    np.testing.assert_array_equal(out.copy_to_host(), x.astype(np.int64).sum(axis=0))


# --- state tokens, and a warp that picks a barrier up at a later phase -------------------------

@cuda.jit
def _tokens(out):
    bars = cuda.shared.array(2, np.uint64)
    vals = cuda.shared.array(64, np.int32)
    tid = cuda.threadIdx.x
    bar, late = smem_addr(bars), smem_addr(bars) + 8
    if tid == 0:
        mbarrier_init(bar, 64)
        mbarrier_init(late, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    acc = 0
    for k in range(K):  # every thread arrives and tests its own token, in two styles
        vals[tid] = k * 100 + tid
        tok = mbarrier_arrive(bar)
        if tid % 2:
            while not mbarrier_try_wait(bar, tok):
                pass
        else:
            while not mbarrier_test_wait(bar, tok):
                pass
        acc += vals[(tid + 1) % 64]
        named_barrier_sync(1, 64)  # (the next round's stores after every read)
    # the "late" barrier: thread 0 completes a phase per round; warp 0 waits for each, warp 1
    # only for the last, after a named barrier with warp 0 (which saw the phase before it)
    for k in range(K):
        if tid == 0:
            vals[0] = k
            mbarrier_arrive(late)
        if tid < 32:
            mbarrier_wait_parity(late, k & 1)
        if k < K - 1:
            named_barrier_sync(2, 64)
    if tid >= 32:
        mbarrier_wait_parity(late, (K - 1) & 1)
    out[tid] = acc + vals[0]


def test_state_tokens_and_a_barrier_picked_up_late_run_exactly(schedule):
    out = cuda.to_device(np.zeros(64, np.int64))
    launch(_tokens, 1, 64, (out,))
    want = [sum(k * 100 + (t + 1) % 64 for k in range(K)) + K - 1 for t in range(64)]
    np.testing.assert_array_equal(out.copy_to_host(), want)


# --- setmaxnreg --------------------------------------------------------------------------------

def _regs(between):
    """Warpgroup 0 lowers its registers to 40 and later raises them to 56, with ``between`` (a
    named barrier of its 128 threads, a syncthreads, an mbarrier every thread arrives on and
    waits for, or nothing: the broken twin) between; warpgroups 1 and 2 raise theirs once."""
    @cuda.jit(launch_bounds=(384, 1))
    def kernel(out):
        bars = cuda.shared.array(1, np.uint64)
        tid = cuda.threadIdx.x
        bar = smem_addr(bars)
        if tid == 0:
            mbarrier_init(bar, 128)
            fence_mbarrier_init()
        cuda.syncthreads()
        if tid < 128:
            setmaxnreg_dec(40)
        else:
            setmaxnreg_inc(200)
        if between == "syncthreads":
            cuda.syncthreads()
        if tid < 128:
            if between == "named":
                named_barrier_sync(1, 128)
            elif between == "mbarrier":
                mbarrier_arrive(bar)
                mbarrier_wait_parity(bar, 0)
            setmaxnreg_inc(56)
        out[tid] = tid
    return kernel


@pytest.mark.parametrize("between", ["named", "syncthreads", "mbarrier"])
def test_setmaxnreg_pairs_with_a_barrier_between_run(between, schedule):
    out = cuda.to_device(np.zeros(384, np.int32))
    launch(_regs(between), 1, 384, (out,))
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(384))


def test_a_setmaxnreg_pair_with_nothing_between_is_reported():
    with pytest.raises(sim.SimHazard, match=r"setmaxnreg_inc\(56\) in warpgroup 0 with nothing ordering after it "
                                            r"the warpgroup's previous setmaxnreg"):
        launch(_regs("none"), 1, 384, (cuda.to_device(np.zeros(384, np.int32)),))


# --- stores that leave the bytes as they are, lanes storing distinct bytes ------------------

@cuda.jit
def _flags(out):
    flag = cuda.shared.array(2, np.int32)
    word = cuda.shared.array(32, np.uint8)
    f = cuda.shared.array(1, np.float32)
    tid = cuda.threadIdx.x
    if tid == 0:
        flag[0] = 0
    cuda.syncthreads()
    flag[0] = 1  # every thread of the block, one value
    st_shared_f32(smem_addr(f), 2.5)
    word[tid % 32] = tid % 32 + 1  # warp 0's lanes: a byte each (warp 1 stores the same bytes)
    cuda.syncthreads()
    out[tid] = flag[0] + f[0] + word[(tid + 3) % 32]


def test_one_value_stored_by_many_and_distinct_bytes_run_exactly(schedule):
    out = cuda.to_device(np.zeros(64, np.float64))
    launch(_flags, 1, 64, (out,))
    np.testing.assert_array_equal(out.copy_to_host(), [1 + 2.5 + (t + 3) % 32 + 1 for t in range(64)])


# --- a barrier a thread completes alone, phase after phase, then waits for the last ------------

def _self_signal(alone):
    """Thread 0 (``alone``; else thread 32) arrives K times on a barrier of count 1, each arrival
    completing a phase; then thread 0 waits for the last phase's parity, reading what the last
    arrival published. Alone, its own arrivals completed every earlier phase; thread 32's
    arrivals are unordered with thread 0 (the broken twin): the barrier may be in any phase at
    the wait, which passes at once on one of the same parity."""
    @cuda.jit
    def kernel(out):
        bars = cuda.shared.array(1, np.uint64)
        vals = cuda.shared.array(1, np.int32)
        bar = smem_addr(bars)
        tid = cuda.threadIdx.x
        if tid == 0:
            mbarrier_init(bar, 1)
            fence_mbarrier_init()
        cuda.syncthreads()
        if tid == (0 if alone else 32):
            for k in range(K):
                vals[0] = k
                mbarrier_arrive(bar)
        if tid == 0:
            mbarrier_wait_parity(bar, (K - 1) & 1)
            out[0] = vals[0]
    return kernel


def test_a_barrier_a_thread_completes_alone_then_waits_for_runs(schedule):
    out = cuda.to_device(np.zeros(1, np.int64))
    launch(_self_signal(True), 1, 64, (out,))
    assert out.copy_to_host()[0] == K - 1


def test_a_wait_for_the_last_of_another_thread_s_phases_is_reported():
    """(In the first-come order thread 0 waits first and reads before thread 32's stores: that
    store over its load is what is reported; in others, the parity wait.)"""
    with pytest.raises(sim.SimHazard, match=r"sim_valid_styles_cases.py:\d+"):
        for s in SCHEDULES:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("NBWGMMA_SIM_SCHEDULE", s)
                launch(_self_signal(False), 1, 64, (cuda.to_device(np.zeros(1, np.int64)),))


# --- a barrier's phases completed by two threads, the wait ordered by counting -----------------

def _counted(mine):
    """Thread 0 makes ``mine`` arrivals on a barrier of count 1 and thread 32 the other K - mine,
    unordered with it; then thread 0 waits for phase K - 1's parity. With mine = K - 1 the
    arrivals ordered before the wait complete phase K - 2 in any order of the threads, so the
    wait tells phase K - 1 from K - 3: correct, though no wait or barrier of thread 0 saw phase
    K - 2. With mine = K - 2 the barrier may still be in phase K - 2 at the wait (thread 32 not
    yet arrived), and the wait passes at once: reported in every order."""
    @cuda.jit
    def kernel(out):
        bars = cuda.shared.array(1, np.uint64)
        bar = smem_addr(bars)
        tid = cuda.threadIdx.x
        if tid == 0:
            mbarrier_init(bar, 1)
            fence_mbarrier_init()
        cuda.syncthreads()
        if tid == 32:
            for k in range(K - mine):
                mbarrier_arrive(bar)
        if tid == 0:
            for k in range(mine):
                mbarrier_arrive(bar)
            mbarrier_wait_parity(bar, (K - 1) & 1)
            out[0] = 1
    return kernel


def test_a_wait_ordered_by_counting_arrivals_runs(schedule):
    out = cuda.to_device(np.zeros(1, np.int64))
    launch(_counted(K - 1), 1, 64, (out,))
    assert out.copy_to_host()[0] == 1


def test_a_wait_the_counted_arrivals_do_not_order_is_reported():
    """(In the first-come order thread 0's arrivals and wait all come before thread 32's: the wait
    passes on phase K - 3, ordered by thread 0's own arrivals, and nothing reads what K - 1 would
    publish; where thread 32 goes first it passes on phase K - 1, which the count does not order.)"""
    reported = 0
    for s in SCHEDULES:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("NBWGMMA_SIM_SCHEDULE", s)
            try:
                launch(_counted(K - 2), 1, 64, (cuda.to_device(np.zeros(1, np.int64)),))
            except sim.SimHazard as e:
                assert re.search(r"sim_valid_styles_cases.py:\d+: waits on .* nothing orders the completion of "
                                 r"phase", str(e)), e
                reported += 1
    assert reported >= 1
