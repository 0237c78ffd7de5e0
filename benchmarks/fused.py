"""matmul with a fused bias + activation against PyTorch's fused cuBLASLt epilogue
(``torch._addmm_activation``) and the unfused expression, bf16, in one process: every
contender in batches of 10 calls, taking turns, 15 rounds, median.

Then ``out = A @ B + 0.5 * C`` against ``torch.addmm(C, A, B, beta=0.5)``, an e4m3 output
with its scale and amax against PyTorch's fused bias + GELU followed by amax and the cast, and
e4m3 inputs to an e4m3 output (per-tensor scales) against ``torch._scaled_mm`` with an fp8
output (cuBLASLt's own fp8-out epilogue, no amax).

    python benchmarks/fused.py [MxNxK ...]
    python benchmarks/fused.py --user [MxNxK ...]   # a user function against the unfused PyTorch expression

``--user`` times a user epilogue function with three extras after a bias and gelu_tanh (bf16)
against the same expression unfused in PyTorch and the plain product.
"""
import sys

import torch
import torch.nn.functional as F

from nbwgmma import matmul
from nbwgmma.bench import side_by_side


def _gelu_problem(m, n, k):
    """bf16 x [m, k], w [n, k], bias [n], an output [m, n], and the contenders besides nbwgmma's
    fused call: cuBLASLt's fused epilogue, the unfused expression, the plain product."""
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    w = torch.randn(n, k, device="cuda", generator=g).bfloat16()
    bias = torch.randn(n, device="cuda", generator=g).bfloat16()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    plain = torch.empty_like(out)
    others = {"cuBLASLt _addmm_activation(gelu)": lambda: torch._addmm_activation(bias, x, w.t(), use_gelu=True),
              "unfused F.gelu(x @ w.T + bias)": lambda: F.gelu(x @ w.t() + bias, approximate="tanh"),
              "nbwgmma.matmul, no epilogue": lambda: matmul(x, w.t(), out=plain)}
    return x, w, bias, out, others


def _rel_error(out, ref):
    return float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))


def _reference(x, w, bias):
    return F.gelu(x.double() @ w.double().t() + bias.double(), approximate="tanh")


def bench(m, n, k, rounds=15, inner=10):
    x, w, bias, out, others = _gelu_problem(m, n, k)
    matmul(x, w.t(), bias=bias, activation="gelu_tanh", out=out)
    err = _rel_error(out, _reference(x, w, bias))
    peers = {"nbwgmma.matmul(bias, gelu_tanh)": lambda: matmul(x, w.t(), bias=bias, activation="gelu_tanh", out=out),
             **others}
    side_by_side(torch, peers, 2 * m * n * k, f"{m}x{n}x{k}", "nbwgmma fused", rounds, inner)
    print(f"{m}x{n}x{k} relative error of the fused result vs float64: {err:.2e}")


def bench_beta(m, n, k, rounds=15, inner=10):
    """out = A @ B + 0.5 * C against torch.addmm(C, A, B, beta=0.5), bf16."""
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    w = torch.randn(n, k, device="cuda", generator=g).bfloat16()
    c = torch.randn(m, n, device="cuda", generator=g).bfloat16()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    matmul(x, w.t(), c=c, beta=0.5, out=out)
    ref = x.double() @ w.double().t() + 0.5 * c.double()
    err = _rel_error(out, ref)
    del ref
    peers = {"nbwgmma.matmul(c, beta=0.5)": lambda: matmul(x, w.t(), c=c, beta=0.5, out=out),
             "cuBLAS torch.addmm(c, beta=0.5)": lambda: torch.addmm(c, x, w.t(), beta=0.5)}
    side_by_side(torch, peers, 2 * m * n * k, f"{m}x{n}x{k}", "nbwgmma", rounds, inner)
    print(f"{m}x{n}x{k} relative error of the beta result vs float64: {err:.2e}")


def bench_fp8_out(m, n, k, rounds=15, inner=10):
    """bias + gelu_tanh, e4m3 out with a scale and amax in one pass, against PyTorch's unfused
    recipe (cuBLASLt's fused bias + GELU, then amax and the scaled cast)."""
    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    w = torch.randn(n, k, device="cuda", generator=g).bfloat16()
    bias = torch.randn(n, device="cuda", generator=g).bfloat16()
    out = torch.empty(m, n, device="cuda", dtype=torch.float8_e4m3fn)
    amax = torch.zeros(1, device="cuda")

    def torch_recipe():
        y = torch._addmm_activation(bias, x, w.t(), use_gelu=True)
        return (y.float() * 0.25).to(torch.float8_e4m3fn), y.abs().max()

    peers = {"nbwgmma.matmul(e4m3 out, amax)": lambda: matmul(x, w.t(), bias=bias, activation="gelu_tanh", out=out,
                                                             scale_out=0.25, amax=amax),
             "cuBLASLt fused, then amax + cast": torch_recipe}
    side_by_side(torch, peers, 2 * m * n * k, f"{m}x{n}x{k}", "nbwgmma", rounds, inner)


