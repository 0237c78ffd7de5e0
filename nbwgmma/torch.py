"""nbwgmma as PyTorch operators: ``torch.ops.nbwgmma.matmul``, ``.grouped_mm``, ``.scaled_mm``,
``.scaled_mm_amax``, and ``nbwgmma.torch.Linear``.

Each is a ``torch.library`` custom op with a fake (meta) implementation that gives its output's
shape and type, so ``torch.compile(fullgraph=True)`` traces it without a graph break; the first
two carry autograd formulas whose gradients are computed by the same GEMMs. ``out_dtype``
takes a PyTorch dtype.

Training: the formulas need the pre-activation ``z``, which a fused activation does not keep,
so the ops recompute it (one more GEMM). The functions :func:`matmul` and :func:`grouped_mm` of
this module (and :class:`Linear`) avoid that: where autograd will take a gradient (grad mode on,
an input requiring one) they call the op without the activation and apply PyTorch's own
(``torch.nn.functional.silu`` ...), which saves ``z`` as it does for any layer: one elementwise
pass instead of a GEMM, and ``act(round(z))`` rather than the fused ``round(act(z))``; with no
gradient they fuse it.

``matmul(a, b, bias=None, activation=None, c=None, alpha=1.0, beta=None, out_dtype=None)``,
:func:`nbwgmma.matmul`'s fused product (``beta`` 1 where ``c`` is given)::

    z = alpha * a @ b + beta * c + bias,  y = activation(z)
    dz = dy * activation'(z)        (z recomputed by the GEMM without the activation)
    da = alpha * dz @ b^T,  db = alpha * a^T @ dz,  dc = beta * dz,
    dbias = dz summed over rows (per column) or columns (per row)

``a`` and ``b`` may be batches, ``(batch..., M, K) @ (batch..., K, N)``, ``(batch..., M, K) @
(K, N)`` or ``(M, K) @ (batch..., K, N)`` (:mod:`nbwgmma.frontend.batched`): the same formulas
per product (a 2-D operand's gradient summed over the batch: one product over all the products'
rows or columns), a bias's over the batch too.

``grouped_mm(a, b, offs, bias=None, activation=None, out_dtype=None, scale_a=None,
scale_b=None, zero_rest=False)``, :func:`nbwgmma.grouped_matmul` (``torch._grouped_mm``'s
meaning: its MoE form with A (total, K) and B (G, K, N), the masked form with a 3-D A, the
K-grouped form with a 2-D B; block-scaled fp8 with scales; ``zero_rest``: the MoE form's rows
past the last offset zero, not left unwritten). Gradients for the MoE form of 16-bit inputs, the
product of each group ``g`` (rows ``s:e`` of A)::

    dz = dy * activation'(z)
    da[s:e] = dz[s:e] @ b[g]^T          (the grouped GEMM, B's transpose)
    db[g] = a[s:e]^T @ dz[s:e]          (the K-grouped GEMM over the same offs)
    dbias[g] = dz[s:e] summed over rows (a bias of shape (N,): summed over the groups too)

Rows of A past the last offset take part in no group: their gradient is zero. The host never
reads ``offs``, in the backward pass either.

``scaled_mm(a, b, scale_a, scale_b, bias=None, activation=None, out_dtype=None,
scale_out=None)``: fp8 ``a @ b`` with per-tensor, rowwise or block scales in
``torch._scaled_mm``'s layouts (:mod:`nbwgmma.frontend.scaled`), an fp8 output scaled by
``scale_out`` (with per-tensor scales so far); ``scaled_mm_amax`` (same arguments) also
returns the results' largest magnitude before the scale, a new one-element f32 tensor from
the same pass (the fp8 training recipe's amax, returned rather than mutated, as
``torch._scaled_mm`` once did). No gradients, as ``torch._scaled_mm`` has none.

:class:`Linear` is a drop-in ``torch.nn.Linear`` with an ``activation`` argument, computed by
one fused call (``x @ weight.T + bias`` and the activation in the GEMM's epilogue). Importing
this module imports PyTorch.

Autocast: inside ``torch.autocast("cuda", dtype=...)`` the ``matmul`` and ``grouped_mm`` ops
take their operands in the region's dtype, as ``torch.mm`` / ``torch.addmm`` do: ``a``, ``b``
and ``c`` of f32, f16 or bf16 are cast to it (fp8 operands, scales and ``offs`` never are), the
op runs with autocast off, and gradients flow back through the casts to the f32 leaves. A bias
keeps its own dtype (an f32 bias is added to the f32 accumulator before rounding, where
``addmm`` would round it first). The ``scaled_mm`` ops, like ``torch._scaled_mm``, have no
autocast rule.
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import torch

from .errors import MatmulError
from .frontend.args import type_name
from .frontend.grouped import grouped_matmul as library_grouped
from .frontend.matmul import matmul as library_matmul

__all__ = ["matmul", "grouped_mm", "scaled_mm", "scaled_mm_amax", "Linear", "activation_grad"]

_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_PI = math.sqrt(2.0 / math.pi)
_FP8 = (torch.float8_e4m3fn, torch.float8_e5m2)


_TORCH_ACTIVATIONS = {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu,
                      "sigmoid": torch.sigmoid,
                      "gelu_tanh": functools.partial(torch.nn.functional.gelu, approximate="tanh")}


def _training(*tensors) -> bool:
    """Whether autograd will take a gradient through a call on ``tensors``."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _out_type(a, out_dtype):
    """An op's output dtype: ``out_dtype``, else the input's (bf16 for fp8 inputs)."""
    return out_dtype or (torch.bfloat16 if a.dtype in _FP8 else a.dtype)


