import json

import numpy as np
from numba import cuda, types

from nbwgmma.__main__ import main
from nbwgmma.report import compile_report, compile_reports, parse_sass, report_from_ptx, reports_from_ptx


def test_report_on_a_small_kernel():
    def kernel(x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] = x[i] * 2.0 + 1.0

    rep = compile_report(kernel, (types.float32[:], types.float32[:]))
    assert rep.arch == "sm_90a" and rep.registers > 0
    assert rep.spill_bytes == 0 and rep.stack_frame == 0
    assert rep.sass["EXIT"] >= 1
    assert rep.sass["STG"] + rep.sass["ST"] == 1 and rep.sass["LDG"] + rep.sass["LD"] == 1
    assert ".target sm_90a" in rep.ptx
    d = json.loads(rep.to_json())
    assert d["sass"]["EXIT"] >= 1 and d["spill_bytes"] == 0


def test_report_names_the_runtime_routines_a_kernel_calls():
    """From a newcomer's trial: a persistent loop's range over int64 values calls the runtime's
    64-bit division, which the report counted only as CALL; it names it now, with the hint."""
    def wide(out, n, step):
        for i in range(cuda.blockIdx.x, n, step):
            out[i] = i

    rep = compile_report(wide, (types.int32[::1], types.int64, types.int64))
    assert rep.runtime_calls == {"__cuda_sm20_div_s64": 1}, rep.sass_full
    assert "runtime calls __cuda_sm20_div_s64=1 (div_s64" in str(rep)
    assert json.loads(rep.to_json())["runtime_calls"] == {"__cuda_sm20_div_s64": 1}
    rep = compile_report(wide, (types.int32[::1], types.int32, types.int32))  # (32-bit: done inline)
    assert not rep.runtime_calls and "runtime calls" not in str(rep)


def test_report_names_float64_work_in_f32_code():
    def literal(x, y):  # 0.1 is a float64: x[i] * 0.1 is computed in float64
        i = cuda.grid(1)
        if i < x.size:
            y[i] = x[i] * 0.1

    def typed(x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] = x[i] * np.float32(0.1)

    sig = (types.float32[:], types.float32[:])
    rep = compile_report(literal, sig)
    f64 = rep.float64_ops
    assert f64 and any(op.startswith("F2F") for op in f64), rep.sass_full
    assert "float64 ops   " in str(rep) and json.loads(rep.to_json())["float64_ops"] == dict(sorted(f64.items()))
    rep = compile_report(typed, sig)
    assert not rep.float64_ops and "float64 ops" not in str(rep), rep.sass_full


def test_report_sees_local_memory():
    def kernel(x, y, k):
        buf = cuda.local.array(64, np.float32)
        for i in range(64):
            buf[i] = x[i]
        y[0] = buf[k[0]]

    rep = compile_report(kernel, (types.float32[:], types.float32[:], types.int32[:]))
    assert rep.local_memory_ops > 0


def test_reports_made_together_are_the_reports_made_alone():
    """compile_reports assembles and disassembles its kernels in one ptxas and one nvdisasm
    run: every field is what a kernel's own run gives (a spilling kernel among them too)."""
    def k_small(x, y):
        y[0] = x[0] * 2.0

    def k_shared(x, y):
        buf = cuda.shared.array(256, np.float32)
        buf[cuda.threadIdx.x] = x[cuda.threadIdx.x]
        cuda.syncthreads()
        y[cuda.threadIdx.x] = buf[255 - cuda.threadIdx.x]

    def k_local(x, y, k):
        buf = cuda.local.array(64, np.float32)
        for i in range(64):
            buf[i] = x[i]
        y[0] = buf[k]

    sig = (types.float32[:], types.float32[:])
    jobs = [(k_small, sig), (k_shared, sig, (256, 1)), (k_local, sig + (types.int32,))]
    together = compile_reports(jobs)
    alone = [compile_report(*job[:2], launch_bounds=job[2] if len(job) > 2 else None) for job in jobs]
    for t, a in zip(together, alone):
        assert t.to_dict() == a.to_dict()
    assert together[2].local_memory_ops > 0 and together[1].static_smem == 1024


