"""``python -m nbwgmma precompile`` without a GPU: its list holds every kernel the default path picks."""

import itertools
import sys

import pytest

from nbwgmma import precompile
from nbwgmma.frontend.arrays import ArrayInfo
from nbwgmma.frontend.default_tile import pick_default
from nbwgmma.kernels.gemm import GemmConfig

DIMS = (1, 16, 64, 100, 128, 200, 256, 300, 512, 1000, 1024, 2048, 3000, 4096, 5000, 8192, 14336, 16384, 28672)


KINDS = {"bf16": "f32.bf16.bf16", "f16": "f32.f16.f16", "e4m3": "f32.e4m3.e4m3", "tf32": "f32.tf32.tf32"}


def _default_config(dt, lay, m, n, k):
    """The config the default path takes for a plain product of ``dt`` operands in layout ``lay`` into
    a row-major out of the input type's (bf16 for fp8, f32 for tf32) that TMA can store: the plan's own
    rules (frontend.default_tile.pick_default), not a copy of them."""
    odt = {"tf32": "f32", "e4m3": "bf16"}.get(dt, dt)
    size = 4 if odt == "f32" else 2
    io = ArrayInfo(1 << 20, (m, n), (n * size, size), size, odt, 0, "cupy")
    opts = {}
    pick_default(opts, {}, KINDS[dt], m, n, k, "K" if lay[0] == "K" else "MN", "K" if lay[1] == "K" else "MN", io,
                 odt, odt != "f32")
    return {key: v for key, v in opts.items() if (key, v) != ("swap", 0)}


@pytest.mark.parametrize("sms", [132, 114, 78])  # H100 SXM, H100 PCIe, a partitioned GPU
def test_every_default_choice_is_in_the_list(monkeypatch, sms):
    monkeypatch.setattr(sys.modules["nbwgmma.launch"], "device_limits", lambda device=None: {"multiprocessors": sms})
    listed = {(dt, lay, tuple(sorted(c.items()))) for dt, lay, c in precompile.kernel_list()}
    seen = set()
    for dt in KINDS:
        for m, n, k in itertools.product(DIMS, DIMS, (64, 512, 4096, 16384)):
            for lay in (("KK", "KN", "MK", "MN") if dt in ("bf16", "f16") else ("KK",)):
                key = (dt, lay, tuple(sorted(_default_config(dt, lay, m, n, k).items())))
                assert key in listed, key
                seen.add(key)
    # The list is not padded with kernels nothing picks (the K slices' 300 widths and counts apart: only
    # one-wave products of few tiles at a long K take them, which this grid meets a few times).
    from nbwgmma.frontend.few_tiles import K_SLICES_64_TILES, K_SLICES_TILES

    slices = {(dt, "KK", tuple(sorted(c.items()))) for dt in ("bf16", "f16") for c in K_SLICES_TILES + K_SLICES_64_TILES}
    assert seen & slices and len(seen - slices) >= len(listed - slices) // 2


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
            # (tiles of 128 rows or more into a 16-bit out, bf16 for fp8 inputs: stored transposed by TMA, as
            # the plan does)
            tma = c.get("bm", 64) >= 128
            GemmConfig(kinds[dt], a_major=majors[1], b_major=majors[0], scaled=dt in ("e4m3", "e5m2"), out="bf16",
                       epilogue="tma" if tma else "direct", c_transposed=tma, **c)
            continue
        GemmConfig(kinds[dt], **({"a_major": majors[0], "b_major": majors[1], "scaled": dt in ("e4m3", "e5m2"),
                                  "out": "f32" if tf32 else "bf16", "epilogue": "direct" if tf32 else "tma"} | c))
    assert {lay for dt, lay, _ in items if dt in ("e4m3", "e5m2", "tf32")} == {"KK"}  # the others are copied


def test_bad_names_are_refused():
    with pytest.raises(ValueError, match="dtype must be among"):
        precompile.kernel_list(("bf16", "int8"))
    with pytest.raises(ValueError, match="layout must be among"):
        precompile.kernel_list(("bf16",), ("KK", "kk"))


def test_every_item_plans_without_a_gpu(monkeypatch):
    """``precompile --arch`` builds each item's plan from array descriptions: its tile is the item's,
    and its kernel takes C's map (TMA epilogue) or C as an array: row-major, or column-major where
    the product is swapped (out^T), one row of out typed row-major as Numba types it."""
    from numba import types

    monkeypatch.setattr(sys.modules["nbwgmma.launch"], "device_limits", lambda device=None: {"multiprocessors": 132})
    for dt, lay, cfg in precompile.kernel_list(precompile.DTYPES, autotune=True):
        for rows in ((256, 1) if cfg.get("swap") else (256,)):
            plan = precompile.cpu_plan(dt, lay, cfg, rows)
            assert (plan.cfg.bm, plan.cfg.bn) == (cfg["bm"], cfg["bn"]) and plan.swap == bool(cfg.get("swap"))
            sig = plan.signature()
            assert sig[:2] == (types.int64,) * 2 and sig[3:7] == (types.int32,) * 3 + (types.float32,)
            workspaces = plan.cfg.split > 1 or plan.cfg.stream_k
            assert len(sig) == (9 if workspaces else 7)
            if plan.cfg.epilogue == "tma":
                assert sig[2] == types.int64
            else:
                assert sig[2].ndim == 2 and sig[2].layout == ("F" if plan.swap and rows > 1 else "C"), (dt, lay, cfg)