def bench_fp8_to_fp8(m, n, k, rounds=15, inner=10):
    """e4m3 A and B (per-tensor scales) to an e4m3 C with an output scale: nbwgmma (without and
    with the amax) against ``torch._scaled_mm(..., out_dtype=float8_e4m3fn, scale_result=)``."""
    g = torch.Generator(device="cuda").manual_seed(3)
    e4 = torch.float8_e4m3fn
    x = (torch.randn(m, k, device="cuda", generator=g) * 4).to(e4)
    w = (torch.randn(n, k, device="cuda", generator=g) * 4).to(e4)
    sa, sb, so = 0.25, 0.125, 0.5
    ta, tb, to = (torch.tensor(v, device="cuda") for v in (sa, sb, so))
    out = torch.empty(m, n, device="cuda", dtype=e4)
    amax = torch.zeros(1, device="cuda")
    matmul(x, w.t(), scale_a=sa, scale_b=sb, out=out, scale_out=so, amax=amax)
    ref = (x.double() @ w.double().t()) * (sa * sb)
    theirs = torch._scaled_mm(x, w.t(), scale_a=ta, scale_b=tb, scale_result=to, out_dtype=e4)
    # Each result against the float64 product (the largest error over the largest |result|:
    # fp8 inputs accumulate in the tensor core's reduced precision, then one e4m3 rounding),
    # and against cuBLASLt's result (scale_result multiplying, as its D scale does).
    want = (ref * so).clamp(-448, 448)
    big = float(want.abs().max())
    err = float((out.double() - want).abs().max()) / big
    err_theirs = float((theirs.double() - want).abs().max()) / big
    same = float((out.view(torch.uint8) == theirs.view(torch.uint8)).double().mean())
    amax_err = abs(float(amax[0]) / float(ref.abs().max()) - 1)
    del ref
    peers = {"nbwgmma.matmul(e4m3 -> e4m3)": lambda: matmul(x, w.t(), scale_a=sa, scale_b=sb, out=out, scale_out=so),
             "cuBLASLt _scaled_mm(e4m3 out)": lambda: torch._scaled_mm(x, w.t(), scale_a=ta, scale_b=tb,
                                                                    scale_result=to, out_dtype=e4),
             "nbwgmma.matmul(e4m3 -> e4m3, amax)": lambda: matmul(x, w.t(), scale_a=sa, scale_b=sb, out=out,
                                                                 scale_out=so, amax=amax),
             "nbwgmma.matmul(e4m3 -> bf16)": lambda: matmul(x, w.t(), scale_a=sa, scale_b=sb, out_dtype="bf16")}
    side_by_side(torch, peers, 2 * m * n * k, f"{m}x{n}x{k}", "nbwgmma", rounds, inner)
    print(f"{m}x{n}x{k} e4m3 out: largest error over largest |result| {err:.2e} (cuBLASLt {err_theirs:.2e}), "
          f"{same:.2%} of codes equal to cuBLASLt's, amax relative error {amax_err:.1e}")


def bench_user(m, n, k, rounds=15, inner=10):
    """A user function with three extras after a bias and gelu_tanh (bf16) against the same
    expression in PyTorch (cuBLAS's addmm, then elementwise kernels) and the plain product."""
    from numba import cuda

    @cuda.jit(device=True)
    def scale_shift(v, row, col, s, shift, rowterm):
        return v * s + shift - rowterm

    x, w, bias, out, _ = _gelu_problem(m, n, k)
    g = torch.Generator(device="cuda").manual_seed(1)
    shift = torch.randn(n, device="cuda", generator=g).bfloat16()
    rowterm = torch.randn(m, 1, device="cuda", generator=g).bfloat16()
    kw = dict(bias=bias, activation="gelu_tanh", epilogue=scale_shift, epilogue_args=(0.5, shift, rowterm))
    unfused = lambda: F.gelu(torch.addmm(bias, x, w.t()), approximate="tanh") * 0.5 + shift - rowterm  # noqa: E731
    matmul(x, w.t(), out=out, **kw)
    ref = F.gelu(x.double() @ w.double().t() + bias.double(), approximate="tanh") * 0.5 + shift.double() \
        - rowterm.double()
    err = _rel_error(out, ref)
    del ref
    peers = {"nbwgmma.matmul(user function)": lambda: matmul(x, w.t(), out=out, **kw),
             "unfused PyTorch": unfused,
             "nbwgmma.matmul, no epilogue": lambda: matmul(x, w.t(), out=out)}
    side_by_side(torch, peers, 2 * m * n * k, f"{m}x{n}x{k}", "the first", rounds, inner)
    print(f"{m}x{n}x{k} relative error of the user function's result vs float64: {err:.2e}")


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__)
    if sys.argv[1:2] == ["--user"]:
        for s in sys.argv[2:] or ["1024x1024x1024", "128x4096x4096", "8192x8192x8192", "4096x14336x4096"]:
            bench_user(*(int(v) for v in s.split("x")))
        sys.exit()
    for s in sys.argv[1:] or ["8192x8192x8192", "4096x14336x4096", "16384x4096x4096"]:
        bench(*(int(v) for v in s.split("x")))
    for s in sys.argv[1:] or ["8192x8192x8192", "4096x14336x4096", "16384x4096x4096"]:
        bench_beta(*(int(v) for v in s.split("x")))
    for s in sys.argv[1:] or ["8192x8192x8192", "4096x14336x4096", "16384x4096x4096"]:
        bench_fp8_out(*(int(v) for v in s.split("x")))
    for s in sys.argv[1:] or ["8192x8192x8192", "4096x14336x4096", "16384x4096x4096"]:
        bench_fp8_to_fp8(*(int(v) for v in s.split("x")))