def _padded(shape, ref, dtype, zero=False):
    """A new (..., N) tensor whose rows are 16 bytes apart (TMA's rule: the library's own outputs
    are laid out so), as a view of its first N columns."""
    n, es = shape[-1], dtype.itemsize
    pad = -(-n * es // 16) * 16 // es
    full = (ref.new_zeros if zero else ref.new_empty)((*shape[:-1], pad), dtype=dtype)
    return full[..., :n] if pad != n else full


def _name(dtype: Optional[torch.dtype]) -> Optional[str]:
    """The library's name of an output dtype (None stays None)."""
    return None if dtype is None else type_name(dtype)


@torch.library.custom_op("nbwgmma::matmul", mutates_args=())
def _matmul_op(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor] = None,
           activation: Optional[str] = None, c: Optional[torch.Tensor] = None, alpha: float = 1.0,
           beta: Optional[float] = None, out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``activation(alpha * a @ b + beta * c + bias)`` by nbwgmma (see :func:`nbwgmma.matmul`)."""
    return library_matmul(a, b, bias=bias, activation=activation, c=c, alpha=alpha, beta=beta,
                          out_dtype=_name(out_dtype))


def _rows_continue(a: torch.Tensor) -> bool:
    """Whether a batch of A's matrices follow one another row after row (its leading dimensions
    one stride, that of M rows), so that over a 2-D B it is one product of all its rows: the
    front end's rule (``nbwgmma.frontend.batched``), in comparisons that keep a symbolic batch
    size symbolic."""
    m = a.shape[-2]
    expected = a.stride(-2) * m if m != 1 else None  # (matrices of one row continue at any single stride)
    for d, st in reversed(list(zip(a.shape[:-2], a.stride()[:-2]))):
        if d == 1:
            continue
        if expected is not None and st != expected:
            return False
        expected = st * d
    return True


@_matmul_op.register_fake
def _(a, b, bias=None, activation=None, c=None, alpha=1.0, beta=None, out_dtype=None):
    torch._check(a.dim() >= 2 and b.dim() >= 2 and (a.dim() == 2 or b.dim() == 2 or a.shape[:-2] == b.shape[:-2]),
                 lambda: f"nbwgmma::matmul: a and b must be 2-D, or batches (batch..., rows, columns) of equal batch "
                         f"dimensions (or one of them 2-D); got {tuple(a.shape)} and {tuple(b.shape)}")
    torch._check(a.shape[-1] == b.shape[-2],
                 lambda: f"nbwgmma::matmul: inner dimensions differ: {a.shape}, {b.shape}")
    lead = a.shape[:-2] if a.dim() > 2 else b.shape[:-2]
    shape = (*lead, a.shape[-2], b.shape[-1])
    one = math.prod(lead) == 1
    # a batch of products (else one product: a batch of one, or A's rows folded over a 2-D B)
    batch = bool(lead) and not one and not (b.dim() == 2 and _rows_continue(a))
    if c is not None:  # (one C for every product of a batch, or of a batch of one)
        torch._check(c.shape == shape or ((batch or (len(lead) > 0 and one)) and c.shape == shape[-2:]),
                     lambda: f"nbwgmma::matmul: c must have shape {shape}; got {tuple(c.shape)}")
    if batch:  # a batch's fresh output: rows 16 bytes apart
        return _padded(shape, a, _out_type(a, out_dtype))
    return a.new_empty(shape, dtype=_out_type(a, out_dtype))


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
    raise MatmulError(f"nbwgmma: no derivative for activation {activation!r}")


def _setup_matmul(ctx, inputs, output):
    a, b, bias, activation, c, alpha, beta, out_dtype = inputs
    ctx.activation, ctx.alpha, ctx.out_dtype = activation, alpha, out_dtype
    ctx.beta = None if c is None else (1.0 if beta is None else beta)
    ctx.bias_shape = None if bias is None else tuple(bias.shape)
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.save_for_backward(a, b, bias, c)


def _matmul_backward(ctx, dy):
    a, b, bias, c = ctx.saved_tensors
    dz = dy
    if ctx.activation is not None:  # the pre-activation values, recomputed by the GEMM
        z = _matmul_op(a, b, bias, None, c, ctx.alpha, ctx.beta, ctx.out_dtype)
        dz = activation_grad(ctx.activation, z, dy)
    dzi = dz.to(a.dtype)
    if a.dim() > 2 or b.dim() > 2:  # a batch: its matrices one after the other (its gradients' products fold
        dzi = dzi.contiguous()       # or batch, whatever strides autograd hands dy)
    da = None
    if ctx.needs_input_grad[0]:
        if a.dim() == 2 and b.dim() > 2:  # one A for every product: dz_i @ b_i^T summed, one product over (i, N)
            m, k = a.shape
            da = _matmul_op(dzi.reshape(-1, m, dzi.shape[-1]).transpose(0, 1).reshape(m, -1),
                            b.reshape(-1, k, b.shape[-1]).transpose(1, 2).reshape(-1, k), None, None, None, ctx.alpha)
        else:
            da = _matmul_op(dzi, b.transpose(-2, -1), None, None, None, ctx.alpha)
    db = None
    if ctx.needs_input_grad[1]:
        if a.dim() > 2 and b.dim() == 2:  # a batch times one B: one product of all the rows
            db = _matmul_op(a.reshape(-1, a.shape[-1]).t(), dzi.reshape(-1, dzi.shape[-1]), None, None, None,
                            ctx.alpha)
        else:
            db = _matmul_op(a.transpose(-2, -1), dzi, None, None, None, ctx.alpha)
    dbias = dc = None
    if bias is not None and ctx.needs_input_grad[2]:
        per_row = ctx.bias_shape == (a.shape[-2], 1) and ctx.bias_shape != (1, b.shape[-1])
        dzf = dz.float().reshape(-1, *dz.shape[-2:])  # (batch, M, N): summed over the batch too
        dbias = dzf.sum(dim=(0, 2) if per_row else (0, 1)).reshape(ctx.bias_shape).to(ctx.bias_dtype)
    if c is not None and ctx.needs_input_grad[4]:
        dcf = dz.float() * ctx.beta
        if c.dim() < dcf.dim():  # one C added to every product of a batch
            dcf = dcf.reshape(-1, *c.shape).sum(0)
        dc = dcf.to(c.dtype)
    return da, db, dbias, None, dc, None, None, None


_matmul_op.register_autograd(_matmul_backward, setup_context=_setup_matmul)

#: The library of this module's autocast rules (kept alive with the module).
_AUTOCAST_LIB = torch.library.Library("nbwgmma", "FRAGMENT")
_AUTOCAST_KEYS = (torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
                  | torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCUDA))
_AUTOCAST_CASTS = (torch.float32, torch.float16, torch.bfloat16)


def _autocast_rule(op, name, positions):
    """Run ``op`` in a CUDA autocast region with its arguments at ``positions`` in the region's
    dtype where they are f32/f16/bf16 CUDA tensors (see the module's text)."""

    def kernel(_keyset, *args):
        dtype = torch.get_autocast_dtype("cuda")
        args = list(args)
        fp8 = any(isinstance(x, torch.Tensor) and x.dtype in _FP8 for x in args[:2])  # (then nothing is cast)
        for i in () if fp8 else (p for p in positions if p < len(args)):
            t = args[i]
            if isinstance(t, torch.Tensor) and t.is_cuda and t.dtype in _AUTOCAST_CASTS and t.dtype != dtype:
                args[i] = t.to(dtype)
        with torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_KEYS):
            return op(*args)

    _AUTOCAST_LIB.impl(name, kernel, "AutocastCUDA", with_keyset=True)