def test_a_kernel_built_without_a_gpu_is_stored_under_its_key(tmp_path):
    """One worker of ``precompile --arch sm_90a``: the cubin (an ELF file holding the kernel's entry)
    lands where a GPU process of compute capability 9.0 looks for the plan's kernel; a second run finds it."""
    import json
    import os
    import subprocess

    from nbwgmma import cache

    item = ("bf16", "KK", {"bm": 64, "bn": 64})
    env = dict(os.environ, NBWGMMA_CACHE_DIR=str(tmp_path / "cache"), NBWGMMA_PREBUILT_DIR=str(tmp_path / "shipped"))

    def build(*more):
        r = subprocess.run([sys.executable, "-m", "nbwgmma.precompile", "--arch", "sm_90a", *more, json.dumps([item])],
                           capture_output=True, text=True, env=env, check=True)
        return json.loads(r.stdout.strip().splitlines()[-1])

    assert build() == {"compiled": 1, "cached": 0, "failed": []}
    plan = precompile.cpu_plan(*item)
    os.environ["NBWGMMA_CACHE_DIR"] = str(tmp_path / "cache")
    try:
        name, cubin = cache.lookup(("gemm", plan.cfg.key()), plan.signature(), (9, 0))
    finally:
        del os.environ["NBWGMMA_CACHE_DIR"]
    assert cubin[:4] == b"\x7fELF" and name.encode() in cubin
    assert len(list((tmp_path / "cache").glob("*.cubin"))) == 1
    assert build() == {"compiled": 0, "cached": 1, "failed": []}
    # --prebuilt: the same kernel among the package's shipped ones, under the shipped key
    assert build("--prebuilt") == {"compiled": 1, "cached": 0, "failed": []}
    monkey = pytest.MonkeyPatch()
    monkey.setattr(cache, "PREBUILT", tmp_path / "shipped")
    try:
        shipped = cache.lookup(("gemm", plan.cfg.key()), plan.signature(), (9, 0), prebuilt=True)
        assert shipped[0] == name and shipped[1][:4] == b"\x7fELF" and len(shipped[1]) == len(cubin)
    finally:
        monkey.undo()


def test_tail_shapes_take_the_tail_maps_they_are_for(monkeypatch):
    """``precompile --tails``: each kernel that is not swapped gets three more products, one wave each,
    whose plans take B's tail map, A's, and both (K-major operands read in place; an MN-major B takes
    none, so its products build A's variant or the whole-tile kernel again, found in the cache)."""
    monkeypatch.setattr(sys.modules["nbwgmma.launch"], "device_limits", lambda device=None: {"multiprocessors": 132})
    assert len(precompile.tail_shapes({"bm": 128, "bn": 256})) == 3
    assert precompile.tail_shapes({"swap": 1, "bm": 128, "bn": 64}) == ()
    checked = 0
    for dt, lay, cfg in precompile.kernel_list(("bf16", "e4m3"), ("KK", "KN")):
        shapes = precompile.tail_shapes(cfg)
        if cfg.get("swap"):
            assert shapes == ()
            continue
        got = []
        for rows, n in shapes:
            plan = precompile.cpu_plan(dt, lay, cfg, rows, n, tails=True)
            assert (plan.cfg.bm, plan.cfg.bn) == (cfg["bm"], cfg["bn"]), (dt, lay, cfg)
            got.append((plan.cfg.b_tail, plan.cfg.a_tail))
        want = [(True, False), (False, True), (True, True)] if lay == "KK" else [(False, False), (False, True),
                                                                                 (False, True)]
        if cfg.get("stream_k") or cfg.get("cluster", 1) > 1:
            continue  # (stream-K takes no tail map; a cluster takes that of the operand it does not share)
        # (a product of more than a wave of CTAs takes none: 64 x 64 tiles in four K slices padded along both
        # M and N are 6 x 6 x 4 CTAs at least, so a 132-SM GPU never runs that kernel with both maps)
        want = [w if -(-r // cfg["bm"]) * -(-c // cfg["bn"]) * cfg.get("split", 1) <= 132 else (False, False)
                for w, (r, c) in zip(want, shapes)]
        assert got == want, (dt, lay, cfg, got)
        checked += 1
    assert checked > 40


def test_a_tails_worker_builds_the_tail_maps_kernels(tmp_path):
    """``python -m nbwgmma.precompile --arch sm_90a --tails``: the whole-tile kernel and its three tail-map
    variants, each under the key a GPU process of the class looks up."""
    import json
    import os
    import subprocess

    item = ("bf16", "KK", {"bm": 64, "bn": 64})
    env = dict(os.environ, NBWGMMA_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-m", "nbwgmma.precompile", "--arch", "sm_90a", "--tails", json.dumps([item])],
                       capture_output=True, text=True, env=env, check=True)
    assert json.loads(r.stdout.strip().splitlines()[-1]) == {"compiled": 4, "cached": 0, "failed": []}
    assert len(list((tmp_path / "cache").glob("*.cubin"))) == 4
