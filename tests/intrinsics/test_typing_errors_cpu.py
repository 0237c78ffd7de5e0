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
]
RUNTIME_VALUE = {k_setmaxnreg_runtime, k_acc_zeros_runtime_n}


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
