"""Debug-wait mode: off by default at zero cost; on, a wait past its deadline prints and traps."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parent.parent

_PROBE = r"""
import json, numpy as np
from numba import cuda, types
from nbwgmma.intrinsics import mbarrier_init, mbarrier_wait_parity, smem_addr
from nbwgmma.report import compile_report

@cuda.jit
def k(out):
    bars = cuda.shared.array(1, np.uint64)
    b = smem_addr(bars)
    if cuda.threadIdx.x == 0:
        mbarrier_init(b, 1)
    cuda.syncthreads()
    mbarrier_wait_parity(b, 0)
    out[0] = 1

rep = compile_report(k, (types.int32[:],))
print(json.dumps({"sass": dict(rep.sass_full), "ptx": rep.ptx}))
"""


def probe(debug: bool):
    env = dict(os.environ)
    env.pop("NBWGMMA_DEBUG_WAIT", None)
    if debug:
        env["NBWGMMA_DEBUG_WAIT"] = "1"
    res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_default_build_has_nothing_extra_in_the_wait_loop():
    off, on = probe(False), probe(True)
    assert "%globaltimer" not in off["ptx"] and "trap;" not in off["ptx"] and "vprintf" not in off["ptx"]
    assert not any(op.startswith(("CS2R", "BPT", "CALL")) for op in off["sass"]), off["sass"]
    # The debug build reads the timer, can print and trap.
    assert "%globaltimer" in on["ptx"] and "trap;" in on["ptx"] and "vprintf" in on["ptx"]
    assert any(op.startswith("BPT.TRAP") for op in on["sass"]), on["sass"]


@pytest.mark.gpu
def test_broken_expect_tx_stops_within_seconds():
    env = dict(os.environ, NBWGMMA_DEBUG_WAIT="1", NBWGMMA_DEBUG_WAIT_S="1")
    res = subprocess.run([sys.executable, str(ROOT / "examples" / "debug_wait_broken_expect_tx.py")],
                         capture_output=True, text=True, env=env, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "mbarrier wait timed out after 1 s: block (0, 0, 0)" in out and "waiting for parity 0" in out
    assert "kernel broken_expect_tx stopped" in out
    secs = float(out.split("stopped after ")[1].split(" s")[0])
    assert secs < 15, out
