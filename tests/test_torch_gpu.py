"""nbwgmma.torch on the GPU: torch.library's opcheck, gradients against PyTorch's within
dtype tolerances, and a compiled MLP of nbwgmma.torch.Linear layers with no graph break."""

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


@pytest.mark.parametrize("act", sorted(ACT, key=str))
@pytest.mark.parametrize("bias_shape", [(136,), (256, 1), None])
def test_gradients_match_pytorch(act, bias_shape):
    a, w, bias = _inputs(bias_shape=bias_shape)
    y = nbt.matmul(a, w.t(), bias, act)
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
