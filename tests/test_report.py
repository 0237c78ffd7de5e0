import json

import numpy as np
from numba import cuda, types

from nbwgmma.__main__ import main
from nbwgmma.report import compile_report, parse_sass


def test_report_on_a_small_kernel():
    def kernel(x, y):
        i = cuda.grid(1)
        if i < x.size:
            y[i] = x[i] * 2.0 + 1.0

    rep = compile_report(kernel, (types.float32[:], types.float32[:]))
    assert rep.arch == "sm_90a" and rep.registers > 0
    assert rep.spill_bytes == 0 and rep.stack_frame == 0
    assert rep.sass["EXIT"] >= 1
    assert rep.sass["STG"] + rep.sass["ST"] == 1 and rep.sass["LDG"] + rep.sass["LD"] == 1
    assert ".target sm_90a" in rep.ptx
    d = json.loads(rep.to_json())
    assert d["sass"]["EXIT"] >= 1 and d["spill_bytes"] == 0


def test_report_sees_local_memory():
    def kernel(x, y, k):
        buf = cuda.local.array(64, np.float32)
        for i in range(64):
            buf[i] = x[i]
        y[0] = buf[k[0]]

    rep = compile_report(kernel, (types.float32[:], types.float32[:], types.int32[:]))
    assert rep.local_memory_ops > 0


def test_sass_parser_handles_predicates():
    text = "/*0010*/  @!P0 HGMMA.64x256x16.F32.BF16 R24, gdesc[UR4], R24 ;\n/*0020*/  EXIT ;"
    base, full = parse_sass(text)
    assert base == {"HGMMA": 1, "EXIT": 1}
    assert full["HGMMA.64x256x16.F32.BF16"] == 1


def test_inspect_cli_json(capsys):
    assert main(["inspect", "tile", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["sass"]["HGMMA"] >= 1 and d["spill_bytes"] == 0


def test_demo_without_gpu_prints_report(monkeypatch, capsys):
    import nbwgmma.demo as ex

    monkeypatch.setattr(ex, "gpu_available", lambda: False)
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "No sm_90 GPU" in out and "HGMMA" in out
