"""The simulator fuzz's random calls (tests/sim_fuzz_cases.py) on the GPU: ``matmul`` with random
layouts, views, batches, ``config`` keys and epilogues, block-scaled fp8, ``grouped_matmul``'s
three forms and 2:4 sparse products, each refused with a :class:`nbwgmma.MatmulError` or right against float64 (small
integers: exact). The default path picks the GPU's tiles here (the tile model's, the few-row
paths'), not the simulator's smallest. ``NBWGMMA_GPU_FUZZ_CASES`` (default 40) cases of each kind
from ``NBWGMMA_SIM_FUZZ_SEED``; a failure names its seed (replay it with
``NBWGMMA_SIM_FUZZ_SEED=<seed> NBWGMMA_GPU_FUZZ_CASES=1``). The cases run in one child process
with a deadline (a hang fails this test, not the suite)."""

import os

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.isolated(timeout=1500)]

CASES = int(os.environ.get("NBWGMMA_GPU_FUZZ_CASES", "40"))


@pytest.mark.parametrize("kind", ["matmul", "grouped", "sparse"])
def test_random_calls_on_the_gpu_are_refused_or_right(kind):
    from tests import sim_fuzz_cases as f

    draw, run = {"matmul": (f.draw, f.run_case), "grouped": (f.draw_grouped, f.run_grouped_case),
                 "sparse": (f.draw_sparse, f.run_sparse_case)}[kind]
    f.check_cases(draw, run, CASES, f.SEED, f"{kind} (GPU)")
