"""A kernel's timeline without a GPU: the timer intrinsics' PTX and SASS, the traced library GEMM's
configuration and kernel (the same main loop, no spill), and the host reader's refusals. The
simulator and the GPU run the records (tests/sim_kit_cases.py: a kernel of the kit's stamps, the
traced library GEMM exact with its events in causal order)."""

import re

import pytest
from numba import cuda, types

from nbwgmma.errors import KitError
from nbwgmma.intrinsics import clock64, globaltimer, nsmid, smid
from nbwgmma.kernels.gemm import GemmConfig, gemm_kernel
from nbwgmma.kernels.gemm_config import TRACE_EVENTS
from nbwgmma.report import compile_reports
from nbwgmma.timeline import Timeline


@cuda.jit
def _reads(out):
    t0 = globaltimer()
    c0 = clock64()
    out[0] = smid()
    out[1] = nsmid()
    out[2] = clock64() - c0
    out[3] = globaltimer() - t0


def test_the_timer_reads_are_special_register_moves_the_compiler_keeps():
    """Each read is one mov from its special register (PTX ISA, Special Registers); two reads of one
    timer stay two (volatile: not merged), and SASS reads the registers (S2R / S2UR / CS2R)."""
    (rep,) = compile_reports([(_reads, (types.Array(types.uint64, 1, "C"),), None)])
    for reg, count in (("%globaltimer", 2), ("%clock64", 2), ("%smid", 1), ("%nsmid", 1)):
        assert rep.ptx.count(f", {reg};") == count, reg
    assert rep.sass_text.count("SR_GLOBALTIMERLO") == 2 and rep.sass_text.count("SR_CLOCKLO") == 2
    assert "SMID" in rep.sass_text  # (S2UR of SR_VIRTUALSMID; %nsmid folds to a constant)
    assert rep.spill_bytes == 0


def test_a_traced_gemm_is_a_kernel_of_its_own():
    """trace=True keys apart from the untraced kernel (whose key is as before) and round-trips, alone
    and beside the tail maps."""
    for kw in (dict(), dict(b_tail=True), dict(a_tail=True, batched=False)):
        plain, traced = GemmConfig("f32.bf16.bf16", **kw), GemmConfig("f32.bf16.bf16", trace=True, **kw)
        assert plain.key() != traced.key() and not plain.trace and traced.trace
        assert GemmConfig(*traced.key()).key() == traced.key() and GemmConfig(*plain.key()).key() == plain.key()
        assert not GemmConfig(*plain.key()).trace and GemmConfig(*traced.key()).b_tail == traced.b_tail
    assert len(GemmConfig("f32.bf16.bf16").key()) == 29  # (the untraced keys of every kernel built before)
    assert "traced" in repr(GemmConfig("f32.bf16.bf16", trace=True))


def test_traced_gemm_kernels_compile_clean_with_the_same_main_loop():
    """The records add timer reads and stores, no spill or local memory, and leave the wgmmas and TMA
    loads as they were."""
    jobs, pairs = [], []
    for kw in (dict(), dict(bm=64, bn=128, stages=8, b_tail=True), dict(bm=128, bn=192)):
        for trace in (False, True):
            cfg = GemmConfig("f32.bf16.bf16", epilogue="tma", trace=trace, **kw)
            maps = (types.uint64,) * (3 + cfg.b_tail)
            jobs.append((gemm_kernel(cfg), maps + (types.int32,) * 3 + (types.float32,)
                         + ((types.Array(types.int64, 2, "C"),) if trace else ()), None))
            pairs.append(cfg)
    reps = compile_reports(jobs)
    for j in range(0, len(reps), 2):
        plain, traced = reps[j], reps[j + 1]
        assert traced.spill_bytes == 0 and traced.local_memory_ops == 0, (pairs[j + 1], traced.warnings)
        assert traced.sass["HGMMA"] == plain.sass["HGMMA"] and traced.sass["UTMALDG"] == plain.sass["UTMALDG"]
        stamps = re.findall(r"mov\.u64 %rd\d+, %globaltimer;", traced.ptx)  # (the timed wait's reads aside)
        assert len(stamps) == 1 + len(TRACE_EVENTS) and "%smid;" in traced.ptx
        assert "%globaltimer" not in plain.ptx


@pytest.mark.parametrize("ctas, events, message", [
    (0, (), "positive integer"), (True, (), "positive integer"), (2.0, (), "positive integer"),
    (4, ("a", 3), "names"),
])
def test_a_timeline_of_no_ctas_or_unnamed_events_is_refused(ctas, events, message):
    with pytest.raises(KitError, match=message):
        Timeline(ctas, events)
