"""What the runnable examples (``examples/``) and the command line share: GPU detection, a
compile report where no sm_90 GPU is present, operands, checks against float64 and timing,
and what the GEMM examples do in Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``): run
once on a problem of a tile or two with small-integer operands, exact against float64,
untimed. Use it to write an example of your own the same way."""

from __future__ import annotations

import numpy as np

__all__ = ["gpu_available", "simulated", "compile_report_instead", "report_or_run", "run_example", "gemm_operands",
           "run_tma_gemm", "gemm_report", "sim_operands", "sim_check"]


def gpu_available() -> bool:
    from numba import cuda

    try:
        return cuda.is_available() and cuda.get_current_device().compute_capability >= (9, 0)
    except Exception:
        return False


def simulated() -> bool:
    """Whether kernels run in Numba's CUDA simulator (then nothing is compiled or timed)."""
    from . import sim

    return sim.enabled()


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


def run_example(what, simulate, kernel_sig, benchmark, m=8192, n=None, k=None):
    """The main of the examples with a kernel of their own: ``simulate()`` in Numba's CUDA
    simulator; without an sm_90 GPU the compile report of ``kernel_sig() -> (kernel, sig)``
    (``what`` names it); else ``benchmark(m, n, k)`` (N and K default to M). Returns what
    ``simulate`` or ``benchmark`` returns (0.0 where only compiled)."""
    if simulated():
        return simulate()
    if not gpu_available():
        return compile_report_instead(*kernel_sig(), what=what)
    return benchmark(m, m if n is None else n, m if k is None else k)


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
    from .launch import launch
    from .tma import TensorMap

    if simulated():  # one CTA's tile, two k-blocks
        from numba import cuda

        a, b, a_bits, b_bits = sim_operands(bm, bn, 2 * bk)
        c = cuda.device_array((bm, bn), np.float32)
        ta, tb = TensorMap(a_bits, (bm, bk), dtype="bf16"), TensorMap(b_bits, (bn, bk), dtype="bf16")
        return sim_check(name, lambda: launch(kernel, (1, 1), threads, (ta.address, tb.address, c, np.int32(2 * bk)),
                                              smem=smem), c, a, b)
    import torch

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


def sim_operands(m, n, k, hi=2, seed=0):
    """Integer A [M, K] and B [N, K] in [-hi, hi] (float64) and their bf16 bits as simulator
    arrays: products and sums of small integers are exact in f32 (and in bf16 up to 256)."""
    from numba import cuda

    from .layout.wgmma_model import encode_elements

    rng = np.random.default_rng(seed)
    a = rng.integers(-hi, hi + 1, (m, k)).astype(np.float64)
    b = rng.integers(-hi, hi + 1, (n, k)).astype(np.float64)
    bits = [cuda.to_device(encode_elements(x, "bf16").view(np.uint16).reshape(x.shape)) for x in (a, b)]
    return a, b, bits[0], bits[1]


def sim_check(name, run, c, a, b):
    """In the simulator: run ``run()`` once, filling the simulator array ``c`` (poisoned with
    NaN here; bf16 bits if it is uint16), and check it equals ``a @ b.T`` exactly.
    Returns the max abs error (0.0)."""
    bf16 = c.dtype == np.uint16
    c.copy_to_device(np.full(c.shape, 0x7FC0 if bf16 else np.nan, c.dtype))
    run()
    got = c.copy_to_host()
    if bf16:
        got = (got.astype(np.uint32) << 16).view(np.float32)
    ref = a @ b.T
    err = float(np.max(np.abs(got.astype(np.float64) - ref)))  # NaN if any element was left unwritten
    m, n = c.shape
    print(f"{name}: {m}x{n}x{a.shape[1]} bf16 -> {'bf16' if bf16 else 'f32'} in the CUDA simulator "
          f"(untimed), small integers: max |C - A B^T| = {err:g}")
    if err != 0.0:
        raise SystemExit("mismatch")
    return err
