"""Runs tests/sim_cases.py in a child process under Numba's CUDA simulator (the switch must
be set before Numba is imported): nbwgmma kernels, thread by thread, with no GPU."""

import os
import pathlib
import subprocess
import sys


def test_kernels_in_the_cuda_simulator():
    here = pathlib.Path(__file__).parent
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env.pop("NBWGMMA_DEBUG_WAIT", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(here / "sim_cases.py")],
                       env=env, capture_output=True, text=True, timeout=900, cwd=here.parent)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and "failed" not in r.stdout
