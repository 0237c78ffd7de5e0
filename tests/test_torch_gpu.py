"""nbwgmma.torch on the GPU: torch.library's opcheck of each op, gradients against float64
PyTorch autograd within dtype tolerances (the fused matmul with C, alpha and beta; the grouped
MoE product with empty groups and rows past the last offset), the fp8 op against the library's
own call, and compiled models (an MLP of Linear layers, a mixture of experts) with no graph
break."""

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
nbt = pytest.importorskip("nbwgmma.torch")

F = torch.nn.functional
ACT = {"relu": torch.relu, "gelu": F.gelu, "silu": F.silu, "sigmoid": torch.sigmoid,
       "gelu_tanh": lambda v: F.gelu(v, approximate="tanh"), None: lambda v: v}


def _inputs(m=256, k=192, n=136, bias_shape=(136,)):
    g = torch.Generator(device="cuda").manual_seed(0)
    a = (torch.randn(m, k, device="cuda", generator=g) / k ** 0.5).bfloat16().requires_grad_()
    w = torch.randn(n, k, device="cuda", generator=g).bfloat16().requires_grad_()
    bias = None if bias_shape is None else torch.randn(*bias_shape, device="cuda", generator=g).requires_grad_()
    return a, w, bias


def test_opcheck():
    a, w, bias = _inputs()
    torch.library.opcheck(torch.ops.nbwgmma.matmul.default, (a, w.t(), bias, "gelu_tanh"))


# nbwgmma.torch's functions (PyTorch's activation where a gradient is taken) and the ops themselves
# (the activation fused, the pre-activation recomputed by the backward formula)
ENTRIES = {"function": (lambda *v: nbt.matmul(*v), lambda *v: nbt.grouped_mm(*v)),
           "op": (lambda *v: torch.ops.nbwgmma.matmul(*v), lambda *v: torch.ops.nbwgmma.grouped_mm(*v))}


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("act", sorted(ACT, key=str))
@pytest.mark.parametrize("bias_shape", [(136,), (256, 1), None])
def test_gradients_match_pytorch(act, bias_shape, entry):
    a, w, bias = _inputs(bias_shape=bias_shape)
    y = ENTRIES[entry][0](a, w.t(), bias, act)
    dy = torch.randn_like(y)
    grads = torch.autograd.grad(y, [a, w] + ([bias] if bias is not None else []), dy)
    a64, w64 = a.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    b64 = None if bias is None else bias.detach().double().requires_grad_()
    z = a64 @ w64.t() + (0 if b64 is None else b64)
    refs = torch.autograd.grad(ACT[act](z), [a64, w64] + ([b64] if b64 is not None else []), dy.double())
    for got, ref in zip(grads, refs):
        rel = float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref))
        assert rel <= 2e-2, (act, bias_shape, rel)


def test_compiled_mlp_has_no_graph_break_and_matches_eager():
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(nbt.Linear(256, 512, activation="gelu_tanh"), nbt.Linear(512, 128)).cuda().bfloat16()
    x = torch.randn(8, 64, 256, device="cuda").bfloat16()
    explained = torch._dynamo.explain(mlp)(x)
    assert explained.graph_break_count == 0, explained.break_reasons
    eager = mlp(x)
    compiled = torch.compile(mlp, fullgraph=True)(x)
    assert torch.equal(eager, compiled)
    compiled.float().sum().backward()
    assert all(p.grad is not None for p in mlp.parameters())


def _rel(got, ref):
    return float(torch.linalg.norm(got.detach().double() - ref) / torch.linalg.norm(ref))