_autocast_rule(_matmul_op, "matmul", (0, 1, 4))


def matmul(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor] = None, activation: Optional[str] = None,
           c: Optional[torch.Tensor] = None, alpha: float = 1.0, beta: Optional[float] = None,
           out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """``torch.ops.nbwgmma.matmul``, with the activation fused where no gradient is taken; where
    one is (see the module's text), the op's pre-activation output and PyTorch's activation."""
    if activation in _TORCH_ACTIVATIONS and _training(a, b, bias, c):
        return _TORCH_ACTIVATIONS[activation](_matmul_op(a, b, bias, None, c, alpha, beta, out_dtype))
    return _matmul_op(a, b, bias, activation, c, alpha, beta, out_dtype)


@torch.library.custom_op("nbwgmma::grouped_mm", mutates_args=())
def _grouped_op(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, bias: Optional[torch.Tensor] = None,
               activation: Optional[str] = None, out_dtype: Optional[torch.dtype] = None,
               scale_a: Optional[torch.Tensor] = None, scale_b: Optional[torch.Tensor] = None,
               zero_rest: bool = False) -> torch.Tensor:
    """One product per group of rows by nbwgmma (see :func:`nbwgmma.grouped_matmul`); with
    ``zero_rest`` the rows past the last offset (the MoE form) are zero, else left unwritten."""
    out = None
    if zero_rest and a.dim() == 2 and b.dim() == 3:  # a memset: a write where a masked copy reads and writes
        odt = _out_type(a, out_dtype)
        out = _padded((a.shape[0], b.shape[2]), a, odt, zero=True)
    return library_grouped(a, b, offs, bias=bias, activation=activation, out_dtype=_name(out_dtype),
                           scale_a=scale_a, scale_b=scale_b, out=out)


