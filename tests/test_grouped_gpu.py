"""grouped_matmul on the GPU: PyTorch tensors against float64 per-group products (uneven
groups, empty groups, long K) and against torch._grouped_mm where PyTorch has it."""

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from nbwgmma import grouped_matmul  # noqa: E402


@pytest.mark.parametrize("sizes, n, k", [([300, 0, 1000, 17], 520, 328), ([4096] * 2, 256, 4096), ([1] * 9, 128, 64)])
def test_grouped_matmul_matches_the_per_group_products(sizes, n, k):
    g = torch.Generator(device="cuda").manual_seed(sum(sizes) + n + k)
    total = sum(sizes)
    x = (torch.randn(total, k, device="cuda", generator=g) / k ** 0.5).bfloat16()
    w = torch.randn(len(sizes), n, k, device="cuda", generator=g).bfloat16()
    offs = torch.tensor(sizes, device="cuda").cumsum(0).int()
    out = torch.full((total, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    grouped_matmul(x, w.transpose(1, 2), offs, out=out)
    ends = offs.tolist()
    ref = torch.cat([x[e - s:e].double() @ w[i].double().t() for i, (s, e) in enumerate(zip(sizes, ends))])
    rel = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert torch.isfinite(out).all() and rel <= 1e-2, rel
    if hasattr(torch, "_grouped_mm"):
        peer = torch._grouped_mm(x, w.transpose(1, 2), offs=offs)
        assert float(torch.linalg.norm(peer.double() - ref) / torch.linalg.norm(ref)) <= 1e-2
