"""Kernel typing errors of the intrinsics: their shape, and where they point.

An illegal call to an intrinsic must fail with :class:`NbwgmmaTypingError` whose
first line is ``<this file>:<line of the call>: <nbwgmma's message>`` and whose
second line is the call's source, without Numba's list of candidate
implementations (unless ``NBWGMMA_FULL_TYPING_ERRORS=1``) and without a
"compile-time constant" complaint when a literal was given. Typing fails before
any code generation, so these need no GPU and no ptxas.
"""

import inspect
import os
from types import SimpleNamespace

import numpy as np
import pytest
from numba import cuda, types
from numba.core.errors import RequireLiteralValue, TypingError

from nbwgmma.intrinsics import *  # noqa: F401,F403
from nbwgmma.intrinsics.errors import FULL_ERRORS_ENV, NbwgmmaTypingError
from nbwgmma.kit import TmaPipeline

SIG = (types.uint32[:], types.uint64[:], types.float32[:])

# Each kernel makes one illegal call, marked "# bad"; u, d, f are uint32, uint64
# and float32 arrays.


def k_setmaxnreg(u, d, f):
    setmaxnreg_inc(100)  # bad


def k_wgmma_n(u, d, f):
    acc = wgmma_mma_async((f[0], f[1], f[2]), d[0], d[1], "f32.bf16.bf16")  # bad
    f[0] = acc[0]


def k_wgmma_trans_fp8(u, d, f):
    acc = wgmma_mma_async(acc_zeros("f32.e4m3.e4m3", 64), d[0], d[1], "f32.e4m3.e4m3", trans_b=1)  # bad
    f[0] = acc[0]


def k_wgmma_float_desc(u, d, f):
    acc = wgmma_mma_async(acc_zeros("f32.bf16.bf16", 64), 1.5, d[1], "f32.bf16.bf16")  # bad
    f[0] = acc[0]


def k_named_barrier(u, d, f):
    named_barrier_sync(16, 128)  # bad


def k_mbarrier_scope(u, d, f):
    u[1] = mbarrier_arrive(u[0], "gpu")  # bad


def k_dynamic_smem(u, d, f):
    dyn = cuda.shared.array(0, np.uint8)
    u[0] = dynamic_smem_base(dyn, 1000)  # bad


def k_cluster_id(u, d, f):
    u[0] = cluster_id("w")  # bad


def k_smem_addr_scalar(u, d, f):
    u[0] = smem_addr(u[1])  # bad


def k_acc_zeros_n(u, d, f):
    acc = acc_zeros("f32.bf16.bf16", 12)  # bad
    f[0] = acc[0]


def k_ldmatrix_count(u, d, f):
    r = ldmatrix(u[0], 3)  # bad
    u[1] = r[0]


def k_tma_float_coord(u, d, f):
    tma_load_2d(u[0], d[0], u[1], f[0], 0)  # bad


def k_stmatrix_floats(u, d, f):
    stmatrix(u[0], (f[0], f[1]))  # bad


def k_store_swizzled_float_base(u, d, f):
    acc_store_swizzled(acc_zeros("f32.bf16.bf16", 64), "f32.bf16.bf16", f[0], 0, 128, "128B")  # bad


def k_pack_int_acc(u, d, f):
    r = acc_to_bf16x2(acc_zeros("s32.s8.s8", 64))  # bad
    u[0] = r[0]


# A literal given where one is needed never reads "compile-time constant"; these
# two give run-time values, where that is the message.
def k_setmaxnreg_runtime(u, d, f):
    setmaxnreg_inc(u[0])  # bad


def k_acc_zeros_runtime_n(u, d, f):
    acc = acc_zeros("f32.bf16.bf16", u[0])  # bad
    f[0] = acc[0]


# Arguments the intrinsic's signature cannot bind (Python's bare TypeError escaped Numba's typing
# with neither the intrinsic's name nor the line): PTX-template intrinsics and hand-written ones.
def k_fence_extra_argument(u, d, f):
    wgmma_fence(1)  # bad


def k_wait_group_no_argument(u, d, f):
    wgmma_wait_group()  # bad


def k_mbarrier_init_missing_count(u, d, f):
    mbarrier_init(u[0])  # bad


def k_named_barrier_unknown_keyword(u, d, f):
    named_barrier_sync(1, nthread=128)  # bad


