"""The simulator's collective semantics and hazard reports (run by tests/test_sim.py in a
child process with NUMBA_ENABLE_CUDASIM=1; also by hand:
NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/sim_hazard_cases.py).

Each hazard has a deliberately broken kernel that the simulator must report, with the
message described in nbwgmma.sim, and the fixed kernel, which must give the exact answer."""

import math
import os

import numpy as np
import pytest
from numba import config, cuda

from nbwgmma import sim
from nbwgmma.intrinsics import (
    acc_store, acc_store_fp8, acc_zeros, bulk_commit_group, bulk_wait_group, dynamic_smem_base,
    fence_proxy_async_shared, mbarrier_arrive_count, mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_name, mbarrier_wait_parity,
    named_barrier_sync_id, smem_addr,
    tma_load_2d, tma_store_2d, wgmma_commit_group, wgmma_fence, wgmma_mma_async, wgmma_wait_group,
)
from nbwgmma.kernels.wgmma_tile import TileProblem
from nbwgmma.launch import dynamic_smem_bytes, launch
from nbwgmma.tma import TensorMap

from tests.sim_vs_gpu import EXAMPLES, load_example, run_ws_example

assert config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1"

KIND = "f32.bf16.bf16"


# --- the warp-specialized example: collective wgmma, and its release moved too early ------


def _run_ws(mod, k, seed=0):
    return run_ws_example(mod, k, seed)


WS_RUNS = int(os.environ.get("NBWGMMA_SIM_WS_RUNS", "20"))
WS_RUNS_LONG = int(os.environ.get("NBWGMMA_SIM_WS_RUNS_LONG", "20"))


@pytest.mark.parametrize("k, runs", [(1024, WS_RUNS), (4096, WS_RUNS_LONG)])
def test_warp_specialized_example_is_exact_every_run(k, runs, monkeypatch):
    """Before warpgroup-collective wgmma, about one run in three of this kernel at K=1024
    stopped or gave wrong sums; now every run is exact, each on other data in another random
    thread order (the first in the default order)."""
    if runs == 0:
        pytest.skip(f"K={k} runs only where NBWGMMA_SIM_WS_RUNS{'_LONG' if k == 4096 else ''} > 0 (CI sets 20)")
    mod = load_example("gemm_3_warp_specialized")
    for r in range(runs):
        if r:
            monkeypatch.setenv("NBWGMMA_SIM_SCHEDULE", f"random:{r}")
        got, ref = _run_ws(mod, k, seed=r)
        assert np.abs(ref).sum() > 0
        np.testing.assert_array_equal(got, ref.astype(np.float32), err_msg=f"run {r}")


def _edited_example(stem, old, new, what):
    """The example ``stem`` with its source text ``old`` replaced by ``new``, run as a module of
    its own (its file name kept, so that reports name the example's lines)."""
    import types

    path = EXAMPLES / f"{stem}.py"
    src = path.read_text()
    assert old in src, f"the example's {what} changed: update this test"
    mod = types.ModuleType(f"{stem}_edited")
    mod.__file__ = str(path)
    exec(compile(src.replace(old, new), mod.__file__, "exec"), mod.__dict__)
    return mod


def _ws_with_early_release():
    """The example with each consumer's release moved before its wgmma_wait_group(1)."""
    wait = "            wgmma_wait_group(1)  # this k-block's group may still run; the previous one is done\n"
    release = ("            if kb > 0 and ct == 0:\n"
               "                mbarrier_arrive(empty + 8 * ((kb - 1) % STAGES))\n")
    return _edited_example("gemm_3_warp_specialized", wait + release, release + wait, "consumer loop")


def test_release_before_wait_group_is_a_hazard_not_a_wrong_answer():
    """Reported with the line of the release that came too early: the arrivals that completed
    the phase of the "empty" barrier the producer waited for before its write."""
    with pytest.raises(sim.SimHazard, match=r"writes shared memory at 0x[0-9a-f]+ .*wgmma_mma_async.*whose arrivals "
                                            r"came from .*gemm_3_warp_specialized.py:\d+\)"):
        _run_ws(_ws_with_early_release(), 1024)


def _tma_tile_example(descriptor_swizzle):
    """The TMA + wgmma example with its descriptors of ``descriptor_swizzle`` (its maps: 128B)."""
    return _edited_example("tma_wgmma_tile", 'SW128 = SWIZZLE_CODE["128B"]\n',
                           f'SW128 = SWIZZLE_CODE["{descriptor_swizzle}"]\n', "descriptors")


def test_a_tma_tile_read_through_a_descriptor_of_another_swizzle_is_a_hazard():
    """Tiles the maps laid out with the 128B swizzle, read through unswizzled descriptors: the
    wgmma would read other elements than the copies put there (a wrong answer on the GPU)."""
    rng = np.random.default_rng(0)
    with pytest.raises(sim.SimHazard, match=r"wgmma_mma_async at .*tma_wgmma_tile.py:\d+\) reads its [AB] operand "
                                            r"at 0x[0-9a-f]+ through a descriptor with the none swizzle, but the TMA "
                                            r"load issued at .*tma_wgmma_tile.py:\d+ laid those bytes out with the "
                                            r"128B swizzle"):
        _tma_tile_example("none").run(rng.integers(-4, 5, (64, 64)), rng.integers(-4, 5, (64, 64)))


@pytest.mark.parametrize("dtype, hazard", [("f16", True), ("f32", True), ("u16", False)])
def test_a_tma_tile_of_another_number_format_than_the_wgmma_reads_is_a_hazard(dtype, hazard):
    """bf16 bits copied through maps that say f16 (the same bytes on the GPU, read by a bf16
    wgmma: a silently wrong answer wherever the data was f16) are a hazard naming both lines; a
    map of raw 16-bit integers makes no claim and the example is exact. (The f32 map reads the
    64 x 64 uint16 array as 64 x 32 f32 values: a box of (64, 32).)"""
    rng = np.random.default_rng(2)
    a, b = rng.integers(-4, 5, (64, 64)), rng.integers(-4, 5, (64, 64))
    box = "(64, 32)" if dtype == "f32" else "(64, 64)"
    view = f'x.view(np.float32) if "{dtype}" == "f32" else x'
    mod = _edited_example("tma_wgmma_tile", 'maps = [TensorMap(x, (64, 64), dtype="bf16", swizzle="128B") for x in bits]',
                          f'maps = [TensorMap({view}, {box}, dtype="{dtype}", swizzle="128B") for x in bits]', "maps")
    if not hazard:
        d, _ = mod.run(a, b)
        np.testing.assert_array_equal(d, (a @ b.T).astype(np.float32))
        return
    with pytest.raises(sim.SimHazard, match=rf"wgmma_mma_async at .*tma_wgmma_tile.py:\d+\) reads its [AB] operand "
                                            rf"at 0x[0-9a-f]+ as bf16 values, but the TMA load issued at "
                                            rf".*tma_wgmma_tile.py:\d+ copied those bytes through a tensor map of "
                                            rf"{dtype} elements"):
        mod.run(a, b)


def test_a_tma_store_of_a_block_written_in_another_swizzle_is_a_hazard():
    """D written with the 128B swizzle (acc_store_swizzled), stored through a map of 64B: the
    store would scramble D (a wrong answer on the GPU); both lines named."""
    rng = np.random.default_rng(3)
    mod = _edited_example("tma_wgmma_tile", 'maps.append(TensorMap(d, (64, 32), swizzle="128B"))',
                          'maps.append(TensorMap(d, (64, 16), swizzle="64B"))', "D's map")
    with pytest.raises(sim.SimHazard, match=r"a TMA store at .*tma_wgmma_tile.py:\d+\) stores shared memory at "
                                            r"0x[0-9a-f]+ through a tensor map with the 64B swizzle, but "
                                            r"acc_store_swizzled at .*tma_wgmma_tile.py:\d+ wrote those bytes laid "
                                            r"out with the 128B swizzle"):
        mod.run(rng.integers(-4, 5, (64, 64)), rng.integers(-4, 5, (64, 64)))


def test_a_tma_store_of_a_block_written_unswizzled_through_a_swizzled_map_is_a_hazard():
    """From a newcomer's fp8 trial: a block a fragment store wrote with swizzle "none", stored
    through a swizzled map, came out scrambled with no report (an unswizzled fragment store made
    no claim, as a plain copy does); now a hazard whose advice is the block's own layout."""
    rng = np.random.default_rng(4)
    mod = _edited_example("tma_wgmma_tile", 'acc_store_swizzled(acc, KIND, sd, tid, 128, "128B")',
                          'acc_store_swizzled(acc, KIND, sd, tid, 128, "none")', "D's store")
    with pytest.raises(sim.SimHazard, match=r"a TMA store at .*tma_wgmma_tile.py:\d+\) stores shared memory at "
                                            r"0x[0-9a-f]+ through a tensor map with the 128B swizzle, but "
                                            r"acc_store_swizzled at .*tma_wgmma_tile.py:\d+ wrote those bytes laid "
                                            r"out unswizzled: .*store it through a map without swizzle"):
        mod.run(rng.integers(-4, 5, (64, 64)), rng.integers(-4, 5, (64, 64)))


def test_a_plain_tma_copy_of_data_arranged_beforehand_is_no_hazard():
    """A map without swizzle copies bytes as they lie: tiles laid out in global memory with the
    128B swizzle already, copied plainly and read through 128B descriptors, are exact."""
    from nbwgmma.layout import swizzle_addr
    from nbwgmma.layout.wgmma_model import encode_elements

    mod = load_example("tma_wgmma_tile")
    rng = np.random.default_rng(1)
    a, b = rng.integers(-4, 5, (64, 64)), rng.integers(-4, 5, (64, 64))
    pos = np.arange(64 * 64 * 2)
    bits = []
    for x in (a, b):
        raw = encode_elements(x, "bf16").view(np.uint8).reshape(-1)
        arranged = np.empty_like(raw)
        arranged[swizzle_addr(pos, "128B")] = raw  # each byte where the swizzled copy would put it
        bits.append(cuda.to_device(arranged.view(np.uint16).reshape(64, 64)))
    d = cuda.to_device(np.full((64, 64), np.nan, np.float32))
    maps = [TensorMap(x, (64, 64), dtype="bf16", swizzle="none") for x in bits] + [TensorMap(d, (64, 32))]
    launch(mod.tma_wgmma, 1, 128, tuple(m.address for m in maps) + (1,), smem=dynamic_smem_bytes(4 * mod.TILE))
    np.testing.assert_array_equal(d.copy_to_host(), (a @ b.T).astype(np.float32))


@cuda.jit
def _one_ordered_one_racing_store(out):
    sm = cuda.shared.array(64, np.float32)
    t = cuda.threadIdx.x
    if t == 0:
        sm[0] = 1.0  # ordered before the read by the barrier below
    cuda.syncthreads()
    if t == 0:
        sm[1] = 2.0  # RACING: nothing orders it before thread 1's read
    if t == 1:
        v = sm[0:2]
        out[0] = v[0] + v[1]


@cuda.jit
def _multicast_with_mask(tmap, nbytes, mask, out):
    from nbwgmma.intrinsics import cluster_ctarank, cluster_sync, fence_mbarrier_init, tma_load_multicast_2d

    dyn = cuda.shared.array(0, np.uint8)
    bars = cuda.shared.array(1, np.uint64)
    base = dynamic_smem_base(dyn, 1024)
    bar = smem_addr(bars)
    tid = cuda.threadIdx.x
    if tid == 0:
        mbarrier_init(bar, 1)
        fence_mbarrier_init()
    cluster_sync()
    if tid == 0:
        mbarrier_arrive_expect_tx(bar, nbytes)
    cluster_sync()
    if tid == 0 and cluster_ctarank() == 0:
        tma_load_multicast_2d(base, tmap, bar, mask, 0, 0)
    mbarrier_wait_parity(bar, 0)
    out[cuda.blockIdx.x] = dyn[base - smem_addr(dyn)]
    cluster_sync()


