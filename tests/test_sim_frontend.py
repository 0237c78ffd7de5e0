"""The user-facing parts in Numba's CUDA simulator, each in a child process with
NUMBA_ENABLE_CUDASIM=1 (the switch must be set before Numba is imported): ``matmul``,
``launch``'s limits and ``compile_report`` (tests/sim_frontend_cases.py), every example
and every command line. Each runs or says in one line what it cannot do: no traceback."""

import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def _sim(args, timeout=300, **env):
    e = dict(os.environ, NUMBA_ENABLE_CUDASIM="1", **env)
    if "NBWGMMA_DEBUG_WAIT" not in env:
        e.pop("NBWGMMA_DEBUG_WAIT", None)
    r = subprocess.run([sys.executable, *args], env=e, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    return r.returncode, r.stdout + r.stderr


def test_matmul_launch_and_report_in_the_cuda_simulator():
    rc, out = _sim(["-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "sim_frontend_cases.py")],
                   timeout=1800)  # as tests/test_sim.py: a loaded 2-core machine ran it past 600 s
    assert rc == 0, out[-8000:]
    assert " passed" in out and "failed" not in out


@pytest.mark.parametrize("path", [p for p in EXAMPLES if p.stem != "debug_wait_broken_expect_tx"],
                         ids=lambda p: p.stem)
def test_example_runs_in_the_simulator(path):
    rc, out = _sim([str(path)])
    assert rc == 0 and "Traceback" not in out, out[-4000:]
    assert "max |" in out  # each checks its result: "max |D - ref| = 0", "max |C - A B^T| = 0"
    assert "mismatch" not in out


def test_the_hang_example_stops_in_the_simulator_with_or_without_debug_mode():
    path = str(ROOT / "examples" / "debug_wait_broken_expect_tx.py")
    for env in ({}, {"NBWGMMA_DEBUG_WAIT": "1", "NBWGMMA_DEBUG_WAIT_S": "0.5"}):
        rc, out = _sim([path], **env)
        assert rc == 0 and "stopped after" in out and "simulated wait can never finish" in out, out[-4000:]
        assert "Traceback" not in out, out[-4000:]


_HAS_MPL = importlib.util.find_spec("matplotlib") is not None


@pytest.mark.parametrize("args, rc, says", [
    ([], 0, "relative error"),  # bench, 8192^3 bf16 by default: a 64^3 problem instead
    (["bench", "--m", "70", "--n", "40", "--k", "48", "--dtype", "e4m3", "--layout", "MN", "--json"], 0,
     '"simulator": true'),
    (["bench", "--sweep"], 1, "the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) cannot"),
    (["demo"], 0, "(CUDA simulator): relative error"),
    (["inspect", "tile"], 1, "inspect: compile reports need Numba's CUDA compiler"),
    (["layout", "swizzle", "{tmp}/sw.png"], 0 if _HAS_MPL else 1, "wrote" if _HAS_MPL else "needs matplotlib"),
], ids=["default", "bench-e4m3-MN-json", "bench-sweep", "demo", "inspect", "layout"])
def test_command_line_in_the_simulator(args, rc, says, tmp_path):
    got, out = _sim(["-m", "nbwgmma", *(a.format(tmp=tmp_path) for a in args)])
    assert got == rc and says in out and "Traceback" not in out, out[-4000:]
    if rc:
        assert len(out.strip().splitlines()) == 1, out  # what it cannot do, in one line
