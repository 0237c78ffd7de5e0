"""Runs the simulator's test files in child processes under Numba's CUDA simulator (the switch
must be set before Numba is imported): nbwgmma kernels, thread by thread, with no GPU.

``tests/sim_hazard_cases.py`` runs the warp-specialized example NBWGMMA_SIM_WS_RUNS times at
K=1024 and NBWGMMA_SIM_WS_RUNS_LONG times at K=4096 (1 and 0 here by default, to keep the
suite quick; CI sets both to 20)."""

import os
import pathlib
import subprocess
import sys

import pytest

#: pytest plugins the child runs do not use (pyproject.toml's addopts, replaced here, names them too)
UNUSED_PLUGINS = ("-p", "no:hypothesispytest", "-p", "no:benchmark")

HERE = pathlib.Path(__file__).parent


@pytest.mark.parametrize("cases", ["sim_cases.py", "sim_hazard_cases.py", "sim_kit_cases.py", "sim_fused_cases.py",
                                   "sim_grouped_cases.py", "sim_scaled_cases.py", "sim_sparse_cases.py",
                                   "sim_grouped_scaled_cases.py", "sim_batched_cases.py", "sim_ordering_cases.py",
                                   "sim_kit_mutation_cases.py", "sim_valid_styles_cases.py",
                                   "sim_fuzz_cases.py"])
def test_in_the_cuda_simulator(cases):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env.setdefault("NBWGMMA_SIM_WS_RUNS", "1")
    env.setdefault("NBWGMMA_SIM_WS_RUNS_LONG", "0")
    env.pop("NBWGMMA_DEBUG_WAIT", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-o", "addopts=", "-p", "no:cacheprovider",
                        *UNUSED_PLUGINS, str(HERE / cases)], env=env, capture_output=True, text=True, timeout=1800, cwd=HERE.parent)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and "failed" not in r.stdout
    if "skipped" in r.stdout:  # only the long simulator runs may be left to CI
        assert r.stdout.count("SKIPPED") <= 1 and "NBWGMMA_SIM_WS_RUNS" in r.stdout, r.stdout[-3000:]