def k_acc_store_missing_col0(u, d, f):
    acc_store(acc_zeros("f32.bf16.bf16", 64), "f32.bf16.bf16", f, 0, 0)  # bad


def k_pack_unknown_keyword(u, d, f):
    r = acc_to_bf16x2(acc_zeros("f32.bf16.bf16", 64), x=1)  # bad
    u[0] = r[0]


CASES = [
    (k_setmaxnreg, "setmaxnreg_inc: argument 'count' must be a multiple of 8 in [24, 256]; got 100"),
    (k_wgmma_n, "an accumulator of 3 float32 registers means N=6"),
    (k_wgmma_trans_fp8, "imm-trans-a/b exist only for f16/bf16 inputs; got trans with f32.e4m3.e4m3"),
    (k_wgmma_float_desc, "wgmma_mma_async: argument 'a' must be an integer (a uint64 register); got float64"),
    (k_named_barrier, "named_barrier_sync: argument 'barrier_id' must be an integer barrier id in [0, 15]; got 16"),
    (k_mbarrier_scope, "mbarrier_arrive: argument 'scope' must be one of 'cta', 'cluster'; got 'gpu'"),
    (k_dynamic_smem, "dynamic_smem_base: argument 'align' must be a power of two in [16, 4096]; got 1000"),
    (k_cluster_id, "cluster_id: argument 'axis' must be one of 'x', 'y', 'z'; got 'w'"),
    (k_smem_addr_scalar, "smem_addr: argument 'array' must be an array; got uint32"),
    (k_acc_zeros_n, "acc_zeros: f32.bf16.bf16 allows N in [8, 16,"),
    (k_ldmatrix_count, "ldmatrix: argument 'num' must be one of 1, 2, 4; got 3"),
    (k_tma_float_coord, "tma_load_2d: argument 'c0' must be an integer (a int32 register); got float32"),
    (k_stmatrix_floats, "stmatrix: argument 'regs' must be a tuple of 2 integer (uint32) registers"),
    (k_store_swizzled_float_base, "acc_store_swizzled: 'base' must be an integer; got float32"),
    (k_pack_int_acc, "acc_to_bf16x2: expected an f32 accumulator tuple; got UniTuple(int32 x 32)"),
    (k_setmaxnreg_runtime, "setmaxnreg_inc: argument 'count' must be a compile-time constant"),
    (k_acc_zeros_runtime_n, "acc_zeros: argument 'n' must be a compile-time constant"),
    (k_fence_extra_argument, "wgmma_fence: too many positional arguments: its signature is wgmma_fence(); "
                             "got wgmma_fence(1)"),
    (k_wait_group_no_argument, "wgmma_wait_group: missing a required argument: 'n': its signature is "
                               "wgmma_wait_group(n); got wgmma_wait_group()"),
    (k_mbarrier_init_missing_count, "mbarrier_init: missing a required argument: 'count': its signature is "
                                    "mbarrier_init(bar, count); got mbarrier_init(uint32)"),
    (k_named_barrier_unknown_keyword, "named_barrier_sync: missing a required argument: 'nthreads': its signature "
                                      "is named_barrier_sync(barrier_id, nthreads); got named_barrier_sync(1, "
                                      "nthread=128)"),
    (k_acc_store_missing_col0, "acc_store: missing a required argument: 'col0': its signature is acc_store(acc, "
                               "kind, out, tid, row0, col0)"),
    (k_pack_unknown_keyword, "acc_to_bf16x2: got an unexpected keyword argument 'x': its signature is "
                             "acc_to_bf16x2(acc)"),
]
RUNTIME_VALUE = {k_setmaxnreg_runtime, k_acc_zeros_runtime_n}


# Literals that break a rule PTX states for a register operand: checked at typing (a run-time
# value is the simulator's to check). Numba's retyping with the plain type passed, so these
# compiled (an lbo of 8 became 0, a swizzle code of 5 the 128B swizzle).
def k_desc_advance_8(u, d, f):
    d[0] = desc_advance(d[1], 8)  # bad


def k_make_desc_lbo_8(u, d, f):
    d[0] = make_desc(u[0], 8, 1024, 1)  # bad


def k_make_desc_swizzle_5(u, d, f):
    d[0] = make_desc(u[0], 16, 1024, swizzle_code=5)  # bad


def k_mbarrier_init_0(u, d, f):
    mbarrier_init(u[0], 0)  # bad


