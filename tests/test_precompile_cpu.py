"""``python -m nbwgmma precompile`` without a GPU: its list holds every kernel the default path picks."""

import itertools
import sys

import pytest

from nbwgmma import precompile
from nbwgmma.frontend.tiles import pick_narrow, pick_small_m, pick_tile
from nbwgmma.kernels.gemm import GemmConfig

DIMS = (1, 16, 64, 100, 128, 200, 256, 300, 512, 1000, 1024, 2048, 3000, 4096, 5000, 8192, 14336, 16384, 28672)


@pytest.mark.parametrize("sms", [132, 114, 78])  # H100 SXM, H100 PCIe, a partitioned GPU
def test_every_default_choice_is_in_the_list(monkeypatch, sms):
    monkeypatch.setattr(sys.modules["nbwgmma.launch"], "device_limits", lambda device=None: {"multiprocessors": sms})
    listed = {(dt, lay, tuple(sorted(c.items()))) for dt, lay, c in precompile.kernel_list()}
    seen = set()
    for dt, bits in (("bf16", 16), ("f16", 16), ("e4m3", 8), ("tf32", 32)):
        for m, n, k in itertools.product(DIMS, DIMS, (64, 512, 4096, 16384)):
            for lay in (("KK", "KN", "MK", "MN") if bits == 16 else ("KK",)):
                small = pick_small_m(m, n, k, bits, a_kmajor=lay[0] == "K")
                cfg = small if small is not None else dict(zip(("bm", "bn"), pick_tile(m, n)))
                narrow = None if small is not None or lay[1] != "K" else pick_narrow(m, n, (cfg["bm"], cfg["bn"]), sms)
                cfg = narrow or cfg
                key = (dt, lay, tuple(sorted(cfg.items())))
                assert key in listed, key
                seen.add(key)
    assert len(seen) >= len(listed) // 2  # the list is not padded with kernels nothing picks


@pytest.mark.parametrize("autotune", [False, True])
def test_the_list_builds_valid_configs_once_each(autotune):
    items = precompile.kernel_list(precompile.DTYPES, autotune=autotune)
    assert len({(dt, lay, tuple(sorted(c.items()))) for dt, lay, c in items}) == len(items)
    kinds = {"bf16": "f32.bf16.bf16", "f16": "f32.f16.f16", "e4m3": "f32.e4m3.e4m3", "e5m2": "f32.e5m2.e5m2",
             "tf32": "f32.tf32.tf32"}
    for dt, lay, c in items:
        tf32 = dt == "tf32"
        c = dict(c)
        majors = ["K" if x == "K" else "MN" for x in lay]
        if c.pop("swap", 0):  # the kernel's A is B^T, its B is A^T; the output a transposed view
            assert lay[0] == "K" and dt != "tf32"
            GemmConfig(kinds[dt], a_major=majors[1], b_major=majors[0], scaled=dt in ("e4m3", "e5m2"), out="bf16",
                       epilogue="direct", **c)
            continue
        GemmConfig(kinds[dt], **({"a_major": majors[0], "b_major": majors[1], "scaled": dt in ("e4m3", "e5m2"),
                                  "out": "f32" if tf32 else "bf16", "epilogue": "direct" if tf32 else "tma"} | c))
    assert {lay for dt, lay, _ in items if dt in ("e4m3", "e5m2", "tf32")} == {"KK"}  # the others are copied


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="dtype must be among"):
        precompile.kernel_list(("bf16", "int8"))
    with pytest.raises(ValueError, match="layout must be among"):
        precompile.kernel_list(("bf16",), ("KK", "kk"))
