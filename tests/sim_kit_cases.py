"""The authoring kit's device functions against host models: acc_map's coordinates and
vectors, the tile scheduler's walk, the pipeline's phases and a ring filled by threads, the
turn barriers. Run in Numba's
CUDA simulator by tests/test_sim.py (a child process with NUMBA_ENABLE_CUDASIM=1) and on the
GPU by tests/test_kit_gpu.py."""

import math

import numpy as np
import pytest
from numba import config, cuda

from nbwgmma.intrinsics import acc_store, acc_zeros, setmaxnreg_dec, setmaxnreg_inc, smem_addr
from nbwgmma.layout import acc_value_coords
from nbwgmma.errors import KitError, LaunchError
from nbwgmma.kit import (ACTIVATIONS, TileScheduler, TmaPipeline, acc_col_reduce, acc_map, acc_map4, acc_row_reduce,
                         pair_store, rand, rand4x, randint, randint4x, timeline_cta, timeline_stamp, timeline_start)
from nbwgmma.launch import dynamic_smem_bytes, launch

SIM_ONLY = pytest.mark.skipif(not config.ENABLE_CUDASIM,
                              reason="calls device functions from the host, which only the simulator allows")


@cuda.jit(device=True, inline=True)
def _where(v, row, col, scale):
    return v + row * scale + col


@pytest.mark.parametrize("n", [8, 64, 256])
def test_acc_map_gives_each_value_its_row_and_column(n):
    mapped = acc_map(_where, n, nextra=1)

    @cuda.jit
    def kernel(out):
        t = cuda.threadIdx.x
        acc = mapped(acc_zeros("f32.bf16.bf16", n), t, 64, 8, 1000)
        acc_store(acc, "f32.bf16.bf16", out, t, 0, 0)

    out = cuda.to_device(np.full((64, n), np.nan, np.float32))
    launch(kernel, 1, 128, (out,))
    rows, cols = np.indices((64, n))
    np.testing.assert_array_equal(out.copy_to_host(), (rows + 64) * 1000 + cols + 8)


@pytest.mark.parametrize("pack", ["bf16", "f16"])
def test_acc_map_packs_pairs_like_the_conversion_helpers(pack):
    from nbwgmma.intrinsics import acc_to_bf16x2, acc_to_f16x2

    mapped = acc_map(_where, 16, nextra=1, pack=pack)
    conv = acc_to_bf16x2 if pack == "bf16" else acc_to_f16x2
    plain = acc_map(_where, 16, nextra=1)

    @cuda.jit
    def kernel(out):
        t = cuda.threadIdx.x
        a = mapped(acc_zeros("f32.bf16.bf16", 16), t, 0, 0, 10)
        b = conv(plain(acc_zeros("f32.bf16.bf16", 16), t, 0, 0, 10))
        for i in range(4):
            out[t, i] = a[i]
            out[t, 4 + i] = b[i]

    out = cuda.to_device(np.zeros((128, 8), np.uint32))
    launch(kernel, 1, 128, (out,))
    got = out.copy_to_host()
    np.testing.assert_array_equal(got[:, :4], got[:, 4:])
    assert got.any()


def test_acc_map_checks_its_arguments():
    for kw, msg in ((dict(n=12), "wgmma N"), (dict(n=64, dtype="f16"), "dtype"), (dict(n=64, pack="e4m3"), "pack"),
                    (dict(n=64, nextra=9), "nextra"),
                    # _where(v, row, col, scale): one extra, not none and not a vector too
                    (dict(n=64), r"fn _where\(v, row, col, scale\) must take 3 arguments \(value, row, col\) for .*; it takes 4$"),
                    (dict(n=64, cols=1, nextra=1), r"must take 5 arguments \(value, row, col, a column value, an "
                                                   r"extra\) for cols=1, rows=0, nextra=1")):
        with pytest.raises(ValueError, match=msg):
            acc_map(_where, **kw)
    acc_map(_where, 64, nextra=1)


@cuda.jit(device=True, inline=True)
def _add(v, row, col, b):
    return v + b


def test_a_mapped_function_given_the_wrong_vectors_is_refused_at_the_kernels_line():
    """In the simulator as in the compiler (tests/test_kit_cpu.py): a vector left out is a typing
    error naming what the mapped function takes (it was Python's "missing 1 required positional
    argument: 'v1'")."""
    from nbwgmma.intrinsics.errors import NbwgmmaTypingError

    mapped = acc_map(_add, 64, cols=1)

    @cuda.jit
    def kernel(out):
        t = cuda.threadIdx.x
        acc = mapped(acc_zeros("f32.bf16.bf16", 64), t, 0, 0)
        acc_store(acc, "f32.bf16.bf16", out, t, 0, 0)

    out = cuda.to_device(np.zeros((64, 64), np.float32))
    with pytest.raises(NbwgmmaTypingError, match=r"after \(acc, tid, row0, col0\) it takes 1 per-column vector\(s\).* "
                                                 r"1 in all; got 0") as exc:
        launch(kernel, 1, 128, (out,))
    if config.ENABLE_CUDASIM:  # the simulator names the kernel's line
        assert f"{__file__}:" in str(exc.value), str(exc.value)


@pytest.mark.parametrize("bias, message", [
    (np.ones((1, 64), np.float32), r"vector 0 \(per column\) must be a 1-D array"),
    # bf16 bits given for the default vtype f32: it added 16256.0 for 1.0
    (np.full(64, 0x3F80, np.uint16), r"vector 0 \(per column\) is read as vtype 'f32' .*got array\(uint16, 1d.*"
                                     r"\(bf16 bits need vtype='bf16'\)"),
])
def test_a_vector_of_the_wrong_shape_or_type_is_refused_at_the_kernels_line(bias, message):
    """In the simulator as in the compiler (tests/test_kit_cpu.py): the typing error, at the call."""
    from nbwgmma.intrinsics.errors import NbwgmmaTypingError

    mapped = acc_map(_add, 64, cols=1)

    @cuda.jit
    def kernel(out, bias):
        t = cuda.threadIdx.x
        acc = mapped(acc_zeros("f32.bf16.bf16", 64), t, 0, 0, bias)
        acc_store(acc, "f32.bf16.bf16", out, t, 0, 0)

    out = cuda.to_device(np.zeros((64, 64), np.float32))
    with pytest.raises(NbwgmmaTypingError, match=message) as exc:
        launch(kernel, 1, 128, (out, cuda.to_device(bias)))
    if config.ENABLE_CUDASIM:  # the simulator leads with the kernel's line, as the compiler does
        assert str(exc.value).startswith(f"{__file__}:"), str(exc.value)


@cuda.jit(device=True, inline=True)
def _no_result(v, row, col):
    v + np.float32(1.0)


def test_a_mapped_function_that_returns_nothing_is_refused_at_the_kernels_line():
    """In the simulator as in the compiler (tests/test_kit_cpu.py): every value came out NaN."""
    from nbwgmma.intrinsics.errors import NbwgmmaTypingError

    mapped = acc_map(_no_result, 64)

    @cuda.jit
    def kernel(out):
        t = cuda.threadIdx.x
        acc_store(mapped(acc_zeros("f32.bf16.bf16", 64), t, 0, 0), "f32.bf16.bf16", out, t, 0, 0)

    out = cuda.to_device(np.zeros((64, 64), np.float32))
    with pytest.raises(NbwgmmaTypingError, match=r"acc_map\(_no_result, n=64\): fn must return one number; got none"):
        launch(kernel, 1, 128, (out,))


@SIM_ONLY
def test_activations_match_their_definitions():
    from math import erf, exp, tanh

    x = np.linspace(-6, 6, 49).astype(np.float32)
    ref = {"relu": np.maximum(x, 0), "gelu": [0.5 * v * (1 + erf(v / math.sqrt(2))) for v in x],
           "gelu_tanh": [0.5 * v * (1 + tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))) for v in x],
           "silu": [v / (1 + exp(-v)) for v in x], "sigmoid": [1 / (1 + exp(-v)) for v in x]}
    for name, f in ACTIVATIONS.items():
        got = np.array([float(f(np.float32(v))) for v in x])
        np.testing.assert_allclose(got, np.asarray(ref[name], np.float64), rtol=1e-5, atol=1e-6, err_msg=name)
    # gelu's negative tail, relative: 1 + erf(x) in f32 cancels to nothing there (errors up to 100%); the
    # kit's gelu takes erfc(-x) instead
    from math import erfc

    tail = np.linspace(-12, -4, 33).astype(np.float32)
    got = np.array([float(ACTIVATIONS["gelu"](np.float32(v))) for v in tail])
    np.testing.assert_allclose(got, [0.5 * v * erfc(-v / math.sqrt(2)) for v in tail.astype(np.float64)], rtol=2e-5,
                               atol=0)