def k_mbarrier_init_2_20(u, d, f):
    mbarrier_init(u[0], 1 << 20)  # bad


def k_arrive_expect_tx_2_20(u, d, f):
    d[0] = mbarrier_arrive_expect_tx(u[0], 1 << 20)  # bad


def k_expect_tx_2_20(u, d, f):
    mbarrier_expect_tx(u[0], 1 << 20)  # bad


def k_zfill_17(u, d, f):
    cp_async_zfill(u[0], f, 0, 17)  # bad


def k_bulk_copy_15(u, d, f):
    bulk_copy_g2s(u[0], d[0], 15, u[1])  # bad


def k_named_barrier_id_16(u, d, f):
    named_barrier_sync_id(16, 128)  # bad


RULE_CASES = [
    (k_desc_advance_8, "desc_advance: argument 'nbytes' must be a multiple of 16 in [0, 262128] (PTX ISA: Matrix "
                       "Descriptor Format, 14 bits of 16-byte units); got 8"),
    (k_make_desc_lbo_8, "make_desc: argument 'lbo' must be a multiple of 16 in [0, 262128]"),
    (k_make_desc_swizzle_5, "make_desc: argument 'swizzle_code' must be one of 0 (none), 1 (128B), 2 (64B), 3 (32B) "
                            "(PTX ISA: Matrix Descriptor Format, a 2-bit field); got 5"),
    (k_mbarrier_init_0, "mbarrier_init: argument 'count' must be an integer in [1, 1048575] (PTX ISA: Contents of "
                        "the mbarrier object, arrival counts); got 0"),
    (k_mbarrier_init_2_20, "mbarrier_init: argument 'count' must be an integer in [1, 1048575]"),
    (k_arrive_expect_tx_2_20, "mbarrier_arrive_expect_tx: argument 'tx' must be an integer in [0, 1048575] (PTX ISA: "
                              "Contents of the mbarrier object, tx-count); got 1048576"),
    (k_expect_tx_2_20, "mbarrier_expect_tx: argument 'tx' must be an integer in [0, 1048575]"),
    (k_zfill_17, "cp_async_zfill: argument 'nvalid' must be an integer in [0, 16] (PTX ISA: cp.async"),
    (k_bulk_copy_15, "bulk_copy_g2s: argument 'nbytes' must be a multiple of 16 in [0, 1048560] (PTX ISA: "
                     "cp.async.bulk"),
    (k_named_barrier_id_16, "named_barrier_sync_id: argument 'barrier_id' must be an integer in [0, 15]"),
]


@pytest.mark.parametrize("kernel, message", RULE_CASES, ids=[k.__name__ for k, _ in RULE_CASES])
def test_a_literal_that_breaks_a_register_operands_rule_is_an_error_at_the_kernel_line(kernel, message, monkeypatch):
    monkeypatch.delenv(FULL_ERRORS_ENV, raising=False)
    err = typing_error(kernel)
    line, source = bad_call(kernel)
    first, second, *_ = str(err).splitlines()
    assert first.startswith(f"{err.filename}:{line}: ") and message in first, str(err)
    assert second.strip() == source and err.line == line


def k_rules_kept(u, d, f):
    d[0] = desc_advance(make_desc(u[0], 16, 1024, 1), 32)
    mbarrier_init(u[1], (1 << 20) - 1)
    mbarrier_expect_tx(u[1], 0)
    cp_async_zfill(u[2], f, 0, 16)
    bulk_copy_g2s(u[0], d[0], 1024, u[1])
    named_barrier_sync_id(15, 128)
    mbarrier_init(u[1], u[3])  # run-time values: unchecked here
    count = 0  # a variable first seen as its literal 0 by Numba's inference, an int in the end
    for _ in range(u[3]):
        count += 1
    mbarrier_init(u[1], count)
    k = 0
    for j in range(4):
        if u[3] & (1 << j):
            k += 1
    if k > 0:
        mbarrier_arrive_count(u[1], k)


def test_literals_inside_the_rules_and_run_time_values_compile():
    cuda.compile_ptx(k_rules_kept, SIG, cc=(9, 0))


def bad_call(fn):
    """(line number, source text) of the line of ``fn`` marked "# bad"."""
    lines, first = inspect.getsourcelines(fn)
    (i,) = [i for i, text in enumerate(lines) if text.rstrip().endswith("# bad")]
    return first + i, lines[i].strip()


