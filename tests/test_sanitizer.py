"""compute-sanitizer over every example and the library GEMM (``-m sanitizer --run-sanitizer``).

    python -m pytest -m sanitizer --run-sanitizer -q

Each tool runs ``tests/sanitize_targets.py`` in a child process and must report
zero errors (racecheck: zero hazards). Where the installed compute-sanitizer
knows them, the wgmma and bulk-copy checks (``--check-warpgroup-mma``,
``--check-bulk-copy``) are on. memcheck runs with ``--report-api-errors no``:
PyTorch and the CUDA Python bindings probe driver entry points with
``cuGetProcAddress``, and the misses it returns are API return codes of those
libraries, not memory errors of a kernel.
"""

import functools
import pathlib
import shutil
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.sanitizer]

TARGETS = pathlib.Path(__file__).parent / "sanitize_targets.py"


@functools.lru_cache(maxsize=None)
def sanitizer():
    exe = shutil.which("compute-sanitizer")
    if exe is None:
        for cand in ("/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
            if pathlib.Path(cand).exists():
                exe = cand
    return exe


def extra_checks(exe):
    text = subprocess.run([exe, "--help"], capture_output=True, text=True).stdout
    return [flag for opt in ("--check-warpgroup-mma", "--check-bulk-copy") if opt in text for flag in (opt, "yes")]


@pytest.mark.parametrize("what", ["examples", "gemms", "fused", "scaled"])
@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck"])
def test_zero_sanitizer_errors(tool, what):
    exe = sanitizer()
    if exe is None:
        pytest.skip("compute-sanitizer not found")
    api = ["--report-api-errors", "no"] if tool == "memcheck" else []
    cmd = [exe, "--tool", tool, "--error-exitcode", "99", *api, *extra_checks(exe), sys.executable, str(TARGETS), what]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    out = res.stdout + res.stderr
    summary = [ln for ln in out.splitlines() if "SUMMARY" in ln]
    print(" ".join(cmd[:-3]), "->", summary)
    assert res.returncode == 0, out[-6000:]
    want = "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)" if tool == "racecheck" else "ERROR SUMMARY: 0 errors"
    assert any(want in ln for ln in summary), out[-6000:]
