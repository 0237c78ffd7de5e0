"""nbwgmma.torch on CPU (needs PyTorch, skipped without it): the op's fake implementation,
its autograd formula traced on meta tensors, the activation derivatives against PyTorch's
autograd in float64, and torch.compile(fullgraph=True) tracing it without a graph break.
The GPU runs are in tests/test_torch_gpu.py."""

import pytest

torch = pytest.importorskip("torch")

from nbwgmma.kit import ACTIVATIONS  # noqa: E402

nbt = pytest.importorskip("nbwgmma.torch")

META = dict(device="meta", dtype=torch.bfloat16)


def test_the_fake_implementation_gives_shape_and_type():
    a, b, bias = torch.empty(96, 64, **META), torch.empty(64, 40, **META), torch.empty(40, **META)
    y = torch.ops.nbwgmma.matmul(a, b, bias, "gelu")
    assert y.shape == (96, 40) and y.dtype == torch.bfloat16 and y.device.type == "meta"
    with pytest.raises(RuntimeError, match="inner dimensions differ"):
        torch.ops.nbwgmma.matmul(a, torch.empty(63, 40, **META), None, None)


@pytest.mark.parametrize("bias_shape", [(40,), (96, 1), None])
def test_the_backward_formula_has_the_inputs_shapes(bias_shape):
    a = torch.empty(96, 64, **META, requires_grad=True)
    b = torch.empty(64, 40, **META, requires_grad=True)
    bias = None if bias_shape is None else torch.empty(*bias_shape, **META, requires_grad=True)
    y = nbt.matmul(a, b, bias, "silu")
    y.backward(torch.empty_like(y))
    assert a.grad.shape == a.shape and b.grad.shape == b.shape
    if bias is not None:
        assert bias.grad.shape == bias.shape


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activation_derivatives_match_pytorch_autograd(name):
    f = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu,
         "sigmoid": torch.sigmoid, "gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh")}[name]
    z = torch.linspace(-6, 6, 1201, dtype=torch.float64).requires_grad_()
    dy = torch.randn(1201, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    (ref,) = torch.autograd.grad(f(z), z, dy)
    got = nbt.activation_grad(name, z.detach(), dy)
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-6)  # computed in f32


def test_compiled_mlp_traces_without_graph_breaks():
    mlp = torch.nn.Sequential(nbt.Linear(64, 128, activation="gelu_tanh", **META),
                              nbt.Linear(128, 32, bias=False, **META))
    x = torch.empty(4, 8, 64, **META)
    explained = torch._dynamo.explain(mlp)(x)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    y = torch.compile(mlp, fullgraph=True, backend="eager")(x)
    assert y.shape == (4, 8, 32)


def test_linear_refuses_an_unknown_activation():
    with pytest.raises(ValueError, match="activation must be one of"):
        nbt.Linear(8, 8, activation="tanh")
