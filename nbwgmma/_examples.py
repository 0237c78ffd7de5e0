"""Shared plumbing of the runnable examples: GPU detection and reporting."""

from __future__ import annotations

import numpy as np


def gpu_available() -> bool:
    from numba import cuda

    try:
        return cuda.is_available() and cuda.get_current_device().compute_capability >= (9, 0)
    except Exception:
        return False


def report_or_run(title, problem, kernel_sig_factory, run):
    """Run ``run()`` on an sm_90 GPU and compare with the model; without one, print the
    kernel's compile report. Returns the max abs error (0.0 when only compiled)."""
    from .report import compile_report

    print(title)
    if not gpu_available():
        kern, sig = kernel_sig_factory()
        print("no sm_90 GPU here: compile report of the kernel instead\n")
        print(compile_report(kern, sig))
        return 0.0
    got = run()
    want = problem.reference()
    err = float(np.max(np.abs(got.astype(np.float64) - want)))
    print(f"D[0, :8]   = {got[0, :8]}")
    print(f"ref[0, :8] = {want[0, :8]}")
    print(f"max |D - ref| = {err:g} over {want.size} elements")
    if err != 0.0:
        raise SystemExit("mismatch")
    return err