def test_matmul_with_c_alpha_beta_matches_float64_gradients():
    a, w, bias = _inputs()
    g = torch.Generator(device="cuda").manual_seed(1)
    c = torch.randn(256, 136, device="cuda", generator=g).bfloat16().requires_grad_()
    torch.library.opcheck(torch.ops.nbwgmma.matmul.default, (a, w.t(), bias, "silu", c, 0.5, 2.0, torch.float32))
    y = nbt.matmul(a, w.t(), bias, "silu", c, 0.5, 2.0, torch.float32)
    assert y.dtype == torch.float32
    dy = torch.randn_like(y)
    grads = torch.autograd.grad(y, [a, w, bias, c], dy)
    leaves = [t.detach().double().requires_grad_() for t in (a, w, bias, c)]
    a64, w64, b64, c64 = leaves
    z = 0.5 * (a64 @ w64.t()) + 2.0 * c64 + b64
    ref = F.silu(z)
    assert _rel(y, ref.detach()) <= 1e-2
    refs = torch.autograd.grad(ref, leaves, dy.double())
    for got, want in zip(grads, refs):
        assert _rel(got, want) <= 2e-2


def _experts(b_contiguous, bias_shape, seed=0):
    """Four experts over 400 rows: groups of 64, 0, 200 and 120 rows, 16 rows past the last."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    offs = torch.tensor([64, 64, 264, 384], device="cuda", dtype=torch.int32)
    x = (torch.randn(400, 192, device="cuda", generator=g) / 192 ** 0.5).bfloat16().requires_grad_()
    w = torch.randn(4, 136, 192, device="cuda", generator=g).bfloat16()
    w = (w.transpose(1, 2).contiguous() if b_contiguous else w).requires_grad_()
    bias = None if bias_shape is None else torch.randn(*bias_shape, device="cuda", generator=g).requires_grad_()
    return x, w, bias, offs


def _weight(w, b_contiguous):
    return w if b_contiguous else w.transpose(1, 2)  # B (G, K, N)


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("act", ["gelu_tanh", None])
@pytest.mark.parametrize("bias_shape", [(4, 136), (136,), None])
@pytest.mark.parametrize("b_contiguous", [False, True])
def test_grouped_gradients_match_float64(act, bias_shape, b_contiguous, entry):
    x, w, bias, offs = _experts(b_contiguous, bias_shape)
    b = _weight(w, b_contiguous)
    y = ENTRIES[entry][1](x, b, offs, bias, act)
    dy = torch.randn_like(y, dtype=torch.float32).bfloat16()
    dy[384:] = float("nan")  # rows in no group: their gradient must not reach anything
    leaves = [x, w] + ([bias] if bias is not None else [])
    grads = torch.autograd.grad(y, leaves, dy)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    b64 = None if bias is None else bias.detach().double().requires_grad_()
    bw = _weight(w64, b_contiguous)
    outs, start = [], 0
    for gi, end in enumerate(offs.tolist()):
        z = x64[start:end] @ bw[gi]
        if b64 is not None:
            z = z + (b64[gi] if b64.dim() == 2 else b64)
        outs.append(ACT[act](z))
        start = end
    ref = torch.cat(outs)
    assert _rel(y[:384], ref.detach()) <= 1e-2
    refs = torch.autograd.grad(ref, [x64, w64] + ([b64] if b64 is not None else []), dy[:384].double())
    assert torch.equal(grads[0][384:], torch.zeros_like(grads[0][384:]))
    assert _rel(grads[0][:384], refs[0][:384]) <= 2e-2
    assert torch.equal(grads[1][1], torch.zeros_like(grads[1][1]))  # the empty group's weight
    for got, want in zip(grads[1:], refs[1:]):
        assert _rel(got, want) <= 2e-2, (act, bias_shape, b_contiguous)


def test_grouped_zero_rest_zeroes_the_rows_past_the_last_offset():
    x, w, bias, offs = _experts(False, (4, 136))
    with torch.no_grad():
        plain = nbt.grouped_mm(x, w.transpose(1, 2), offs, bias, "silu")
        zeroed = nbt.grouped_mm(x, w.transpose(1, 2), offs, bias, "silu", zero_rest=True)
    assert torch.equal(zeroed[:384], plain[:384])
    assert torch.equal(zeroed[384:], torch.zeros_like(zeroed[384:]))


def test_grouped_opcheck():
    x, w, bias, offs = _experts(False, (4, 136))
    # rows past the last offset are left unwritten unless zero_rest: two runs differ there, so the
    # checks that compare runs take the zeroed form, and the schema/fake checks the default one
    torch.library.opcheck(torch.ops.nbwgmma.grouped_mm.default,
                          (x, w.transpose(1, 2), offs, bias, "silu", None, None, None, True))
    torch.library.opcheck(torch.ops.nbwgmma.grouped_mm.default, (x, w.transpose(1, 2), offs, bias, "silu"),
                          test_utils=("test_schema", "test_faketensor"))
    dz = torch.randn(400, 136, device="cuda").bfloat16()
    torch.library.opcheck(torch.ops.nbwgmma.grouped_mm.default, (x.detach().t(), dz, offs),
                          test_utils=("test_schema", "test_faketensor"))


def test_scaled_mm_is_the_library_call_and_fills_amax():
    from nbwgmma import matmul

    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(256, 512, device="cuda", generator=g).to(torch.float8_e4m3fn)
    w = torch.randn(384, 512, device="cuda", generator=g).to(torch.float8_e4m3fn)
    sx = torch.rand(4, 256, device="cuda", generator=g).t()  # (M, K/128), M-major as torch._scaled_mm takes it
    sw = torch.rand(4, 3, device="cuda", generator=g)  # (K/128, N/128): w's (N/128, K/128) transposed
    want = matmul(x, w.t(), scale_a=sx, scale_b=sw)
    got = torch.ops.nbwgmma.scaled_mm(x, w.t(), sx, sw)
    assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    one = torch.ones(1, device="cuda")
    # opcheck's schema test multiplies the inputs, which PyTorch does not do for fp8
    torch.library.opcheck(torch.ops.nbwgmma.scaled_mm_amax.default, (x, w.t(), one, one, None, "relu",
                                                                     torch.float8_e4m3fn, 0.25),
                          test_utils=("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic"))
    y8, amax = torch.ops.nbwgmma.scaled_mm_amax(x, w.t(), one, one, None, "relu", torch.float8_e4m3fn, 0.25)
    ref = torch.relu(x.double() @ w.double().t())
    assert y8.dtype == torch.float8_e4m3fn and amax.shape == (1,)
    # the tensor cores' fp8 accumulation (no promotion for per-tensor scales) is not float64's
    assert float(amax) == pytest.approx(float(ref.abs().max()), rel=1e-3)
    assert _rel(y8.double(), (ref * 0.25).clamp(max=448.0)) <= 6e-2
    compiled = torch.compile(lambda *v: torch.ops.nbwgmma.scaled_mm_amax(*v, None, "relu", torch.float8_e4m3fn,
                                                                         0.25), fullgraph=True)
    y8c, amax_c = compiled(x, w.t(), one, one)
    assert torch.equal(y8c.view(torch.uint8), y8.view(torch.uint8)) and torch.equal(amax_c, amax)


class _Experts(torch.nn.Module):
    def __init__(self, groups, dim, hidden):
        super().__init__()
        g = torch.Generator(device="cuda").manual_seed(3)
        self.up = torch.nn.Parameter(torch.randn(groups, hidden, dim, device="cuda", generator=g).bfloat16()
                                     / dim ** 0.5)
        self.down = torch.nn.Parameter(torch.randn(groups, dim, hidden, device="cuda", generator=g).bfloat16()
                                       / hidden ** 0.5)

    def forward(self, x, offs):
        h = nbt.grouped_mm(x, self.up.transpose(1, 2), offs, None, "silu")
        return nbt.grouped_mm(h, self.down.transpose(1, 2), offs)


def test_compiled_experts_have_no_graph_break_and_match_eager():
    experts = _Experts(4, 128, 256)
    x = torch.randn(512, 128, device="cuda").bfloat16()
    offs = torch.tensor([100, 100, 356, 512], device="cuda", dtype=torch.int32)
    explained = torch._dynamo.explain(experts)(x, offs)
    assert explained.graph_break_count == 0, explained.break_reasons
    eager = experts(x, offs)
    compiled = torch.compile(experts, fullgraph=True)(x, offs)
    assert torch.equal(eager, compiled)
    compiled.float().sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in experts.parameters())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_runs_the_ops_in_the_region_s_dtype(dtype):
    g = torch.Generator(device="cuda").manual_seed(5)
    x = (torch.randn(256, 192, device="cuda", generator=g) / 192 ** 0.5).requires_grad_()
    w = torch.randn(136, 192, device="cuda", generator=g).requires_grad_()
    bias = torch.randn(136, device="cuda", generator=g).requires_grad_()
    with torch.autocast("cuda", dtype=dtype):
        y = nbt.matmul(x, w.t(), bias, "gelu_tanh")  # a gradient will be taken: the op, then PyTorch's gelu
        plain = torch.ops.nbwgmma.matmul(x, w.t(), bias)
    assert y.dtype == dtype and plain.dtype == dtype
    # the operands cast, the f32 bias kept: the same call outside the region
    assert torch.equal(plain, torch.ops.nbwgmma.matmul(x.detach().to(dtype), w.detach().t().to(dtype), bias.detach()))
    dy = torch.randn_like(y)
    grads = torch.autograd.grad(y, [x, w, bias], dy)
    assert all(t.dtype == torch.float32 for t in grads)  # through the casts to the f32 leaves
    leaves = [t.detach().double().requires_grad_() for t in (x, w, bias)]
    ref = F.gelu(leaves[0] @ leaves[1].t() + leaves[2], approximate="tanh")
    assert _rel(y, ref.detach()) <= 1e-2
    for got, want in zip(grads, torch.autograd.grad(ref, leaves, dy.double())):
        assert _rel(got, want) <= 2e-2


def test_autocast_grouped_and_fp8():
    x, w, bias, offs = _experts(False, (4, 136))
    x32, w32 = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = torch.ops.nbwgmma.grouped_mm(x32, w32.transpose(1, 2), offs, None, None, None, None, None, True)
    assert y.dtype == torch.bfloat16
    want = torch.ops.nbwgmma.grouped_mm(x.detach(), w.detach().transpose(1, 2), offs, None, None, None, None, None,
                                        True)
    assert torch.equal(y, want)  # x and w were bf16 values: the casts are exact
    y.float().sum().backward()
    assert x32.grad.dtype == torch.float32 and w32.grad.dtype == torch.float32
    assert float(x32.grad[384:].abs().max()) == 0.0  # rows in no group
    # fp8 operands are never cast: the scaled op is the same inside a region
    g = torch.Generator(device="cuda").manual_seed(6)
    a8 = torch.randn(128, 256, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b8 = torch.randn(192, 256, device="cuda", generator=g).to(torch.float8_e4m3fn)
    one = torch.ones(1, device="cuda")
    with torch.autocast("cuda", dtype=torch.float16):
        inside = torch.ops.nbwgmma.scaled_mm(a8, b8.t(), one, one)
    assert torch.equal(inside, torch.ops.nbwgmma.scaled_mm(a8, b8.t(), one, one))


def test_autocast_compiled_equals_eager():
    g = torch.Generator(device="cuda").manual_seed(7)
    x = torch.randn(128, 256, device="cuda", generator=g)
    w = torch.randn(192, 256, device="cuda", generator=g)

    def f(x, w):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            return torch.ops.nbwgmma.matmul(x, w.t(), None, "relu")

    eager = f(x, w)
    compiled = torch.compile(f, fullgraph=True)(x, w)
    assert eager.dtype == torch.bfloat16 and torch.equal(eager, compiled)