@SIM_ONLY
def test_gelu_tanh_approx_matches_its_definition():
    """The tanh.approx form of gelu_tanh (the simulator's tanh correctly rounded): the definition
    within f32 rounding, the 1 + tanh cancellation included."""
    from math import tanh

    from nbwgmma.kit import gelu_tanh_approx

    x = np.linspace(-8, 8, 129).astype(np.float32)
    ref = [0.5 * v * (1 + tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))) for v in x.astype(np.float64)]
    got = np.array([float(gelu_tanh_approx(np.float32(v))) for v in x])
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def _host_walk(bm, bn, bk, group_m, m, n, k, grid, last_row=False):
    """(cta, tile row, tile col, slice, kb0, kb1) for every unit, in each CTA's order (with
    ``last_row``: the last tile row's tiles after the others', in column order)."""
    tiles_m, tiles_n, kblocks = math.ceil(m / bm), math.ceil(n / bn), math.ceil(k / bk)
    grouped = tiles_m - 1 if last_row else tiles_m  # the rows walked in groups
    out = []
    for cta in range(grid):
        for t in range(cta, tiles_m * tiles_n, grid):
            if t >= grouped * tiles_n:
                out.append((cta, grouped, t - grouped * tiles_n, 0, 0, kblocks))
                continue
            per_group = group_m * tiles_n
            first = t // per_group * group_m
            rows = min(grouped - first, group_m)
            r = t % per_group
            out.append((cta, first + r % rows, r // rows, 0, 0, kblocks))
    return out


def _walk(sched, m, n, k, grid, cluster=None):
    """Each CTA's units as ``sched`` walks them: [CTA, j] = (unit, tile row, tile col, slice,
    kb0, kb1), -1 past its last."""
    @cuda.jit
    def kernel(out, m, n, k):
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        j = 0
        if cuda.threadIdx.x == 0:
            for u in range(sched.first(), nunits, sched.step()):
                t, sp = sched.split_unit(u, nsplit)
                tm, tn = sched.tile(t, tiles_mc, tiles_n, sched.rank())
                kb0, kb1 = sched.k_range(sp, kblocks, nsplit)
                row = out[cuda.blockIdx.x, j]
                row[0], row[1], row[2], row[3], row[4], row[5] = u, tm, tn, sp, kb0, kb1
                j += 1

    out = cuda.to_device(np.full((grid, 64, 6), -1, np.int64))
    launch(kernel, grid, 32, (out, m, n, k), cluster=cluster)
    return out.copy_to_host()


@pytest.mark.parametrize("m, n, k, grid", [(1000, 700, 300, 5), (128, 256, 64, 1), (4096, 512, 128, 7)])
def test_the_scheduler_walks_every_tile_once_in_grouped_order(m, n, k, grid):
    sched = TileScheduler(128, 256, 64, group_m=8)
    units = sched.units(m, n, k)
    assert sched.grid(m, n, k, 132) == min(132, units)
    got = _walk(sched, m, n, k, grid)
    walked = [(c, *map(int, got[c, j, 1:])) for c in range(grid) for j in range(64) if got[c, j, 0] >= 0]
    assert walked == _host_walk(128, 256, 64, 8, m, n, k, grid)
    assert len({(w[1], w[2]) for w in walked}) == units


@pytest.mark.parametrize("m, n, k, grid", [(1000, 700, 300, 5), (128, 256, 64, 1), (4096, 512, 128, 7), (200, 900, 64, 3)])
def test_the_scheduler_walks_the_last_row_last(m, n, k, grid):
    """``last_row``: the rows before the last in groups (of 8; a group cut short by the last row
    walked as 8 would be), then the last row left to right: every tile once."""
    sched = TileScheduler(128, 256, 64, group_m=8, last_row=True)
    assert "last_row=True" in repr(sched) and sched.units(m, n, k) == math.ceil(m / 128) * math.ceil(n / 256)
    got = _walk(sched, m, n, k, grid)
    walked = [(c, *map(int, got[c, j, 1:])) for c in range(grid) for j in range(64) if got[c, j, 0] >= 0]
    assert walked == _host_walk(128, 256, 64, 8, m, n, k, grid, last_row=True)
    assert len({(w[1], w[2]) for w in walked}) == sched.units(m, n, k)
    tiles_m, tiles_n = math.ceil(m / 128), math.ceil(n / 256)
    order = sorted((u, tm, tn) for c in range(grid) for j in range(64)
                   for u, tm, tn in [tuple(map(int, got[c, j, :3]))] if u >= 0)
    assert [(tm, tn) for _, tm, tn in order[-tiles_n:]] == [(tiles_m - 1, j) for j in range(tiles_n)]


@pytest.mark.parametrize("along", ["M", "N"])
@pytest.mark.parametrize("m, n, grid", [(1000, 700, 4), (768, 1280, 6)])
def test_clusters_take_adjacent_tiles_along_their_direction(along, m, n, grid):
    """Clusters of two: the CTAs of a cluster tile take neighbouring tiles (vertically along M,
    side by side along N) by rank, every tile once; a cluster's second tile past the edge (an
    odd tile count) is handed out and lies past it. (The grid is the CTAs launched: on the GPU,
    a first launch that started more of them failed here.)"""
    sched = TileScheduler(128, 256, 64, group_m=2, cluster=2, along=along)
    assert grid == sched.grid(m, n, 64, grid)
    got = _walk(sched, m, n, 64, grid, cluster=(2, 1, 1))
    tiles_m, tiles_n = math.ceil(m / 128), math.ceil(n / 256)
    walked = {}
    for c in range(grid):
        for j in range(64):
            if got[c, j, 0] >= 0:
                walked.setdefault(int(got[c, j, 0]), {})[c % 2] = (int(got[c, j, 1]), int(got[c, j, 2]))
    assert len(walked) == sched.units(m, n, 64)
    inside = set()
    for pair in walked.values():
        (m0, n0), (m1, n1) = pair[0], pair[1]
        assert (m1, n1) == ((m0 + 1, n0) if along == "M" else (m0, n0 + 1))
        inside |= {t for t in ((m0, n0), (m1, n1)) if t[0] < tiles_m and t[1] < tiles_n}
    assert inside == {(i, j) for i in range(tiles_m) for j in range(tiles_n)}


@SIM_ONLY
def test_the_pipeline_s_phases_follow_the_ring():
    pipe = TmaPipeline(3, consumers=1)
    assert pipe.barrier_words == 6
    s, ph, seen = 0, 0, []
    for it in range(8):
        assert pipe.stage_of(it) == (s, ph)
        seen.append((s, ph))
        s, ph = pipe.advance(s, ph)
    assert seen == [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1), (0, 0), (1, 0)]
    for bad in (dict(stages=0, consumers=1), dict(stages=2, consumers=0), dict(stages=2, consumers=1, cluster=0)):
        with pytest.raises(ValueError, match="TmaPipeline"):
            TmaPipeline(**bad)


@SIM_ONLY
def test_advance_by_lands_where_repeated_advances_do():
    pipe = TmaPipeline(5, consumers=1)
    for s0, ph0 in ((0, 0), (3, 1), (4, 0)):
        for n in (0, 1, 4, 5, 6, 13, 128):
            s, ph = s0, ph0
            for _ in range(n):
                s, ph = pipe.advance(s, ph)
            assert pipe.advance_by(s0, ph0, n) == (s, ph), (s0, ph0, n)


@cuda.jit(device=True, inline=True)
def _vectors(v, row, col, b, r, scale):
    return v + b * scale + r


@pytest.mark.parametrize("ncols, nrows", [(64, 64), (37, 64), (0, 9), (64, 0)])
def test_acc_map_reads_column_and_row_vectors_once_and_zero_past_their_end(ncols, nrows):
    """A per-column and a per-row vector, each starting at the tile's first column (row),
    shorter than the tile where C ends: values past the end read as zero."""
    mapped = acc_map(_vectors, 64, cols=1, rows=1, nextra=1)
    col_vec = np.arange(1, 65, dtype=np.float32) * 100
    row_vec = -np.arange(1, 65, dtype=np.float32)

    @cuda.jit
    def kernel(out, cv, rv, nc, nr):
        t = cuda.threadIdx.x
        acc = mapped(acc_zeros("f32.bf16.bf16", 64), t, 0, 0, cv[:nc], rv[:nr], 2.0)
        acc_store(acc, "f32.bf16.bf16", out, t, 0, 0)

    out = cuda.to_device(np.full((64, 64), np.nan, np.float32))
    launch(kernel, 1, 128, (out, cuda.to_device(col_vec), cuda.to_device(row_vec), ncols, nrows))
    cv = np.where(np.arange(64) < ncols, col_vec, 0)
    rv = np.where(np.arange(64) < nrows, row_vec, 0)
    np.testing.assert_array_equal(out.copy_to_host(), 2 * cv[None, :] + rv[:, None])


@cuda.jit(device=True, inline=True)
def _col_only(v, row, col, b):
    return v + b


@pytest.mark.parametrize("vtype, ncols", [("f32", 96), ("bf16", 96), ("f16", 50), ("bf16", 7)])
def test_col_values_feed_acc_map_in_parts_as_the_vector_would(vtype, ncols):
    """col_values loads a 96-column tile's values once; acc_map(loaded=True) maps two parts of 48
    columns from static slices of them: the same as acc_map reading each part's slice of the
    vector (ragged vectors too: zero past the end)."""
    from nbwgmma.kit import col_values

    values = col_values(96, vtype=vtype)
    part = acc_map(_col_only, 48, cols=1, loaded=True)
    direct = acc_map(_col_only, 48, cols=1, vtype=vtype)
    vec = (np.arange(1, 97, dtype=np.float32) * 3 - 100)
    dev = vec.astype(np.float16) if vtype == "f16" else \
        (vec.view(np.uint32) >> 16).astype(np.uint16) if vtype == "bf16" else vec  # (small integers: exact)

    @cuda.jit
    def kernel(out, ref, v, nc):
        t = cuda.threadIdx.x
        acc = acc_zeros("f32.bf16.bf16", 96)
        vals = values(v[:nc], t)
        acc_store(part(acc[:24], t, 0, 0, vals[:12]) + part(acc[24:], t, 0, 48, vals[12:]), "f32.bf16.bf16", out,
                  t, 0, 0)
        acc_store(direct(acc[:24], t, 0, 0, v[:nc]) + direct(acc[24:], t, 0, 48, v[48:nc]), "f32.bf16.bf16", ref,
                  t, 0, 0)

    out, ref = (cuda.to_device(np.full((64, 96), np.nan, np.float32)) for _ in range(2))
    launch(kernel, 1, 128, (out, ref, cuda.to_device(dev), ncols))
    want = np.where(np.arange(96) < ncols, vec, 0)[None, :].repeat(64, 0)
    np.testing.assert_array_equal(ref.copy_to_host(), want)
    np.testing.assert_array_equal(out.copy_to_host(), want)


def test_two_warpgroups_taking_turns_alternate():
    """turn_wait / turn_pass: warpgroups 0 and 1 write their turns in strict alternation."""
    from nbwgmma.kit import turn_pass, turn_wait

    @cuda.jit
    def kernel(log, rounds):
        g, t = cuda.threadIdx.x // 128, cuda.threadIdx.x % 128
        for r in range(rounds):
            if g == 1 or r > 0:
                turn_wait(g)
            if t == 0:  # the next free entry: in turn order only if the turns alternate
                log[log[8]] = g
                log[8] += 1
            if g == 0 or r + 1 < rounds:
                turn_pass(g)

    log = cuda.to_device(np.array([-1] * 8 + [0], np.int64))
    launch(kernel, 1, 256, (log, 4))
    assert log.copy_to_host().tolist() == [0, 1] * 4 + [8]


def test_warpgroup_index_and_thread_name_every_thread_of_three_warpgroups():
    """warpgroup_index (a shuffle from lane 0: the same in every lane) and warpgroup_thread."""
    from nbwgmma.kit import warpgroup_index, warpgroup_thread

    @cuda.jit
    def kernel(out):
        t = cuda.threadIdx.x
        out[t, 0] = warpgroup_index()
        out[t, 1] = warpgroup_thread()

    out = cuda.to_device(np.full((384, 2), -1, np.int32))
    launch(kernel, 1, 384, (out,))
    t = np.arange(384)
    np.testing.assert_array_equal(out.copy_to_host(), np.stack([t // 128, t % 128], 1))


_THREAD_FILLED = TmaPipeline(2, consumers=32, producers=32)


@cuda.jit
def _ring_filled_by_threads(out, fills):
    """Warp 0 fills each slot of a 2-slot ring with plain stores (producer_wait, then
    producer_arrive); warp 1 sums each fill and releases the slot (every consumer thread)."""
    slots = cuda.shared.array((2, 32), np.int32)
    bars = cuda.shared.array(4, np.uint64)
    ring = smem_addr(bars)
    t = cuda.threadIdx.x
    if t == 0:
        _THREAD_FILLED.init(ring)
    cuda.syncthreads()
    s, ph = 0, 0
    if t < 32:
        for f in range(fills):
            _THREAD_FILLED.producer_wait(ring, s, ph)
            slots[s, t] = 100 * f + t
            _THREAD_FILLED.producer_arrive(ring, s)
            s, ph = _THREAD_FILLED.advance(s, ph)
    else:
        total = 0
        for f in range(fills):
            _THREAD_FILLED.consumer_wait(ring, s, ph)
            total += slots[s, (t + f) % 32]
            _THREAD_FILLED.consumer_release(ring, s)
            s, ph = _THREAD_FILLED.advance(s, ph)
        out[t - 32] = total


def test_a_ring_filled_by_threads_with_plain_stores():
    """TmaPipeline(producers=32): every producer thread's arrival after its stores completes a
    fill; each fill is read whole, in order, and no slot is overwritten before its release."""
    fills = 7
    out = cuda.to_device(np.full(32, -1, np.int64))
    launch(_ring_filled_by_threads, 1, 64, (out, fills))
    want = [sum(100 * f + (t + f) % 32 for f in range(fills)) for t in range(32)]
    assert out.copy_to_host().tolist() == want


_SMALL_PIPE = TmaPipeline(2, 1)


@cuda.jit
def _ring_past_the_launch(out):
    dyn = cuda.shared.array(0, np.uint8)
    if cuda.threadIdx.x == 0:
        _SMALL_PIPE.init(smem_addr(dyn) + 4096)  # the launch gave 1 KiB
    out[0] = 1


@SIM_ONLY
def test_a_kit_block_s_hazard_names_the_kernel_line_that_called_it():
    """A hazard inside a kit block (here its barriers initialized past the launch's dynamic
    shared memory) names the block's line and the user's line that called it."""
    from nbwgmma import sim

    out = cuda.to_device(np.zeros(1, np.int32))
    with pytest.raises(sim.SimHazard, match=r"mbarrier_init at .*kit.pipeline\.py:\d+ \(called from "
                                            r".*sim_kit_cases\.py:\d+\)\) accesses shared memory at 0x[0-9a-f]+, "
                                            r"outside what the kernel has"):
        launch(_ring_past_the_launch, 1, 32, (out,), smem=1024)


@SIM_ONLY
def test_a_kit_block_in_a_kernel_numbas_simulator_launched_says_how_to_launch():
    """kernel[grid, block](...) runs Numba's own simulator, without nbwgmma's intrinsics: a kit
    block called there says to launch with nbwgmma.launch.launch (it failed deep in Numba's
    simulator with a TypeError)."""
    from nbwgmma import sim
    from nbwgmma.kit import warpgroup_index

    @cuda.jit
    def kernel(out):
        out[cuda.threadIdx.x] = warpgroup_index()

    out = cuda.to_device(np.zeros(128, np.int32))
    with pytest.raises(sim.SimError, match=r"warpgroup_index.* runs in the simulator only in a kernel launched with "
                                           r"nbwgmma.launch.launch"):
        kernel[1, 128](out)
    launch(kernel, 1, 128, (out,))  # the same kernel through nbwgmma's launch
    assert (out.copy_to_host() == 0).all()


@cuda.jit(device=True, inline=True)
def _dequantized(v, row, col, cs, rs):
    return v * cs * rs


def test_an_s32_accumulator_mapped_as_f32_dequantizes():
    """An int8 GEMM's epilogue (the W8A8 recipe): the s32 accumulator's values mapped with
    dtype="f32" reach the function as f32 with f32 column and row scales, the results f32 and
    stored as an f32 fragment; exact on values that f32 holds exactly."""
    from nbwgmma.intrinsics import acc_load

    mapped = acc_map(_dequantized, 64, cols=1, rows=1, dtype="f32")

    @cuda.jit
    def kernel(src, cs, rs, out):
        t = cuda.threadIdx.x
        acc = acc_load("s32.s8.s8", 64, src, t, 0, 0)
        acc_store(mapped(acc, t, 0, 0, cs, rs), "f32.bf16.bf16", out, t, 0, 0)

    rng = np.random.default_rng(3)
    src = rng.integers(-5000, 5000, (64, 64)).astype(np.int32)
    cs = (rng.integers(1, 8, 64) / 8).astype(np.float32)
    rs = (rng.integers(1, 4, 64) / 4).astype(np.float32)
    out = cuda.to_device(np.full((64, 64), np.nan, np.float32))
    launch(kernel, 1, 128, (cuda.to_device(src), cuda.to_device(cs), cuda.to_device(rs), out))
    np.testing.assert_array_equal(out.copy_to_host(), src.astype(np.float64) * cs[None, :] * rs[:, None])


def test_a_kit_block_called_with_arguments_its_signature_cannot_bind_is_refused_at_the_kernels_line():
    """A kit block given too few or unknown arguments was Numba's "Cannot bind ..." (compiled) or
    Python's TypeError (simulated), neither an nbwgmma error; now a typing error naming the block,
    its signature and the kernel's line. Keywords that bind run (the simulator refused every
    keyword to a device function)."""
    from nbwgmma.intrinsics.errors import NbwgmmaTypingError

    pipe = TmaPipeline(3, consumers=1)

    @cuda.jit
    def too_few(out):
        s, ph = pipe.advance(np.int32(0))
        out[0] = s

    @cuda.jit
    def by_keyword(out):
        s, ph = pipe.advance(np.int32(2), ph=np.int32(0))
        out[0] = s
        out[1] = ph

    out = cuda.to_device(np.full(2, -1, np.int32))
    with pytest.raises(NbwgmmaTypingError, match=r"kit\.TmaPipeline\.advance: missing a required argument: 'ph' \(.*\): "
                                                 r"its signature is advance\(s, ph\); got advance\(") as exc:
        launch(too_few, 1, 32, (out,))
    assert str(exc.value).startswith(f"{__file__}:"), str(exc.value)
    launch(by_keyword, 1, 32, (out,))
    assert out.copy_to_host().tolist() == [0, 1]


def test_warpgroup_sync_past_warpgroup_3_is_refused_at_the_kernels_line():
    """``warpgroup_sync(g)`` with ``g`` outside 0-3 synced warpgroup 3's barrier (named barrier 4);
    a compiled kernel refuses such a constant at typing, the simulator the value at the call."""
    from nbwgmma.intrinsics.errors import NbwgmmaTypingError
    from nbwgmma.kit import warpgroup_sync

    @cuda.jit
    def past(out):
        warpgroup_sync(16)
        out[0] = 1

    out = cuda.to_device(np.zeros(1, np.int32))
    with pytest.raises(NbwgmmaTypingError, match=r"kit\.warpgroup_sync: g must be an integer in \[0, 3\] .*got 16") \
            as exc:
        launch(past, 1, 128, (out,))
    assert str(exc.value).startswith(f"{__file__}:"), str(exc.value)
    assert out.copy_to_host()[0] == 0


def test_a_builders_function_called_with_too_few_arguments_names_the_builder_at_the_kernels_line():
    """From a newcomer's trial: a reduction (made by acc_row_reduce) or a pair_atomic called without
    an argument crashed inside nbwgmma's own message code (the generated function has no
    module) with an AttributeError; now the typing error a compiled kernel gives, the fragment
    shown by its type, not its values; a fragment of the wrong size is "a tuple of 64", as the
    compiled kernel says it (was "Acc of 64", the simulator's own class)."""
    from nbwgmma.intrinsics.errors import NbwgmmaTypingError
    from nbwgmma.kit import pair_atomic

    row_max = acc_row_reduce("max", 64)
    add_rows = pair_atomic("add")

    @cuda.jit
    def no_ncols(out):
        t = cuda.threadIdx.x
        mx = row_max(acc_zeros("f32.bf16.bf16", 64), t, 0, 0)
        out[t] = mx[0]

    @cuda.jit
    def no_tid(out):
        add_rows((np.float32(1), np.float32(2)), out)

    @cuda.jit
    def too_wide(out):  # a 64 x 128 fragment (64 values) where 64 x 64 (32) is expected
        t = cuda.threadIdx.x
        mx = row_max(acc_zeros("f32.bf16.bf16", 128), t, 0, 0, 64)
        out[t] = mx[0]

    out = cuda.to_device(np.zeros(128, np.float32))
    for kernel, message in ((no_ncols, r"kit\.acc_row_reduce\('max', 64\): missing a required argument: 'ncols' \(.*\): "
                                       r"it takes \(acc, tid, row0, col0, ncols, \*args\); got \(UniTuple\(float32 x 32\), "),
                            (no_tid, r"kit\.pair_atomic\('add'\): missing a required argument: 'tid' \(.*\): it takes "
                                     r"\(pair, vec, tid\); got \(UniTuple\(float32 x 2\), "),
                            (too_wide, r"acc_row_reduce\('max', 64\): the fragment must be a tuple of 32 values .*; "
                                       r"got a tuple of 64")):
        with pytest.raises(NbwgmmaTypingError, match=message) as exc:
            launch(kernel, 1, 128, (out,))
        assert str(exc.value).startswith(f"{__file__}:"), str(exc.value)


def _stream_k_gemm():
    """A user's stream-K GEMM on the kit's blocks (a newcomer's, trimmed): 128 x 128 tiles,
    ``tile_producer(stream=True)``, ``stream_walk`` and ``StreamFixup.finish``, f32 out."""
    from nbwgmma.intrinsics import setmaxnreg_dec, setmaxnreg_inc
    from nbwgmma.kit import Cooperative, StreamFixup, inlined, stream_walk, tile_producer, warpgroup_index

    kind = "f32.bf16.bf16"
    pipe = TmaPipeline(4, consumers=2)
    coop = Cooperative(kind, pipe, 128, 128)
    sched = TileScheduler(128, 128, coop.bk)
    fix = StreamFixup(kind, 128)

    def load(slot, full, kb, tm, tn, maps):  # a plain def: tile_producer makes it a device function
        coop.load_tile(slot, full, maps[0], maps[1], kb, tm, tn)

    produce = tile_producer(pipe, sched, coop, load, stream=True)

    @inlined
    def whole(state, tm, tn, kblocks, args):
        ring, base, c, ws, counters, flag, tid, cw, ct, m = args
        acc, s, ph = coop.tile(ring, base, state[0], state[1], 0, kblocks, cw, ct)
        acc_store(acc, kind, c, ct, tm * 128 + cw * 64, tn * 128)
        return (s, ph)

    @inlined
    def shared(state, t, tm, tn, kb0, kb1, kblocks, first, total, args):
        ring, base, c, ws, counters, flag, tid, cw, ct, m = args
        acc, s, ph = coop.tile(ring, base, state[0], state[1], kb0, kb1, cw, ct)
        row0 = tm * 128 + cw * 64
        accs, last = fix.finish((acc,), ws, counters, flag, tid, ct, cw, t, cuda.blockIdx.x, cuda.gridDim.x, total,
                                kblocks, first, kb0 == 0 and kb1 == kblocks, m - row0)
        if last:
            acc_store(accs[0], kind, c, ct, row0, tn * 128)
        return (s, ph)

    walk = stream_walk(sched, whole, shared)

    @cuda.jit(launch_bounds=(384, 1))
    def kernel(tmap_a, tmap_b, c, ws, counters, m, n, k):
        base, ring = pipe.setup()
        flag = cuda.shared.array(1, np.int32)
        tid = cuda.threadIdx.x
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        if tid < 128:
            setmaxnreg_dec(40)
            if tid == 0:
                produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, (tmap_a, tmap_b))
            else:
                return
        else:
            setmaxnreg_inc(232)
            cw, ct = warpgroup_index() - 1, tid % 128
            walk((0, 0), nunits, kblocks, tiles_mc, tiles_n, (ring, base, c, ws, counters, flag, tid, cw, ct, m))
        pipe.teardown()

    return kernel, coop, fix, dynamic_smem_bytes(4 * coop.stage_bytes)


@pytest.mark.parametrize("m, n, k, ctas", [(128, 128, 512, 12), (256, 128, 256, 5), (128, 128, 512, 3)])
def test_stream_k_on_more_ctas_than_shared_k_blocks_is_exact(m, n, k, ctas):
    """From a newcomer's stream-K kernel: a grid of more CTAs than shared k-blocks (12 CTAs on one
    tile of 8; 132 on an H100 for 256 x 256 x 1024) left CTAs with empty shares among a tile's
    owners, who never counted: C stayed NaN and the counters dirty, the next launch's sums wrong.
    The walk and the fix-up now share over at most one CTA per k-block; exact, twice in a row
    on the same counters (a grid within them as before)."""
    from nbwgmma.layout import to_bits
    from nbwgmma.tma import TensorMap

    kernel, coop, fix, smem = _stream_k_gemm()
    ws = cuda.to_device(np.zeros(2 * ctas * fix.tile_floats, np.float32))
    counters = cuda.to_device(np.zeros(-(-m // 128) * -(-n // 128), np.int32))
    for seed in (0, 1):
        rng = np.random.default_rng(seed)
        a, b = rng.integers(-2, 3, (m, k)).astype(np.float64), rng.integers(-2, 3, (n, k)).astype(np.float64)
        ta = TensorMap(cuda.to_device(to_bits(a, "bf16")), coop.box_a, dtype="bf16")
        tb = TensorMap(cuda.to_device(to_bits(b, "bf16")), coop.box_b, dtype="bf16")
        c = cuda.to_device(np.full((m, n), np.nan, np.float32))
        launch(kernel, ctas, 384, (ta.address, tb.address, c, ws, counters, np.int32(m), np.int32(n), np.int32(k)),
               smem=smem)
        np.testing.assert_array_equal(c.copy_to_host(), a @ b.T)
        assert not counters.copy_to_host().any()


@pytest.mark.parametrize("masked", [True, False])
def test_amax_blocks_take_the_largest_value_inside_the_output(masked):
    """Two warpgroups each read a 64 x 64 part of a 128 x 64 array (acc_load), note its largest
    |value| per warp and flush it into amax: with the mask, among the M x N = 100 x 40 values
    only (larger values past the edge, one of them negative, are left out); without, all."""
    from nbwgmma.intrinsics import acc_load
    from nbwgmma.kit import acc_absmax, amax_flush, amax_note, amax_start

    largest = acc_absmax(64, masked)

    @cuda.jit
    def kernel(src, amax, m, n):
        biggest = cuda.shared.array(8, np.float32)
        t = cuda.threadIdx.x
        w, ct = t // 128, t % 128
        amax_start(biggest, t)
        v = acc_load("f32.bf16.bf16", 64, src, ct, 64 * w, 0)
        amax_note(largest(v, ct, 64 * w, 0, m, n), biggest, t)
        amax_flush(amax, biggest, t)

    rng = np.random.default_rng(3)
    src = rng.integers(-60, 61, (128, 64)).astype(np.float32)
    src[100:, :] = -500.0  # past M
    src[:, 40:] = 300.0  # past N
    src[77, 13] = -99.0  # the largest |value| inside
    amax = cuda.to_device(np.zeros(1, np.float32))
    launch(kernel, 1, 256, (cuda.to_device(src), amax, np.int32(100), np.int32(40)))
    assert amax.copy_to_host()[0] == (99.0 if masked else 500.0)


@cuda.jit(device=True, inline=True)
def _grid_value(v, row, col):
    return v + np.float32((row * 37 + col * 11) % 23 - 11)


def _grid_values(rows, cols):
    r, c = np.indices((rows, cols))
    return ((r * 37 + c * 11) % 23 - 11).astype(np.float64)


def _exp_less(v, row, col, mx):
    return math.exp(v - mx)


@pytest.mark.parametrize("n, ncols", [(256, 256), (64, 37), (8, 8), (16, 3)])
def test_row_reductions_give_every_lane_of_the_quad_its_rows(n, ncols):
    """max, min, sum and a sum of exp(v - row max) (a plain function, the max as a row pair) over
    each row of a fragment of small integers, columns from ncols on masked: every thread's two
    rows against NumPy (exact but the exponentials)."""
    values = acc_map(_grid_value, n)
    rmax, rmin, rsum = (acc_row_reduce(op, n) for op in ("max", "min", "sum"))
    rexp = acc_row_reduce("sum", n, fn=_exp_less, pairs=1)
    every = acc_row_reduce("sum", n, masked=False)

    @cuda.jit
    def kernel(out, ncols):
        t = cuda.threadIdx.x
        acc = values(acc_zeros("f32.bf16.bf16", n), t, 64, 8)
        mx = rmax(acc, t, 64, 8, ncols)
        got = (mx, rmin(acc, t, 64, 8, ncols), rsum(acc, t, 64, 8, ncols), rexp(acc, t, 64, 8, ncols, mx),
               every(acc, t, 64, 8, ncols))
        for j in range(5):
            out[t, 2 * j] = got[j][0]
            out[t, 2 * j + 1] = got[j][1]

    out = cuda.to_device(np.full((128, 10), np.nan, np.float32))
    launch(kernel, 1, 128, (out, 8 + ncols))
    got = out.copy_to_host()
    v = _grid_values(128, 8 + n)[64:, 8:]
    inside = v[:, :ncols]
    want = np.stack([inside.max(1), inside.min(1), inside.sum(1),
                     np.exp(inside - inside.max(1, keepdims=True)).sum(1), v.sum(1)], 1)
    t = np.arange(128)
    lr = 16 * (t // 32) + (t % 32) // 4
    for h in (0, 1):
        np.testing.assert_array_equal(got[:, 2 * np.array([0, 1, 2, 4]) + h],
                                      want[lr + 8 * h][:, [0, 1, 2, 4]])
        np.testing.assert_allclose(got[:, 6 + h], want[lr + 8 * h, 3], rtol=1e-5)


@pytest.mark.parametrize("n, nrows", [(256, 64), (64, 50), (8, 3)])
def test_column_reductions_give_each_warp_its_sixteen_rows(n, nrows):
    """max and sum over each warp's 16 rows of every column a thread holds, rows from nrows on
    masked (a function of the row and column mapped first for the sum): against NumPy, exact."""
    values = acc_map(_grid_value, n)
    cmax = acc_col_reduce("max", n)
    csum = acc_col_reduce("sum", n, fn=_weighted, nextra=1)
    q = n // 4

    @cuda.jit
    def kernel(out, nrows):
        t = cuda.threadIdx.x
        acc = values(acc_zeros("f32.bf16.bf16", n), t, 0, 0)
        a = cmax(acc, t, 0, 0, nrows)
        b = csum(acc, t, 0, 0, nrows, np.float32(2.0))
        for k in range(q):
            out[t, k] = a[k]
            out[t, q + k] = b[k]

    out = cuda.to_device(np.full((128, 2 * q), np.nan, np.float32))
    launch(kernel, 1, 128, (out, nrows))
    got = out.copy_to_host()
    v = _grid_values(64, n)
    r = np.arange(64)[:, None]
    w = 2.0 * v + r
    t = np.arange(128)
    k = np.arange(q)
    cols = 2 * (t % 4)[:, None] + 8 * (k // 2)[None, :] + (k % 2)[None, :]
    warp_rows = 16 * (t // 32)
    for x in range(128):
        rows = slice(warp_rows[x], min(warp_rows[x] + 16, nrows))
        if rows.start >= rows.stop:
            assert (got[x, :q] == -np.inf).all() and (got[x, q:] == 0).all()
            continue
        np.testing.assert_array_equal(got[x, :q], v[rows][:, cols[x]].max(0))
        np.testing.assert_array_equal(got[x, q:], w[rows][:, cols[x]].sum(0))


@cuda.jit(device=True, inline=True)
def _weighted(v, row, col, s):
    return v * s + row


def test_reduction_builders_check_their_arguments():
    for kw, msg in (({"op": "mean", "n": 64}, "op must be one of"), ({"op": "max", "n": 60}, "n must be a wgmma N"),
                    ({"op": "sum", "n": 64, "pairs": 1}, "pairs=1 and nextra=0 count arguments for fn; without fn"),
                    ({"op": "sum", "n": 64, "fn": _exp_less}, "must take 3 arguments")):
        with pytest.raises(KitError, match=msg):
            acc_row_reduce(**kw)
    with pytest.raises(KitError, match="must take 4 arguments"):
        acc_col_reduce("sum", 64, fn=_grid_value, nextra=1)


def _softmax_value(v, row, col, mx, total):
    return math.exp(v - mx) / total


def test_acc_map_takes_row_pairs_a_softmax_of_the_rows():
    """A fragment's row softmax from the kit alone: the row max and the sum of exp(v - max)
    reduced (columns past 45 masked), then mapped with both as row pairs; against NumPy."""
    n, ncols = 64, 45
    values = acc_map(_grid_value, n)
    rmax = acc_row_reduce("max", n)
    rexp = acc_row_reduce("sum", n, fn=_exp_less, pairs=1)
    soft = acc_map(_softmax_value, n, pairs=2)

    @cuda.jit
    def kernel(out):
        t = cuda.threadIdx.x
        acc = values(acc_zeros("f32.bf16.bf16", n), t, 0, 0)
        mx = rmax(acc, t, 0, 0, ncols)
        acc_store(soft(acc, t, 0, 0, mx, rexp(acc, t, 0, 0, ncols, mx)), "f32.bf16.bf16", out, t, 0, 0)

    out = cuda.to_device(np.full((64, n), np.nan, np.float32))
    launch(kernel, 1, 128, (out,))
    v = _grid_values(64, n)
    inside = v[:, :ncols]
    e = np.exp(v - inside.max(1, keepdims=True))
    np.testing.assert_allclose(out.copy_to_host(), e / e[:, :ncols].sum(1, keepdims=True), rtol=2e-6)


@pytest.mark.parametrize("m", [200, 150, 70, 60])
def test_pair_store_writes_each_row_once_up_to_the_vectors_end(m):
    """Each consumer's row maxima stored through pair_store into out[row0:m] (row0 = 64 cw + 64
    here): every row inside written once with its own maximum, rows from m on untouched (the
    second consumer's rows all past m where m <= 128)."""
    values = acc_map(_grid_value, 64)
    rmax = acc_row_reduce("max", 64)

    @cuda.jit
    def kernel(out, m):
        t = cuda.threadIdx.x
        cw, ct = t // 128, t % 128
        row0 = 64 + 64 * cw
        pair_store(rmax(values(acc_zeros("f32.bf16.bf16", 64), ct, row0, 0), ct, row0, 0, 64), out[row0:m], ct)

    out = cuda.to_device(np.full(200, np.nan, np.float32))
    launch(kernel, 1, 256, (out, m))
    got = out.copy_to_host()
    want = np.full(200, np.nan)
    top = min(m, 192)  # the two consumers' rows: 64-191
    want[64:top] = _grid_values(top, 64)[64:].max(1)
    np.testing.assert_array_equal(got, want)


def _causal_gemm():
    """A walk of one's own on the kit: for each of B batches of L rows, the lower triangle of
    128 x 128 tiles of S[b] = Q[b] @ K[b]^T (tiles above the diagonal neither loaded nor
    computed), the producer filling the ring with fill_stages, both sides decoding a unit with one
    device function; Q and K (B * L, D) with L a multiple of the tile (no tile crosses batches)."""
    from nbwgmma.intrinsics import setmaxnreg_dec, setmaxnreg_inc
    from nbwgmma.kit import Cooperative, fill_stages, inlined, warpgroup_index

    kind = "f32.bf16.bf16"
    pipe = TmaPipeline(3, consumers=2)
    coop = Cooperative(kind, pipe, 128, 128)
    sched = TileScheduler(128, 128, 64)

    def load(slot, full, kb, tm, tn, maps):  # tm, tn: global tile rows of Q and K; a plain def (fill_stages wraps it)
        coop.load(slot, full, maps[0], maps[1], kb * 64, tm * 128, tn * 128, coop.a_bytes)

    fill = fill_stages(pipe, coop.stage_bytes, load)

    @inlined
    def unit(u, per_b, tiles):  # unit u -> (first tile row of its batch, the tile's row and column)
        b = np.int32(np.uint32(u) // np.uint32(per_b))  # (unsigned: a 32-bit division)
        r = np.int32(u) - b * np.int32(per_b)
        tm = np.int32(0)
        while (tm + 1) * (tm + 2) // 2 <= r:
            tm += 1
        return b * np.int32(tiles), tm, r - tm * (tm + 1) // 2

    @cuda.jit(launch_bounds=(384, 1))
    def kernel(tmap_q, tmap_k, s_out, nb, tiles, d):
        base, ring = pipe.setup()
        tid = cuda.threadIdx.x
        per_b = tiles * (tiles + 1) // 2
        kblocks = (d + 63) // 64
        if tid < 128:
            setmaxnreg_dec(40)
            if tid == 0:
                s, ph = 0, 0
                for u in range(sched.first(), nb * per_b, sched.step()):
                    b0, tm, tn = unit(u, per_b, tiles)
                    s, ph = fill(ring, base, s, ph, b0 + tm, b0 + tn, 0, kblocks, (tmap_q, tmap_k))
            else:
                return
        else:
            setmaxnreg_inc(232)
            cw, ct = warpgroup_index() - 1, tid % 128
            s, ph = 0, 0
            for u in range(sched.first(), nb * per_b, sched.step()):
                b0, tm, tn = unit(u, per_b, tiles)
                acc, s, ph = coop.tile(ring, base, s, ph, 0, kblocks, cw, ct)
                acc_store(acc, kind, s_out, ct, (b0 + tm) * 128 + cw * 64, tn * 128)
        pipe.teardown()

    return kernel, coop, dynamic_smem_bytes(3 * coop.stage_bytes)


@pytest.mark.parametrize("nb, tiles, ctas", [(2, 2, 2), (1, 3, 4)])
def test_a_walk_of_ones_own_fills_the_ring_with_fill_stages(nb, tiles, ctas):
    """The batched lower-triangular walk of _causal_gemm: every tile on or below the diagonal
    of every batch exact (small integers), every tile above it left as it was (NaN)."""
    from nbwgmma.layout import to_bits
    from nbwgmma.tma import TensorMap

    kernel, coop, smem = _causal_gemm()
    L, d = 128 * tiles, 128
    rng = np.random.default_rng(nb)
    q, k = (rng.integers(-2, 3, (nb * L, d)).astype(np.float64) for _ in range(2))
    tq = TensorMap(cuda.to_device(to_bits(q, "bf16")), coop.box_a, dtype="bf16")
    tk = TensorMap(cuda.to_device(to_bits(k, "bf16")), coop.box_b, dtype="bf16")
    s_out = cuda.to_device(np.full((nb * L, L), np.nan, np.float32))
    launch(kernel, ctas, 384, (tq.address, tk.address, s_out, np.int32(nb), np.int32(tiles), np.int32(d)), smem=smem)
    got = s_out.copy_to_host().reshape(nb, L, L)
    for b in range(nb):
        want = q[b * L:(b + 1) * L] @ k[b * L:(b + 1) * L].T
        lower = np.kron(np.tril(np.ones((tiles, tiles))), np.ones((128, 128))).astype(bool)
        np.testing.assert_array_equal(got[b][lower], want[lower])
        assert np.isnan(got[b][~lower]).all()


@pytest.mark.parametrize("n, ncols", [(64, 64), (64, 37), (16, 3), (8, 0)])
def test_argmax_and_argmin_take_the_first_column_of_the_best_value(n, ncols):
    """argmax / argmin over rows of small integers full of ties (the first column wins, as in
    NumPy), columns from ncols on masked, the column counted in the output (col0 = 8); a row
    with no column inside gives -1. Also through a mapped function (argmax of -v = argmin)."""
    values = acc_map(_grid_value, n)
    amax, amin = acc_row_reduce("argmax", n), acc_row_reduce("argmin", n)
    neg = acc_row_reduce("argmax", n, fn=lambda v, r, c: -v)

    @cuda.jit
    def kernel(out, ncols):
        t = cuda.threadIdx.x
        acc = values(acc_zeros("f32.bf16.bf16", n), t, 64, 8)
        got = (amax(acc, t, 64, 8, ncols), amin(acc, t, 64, 8, ncols), neg(acc, t, 64, 8, ncols))
        for j in range(3):
            out[t, 2 * j] = got[j][0]
            out[t, 2 * j + 1] = got[j][1]

    out = cuda.to_device(np.full((128, 6), -7, np.int32))
    launch(kernel, 1, 128, (out, 8 + ncols))
    got = out.copy_to_host()
    v = _grid_values(128, 8 + n)[64:, 8:][:, :ncols]
    t = np.arange(128)
    lr = 16 * (t // 32) + (t % 32) // 4
    for h in (0, 1):
        rows = lr + 8 * h
        if ncols == 0:
            assert (got[:, h::2] == -1).all()
            continue
        np.testing.assert_array_equal(got[:, h], 8 + v[rows].argmax(1))
        np.testing.assert_array_equal(got[:, 2 + h], 8 + v[rows].argmin(1))
        np.testing.assert_array_equal(got[:, 4 + h], 8 + v[rows].argmin(1))


@cuda.jit
def _draws(out, words, seed, base):
    i = cuda.grid(1)
    if i < out.shape[0]:
        off = base + i
        out[i, 0] = rand(seed, off)
        u0, u1, u2, u3 = rand4x(seed, off)
        out[i, 1] = u0
        out[i, 2] = u1
        out[i, 3] = u2
        out[i, 4] = u3
        r0, r1, r2, r3 = randint4x(seed, off)
        words[i, 0] = r0
        words[i, 1] = r1
        words[i, 2] = r2
        words[i, 3] = r3
        words[i, 4] = randint(seed, off)


@pytest.mark.parametrize("seed, base", [(0, 0), (123456789, 1 << 31), (-5, (1 << 32) - 40), ((1 << 40) + 7, 99),
                                        (3, (9 << 40) - 20)])
def test_random_draws_are_the_host_models_bit_for_bit(seed, base):
    """rand, rand4x, randint4x and randint of nbwgmma.kit against nbwgmma.random, exactly; seeds
    past 32 bits and negative, offsets across 2^31 and 2^32 and past 2^40 (the high word counts)."""
    import nbwgmma.random as hr

    n = 80
    out = cuda.to_device(np.full((n, 5), np.nan, np.float32))
    words = cuda.to_device(np.zeros((n, 5), np.uint32))
    launch(_draws, 1, 96, (out, words, np.int64(seed), np.int64(base)))
    offs = base + np.arange(n)
    got, w = out.copy_to_host(), words.copy_to_host()
    np.testing.assert_array_equal(got[:, 0], hr.rand(seed, offs))
    np.testing.assert_array_equal(got[:, 1:], np.stack(hr.rand4x(seed, offs), 1))
    np.testing.assert_array_equal(w[:, :4], np.stack(hr.randint4x(seed, offs), 1))
    np.testing.assert_array_equal(w[:, 4], w[:, 0])
    assert ((got >= 0) & (got < 1)).all() and len(np.unique(w[:, :4])) == 4 * n


@cuda.jit(device=True, inline=True)
def _dropout(v, row, col, seed, p, scale, n):
    return v * scale if rand(seed, row * n + col) > p else np.float32(0.0)


def test_dropout_in_acc_map_keeps_the_host_models_mask():
    """A dropout mapped over a 64 x 64 fragment (offset row * n + col, the seed and p as acc_map's
    scalars) keeps exactly where nbwgmma.random.rand(seed, offsets) > p, scaled by 1 / (1 - p)."""
    import nbwgmma.random as hr

    n, seed, p = 64, 2024, np.float32(0.25)
    drop = acc_map(_dropout, n, nextra=4)
    values = acc_map(_grid_value, n)

    @cuda.jit
    def kernel(out, seed, p, scale):
        t = cuda.threadIdx.x
        acc = drop(values(acc_zeros("f32.bf16.bf16", n), t, 0, 0), t, 0, 0, seed, p, scale, n)
        acc_store(acc, "f32.bf16.bf16", out, t, 0, 0)

    out = cuda.to_device(np.full((64, n), np.nan, np.float32))
    scale = np.float32(1 / (1 - p))
    launch(kernel, 1, 128, (out, np.int64(seed), p, scale))
    keep = hr.rand(seed, np.arange(64 * n).reshape(64, n)) > p
    want = np.where(keep, _grid_values(64, n).astype(np.float32) * scale, np.float32(0))
    np.testing.assert_array_equal(out.copy_to_host(), want)
    assert 0.6 < keep.mean() < 0.9


@cuda.jit(device=True, inline=True)
def _group_where(a, b, c, d, row, col, scale):
    return a + row * scale + col, b + row * scale + col + 1, c + (row + 8) * scale + col, d + (row + 8) * scale + col + 1


@cuda.jit(device=True, inline=True)
def _dropout4(a, b, c, d, row, col, seed, p, scale, n):
    u0, u1, u2, u3 = rand4x(seed, row * n + col)
    z = np.float32(0.0)
    return (a * scale if u0 > p else z, b * scale if u1 > p else z, c * scale if u2 > p else z,
            d * scale if u3 > p else z)


@pytest.mark.parametrize("n", [8, 64])
def test_acc_map4_gives_each_group_its_four_values_and_corner(n):
    """acc_map4's groups: value order (r, c), (r, c + 1), (r + 8, c), (r + 8, c + 1), the corner
    passed as (row, col); and a dropout on rand4x keeps exactly the host model's mask
    (nbwgmma.random.rand4x_2x2), from row0 = 64 and col0 = 8."""
    import nbwgmma.random as hr

    mapped = acc_map4(_group_where, n, nextra=1)
    drop = acc_map4(_dropout4, n, nextra=4)
    values = acc_map(_grid_value, n)
    seed, p, scale, ld = 77, np.float32(0.5), np.float32(2.0), n + 8

    @cuda.jit
    def kernel(out, kept, seed, p, scale, ld):
        t = cuda.threadIdx.x
        acc_store(mapped(acc_zeros("f32.bf16.bf16", n), t, 64, 8, 1000), "f32.bf16.bf16", out, t, 0, 0)
        acc = drop(values(acc_zeros("f32.bf16.bf16", n), t, 64, 8), t, 64, 8, seed, p, scale, ld)
        acc_store(acc, "f32.bf16.bf16", kept, t, 0, 0)

    out, kept = (cuda.to_device(np.full((64, n), np.nan, np.float32)) for _ in range(2))
    launch(kernel, 1, 128, (out, kept, np.int64(seed), p, scale, np.int64(ld)))
    rows, cols = np.indices((64, n))
    np.testing.assert_array_equal(out.copy_to_host(), (rows + 64) * 1000 + cols + 8)
    u = hr.rand4x_2x2(seed, 128, ld)[64:, 8:]
    want = np.where(u > p, _grid_values(128, 8 + n)[64:, 8:].astype(np.float32) * scale, np.float32(0))
    np.testing.assert_array_equal(kept.copy_to_host(), want)


def _batched_gemm(cluster, a_major="K", b_major="K"):
    """C[b] = A[b] @ B[b]^T over a batch, on the kit's batched blocks: the scheduler's batch_unit,
    tile_producer(batched=True), Cooperative.load_tile_3d and tma_store_part_3d, through 3-D maps
    (batch, rows, columns) whose boxes stop at each matrix's edge."""
    from nbwgmma.intrinsics import acc_to_bf16x2, bulk_wait_group, setmaxnreg_dec, setmaxnreg_inc
    from nbwgmma.kit import Cooperative, tile_producer, tma_store_part_3d, warpgroup_index

    kind = "f32.bf16.bf16"
    pipe = TmaPipeline(3, consumers=2, cluster=cluster)
    coop = Cooperative(kind, pipe, 128, 128, a_major=a_major, b_major=b_major)
    sched = TileScheduler(128, 128, 64, group_m=2, cluster=cluster)
    C_OFF, PART = 3 * coop.stage_bytes, 64 * 64 * 2

    @cuda.jit(device=True, inline=True)
    def load(slot, full, kb, tm, tn, maps, batch):
        coop.load_tile_3d(slot, full, maps[0], maps[1], kb, tm, tn, batch)

    produce = tile_producer(pipe, sched, coop.stage_bytes, load, batched=True)

    @cuda.jit(launch_bounds=(384, 1))
    def kernel(tmap_a, tmap_b, tmap_c, nb, m, n, k):
        base, ring = pipe.setup()
        tid = cuda.threadIdx.x
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        if tid < 128:
            setmaxnreg_dec(40)
            if tid == 0:
                produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, (tmap_a, tmap_b), nb)
        else:
            setmaxnreg_inc(232)
            cw, ct = warpgroup_index() - 1, tid % 128
            c0 = base + C_OFF + cw * 2 * PART
            s, ph, rank = 0, 0, sched.rank()
            for u in range(sched.first(), nb * nunits, sched.step()):
                b, v = sched.batch_unit(u, nunits)
                tm, tn = sched.tile(v, tiles_mc, tiles_n, rank)
                acc, s, ph = coop.tile(ring, base, s, ph, 0, kblocks, cw, ct)
                row, col = tm * 128 + cw * 64, tn * 128
                tma_store_part_3d(acc_to_bf16x2(acc[:32]), c0, ct, cw, tmap_c, col, row, b)
                tma_store_part_3d(acc_to_bf16x2(acc[32:]), c0 + PART, ct, cw, tmap_c, col + 64, row, b)
            if ct == 0:
                bulk_wait_group(0)
        pipe.teardown()

    return kernel, coop, sched, dynamic_smem_bytes(C_OFF + 4 * PART)


@pytest.mark.parametrize("cluster, nb, m, n, k, ctas, majors", [(1, 3, 200, 320, 192, 2, ("K", "K")),
                                                                (2, 2, 136, 192, 192, 4, ("K", "K")),
                                                                (1, 2, 136, 192, 160, 2, ("MN", "MN"))])
def test_a_batched_gemm_on_3d_maps_is_exact_and_stays_in_each_matrix(cluster, nb, m, n, k, ctas, majors):
    """Small integers, sizes that cut tiles (the last tile row of each matrix reads zeros past its
    end, not the next matrix's rows, and stores nothing there), exact against float64; K-major
    operands, and MN-major ones ((batch, K, rows), boxes of 64 columns) with a K tail (K = 160:
    the last k-block reads past each matrix's K, zeros, not the next matrix's first rows)."""
    from nbwgmma.layout import from_bits, to_bits
    from nbwgmma.tma import TensorMap

    kernel, coop, sched, smem = _batched_gemm(cluster, majors[0], majors[1])
    rng = np.random.default_rng(nb + cluster)
    a = rng.integers(-2, 3, (nb, m, k)).astype(np.float64)
    b = rng.integers(-2, 3, (nb, n, k)).astype(np.float64)
    stored = [x if major == "K" else np.ascontiguousarray(x.transpose(0, 2, 1)) for x, major in zip((a, b), majors)]
    ta = TensorMap(cuda.to_device(to_bits(stored[0], "bf16")), coop.box_a_3d, dtype="bf16")
    tb = TensorMap(cuda.to_device(to_bits(stored[1], "bf16")), coop.box_b_3d, dtype="bf16")
    c = cuda.to_device(np.full((nb, m, n), 0x7FC0, np.uint16))  # bf16 NaN: every element must be written
    tc = TensorMap(c, (1, 64, 64), dtype="bf16")
    grid = sched.grid(m, n, k, ctas, batch=nb)
    launch(kernel, grid, 384, (ta.address, tb.address, tc.address, np.int32(nb), np.int32(m), np.int32(n),
                               np.int32(k)), smem=smem, cluster=(cluster, 1, 1))
    want = from_bits(to_bits(a @ b.transpose(0, 2, 1), "bf16"), "bf16")  # exact in f32, one rounding
    np.testing.assert_array_equal(from_bits(c.copy_to_host(), "bf16"), want)


@pytest.mark.parametrize("op", ["max", "min", "add"])
def test_pair_atomic_combines_the_tiles_row_results(op):
    """Four CTAs, each one column tile (64 columns at col0 = 64 b) of the same 128 rows: each
    consumer's row maxima (sums) combined into one vector by pair_atomic across the CTAs, rows past
    m = 100 untouched; against NumPy over the whole 128 x 256 grid (small integers: exact sums)."""
    from nbwgmma.kit import pair_atomic

    values = acc_map(_grid_value, 64)
    red = acc_row_reduce("sum" if op == "add" else op, 64)
    combine = pair_atomic(op)

    @cuda.jit
    def kernel(out, m):
        t = cuda.threadIdx.x
        cw, ct = t // 128, t % 128
        row0, col0 = 64 * cw, 64 * cuda.blockIdx.x
        combine(red(values(acc_zeros("f32.bf16.bf16", 64), ct, row0, col0), ct, row0, col0, 256), out[row0:m], ct)

    start = {"max": -np.inf, "min": np.inf, "add": 0.0}[op]
    vec = np.full(128, np.nan, np.float32)
    vec[:100] = start
    out = cuda.to_device(vec)
    launch(kernel, 4, 256, (out, 100))
    grid = _grid_values(128, 256)
    want = {"max": grid.max(1), "min": grid.min(1), "add": grid.sum(1)}[op]
    got = out.copy_to_host()
    np.testing.assert_array_equal(got[:100], want[:100].astype(np.float32))
    assert np.isnan(got[100:]).all()


@cuda.jit(launch_bounds=(384, 1))
def _three_roles(out):
    """A producer warpgroup gives up registers, two consumers take them and write a row of 128
    values each: a kernel whose warpgroups have roles."""
    tid = cuda.threadIdx.x
    if tid < 128:
        setmaxnreg_dec(40)
    else:
        setmaxnreg_inc(232)
        out[tid // 128 - 1, tid % 128] = tid


def test_a_block_below_the_bounds_of_a_kernel_with_warpgroup_roles_is_refused():
    """From a newcomer's trial: a 384-thread warp-specialized kernel launched with 256 threads
    ran without an error and left the second consumer's rows unwritten. launch now refuses it
    (from the compiled code on the GPU, at the first setmaxnreg in the simulator), naming the
    kernel, the bounds and the block; 384 threads fill both rows."""
    out = cuda.to_device(np.full((2, 128), -1, np.int32))
    with pytest.raises(LaunchError, match=r"launch of _three_roles: block of 256 threads is below the 384 of its "
                                          r"launch bounds.*setmaxnreg.*warpgroup 2 would not exist.*block=384"):
        launch(_three_roles, 1, 256, (out,))
    if not config.ENABLE_CUDASIM:  # (prepare() needs the GPU)
        from nbwgmma.launch import prepare
        with pytest.raises(LaunchError, match=r"block of 128 threads is below the 384.*threads 128-383"):
            prepare(_three_roles, 1, 128, (out,))
    launch(_three_roles, 1, 384, (out,))
    np.testing.assert_array_equal(out.copy_to_host(), np.arange(128, 384).reshape(2, 128))


@cuda.jit
def _timeline_kernel(rec, out):
    tid = cuda.threadIdx.x
    if tid == 0:
        timeline_start(rec)
    out[timeline_cta() * cuda.blockDim.x + tid] = tid + 1
    cuda.syncthreads()
    if tid == 0:
        timeline_stamp(rec, 2)
        if cuda.blockIdx.x % 2 == 0:
            timeline_stamp(rec, 3)


def test_a_timeline_records_each_ctas_sm_and_its_events_in_order():
    """timeline_start writes the CTA's SM and start, timeline_stamp an event's time, each into the CTA's
    row; a column a CTA did not write stays the poison (NaN in times, counted missing in the summary).
    The simulator's SM is the CTA's index modulo its 132 SMs."""
    from nbwgmma.timeline import Timeline

    tl = Timeline(6, ("written", "even CTAs"))
    out = cuda.to_device(np.zeros(6 * 64, np.int32))
    launch(_timeline_kernel, 6, 64, (tl.array, out))
    assert (out.copy_to_host() == np.tile(np.arange(1, 65), 6)).all()
    rows = tl.read()
    sm, t = tl.times()
    assert (rows[:, 1:3] > 0).all() and (sm >= 0).all() and (sm == rows[:, 0]).all()
    if config.ENABLE_CUDASIM:
        assert sm.tolist() == list(range(6))
    assert np.nanmin(t[:, 0]) == 0 and (t[:, 1] >= t[:, 0]).all()
    assert not np.isnan(t[0::2, 2]).any() and (t[0::2, 2] >= t[0::2, 1]).all()
    assert np.isnan(t[1::2, 2]).all() and (rows[1::2, 3] == -1).all()
    text = tl.summary()
    assert text.startswith("6 CTAs on") and "(3 CTAs missing)" in text and "CTA " in text
    assert tl.column("written") == 2 and tl.column("even CTAs") == 3
    with pytest.raises(KitError, match="no event 'odd'"):
        tl.column("odd")


def test_the_library_gemm_traced_is_exact_and_records_its_events_in_causal_order():
    """GemmConfig(trace=True): the product is unchanged (small integers, exact), and each CTA's row
    holds its SM, start and TRACE_EVENTS in the order they must happen (the producer's first load
    before the first stage lands, that before the tiles are done, the stores after them). Three
    CTAs over twelve 64 x 64 tiles: each takes four in turn."""
    from nbwgmma.kernels.gemm_config import TRACE_EVENTS
    from nbwgmma.timeline import Timeline
    from tests.sim_vs_gpu import run_library_gemm

    rng = np.random.default_rng(3)
    a = rng.integers(-3, 4, (200, 128)).astype(np.float64)
    b = rng.integers(-3, 4, (136, 128)).astype(np.float64)
    tl = Timeline(3, TRACE_EVENTS)
    got = run_library_gemm(a, b, 1, "tma", bm=64, bn=64, timeline=tl, grid=3)
    np.testing.assert_array_equal(got, (a @ b.T).astype(np.float32))
    rows = tl.read()
    assert (rows[:, 1:] > 0).all(), rows
    start, loads, landed, issued, done, stored = rows[:, 1:].T
    assert (start <= loads).all() and (loads <= landed).all() and (landed <= done).all()
    assert (loads <= issued).all() and (done <= stored).all()


@pytest.mark.parametrize("m, n, k, grid, kw", [
    (200, 136, 320, 3, {}), (200, 136, 128, 3, {}), (200, 136, 320, 12, {}),
    (200, 136, 320, 2, dict(bm=128, bn=64)),                                     # two consumers zero
    (200, 136, 320, 2, dict(cluster=2, multicast="A", tails="b")),               # a cluster's walk sharing A
    (136, 200, 320, None, dict(cluster=2, multicast="B", tails="a")),            # sharing B, a CTA past M
])
def test_tail_maps_are_exact_whoever_zeroes_the_rows_past_them(m, n, k, grid, kw):
    """b_tail and a_tail (8 rows of B's last tile column, 8 of A's last tile row): a CTA zeroes the
    stages' rows past the tail boxes only where its first tile is a tail tile (its consumers, beside
    the first loads) or leaves stages unfilled (K = 128: two k-blocks of four stages; all threads,
    before them); elsewhere a later tail tile reads an earlier whole tile's rows, which feed only C's
    padding. Three CTAs over twelve 64 x 64 tiles (each walking four, tail tiles among later ones),
    twelve CTAs (one each), two consumers, clusters sharing the operand without a tail map: exact on
    small integers, C poisoned."""
    from tests.sim_vs_gpu import run_library_gemm

    rng = np.random.default_rng(k + (grid or 0) + m)
    a = rng.integers(-1, 2, (m, k)).astype(np.float64)  # (sums within bf16's exact integers)
    b = rng.integers(-1, 2, (n, k)).astype(np.float64)
    kw = dict(dict(bm=64, bn=64, tails=True), **kw)
    cluster = kw.pop("cluster", 1)
    got = run_library_gemm(a, b, cluster, "tma", grid=grid, **kw)
    assert np.abs(a @ b.T).max() <= 256
    np.testing.assert_array_equal(got, (a @ b.T).astype(np.float32))
