"""nbwgmma kernels in Numba's CUDA simulator (run by tests/test_sim.py in a child process
with NUMBA_ENABLE_CUDASIM=1; also by hand: NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/sim_cases.py)."""

import contextlib
import pathlib
import re
import time

import numpy as np
import pytest
from numba import config, cuda

from nbwgmma import sim
from nbwgmma.intrinsics import ldmatrix, smem_addr, stmatrix
from nbwgmma.layout.wgmma_model import encode_elements
from nbwgmma.kernels.wgmma_tile import TileProblem, run_tile
from nbwgmma.launch import dynamic_smem_bytes, launch
from nbwgmma.tma import TensorMap

from tests.sim_vs_gpu import load_example, run_library_gemm  # noqa: E402

assert config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1"

@pytest.mark.parametrize("name", ["wgmma_m64n8k16", "wgmma_m64n8k32_swizzle64", "wgmma_rs_ldmatrix",
                                  "wgmma_m64n256k16_swizzle128", "tma_wgmma_tile"])
def test_examples_match_the_reference(name):
    """Each example checks its own D against numpy / the layout model and returns max |error|."""
    assert load_example(name).main() == 0.0


GEMM_EXAMPLES = sorted(p.stem for p in (pathlib.Path(__file__).parent.parent / "examples").glob("gemm_*.py"))


#: GEMM examples whose output is not exact in the simulator, and the error they must stay under:
#: the log-sum-exp goes through exponentials and a logarithm (relative error against float64)
INEXACT = {"gemm_10_lse": 1e-5}


@pytest.mark.parametrize("name", GEMM_EXAMPLES)
def test_gemm_examples_are_exact_in_the_simulator(name):
    """Each GEMM example's simulated run (its kernel on small problems, cut tiles included)
    checks its output against float64 itself and returns max |error|; only their compile reports
    were tests before."""
    err = load_example(name).main()
    if name in INEXACT:
        assert 0 < err < INEXACT[name]
    else:
        assert err == 0.0


@pytest.mark.parametrize("cluster, epilogue", [(1, "direct"), (1, "tma"), (2, "tma")])
def test_library_gemm_small_integers_exact(cluster, epilogue):
    rng = np.random.default_rng(cluster)
    a = rng.integers(-3, 4, (256, 128)).astype(np.float64)
    b = rng.integers(-3, 4, (256, 128)).astype(np.float64)
    got = run_library_gemm(a, b, cluster, epilogue)
    ref = a @ b.T
    assert np.abs(ref).sum() > 0
    np.testing.assert_array_equal(got, ref.astype(np.float32))


@pytest.mark.parametrize("epilogue", ["direct", "tma"])
def test_library_gemm_clusters_sharing_a_exact(epilogue):
    """Clusters of two along N sharing A's 256 rows: three tiles along N (N = 328), a fourth,
    the second cluster's second CTA's, past N (it loads and multicasts its share of A and
    stores nothing)."""
    rng = np.random.default_rng(5)
    a = rng.integers(-3, 4, (256, 128)).astype(np.float64)
    b = rng.integers(-3, 4, (328, 128)).astype(np.float64)
    got = run_library_gemm(a, b, 2, epilogue, bm=256, bn=128, multicast="A")
    ref = a @ b.T
    assert np.abs(ref).sum() > 0
    np.testing.assert_array_equal(got, ref.astype(np.float32))


def test_library_gemm_random_tails_against_float64():
    """Random data, M and N not multiples of the tile (TMA zero fill, clipped stores)."""
    rng = np.random.default_rng(9)
    a = encode_elements(rng.standard_normal((200, 72)), "bf16").view(np.uint16)
    b = encode_elements(rng.standard_normal((136, 72)), "bf16").view(np.uint16)
    to_f = lambda x: (x.astype(np.uint32) << 16).view(np.float32).astype(np.float64)  # noqa: E731
    a, b = to_f(a).reshape(200, 72), to_f(b).reshape(136, 72)
    got = run_library_gemm(a, b, 1, "direct", bm=64, bn=64)
    ref = a @ b.T
    assert np.isfinite(got).all()
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-6


def test_a_wrong_sbo_reads_what_the_descriptor_says():
    """With SBO halved, wgmma reads the wrong rows: the simulator gives the model's wrong
    answer for that descriptor (checked equal to the GPU's on an H100), not the right one."""
    rng = np.random.default_rng(4)
    a = rng.integers(-4, 5, (64, 16)).astype(np.float64)
    b = rng.integers(-4, 5, (8, 16)).astype(np.float64)
    p = TileProblem("f32.bf16.bf16", 8, 1, a, b, swizzle="none")
    p.desc_a = p.desc_a - np.uint64(8 << 32)  # SBO 256 -> 128 bytes
    got = run_tile(p)
    np.testing.assert_array_equal(got, p.reference())
    assert not np.array_equal(got, a @ b.T)


