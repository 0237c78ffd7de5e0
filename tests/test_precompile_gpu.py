"""``python -m nbwgmma precompile`` on the GPU: the kernels it builds are the ones first calls load."""

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from nbwgmma import cache, matmul, precompile  # noqa: E402


@pytest.mark.parametrize("dtype, layout", [("bf16", "KK"), ("f16", "KN"), ("bf16", "MN"), ("e4m3", "KK"),
                                           ("tf32", "KK")])
def test_a_precompiled_kernel_is_what_a_first_call_of_its_class_loads(tmp_path, monkeypatch, dtype, layout):
    monkeypatch.setenv("NBWGMMA_CACHE_DIR", str(tmp_path))
    cfg = {"bm": 128, "bn": 128}
    compiled, hits, failed = precompile.worker([(dtype, layout, cfg)])
    assert not failed and len(list(tmp_path.glob("*.cubin"))) == 1
    g = torch.Generator(device="cuda").manual_seed(5)
    # another shape of the class (a new plan, its kernel from the disk cache); M a multiple of 8, so
    # that a column-major A is read in place
    m, n, k = 304, 520, 200
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
