"""grouped_matmul's K-grouped form on the GPU (MoE weight gradients, dW_g = dy_g^T @ x_g):
PyTorch tensors against float64 per-group products, outputs poisoned with NaN first, ragged and
empty groups, the dy.t() / x layout read in place and layouts the front end copies; against
torch._grouped_mm where PyTorch has this form."""

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from nbwgmma import grouped_matmul  # noqa: E402

TOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3}


def _data(sizes, m, n, dtype, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    total = sum(sizes)
    dy = torch.randn(total, m, device="cuda", generator=g).to(dtype)
    x = (torch.randn(total, n, device="cuda", generator=g) / max(total, 1) ** 0.5).to(dtype)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).int()
    return dy, x, offs


def _check(out, a, b, sizes, dtype):
    """out[g] against A[:, s:e] @ B[s:e] in float64, each group's relative error; empty groups zero."""
    assert out.shape == (len(sizes), a.shape[0], b.shape[1]) and out.dtype == dtype
    assert torch.isfinite(out).all()
    s = 0
    for g, size in enumerate(sizes):
        ref = a[:, s:s + size].double() @ b[s:s + size].double()
        if size == 0:
            assert (out[g] == 0).all(), g
        else:
            rel = float(torch.linalg.norm(out[g].double() - ref) / torch.linalg.norm(ref))
            assert rel <= TOL[dtype], (g, size, rel)
        s += size


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("sizes, m, n", [([300, 0, 1000, 17, 5, 64], 520, 264),  # ragged, empty, tiny groups
                                         ([4096, 4096], 256, 384),               # long K
                                         ([1] * 9 + [0], 136, 72)])              # one token per group
def test_weight_gradient_layout_matches_per_group_products(sizes, m, n, dtype):
    """grouped_matmul(dy.t(), x, offs): both operands read in place (M- and N-contiguous)."""
    dy, x, offs = _data(sizes, m, n, dtype, sum(sizes) + m + n)
    out = torch.full((len(sizes), m, n), float("nan"), device="cuda", dtype=dtype)
    assert grouped_matmul(dy.t(), x, offs, out=out) is out
    _check(out, dy.t(), x, sizes, dtype)
    fresh = grouped_matmul(dy.t(), x, offs)
    assert torch.equal(fresh, out)  # the same kernel: the same bits


def test_copied_layouts():
    """A row-major (M, total) and B K-contiguous (x^T's transpose) are copied into the kernel's
    layouts; M and N that are not multiples of 8 (rows padded to 128 bytes in the copies, out's
    rows padded like torch._grouped_mm's)."""
    sizes, m, n = [200, 0, 77, 130], 100, 90
    dtype = torch.bfloat16
    dy, x, offs = _data(sizes, m, n, dtype, 3)
    a = dy.t().contiguous()  # (M, total), total contiguous
    b = x.t().contiguous().t()  # (total, N), total contiguous
    out = grouped_matmul(a, b, offs)
    _check(out, a, b, sizes, dtype)
    assert out.stride(1) % 8 == 0  # 16-byte rows


def test_offsets_not_read_on_the_host_in_a_cuda_graph():
    """Under CUDA graph capture (no host synchronization allowed), the counts changing on the
    device between replays."""
    sizes, m, n = [64, 64, 64], 128, 256
    dy, x, offs = _data(sizes, m, n, torch.bfloat16, 9)
    out = torch.full((3, m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    grouped_matmul(dy.t(), x, offs, out=out)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        grouped_matmul(dy.t(), x, offs, out=out)
    for new in ([10, 0, 182], [192, 0, 0], [1, 100, 91]):
        out.fill_(float("nan"))
        offs.copy_(torch.tensor(new, device="cuda").cumsum(0).int())
        graph.replay()
        torch.cuda.synchronize()
        _check(out, dy.t(), x, new, torch.bfloat16)


def test_against_torch_grouped_mm():
    """The same numbers as torch._grouped_mm(dy.t(), x, offs=offs), an empty group included
    (zeros in both), where this PyTorch has the 2-D x 2-D form."""
    if not hasattr(torch, "_grouped_mm"):
        pytest.skip("this PyTorch has no torch._grouped_mm")
    sizes, m, n = [256, 0, 512, 128], 384, 512  # multiples of 16, as some PyTorch versions need
    dy, x, offs = _data(sizes, m, n, torch.bfloat16, 5)
    try:
        peer = torch._grouped_mm(dy.t(), x, offs=offs)
    except RuntimeError as e:
        pytest.skip(f"torch._grouped_mm refuses the 2-D x 2-D form here: {e}")
    ours = grouped_matmul(dy.t(), x, offs)
    assert (peer[1] == 0).all() and (ours[1] == 0).all()
    rel = float(torch.linalg.norm(ours.double() - peer.double()) / torch.linalg.norm(peer.double()))
    assert rel <= 1e-2, rel


def test_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    sizes, m, n = [70, 0, 130], 64, 128
    rng = cupy.random.default_rng(2)
    total = sum(sizes)
    dy = rng.standard_normal((total, m), dtype=cupy.float32).astype(cupy.float16)
    x = rng.standard_normal((total, n), dtype=cupy.float32).astype(cupy.float16)
    offs = cupy.asarray(sizes).cumsum().astype(cupy.int32)
    out = grouped_matmul(dy.T, x, offs)
    assert out.shape == (3, m, n) and out.dtype == cupy.float16
    s = 0
    for g, size in enumerate(sizes):
        ref = dy[s:s + size].T.astype(cupy.float64) @ x[s:s + size].astype(cupy.float64)
        got = out[g].astype(cupy.float64)
        if size:
            assert float(cupy.linalg.norm(got - ref) / cupy.linalg.norm(ref)) <= 2e-3
        else:
            assert not got.any()
        s += size
