"""compute-sanitizer over every example and the library GEMM (``-m sanitizer --run-sanitizer``).

    python -m pytest -m sanitizer --run-sanitizer -q

Each tool runs ``tests/sanitize_targets.py`` in a child process and must report
zero errors. Where the installed compute-sanitizer knows them, the wgmma and
bulk-copy checks (``--check-warpgroup-mma``, ``--check-bulk-copy``) are on.
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


@pytest.mark.parametrize("what", ["examples", "gemms"])
@pytest.mark.parametrize("tool", ["memcheck", "racecheck", "synccheck"])
def test_zero_sanitizer_errors(tool, what):
    exe = sanitizer()
    if exe is None:
        pytest.skip("compute-sanitizer not found")
    cmd = [exe, "--tool", tool, "--error-exitcode", "99", *extra_checks(exe), sys.executable, str(TARGETS), what]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    out = res.stdout + res.stderr
    print(" ".join(cmd[:-3]), "->", [ln for ln in out.splitlines() if "ERROR SUMMARY" in ln])
    assert res.returncode == 0, out[-6000:]
    assert "ERROR SUMMARY: 0 errors" in out, out[-6000:]
