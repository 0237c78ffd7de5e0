"""User mistakes in kernels built on the kit's higher blocks (``PingPong``, ``Cooperative`` with
``EpilogueWarps``, ``turn_wait`` / ``turn_pass``, ``TmaPipeline``): each mutation of a small
correct kernel is reported (a SimHazard, a SimStopped or a typing error naming this file's line),
whatever order the threads run in, and the correct twin runs exactly against a float64 or integer
reference (run by tests/test_sim.py in a child process with NUMBA_ENABLE_CUDASIM=1; also by
hand: NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/sim_kit_mutation_cases.py).

The kernels are small: a 2-stage ring, 128 x 128 (PingPong) or 128 x 64 (Cooperative) tiles of
small integers, three tiles of two k-blocks (six fills: every phase of the ring turns over).
"""

import re

import numpy as np
import pytest
from numba import config, cuda

from nbwgmma import sim
from nbwgmma.intrinsics import acc_store, mbarrier_arrive_expect_tx, setmaxnreg_dec, setmaxnreg_inc, smem_addr
from nbwgmma.intrinsics.errors import NbwgmmaTypingError
from nbwgmma.kit import (Cooperative, EpilogueWarps, PingPong, TmaPipeline, acc_map, activation, turn_pass, turn_wait,
                         warpgroup_index)
from nbwgmma.launch import dynamic_smem_bytes, launch
from nbwgmma.layout import from_bits, to_bits
from nbwgmma.tma import TensorMap

assert config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1"

KIND = "f32.bf16.bf16"
SCHEDULES = ["fifo", "random:1", "random:2"]
TILES, KBLOCKS = 3, 2


@pytest.fixture(params=SCHEDULES)
def schedule(request, monkeypatch):
    monkeypatch.setenv("NBWGMMA_SIM_SCHEDULE", request.param)
    return request.param


