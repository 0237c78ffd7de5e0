"""Each example is also a test: on CPU it compiles and prints its report; on the GPU it
runs and must match the model exactly (small-integer data)."""

import importlib.util
import pathlib

import pytest

EXAMPLES = sorted(p for p in (pathlib.Path(__file__).parent.parent / "examples").glob("wgmma_*.py"))


def load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_compiles_without_gpu(path, monkeypatch, capsys):
    import nbwgmma._examples as ex

    monkeypatch.setattr(ex, "gpu_available", lambda: False)
    assert load(path).main() == 0.0
    out = capsys.readouterr().out
    assert "HGMMA=" in out and "spills        0 B stores, 0 B loads" in out


@pytest.mark.gpu
@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_on_gpu(path, capsys):
    assert load(path).main() == 0.0
    assert "max |D - ref| = 0 over" in capsys.readouterr().out


GEMMS = sorted(p for p in (pathlib.Path(__file__).parent.parent / "examples").glob("gemm_*.py"))


@pytest.mark.parametrize("path", GEMMS, ids=[p.stem for p in GEMMS])
def test_gemm_example_compiles_without_gpu(path, monkeypatch, capsys):
    import nbwgmma._examples as ex

    monkeypatch.setattr(ex, "gpu_available", lambda: False)
    assert load(path).main() == 0.0
    out = capsys.readouterr().out
    assert "HGMMA=" in out and "spills        0 B stores, 0 B loads" in out and "ptxas warnings: none" in out


@pytest.mark.gpu
@pytest.mark.isolated(timeout=300)
@pytest.mark.parametrize("path", GEMMS, ids=[p.stem for p in GEMMS])
def test_gemm_example_runs_on_gpu(path, capsys):
    err = load(path).main(1024)
    assert 0 < err < 1e-2  # a float64 reference of random data: never exactly equal
    assert "TFLOP/s" in capsys.readouterr().out