def test_modules_that_cannot_share_a_cubin_are_reported_one_by_one():
    def kernel(x, y):
        y[0] = x[0] + 1.0

    ptx, _ = cuda.compile_ptx(kernel, (types.float32[:], types.float32[:]), cc=(9, 0, "a"))
    one = report_from_ptx(ptx)
    both = reports_from_ptx([ptx, ptx])  # one entry name twice: no merged module
    assert [r.to_dict() for r in both] == [one.to_dict()] * 2


def test_sass_parser_handles_predicates():
    text = "/*0010*/  @!P0 HGMMA.64x256x16.F32.BF16 R24, gdesc[UR4], R24 ;\n/*0020*/  EXIT ;"
    base, full = parse_sass(text)
    assert base == {"HGMMA": 1, "EXIT": 1}
    assert full["HGMMA.64x256x16.F32.BF16"] == 1


def test_inspect_cli_json(capsys):
    assert main(["inspect", "tile", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["sass"]["HGMMA"] >= 1 and d["spill_bytes"] == 0


def test_demo_without_gpu_prints_report(monkeypatch, capsys):
    import nbwgmma.demo as ex

    monkeypatch.setattr(ex, "gpu_available", lambda: False)
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "No sm_90 GPU" in out and "HGMMA" in out


def _register_split(dec, inc):
    from nbwgmma.intrinsics import setmaxnreg_dec, setmaxnreg_inc

    @cuda.jit(launch_bounds=(384, 1))
    def split(x):
        if cuda.threadIdx.x < 128:
            setmaxnreg_dec(dec)
        else:
            setmaxnreg_inc(inc)
            x[cuda.threadIdx.x] = 1.0
    return split


def test_report_sums_the_warpgroups_register_split():
    """One warpgroup at the decrease, two at the increase, against 168 x 384 at launch: 40 +
    2 x 232 = 504 fits; 40 + 2 x 240 = 520 waits forever on the GPU."""
    sig = (types.float32[:],)
    ok, over = compile_reports([(_register_split(40, 232), sig), (_register_split(40, 240), sig)])
    assert ok.setmaxnreg == [("dec", 40), ("inc", 232)] and ok.max_threads == 384 and ok.min_blocks == 1
    assert ok.register_split == (504, 504) and "504 of 504 registers per warpgroup thread" in str(ok)
    assert "fits" in str(ok) and "OVER" not in str(ok)
    assert over.register_split == (520, 504) and "OVER: the increase waits forever" in str(over)
    plain = compile_report(lambda x: None, sig)
    assert plain.register_split is None and "setmaxnreg" not in str(plain)


def test_bad_arguments_are_report_errors_naming_them():
    import pytest

    from nbwgmma.errors import ReportError

    @cuda.jit
    def k(out, n):
        out[0] = n

    sig = (types.float32[:], types.int32)
    for call, message in (
            (lambda: compile_report(k, sig[:1]), r"compile_report\(.*k, sig=.*\): Signature mismatch: 1 argument"),
            (lambda: compile_report(k, (np.float32, np.int32)), "invalid type in signature"),
            (lambda: compile_report(k, list(sig)), "invalid signature"),
            (lambda: compile_report(cuda.jit(device=True)(lambda x: x), (types.int32,)), "void return type"),
            (lambda: compile_report(5, sig), "kernel must be a @cuda.jit kernel or a Python function; got 5"),
            (lambda: compile_report(k, sig, cc="sm_90a"), r"cc must be a tuple .* got 'sm_90a'"),
            (lambda: compile_report(k, sig, launch_bounds=(2000, 1)), r"at most 1024.*got \(2000, 1\)"),
            (lambda: compile_reports([(k,)]), r"jobs\[0\] must be \(kernel, sig\)")):
        with pytest.raises(ReportError, match=message):
            call()
    for bounds in ([128, 1], (np.int64(128), 1), np.int32(256), np.array([256, 1])):  # sequences and NumPy integers, as Numba takes them
        compile_report(k, sig, launch_bounds=bounds)