def _operands(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(-2, 3, (m, k)).astype(np.float64)
    b = rng.integers(-2, 3, (n, k)).astype(np.float64)
    return a, b, cuda.to_device(to_bits(a, "bf16")), cuda.to_device(to_bits(b, "bf16"))


# --- PingPong: two consumer warpgroups taking 128 x 128 tiles in turn --------------------------

PIPE1 = TmaPipeline(2, consumers=1)
PP = PingPong(KIND, PIPE1)


def _pingpong(mut):
    """Warpgroup 0's thread 0 fills the ring with TILES tiles of KBLOCKS stages; warpgroups 1 and 2
    take tiles 0, 2 and 1 in turn and store them (f32), with mistake ``mut`` ("" for none)."""
    STAGE, tiles, kblocks = PP.STAGE_BYTES, TILES, KBLOCKS

    @cuda.jit(launch_bounds=(384, 1))
    def kernel(ta, tb, c):
        base, ring = PIPE1.setup()
        tid = cuda.threadIdx.x
        if tid < 128:
            setmaxnreg_dec(40)
            if mut == "setmaxnreg twice":
                setmaxnreg_dec(24)  # a second setmaxnreg with no barrier of the warpgroup after the first
            if tid == 0:
                s, ph = 0, 0
                for t in range(tiles):
                    for kb in range(kblocks):
                        if mut == "no producer_acquire":
                            full = ring + 8 * s  # the loads' barrier, never armed, its slot never waited for
                        elif mut == "no wait for empty":
                            full = ring + 8 * s
                            mbarrier_arrive_expect_tx(full, STAGE)  # armed, but the slot not waited for
                        elif mut == "tx short":
                            full = PIPE1.producer_acquire(ring, s, ph, STAGE - 1024)
                        elif mut == "tx long":
                            full = PIPE1.producer_acquire(ring, s, ph, STAGE + 1024)
                        else:
                            full = PIPE1.producer_acquire(ring, s, ph, STAGE)
                        PP.load(base + s * STAGE, full, ta, tb, kb * PP.bk, t * 128, 0)
                        if mut == "producer phase not flipped":
                            s = (s + 1) % 2
                        else:
                            s, ph = PIPE1.advance(s, ph)
        else:
            setmaxnreg_inc(240 if mut == "setmaxnreg past the pool" else 232)
            cw, ct = warpgroup_index() - 1, tid % 128
            if mut == "cw off by one":
                cw = warpgroup_index()
            kb_c = kblocks - 1 if mut == "consumers short a k-block" else kblocks
            if mut == "no start":
                s, ph = 0, 0
            elif mut == "start of the other":
                s, ph = PP.start(1 - cw, kb_c)
            else:
                s, ph = PP.start(cw, kb_c)
            for u in range(cw, tiles, 2):
                wait = u != 0
                pass_ = u + 1 < tiles
                if mut == "no turn_wait":
                    wait = False
                elif mut == "turn passed to nobody":
                    pass_ = True
                elif mut == "turn never passed":
                    pass_ = False
                elif mut == "first tile waits":
                    wait = True
                if mut == "cw and ct swapped":
                    acc0, acc1, s, ph = PP.tile(ring, base, s, ph, kb_c, cw, ct, wait, pass_)
                elif mut == "every thread releases":
                    acc0, acc1, s, ph = PP.tile(ring, base, s, ph, kb_c, 0, cw, wait, pass_)
                else:
                    acc0, acc1, s, ph = PP.tile(ring, base, s, ph, kb_c, ct, cw, wait, pass_)
                if mut == "released twice" and ct == 0:
                    PIPE1.consumer_release(ring, (s + 1) % 2)  # the tile's last stage, released once more
                if mut == "stage reused before its fill is waited for" and u + 2 < tiles:
                    dyn = cuda.shared.array(0, np.float32)
                    off = (base - smem_addr(dyn)) // 4 + s * (STAGE // 4)
                    dyn[off + ct] = 0.0  # scratch in the next tile's first stage: the producer may be filling it
                acc_store(acc0, KIND, c, ct, u * 128, 0)
                acc_store(acc1, KIND, c, ct, u * 128 + 64, 0)
    return kernel


def _run_pingpong(mut):
    m, n, k = TILES * 128, 128, KBLOCKS * PP.bk
    a, b, da, db = _operands(m, n, k)
    ta, tb = TensorMap(da, PP.box_a, dtype="bf16"), TensorMap(db, PP.box_b, dtype="bf16")
    c = cuda.to_device(np.full((m, n), np.nan, np.float32))
    launch(_pingpong(mut), 1, 384, (ta.address, tb.address, c), smem=dynamic_smem_bytes(2 * PP.STAGE_BYTES))
    return c.copy_to_host(), a @ b.T


# --- Cooperative consumers with EpilogueWarps: the producer warpgroup's warps 1-3 store C -------

PIPE2 = TmaPipeline(2, consumers=2)
COOP = Cooperative(KIND, PIPE2, 128, 64)
EW = EpilogueWarps(activation("relu"), 128, 64, "bf16")
PACK = acc_map(lambda v, row, col: v, 64, pack="bf16")


def _coop_epilogue(mut):
    """Thread 0 fills the ring; warpgroups 1 and 2 share each 128 x 64 tile (Cooperative) and hand
    it to the epilogue warps (threads 32-127) through EpilogueWarps' one shared C tile; relu(C)
    in bf16, with mistake ``mut``."""
    STAGE, tiles, kblocks, C_OFF = COOP.stage_bytes, TILES, KBLOCKS, 2 * COOP.stage_bytes

    @cuda.jit(launch_bounds=(384, 1))
    def kernel(ta, tb, c, m, n):
        base, ring = PIPE2.setup()
        ebar = EW.setup()
        cbuf = base + C_OFF
        tid = cuda.threadIdx.x
        if tid < 128:
            setmaxnreg_dec(56)  # (the library's split beside epilogue warps)
            if tid == 0:
                s, ph = 0, 0
                for t in range(tiles):
                    for kb in range(kblocks):
                        full = PIPE2.producer_acquire(ring, s, ph, STAGE)
                        COOP.load_tile(base + s * STAGE, full, ta, tb, kb, t, 0)
                        s, ph = PIPE2.advance(s, ph)
            elif tid >= (64 if mut == "epilogue drained by two warps" else 32):
                eph = 0
                for t in range(tiles):
                    ht = tid if mut == "epilogue thread index not shifted" else tid - 32
                    e2 = EW.drain_to(ebar, cbuf, c, eph, ht, t * 128, 0, m, n)
                    if mut != "epilogue phase not carried":
                        eph = e2
        else:
            setmaxnreg_inc(224)
            cw, ct = warpgroup_index() - 1, tid % 128
            s, ph, eph = 0, 0, 0
            for t in range(tiles):
                if mut == "no drain":
                    acc, s, ph, prev = COOP.tile_open(ring, base, s, ph, 0, kblocks, cw, ct)
                elif mut == "drained twice":
                    acc, s, ph, prev = COOP.tile_open(ring, base, s, ph, 0, kblocks, cw, ct)
                    COOP.drain(ring, ct, prev)
                    COOP.drain(ring, ct, prev)
                else:
                    acc, s, ph = COOP.tile(ring, base, s, ph, 0, kblocks, cw, ct)
                regs = PACK(acc, ct, t * 128 + cw * 64, 0)
                if mut == "no acquire":
                    EW.write(regs, cbuf, cw, 0, ct)
                    EW.commit(ebar)
                elif mut == "commit before write":
                    eph = EW.acquire(ebar, eph)
                    EW.commit(ebar)
                    EW.write(regs, cbuf, cw, 0, ct)
                elif mut == "one warpgroup stages":
                    if cw == 0:
                        eph = EW.stage(regs, cbuf, ebar, eph, cw, ct)
                elif mut == "both write part 0":
                    eph = EW.stage(regs, cbuf, ebar, eph, 0, ct)
                elif mut == "consumer phase not carried":
                    EW.stage(regs, cbuf, ebar, eph, cw, ct)
                elif mut == "warpgroup index for cw":
                    eph = EW.stage(regs, cbuf, ebar, eph, cw + 1, ct)
                else:
                    eph = EW.stage(regs, cbuf, ebar, eph, cw, ct)
    return kernel


def _run_coop_epilogue(mut):
    m, n, k = TILES * 128, 64, KBLOCKS * COOP.bk
    a, b, da, db = _operands(m, n, k, seed=1)
    ta, tb = TensorMap(da, COOP.box_a, dtype="bf16"), TensorMap(db, COOP.box_b, dtype="bf16")
    c = cuda.to_device(np.full((m, 2 * n), 0xFF, np.uint8))  # bf16 NaN in every element
    launch(_coop_epilogue(mut), 1, 384, (ta.address, tb.address, c, np.int32(m), np.int32(n)),
           smem=dynamic_smem_bytes(2 * COOP.stage_bytes + EW.tile_bytes))
    got = from_bits(c.copy_to_host().view(np.uint16), "bf16")
    return got, from_bits(to_bits(np.maximum(a @ b.T, 0), "bf16"), "bf16")


# --- turn_wait / turn_pass: two warpgroups logging their turns --------------------------------

ROUNDS = 3
LOG = 2 * ROUNDS + 1  # the turns, then the next free entry


def _turns(mut):
    """Warpgroups 0 and 1 take ROUNDS turns each in strict alternation, thread 0 of each logging
    its warpgroup (in a shared log; warpgroup 1 writes the log out at the end)."""
    rounds = ROUNDS

    @cuda.jit
    def kernel(out):
        log = cuda.shared.array(LOG, np.int32)
        g, t = cuda.threadIdx.x // 128, cuda.threadIdx.x % 128
        if cuda.threadIdx.x == 0:
            log[2 * ROUNDS] = 0
        cuda.syncthreads()
        for r in range(rounds):
            if g == 1 or r > 0:
                if mut == "turn_wait of the other group":
                    turn_wait(1 - g)
                elif mut == "turn_wait of warpgroup 2":
                    turn_wait(g + 1)
                else:
                    turn_wait(g)
            if t == 0:
                log[log[2 * ROUNDS]] = g
                log[2 * ROUNDS] += 1
            if g == 0 or r + 1 < rounds:
                if mut == "turn_pass missing" and g == 0 and r == 1:
                    continue
                turn_pass(g)
                if mut == "turn_pass twice" and g == 0 and r == 0:
                    turn_pass(g)
        if g == 1 and t == 0:
            for i in range(2 * ROUNDS):
                out[i] = log[i]

    return kernel


def _run_turns(mut):
    out = cuda.to_device(np.full(2 * ROUNDS, -1, np.int32))
    launch(_turns(mut), 1, 256, (out,))
    return out.copy_to_host(), np.array([0, 1] * ROUNDS, np.int32)


# --- TmaPipeline filled by threads: warp 0 writes each fill, warp 1 reads and releases ----------

PIPE32 = TmaPipeline(2, consumers=32, producers=32)
FILLS = 5


def _ring(mut):
    fills = FILLS

    @cuda.jit
    def kernel(out):
        slots = cuda.shared.array((2, 32), np.int32)
        bars = cuda.shared.array(4, np.uint64)
        ring = smem_addr(bars)
        t = cuda.threadIdx.x
        if t == 0:
            PIPE32.init(ring)
        if mut != "no barrier after init":
            cuda.syncthreads()
        s, ph = 0, 0
        if t < 32:
            for f in range(fills):
                if mut != "no producer_wait":
                    PIPE32.producer_wait(ring, s, ph)
                slots[s, t] = 100 * f + t
                PIPE32.producer_arrive(ring, s)
                s, ph = PIPE32.advance(s, ph)
        else:
            total = 0
            for f in range(fills):
                PIPE32.consumer_wait(ring, s, ph)
                total += slots[s, (t + f) % 32]
                if mut == "released before the read":
                    PIPE32.consumer_release(ring, s)
                    total += slots[s, (t + f + 1) % 32]
                elif mut == "released twice":
                    PIPE32.consumer_release(ring, s)
                    PIPE32.consumer_release(ring, s)
                elif mut != "never released":
                    PIPE32.consumer_release(ring, s)
                if mut == "consumer phase not flipped":
                    s = (s + 1) % 2
                elif mut == "advanced twice" and f == 1:
                    s, ph = PIPE32.advance_by(s, ph, 2)
                else:
                    s, ph = PIPE32.advance(s, ph)
            out[t - 32] = total

    return kernel


def _run_ring(mut):
    out = cuda.to_device(np.full(32, -1, np.int64))
    launch(_ring(mut), 1, 64, (out,))
    want = [sum(100 * f + (t + f) % 32 + (100 * f + (t + f + 1) % 32 if mut == "released before the read" else 0)
                for f in range(FILLS)) for t in range(32)]
    return out.copy_to_host(), np.array(want)


RUNS = {"pingpong": _run_pingpong, "coop": _run_coop_epilogue, "turns": _run_turns, "ring": _run_ring}


@pytest.mark.parametrize("family", sorted(RUNS))
def test_the_correct_kernels_are_exact(schedule, family):
    got, ref = RUNS[family]("")
    np.testing.assert_array_equal(got, ref.astype(got.dtype))


HERE = r"sim_kit_mutation_cases\.py:\d+"
HANG = r"simulated wait can never finish .*" + HERE
TYPED = (NbwgmmaTypingError,)
STOPPED = (sim.SimStopped,)
HAZARD = (sim.SimHazard,)
EITHER = (sim.SimHazard, sim.SimStopped)

#: (family, mistake, what reports it, a pattern of the report; every report names this file's line)
MUTATIONS = [
    ("pingpong", "no turn_wait", HAZARD, r"waits on mbarrier 'full\[0\]' .* for parity 1 and passes on the completion "
                                         r"of phase 1, but nothing orders the completion of phase 0 before this wait"),
    ("pingpong", "turn passed to nobody", HAZARD, r"exits .* with named barrier 6 \(256 threads\) part-way: 128 of its "
                                                  r"256 threads arrived \(threads 128-255, at .*" + HERE),
    ("pingpong", "turn never passed", STOPPED, HANG + r"\)?: waiting at the named barrier [56]"),
    ("pingpong", "first tile waits", STOPPED, HANG),
    ("pingpong", "cw off by one", TYPED, HERE + r": kit\.turn_wait: g must be an integer in \[0, 1\] .*got 2"),
    ("pingpong", "cw and ct swapped", TYPED, HERE + r": kit\.turn_(wait|pass): g must be an integer in \[0, 1\]"),
    ("pingpong", "no start", STOPPED, HANG),
    ("pingpong", "start of the other", STOPPED, HANG),
    ("pingpong", "consumers short a k-block", STOPPED, HANG + r".*Every thread that arrived on this barrier"),
    ("pingpong", "every thread releases", EITHER, HERE),
    ("pingpong", "released twice", EITHER, HERE),
    ("pingpong", "stage reused before its fill is waited for", HAZARD,
     r"\(a shared-memory store at .*" + HERE + r"\) stores to shared memory at 0x[0-9a-f]+ that a copy issued at "),
    ("pingpong", "no producer_acquire", HAZARD, r"writes shared memory at 0x[0-9a-f]+ that a copy issued at .*" + HERE),
    ("pingpong", "no wait for empty", HAZARD, r"writes shared memory at 0x[0-9a-f]+ that a copy issued at .*" + HERE),
    ("pingpong", "producer phase not flipped", HAZARD, r"writes shared memory at 0x[0-9a-f]+ that a copy issued at .*"
                                                       + HERE),
    ("pingpong", "tx short", HAZARD, HERE + r"\): mbarrier 'full\[0\]' .* received 1024 more transaction bytes"),
    ("pingpong", "tx long", STOPPED, HANG + r"\)?: mbarrier 'full\[\d\]'(?:(?!Waiting elsewhere).)*every arrival is in, "
                                           r"the bytes are short"),
    ("pingpong", "setmaxnreg past the pool", STOPPED, HERE + r": setmaxnreg_inc\(240\) waits for registers"),
    ("pingpong", "setmaxnreg twice", HAZARD, HERE + r": setmaxnreg_dec\(24\) in warpgroup 0 with nothing ordering after "
                                                    r"it the warpgroup's previous setmaxnreg"),
    ("coop", "no drain", HAZARD, r"reads an accumulator that the wgmma_mma_async .*" + HERE),
    ("coop", "drained twice", HAZARD, r"\(a TMA load at .*" + HERE + r"\)\) writes shared memory at 0x[0-9a-f]+ "),
    ("coop", "no acquire", HAZARD, r"\(acc_stmatrix_swizzled at .*" + HERE + r"\)\) writes shared memory at 0x[0-9a-f]+ "
                                   r"that thread \d+ \(ld\.shared\.v4\.b32 at .*\) read, with nothing ordering"),
    ("coop", "commit before write", HAZARD, r"\(ld\.shared\.v4\.b32 at .*\) reads shared memory at 0x[0-9a-f]+ that "
                                            r"thread \d+ \(acc_stmatrix_swizzled at .*" + HERE),
    ("coop", "one warpgroup stages", STOPPED, HANG + r"\)?: mbarrier 'c_full\[0\]'"),
    ("coop", "both write part 0", HAZARD, r"\(acc_stmatrix_swizzled at .*" + HERE + r"\)\) writes shared memory at "
                                          r"0x[0-9a-f]+ that thread \d+ .* also wrote, with nothing ordering"),
    ("coop", "warpgroup index for cw", TYPED, HERE + r": EpilogueWarps\.write: cw must be an integer in \[0, 1\] "
                                                     r".*got 2"),
    ("coop", "consumer phase not carried", STOPPED, HANG),
    ("coop", "epilogue phase not carried", HAZARD, r"waits on mbarrier 'c_empty\[0\]' .* for parity 0 and passes on "
                                                   r"the completion of phase 2, but nothing orders"),
    ("coop", "epilogue thread index not shifted", TYPED, HERE + r": EpilogueWarps\.drain_to: ht must be an integer in "
                                                                r"\[0, 95\]"),
    ("coop", "epilogue drained by two warps", STOPPED, HANG + r"\)?: mbarrier 'c_full\[0\]'"),
    ("turns", "turn_pass missing", STOPPED, HANG + r"\)?: waiting at the named barrier [56]"),
    ("turns", "turn_pass twice", HAZARD, r"named barrier 6 \(256 threads\)"),
    ("turns", "turn_wait of the other group", STOPPED, HANG + r"\)?: waiting at the named barrier [56]"),
    ("turns", "turn_wait of warpgroup 2", TYPED, HERE + r": kit\.turn_wait: g must be an integer in \[0, 1\]"),
    ("ring", "no barrier after init", HAZARD, r"mbarrier .*used (with nothing ordering its mbarrier_init|before "
                                              r"mbarrier_init)"),
    ("ring", "no producer_wait", HAZARD, HERE + r"\):? (\w+ shared memory at 0x[0-9a-f]+ that thread \d+ |waits on "
                                                r"mbarrier 'full\[0\]' .* but nothing orders the completion)"),
    ("ring", "released before the read", HAZARD, r"read, with nothing ordering that read before this write"),
    ("ring", "released twice", EITHER, HERE),
    ("ring", "never released", STOPPED, HANG + r"\)?: mbarrier 'empty\[0\]'"),
    ("ring", "consumer phase not flipped", HAZARD, r"(with nothing ordering that (read|write) before this|passes on the "
                                                   r"completion of phase \d+, but nothing orders)"),
    ("ring", "advanced twice", STOPPED, HANG),
]


@pytest.mark.parametrize("family, mut, errors, pattern", MUTATIONS, ids=[f"{f}: {m}" for f, m, _, _ in MUTATIONS])
def test_each_mistake_is_reported_at_the_kernels_line(schedule, family, mut, errors, pattern):
    with pytest.raises(errors) as exc:
        RUNS[family](mut)
    text = str(exc.value)
    assert re.search(HERE, text), text
    assert re.search(pattern, text, re.S), text