@pytest.mark.parametrize("mask", [0, 0b100])
def test_a_multicast_mask_naming_no_cta_or_one_past_the_cluster_is_a_hazard(mask):
    """A mask of 0 copied nowhere (the CTAs' waits then never finished: reported as a hang, not
    at the copy); bits past the cluster's CTAs were dropped. Both now a hazard at the copy."""
    x = np.arange(16 * 64, dtype=np.uint16).reshape(16, 64)
    tm = TensorMap(cuda.to_device(x), (16, 64), swizzle="128B", dtype="bf16")
    out = cuda.to_device(np.zeros(2, np.uint8))
    with pytest.raises(sim.SimHazard, match=rf"a multicast TMA load's mask 0x{mask:x} must name at least one CTA and "
                                            r"none past the cluster's 2"):
        launch(_multicast_with_mask, 2, 32, (tm.address, tm.box_bytes, mask, out),
               smem=dynamic_smem_bytes(tm.box_bytes + 1024), cluster=2)
    launch(_multicast_with_mask, 2, 32, (tm.address, tm.box_bytes, 0b11, out),
           smem=dynamic_smem_bytes(tm.box_bytes + 1024), cluster=2)
    assert out.copy_to_host().tolist() == [0, 0]


@cuda.jit
def _two_d_copies(tmap, nbytes, store):
    from nbwgmma.intrinsics import fence_mbarrier_init, tma_load_2d, tma_store_2d

    dyn = cuda.shared.array(0, np.uint8)
    bars = cuda.shared.array(1, np.uint64)
    base = dynamic_smem_base(dyn, 1024)
    bar = smem_addr(bars)
    if cuda.threadIdx.x == 0:
        mbarrier_init(bar, 1)
        fence_mbarrier_init()
        if store:
            tma_store_2d(base, tmap, 0, 0)
        else:
            mbarrier_arrive_expect_tx(bar, nbytes)
            tma_load_2d(base, tmap, bar, 0, 0)
            mbarrier_wait_parity(bar, 0)


@pytest.mark.parametrize("store", [False, True])
def test_a_2d_tma_operation_given_a_3d_map_is_a_hazard(store):
    """From a newcomer's batched kernel: the kit's 2-D stage loads and part stores given 3-D maps
    stopped in the simulator with NumPy's "could not broadcast" from inside its TMA model (on
    the GPU the copy is undefined: the operation's .dim and the map's rank must agree)."""
    x = np.zeros((2, 16, 64), np.uint16)
    tm = TensorMap(cuda.to_device(x), (1, 16, 64), swizzle="128B", dtype="bf16")
    op = "tma_store" if store else "tma_load"
    with pytest.raises(sim.SimHazard, match=rf"{op}_2d is given a 3-D tensor map \(of \(2, 16, 64\)\): a 2-D TMA "
                                            rf"operation takes a map of rank 2, with 2 coordinates; use {op}_3d"):
        launch(_two_d_copies, 1, 32, (tm.address, tm.box_bytes, store), smem=dynamic_smem_bytes(tm.box_bytes + 1024))


