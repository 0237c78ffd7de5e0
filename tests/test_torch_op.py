"""nbwgmma.torch on CPU (needs PyTorch, skipped without it): the ops' fake implementations,
their autograd formulas traced on meta tensors, the activation derivatives against PyTorch's
autograd in float64, and torch.compile(fullgraph=True) tracing them without a graph break.
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
    y = torch.ops.nbwgmma.matmul(a, b, bias, "silu")  # the op's own formula (recomputing z)
    y.backward(torch.empty_like(y))
    assert a.grad.shape == a.shape and b.grad.shape == b.shape
    if bias is not None:
        assert bias.grad.shape == bias.shape


@pytest.mark.parametrize("a_shape, b_shape, bias_shape", [((3, 96, 64), (3, 64, 40), (40,)),
                                                        ((2, 3, 96, 64), (2, 3, 64, 40), (96, 1)),
                                                        ((3, 96, 64), (64, 40), (40,)), ((3, 96, 64), (3, 64, 44), None)])
def test_batches_fake_and_differentiate(a_shape, b_shape, bias_shape):
    a = torch.empty(*a_shape, **META, requires_grad=True)
    b = torch.empty(*b_shape, **META, requires_grad=True)
    bias = None if bias_shape is None else torch.empty(*bias_shape, **META, requires_grad=True)
    y = torch.ops.nbwgmma.matmul(a, b, bias, "relu")
    assert y.shape == a_shape[:-1] + b_shape[-1:]
    y.backward(torch.empty_like(y))
    assert a.grad.shape == a.shape and b.grad.shape == b.shape
    if bias is not None:
        assert bias.grad.shape == bias.shape
    with pytest.raises(RuntimeError, match="equal batch dimensions"):
        torch.ops.nbwgmma.matmul(torch.empty(2, 8, 16, **META), torch.empty(3, 16, 8, **META), None, None)
    if len(b_shape) > 2:  # baddbmm: one C for every product, its gradient summed over the batch
        c = torch.empty(*y.shape[-2:], **META, requires_grad=True)
        z = torch.ops.nbwgmma.matmul(a, b, None, None, c, 1.0, 0.5)
        z.backward(torch.empty_like(z))
        assert c.grad.shape == c.shape


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


def test_matmul_with_c_alpha_beta_and_out_dtype_fakes_and_differentiates():
    a = torch.empty(96, 64, **META, requires_grad=True)
    b = torch.empty(64, 40, **META, requires_grad=True)
    c = torch.empty(96, 40, **META, requires_grad=True)
    y = torch.ops.nbwgmma.matmul(a, b, None, "relu", c, 0.5, 2.0, torch.float32)
    assert y.shape == (96, 40) and y.dtype == torch.float32
    y.backward(torch.empty_like(y))
    assert a.grad.shape == a.shape and b.grad.shape == b.shape and c.grad.shape == c.shape
    assert c.grad.dtype == c.dtype
    with pytest.raises(RuntimeError, match="c must have shape"):
        nbt.matmul(a, b, None, None, torch.empty(96, 41, **META))


def test_grouped_mm_fakes_each_form():
    offs = torch.empty(4, device="meta", dtype=torch.int32)
    a, w = torch.empty(400, 64, **META), torch.empty(4, 40, 64, **META)
    y = torch.ops.nbwgmma.grouped_mm(a, w.transpose(1, 2), offs, None, "silu")
    assert y.shape == (400, 40) and y.dtype == torch.bfloat16
    assert torch.ops.nbwgmma.grouped_mm(a, w.transpose(1, 2), offs, out_dtype=torch.float32).dtype == torch.float32
    masked = torch.ops.nbwgmma.grouped_mm(torch.empty(4, 32, 64, **META), w.transpose(1, 2), offs)
    assert masked.shape == (4, 32, 40)
    dw = torch.ops.nbwgmma.grouped_mm(torch.empty(36, 400, **META), torch.empty(400, 20, **META), offs)
    assert dw.shape == (4, 36, 20) and dw.stride() == (36 * 24, 24, 1)  # rows padded to 16 bytes, as on the GPU
    fp8 = torch.ops.nbwgmma.grouped_mm(torch.empty(400, 256, device="meta", dtype=torch.float8_e4m3fn),
                                       torch.empty(4, 256, 128, device="meta", dtype=torch.float8_e4m3fn), offs,
                                       scale_a=torch.empty(400, 2, device="meta"),
                                       scale_b=torch.empty(4, 1, 2, device="meta"))
    assert fp8.shape == (400, 128) and fp8.dtype == torch.bfloat16
    with pytest.raises(RuntimeError, match="B \\(G, K, N\\) expected"):
        torch.ops.nbwgmma.grouped_mm(a, torch.empty(4, 63, 40, **META), offs)


@pytest.mark.parametrize("bias_shape", [(4, 40), (40,), None])
def test_grouped_mm_backward_formula_has_the_inputs_shapes(bias_shape):
    offs = torch.empty(4, device="meta", dtype=torch.int32)
    a = torch.empty(400, 64, **META, requires_grad=True)
    w = torch.empty(4, 40, 64, **META, requires_grad=True)
    bias = None if bias_shape is None else torch.empty(*bias_shape, **META, requires_grad=True)
    y = torch.ops.nbwgmma.grouped_mm(a, w.transpose(1, 2), offs, bias, "gelu_tanh")
    y.backward(torch.empty_like(y))
    assert a.grad.shape == a.shape and w.grad.shape == w.shape
    if bias is not None:
        assert bias.grad.shape == bias.shape and bias.grad.dtype == bias.dtype


def test_grouped_mm_refuses_gradients_it_has_no_formula_for():
    offs = torch.empty(4, device="meta", dtype=torch.int32)
    a = torch.empty(4, 32, 64, **META, requires_grad=True)
    y = nbt.grouped_mm(a, torch.empty(4, 64, 40, **META), offs)
    with pytest.raises(NotImplementedError, match="MoE form"):
        y.backward(torch.empty_like(y))


def test_scaled_mm_fakes_its_outputs_and_mutates_nothing():
    a = torch.empty(96, 256, device="meta", dtype=torch.float8_e4m3fn)
    b = torch.empty(128, 256, device="meta", dtype=torch.float8_e4m3fn).t()
    sa, sb = torch.empty(96, 2, device="meta"), torch.empty(2, 1, device="meta")
    assert torch.ops.nbwgmma.scaled_mm(a, b, sa, sb).dtype == torch.bfloat16
    y, amax = torch.ops.nbwgmma.scaled_mm_amax(a, b, sa, sb, None, "relu", torch.float8_e4m3fn, 0.5)
    assert y.shape == (96, 128) and y.dtype == torch.float8_e4m3fn
    assert amax.shape == (1,) and amax.dtype == torch.float32
    for op in (torch.ops.nbwgmma.scaled_mm, torch.ops.nbwgmma.scaled_mm_amax):
        assert "!" not in str(op.default._schema), op.default._schema


class _Experts(torch.nn.Module):
    """A mixture-of-experts MLP on sorted tokens: up projection with SiLU, down projection."""

    def __init__(self, groups, dim, hidden):
        super().__init__()
        self.up = torch.nn.Parameter(torch.empty(groups, hidden, dim, **META))
        self.down = torch.nn.Parameter(torch.empty(groups, dim, hidden, **META))

    def forward(self, x, offs):
        h = nbt.grouped_mm(x, self.up.transpose(1, 2), offs, None, "silu")
        return nbt.grouped_mm(h, self.down.transpose(1, 2), offs)


def test_compiled_experts_trace_without_graph_breaks():
    experts = _Experts(4, 64, 128)
    x, offs = torch.empty(300, 64, **META), torch.empty(4, device="meta", dtype=torch.int32)
    explained = torch._dynamo.explain(experts)(x, offs)
    assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
    y = torch.compile(experts, fullgraph=True, backend="eager")(x, offs)
    assert y.shape == (300, 64)


@pytest.mark.parametrize("grad", [False, True])
def test_the_activation_is_fused_unless_a_gradient_is_taken(grad):
    from torch.fx.experimental.proxy_tensor import make_fx

    a = torch.empty(96, 64, **META, requires_grad=grad)
    b = torch.empty(64, 40, **META)
    offs = torch.empty(2, device="meta", dtype=torch.int32)
    w = torch.empty(2, 40, 64, **META)
    for f in (lambda a: nbt.matmul(a, b, None, "silu"),
              lambda a: nbt.grouped_mm(a, w.transpose(1, 2), offs, None, "silu")):
        code = make_fx(f)(a).code
        assert ("'silu'" in code) != grad and ("aten.silu" in code) == grad, code


def test_linear_refuses_an_unknown_activation():
    with pytest.raises(ValueError, match="activation must be one of"):
        nbt.Linear(8, 8, activation="tanh")


def test_autocast_rules_for_the_16_bit_ops_only():
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    assert has("nbwgmma::matmul", "AutocastCUDA") and has("nbwgmma::grouped_mm", "AutocastCUDA")
    # as torch._scaled_mm: fp8 operands are never cast
    assert not has("nbwgmma::scaled_mm", "AutocastCUDA") and not has("nbwgmma::scaled_mm_amax", "AutocastCUDA")
