"""``python -m nbwgmma precompile`` on the GPU: the kernels it builds are the ones first calls load."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from nbwgmma import cache, matmul, precompile  # noqa: E402
from nbwgmma.frontend.matmul import forget_plans  # noqa: E402
from nbwgmma.frontend.tiles import narrow_tile, swapped_config  # noqa: E402


def _first_call_of_the_class(dtype, layout, cfg, m=304):
    """A product of ``cfg``'s class at another shape (a new plan, its kernel from the disk cache;
    M a multiple of 8, so that a column-major A is read in place): it hits the cache, compiles
    nothing, and is exact. Plans an earlier test of this process made are dropped first (one of
    the same class would reuse its kernel without the disk cache). The tail maps are off: a product
    that takes them (this one would, in one wave with its last tile row and column mostly padding)
    runs a kernel of its own, which precompile does not build (frontend.tails)."""
    from nbwgmma.frontend import tails

    forget_plans()
    saved = tails.B_TAIL_MAP, tails.A_TAIL_MAP
    tails.B_TAIL_MAP = tails.A_TAIL_MAP = False
    try:
        _first_call(dtype, layout, cfg, m)
    finally:
        tails.B_TAIL_MAP, tails.A_TAIL_MAP = saved


def _first_call(dtype, layout, cfg, m):
    g = torch.Generator(device="cuda").manual_seed(5)
    n, k = 520, 200
    base = torch.float32 if dtype == "tf32" else torch.bfloat16 if dtype in ("bf16", "e4m3") else torch.float16
    a = torch.randint(-1, 2, (m, k), device="cuda", generator=g).to(base)  # |sums| <= 200: exact in bf16
    b = torch.randint(-1, 2, (n, k), device="cuda", generator=g).to(base)
    kw = {}
    if dtype == "e4m3":
        a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
        kw = {"scale_a": 1.0, "scale_b": 1.0, "out_dtype": "bf16"}
    want = a.double() @ b.double().t()
    a = a if layout[0] == "K" else a.t().contiguous().t()
    b = b.t() if layout[1] == "K" else b.t().contiguous()
    before = dict(cache.stats)
    c = matmul(a, b, config=cfg, **kw)
    assert cache.stats["hits"] == before["hits"] + 1 and cache.stats["misses"] == before["misses"]
    assert torch.equal(c.double(), want)  # small integers: exact in every type here


@pytest.mark.parametrize("dtype, layout", [("bf16", "KK"), ("f16", "KN"), ("bf16", "MN"), ("e4m3", "KK"),
                                           ("tf32", "KK")])
def test_a_precompiled_kernel_is_what_a_first_call_of_its_class_loads(tmp_path, monkeypatch, dtype, layout):
    monkeypatch.setenv("NBWGMMA_CACHE_DIR", str(tmp_path))
    cfg = {"bm": 128, "bn": 128}
    compiled, hits, failed = precompile.worker([(dtype, layout, cfg)])
    assert not failed and len(list(tmp_path.glob("*.cubin"))) == 1
    _first_call_of_the_class(dtype, layout, cfg)


@pytest.mark.parametrize("dtype, layout, cfg, m", [
    ("bf16", "KK", {"bm": 128, "bn": 128}, 304), ("f16", "MN", {"bm": 128, "bn": 256}, 304),
    ("e4m3", "KK", {"bm": 128, "bn": 128}, 304), ("tf32", "KK", {"bm": 128, "bn": 128}, 304),
    ("bf16", "KK", narrow_tile(96), 304), ("bf16", "KK", {"bm": 64, "bn": 128, "stages": 8, "split": 2}, 304),
    ("bf16", "KK", swapped_config(16, 2), 40), ("bf16", "KK", swapped_config(16, 1), 1),
    ("bf16", "KK", swapped_config(16, halves=True), 40)])
def test_a_kernel_built_without_a_gpu_is_what_a_first_call_loads(tmp_path, monkeypatch, dtype, layout, cfg, m):
    """``precompile --arch sm_90a`` (Numba's PTX through ptxas, the plan's signature from array
    descriptions): the GPU process finds the kernel under the key it computes, and it is right."""
    monkeypatch.setenv("NBWGMMA_CACHE_DIR", str(tmp_path))
    r = subprocess.run([sys.executable, "-m", "nbwgmma.precompile", "--arch", "sm_90a",
                        json.dumps([(dtype, layout, cfg)])], capture_output=True, text=True, check=True)
    assert json.loads(r.stdout.strip().splitlines()[-1])["failed"] == []
    _first_call_of_the_class(dtype, layout, cfg, m)


def test_a_shipped_kernel_is_what_a_first_call_loads_with_an_empty_cache(tmp_path, monkeypatch):
    """``precompile --arch sm_90a --prebuilt`` (the kernels a wheel ships): with the user's cache
    empty, the first call of the class loads the shipped kernel and is exact."""
    cfg = {"bm": 128, "bn": 256}
    env = dict(os.environ, NBWGMMA_PREBUILT_DIR=str(tmp_path / "shipped"))
    r = subprocess.run([sys.executable, "-m", "nbwgmma.precompile", "--arch", "sm_90a", "--prebuilt",
                        json.dumps([("bf16", "KK", cfg)])], capture_output=True, text=True, check=True, env=env)
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"compiled": 1, "cached": 0, "failed": []}
    monkeypatch.setattr(cache, "PREBUILT", tmp_path / "shipped")
    monkeypatch.setenv("NBWGMMA_CACHE_DIR", str(tmp_path / "empty"))
    before = cache.stats["prebuilt"]
    _first_call_of_the_class("bf16", "KK", cfg)
    assert cache.stats["prebuilt"] == before + 1


@pytest.mark.parametrize("arch", [None, "sm_90a"])
def test_kernels_built_with_tails_are_what_a_padded_first_call_loads(tmp_path, monkeypatch, arch):
    """``precompile --tails`` (on the GPU, and without one): a one-wave product whose last tile row and
    column are mostly padding (304 x 520 x 200 in 128 x 128 tiles takes both tail maps) loads its
    kernel from the cache, compiles nothing, and is exact."""
    monkeypatch.setenv("NBWGMMA_CACHE_DIR", str(tmp_path))
    cfg = {"bm": 128, "bn": 128}
    where = [] if arch is None else ["--arch", arch]
    r = subprocess.run([sys.executable, "-m", "nbwgmma.precompile", *where, "--tails",
                        json.dumps([("bf16", "KK", cfg)])], capture_output=True, text=True, check=True)
    assert json.loads(r.stdout.strip().splitlines()[-1])["failed"] == []
    forget_plans()
    _first_call("bf16", "KK", cfg, 304)
    from nbwgmma.frontend.matmul import last_plan

    assert last_plan().cfg.b_tail and last_plan().cfg.a_tail
