"""nbwgmma as a PyTorch operator: ``torch.ops.nbwgmma.matmul`` and ``nbwgmma.torch.Linear``.

``matmul(a, b, bias=None, activation=None)`` is registered with ``torch.library`` as the
custom op ``nbwgmma::matmul``: a fake (meta) implementation gives its output's shape and
type, so ``torch.compile(fullgraph=True)`` traces it without a graph break, and an autograd
formula makes it differentiable, its gradients computed by the same GEMM::

    z = a @ b + bias,  y = activation(z)
    dz = dy * activation'(z)        (z recomputed by the GEMM without the activation)
    da = dz @ b^T,  db = a^T @ dz,  dbias = dz summed over rows (per column) or columns (per row)

:class:`Linear` is a drop-in ``torch.nn.Linear`` with an ``activation`` argument, computed by
one fused call (``x @ weight.T + bias`` and the activation in the GEMM's epilogue). Importing
this module imports PyTorch.
"""

from __future__ import annotations

import math
from typing import Optional

import torch

from .frontend.matmul import matmul as library_matmul

__all__ = ["matmul", "Linear", "activation_grad"]

_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)


@torch.library.custom_op("nbwgmma::matmul", mutates_args=())
def matmul(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor] = None,
           activation: Optional[str] = None) -> torch.Tensor:
    """``activation(a @ b + bias)`` by nbwgmma (see :func:`nbwgmma.matmul`)."""
    return library_matmul(a, b, bias=bias, activation=activation)


@matmul.register_fake
def _(a, b, bias=None, activation=None):
    torch._check(a.dim() == 2 and b.dim() == 2, lambda: "nbwgmma::matmul: a and b must be 2-D")
    torch._check(a.shape[1] == b.shape[0], lambda: f"nbwgmma::matmul: inner dimensions differ: {a.shape}, {b.shape}")
    return a.new_empty((a.shape[0], b.shape[1]))


def activation_grad(activation: Optional[str], z: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    """``dy * activation'(z)`` (in f32), for the activations of :data:`nbwgmma.kit.ACTIVATIONS`."""
    if activation is None:
        return dy
    z, dy = z.float(), dy.float()
    if activation == "relu":
        return dy * (z > 0)
    if activation == "sigmoid":
        s = torch.sigmoid(z)
        return dy * s * (1 - s)
    if activation == "silu":
        s = torch.sigmoid(z)
        return dy * s * (1 + z * (1 - s))
    if activation == "gelu":
        cdf = 0.5 * (1 + torch.erf(z * _SQRT_HALF))
        return dy * (cdf + z * torch.exp(-0.5 * z * z) / math.sqrt(2 * math.pi))
    if activation == "gelu_tanh":
        u = _SQRT_2_PI * (z + 0.044715 * z ** 3)
        t = torch.tanh(u)
        return dy * (0.5 * (1 + t) + 0.5 * z * (1 - t * t) * _SQRT_2_PI * (1 + 3 * 0.044715 * z * z))
    raise ValueError(f"nbwgmma::matmul: no derivative for activation {activation!r}")


def _setup_context(ctx, inputs, output):
    a, b, bias, activation = inputs
    ctx.activation = activation
    ctx.bias_shape = None if bias is None else tuple(bias.shape)
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.save_for_backward(a, b, bias)


def _backward(ctx, dy):
    a, b, bias = ctx.saved_tensors
    dz = dy
    if ctx.activation is not None:
        z = matmul(a, b, bias, None)  # the pre-activation values, recomputed by the GEMM
        dz = activation_grad(ctx.activation, z, dy).to(dy.dtype)
    da = matmul(dz, b.t(), None, None) if ctx.needs_input_grad[0] else None
    db = matmul(a.t(), dz, None, None) if ctx.needs_input_grad[1] else None
    dbias = None
    if bias is not None and ctx.needs_input_grad[2]:
        per_row = ctx.bias_shape == (a.shape[0], 1) and ctx.bias_shape != (1, b.shape[1])
        dbias = dz.float().sum(dim=1 if per_row else 0).reshape(ctx.bias_shape).to(ctx.bias_dtype)
    return da, db, dbias, None


matmul.register_autograd(_backward, setup_context=_setup_context)


class Linear(torch.nn.Linear):
    """``torch.nn.Linear`` computed by nbwgmma, with ``activation`` (one of ``relu``, ``gelu``,
    ``gelu_tanh``, ``silu``, ``sigmoid``, or None) fused into the GEMM's epilogue. Inputs of
    any leading shape; bf16/f16 weights and inputs (as :func:`nbwgmma.matmul`'s fused path)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: Optional[str] = None,
                 device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        from .kit import ACTIVATIONS

        if activation is not None and activation not in ACTIVATIONS:
            raise ValueError(f"Linear: activation must be one of {sorted(ACTIVATIONS)} or None; got {activation!r}")
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = matmul(x.reshape(-1, self.in_features), self.weight.t(), self.bias, self.activation)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", activation={self.activation}"
