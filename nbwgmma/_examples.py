"""Shared plumbing of the runnable examples: GPU detection and reporting."""

from __future__ import annotations

import numpy as np


def gpu_available() -> bool:
    from numba import cuda

    try:
        return cuda.is_available() and cuda.get_current_device().compute_capability >= (9, 0)
    except Exception:
        return False


def compile_report_instead(kernel, sig, what="the kernel"):
    """What an example does on a machine without an sm_90 GPU: print the kernel's compile
    report. Returns 0.0 (no error measured)."""
    from .report import compile_report

    print(f"no sm_90 GPU here: compile report of {what} instead\n")
    print(compile_report(kernel, sig))
    return 0.0


def report_or_run(title, problem, kernel_sig_factory, run):
    """Run ``run()`` on an sm_90 GPU and compare with the model; without one, print the
    kernel's compile report. Returns the max abs error (0.0 when only compiled)."""
    from . import sim

    print(title)
    if not gpu_available() and not sim.enabled():
        return compile_report_instead(*kernel_sig_factory())
    got = run()
    want = problem.reference()
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    print(f"D[0, :8]   = {got[0, :8]}")
    print(f"ref[0, :8] = {want[0, :8]}")
    print(f"max |D - ref| = {err:g} over {want.size} elements")
    if err != 0.0:
        raise SystemExit("mismatch")
    return err


def gemm_operands(m, n, k, seed=0):
    """bf16 A [M, K] and B [N, K] (both K-major) of random normal values, on the GPU."""
    import torch

    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
    return a, b


def run_tma_gemm(name, kernel, size, bm, bn, bk, threads, smem):
    """Steps 2 and 3 of the GEMM ladder: ``kernel(tmap_a, tmap_b, c, k)`` on bf16 K-major A and
    B with 128B-swizzled [bm, bk] / [bn, bk] boxes, one CTA per bm x bn tile of an f32 C."""
    import torch

    from .launch import launch
    from .tma import TensorMap

    m = n = k = size
    a, b = gemm_operands(m, n, k)
    c = torch.empty(m, n, device="cuda")
    ta, tb = TensorMap(a, (bm, bk), swizzle="128B"), TensorMap(b, (bn, bk), swizzle="128B")

    def run():
        launch(kernel, (n // bn, m // bm), threads, (ta.address, tb.address, c, np.int32(k)), smem=smem)

    return gemm_report(name, run, c, a, b)


def gemm_report(name, run, c, a, b, repeats=10):
    """Check ``c`` (filled by ``run()``) against a float64 ``a @ b.T``, time ``run`` with CUDA
    events (median of ``repeats`` after a warm-up) and print TFLOP/s and the error.
    Returns the relative error."""
    import statistics

    import torch

    c.fill_(float("nan"))
    run()
    torch.cuda.synchronize()
    ref = a.double() @ b.double().t()
    err = float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))
    times = []
    for _ in range(repeats):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        run()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e-3)
    t = statistics.median(times)
    m, n = c.shape
    k = a.shape[1]
    print(f"{name}: {m}x{n}x{k} bf16 -> {str(c.dtype).replace('torch.', '')} in {t * 1e3:.3f} ms = {2 * m * n * k / t / 1e12:.1f} TFLOP/s, "
          f"relative error {err:.2e} vs float64")
    if not err < 1e-2:
        raise SystemExit("mismatch")
    return err
