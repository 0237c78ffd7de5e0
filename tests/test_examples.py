"""Each example is also a test: on CPU it compiles and prints its report; on the GPU it
runs and must match the model exactly (small-integer data)."""

import re

import pytest

from tests.sim_vs_gpu import EXAMPLES as _EXAMPLES_DIR, load_example

EXAMPLES = sorted(_EXAMPLES_DIR.glob("wgmma_*.py"))
GEMMS = sorted(_EXAMPLES_DIR.glob("gemm_*.py"))

#: Examples whose kernel other tests compile too (conftest.report_once): the library's default
#: GEMM (tests/test_matmul_cpu.py), the sparse GEMM (tests/test_sparse_gemm_cpu.py). Such a group runs in one worker and compiles once.
SHARED = {"gemm_4_library": "gemm-128x256-bf16-tma", "gemm_6_sparse": "sparse-gemm-bf16"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_compiles_without_gpu(path, monkeypatch, capsys):
    import nbwgmma.demo as ex

    monkeypatch.setattr(ex, "gpu_available", lambda: False)
    assert load_example(path.stem).main() == 0.0
    out = capsys.readouterr().out
    assert "HGMMA=" in out and "spills        0 B stores, 0 B loads" in out


@pytest.mark.gpu
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_on_gpu(path, capsys):
    assert load_example(path.stem).main() == 0.0
    assert "max |D - ref| = 0 over" in capsys.readouterr().out


@pytest.mark.parametrize("path", [
    pytest.param(p, id=p.stem, marks=[pytest.mark.xdist_group(SHARED[p.stem])] if p.stem in SHARED else [])
    for p in GEMMS])
def test_gemm_example_compiles_without_gpu(path, monkeypatch, capsys, report_once):
    import nbwgmma.demo as ex
    import nbwgmma.report

    monkeypatch.setattr(ex, "gpu_available", lambda: False)
    monkeypatch.setattr(nbwgmma.report, "compile_report", report_once)
    assert load_example(path.stem).main() == 0.0
    out = capsys.readouterr().out
    assert re.search(r"\b[HIQ]GMMA=", out) and "ptxas warnings: none" in out  # (int8: IGMMA)
    stores, loads = (int(x) for x in re.search(r"spills\s+(\d+) B stores, (\d+) B loads", out).groups())
    assert stores <= SPILL_BUDGET.get(path.stem, 0) and loads <= SPILL_BUDGET.get(path.stem, 0), out


#: Spill bytes an example may have. gemm_7's grouped kernel spills scalars of its walk over the
#: groups, outside the main loop (tests/test_grouped_cpu.py checks the loop). gemm_11's epilogue
#: keeps a part's residual loads in flight beside the 128 accumulator registers and spills outside
#: the main loop (204 B stored, 260 B loaded); without them (its loads each behind a branch) it
#: ran 0.79x the bare product on an H200, with them 0.90x.
SPILL_BUDGET = {"gemm_7_moe": 192, "gemm_11_dropout": 264}


@pytest.mark.gpu
@pytest.mark.isolated(timeout=300)
@pytest.mark.parametrize("path", GEMMS, ids=[p.stem for p in GEMMS])
def test_gemm_example_runs_on_gpu(path, capsys):
    err = load_example(path.stem).main(1024)
    assert 0 < err < 1e-2  # a float64 reference of random data: never exactly equal
    assert "TFLOP/s" in capsys.readouterr().out


def test_the_hang_example_prints_its_compile_report_without_gpu(monkeypatch, capsys):
    import nbwgmma.demo as ex

    monkeypatch.setattr(ex, "gpu_available", lambda: False)
    assert load_example("debug_wait_broken_expect_tx").main() == 0
    out = capsys.readouterr().out
    assert "compile report" in out and "kernel        broken_expect_tx" in out