def typing_error(fn):
    with pytest.raises(NbwgmmaTypingError) as exc:
        cuda.compile_ptx(fn, SIG, cc=(9, 0))
    return exc.value


@pytest.mark.parametrize("kernel, message", CASES, ids=[k.__name__ for k, _ in CASES])
def test_error_leads_with_the_kernel_line_and_the_message(kernel, message, monkeypatch):
    monkeypatch.delenv(FULL_ERRORS_ENV, raising=False)
    err = typing_error(kernel)
    line, source = bad_call(kernel)
    text = str(err)
    first, second, *rest = text.splitlines()
    assert first.startswith(f"{err.filename}:{line}: "), text
    assert os.path.basename(err.filename) == os.path.basename(__file__), text
    assert message in first, text
    assert second.strip() == source, text
    assert err.line == line and err.function == kernel.__name__ and err.message in first
    # Numba's report is kept on the error but left out of the message.
    assert "candidate implementation" not in text and "No implementation" not in text, text
    assert "candidate implementation" in err.numba_report
    assert len(rest) == 1 and FULL_ERRORS_ENV in rest[0], text
    if kernel in RUNTIME_VALUE:
        assert isinstance(err, RequireLiteralValue)
    else:
        assert "compile-time constant" not in text and "run-time value" not in text, text
    assert isinstance(err, TypingError)  # still Numba's typing error


def test_full_numba_report_on_request(monkeypatch):
    monkeypatch.setenv(FULL_ERRORS_ENV, "1")
    err = typing_error(k_setmaxnreg)
    line, source = bad_call(k_setmaxnreg)
    lines = str(err).splitlines()
    assert lines[0].startswith(f"{err.filename}:{line}: setmaxnreg_inc: argument 'count'")
    assert lines[1].strip() == source
    assert "candidate implementations" in str(err) and "Numba's report:" in str(err)


def test_device_function_error_names_both_lines(monkeypatch):
    # Typing a device function asks for the current device's compute capability;
    # pretend an H100 is there.
    import numba.cuda.dispatcher as dispatcher

    monkeypatch.setattr(dispatcher, "get_current_device", lambda: SimpleNamespace(compute_capability=(9, 0)))

    @cuda.jit(device=True)
    def helper(count):
        setmaxnreg_inc(count)  # bad

    def kernel(u, d, f):
        helper(100)  # bad

    err = typing_error(kernel)
    inner_line, inner_source = bad_call(helper)
    outer_line, _ = bad_call(kernel)
    first, second, third = str(err).splitlines()
    assert first.startswith(f"{err.filename}:{inner_line}: setmaxnreg_inc: argument 'count'"), str(err)
    assert second.strip() == inner_source
    assert third.startswith("(while typing '") and err.function.endswith("helper")
    assert f"helper', called at {err.filename}:{outer_line} in '" in third, str(err)


def test_other_typing_errors_are_left_to_numba():
    def kernel(u, d, f):
        u[0] = "x" + 1

    with pytest.raises(Exception) as exc:
        cuda.compile_ptx(kernel, SIG, cc=(9, 0))
    assert not isinstance(exc.value, NbwgmmaTypingError)


_PIPE = TmaPipeline(4, consumers=2)
_WORDS = 8


def k_shared_shape_at_run_time(u, d, f):
    bars = cuda.shared.array(_PIPE.barrier_words, np.uint64)  # bad
    d[0] = bars[0]


def k_shared_shape_constant(u, d, f):
    bars = cuda.shared.array(_WORDS, np.uint64)
    more = cuda.shared.array((_WORDS, 2), np.uint64)
    d[0] = bars[0] + more[0, 1]


def test_a_shared_array_shape_computed_at_run_time_is_an_error_at_its_line():
    """Numba's own error lists candidate signatures and names no line; nbwgmma's names the line
    and says how to make the shape a constant. A global name (or a tuple of them) compiles."""
    err = typing_error(k_shared_shape_at_run_time)
    line, source = bad_call(k_shared_shape_at_run_time)
    first, second = str(err).splitlines()[:2]
    assert first.startswith(f"{err.filename}:{line}: cuda.shared.array: the shape must be a compile-time constant"), first
    assert "got int64" in first and "NBARS = pipe.barrier_words" in first and second.strip() == source
    cuda.compile_ptx(k_shared_shape_constant, SIG, cc=(9, 0))