@_grouped_op.register_fake
def _(a, b, offs, bias=None, activation=None, out_dtype=None, scale_a=None, scale_b=None, zero_rest=False):
    odt = _out_type(a, out_dtype)
    torch._check(offs.dim() == 1, lambda: "nbwgmma::grouped_mm: offs must be 1-D")
    if a.dim() == 2 and b.dim() == 2:  # K-grouped: (G, M, N), rows padded to 16 bytes as the library pads them
        torch._check(a.shape[1] == b.shape[0],
                     lambda: f"nbwgmma::grouped_mm: A (M, total) and B (total, N) differ: {a.shape}, {b.shape}")
        return _padded((offs.shape[0], a.shape[0], b.shape[1]), a, odt)
    torch._check(b.dim() == 3 and a.dim() in (2, 3) and a.shape[-1] == b.shape[1],
                 lambda: f"nbwgmma::grouped_mm: A (total, K) or (G, T, K) and B (G, K, N) expected; got {a.shape}, "
                         f"{b.shape}")
    if a.dtype in _FP8:  # the block-scaled kernel's output is unpadded
        return a.new_empty((*a.shape[:-1], b.shape[2]), dtype=odt)
    return _padded((*a.shape[:-1], b.shape[2]), a, odt)  # (rows 16 bytes apart, as the library allocates them)


def _setup_grouped(ctx, inputs, output):
    a, b, offs, bias, activation, out_dtype, scale_a, scale_b, zero_rest = inputs
    ctx.activation, ctx.out_dtype = activation, out_dtype
    ctx.moe = a.dim() == 2 and b.dim() == 3 and a.dtype not in _FP8 and scale_a is None
    ctx.save_for_backward(a, b, offs, bias)


def _grouped_backward(ctx, dy):
    a, b, offs, bias = ctx.saved_tensors
    if not ctx.moe:
        raise NotImplementedError("nbwgmma::grouped_mm: gradients are computed for the MoE form (a 2-D A, a 3-D B) "
                                  "of bf16/f16 inputs; not for the masked, K-grouped or fp8 forms")
    dz = dy
    if ctx.activation is not None:
        z = _grouped_op(a, b, offs, bias, None, ctx.out_dtype)
        dz = activation_grad(ctx.activation, z, dy)
    dzi = dz.to(a.dtype)
    if dzi.stride(-1) != 1 or dzi.stride(0) < dzi.shape[1] or (dzi.stride(0) * dzi.element_size()) % 16:
        # A of dx's product: rows of their own, 16 bytes apart (an expanded or odd-width dy copied)
        rows = _padded(dz.shape, dz, a.dtype)
        rows.copy_(dzi)
        dzi = rows
    da = db = dbias = None
    if ctx.needs_input_grad[0]:  # rows in no group: zero
        da = _grouped_op(dzi, b.transpose(1, 2), offs, None, None, None, None, None, True)
    if ctx.needs_input_grad[1]:
        db = _grouped_op(a.t(), dzi, offs)
    if bias is not None and ctx.needs_input_grad[3]:
        total, groups = a.shape[0], offs.shape[0]
        rows = torch.arange(total, device=a.device, dtype=offs.dtype)
        group = torch.searchsorted(offs, rows, right=True)  # a row's group; `groups` past the last offset
        dzf = dz.float()
        sums = dzf.new_zeros((groups + 1, dzf.shape[1])).index_add_(0, group, dzf)[:groups]
        dbias = (sums if bias.dim() == 2 else sums.sum(0)).to(bias.dtype)
    return da, db, None, dbias, None, None, None, None, None