@cuda.jit
def _producer_one_short(out, rounds):
    from nbwgmma.intrinsics import fence_mbarrier_init, mbarrier_arrive

    bars = cuda.shared.array(1, np.uint64)
    bar = smem_addr(bars)
    tid = cuda.threadIdx.x
    if tid == 0:
        mbarrier_init(bar, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    if tid == 0:
        for i in range(rounds - 1):  # one fill short of the consumer's walk
            mbarrier_arrive(bar)
        return
    if tid == 32:
        for i in range(rounds):
            mbarrier_wait_parity(bar, i % 2)
            out[i] = i


def test_a_hang_whose_arriving_threads_all_exited_says_so():
    """From a newcomer's causal kernel: the consumers walked more tiles than the producer, which
    had exited; the report named the barrier and its phase but not that no arrival could come."""
    out = cuda.to_device(np.zeros(3, np.int32))
    with pytest.raises(sim.SimStopped, match=r"Every thread that arrived on this barrier or armed it before has exited "
                                             r"\(thread 0 at .*sim_hazard_cases\.py:\d+\): unless a thread that never arrived is "
                                             r"to, none will"):
        launch(_producer_one_short, 1, 64, (out, 3))


@cuda.jit
def _every_lane_releases(out):
    from nbwgmma.intrinsics import fence_mbarrier_init, mbarrier_arrive

    bars = cuda.shared.array(1, np.uint64)
    bar = smem_addr(bars)
    tid = cuda.threadIdx.x
    if tid == 0:
        mbarrier_init(bar, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    if tid >= 32:  # a warp releasing a stage: every lane arrives, where one should
        mbarrier_arrive(bar)
    cuda.syncthreads()
    if tid < 32:
        mbarrier_wait_parity(bar, 0)  # the completion of phase 0
        out[tid] = 1


def test_a_wait_that_more_arrivals_than_a_phase_expects_passed_by_says_so():
    """Every lane of a releasing warp arrived on a barrier of count 1 (a newcomer's mistake: every
    consumer thread calling consumer_release): 32 phases completed, and the waiter, waiting for
    phase 0's parity, stopped with the phase count alone ("current phase is 32")."""
    out = cuda.to_device(np.zeros(32, np.int32))
    with pytest.raises(sim.SimStopped, match=r"It missed phase 0: phases 0-31 completed after the last one this "
                                             r"thread saw \(none\), and a parity wait sees only the latest: more "
                                             r"arrivals than the 1 a phase expects, or this wait's stage and phase "
                                             r"behind the ring's fills .*counted short\)\? \(phase 31's came from "
                                             r".*sim_hazard_cases.py:\d+"):
        launch(_every_lane_releases, 1, 64, (out,))


def test_a_race_names_the_racing_store_and_its_byte():
    """Of the bytes a read takes, the one another thread wrote unordered: its address, and the line
    of that store (not of an earlier, ordered store by the same thread)."""
    import inspect

    src, first = inspect.getsourcelines(_one_ordered_one_racing_store.py_func)
    line = first + next(i for i, s in enumerate(src) if "RACING" in s)
    with pytest.raises(sim.SimHazard, match=rf"reads shared memory at 0x[0-9a-f]*4 that thread 0 \(a shared-memory "
                                            rf"store at .*sim_hazard_cases.py:{line}\) wrote"):
        launch(_one_ordered_one_racing_store, 1, 32, (cuda.to_device(np.zeros(1, np.float32)),))


# --- atomics on shared memory: no race among themselves, ordered with plain accesses ------


def _atomics_kernel(init=True, init_barrier=True, read_barrier=True, late_store=False):
    @cuda.jit
    def k(out):
        s = cuda.shared.array(2, np.float32)
        t = cuda.threadIdx.x
        if init and t == 0:
            s[0] = 0.0
            s[1] = -1.0
        if init_barrier:
            cuda.syncthreads()
        cuda.atomic.add(s, 0, 1.0)
        cuda.atomic.max(s, 1, np.float32(t))
        if late_store and t == 5:
            s[1] = 7.0
        if read_barrier:
            cuda.syncthreads()
        if t == 0:
            out[0] = s[0]
            out[1] = s[1]
    return k


def _run_atomics(order="fifo", **flags):
    out = cuda.to_device(np.full(2, np.nan, np.float32))
    os.environ["NBWGMMA_SIM_SCHEDULE"] = order
    try:
        launch(_atomics_kernel(**flags), 1, 64, (out,))
    finally:
        os.environ.pop("NBWGMMA_SIM_SCHEDULE", None)
    return out.copy_to_host()


@pytest.mark.parametrize("order", ["fifo", "random:1", "random:2"])
def test_shared_memory_atomics_between_barriers_are_exact_and_no_hazard(order):
    """64 threads' atomic adds and maxima on two shared words: before, each atomic's load was
    reported as racing with the other threads' atomics (a correct kernel stopped)."""
    np.testing.assert_array_equal(_run_atomics(order), [64.0, 63.0])


def test_atomics_on_bytes_nothing_wrote_take_the_poison_as_a_load_does():
    """No initial store: the atomics read what an earlier kernel left (0xFF bytes: NaN here), as
    a plain load would, and the result shows it; not a hazard (an ``exch`` whose old value goes
    nowhere is no mistake)."""
    got = _run_atomics(init=False)
    assert np.isnan(got).all(), got


@pytest.mark.parametrize("flags, message", [
    (dict(init_barrier=False), "nothing ordering that store before this atomic|that other threads update atomically"),
    (dict(read_barrier=False), "update atomically|nothing ordering that read before this write"),
    (dict(late_store=True), "that other threads update atomically"),
])
@pytest.mark.parametrize("order", ["fifo", "random:1"])
def test_plain_accesses_unordered_with_atomics_are_hazards(flags, message, order):
    """An initial store with no barrier before the atomics, a read of the result with no
    barrier after them, a plain store among them."""
    with pytest.raises(sim.SimHazard, match=message):
        _run_atomics(order, **flags)


# --- correct kernels the simulator once rejected (a hunt for false positives) --------------


@cuda.jit
def _transpose_through_row_views(inp, out):
    tile = cuda.shared.array((8, 8), np.float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    tile[ty][tx] = inp[ty, tx]  # a row view, then one element stored through it
    cuda.syncthreads()
    out[ty, tx] = tile[tx, ty]


@cuda.jit
def _two_arrays_sliced_from_dynamic(x, out):
    dyn = cuda.shared.array(0, np.float32)
    a = dyn[:32]
    b = dyn[32:64]
    t = cuda.threadIdx.x
    a[t] = x[t]
    b[t] = 2 * x[t]
    cuda.syncthreads()
    out[t] = a[31 - t] + b[(t + 1) % 32]


@cuda.jit
def _cas_on_a_slice(out):
    sm = cuda.shared.array(2, np.int32)
    t = cuda.threadIdx.x
    if t == 0:
        sm[1] = -1
    cuda.syncthreads()
    cuda.atomic.compare_and_swap(sm[1:2], -1, t)  # element 1, the only way compare_and_swap takes it
    cuda.syncthreads()
    if t == 0:
        out[0] = sm[1]


def test_a_view_of_a_shared_array_is_no_load():
    """Taking a row or a slice of a shared array was checked as a load of all its bytes: another
    thread's store into the row, or an atomic on the slice, was reported. A view is an address;
    its elements are checked when they are read or written."""
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    out = cuda.to_device(np.full((8, 8), np.nan, np.float32))
    launch(_transpose_through_row_views, 1, (8, 8, 1), (cuda.to_device(x), out))
    np.testing.assert_array_equal(out.copy_to_host(), x.T)
    x = np.arange(32, dtype=np.float32)
    out = cuda.to_device(np.full(32, np.nan, np.float32))
    launch(_two_arrays_sliced_from_dynamic, 1, 32, (cuda.to_device(x), out), smem=64 * 4)
    np.testing.assert_array_equal(out.copy_to_host(), x[::-1] + 2 * x[(np.arange(32) + 1) % 32])
    out = cuda.to_device(np.full(1, -7, np.int32))
    launch(_cas_on_a_slice, 1, 64, (out,))
    assert 0 <= out.copy_to_host()[0] < 64


@cuda.jit
def _warp_functions(x, out, n):
    t = cuda.threadIdx.x
    if t >= n:
        return  # lanes that exit: the *_sync functions go on without them (CUDA: non-exited lanes)
    v = x[t]
    out[t, 0] = v + cuda.shfl_xor_sync(0xFFFFFFFF, v, 1)
    b = cuda.ballot_sync(0xFFFFFFFF, v % 2 == 0)
    out[t, 1] = b
    out[t, 2] = cuda.popc(b)
    out[t, 3] = cuda.match_any_sync(0xFFFFFFFF, v % 4)
    m, same = cuda.match_all_sync(0xFFFFFFFF, v // 64)
    out[t, 4] = m
    out[t, 5] = same
    out[t, 6] = cuda.activemask()
    cuda.syncwarp()


@pytest.mark.parametrize("block, n", [(64, 64), (48, 48), (64, 40)])
def test_warp_functions_in_partial_warps_and_with_exited_lanes(block, n):
    """Full-mask shuffles, votes and syncwarp in a warp of 16 threads (48 in the block) or with
    lanes that returned stopped the simulation; match_any_sync and match_all_sync were missing;
    popc of a negative value counted its Python digits."""
    x = np.arange(block, dtype=np.int32)
    out = cuda.to_device(np.full((block, 7), -99, np.int64))
    launch(_warp_functions, 1, block, (cuda.to_device(x), out, n))
    got = out.copy_to_host()[:n]
    lanes = np.arange(n)
    pair = np.where(lanes ^ 1 < n, lanes ^ 1, lanes)  # a lane whose partner exited reads its own value
    np.testing.assert_array_equal(got[:, 0], x[:n] + x[pair])
    for w in range(0, n, 32):
        live = lanes[w:w + 32] - w
        even = sum(1 << int(i) for i in live if x[w + i] % 2 == 0)
        assert (got[w:w + 32, 1] == even).all()  # (unsigned here; a negative int32 on the GPU)
        assert (got[w:w + 32, 2] == bin(even).count("1")).all()
        for i in live:
            want = sum(1 << int(j) for j in live if x[w + j] % 4 == x[w + i] % 4)
            assert got[w + i, 3] == want
        full = sum(1 << int(i) for i in live)
        assert (got[w:w + 32, 4] == full).all() and (got[w:w + 32, 5] == 1).all()
        exist = sum(1 << i for i in range(32) if w + i < block)
        assert (got[w:w + 32, 6] == exist).all()


@cuda.jit
def _u32_atomic_minus_one(out):
    sm = cuda.shared.array(1, np.uint32)
    if cuda.threadIdx.x == 0:
        sm[0] = 100
    cuda.syncthreads()
    cuda.atomic.add(sm, 0, -1)  # Numba converts -1 to the array's type: a decrement on the GPU
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        out[0] = sm[0]


def test_an_atomic_operand_takes_the_array_s_type():
    out = cuda.to_device(np.zeros(1, np.uint32))
    launch(_u32_atomic_minus_one, 1, 32, (out,))
    assert out.copy_to_host()[0] == 68


# --- one warpgroup, one tile: accumulator and proxy-fence hazards -------------------------


def _tile_problem():
    rng = np.random.default_rng(3)
    return TileProblem(KIND, 8, 2, rng.integers(-4, 5, (64, 32)), rng.integers(-4, 5, (8, 32)), swizzle="none")


def _tile_kernel(fence=True, wait=True, peek=False, wgmma_fenced=True, barrier=True):
    """The warpgroup stages the operands with generic stores (each thread its bytes), then
    issues the wgmmas. ``fence``: True (before the barrier), False (none) or "late" (after it)."""
    @cuda.jit
    def kernel(image, desc_a, desc_b, out):
        dyn = cuda.shared.array(0, np.uint8)
        base = dynamic_smem_base(dyn, 1024)
        off = base - smem_addr(dyn)
        for i in range(cuda.threadIdx.x, image.size, 128):
            dyn[off + i] = image[i]
        if fence is True:
            fence_proxy_async_shared()
        if barrier:
            cuda.syncthreads()
        if fence == "late":
            fence_proxy_async_shared()
        acc = acc_zeros(KIND, 8)
        if wgmma_fenced:
            wgmma_fence()
        for s in range(2):
            acc = wgmma_mma_async(acc, desc_a[s] + (base >> 4), desc_b[s] + (base >> 4), KIND)
        wgmma_commit_group()
        if peek:
            out[0, 0] = acc[0]
        if wait:
            wgmma_wait_group(0)
        acc_store(acc, KIND, out, cuda.threadIdx.x, 0, 0)
    return kernel


def _run_tile(**flags):
    p = _tile_problem()
    out = cuda.to_device(np.full((64, 8), np.nan, np.float32))
    launch(_tile_kernel(**flags), 1, 128, (cuda.to_device(p.image), cuda.to_device(p.desc_a),
                                           cuda.to_device(p.desc_b), out), smem=dynamic_smem_bytes(p.image.size))
    return out.copy_to_host(), p.reference()


SCHEDULES = ["fifo", "random:1", "random:2"]


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_fixed_tile_kernel_is_exact(schedule, monkeypatch):
    monkeypatch.setenv("NBWGMMA_SIM_SCHEDULE", schedule)
    got, ref = _run_tile()
    assert np.abs(ref).sum() > 0
    np.testing.assert_array_equal(got, ref.astype(np.float32))


def test_accumulator_stored_before_wait_group_is_a_hazard():
    with pytest.raises(sim.SimHazard, match=r"acc_store at .*sim_hazard_cases.py:\d+\) reads an accumulator that "
                                            r"the wgmma_mma_async .* is still writing"):
        _run_tile(wait=False)


def test_accumulator_register_read_before_wait_group_is_a_hazard():
    with pytest.raises(sim.SimHazard, match=r"an accumulator register read at .*sim_hazard_cases.py:\d+"):
        _run_tile(peek=True)


def test_a_first_wgmma_without_wgmma_fence_is_a_hazard():
    with pytest.raises(sim.SimHazard, match=r"wgmma_mma_async at .*sim_hazard_cases.py:\d+: warpgroup 0 issues its "
                                            r"first wgmma with no wgmma_fence before it"):
        _run_tile(wgmma_fenced=False)


def test_generic_stores_read_by_wgmma_without_proxy_fence_is_a_hazard():
    with pytest.raises(sim.SimHazard, match=r"wgmma_mma_async at .*through the async proxy, but thread \d+ \(a "
                                            r"shared-memory store at .*sim_hazard_cases.py:\d+\) wrote it with generic "
                                            r"stores and issued no fence_proxy_async"):
        _run_tile(fence=False)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_wgmma_reading_other_warps_stores_with_no_barrier_is_a_hazard(schedule, monkeypatch):
    """The wgmma instructions are no barrier between a warpgroup's warps (PTX ISA,
    wgmma.mma_async: ``.sync`` waits for the threads of the warp)."""
    monkeypatch.setenv("NBWGMMA_SIM_SCHEDULE", schedule)
    with pytest.raises(sim.SimHazard, match=r"wgmma_mma_async at .*sim_hazard_cases.py:\d+\) reads shared memory "
                                            r"at 0x[0-9a-f]+ that thread \d+ \(a shared-memory store at "
                                            r".*sim_hazard_cases.py:\d+\) wrote, with nothing ordering that write "
                                            r"before this read"):
        _run_tile(barrier=False)


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_a_proxy_fence_after_the_barrier_is_a_hazard(schedule, monkeypatch):
    monkeypatch.setenv("NBWGMMA_SIM_SCHEDULE", schedule)
    with pytest.raises(sim.SimHazard, match=r"reads shared memory at 0x[0-9a-f]+ through the async proxy; thread \d+ "
                                            r"\(a shared-memory store at .*\) wrote it and fenced it "
                                            r"\(fence_proxy_async at .*sim_hazard_cases.py:\d+\), but nothing "
                                            r"orders that fence before this read"):
        _run_tile(fence="late")


# --- TMA: a destination read too early, bytes the barrier does not expect -----------------

BOX = (64, 64)
BOX_BYTES = 64 * 64 * 2


def _tma_kernel(wait=True, expect=BOX_BYTES, name=True, twice=False, sync=True):
    @cuda.jit
    def kernel(tmap, out):
        dyn = cuda.shared.array(0, np.uint8)
        bars = cuda.shared.array(1, np.uint64)
        base = dynamic_smem_base(dyn, 1024)
        bar = smem_addr(bars)
        tid = cuda.threadIdx.x
        if tid == 0:
            mbarrier_init(bar, 1)
            if name:
                mbarrier_name(bar, "full", 0)
        if sync:
            cuda.syncthreads()
        if tid == 0:
            mbarrier_arrive_expect_tx(bar, expect)
            tma_load_2d(base, tmap, bar, 0, 0)
            if twice:  # a second box meant for the next 8 KiB, landing on the first
                tma_load_2d(base, tmap, bar, 0, 0)
        if wait:
            mbarrier_wait_parity(bar, 0)
        off = base - smem_addr(dyn)
        out[tid] = int(dyn[off + 2 * tid]) | (int(dyn[off + 2 * tid + 1]) << 8)
    return kernel


def _run_tma(smem=dynamic_smem_bytes(BOX_BYTES), **flags):
    x = (np.arange(64 * 64, dtype=np.uint16) * 7 + 3).reshape(64, 64)
    tm = TensorMap(cuda.to_device(x), BOX, dtype="bf16", swizzle="none")
    out = cuda.to_device(np.full(128, 0xFFFF, np.int32))
    launch(_tma_kernel(**flags), 1, 128, (tm.address, out), smem=smem)
    return out.copy_to_host(), x.reshape(-1)[:128].astype(np.int32)


def test_fixed_tma_kernel_is_exact():
    got, want = _run_tma()
    np.testing.assert_array_equal(got, want)


def test_tma_destination_read_before_its_phase_is_a_hazard():
    """A thread that reads after the copy is issued reads bytes it has not waited for; one that
    reads before, bytes the copy then overwrites unordered: whichever comes first is reported."""
    with pytest.raises(sim.SimHazard, match=r"a shared-memory load at .*sim_hazard_cases.py:\d+\) reads shared memory "
                                            r"at 0x[0-9a-f]+ that a copy issued at .* without having waited for "
                                            r"phase 0 of mbarrier 'full\[0\]'|a TMA load at .*sim_hazard_cases.py:\d+\) "
                                            r"writes shared memory at 0x[0-9a-f]+ that thread \d+ \(a shared-memory "
                                            r"load at .*\) read, with nothing ordering that read before this write"):
        _run_tma(wait=False)


def test_a_copy_past_the_launch_s_dynamic_shared_memory_is_a_hazard():
    """A launch with too little dynamic shared memory (the box needs 8 KiB): out of bounds on the
    GPU, reported at the copy's line, not run on the simulator's larger image."""
    with pytest.raises(sim.SimHazard, match=r"a TMA load .*sim_hazard_cases.py:\d+\) accesses shared memory at "
                                            r"0x[0-9a-f]+, outside what the kernel has: the launch's 5119 bytes of "
                                            r"dynamic shared memory"):
        _run_tma(smem=dynamic_smem_bytes(BOX_BYTES // 2))


def test_a_launch_without_the_alignment_slack_is_a_hazard():
    """The dynamic shared memory's base need not be 1024-aligned (static arrays come first on
    the GPU; the simulator places it 16 bytes past a 1 KiB boundary): a launch of exactly the
    payload, with no room for ``dynamic_smem_base``'s round-up, overruns it; with
    ``dynamic_smem_bytes(payload)`` it fits (the fixed kernel's test)."""
    with pytest.raises(sim.SimHazard, match=r"a TMA load .*sim_hazard_cases.py:\d+\) accesses shared memory at "
                                            r"0x[0-9a-f]+, outside what the kernel has: the launch's 8192 bytes of "
                                            r"dynamic shared memory"):
        _run_tma(smem=BOX_BYTES)


def test_two_copies_of_one_phase_writing_the_same_bytes_is_a_hazard():
    with pytest.raises(sim.SimHazard, match=r"a TMA load at .*sim_hazard_cases.py:\d+\) writes shared memory at "
                                            r"0x[0-9a-f]+ that a copy issued at .*sim_hazard_cases.py:\d+ also "
                                            r"writes, both completing on phase 0 of mbarrier 'full\[0\]'"):
        _run_tma(expect=2 * BOX_BYTES, twice=True, smem=dynamic_smem_bytes(2 * BOX_BYTES))


def test_a_barrier_used_with_nothing_ordering_its_init_first_is_a_hazard():
    """No syncthreads after mbarrier_init: whichever thread runs first, a waiter is reported (before
    the init: used before it; after it in time but unordered: nothing orders the init first)."""
    for _ in range(3):
        with pytest.raises(sim.SimHazard, match=r"(used before mbarrier_init|is used with nothing ordering its "
                                                r"mbarrier_init \(at .*sim_hazard_cases.py:\d+\) before this use)"):
            _run_tma(sync=False)


def test_a_collective_stop_says_where_the_missing_threads_are():
    """The text of a stopped collective lists where the threads that never reached it are (the
    intrinsic each is in, a wait most likely)."""
    from types import SimpleNamespace

    cta = SimpleNamespace(threads={t: SimpleNamespace(where="k.py:7" if t < 70 else None) for t in range(64, 128)})
    text = sim.collective.whereabouts(cta, list(range(64, 128)))
    assert text == "; they are at k.py:7 (thread(s) [64, 65, 66, 67]...); between intrinsics (thread(s) [70, 71, 72, 73]...)"


def test_more_bytes_than_the_phase_expects_is_a_hazard():
    with pytest.raises(sim.SimHazard, match=r"mbarrier 'full\[0\]' at shared address 0x[0-9a-f]+ received 4096 more "
                                            r"transaction bytes than its phase 0 expects"):
        _run_tma(expect=BOX_BYTES - 4096)


def test_fewer_bytes_than_expected_stops_with_the_barrier_state():
    with pytest.raises(sim.SimStopped, match=r"mbarrier 'full\[0\]' at shared address 0x[0-9a-f]+, waiting for "
                                             r"parity 0 \(the completion of a phase of that parity\); its current "
                                             r"phase, not yet complete, is 0 \(parity 0\), with 0 of 1 arrivals "
                                             r"pending and 4096 transaction bytes pending.*the copies that landed "
                                             r"in this phase: 1 x a TMA load \(a \d+x\d+ \w+ map, box \(\d+, \d+\)\) "
                                             r"\(\d+ bytes\) issued at .*sim_hazard_cases.py:\d+"):
        _run_tma(expect=BOX_BYTES + 4096)


@cuda.jit
def _too_many_arrivals(out):
    bars = cuda.shared.array(1, np.uint64)
    bar = smem_addr(bars)
    if cuda.threadIdx.x == 0:
        mbarrier_init(bar, 2)
        mbarrier_arrive_count(bar, 3)
    out[0] = 1


def test_more_arrivals_than_pending_is_a_hazard():
    out = cuda.to_device(np.zeros(1, np.int32))
    with pytest.raises(sim.SimHazard, match=r"3 arrival\(s\) on mbarrier at shared address 0x[0-9a-f]+ whose phase 0 "
                                            r"has only 2 of 2 pending"):
        launch(_too_many_arrivals, 1, 32, (out,))


# --- TMA store: generic stores must be fenced and ordered; the source stays in flight -----


def _store_kernel(fence=True, barrier=True, rewrite_early=False, wait=True, shift=0):
    @cuda.jit
    def kernel(tmap, vals):
        dyn = cuda.shared.array(0, np.uint16)
        base = dynamic_smem_base(dyn, 1024)
        off = (base - smem_addr(dyn)) // 2
        tid = cuda.threadIdx.x
        for i in range(tid, 64 * 64, 128):
            dyn[off + i] = vals[i]
        if fence:
            fence_proxy_async_shared()
        if barrier:
            cuda.syncthreads()
        if tid == 0:
            tma_store_2d(base + shift, tmap, 0, 0)
            bulk_commit_group()
            if rewrite_early:
                dyn[off] = 0
            if wait:
                bulk_wait_group(0)
    return kernel


def _run_store(**flags):
    vals = (np.arange(64 * 64, dtype=np.uint16) * 5 + 1)
    y = cuda.to_device(np.zeros((64, 64), np.uint16))
    tm = TensorMap(y, BOX, dtype="bf16", swizzle="none")
    smem = dynamic_smem_bytes(BOX_BYTES + flags.get("shift", 0))
    launch(_store_kernel(**flags), 1, 128, (tm.address, cuda.to_device(vals)), smem=smem)
    return y.copy_to_host(), vals.reshape(64, 64)


def test_fixed_tma_store_kernel_is_exact():
    got, want = _run_store()
    np.testing.assert_array_equal(got, want)


def test_leaving_the_kernel_with_a_tma_store_in_flight_is_a_hazard():
    """No bulk_wait_group before the kernel ends: the store may still read the CTA's shared
    memory after its release."""
    with pytest.raises(sim.SimHazard, match=r"thread 0 of block \(0, 0\) left the kernel with 1 bulk store\(s\) still "
                                            r"reading shared memory, the last issued at .*sim_hazard_cases.py:\d+: "
                                            r"wait for them with bulk_wait_group_read\(0\)"):
        _run_store(wait=False)


def test_tma_store_of_unfenced_generic_stores_is_a_hazard():
    with pytest.raises(sim.SimHazard, match=r"a TMA store at .* through the async proxy, but thread \d+ \(a "
                                            r"shared-memory store at .*sim_hazard_cases.py:\d+\) wrote it .* issued no "
                                            r"fence_proxy_async"):
        _run_store(fence=False)


def test_tma_store_without_a_barrier_after_the_stores_is_a_hazard():
    """Whichever way the threads interleave, the race is reported: the store reads a write
    nothing orders before it, or bytes no thread has written yet, or a later write hits the
    source the store reads."""
    with pytest.raises(sim.SimHazard, match=r"a TMA store at .* that thread \d+ \(a shared-memory store at "
                                            r".*sim_hazard_cases.py:\d+\) wrote, with nothing ordering that "
                                            r"write before this read|a shared-memory store at .* writes shared memory "
                                            r"at 0x[0-9a-f]+ (while|that) a TMA store of thread 0|a TMA store at "
                                            r".*sim_hazard_cases.py:\d+\) reads shared memory at 0x[0-9a-f]+ that "
                                            r"nothing has written since the launch"):
        _run_store(barrier=False)


def test_rewriting_a_tma_store_source_before_its_read_completes_is_a_hazard():
    with pytest.raises(sim.SimHazard, match=r"a shared-memory store at .* writes shared memory at 0x[0-9a-f]+ while "
                                            r"a TMA store of thread 0 issued at .* still reads it: "
                                            r"bulk_wait_group_read must cover that store"):
        _run_store(rewrite_early=True)


# --- collectives: a warpgroup split between two instructions ------------------------------


@cuda.jit
def _divergent_wait(out):
    acc = acc_zeros(KIND, 8)
    wgmma_commit_group()
    if cuda.threadIdx.x < 64:
        wgmma_wait_group(0)
    else:
        wgmma_wait_group(1)
    acc_store(acc, KIND, out, cuda.threadIdx.x, 0, 0)


def test_warpgroup_threads_at_different_collectives_is_a_hazard():
    out = cuda.to_device(np.zeros((64, 8), np.float32))
    with pytest.raises(sim.SimHazard, match=r"threads of one warpgroup reached different collective instructions: "
                                            r"thread 0 wgmma_wait_group at .*, thread 64 wgmma_wait_group"):
        launch(_divergent_wait, 1, 128, (out,))


@cuda.jit
def _shuffle(out):
    lane = cuda.threadIdx.x % 32
    v = cuda.shfl_xor_sync(0xFFFFFFFF, lane * 10, 1)
    b = cuda.ballot_sync(0xFFFFFFFF, lane % 3 == 0)
    out[cuda.threadIdx.x, 0] = v
    out[cuda.threadIdx.x, 1] = b
    out[cuda.threadIdx.x, 2] = cuda.syncthreads_count(lane < 5)


def test_warp_shuffles_and_votes_run_collectively():
    out = cuda.to_device(np.full((64, 3), -1, np.int64))
    launch(_shuffle, 1, 64, (out,))
    got = out.copy_to_host()
    lanes = np.arange(64) % 32
    np.testing.assert_array_equal(got[:, 0], (lanes ^ 1) * 10)
    assert (got[:, 1] == sum(1 << i for i in range(32) if i % 3 == 0)).all()
    assert (got[:, 2] == 10).all()


@cuda.jit(launch_bounds=(128, 1))
def _bounded(out):
    out[cuda.threadIdx.x] = 1


def test_a_block_above_the_kernel_s_launch_bounds_is_refused():
    from nbwgmma.launch import LaunchError

    out = cuda.to_device(np.zeros(256, np.int32))
    launch(_bounded, 1, 128, (out,))
    with pytest.raises(LaunchError, match="block of 256 threads exceeds this kernel's limit of 128"):
        launch(_bounded, 1, 256, (out,))


@cuda.jit
def _per_warpgroup_barrier(out, bad):
    buf = cuda.shared.array(256, np.int32)
    t = cuda.threadIdx.x
    buf[t] = t * 3
    named_barrier_sync_id(16 if bad else 1 + t // 128, 128)
    out[t] = buf[(t // 128) * 128 + (t + 1) % 128]


def test_a_run_time_barrier_id_orders_each_warpgroup():
    out = cuda.to_device(np.full(256, -1, np.int32))
    launch(_per_warpgroup_barrier, 1, 256, (out, 0))
    t = np.arange(256)
    np.testing.assert_array_equal(out.copy_to_host(), ((t // 128) * 128 + (t + 1) % 128) * 3)
    with pytest.raises(sim.SimHazard, match="named barrier id 16 is outside"):
        launch(_per_warpgroup_barrier, 1, 256, (out, 1))


def _cp_async_kernel(arrive):
    from nbwgmma.intrinsics import cp_async, cp_async_mbarrier_arrive_noinc, cp_async_zfill, ld_shared_f32

    @cuda.jit
    def kernel(src, col, out):
        dyn = cuda.shared.array(0, np.uint8)
        bars = cuda.shared.array(1, np.uint64)
        base = dynamic_smem_base(dyn, 1024)
        bar = smem_addr(bars)
        t = cuda.threadIdx.x
        if t == 0:
            mbarrier_init(bar, 32 + 1)  # the 32 copying threads' arrivals and thread 32's
            mbarrier_name(bar, "scales", 0)
        cuda.syncthreads()
        if t < 32:  # a warp gathers column 1 of src, a row apart, and 30 values of col, 16 bytes a thread
            cp_async(base + 4 * t, src, (t * src.shape[1] + 1) * 4, 4)
            if t < 8:
                cp_async_zfill(base + 128 + 16 * t, col, 16 * t, np.uint32(16 if t < 7 else 8))
            if arrive:
                cp_async_mbarrier_arrive_noinc(bar)
            else:
                mbarrier_arrive_count(bar, 1)
        elif t == 32:
            mbarrier_arrive_count(bar, 1)
        mbarrier_wait_parity(bar, 0)
        if t < 32:
            out[t] = ld_shared_f32(base + 4 * t)
            out[32 + t] = ld_shared_f32(base + 128 + 4 * t)
    return kernel


def _run_cp_async(arrive=True):
    src = np.arange(32 * 4, dtype=np.float32).reshape(32, 4) * 0.5 + 1
    col = np.zeros(32, np.float32)
    col[:30] = np.arange(30, dtype=np.float32) * 3 - 7
    out = cuda.to_device(np.full(64, np.nan, np.float32))
    col_dev = cuda.to_device(np.concatenate([col[:30], np.full(2, 99, np.float32)]))  # past the 30: not read
    launch(_cp_async_kernel(arrive), 1, 64, (cuda.to_device(src), col_dev, out), smem=dynamic_smem_bytes(1024))
    return out.copy_to_host(), src, col


def test_cp_async_copies_land_on_their_barrier():
    got, src, col = _run_cp_async()
    np.testing.assert_array_equal(got[:32], src[:, 1])  # 4-byte copies, a row apart
    np.testing.assert_array_equal(got[32:], col)  # 16-byte vectors, the last one half zero-filled


def test_cp_async_data_read_without_the_copies_arrival_is_a_hazard():
    with pytest.raises(sim.SimHazard, match=r"reads shared memory at 0x[0-9a-f]+ that a copy issued at .* writes, "
                                            r"before the cp.async's arrival \(thread 0 has not called "
                                            r"cp_async_mbarrier_arrive_noinc after it\)$"):
        _run_cp_async(arrive=False)


def _prefetching_kernel():
    from nbwgmma.intrinsics import prefetch_l1

    @cuda.jit
    def kernel(v, byte, out):
        t = cuda.threadIdx.x
        if t == 0:
            prefetch_l1(v, byte)  # a cache hint: no value changes
        cuda.syncthreads()
        out[t] = v[t] * 2
    return kernel


def test_prefetch_l1_changes_nothing_and_a_byte_outside_the_array_is_reported():
    v = np.arange(32, dtype=np.float32) - 5
    out = cuda.to_device(np.full(32, np.nan, np.float32))
    launch(_prefetching_kernel(), 1, 32, (cuda.to_device(v), 127, out))  # the last byte
    np.testing.assert_array_equal(out.copy_to_host(), v * 2)
    with pytest.raises(sim.SimHazard, match=r"prefetch_l1 of byte 128 of an array of 128 bytes"):
        launch(_prefetching_kernel(), 1, 32, (cuda.to_device(v), 128, out))


def _bulk_from_array_kernel():
    from nbwgmma.intrinsics import bulk_copy_g2s_array, ld_shared_f32, st_shared_f32

    @cuda.jit
    def kernel(src, offset, nbytes, out):
        dyn = cuda.shared.array(0, np.uint8)
        bars = cuda.shared.array(1, np.uint64)
        base = dynamic_smem_base(dyn, 1024)
        bar = smem_addr(bars)
        t = cuda.threadIdx.x
        if t == 0:
            mbarrier_init(bar, 1)
            mbarrier_name(bar, "scales", 0)
        cuda.syncthreads()
        if t == 0:  # a value stored beside the copy, ordered before the consumers by the arrival
            st_shared_f32(base + 512, np.float32(-3.5))
            mbarrier_arrive_expect_tx(bar, nbytes)
            bulk_copy_g2s_array(base, src, offset, nbytes, bar)
        mbarrier_wait_parity(bar, 0)
        out[t] = ld_shared_f32(base + 4 * t) if 4 * t < nbytes else ld_shared_f32(base + 512)
    return kernel


def test_a_bulk_copy_from_an_array_lands_on_its_barrier_and_stays_inside_it():
    """``bulk_copy_g2s_array``: a column of a column-major array (the block scales' layout) at a byte
    offset, completing a barrier's transaction bytes; a copy running past the array's end is
    reported, never read."""
    src = np.asfortranarray(np.arange(64 * 3, dtype=np.float32).reshape(64, 3) - 20)  # columns contiguous
    out = cuda.to_device(np.full(32, np.nan, np.float32))
    kern = _bulk_from_array_kernel()
    launch(kern, 1, 32, (cuda.to_device(src), 64 * 4 + 32, 64, out), smem=dynamic_smem_bytes(1024))
    got = out.copy_to_host()
    np.testing.assert_array_equal(got[:16], src[8:24, 1])  # column 1 from its row 8
    np.testing.assert_array_equal(got[16:], np.full(16, -3.5, np.float32))
    with pytest.raises(sim.SimHazard, match="runs outside the array"):
        launch(kern, 1, 32, (cuda.to_device(src), 2 * 64 * 4 + 224, 64, out), smem=dynamic_smem_bytes(1024))


def _handoff_kernel(ordered):
    from nbwgmma.intrinsics import ld_shared_f32, st_shared_f32

    @cuda.jit
    def kernel(out):
        bars = cuda.shared.array(1, np.uint64)
        words = cuda.shared.array(32, np.float32)
        bar, w = smem_addr(bars), smem_addr(words)
        t = cuda.threadIdx.x
        if t == 0:
            mbarrier_init(bar, 1)
        cuda.syncthreads()
        if t == 0:  # a value handed to the warp through shared memory and an mbarrier phase
            if ordered:
                st_shared_f32(w, np.float32(2.5))
                mbarrier_arrive_count(bar, 1)
            else:
                mbarrier_arrive_count(bar, 1)
                st_shared_f32(w, np.float32(2.5))
        mbarrier_wait_parity(bar, 0)
        v = ld_shared_f32(w)
        while v != 2.5:  # until the store is seen (read after it, whatever order the threads ran in)
            v = ld_shared_f32(w)
        out[t] = v
    return kernel


def test_a_generic_store_read_by_another_thread_needs_ordering():
    """A store a thread makes before its mbarrier arrival is read by the waiting threads; made
    after it, nothing orders it before their reads: a hazard, not whatever value happened to be
    there (the readers read until they see the value, so some read comes after the store)."""
    out = cuda.to_device(np.full(32, np.nan, np.float32))
    launch(_handoff_kernel(True), 1, 32, (out,))
    np.testing.assert_array_equal(out.copy_to_host(), np.full(32, 2.5, np.float32))
    with pytest.raises(sim.SimHazard, match="nothing ordering that write before this read"):
        launch(_handoff_kernel(False), 1, 32, (out,))


def _register_split(dec, inc):
    from nbwgmma.intrinsics import setmaxnreg_dec, setmaxnreg_inc

    @cuda.jit(launch_bounds=(384, 1))
    def kernel(out):
        t = cuda.threadIdx.x
        if t < 128:
            setmaxnreg_dec(dec)
        else:
            setmaxnreg_inc(inc)
        out[t] = t
    return kernel


def test_a_register_split_the_launch_holds_runs():
    out = cuda.to_device(np.full(384, -1, np.int32))
    launch(_register_split(40, 232), 1, 384, (out,))  # 128 x 40 + 256 x 232 = 168 x 384
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(384))


def test_a_register_split_past_the_launch_waits_forever():
    out = cuda.to_device(np.full(384, -1, np.int32))
    with pytest.raises(sim.SimStopped, match=r"setmaxnreg_inc\(232\) waits for registers the CTA's pool never frees: "
                                             r"the launch allocated 168 per thread \(64512 for 384 threads\)"):
        launch(_register_split(48, 232), 1, 384, (out,))  # 128 x 48 + 256 x 232 > 168 x 384


@cuda.jit(launch_bounds=(384, 1))
def _producer_keeping_its_registers(out):
    from nbwgmma.intrinsics import setmaxnreg_inc

    bars = cuda.shared.array(1, np.uint64)
    bar = smem_addr(bars)
    t = cuda.threadIdx.x
    if t == 0:
        mbarrier_init(bar, 1)
    cuda.syncthreads()
    if t < 128:  # no setmaxnreg_dec: the consumers' increase never gets its registers
        mbarrier_wait_parity(bar, 0)
    else:
        setmaxnreg_inc(232)
        if t == 128:
            mbarrier_arrive_count(bar, 1)
    out[t] = t


def test_a_hang_from_the_register_split_leads_with_the_split():
    """The producer waits first (for an arrival the consumers would make), but the cause is the
    consumers' increase: the report leads with it."""
    out = cuda.to_device(np.full(384, -1, np.int32))
    with pytest.raises(sim.SimStopped, match=r"hangs\): block \(0, 0, 0\) thread 2\d\d .*sim_hazard_cases.py:\d+: "
                                             r"setmaxnreg_inc\(232\) waits for registers .*Waiting elsewhere: at "
                                             r".*sim_hazard_cases.py:\d+ \(threads 0, 1, 2, 3 and 124 more\)"):
        launch(_producer_keeping_its_registers, 1, 384, (out,))


# --- the intrinsics' typing rules, applied to simulated calls as the compiler applies them -----


@cuda.jit
def _kind_of_another_accumulator(out):
    acc = acc_zeros(KIND, 64)
    wgmma_fence()
    acc = wgmma_mma_async(acc, 0, 0, "s32.s8.s8")  # an f32 fragment given to an s32 kind
    wgmma_commit_group()
    wgmma_wait_group(0)


@cuda.jit
def _fp8_transposed(out):
    acc = acc_zeros("f32.e4m3.e4m3", 64)
    wgmma_fence()
    acc = wgmma_mma_async(acc, 0, 0, "f32.e4m3.e4m3", trans_b=1)  # transposes: 16-bit inputs only
    wgmma_commit_group()
    wgmma_wait_group(0)


@cuda.jit
def _illegal_n(out):
    acc_zeros("s32.s8.s8", 12)


@cuda.jit
def _store_to_a_vector(out):
    acc_store(acc_zeros(KIND, 8), KIND, out, cuda.threadIdx.x, 0, 0)  # out is 1-D


@cuda.jit
def _fp8_store_to_f32(out):
    acc_store_fp8(acc_zeros(KIND, 8), KIND, out, cuda.threadIdx.x, 0, 0, "e4m3")  # out is f64, not fp8 codes


@cuda.jit
def _add_fragments_of_two_widths(out):
    from nbwgmma.intrinsics import acc_add

    acc_add(acc_zeros(KIND, 64)[:16], acc_zeros(KIND, 64))  # 16 values and 32


@pytest.mark.parametrize("kernel, message", [
    (_add_fragments_of_two_widths, r"acc_add: both fragments must have the same type; got UniTuple\(float32 x 16\) "
                                   r"and UniTuple\(float32 x 32\)"),
    (_store_to_a_vector, r"acc_store: 'out' must be a 2-D array; got an array of shape \(4,\)"),
    (_fp8_store_to_f32, r"acc_store_fp8: 'out' must be a uint8 array \(fp8 codes\); got float64"),
    (_kind_of_another_accumulator, "wgmma_mma_async: a s32.s8.s8 accumulator holds int32 registers; got a tuple of "
                                   "float32"),
    (_fp8_transposed, "wgmma_mma_async: imm-trans-a/b exist only for f16/bf16 inputs; got trans with f32.e4m3.e4m3"),
    (_illegal_n, r"acc_zeros: s32.s8.s8 allows N in \[8, 16, .*\]; got 12")])
def test_a_call_the_compiler_refuses_is_refused_in_the_simulator_too(kernel, message):
    """The typing error the compiled kernel raises, at the kernel's line, before the simulator
    computes anything (it ran these and returned numbers)."""
    from nbwgmma.errors import NbwgmmaTypingError

    with pytest.raises(NbwgmmaTypingError, match=r"^\S*sim_hazard_cases.py:\d+: " + message):
        launch(kernel, 1, 128, (cuda.to_device(np.zeros(4)),))


def test_tma_element_strides_are_refused_as_not_modeled():
    """The simulator's box model reads every element: a map with element strides says so instead
    of copying the wrong elements."""
    x = cuda.to_device(np.arange(64 * 64, dtype=np.uint16).reshape(64, 64))
    tm = TensorMap(x, (64, 64), dtype="bf16", swizzle="128B", element_strides=(2, 1))
    out = cuda.to_device(np.zeros(128, np.int32))
    ex = load_example("debug_wait_broken_expect_tx")
    with pytest.raises(sim.SimError, match=r"does not model TMA element strides other than 1; the map has "
                                           r"element_strides=\(2, 1\)"):
        launch(ex.broken_expect_tx, 1, 128, (tm.address, out), smem=dynamic_smem_bytes(ex.BOX))


def test_a_copy_past_its_stage_races_the_next_stage_s_copy():
    """The SwiGLU example with the up weight's box loaded 1 KiB past its place: its last KiB
    lands in the next stage, which the producer fills next while both copies are in flight (the
    simulator lands copies when issued: it was a wrong answer, 6400 off, with no report)."""
    mod = _edited_example("gemm_8_swiglu", "slot + A_BYTES + W_BYTES, tmap_u", "slot + A_BYTES + W_BYTES + 1024, tmap_u",
                          "load")
    with pytest.raises(sim.SimHazard, match=r"a TMA load at .*gemm_8_swiglu.py:\d+\) writes shared memory at 0x[0-9a-f]+ "
                                            r"that a copy issued at .*gemm_8_swiglu.py:\d+ also writes, and nothing "
                                            r"tells this thread that copy has landed"):
        mod.simulate()


@cuda.jit
def _read_before_any_write(out):
    sm = cuda.shared.array(64, np.float32)
    t = cuda.threadIdx.x
    sm[t] = 1.0
    cuda.syncthreads()
    out[t] = sm[t + 32]  # NEVER WRITTEN: threads 0-31 wrote sm[0:32]


def test_shared_memory_nothing_wrote_reads_as_poison_not_zeros():
    """Shared memory holds what an earlier kernel left: a thread's load of bytes nothing wrote
    gives NaN in the simulator (zeros would be a plausible answer to a broken kernel)."""
    out = cuda.to_device(np.zeros(32, np.float32))
    launch(_read_before_any_write, 1, 32, (out,))
    assert np.isnan(out.copy_to_host()).all()


def test_a_tma_store_of_bytes_nothing_wrote_is_a_hazard():
    """A copy or a wgmma that reads bytes nothing wrote since the launch is reported: the TMA
    store kernel storing a box 128 bytes past the block its threads wrote."""
    with pytest.raises(sim.SimHazard, match=r"a TMA store at .*sim_hazard_cases.py:\d+\) reads shared memory at "
                                            r"0x[0-9a-f]+ that nothing has written since the launch"):
        _run_store(shift=128)


@cuda.jit
def _static_beside_dynamic(out):
    sm = cuda.shared.array(1024, np.float32)  # 4 KiB of static shared memory
    t = cuda.threadIdx.x
    sm[t] = 1.0
    if t == 0:
        out[0] = sm[0]  # (its own store)


def test_static_arrays_count_against_the_block_s_shared_memory():
    """The launch's dynamic bytes fit alone; with the kernel's static array they do not (the
    GPU refuses the launch)."""
    out = cuda.to_device(np.zeros(1, np.float32))
    launch(_static_beside_dynamic, 1, 32, (out,), smem=200 * 1024)
    with pytest.raises(sim.SimError, match=r"the static shared array at .*sim_hazard_cases.py:\d+ \(4096 B; 4096 B "
                                           r"of static arrays with it\) and the launch's 230000 B of dynamic shared "
                                           r"memory exceed the 232448 B"):
        launch(_static_beside_dynamic, 1, 32, (out,), smem=230000)


@pytest.mark.parametrize("schedule", ["fifo"] + [f"random:{i}" for i in range(1, 9)])
def test_two_warpgroups_sharing_a_named_barrier_is_a_hazard_in_any_order(schedule, monkeypatch):
    """The SwiGLU example's first part stored as consumer 0's by both consumers: both use named
    barrier 1 with 128 threads. Whichever warps the simulated order lets complete a generation,
    the next arrival by another warp, unordered, is reported, or what the mix leads to (a store of
    a block its warpgroup has not written yet, a hang); some orders ran exact before."""
    monkeypatch.setenv("NBWGMMA_SIM_SCHEDULE", schedule)
    mod = _edited_example("gemm_8_swiglu", "tma_store_part(h0, c0, ct, cw, tmap_o, col0, row0)",
                          "tma_store_part(h0, c0, ct, 0, tmap_o, col0, row0)", "epilogue")
    with pytest.raises((sim.SimHazard, sim.SimStopped), match=r"gemm_8_swiglu.py:\d+"):
        mod.simulate()


@pytest.mark.parametrize("schedule", ["fifo", "random:1", "random:2"])
def test_one_c_block_for_both_parts_is_a_hazard_that_says_two(schedule, monkeypatch):
    """The SwiGLU example's second 64-column part staged in the first part's C block: the block is
    written again while the first part's TMA store still reads it. Reported at the example's
    lines, with the hint that tma_store_part wants two blocks used in turn."""
    monkeypatch.setenv("NBWGMMA_SIM_SCHEDULE", schedule)
    mod = _edited_example("gemm_8_swiglu", "tma_store_part(h1, c1, ct, cw, tmap_o, col0 + 64, row0)",
                          "tma_store_part(h1, c0, ct, cw, tmap_o, col0 + 64, row0)", "epilogue")
    with pytest.raises(sim.SimHazard, match=r"gemm_8_swiglu.py:\d+.*two, used in turn"):
        mod.simulate()


@cuda.jit
def _two_groups_on_one_id(out):
    from nbwgmma.intrinsics import named_barrier_sync

    t = cuda.threadIdx.x
    named_barrier_sync(1, 128)  # both warpgroups of the block on id 1 of 128 threads
    out[t] = t


@pytest.mark.parametrize("schedule", ["fifo", "random:1", "random:2", "random:3"])
def test_a_named_barrier_completed_by_another_group_first_is_a_hazard(schedule, monkeypatch):
    monkeypatch.setenv("NBWGMMA_SIM_SCHEDULE", schedule)
    with pytest.raises(sim.SimHazard, match=r"sim_hazard_cases.py:\d+: named barrier 1 \(128 threads\) was last "
                                            r"completed by other threads .* with nothing ordering that before this arrival"):
        launch(_two_groups_on_one_id, 1, 256, (cuda.to_device(np.zeros(256, np.int32)),))


@pytest.mark.parametrize("schedule", ["fifo", "random:1", "random:2"])
def test_a_cta_leaving_its_cluster_before_its_peers_is_a_hazard(schedule, monkeypatch):
    """The fused example without its cluster barrier at the end: a peer's last releases (arrivals
    on this CTA's "empty" barriers) are ordered before nothing this CTA does, so it may exit while
    they are in flight (it ran exact in every order before)."""
    monkeypatch.setenv("NBWGMMA_SIM_SCHEDULE", schedule)
    mod = _edited_example("gemm_5_fused_epilogue", "        pipe.teardown()  #", "        pass  #", "teardown")
    with pytest.raises(sim.SimHazard, match=r"(exits \(its threads have all returned\) while nothing orders before that "
                                            r"the access of thread \d+ of CTA rank \d|whose threads have all "
                                            r"returned).*pipe.teardown"):
        mod.simulate()


def test_a_cta_leaving_with_copies_nobody_waited_for_is_a_hazard():
    """The TMA pipeline example filling every stage up front even when K has fewer k-blocks: the
    extra copies land after nobody waits for them (it ran exact before)."""
    mod = _edited_example("gemm_2_tma_pipeline", "for s in range(min(STAGES, nk)):", "for s in range(STAGES):",
                          "prologue")
    with pytest.raises(sim.SimHazard, match=r"CTA rank 0 exits \(its threads have all returned\) with a copy into its "
                                            r"shared memory, issued at .*gemm_2_tma_pipeline.py:\d+, that none of its "
                                            r"threads saw complete"):
        mod.main()


@cuda.jit
def _cp_async_never_tied(src):
    from nbwgmma.intrinsics import cp_async

    dyn = cuda.shared.array(0, np.uint8)
    base = dynamic_smem_base(dyn, 1024)
    cp_async(base + 4 * cuda.threadIdx.x, src, 4 * cuda.threadIdx.x, 4)  # UNTIED: no arrival, no wait


def test_a_thread_leaving_with_cp_async_copies_untied_is_a_hazard():
    import inspect

    src, first = inspect.getsourcelines(_cp_async_never_tied.py_func)
    line = first + next(i for i, s in enumerate(src) if "UNTIED" in s)
    with pytest.raises(sim.SimHazard, match=rf"left the kernel with 1 cp.async copies that no "
                                            rf"cp_async_mbarrier_arrive_noinc tied to a barrier .*sim_hazard_cases.py:{line}"):
        launch(_cp_async_never_tied, 1, 32, (cuda.to_device(np.arange(32, dtype=np.float32)),),
               smem=dynamic_smem_bytes(1024))


# --- from a mutation campaign over the kit's blocks ------------------------------------------


@cuda.jit
def _one_id_two_counts(out):
    from nbwgmma.intrinsics import named_barrier_sync

    t = cuda.threadIdx.x
    if t >= 128:
        named_barrier_sync(5, 128)  # warpgroup 1 alone, as a warpgroup_sync on id 5 would
    named_barrier_sync(5, 256)  # both warpgroups, as StreamFixup's count on id 5
    out[t] = 1


@pytest.mark.parametrize("schedule", ["fifo", "random:1", "random:2", "random:3"])
def test_one_named_barrier_id_at_two_counts_unordered_is_a_hazard(schedule, monkeypatch):
    """One id, the GPU's one barrier, used with 128 threads by one warpgroup while the other may
    already wait on it with 256: reported whichever runs first (where the 128 completed first,
    the simulator made a fresh barrier at the new count and lost the id's history: exact)."""
    monkeypatch.setenv("NBWGMMA_SIM_SCHEDULE", schedule)
    with pytest.raises(sim.SimHazard, match=r"named barrier 5 (\(\d+ threads\) was last completed by other threads|is "
                                            r"in use with \d+ threads; this call says \d+)"):
        launch(_one_id_two_counts, 1, 256, (cuda.to_device(np.zeros(256, np.int32)),))


@cuda.jit
def _init_ordered_by_setmaxnreg(out):
    from nbwgmma.intrinsics import mbarrier_arrive, setmaxnreg_dec

    bars = cuda.shared.array(1, np.uint64)
    bar = smem_addr(bars)
    t = cuda.threadIdx.x
    if t == 0:
        mbarrier_init(bar, 96)
    setmaxnreg_dec(40)  # a register operation of the warpgroup: it orders no memory between warps
    if t >= 32:
        mbarrier_arrive(bar)
        mbarrier_wait_parity(bar, 0)
    out[t] = 1


def test_setmaxnreg_orders_no_memory():
    """The warpgroup's setmaxnreg joined its threads' clocks in the simulator, so an mbarrier
    init ordered by it alone ran without a report (the epilogue warps' setup without its
    syncthreads)."""
    with pytest.raises(sim.SimHazard, match=r"is used with nothing ordering its mbarrier_init"):
        launch(_init_ordered_by_setmaxnreg, 1, 128, (cuda.to_device(np.zeros(128, np.int32)),))


@cuda.jit
def _read_then_overwritten(out, mode):
    buf = cuda.shared.array(64, np.int32)
    t = cuda.threadIdx.x
    buf[t] = t
    cuda.syncthreads()
    if mode == 0:
        if t == 40:
            buf[3] = 99  # OVERWRITES what thread 3 reads, unordered
        if t == 3:
            out[0] = buf[3]
    else:
        if t == 3:
            out[0] = buf[3]
        if t == 40:
            buf[3] = 99  # OVERWRITES what thread 3 read, unordered


@pytest.mark.parametrize("mode", [0, 1])
def test_a_store_over_another_thread_s_unordered_read_is_a_hazard(mode):
    """A load by one thread, then a store to the same bytes by another with nothing ordering the
    load first (the epilogue warps releasing their C block before reading it ran exact)."""
    with pytest.raises(sim.SimHazard, match=r"thread 40 \(a shared-memory store at .*sim_hazard_cases.py:\d+\) writes "
                                            r"shared memory at 0x[0-9a-f]+ that thread 3 \(a shared-memory load at "
                                            r".*sim_hazard_cases.py:\d+\) read, with nothing ordering that read before"):
        launch(_read_then_overwritten, 1, 64, (cuda.to_device(np.zeros(1, np.int32)), np.int32(mode)))


@cuda.jit
def _every_thread_stores_the_flag(out, same):
    from nbwgmma.intrinsics import ld_shared_f32, st_shared_f32

    buf = cuda.shared.array(2, np.float32)
    t = cuda.threadIdx.x
    v = np.float32(7.0) if same else np.float32(t)
    buf[0] = v  # every thread, unordered
    st_shared_f32(smem_addr(buf) + 4, v)  # the same through the intrinsic
    cuda.syncthreads()
    if t == 0:
        out[0] = buf[0]
        out[1] = ld_shared_f32(smem_addr(buf) + 4)


def test_unordered_stores_of_one_value_are_not_reported_of_two_are():
    """Threads storing the same bytes unordered: when every one stores the same value (a flag),
    the result is that value in every order, so the run is exact; when the values differ, which
    stays is up to the order, a hazard naming both stores' lines."""
    out = cuda.to_device(np.full(2, -1, np.float32))
    launch(_every_thread_stores_the_flag, 1, 64, (out, np.int32(1)))
    assert out.copy_to_host().tolist() == [7.0, 7.0]
    with pytest.raises(sim.SimHazard, match=r"thread \d+ \(a shared-memory store at .*sim_hazard_cases.py:\d+\) "
                                            r"writes shared memory at 0x[0-9a-f]+ that thread \d+ \(a shared-memory "
                                            r"store at .*sim_hazard_cases.py:\d+\) also wrote, with nothing ordering"):
        launch(_every_thread_stores_the_flag, 1, 64, (cuda.to_device(np.zeros(2, np.float32)), np.int32(0)))


@cuda.jit
def _one_id_two_counts_in_turn(out):
    from nbwgmma.intrinsics import mbarrier_wait_parity_timeout, named_barrier_sync

    bars = cuda.shared.array(1, np.uint64)
    bar = smem_addr(bars)
    t = cuda.threadIdx.x
    if t == 0:
        mbarrier_init(bar, 1)
    cuda.syncthreads()
    if t < 128:
        mbarrier_wait_parity_timeout(bar, 0, 1000)  # nobody arrives: warpgroup 0 comes late, unordered
    else:
        named_barrier_sync(5, 128)  # warpgroup 1's generation on id 5 completes first
    named_barrier_sync(5, 256)
    out[t] = 1


def test_one_named_barrier_id_keeps_its_history_across_counts():
    """Warpgroup 1's 128-thread generation on id 5 completes before warpgroup 0 arrives there at
    256, with nothing ordering the two: the id is one barrier on the GPU, whatever the count."""
    with pytest.raises(sim.SimHazard, match=r"thread \d+ \(warp [0-3]\) at .*sim_hazard_cases.py:\d+: named barrier 5 "
                                            r"\(256 threads\) was last completed by other threads"):
        launch(_one_id_two_counts_in_turn, 1, 256, (cuda.to_device(np.zeros(256, np.int32)),))


@cuda.jit
def _aligned_cluster_barrier_by_one_lane(out):
    from nbwgmma.intrinsics import cluster_sync

    t = cuda.threadIdx.x
    if t < 32 and t != 0:
        return  # the warp's other lanes leave: lane 0 alone reaches the barrier below
    cluster_sync()  # ALIGNED: every thread of the warp must execute it
    out[t] = t


def test_an_aligned_cluster_barrier_needs_the_whole_warp():
    """The library's closing cluster barrier is the unaligned form because the producer warp's
    idle lanes have returned; the aligned form there is undefined on the GPU (it ran exact)."""
    with pytest.raises(sim.SimStopped, match=r"barrier.cluster.aligned is collective over the warp; thread\(s\) "
                                             r"\[1, 2, 3, 4, 5, 6, 7, 8\] exited without reaching it"):
        launch(_aligned_cluster_barrier_by_one_lane, 2, 64, (cuda.to_device(np.zeros(64, np.int32)),), cluster=(2, 1, 1))


@cuda.jit
def _shared_index_past_the_end(out):
    sm = cuda.shared.array(8, np.float32)
    t = cuda.threadIdx.x
    sm[t] = 1.0  # PAST THE END for threads 8 and up


def test_a_shared_array_indexed_past_its_end_names_the_line():
    """A numpy IndexError from inside the simulator before; a hazard at the kernel's line now."""
    import inspect

    src, first = inspect.getsourcelines(_shared_index_past_the_end.py_func)
    line = first + next(i for i, s in enumerate(src) if "PAST THE END" in s)
    with pytest.raises(sim.SimHazard, match=rf"thread 8 at .*sim_hazard_cases.py:{line}: a shared array of shape \(8,\) "
                                            rf"indexed with 8: index 8 is out of bounds"):
        launch(_shared_index_past_the_end, 1, 32, (cuda.to_device(np.zeros(1, np.float32)),))


# --- from a hunt for silent runs and bare errors ---------------------------------------------


def _tagged_line(kernel, tag):
    """The source line of ``kernel`` whose text holds ``tag``."""
    import inspect

    src, first = inspect.getsourcelines(kernel.py_func)
    return first + next(i for i, s in enumerate(src) if tag in s)


@cuda.jit
def _store_over_a_copy_in_flight(src, out, who):
    from nbwgmma.intrinsics import bulk_copy_g2s_array, ld_shared_f32, st_shared_f32

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
    cuda.syncthreads()  # orders the issue before the store, not the copy's landing
    if t == who:
        st_shared_f32(base + 4 * 5, np.float32(-1.0))  # OVER THE COPY: its phase not waited for
    mbarrier_wait_parity(bar, 0)
    cuda.syncthreads()
    out[t] = ld_shared_f32(base + 4 * t)


@pytest.mark.parametrize("who", [0, 7])
def test_a_store_over_bytes_a_copy_in_flight_writes_is_a_hazard(who):
    """The copy's async-proxy write and the store are unordered until the phase is observed (it
    ran silently, the store's value or the copy's left at random on the GPU)."""
    line = _tagged_line(_store_over_a_copy_in_flight, "OVER THE COPY")
    with pytest.raises(sim.SimHazard, match=rf"thread {who} \(st.shared.f32 at .*sim_hazard_cases.py:{line}\) stores "
                                            rf"to shared memory at 0x[0-9a-f]+ that a copy issued at .*also writes, "
                                            rf"without having waited for phase 0 of"):
        launch(_store_over_a_copy_in_flight, 1, 32, (cuda.to_device(np.arange(32, dtype=np.float32)),
                                                     cuda.to_device(np.zeros(32, np.float32)), np.int32(who)),
               smem=dynamic_smem_bytes(1024))


@cuda.jit
def _store_over_own_cp_async(src, out):
    from nbwgmma.intrinsics import cp_async, cp_async_mbarrier_arrive_noinc, ld_shared_f32, st_shared_f32

    dyn = cuda.shared.array(0, np.uint8)
    bars = cuda.shared.array(1, np.uint64)
    base = dynamic_smem_base(dyn, 1024)
    bar = smem_addr(bars)
    t = cuda.threadIdx.x
    if t == 0:
        mbarrier_init(bar, 32)
    cuda.syncthreads()
    cp_async(base + 4 * t, src, 4 * t, 4)
    st_shared_f32(base + 4 * t, np.float32(-1.0))  # OVER OWN CP.ASYNC: it has not landed
    cp_async_mbarrier_arrive_noinc(bar)
    mbarrier_wait_parity(bar, 0)
    out[t] = ld_shared_f32(base + 4 * t)


def test_a_store_over_the_thread_s_own_cp_async_in_flight_is_a_hazard():
    line = _tagged_line(_store_over_own_cp_async, "OVER OWN CP.ASYNC")
    with pytest.raises(sim.SimHazard, match=rf"\(st.shared.f32 at .*sim_hazard_cases.py:{line}\) stores to shared "
                                            rf"memory at 0x[0-9a-f]+ that a copy issued at .* also writes, before the "
                                            rf"cp.async's arrival"):
        launch(_store_over_own_cp_async, 1, 32, (cuda.to_device(np.arange(32, dtype=np.float32)),
                                                 cuda.to_device(np.zeros(32, np.float32))),
               smem=dynamic_smem_bytes(1024))


@cuda.jit
def _cta_form_on_a_peer(out, mode):
    from nbwgmma.intrinsics import cluster_ctarank, cluster_sync, ldmatrix, mapa, mbarrier_arrive, st_shared_v4_b32

    a = cuda.shared.array(256, np.uint16)
    bars = cuda.shared.array(1, np.uint64)
    t = cuda.threadIdx.x
    r = cluster_ctarank()
    bar = smem_addr(bars)
    for i in range(t, 256, 32):
        a[i] = i
    if t == 0:
        mbarrier_init(bar, 1)
    cluster_sync()
    if mode == 0 and r == 1 and t == 0:
        mbarrier_arrive(mapa(bar, 0))  # PEER: a .shared::cta arrival on rank 0's barrier
    if mode == 1:
        out[r, t] = ldmatrix(mapa(smem_addr(a) + (t % 8) * 16, r ^ 1), 1)[0]  # PEER: .shared::cta rows
    if mode == 2 and t == 0:
        st_shared_v4_b32(mapa(smem_addr(a), r ^ 1), np.uint32(1), np.uint32(2), np.uint32(3), np.uint32(4))  # PEER
    cluster_sync()


@pytest.mark.parametrize("mode, op, use", [(0, "mbarrier_arrive", "use mbarrier_arrive_cluster"),
                                           (1, "ldmatrix", "it has no form for a peer's"),
                                           (2, "st_shared_v4_b32", "use st_shared_cluster_u32")])
def test_a_cta_space_instruction_given_a_peer_s_address_is_a_hazard(mode, op, use):
    """A .shared::cta instruction reaches the executing CTA's shared memory only (they acted on
    the peer before)."""
    line = _tagged_line(_cta_form_on_a_peer, "PEER") + [0, 2, 4][mode]
    with pytest.raises(sim.SimHazard, match=rf"\({op} at .*sim_hazard_cases.py:{line}\): shared address 0x[0-9a-f]+ "
                                            rf"is CTA rank \d's \(a mapa address\), but {op} is a .shared::cta "
                                            rf"instruction.*; {use}"):
        launch(_cta_form_on_a_peer, 2, 32, (cuda.to_device(np.zeros((2, 32), np.uint32)), np.int32(mode)),
               cluster=(2, 1, 1))


@cuda.jit
def _matrix_rows_off_16(out, store):
    from nbwgmma.intrinsics import ldmatrix, stmatrix

    a = cuda.shared.array(1024, np.uint16)
    lane = cuda.threadIdx.x
    for i in range(lane, 1024, 32):
        a[i] = i
    cuda.syncthreads()
    if store:
        stmatrix(smem_addr(a) + (lane % 8) * 32 + 4, (np.uint32(lane),))  # ROWS OFF 16
    else:
        out[lane] = ldmatrix(smem_addr(a) + (lane % 8) * 32 + 8, 1)[0]  # ROWS OFF 16


@pytest.mark.parametrize("store", [0, 1])
def test_matrix_rows_not_16_byte_aligned_are_a_hazard(store):
    op = "stmatrix" if store else "ldmatrix"
    line = _tagged_line(_matrix_rows_off_16, "ROWS OFF 16") + 2 * (1 - store)
    with pytest.raises(sim.SimHazard, match=rf"\({op} at .*sim_hazard_cases.py:{line}\): lane 0's row address "
                                            rf"0x[0-9a-f]+ is not 16-byte aligned"):
        launch(_matrix_rows_off_16, 1, 32, (cuda.to_device(np.zeros(32, np.uint32)), np.int32(store)))


@cuda.jit
def _bulk_store(dst, nbytes, shift):
    from nbwgmma.intrinsics import bulk_copy_s2g, st_shared_f32

    dyn = cuda.shared.array(0, np.uint8)
    base = dynamic_smem_base(dyn, 1024)
    t = cuda.threadIdx.x
    st_shared_f32(base + 4 * t, np.float32(t))
    fence_proxy_async_shared()
    cuda.syncthreads()
    if t == 0:
        bulk_copy_s2g(dst, base + shift, nbytes)  # BULK
        bulk_commit_group()
        bulk_wait_group(0)


@pytest.mark.parametrize("nbytes, shift, goff", [(20, 0, 0), (32, 4, 0), (32, 0, 4)])
def test_a_bulk_copy_off_16_bytes_is_a_hazard(nbytes, shift, goff):
    host = np.zeros(64, np.float32)
    line = _tagged_line(_bulk_store, "BULK")
    with pytest.raises(sim.SimHazard, match=rf"at .*sim_hazard_cases.py:{line}: bulk_copy_s2g \(cp.async.bulk\) needs "
                                            rf"16-byte aligned addresses and a size in 16-byte steps; got {nbytes} "):
        launch(_bulk_store, 1, 32, (np.uint64(host.ctypes.data + goff), np.int32(nbytes), np.int32(shift)),
               smem=dynamic_smem_bytes(1024))


@cuda.jit
def _tma_store_from(tmap, shift):
    from nbwgmma.intrinsics import st_shared_f32

    dyn = cuda.shared.array(0, np.uint8)
    base = dynamic_smem_base(dyn, 1024)
    t = cuda.threadIdx.x
    for i in range(t, 64 * 64 // 2 + 64, 32):
        st_shared_f32(base + 4 * i, np.float32(i))
    fence_proxy_async_shared()
    cuda.syncthreads()
    if t == 0:
        tma_store_2d(base + shift, tmap, 0, 0)  # BOX
        bulk_commit_group()
        bulk_wait_group(0)


@pytest.mark.parametrize("swizzle, shift, align", [("none", 16, 128), ("128B", 128, 1024)])
def test_a_tma_store_box_off_its_alignment_is_a_hazard(swizzle, shift, align):
    x = cuda.to_device(np.zeros((64, 64), np.uint16))
    tm = TensorMap(x, (64, 64), dtype="u16", swizzle=swizzle)
    line = _tagged_line(_tma_store_from, "BOX")
    with pytest.raises(sim.SimHazard, match=rf"at .*sim_hazard_cases.py:{line}: TMA store at shared address "
                                            rf"0x[0-9a-f]+: the shared box must be aligned to {align} bytes"):
        launch(_tma_store_from, 1, 32, (tm.address, np.int32(shift)), smem=dynamic_smem_bytes(64 * 64 * 2 + 256))


@cuda.jit
def _counts_out_of_range(out, mode):
    from nbwgmma.intrinsics import mbarrier_expect_tx

    bars = cuda.shared.array(1, np.uint64)
    bar = smem_addr(bars)
    t = cuda.threadIdx.x
    if t == 0:
        mbarrier_init(bar, 0 if mode == 0 else 1)  # COUNT
    cuda.syncthreads()
    if t == 0 and mode == 1:
        mbarrier_arrive_count(bar, 0)  # COUNT
    if t == 0 and mode == 2:
        mbarrier_expect_tx(bar, 1 << 20)  # COUNT
    out[t] = 1


@pytest.mark.parametrize("mode, what, low", [(0, "the expected arrival count 0", 1), (1, "the arrival count 0", 1),
                                             (2, "the transaction count 1048576", 0)])
def test_mbarrier_counts_outside_their_range_are_a_hazard(mode, what, low):
    line = _tagged_line(_counts_out_of_range, "COUNT") + [0, 3, 5][mode]
    with pytest.raises(sim.SimHazard, match=rf"thread 0 \(mbarrier_\w+ at .*sim_hazard_cases.py:{line}\): {what} is "
                                            rf"outside \[{low}, 1048575\]"):
        launch(_counts_out_of_range, 1, 32, (cuda.to_device(np.zeros(32, np.int32)), np.int32(mode)))


@cuda.jit
def _addresses_naming_nothing(out, mode):
    from nbwgmma.intrinsics import cluster_sync, ld_shared_cluster_u32, mapa, st_shared_cluster_u32

    a = cuda.shared.array(32, np.uint32)
    bars = cuda.shared.array(1, np.uint64)
    t = cuda.threadIdx.x
    if mode == 0:
        cluster_sync()
        st_shared_cluster_u32(mapa(smem_addr(a) + 4 * t, 5), np.uint32(t))  # NOWHERE: rank 5 of 2
        cluster_sync()
    if mode == 1:
        out[t] = ld_shared_cluster_u32(mapa(smem_addr(a) + 4 * t, 0))  # NOWHERE: no clusters, even to its own rank
    if mode == 2 and t == 0:
        mbarrier_init(bars[0], 1)  # NOWHERE: the barrier's value, not its address


@pytest.mark.parametrize("mode, grid, cluster, op, why", [
    (0, 2, (2, 1, 1), "st_shared_cluster_u32", r"names CTA rank 5 \(bits 24-31\), but the cluster has 2 CTAs"),
    (2, 1, None, "mbarrier_init", r"0xffffffffffffffff is past the CTA's 256 KiB shared memory")])
def test_a_shared_address_naming_no_memory_is_a_hazard(mode, grid, cluster, op, why):
    """A bare ValueError or NumPy IndexError from inside the simulator before."""
    line = _tagged_line(_addresses_naming_nothing, "NOWHERE") + [0, 3, 5][mode]
    kw = {"cluster": cluster} if cluster else {}
    with pytest.raises(sim.SimHazard, match=rf"thread \d+ \({op} at .*sim_hazard_cases.py:{line}\): shared address "
                                            rf".*{why}"):
        launch(_addresses_naming_nothing, grid, 32, (cuda.to_device(np.zeros(32, np.uint32)), np.int32(mode)), **kw)


@pytest.mark.parametrize("cluster", [None, (1, 1, 1)])
def test_cluster_forms_need_a_launch_with_clusters(cluster):
    """mapa in a launch without clusters is a hazard even for the CTA's own rank (on an H200 a
    kernel that sent its fragment to its own CTA with mapa, st.async and cluster-scope arrivals
    stopped with an illegal instruction); a launch with clusters of one CTA may."""
    line = _tagged_line(_addresses_naming_nothing, "NOWHERE") + 3
    kw = {"cluster": cluster} if cluster else {}
    args = (cuda.to_device(np.zeros(32, np.uint32)), np.int32(1))
    if cluster is None:
        with pytest.raises(sim.SimHazard, match=rf"thread \d+ at .*sim_hazard_cases.py:{line}: mapa in a launch without "
                                                r"clusters: the \.shared::cluster forms need a launch with cluster="):
            launch(_addresses_naming_nothing, 1, 32, args, **kw)
    else:
        launch(_addresses_naming_nothing, 1, 32, args, **kw)


@cuda.jit
def _expect_tx_unordered(src, out, ordered):
    from nbwgmma.intrinsics import bulk_copy_g2s_array, ld_shared_f32, mbarrier_arrive, mbarrier_expect_tx

    dyn = cuda.shared.array(0, np.uint8)
    bars = cuda.shared.array(1, np.uint64)
    base = dynamic_smem_base(dyn, 1024)
    bar = smem_addr(bars)
    t = cuda.threadIdx.x
    if t == 0:
        mbarrier_init(bar, 1)
    cuda.syncthreads()
    if t == 0:
        mbarrier_expect_tx(bar, 128)
        bulk_copy_g2s_array(base, src, 0, 128, bar)
    if ordered:
        cuda.syncthreads()  # the expect_tx before thread 32's arrival
    if t == 32:
        mbarrier_arrive(bar)  # COMPLETES the pending arrivals
    mbarrier_wait_parity(bar, 0)
    if t < 32:
        out[t] = ld_shared_f32(base + 4 * t)


def test_an_expect_tx_ordered_before_no_arrival_is_a_hazard():
    """The only arrival is another thread's, unordered with the expect_tx: on the GPU the phase can
    complete with 0 bytes pending and the copy's bytes be read before they land (it ran exact)."""
    line = _tagged_line(_expect_tx_unordered, "COMPLETES")
    with pytest.raises(sim.SimHazard, match=rf"thread 32 at .*sim_hazard_cases.py:{line}: this arrival completes the "
                                            rf"pending arrivals of phase 0 of .*, but the mbarrier_expect_tx of thread "
                                            rf"0 at .* is ordered before none of them"):
        launch(_expect_tx_unordered, 1, 64, (cuda.to_device(np.arange(32, dtype=np.float32)),
                                             cuda.to_device(np.zeros(32, np.float32)), np.int32(0)),
               smem=dynamic_smem_bytes(1024))


def test_an_expect_tx_ordered_before_the_arrival_by_a_barrier_runs():
    out = cuda.to_device(np.zeros(32, np.float32))
    launch(_expect_tx_unordered, 1, 64, (cuda.to_device(np.arange(32, dtype=np.float32)), out, np.int32(1)),
           smem=dynamic_smem_bytes(1024))
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(32, dtype=np.float32))


@cuda.jit
def _two_warpgroups_share_a_buffer(out):
    buf = cuda.shared.array(0, np.float32)
    t = cuda.threadIdx.x
    if t == 128:
        buf[3] = 1.0  # warpgroup 1's block
    if t == 256:
        out[0] = buf[3]  # warpgroup 2 reads the same bytes: its block overlaps


def test_a_race_between_warpgroups_names_them_and_the_byte_in_the_dynamic_memory():
    """Where two warpgroups' buffers overlap: the message says which warpgroup each thread is in and
    where the byte lies in the dynamic shared memory (the offset a kernel's own layout counts)."""
    with pytest.raises(sim.SimHazard, match=r"\(thread 256 is in warpgroup 2, thread 128 is in warpgroup 1; "
                                            r"0x[0-9a-f]+ is byte 12 of the dynamic shared memory\)"):
        launch(_two_warpgroups_share_a_buffer, 1, 384, (cuda.to_device(np.zeros(1, np.float32)),), smem=64)


@cuda.jit
def _store_past_the_end(out):
    t = cuda.threadIdx.x
    out[t] = 1.0  # OUT OF BOUNDS for t >= out.size: no guard


@cuda.jit
def _atomic_past_the_end(out):
    cuda.atomic.max(out, cuda.threadIdx.x + 30, 1.0)  # OUT OF BOUNDS for threads 2 and 3


def test_an_index_past_an_array_is_a_hazard_at_the_kernel_line():
    """NumPy's IndexError in the simulator, which the GPU would not raise (a silent store into
    whatever lies past the array), reported as a hazard at the kernel's line."""
    import inspect

    src, first = inspect.getsourcelines(_store_past_the_end.py_func)
    line = first + next(i for i, s in enumerate(src) if "OUT OF BOUNDS" in s)
    with pytest.raises(sim.SimHazard, match=rf"thread \d+ of block \(0, 0, 0\) at .*sim_hazard_cases.py:{line}: an "
                                            rf"index outside its array \(index \d+ is out of bounds .*\): the GPU does "
                                            rf"not check it"):
        launch(_store_past_the_end, 1, 64, (cuda.to_device(np.zeros(40, np.float32)),))
    src, first = inspect.getsourcelines(_atomic_past_the_end.py_func)
    line = first + next(i for i, s in enumerate(src) if "OUT OF BOUNDS" in s)
    with pytest.raises(sim.SimHazard, match=rf"at .*sim_hazard_cases.py:{line}: an index outside its array"):
        launch(_atomic_past_the_end, 1, 4, (cuda.to_device(np.zeros(32, np.float32)),))


@cuda.jit
def _log_in_place(x):
    t = cuda.threadIdx.x
    x[t] = math.log(x[t])  # LOG: of -1.0 for thread 1


@cuda.jit
def _divides_by_the_thread(x):
    x[cuda.threadIdx.x] = 1.0 / cuda.threadIdx.x  # DIVIDES: by 0 for thread 0


@cuda.jit
def _integer_division_by_the_thread(x):
    x[cuda.threadIdx.x] = 7 // cuda.threadIdx.x  # INT DIVIDES: by 0 for thread 0


@cuda.jit
def _unpacks_three_into_two(x):
    a, b = (x[0], x[1], x[2])
    x[0] = a + b


def test_python_arithmetic_errors_at_a_kernel_line_are_sim_errors():
    """Python's arithmetic raised its bare error mid-launch (a logarithm of -1, a division by zero)
    where a compiled kernel computes NaN or infinity without one: the simulator cannot model that
    line for those values, and says so with a SimError naming the thread and the line."""
    import inspect

    for kernel, text, err, values in ((_log_in_place, "LOG:", "ValueError: math domain error", [1.0, -1.0, 2.0, 3.0]),
                                      (_divides_by_the_thread, "DIVIDES:", "ZeroDivisionError", [0.0] * 4),
                                      (_integer_division_by_the_thread, "INT DIVIDES:", "ZeroDivisionError", [0.0] * 4)):
        src, first = inspect.getsourcelines(kernel.py_func)
        line = first + next(i for i, s in enumerate(src) if text in s)
        with pytest.raises(sim.SimError, match=rf"^thread \d+ of block \(0, 0, 0\) at .*sim_hazard_cases.py:{line}: "
                                               rf"Python's arithmetic raised {err}.* A compiled kernel raises no error"):
            launch(kernel, 1, 4, (cuda.to_device(np.array(values, np.float32)),))
    # any other ValueError (here one the compiler refuses as a typing error) stays Python's own
    with pytest.raises(ValueError, match="too many values to unpack"):
        launch(_unpacks_three_into_two, 1, 1, (cuda.to_device(np.zeros(3, np.float32)),))


@cuda.jit
def _tuple_past_its_end(out):
    t = (1.0, 2.0)
    out[0] = t[cuda.threadIdx.x + 2]


def test_a_tuple_index_past_its_end_stays_python_s_error():
    """Only NumPy's array bounds check becomes the unchecked-index hazard: a tuple indexed past its
    end is a typing error compiled, not an unchecked load, and keeps Python's IndexError."""
    with pytest.raises(IndexError, match="tuple index out of range"):
        launch(_tuple_past_its_end, 1, 1, (cuda.to_device(np.zeros(1, np.float32)),))
