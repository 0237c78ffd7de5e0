"""Batches of products through ``nbwgmma.matmul`` on the GPU: PyTorch tensors against float64
products (random data, NaN-poisoned outputs), every layout, fp8 and tf32, a fused bias and
activation, merged leading dimensions, a 2-D B folded into M, ragged shapes. The simulator and
CPU sides: tests/sim_batched_cases.py, tests/test_batched_cpu.py."""

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from nbwgmma import matmul  # noqa: E402
from nbwgmma.errors import MatmulError  # noqa: E402


def rel(got, ref):
    return float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref))


def operands(nb, m, n, k, dtype, a_kmajor=True, b_kmajor=False, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(nb, m, k, device="cuda", generator=g) / k ** 0.5
    b = torch.randn(nb, k, n, device="cuda", generator=g)
    a = a.to(dtype) if a_kmajor else a.transpose(1, 2).contiguous().to(dtype).transpose(1, 2)
    b = b.transpose(1, 2).contiguous().to(dtype).transpose(1, 2) if b_kmajor else b.to(dtype)
    return a, b


@pytest.mark.parametrize("nb, m, n, k", [(8, 512, 384, 256), (3, 1000, 520, 328), (16, 64, 64, 64), (1, 300, 200, 100),
                                         (5, 2048, 128, 1024)])
@pytest.mark.parametrize("a_k, b_k", [(True, False), (True, True), (False, False), (False, True)],
                         ids=["KN", "KK", "MN", "MK"])
def test_bf16_batches_every_layout(nb, m, n, k, a_k, b_k):
    a, b = operands(nb, m, n, k, torch.bfloat16, a_k, b_k, seed=nb + m + n + k)
    out = torch.full((nb, m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    assert matmul(a, b, out=out) is out
    ref = a.double() @ b.double()
    assert torch.isfinite(out).all() and rel(out, ref) <= 1e-2
    fresh = matmul(a, b)
    assert fresh.shape == (nb, m, n) and torch.equal(fresh, out)


@pytest.mark.parametrize("dtype, tol", [(torch.float16, 2e-3), (torch.float32, 2e-3), (torch.float8_e4m3fn, 8e-2)])
def test_other_types(dtype, tol):
    nb, m, n, k = 4, 700, 264, 512
    a, b = operands(nb, m, n, k, torch.float32, True, True, seed=7)
    a, b = a.to(dtype), b.to(dtype)
    ref = a.double() @ b.double()
    got = matmul(a, b)
    assert got.shape == (nb, m, n) and torch.isfinite(got).all() and rel(got, ref) <= tol


def test_bias_activation_and_fp8_output_with_amax():
    nb, m, n, k = 6, 640, 384, 512
    a, b = operands(nb, m, n, k, torch.bfloat16, seed=3)
    bias = torch.randn(n, device="cuda").bfloat16()
    ref = torch.nn.functional.gelu(a.double() @ b.double() + bias.double(), approximate="tanh")
    got = matmul(a, b, bias=bias, activation="gelu_tanh")
    assert rel(got, ref) <= 1e-2
    amax = torch.zeros(1, device="cuda")
    out = torch.full((nb, m, n), float("nan"), device="cuda").to(torch.float8_e4m3fn)
    matmul(a, b, out=out, scale_out=4.0, amax=amax)
    prod = a.double() @ b.double()
    assert rel(out.double() / 4.0, prod) <= 8e-2
    assert abs(float(amax) - float(prod.abs().max())) <= 1e-2 * float(prod.abs().max())


def test_leading_dimensions_and_a_folded_2d_b():
    g = torch.Generator(device="cuda").manual_seed(11)
    q = torch.randn(2, 1024, 8, 64, device="cuda", generator=g).bfloat16().transpose(1, 2)  # (2, 8, 1024, 64)
    kt = torch.randn(2, 8, 64, 1024, device="cuda", generator=g).bfloat16()
    got = matmul(q, kt)  # (a transposed head dimension, two batch strides: q is copied K-major first)
    assert got.shape == (2, 8, 1024, 1024) and rel(got, q.double() @ kt.double()) <= 1e-2
    assert torch.equal(matmul(q.contiguous(), kt), got)
    x = torch.randn(4, 333, 512, device="cuda", generator=g).bfloat16()
    w = torch.randn(512, 320, device="cuda", generator=g).bfloat16()
    got = matmul(x, w)
    assert got.shape == (4, 333, 320) and rel(got, x.double() @ w.double()) <= 1e-2


def test_baddbmm_against_torch():
    """alpha * A @ B + beta * C with C per product, one C for every product, and C = out (in place)."""
    a, b = operands(4, 384, 256, 192, torch.bfloat16, seed=9)
    c3 = torch.randn(4, 384, 256, device="cuda").bfloat16()
    c2 = torch.randn(384, 256, device="cuda")
    prod = a.double() @ b.double()
    assert rel(matmul(a, b, c=c3, alpha=0.5, beta=2.0), 0.5 * prod + 2 * c3.double()) <= 1e-2
    assert rel(matmul(a, b, c=c2, beta=-1.0), prod - c2.double()) <= 1e-2
    assert rel(torch.baddbmm(c2.bfloat16(), a, b, beta=-1.0).double(), prod - c2.double()) <= 1e-2  # (the peer)
    acc = c3.clone()
    matmul(a, b, c=acc, out=acc)
    assert rel(acc, prod + c3.double()) <= 1e-2


def test_ragged_output_rows():
    """N = 20 bf16 (40-byte rows): the fresh output is a view of rows padded to 16 bytes."""
    a, b = operands(3, 100, 20, 72, torch.bfloat16, seed=5)
    got = matmul(a, b)
    assert got.shape == (3, 100, 20) and rel(got, a.double() @ b.double()) <= 1e-2


def test_repeated_calls_take_the_quick_path_with_new_data():
    """The second and later calls like the first skip the checks (matmul's quick path): each gets
    its own new output and reads its own operands; a bias and activation ride along."""
    for ragged in (False, True):
        n = 20 if ragged else 256
        bias = torch.randn(n, device="cuda").bfloat16()
        for seed in range(3):
            a, b = operands(4, 300, n, 128, torch.bfloat16, seed=seed)
            got = matmul(a, b, bias=bias, activation="relu")
            ref = torch.relu(a.double() @ b.double() + bias.double())
            assert got.shape == (4, 300, n) and rel(got, ref) <= 1e-2


@pytest.mark.parametrize("dtype, odt", [(torch.bfloat16, torch.bfloat16), (torch.float16, torch.float32)])
def test_an_out_tma_cannot_write_goes_into_each_products_matrix(dtype, odt):
    """torch.bmm's contiguous out of an odd width (rows not 16 bytes apart): each product into its
    matrix, a 16-bit one a row per warp through shared memory (the rows epilogue), f32 from the
    registers; a second call takes the quick path."""
    from nbwgmma.frontend.matmul import last_plan

    for seed in range(2):
        a, b = operands(12, 1000, 777, 513, dtype, seed=seed)
        out = torch.full((12, 1000, 777), float("nan"), device="cuda", dtype=odt)
        assert matmul(a, b, out=out) is out
        if seed == 0:
            assert last_plan().cfg.epilogue == ("rows" if odt == torch.bfloat16 else "direct"), last_plan().cfg
        assert torch.isfinite(out).all() and rel(out, a.double() @ b.double()) <= 1e-2


def _shifted(v, row, col, w, s):
    return v * w + s * row - 0.001 * col


def test_an_epilogue_function_over_a_batch():
    """epilogue=(value, row, col, *extras) on a batch: row and col inside each product, a vector per
    column and a number shared by the products."""
    a, b = operands(5, 1000, 520, 328, torch.bfloat16, seed=3)
    w = torch.randn(520, device="cuda")
    got = matmul(a, b, epilogue=_shifted, epilogue_args=(w, 0.01), out_dtype="f32")
    rows = torch.arange(1000, device="cuda", dtype=torch.float64)[:, None]
    cols = torch.arange(520, device="cuda", dtype=torch.float64)
    ref = (a.double() @ b.double()) * w.double() + 0.01 * rows - 0.001 * cols
    assert got.dtype == torch.float32 and rel(got, ref) <= 1e-5


def test_repeated_calls_with_out_write_each_calls_out():
    """Repeated batched calls with ``out=`` (torch.bmm's) take the quick path: each writes its
    own poisoned out; an out over B's memory on a later call is still refused."""
    pool = torch.empty(3, 4, 300, 256, device="cuda", dtype=torch.bfloat16)
    for seed in range(3):
        a, b = operands(4, 300, 256, 128, torch.bfloat16, seed=seed)
        out = pool[seed]
        out.fill_(float("nan"))
        assert matmul(a, b, out=out) is out
        assert rel(out, a.double() @ b.double()) <= 1e-2
    a, _ = operands(4, 300, 256, 128, torch.bfloat16, seed=7)
    big = torch.randn(4 * 300 * 256, device="cuda").bfloat16()
    with pytest.raises(MatmulError, match="overlaps B"):
        matmul(a, big[:4 * 128 * 256].view(4, 128, 256), out=big.view(4, 300, 256))


@pytest.mark.parametrize("form", ["2-D A", "interleaved A over 2-D B", "expanded A", "2-D A, odd K", "expanded B"])
def test_one_operand_for_every_product(form):
    """torch.matmul's broadcast of one matrix over the other's batch, read in place (or staged
    once) by every product, against float64; the output poisoned, then a fresh one."""
    from nbwgmma.frontend.matmul import last_plan

    g = torch.Generator(device="cuda").manual_seed(31)
    nb, m, n, k = 6, 1000, 520, 333 if form == "2-D A, odd K" else 328
    a = (torch.randn(m, k, device="cuda", generator=g) / k ** 0.5).bfloat16()
    b = torch.randn(nb, k, n, device="cuda", generator=g).bfloat16()
    if form == "interleaved A over 2-D B":  # (S, B, K) seen as (B, S, K)
        a = (torch.randn(m, nb, k, device="cuda", generator=g) / k ** 0.5).bfloat16().transpose(0, 1)
        b = b[0]
    elif form == "expanded A":
        a = a.expand(nb, m, k)
    elif form == "expanded B":
        a, b = a.expand(nb, m, k).contiguous(), b[0].expand(nb, k, n)
    ref = torch.matmul(a.double(), b.double())
    out = torch.full(ref.shape, float("nan"), device="cuda", dtype=torch.bfloat16)
    assert matmul(a, b, out=out) is out
    assert torch.isfinite(out).all() and rel(out, ref) <= 1e-2
    assert last_plan().cfg.broadcast == ("B" if form in ("interleaved A over 2-D B", "expanded B") else "A")
    plan = last_plan()  # every operand read in place (matrices that interleave too) but an odd K's
    assert (plan.a_path[1] is None) == ("staged" in form or "odd K" in form) and plan.b_path[1] is not None
    assert torch.equal(matmul(a, b), out)


@pytest.mark.parametrize("b_batched", [True, False, "one A"])
def test_the_torch_op_differentiates_batches(b_batched):
    """torch.ops.nbwgmma.matmul on batches: values and gradients (a, b, bias) against PyTorch's
    autograd in float64."""
    import nbwgmma.torch  # noqa: F401  (registers the op)

    g = torch.Generator(device="cuda").manual_seed(21)
    a = (torch.randn(*(() if b_batched == "one A" else (3,)), 200, 96, device="cuda", generator=g) / 10) \
        .bfloat16().requires_grad_()
    b = torch.randn(*((3,) if b_batched else ()), 96, 72, device="cuda", generator=g).bfloat16().requires_grad_()
    bias = torch.randn(72, device="cuda", generator=g).bfloat16().requires_grad_()
    y = torch.ops.nbwgmma.matmul(a, b, bias, "gelu_tanh")
    dy = torch.randn(y.shape, device="cuda", generator=g).bfloat16()
    y.backward(dy)
    a64, b64, bias64 = (t.detach().double().requires_grad_() for t in (a, b, bias))
    y64 = torch.nn.functional.gelu(a64 @ b64 + bias64, approximate="tanh")
    y64.backward(dy.double())
    assert rel(y, y64.detach()) <= 1e-2
    for got, ref in ((a.grad, a64.grad), (b.grad, b64.grad), (bias.grad, bias64.grad)):
        assert got.shape == ref.shape and rel(got, ref) <= 2e-2


def test_the_torch_op_differentiates_one_a_over_batches_of_any_gradient_strides():
    """A 2-D A over a (2, 3) batch of B, the loss through a permuted output: dy reaches the
    backward with batch strides that merge into no single stride (it is made contiguous)."""
    import nbwgmma.torch  # noqa: F401  (registers the op)

    g = torch.Generator(device="cuda").manual_seed(5)
    a = (torch.randn(64, 32, device="cuda", generator=g) / 6).bfloat16().requires_grad_()
    b = torch.randn(2, 3, 32, 48, device="cuda", generator=g).bfloat16().requires_grad_()
    w = torch.randn(3, 2, 64, 48, device="cuda", generator=g).bfloat16()
    (torch.ops.nbwgmma.matmul(a, b).permute(1, 0, 2, 3) * w).float().sum().backward()
    a64, b64 = (t.detach().double().requires_grad_() for t in (a, b))
    ((a64 @ b64).permute(1, 0, 2, 3) * w.double()).sum().backward()
    for got, ref in ((a.grad, a64.grad), (b.grad, b64.grad)):
        assert got.shape == ref.shape and rel(got, ref) <= 2e-2