def test_a_wait_that_cannot_finish_stops_with_a_message():
    """Reported the moment every thread waits, not after a deadline."""
    ex = load_example("debug_wait_broken_expect_tx")
    x = cuda.to_device(np.arange(64 * 64, dtype=np.uint16).reshape(64, 64))
    tm = TensorMap(x, (64, 64), dtype="bf16", swizzle="128B")
    out = cuda.to_device(np.zeros(128, np.int32))
    t0 = time.perf_counter()
    with pytest.raises(sim.SimStopped, match=r"simulated wait can never finish .* at .*debug_wait_broken_expect_tx.py:"
                                             r"\d+: mbarrier at shared address 0x[0-9a-f]+, waiting for parity 0"):
        launch(ex.broken_expect_tx, 1, 128, (tm.address, out), smem=dynamic_smem_bytes(ex.BOX))
    assert time.perf_counter() - t0 < 20


@cuda.jit
def _ld_st(src, dst, trans):
    a = cuda.shared.array((16, 16), np.uint16)
    b = cuda.shared.array((16, 16), np.uint16)
    lane = cuda.threadIdx.x
    for i in range(lane, 256, 32):
        a[i // 16, i % 16] = src[i // 16, i % 16]
        b[i // 16, i % 16] = 0
    cuda.syncthreads()
    row, col = lane % 16, 8 * (lane // 16)
    if trans:
        regs = ldmatrix(smem_addr(a) + (row * 16 + col) * 2, 4, 1)
        stmatrix(smem_addr(b) + (row * 16 + col) * 2, regs, 1)
    else:
        regs = ldmatrix(smem_addr(a) + (row * 16 + col) * 2, 4)
        stmatrix(smem_addr(b) + (row * 16 + col) * 2, regs)
    cuda.syncthreads()
    for i in range(lane, 256, 32):
        dst[i // 16, i % 16] = b[i // 16, i % 16]


@pytest.mark.parametrize("trans", [0, 1])
def test_ldmatrix_then_stmatrix_round_trips(trans):
    src = np.arange(256, dtype=np.uint16).reshape(16, 16) * 3 + 1
    dst = cuda.to_device(np.zeros((16, 16), np.uint16))
    launch(_ld_st, 1, 32, (cuda.to_device(src), dst, trans))
    np.testing.assert_array_equal(dst.copy_to_host(), src)


def test_every_intrinsic_has_a_simulator_implementation():
    import nbwgmma.intrinsics as intr

    declared = {n for m in (intr.address, intr.async_copy, intr.control, intr.fence, intr.mbarrier, intr.tma, intr.matrix,
                                 intr.wgmma)
                for n in m.__all__ if hasattr(getattr(m, n), "params")}
    assert declared and declared <= set(sim.IMPLS), sorted(declared - set(sim.IMPLS))


def test_setmaxnreg_validates_its_argument():
    from nbwgmma.intrinsics import setmaxnreg_inc
    from nbwgmma.intrinsics.errors import NbwgmmaTypingError

    with pytest.raises(NbwgmmaTypingError, match="multiple of 8"):
        setmaxnreg_inc(100)


def test_a_wrong_argument_count_is_the_typing_error_at_the_kernels_line():
    """As compiled (tests/intrinsics/test_typing_errors_cpu.py); it was Python's bare TypeError."""
    from nbwgmma.intrinsics import wgmma_wait_group
    from nbwgmma.intrinsics.errors import NbwgmmaTypingError

    @cuda.jit
    def kernel(out):
        wgmma_wait_group()
        out[0] = 1

    with pytest.raises(NbwgmmaTypingError, match=r"sim_cases.py:\d+: wgmma_wait_group: missing a required argument: "
                                                 r"'n': its signature is wgmma_wait_group\(n\)"):
        launch(kernel, 1, 128, (cuda.to_device(np.zeros(1, np.float32)),))


@contextlib.contextmanager
def _random_schedule(seed):
    """The simulated threads run in a random order (``NBWGMMA_SIM_SCHEDULE=random:SEED``)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NBWGMMA_SIM_SCHEDULE", f"random:{seed}")
        yield


@cuda.jit
def _static_address(out):
    bars = cuda.shared.array(2, np.uint64)
    out[cuda.threadIdx.x] = smem_addr(bars)


def test_a_static_shared_array_has_one_address_for_all_threads():
    """Every thread reaching a ``cuda.shared.array`` line at once gets the same array (a race
    once gave two threads arrays of their own: an mbarrier initialized by thread 0 was then
    "used before init" by another). Run in random thread orders."""
    for seed in range(8):
        with _random_schedule(seed):
            out = cuda.to_device(np.full(384, 0xFFFFFFFF, np.uint32))
            launch(_static_address, 1, 384, (out,))
            got = out.copy_to_host()
            assert (got == got[0]).all() and got[0] != 0xFFFFFFFF, np.unique(got)


@cuda.jit
def _reduce_into_one_tile(tm_out):
    from nbwgmma.intrinsics import (bulk_commit_group, bulk_wait_group, dynamic_smem_base, fence_proxy_async,
                                    tma_reduce_1d)
    dyn = cuda.shared.array(0, np.float32)
    base = dynamic_smem_base(dyn, 1024)
    off = (base - smem_addr(dyn)) // 4
    tid = cuda.threadIdx.x
    for i in range(16):
        dyn[off + tid * 32 + i] = 1.0
    fence_proxy_async()
    tma_reduce_1d(base + tid * 128, tm_out, 0, "add")
    bulk_commit_group()
    bulk_wait_group(0)


def _reduce_box_kernel(op):
    from nbwgmma.intrinsics import (bulk_commit_group, bulk_wait_group, dynamic_smem_base, fence_proxy_async_shared,
                                    tma_reduce_2d)

    @cuda.jit
    def k(src, tmap):
        dyn = cuda.shared.array(0, np.uint32)
        base = dynamic_smem_base(dyn, 128)
        off = (base - smem_addr(dyn)) // 4
        t = cuda.threadIdx.x  # 128 threads, one element of the 8 x 16 box each
        dyn[off + t] = src[t]
        fence_proxy_async_shared()
        cuda.syncthreads()
        if t == 0:
            tma_reduce_2d(base, tmap, 0, 0, op)
            bulk_commit_group()
            bulk_wait_group(0)
    return k


def _signed_min(o, s):
    return np.minimum(o.view(np.int32), s.view(np.int32)).view(np.uint32)


def _signed_max(o, s):
    return np.maximum(o.view(np.int32), s.view(np.int32)).view(np.uint32)


@pytest.mark.parametrize("op, dtype, want", [
    ("min", "s32", _signed_min),
    ("max", "s32", _signed_max),
    ("min", "u32", np.minimum),
    ("add", "s32", lambda o, s: o + s),
    ("inc", "u32", lambda o, s: np.where(o >= s, 0, o + 1).astype(np.uint32)),
    ("dec", "u32", lambda o, s: np.where((o == 0) | (o > s), s, o - 1).astype(np.uint32)),
])
def test_tma_reductions_on_integer_maps_follow_the_map_type(op, dtype, want):
    """min/max on an s32 map compare signed (they compared the raw unsigned bits: -21 lost to 13
    under min); inc/dec (PTX: u32 only) were not simulated."""
    rng = np.random.default_rng(0)
    hi = 10 if op in ("inc", "dec") else 50
    lo = 0 if op in ("inc", "dec") else -50
    old = rng.integers(lo, hi, (8, 16)).astype(np.int32).view(np.uint32)
    src = rng.integers(lo, hi, (8, 16)).astype(np.int32).view(np.uint32)
    g = cuda.to_device(old.copy())
    tm = TensorMap(g, (8, 16), swizzle="none", dtype=dtype)
    launch(_reduce_box_kernel(op), 1, 128, (cuda.to_device(src.reshape(-1)), tm.address),
           smem=dynamic_smem_bytes(8 * 16 * 4, 128))
    np.testing.assert_array_equal(g.copy_to_host(), want(old, src))


@cuda.jit
def _load_box(tmap, c0, c1, out):
    from nbwgmma.intrinsics import (dynamic_smem_base, fence_mbarrier_init, mbarrier_arrive_expect_tx, mbarrier_init,
                                    mbarrier_wait_parity, tma_load_2d)
    dyn = cuda.shared.array(0, np.float32)
    bars = cuda.shared.array(1, np.uint64)
    bar = smem_addr(bars)
    base = dynamic_smem_base(dyn, 128)
    off = (base - smem_addr(dyn)) // 4
    t = cuda.threadIdx.x
    if t == 0:
        mbarrier_init(bar, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    if t == 0:
        mbarrier_arrive_expect_tx(bar, 8 * 8 * 4)
        tma_load_2d(base, tmap, bar, c0, c1)
    mbarrier_wait_parity(bar, 0)
    for i in range(t, 64, 32):
        out[i // 8, i % 8] = dyn[off + i]


@pytest.mark.parametrize("c0, c1", [(0, 0), (12, 12), (-3, 5)])
def test_a_nan_filled_tma_load_fills_nan(c0, c1):
    """A map with oob_fill="nan" stopped the simulator in every load (a NaN assigned to the raw
    integers it reads the map's memory as)."""
    x = np.arange(16 * 16, dtype=np.float32).reshape(16, 16) + 1
    tm = TensorMap(cuda.to_device(x), (8, 8), swizzle="none", oob_fill="nan")
    out = cuda.to_device(np.full((8, 8), -1.0, np.float32))
    launch(_load_box, 1, 32, (tm.address, c0, c1, out), smem=dynamic_smem_bytes(256, 128))
    want = np.full((8, 8), np.nan, np.float32)
    rows, cols = slice(max(c1, 0), min(c1 + 8, 16)), slice(max(c0, 0), min(c0 + 8, 16))
    want[rows.start - c1:rows.stop - c1, cols.start - c0:cols.stop - c0] = x[rows, cols]
    np.testing.assert_array_equal(out.copy_to_host(), want)


def _reinit_kernel(rounds, wait_second=True):
    from nbwgmma.intrinsics import (dynamic_smem_base, fence_mbarrier_init, mbarrier_arrive_expect_tx, mbarrier_init,
                                    mbarrier_inval, mbarrier_wait_parity, tma_load_2d)

    @cuda.jit
    def k(tmap, out):
        dyn = cuda.shared.array(0, np.float32)
        bars = cuda.shared.array(1, np.uint64)
        bar = smem_addr(bars)
        base = dynamic_smem_base(dyn, 128)
        off = (base - smem_addr(dyn)) // 4
        t = cuda.threadIdx.x
        for r in range(rounds):
            if t == 0:
                mbarrier_init(bar, 1)
                fence_mbarrier_init()
            cuda.syncthreads()
            if t == 0:
                mbarrier_arrive_expect_tx(bar, 8 * 8 * 4)
                tma_load_2d(base, tmap, bar, 0, 8 * (r % 2))
            if wait_second or r == 0:
                mbarrier_wait_parity(bar, 0)  # each barrier's first phase: parity 0 again after the init
            if wait_second or r == 0 or t == 0:  # (without the wait: the issuing thread alone reads)
                out[r % 2, t] = dyn[off + t]
            cuda.syncthreads()
            if t == 0:
                mbarrier_inval(bar)
    return k


def test_an_mbarrier_initialized_again_and_again_keeps_its_order():
    """An mbarrier invalidated and initialized again per round, 1100 rounds: each init took a
    vector-clock slot of its own and the 1025th stopped the simulation. One address keeps one
    slot now, its phases counted on (a wait on the new barrier's parity 0 is its first phase)."""
    x = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    tm = TensorMap(cuda.to_device(x), (8, 8), swizzle="none")
    out = cuda.to_device(np.full((2, 32), np.nan, np.float32))
    launch(_reinit_kernel(1100), 1, 32, (tm.address, out), smem=dynamic_smem_bytes(256, 128))
    np.testing.assert_array_equal(out.copy_to_host(), x.reshape(2, 64)[:, :32])


def test_a_read_after_a_new_init_without_its_wait_is_a_hazard():
    """Having waited on the barrier before its re-initialization orders nothing of the new one's
    copy: the second round's read without its wait is reported (the slot's count went on)."""
    x = np.arange(16 * 8, dtype=np.float32).reshape(16, 8)
    tm = TensorMap(cuda.to_device(x), (8, 8), swizzle="none")
    out = cuda.to_device(np.full((2, 32), np.nan, np.float32))
    with pytest.raises(sim.SimHazard, match="without having waited for phase"):
        launch(_reinit_kernel(2, wait_second=False), 1, 32, (tm.address, out), smem=dynamic_smem_bytes(256, 128))


@cuda.jit
def _arrive_then_exit(out):
    from nbwgmma.intrinsics import cluster_arrive, cluster_sync, cluster_wait
    warp = cuda.threadIdx.x // 32
    if warp == 0:
        cluster_arrive()  # arrives, then exits without waiting
        return
    if warp == 2:
        out[0] = 1
    cluster_arrive()
    cluster_wait()  # waits for warp 2's arrival too: sees out[0] == 1
    if cuda.threadIdx.x == 32:
        out[1] = out[0]
    cluster_sync()  # warp 0 counts as exited here
    cluster_sync()


def test_concurrent_tma_reductions_lose_no_update():
    """128 threads each add 1.0 into the same 16 floats with a TMA reduce (atomic per element on
    the GPU): every sum is 128, in random thread orders."""
    for seed in range(4):
        with _random_schedule(seed):
            out = cuda.to_device(np.full(16, 0.0, np.float32))
            tm = TensorMap(out, (16,), swizzle="none", dtype="f32")
            launch(_reduce_into_one_tile, 1, 128, (tm.address,), smem=dynamic_smem_bytes(128 * 128))
            np.testing.assert_array_equal(out.copy_to_host(), np.full(16, 128.0, np.float32))


def test_a_thread_that_arrived_then_exited_counts_once():
    """A warp that arrives on the cluster barrier and exits before the phase completes is not
    counted twice: the others' wait still waits for warp 2's arrival (and sees its store)."""
    for seed in range(5):
        with _random_schedule(seed):
            out = cuda.to_device(np.zeros(2, np.int32))
            launch(_arrive_then_exit, 1, 96, (out,))
            assert out.copy_to_host()[1] == 1


@cuda.jit
def _add_and_sub(counter):
    for _ in range(8):
        if cuda.threadIdx.x % 2:
            cuda.atomic.sub(counter, 0, 1)
        else:
            cuda.atomic.add(counter, 0, 3)


def test_atomics_of_different_kinds_on_one_address_lose_no_update():
    """``cuda.atomic.add`` and ``cuda.atomic.sub`` on one address are atomic with respect to each
    other (Numba's simulator alone locks each kind apart): 64 threads add 3 and 64 subtract 1,
    eight times each, in random thread orders."""
    for seed in range(4):
        with _random_schedule(seed):
            counter = cuda.to_device(np.zeros(1, np.int64))
            launch(_add_and_sub, 1, 128, (counter,))
            assert counter.copy_to_host()[0] == 8 * (64 * 3 - 64)


@cuda.jit
def _peer_static_array(out):
    from nbwgmma.intrinsics import cluster_ctarank, cluster_sync, mapa, st_shared_cluster_u32
    cluster_sync()
    rank = cluster_ctarank()
    if rank == 1:
        for _ in range(4):  # (in the simulator each atomic lets the other threads run first)
            cuda.atomic.add(out, 1, 0)  # CTA 1 reaches the array's line late
    buf = cuda.shared.array(4, np.uint32)  # static: on the GPU it exists from the kernel's start
    if rank == 0 and cuda.threadIdx.x == 0:
        st_shared_cluster_u32(mapa(smem_addr(buf), 1), 7)
    cluster_sync()
    if rank == 1 and cuda.threadIdx.x == 0:
        out[0] = buf[0]


def test_a_static_array_exists_in_every_cta_of_the_cluster_at_one_offset():
    """A CTA stores into its peer's static array through mapa before the peer reaches the array's
    line: the array is there (allocated for the whole cluster at once), at the same offset."""
    for seed in (None, 0, 1):
        with contextlib.nullcontext() if seed is None else _random_schedule(seed):
            out = cuda.to_device(np.zeros(2, np.uint32))
            launch(_peer_static_array, (2, 1, 1), (32, 1, 1), (out,), cluster=(2, 1, 1))
            assert out.copy_to_host()[0] == 7


# --- the scheduler: threads one at a time, each until it waits ------------------------------


@cuda.jit
def _spin_on_try_wait(out, late):
    from nbwgmma.intrinsics import fence_mbarrier_init, mbarrier_arrive, mbarrier_init, mbarrier_try_wait_parity
    bars = cuda.shared.array(1, np.uint64)
    bar = smem_addr(bars)
    tid = cuda.threadIdx.x
    if tid == 0:
        mbarrier_init(bar, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    if tid == late:
        acc = 0
        for i in range(200):  # work before the arrival the others spin for
            acc += i
        out[64] = acc
        mbarrier_arrive(bar)
    while not mbarrier_try_wait_parity(bar, 0):
        pass
    out[tid] = out[64] if late >= 0 else 0


def test_threads_spinning_on_try_wait_let_the_others_run():
    """A thread that tests a barrier in a loop lets the thread it waits for run (first and last
    thread of the block arriving), in the default and in random orders."""
    for seed, late in [(None, 0), (None, 63), (1, 0), (2, 63)]:
        with contextlib.nullcontext() if seed is None else _random_schedule(seed):
            out = cuda.to_device(np.full(65, -1, np.int64))
            launch(_spin_on_try_wait, 1, 64, (out, late))
            np.testing.assert_array_equal(out.copy_to_host(), np.full(65, sum(range(200))))


def test_every_thread_spinning_on_a_barrier_nobody_completes_stops():
    out = cuda.to_device(np.full(65, -1, np.int64))
    with pytest.raises(sim.SimStopped, match=r"can never finish .* mbarrier at shared address 0x[0-9a-f]+, tested "
                                             r"\(try_wait/test_wait\) for parity 0 .* again and again; .* 1 of 1 "
                                             r"arrivals pending"):
        launch(_spin_on_try_wait, 1, 64, (out, -1))  # no thread arrives


@cuda.jit
def _timed_wait(out):
    from nbwgmma.intrinsics import fence_mbarrier_init, mbarrier_init, mbarrier_wait_parity_timeout
    bars = cuda.shared.array(1, np.uint64)
    bar = smem_addr(bars)
    if cuda.threadIdx.x == 0:
        mbarrier_init(bar, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    out[cuda.threadIdx.x] = mbarrier_wait_parity_timeout(bar, 0, 1000)  # never completes


def test_a_timed_wait_that_cannot_complete_returns_false():
    out = cuda.to_device(np.full(40, 7, np.int32))
    launch(_timed_wait, 1, 40, (out,))
    np.testing.assert_array_equal(out.copy_to_host(), np.zeros(40))


@cuda.jit
def _spin_lock(lock, counter):
    for _ in range(3):
        while cuda.atomic.cas(lock, 0, 0, 1) != 0:
            pass
        counter[0] = counter[0] + 1  # a plain read-modify-write under the lock
        cuda.atomic.exch(lock, 0, 0)


def test_a_spin_lock_on_an_atomic_serializes_its_holders():
    """A thread spinning on ``cas`` lets the holder run to its release."""
    for seed in range(3):
        with _random_schedule(seed):
            lock = cuda.to_device(np.zeros(1, np.int32))
            counter = cuda.to_device(np.zeros(1, np.int64))
            launch(_spin_lock, 1, 48, (lock, counter))
            assert counter.copy_to_host()[0] == 3 * 48


def test_an_unknown_schedule_is_refused(monkeypatch):
    monkeypatch.setenv("NBWGMMA_SIM_SCHEDULE", "shuffled")
    with pytest.raises(sim.SimError, match=r"NBWGMMA_SIM_SCHEDULE must be 'fifo' or 'random:SEED'.*'shuffled'"):
        launch(_timed_wait, 1, 32, (cuda.to_device(np.zeros(32, np.int32)),))


@cuda.jit(launch_bounds=(384, 1))
def _two_consumers_arrive(out):
    """Warpgroups 1 and 2 each arrive once (one elected thread); warpgroup 0 waits for both."""
    from nbwgmma.intrinsics import fence_mbarrier_init, mbarrier_arrive, mbarrier_init, mbarrier_wait_parity
    bars = cuda.shared.array(1, np.uint64)
    bar = smem_addr(bars)
    tid = cuda.threadIdx.x
    if tid == 0:
        mbarrier_init(bar, 2)
        fence_mbarrier_init()
    cuda.syncthreads()
    if tid % 128 == 0 and tid > 0:
        mbarrier_arrive(bar)
    if tid < 128:
        mbarrier_wait_parity(bar, 0)
        out[tid] = 1


def test_a_block_smaller_than_the_launch_bounds_is_named_in_a_hang():
    """The kernel is written for 384 threads (two arriving warpgroups): launched with 256 it
    hangs on the GPU; the simulator's report says the block is smaller than the bounds."""
    out = cuda.to_device(np.zeros(384, np.int32))
    launch(_two_consumers_arrive, 1, 384, (out,))
    assert out.copy_to_host()[:128].sum() == 128
    with pytest.raises(sim.SimStopped, match=r"can never finish .* The block has 256 threads, the kernel's "
                                             r"launch_bounds 384: threads it counts on may not exist"):
        launch(_two_consumers_arrive, 1, 256, (out,))


@cuda.jit
def _named_barrier_of_256(out):
    from nbwgmma.intrinsics import named_barrier_sync
    named_barrier_sync(1, 256)
    out[cuda.threadIdx.x] = 1


def test_a_named_barrier_for_more_threads_than_the_block_has_is_a_hazard():
    out = cuda.to_device(np.zeros(128, np.int32))
    with pytest.raises(sim.SimHazard, match=r"sim_cases.py:\d+: named barrier 1 waits for 256 threads, but the "
                                            r"block has 128: it can never complete"):
        launch(_named_barrier_of_256, 1, 128, (out,))


@cuda.jit
def _bytes_never_come(out):
    """Thread 0 arms 'full' for 1024 bytes no copy brings and waits for 'empty', which threads
    32-63 would release once 'full' completes: each side waits on the other."""
    from nbwgmma.intrinsics import (fence_mbarrier_init, mbarrier_arrive, mbarrier_arrive_expect_tx, mbarrier_init,
                                    mbarrier_name, mbarrier_wait_parity)
    bars = cuda.shared.array(2, np.uint64)
    full = smem_addr(bars)
    empty = full + 8
    tid = cuda.threadIdx.x
    if tid == 0:
        mbarrier_init(full, 1)
        mbarrier_name(full, "full", 0)
        mbarrier_init(empty, 32)
        mbarrier_name(empty, "empty", 0)
        fence_mbarrier_init()
    cuda.syncthreads()
    if tid == 0:
        mbarrier_arrive_expect_tx(full, 1024)
        mbarrier_wait_parity(empty, 0)  # PRODUCER WAITS
    elif tid >= 32:
        mbarrier_wait_parity(full, 0)  # CONSUMERS WAIT
        mbarrier_arrive(empty)
    out[tid] = 1


def test_a_hang_names_every_place_where_threads_wait():
    """The longest waiting thread is often not the one whose wait shows the mistake: the report
    lists the other places too, with their threads and what they wait for, and leads with the
    wait that shows the cause (here the consumers' barrier, every arrival in and the bytes short;
    a newcomer's hang with a box too small was led by the producer's wait for a slot)."""
    import inspect

    out = cuda.to_device(np.zeros(64, np.int32))
    with pytest.raises(sim.SimStopped) as e:
        launch(_bytes_never_come, 1, 64, (out,))
    src, first = inspect.getsourcelines(_bytes_never_come.py_func)
    line = {tag: first + i for i, text in enumerate(src) for tag in ("PRODUCER", "CONSUMERS") if tag in text}
    msg = str(e.value)
    assert "Waiting elsewhere" in msg, msg
    assert f"sim_cases.py:{line['PRODUCER']}" in msg and f"sim_cases.py:{line['CONSUMERS']}" in msg, msg
    assert "mbarrier 'full[0]'" in msg and "1024 transaction bytes pending" in msg, msg
    assert "mbarrier 'empty[0]'" in msg and "32 of 32 arrivals pending" in msg, msg
    assert "No thread has arrived on this barrier or armed it yet, in any phase" in msg, msg
    head = msg.split(". Waiting elsewhere")[0]
    assert f"sim_cases.py:{line['CONSUMERS']}" in head and "every arrival is in, the bytes are short" in head, msg


#: f32 bit patterns: NaNs whose payload rounding would carry into the exponent (0xFFFFFFFF is
#: shared memory's poison), a negative and a signalling NaN, and numbers at rounding ties
_CVT_BITS = [0xFFFFFFFF, 0x7FFFFFFF, 0x7FFF8000, 0xFFC00000, 0x7F800001, 0x3F808000, 0x3F818000, 0x7F7FFFFF]
#: cvt.rn.bf16x2.f32 and cvt.rn.f16x2.f32 of each, as an H200 gives them (any NaN: 0x7FFF)
_CVT_WANT = {"bf16": [0x7FFF] * 5 + [0x3F80, 0x3F82, 0x7F80], "f16": [0x7FFF] * 5 + [0x3C04, 0x3C0C, 0x7C00]}


@cuda.jit
def _convert_pairs(bits, fmt_bf16, out):
    from nbwgmma.intrinsics import f32_to_x2

    i = cuda.threadIdx.x
    if i < bits.size:
        x = bits.view(np.float32)[i]
        out[i] = f32_to_x2(x, x, "bf16") if fmt_bf16 else f32_to_x2(x, x, "f16")


@pytest.mark.parametrize("fmt", ["bf16", "f16"])
def test_f32_to_half_rounds_as_cvt_rn_and_keeps_nan_a_nan(fmt):
    """The host model and the simulated conversion both give what the GPU gives, bit for bit."""
    x = np.array(_CVT_BITS, np.uint32).view(np.float32).reshape(-1, 1)
    assert encode_elements(x, fmt).view(np.uint16).ravel().tolist() == _CVT_WANT[fmt]
    out = cuda.to_device(np.zeros(len(_CVT_BITS), np.uint32))
    launch(_convert_pairs, 1, 32, (cuda.to_device(np.array(_CVT_BITS, np.uint32)), fmt == "bf16", out))
    assert out.copy_to_host().tolist() == [w | (w << 16) for w in _CVT_WANT[fmt]]


@cuda.jit
def _store_over_a_landed_copy(src, out, who):
    from nbwgmma.intrinsics import (bulk_copy_g2s_array, dynamic_smem_base, ld_shared_f32, mbarrier_arrive_expect_tx,
                                    mbarrier_init, mbarrier_wait_parity, st_shared_f32)

    dyn = cuda.shared.array(0, np.uint8)
    bars = cuda.shared.array(1, np.uint64)
    base = dynamic_smem_base(dyn, 1024)
    bar = smem_addr(bars)
    t = cuda.threadIdx.x
    if t == 0:
        mbarrier_init(bar, 1)
    cuda.syncthreads()
    if t == 0:
        mbarrier_arrive_expect_tx(bar, 128)
        bulk_copy_g2s_array(base, src, 0, 128, bar)
        mbarrier_wait_parity(bar, 0)
    cuda.syncthreads()  # thread 0's wait ordered before every other thread's store
    if t == who:
        st_shared_f32(base + 4 * 5, np.float32(-1.0))
    cuda.syncthreads()
    out[t] = ld_shared_f32(base + 4 * t)


@pytest.mark.parametrize("who", [0, 7])
def test_a_store_after_the_copy_s_phase_was_observed_runs(who):
    """The waiter itself, or another thread its wait is ordered before, may overwrite the copy's bytes."""
    src = np.arange(32, dtype=np.float32)
    out = cuda.to_device(np.zeros(32, np.float32))
    launch(_store_over_a_landed_copy, 1, 32, (cuda.to_device(src), out, np.int32(who)), smem=dynamic_smem_bytes(1024))
    want = src.copy()
    want[5] = -1.0
    np.testing.assert_array_equal(out.copy_to_host(), want)


_SHAPE_STAGES = 3
_SHAPE_WORDS = 2 * _SHAPE_STAGES
_SHAPE_PIPE = type("Pipe", (), {"barrier_words": 6})()


def test_a_shared_array_shape_computed_at_run_time_is_refused_as_on_the_gpu():
    """Compiled, ``cuda.shared.array(2 * STAGES, ...)`` or ``(pipe.barrier_words, ...)`` is a
    typing error at its line; the simulator (which could make the array) refuses it alike, so a
    kernel it runs compiles. A global name, a tuple of names and literals, a ``shape=`` keyword
    and a module's constant run."""
    from nbwgmma.intrinsics.errors import NbwgmmaTypingError

    @cuda.jit
    def good(out):
        a = cuda.shared.array(_SHAPE_WORDS, np.int32)
        b = cuda.shared.array((_SHAPE_WORDS, 2), dtype=np.int32)
        c = cuda.shared.array(shape=4, dtype=np.int32)
        d = cuda.shared.array(config.CUDA_LOG_SIZE, np.int32)  # (a module's constant: a global)
        if cuda.threadIdx.x == 0:
            a[0], b[0, 1], c[3], d[31] = 1, 2, 3, 4
            out[0] = a[0] + b[0, 1] + c[3] + d[31]

    @cuda.jit
    def doubled(out):
        a = cuda.shared.array(2 * _SHAPE_STAGES, np.int32)
        out[0] = a[0]

    @cuda.jit
    def attribute(out):
        a = cuda.shared.array(_SHAPE_PIPE.barrier_words, np.int32)
        out[0] = a[0]

    out = cuda.to_device(np.zeros(1, np.int32))
    launch(good, 1, 32, (out,))
    assert out.copy_to_host()[0] == 10
    for kernel, expr in ((doubled, "2 * _SHAPE_STAGES"), (attribute, "_SHAPE_PIPE.barrier_words")):
        with pytest.raises(NbwgmmaTypingError, match=f"sim_cases.py:[0-9]+: cuda.shared.array: the shape must be a "
                                                     f"compile-time constant.*got {re.escape(expr)}"):
            launch(kernel, 1, 32, (out,))


def test_every_intrinsic_keeps_its_docstring_in_the_simulator():
    """``help()`` reads the same in the simulator: each public intrinsic's simulated function
    carries the compiled one's docstring (the fragment operations' replacements had none)."""
    import nbwgmma.intrinsics as intrinsics

    missing = [name for name in intrinsics.__all__
               if callable(getattr(intrinsics, name)) and not (getattr(intrinsics, name).__doc__ or "").strip()]
    assert not missing, missing
