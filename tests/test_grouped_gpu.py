"""grouped_matmul on the GPU: PyTorch tensors against float64 per-group products (uneven
groups, empty groups, long K) and against torch._grouped_mm where PyTorch has it."""

import numpy as np
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


def test_masked_layout_in_a_cuda_graph_follows_changing_counts():
    g_, t, n, k = 4, 256, 384, 512
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = (torch.randn(g_, t, k, device="cuda", generator=gen) / k ** 0.5).bfloat16()
    w = torch.randn(g_, n, k, device="cuda", generator=gen).bfloat16()
    counts = torch.tensor([256, 0, 17, 130], device="cuda", dtype=torch.int32)
    out = torch.full((g_, t, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    grouped_matmul(x, w.transpose(1, 2), counts, out=out)  # compile and warm up outside the graph
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        grouped_matmul(x, w.transpose(1, 2), counts, out=out)
    for new in ([3, 256, 0, 128], [256, 255, 1, 0]):
        out.fill_(float("nan"))
        counts.copy_(torch.tensor(new, device="cuda", dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        for g in range(g_):
            c = new[g]
            ref = x[g, :c].double() @ w[g].double().t()
            if c:
                rel = float(torch.linalg.norm(out[g, :c].double() - ref) / torch.linalg.norm(ref))
                assert rel <= 1e-2, (new, g, rel)
            assert torch.isnan(out[g, c:].float()).all(), (new, g)


@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
def test_bias_per_expert_and_activation(act):
    """act(x_g @ w_g^T + bias[g]): the gate projection of an MoE layer, uneven and empty groups."""
    sizes, n, k = [300, 0, 700, 45], 392, 256
    g = torch.Generator(device="cuda").manual_seed(7)
    total = sum(sizes)
    x = (torch.randn(total, k, device="cuda", generator=g) / k ** 0.5).bfloat16()
    w = torch.randn(len(sizes), n, k, device="cuda", generator=g).bfloat16()
    bias = torch.randn(len(sizes), n, device="cuda", generator=g).bfloat16()
    offs = torch.tensor(sizes, device="cuda").cumsum(0).int()
    out = torch.full((total, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    grouped_matmul(x, w.transpose(1, 2), offs, out=out, bias=bias, activation=act)
    f = {"silu": torch.nn.functional.silu, "gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh")}[act]
    ends = offs.tolist()
    ref = torch.cat([f(x[e - s:e].double() @ w[i].double().t() + bias[i].double())
                     for i, (s, e) in enumerate(zip(sizes, ends))])
    rel = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert torch.isfinite(out).all() and rel <= 1e-2, rel


def test_row_major_b_and_k_not_a_multiple_of_64():
    """B (G, K, N) with N contiguous (read with wgmma's transpose bit through a 3-D map: the K tail
    of one group must not see the next group's rows)."""
    sizes, n, k = [500, 3, 0, 1200], 264, 200
    g = torch.Generator(device="cuda").manual_seed(3)
    total = sum(sizes)
    x = (torch.randn(total, k, device="cuda", generator=g) / k ** 0.5).bfloat16()
    b = torch.randn(len(sizes), k, n, device="cuda", generator=g).bfloat16()
    offs = torch.tensor(sizes, device="cuda").cumsum(0).int()
    out = torch.full((total, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    grouped_matmul(x, b, offs, out=out)
    ends = offs.tolist()
    ref = torch.cat([x[e - s:e].double() @ b[i].double() for i, (s, e) in enumerate(zip(sizes, ends))])
    rel = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert torch.isfinite(out).all() and rel <= 1e-2, rel


def _block_ref(x, w, sa, sw):
    """float64 ``sum_kb (x_kb @ w_kb^T) * sa[:, kb] * sw[nb, kb]`` of one group."""
    n, k = w.shape
    ref = torch.zeros(x.shape[0], n, device="cuda", dtype=torch.float64)
    for b in range(-(-k // 128)):
        blk = slice(128 * b, 128 * b + 128)
        ref += (x[:, blk].double() @ w[:, blk].double().t()) * sa[:, b, None].double() \
            * sw[:, b].double().repeat_interleave(128)[:n]
    return ref


@pytest.mark.parametrize("sizes, n, k, exact", [([300, 0, 1000, 17], 520, 336, True), ([2048] * 3, 384, 7168, False),
                                                ([1] * 9, 128, 128, True)])
def test_block_scaled_fp8_grouped_matches_the_per_group_products(sizes, n, k, exact):
    """e4m3 with scales per row and 128-K block (A) and per 128 x 128 block (each weight): small
    integers and power-of-two scales exact in f32 out; random values and scales against float64
    (bf16 out) over a long K."""
    g = torch.Generator(device="cuda").manual_seed(sum(sizes) + n + k)
    total, kb, nb = sum(sizes), -(-k // 128), -(-n // 128)
    if exact:
        x = torch.randint(-2, 3, (total, k), device="cuda", generator=g).float()
        w = torch.randint(-2, 3, (len(sizes), n, k), device="cuda", generator=g).float()
        sa = torch.exp2(torch.randint(-2, 3, (total, kb), device="cuda", generator=g).float())
        sw = torch.exp2(torch.randint(-2, 3, (len(sizes), nb, kb), device="cuda", generator=g).float())
    else:
        x = torch.randn(total, k, device="cuda", generator=g)
        w = torch.randn(len(sizes), n, k, device="cuda", generator=g)
        sa = torch.rand(total, kb, device="cuda", generator=g) + 0.5
        sw = torch.rand(len(sizes), nb, kb, device="cuda", generator=g) + 0.5
    x, w = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).int()
    odt = torch.float32 if exact else torch.bfloat16
    out = torch.full((total, n), float("nan"), device="cuda", dtype=odt)
    got = grouped_matmul(x, w.transpose(1, 2), offs, scale_a=sa, scale_b=sw, out=out,
                         out_dtype="f32" if exact else "bf16")
    assert got is out
    ends = offs.tolist()
    ref = torch.cat([_block_ref(x[e - s:e], w[i], sa[e - s:e], sw[i]) for i, (s, e) in enumerate(zip(sizes, ends))])
    if exact:
        assert torch.equal(out.double(), ref)
    else:
        rel = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
        assert torch.isfinite(out).all() and rel <= 1e-2, rel


@pytest.mark.parametrize("schedule", ["pingpong", "cooperative"])
@pytest.mark.parametrize("b_major", ["K", "MN"])
def test_both_schedules_on_uneven_groups_with_bias_and_silu(schedule, b_major, monkeypatch):
    """Each schedule forced on groups that end inside tiles (and an empty one), with a bias per
    expert and SiLU, B either K- or N-contiguous."""
    import nbwgmma.frontend.grouped as front

    monkeypatch.setattr(front, "COOPERATIVE_ROWS", 0 if schedule == "cooperative" else 1 << 30)
    sizes, n, k = [257, 0, 130, 511, 64], 328, 456
    g = torch.Generator(device="cuda").manual_seed(11)
    total = sum(sizes)
    x = (torch.randn(total, k, device="cuda", generator=g) / k ** 0.5).bfloat16()
    w = torch.randn(len(sizes), n, k, device="cuda", generator=g).bfloat16()
    b = w.transpose(1, 2) if b_major == "K" else w.transpose(1, 2).contiguous()
    bias = torch.randn(len(sizes), n, device="cuda", generator=g).bfloat16()
    offs = torch.tensor(sizes, device="cuda").cumsum(0).int()
    out = torch.full((total, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    grouped_matmul(x, b, offs, out=out, bias=bias, activation="silu")
    ends = offs.tolist()
    ref = torch.cat([torch.nn.functional.silu(x[e - s:e].double() @ w[i].double().t() + bias[i].double())
                     for i, (s, e) in enumerate(zip(sizes, ends))])
    rel = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert torch.isfinite(out).all() and rel <= 1e-2, rel


@pytest.mark.parametrize("act, per_group", [("silu", True), ("gelu_tanh", False)])
def test_block_scaled_fp8_grouped_with_bias_and_activation(act, per_group):
    """act(block-scaled A_g @ B_g^T + bias), bf16 out: the fp8 MoE gate projection, uneven and
    empty groups, against float64 of the same fp8 values and scales."""
    sizes, n, k = [300, 0, 700, 45], 392, 640
    g = torch.Generator(device="cuda").manual_seed(13)
    total, kb, nb = sum(sizes), -(-k // 128), -(-n // 128)
    x = torch.randn(total, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    w = torch.randn(len(sizes), n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    sa = torch.rand(total, kb, device="cuda", generator=g) + 0.5
    sw = torch.rand(len(sizes), nb, kb, device="cuda", generator=g) / 16 + 0.02
    bias = torch.randn((len(sizes), n) if per_group else (n,), device="cuda", generator=g)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).int()
    out = torch.full((total, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    grouped_matmul(x, w.transpose(1, 2), offs, scale_a=sa, scale_b=sw, out=out, bias=bias, activation=act)
    f = {"silu": torch.nn.functional.silu, "gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh")}[act]
    ends = offs.tolist()
    ref = torch.cat([f(_block_ref(x[e - s:e], w[i], sa[e - s:e], sw[i]) + (bias[i] if per_group else bias).double())
                     for i, (s, e) in enumerate(zip(sizes, ends))])
    rel = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert torch.isfinite(out).all() and rel <= 1e-2, rel


def test_block_scaled_fp8_grouped_bias_and_relu_exact_in_f32():
    """Small integers, power-of-two scales, a bias of halves: relu(A_g @ B_g^T + bias) exact in
    f32 out, one bias row shared by the groups."""
    sizes, n, k = [129, 0, 256, 3], 264, 384
    g = torch.Generator(device="cuda").manual_seed(17)
    total, kb, nb = sum(sizes), -(-k // 128), -(-n // 128)
    x = torch.randint(-2, 3, (total, k), device="cuda", generator=g).float().to(torch.float8_e4m3fn)
    w = torch.randint(-2, 3, (len(sizes), n, k), device="cuda", generator=g).float().to(torch.float8_e4m3fn)
    sa = torch.exp2(torch.randint(-2, 3, (total, kb), device="cuda", generator=g).float())
    sw = torch.exp2(torch.randint(-2, 3, (len(sizes), nb, kb), device="cuda", generator=g).float())
    bias = torch.randint(-16, 17, (n,), device="cuda", generator=g).float() / 2
    offs = torch.tensor(sizes, device="cuda").cumsum(0).int()
    out = torch.full((total, n), float("nan"), device="cuda")
    grouped_matmul(x, w.transpose(1, 2), offs, scale_a=sa, scale_b=sw, out=out, out_dtype="f32", bias=bias,
                   activation="relu")
    ends = offs.tolist()
    ref = torch.cat([torch.relu(_block_ref(x[e - s:e], w[i], sa[e - s:e], sw[i]) + bias.double())
                     for i, (s, e) in enumerate(zip(sizes, ends))])
    assert torch.equal(out.double(), ref)


def test_f32_out_with_bias_and_gelu_tanh():
    """bf16 operands, out_dtype="f32" (the ping-pong schedule storing from the registers, gelu_tanh's
    accurate form): against float64 within f32 rounding, uneven and empty groups."""
    sizes, n, k = [700, 0, 260, 45], 392, 512
    g = torch.Generator(device="cuda").manual_seed(19)
    total = sum(sizes)
    x = (torch.randn(total, k, device="cuda", generator=g) / k ** 0.5).bfloat16()
    w = torch.randn(len(sizes), n, k, device="cuda", generator=g).bfloat16()
    bias = torch.randn(len(sizes), n, device="cuda", generator=g)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).int()
    out = grouped_matmul(x, w.transpose(1, 2), offs, out_dtype="f32", bias=bias, activation="gelu_tanh")
    assert out.dtype == torch.float32
    ends = offs.tolist()
    ref = torch.cat([torch.nn.functional.gelu(x[e - s:e].double() @ w[i].double().t() + bias[i].double(),
                                              approximate="tanh") for i, (s, e) in enumerate(zip(sizes, ends))])
    rel = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert torch.isfinite(out).all() and rel <= 1e-5, rel


def test_k_zero_groups_get_their_bias_and_activation():
    """K = 0: each group's rows are ``activation(bias[g])`` (torch._grouped_mm gives zeros
    without a bias), for bf16 and fp8 operands, PyTorch tensors and Numba arrays."""
    from numba import cuda

    sizes, n = [5, 0, 11], 40
    offs = torch.tensor(sizes, device="cuda").cumsum(0).int()
    bias = torch.randn(3, n, device="cuda")
    want = torch.cat([torch.relu(bias[g]).expand(s, n) for g, s in enumerate(sizes)])
    x, w = torch.empty(16, 0, device="cuda", dtype=torch.bfloat16), torch.empty(3, n, 0, device="cuda",
                                                                               dtype=torch.bfloat16)
    got = grouped_matmul(x, w.transpose(1, 2), offs, bias=bias, activation="relu", out_dtype="f32")
    assert torch.equal(got, want)
    assert torch.equal(grouped_matmul(x, w.transpose(1, 2), offs), torch.zeros(16, n, device="cuda",
                                                                                dtype=torch.bfloat16))
    x8, w8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    got = grouped_matmul(x8, w8.transpose(1, 2), offs, scale_a=torch.ones(16, 0, device="cuda"),
                         scale_b=torch.ones(3, 1, 0, device="cuda"), bias=bias, activation="relu", out_dtype="f32")
    assert torch.equal(got, want)
    got = grouped_matmul(cuda.device_array((16, 0), np.float16), cuda.device_array((3, 0, n), np.float16),
                         cuda.as_cuda_array(offs), bias=cuda.as_cuda_array(bias), activation="relu", out_dtype="f32")
    assert torch.equal(torch.as_tensor(got, device="cuda"), want)