_grouped_op.register_autograd(_grouped_backward, setup_context=_setup_grouped)
_autocast_rule(_grouped_op, "grouped_mm", (0, 1))


def grouped_mm(a: torch.Tensor, b: torch.Tensor, offs: torch.Tensor, bias: Optional[torch.Tensor] = None,
               activation: Optional[str] = None, out_dtype: Optional[torch.dtype] = None,
               scale_a: Optional[torch.Tensor] = None, scale_b: Optional[torch.Tensor] = None,
               zero_rest: bool = False) -> torch.Tensor:
    """``torch.ops.nbwgmma.grouped_mm``, with the activation fused where no gradient is taken;
    where one is (see the module's text), the op's pre-activation output and PyTorch's activation
    (which then also maps ``zero_rest``'s zero rows: ``sigmoid`` makes them 0.5)."""
    if activation in _TORCH_ACTIVATIONS and _training(a, b, bias):
        z = _grouped_op(a, b, offs, bias, None, out_dtype, scale_a, scale_b, zero_rest)
        return _TORCH_ACTIVATIONS[activation](z)
    return _grouped_op(a, b, offs, bias, activation, out_dtype, scale_a, scale_b, zero_rest)


def _scaled(a, b, scale_a, scale_b, bias, activation, out_dtype, scale_out, amax):
    return library_matmul(a, b, scale_a=scale_a, scale_b=scale_b, bias=bias, activation=activation,
                          out_dtype=_name(out_dtype), scale_out=scale_out, amax=amax)


def _scaled_fake(a, b, out_dtype):
    torch._check(a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0],
                 lambda: f"nbwgmma::scaled_mm: A (M, K) and B (K, N) expected; got {a.shape}, {b.shape}")
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype or torch.bfloat16)


@torch.library.custom_op("nbwgmma::scaled_mm", mutates_args=())
def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              bias: Optional[torch.Tensor] = None, activation: Optional[str] = None,
              out_dtype: Optional[torch.dtype] = None, scale_out: Optional[float] = None) -> torch.Tensor:
    """fp8 ``activation(sa * a @ b * sb + bias)`` (times ``scale_out`` into an fp8 output) by
    nbwgmma (see :func:`nbwgmma.matmul`)."""
    return _scaled(a, b, scale_a, scale_b, bias, activation, out_dtype, scale_out, None)


@scaled_mm.register_fake
def _(a, b, scale_a, scale_b, bias=None, activation=None, out_dtype=None, scale_out=None):
    return _scaled_fake(a, b, out_dtype)


@torch.library.custom_op("nbwgmma::scaled_mm_amax", mutates_args=())
def scaled_mm_amax(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                   bias: Optional[torch.Tensor] = None, activation: Optional[str] = None,
                   out_dtype: Optional[torch.dtype] = None,
                   scale_out: Optional[float] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`scaled_mm` and the largest magnitude of its results before ``scale_out`` (a new
    one-element f32 tensor), computed in the same pass."""
    amax = torch.zeros(1, device=a.device, dtype=torch.float32)
    return _scaled(a, b, scale_a, scale_b, bias, activation, out_dtype, scale_out, amax), amax


@scaled_mm_amax.register_fake
def _(a, b, scale_a, scale_b, bias=None, activation=None, out_dtype=None, scale_out=None):
    return _scaled_fake(a, b, out_dtype), a.new_empty((1,), dtype=torch.float32)


class Linear(torch.nn.Linear):
    """``torch.nn.Linear`` computed by nbwgmma, with ``activation`` (one of ``relu``, ``gelu``,
    ``gelu_tanh``, ``silu``, ``sigmoid``, or None) fused into the GEMM's epilogue. Inputs of
    any leading shape; bf16/f16 weights and inputs (as :func:`nbwgmma.matmul`'s fused path)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, activation: Optional[str] = None,
                 device=None, dtype=None):
        super().__init__(in_features, out_features, bias=bias, device=device, dtype=dtype)
        from .kit import ACTIVATIONS

        if activation is not None and (not isinstance(activation, str) or activation not in ACTIVATIONS):
            raise MatmulError(f"Linear: activation must be one of {sorted(ACTIVATIONS)} or None; got {activation!r}")
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        y = matmul(x.reshape(-1, self.in_features), self.weight.t(), self.bias, self.activation)
        return y.reshape(*lead, self.out_features)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", activation={self.activation}"
