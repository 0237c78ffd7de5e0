"""The sparse GEMM on the GPU: ``matmul`` with a ``Sparse24`` weight on either side, PyTorch tensors
against float64 products of the decompressed weight; small integers exact (bf16, f16, e4m3),
random data within the output type's rounding; ragged shapes, long K, every operand layout;
outputs poisoned (NaN) before each run."""

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from nbwgmma import MatmulError, Sparse24, matmul  # noqa: E402

TDT = {"bf16": torch.bfloat16, "f16": torch.float16, "e4m3": torch.float8_e4m3fn}
TOL = {"bf16": 1e-2, "f16": 2e-3}  # relative norm against float64: the rounding of the output
SHAPES = [(1000, 520, 328), (256, 384, 4096), (1, 128, 64), (8, 8, 8), (2048, 1032, 512), (300, 4100, 136)]


def _ints(g, shape, t):
    v = torch.randint(-3, 4, shape, device="cuda", generator=g).double()
    return torch.where(v == 0, torch.ones_like(v), v).to(TDT[t])


def _weight(g, n, k, t, ints=True):
    w = _ints(g, (n, k), t) if ints else torch.randn(n, k, device="cuda", generator=g).to(TDT[t])
    w24 = Sparse24.from_dense(w, prune=True)
    dense = w24.to_dense()
    assert dense.dtype == w.dtype and dense.shape == w.shape
    kept = (dense.double() != 0).reshape(n, -1, 4).sum(-1)
    assert int(kept.max()) <= 2 and int((dense.double() != w.double()).sum()) <= n * k // 2
    return w24, dense.double()


def _poisoned(shape, t):
    return torch.full(shape, float("nan"), device="cuda", dtype=TDT[t])


@pytest.mark.parametrize("t", ["bf16", "f16"])
def test_small_integers_exact_both_sides_every_layout(t):
    for m, n, k in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(m + 3 * n + 7 * k)
        w24, w = _weight(g, n, k, t)
        x = _ints(g, (m, k), t)
        # exact in f32; the output is that rounded to its type once (bf16 holds integers to 256 only)
        want = (x.double() @ w.t()).to(TDT[t]).double()
        for xin in (x, x.t().contiguous().t()):  # K contiguous, then M contiguous
            out = _poisoned((m, n), t)
            assert matmul(xin, w24.t(), out=out) is out
            assert torch.equal(out.double(), want), (t, m, n, k)
        y = x.t()  # w24 @ y with y [K, M]: M contiguous (a view), then row-major
        for yin in (y, y.contiguous()):
            out = _poisoned((n, m), t)
            matmul(w24, yin, out=out)
            assert torch.equal(out.double(), want.t()), (t, m, n, k)


def test_fp8_small_integers_exact():
    for m, n, k in ((1000, 520, 336), (128, 256, 1024), (8, 8, 16)):  # fp8 rows of K: 16-byte aligned
        g = torch.Generator(device="cuda").manual_seed(m + n + k)
        w24, w = _weight(g, n, k, "e4m3")
        x = _ints(g, (m, k), "e4m3")
        out = _poisoned((m, n), "bf16")
        matmul(x, w24.t(), out=out)
        want = (x.double() @ w.t()).to(torch.bfloat16).double()
        assert out.dtype == torch.bfloat16 and torch.equal(out.double(), want), (m, n, k)


@pytest.mark.parametrize("t", ["bf16", "f16"])
def test_random_data_within_rounding(t):
    for m, n, k in ((2048, 1032, 512), (512, 4096, 4096), (1000, 520, 328)):
        g = torch.Generator(device="cuda").manual_seed(k)
        w24, w = _weight(g, n, k, t, ints=False)
        x = torch.randn(m, k, device="cuda", generator=g).to(TDT[t])
        got = matmul(x, w24.t())
        ref = x.double() @ w.t()
        err = float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref))
        assert got.dtype == TDT[t] and got.shape == (m, n) and err < TOL[t], (t, m, n, k, err)
        got = matmul(w24, x.t())
        err = float(torch.linalg.norm(got.double() - ref.t()) / torch.linalg.norm(ref))
        assert err < TOL[t], (t, m, n, k, err)


def test_a_weight_that_is_not_24_is_refused_with_its_row():
    w = torch.zeros(16, 32, device="cuda", dtype=torch.bfloat16)
    w[:, 0] = 1
    w[9, 12:15] = 1
    with pytest.raises(MatmulError, match=r"row 9 is not 2:4 sparse: columns 12\.\.15 hold 3 nonzeros"):
        Sparse24.from_dense(w)
    x = torch.ones(4, 16, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(MatmulError, match="inner dimensions differ"):
        matmul(x, Sparse24.from_dense(w, prune=True).t())


@pytest.mark.parametrize("t, cfg", [("bf16", {"bn": 256, "out_blocks": 2}), ("f16", {"bn": 192, "out_blocks": 1}),
                                    ("bf16", {"bn": 128, "out_blocks": 2}), ("f16", {"out_blocks": 0})])
def test_transposed_stores_every_block_count(t, cfg):
    """``x @ w24.t()`` into a row-major out: the transposed 64 x 64 blocks through shared memory
    and TMA stores, one or two per consumer (taking turns across the tiles of a CTA), or the
    element-wise stores; ragged edges; exact on small integers and against the default."""
    g = torch.Generator(device="cuda").manual_seed(len(str(cfg)))
    m, n, k = 3000, 2120, 1024  # 17 x 12-24 tiles of D: more than a wave, the last ones ragged
    w24, w = _weight(g, n, k, t)
    x = _ints(g, (m, k), t)
    want = (x.double() @ w.t()).to(TDT[t]).double()
    out = _poisoned((m, n), t)
    matmul(x, w24.t(), out=out, config=cfg)
    assert torch.equal(out.double(), want), cfg


@pytest.mark.parametrize("t, cluster, side", [("bf16", 2, "right"), ("f16", 4, "right"), ("e4m3", 2, "right"),
                                              ("f16", 2, "left")])
def test_clusters_multicast_b_exact(t, cluster, side):
    """Clusters of 2 and 4 CTAs along the weight's rows share the dense operand's tile, each loading
    its share and multicasting it; 2120 weight rows (17 tile rows: the last cluster's ranks past
    them load and store nothing), exact on small integers, both sides (w24 @ y row-major: B N-major)."""
    g = torch.Generator(device="cuda").manual_seed(cluster + len(t))
    m, n, k = 1000, 2120, 1024
    w24, w = _weight(g, n, k, t)
    x = _ints(g, (m, k), t)
    odt = "bf16" if t == "e4m3" else t
    want = (x.double() @ w.t()).to(TDT[odt]).double()
    if side == "right":
        out = _poisoned((m, n), odt)
        matmul(x, w24.t(), out=out, config={"cluster": cluster})
        assert torch.equal(out.double(), want), (t, cluster)
    else:
        out = _poisoned((n, m), odt)
        matmul(w24, x.t().contiguous(), out=out, config={"cluster": cluster})
        assert torch.equal(out.double(), want.t()), (t, cluster)
