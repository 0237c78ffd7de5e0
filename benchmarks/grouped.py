"""grouped_matmul against torch._grouped_mm (bf16, A (sum of tokens, K), experts' weights
(G, N, K) used as w.transpose(1, 2)) and against nbwgmma's dense product of the same total
size, in one process: batches of 10 calls taking turns, 15 rounds, median.

    python benchmarks/grouped.py [GxTOKENSxNxK ...]     (default: the three shapes of the issue)
    python benchmarks/grouped.py --wgrad [GxTOKENSxNxK ...]
    python benchmarks/grouped.py --fp8 [GxTOKENSxNxK ...]
    python benchmarks/grouped.py --train [GxTOKENSxNxK ...]

``--wgrad``: the weight-gradient form, dW_g = dy_g^T @ x_g (dy (G * TOKENS, N), x (G * TOKENS,
K), both row-major; out (G, N, K)): ``grouped_matmul(dy.t(), x, offs)`` against
``torch._grouped_mm(dy.t(), x, offs=offs)`` (where PyTorch runs it) and a loop of
``torch.matmul`` per group.

``--fp8``: block-scaled e4m3 (scales per row and 128-K block for A, per 128 x 128 block of each
weight), bf16 out: ``grouped_matmul(x8, w8.transpose(1, 2), offs, scale_a=, scale_b=)`` against
nbwgmma's dense block-scaled ``matmul`` of the same total size.

``--train``: a training step of a mixture-of-experts MLP (up projection to N with SiLU, down
projection back to K; forward and the gradients of the input and both weight stacks) through
``nbwgmma.torch.grouped_mm`` against the same through ``torch._grouped_mm`` and ``F.silu``
(PyTorch's autograd formulas), and against the op ``torch.ops.nbwgmma.grouped_mm`` with SiLU
fused (its backward recomputes the up projection). FLOPs counted: the six GEMMs,
12 * tokens * N * K (the recomputation is not counted).
"""
import sys

import torch

from nbwgmma import grouped_matmul, matmul
from nbwgmma.bench import side_by_side


def bench(groups, tokens, n, k, rounds=15, inner=10):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(groups * tokens, k, device="cuda", generator=g).bfloat16()
    w = torch.randn(groups, n, k, device="cuda", generator=g).bfloat16()
    offs = torch.arange(1, groups + 1, device="cuda", dtype=torch.int32) * tokens
    out = torch.empty(groups * tokens, n, device="cuda", dtype=torch.bfloat16)
    dense_w = torch.randn(n, k, device="cuda", generator=g).bfloat16()
    dense_out = torch.empty_like(out)
    peers = {"nbwgmma.grouped_matmul": lambda: grouped_matmul(x, w.transpose(1, 2), offs, out=out),
             "torch._grouped_mm": lambda: torch._grouped_mm(x, w.transpose(1, 2), offs=offs),
             "nbwgmma.matmul, dense, same size": lambda: matmul(x, dense_w.t(), out=dense_out)}
    side_by_side(torch, peers, 2 * groups * tokens * n * k, f"{groups}x{tokens}x{n}x{k}", "grouped_matmul", rounds,
                 inner)


def bench_wgrad(groups, tokens, n, k, rounds=15, inner=10):
    g = torch.Generator(device="cuda").manual_seed(0)
    dy = torch.randn(groups * tokens, n, device="cuda", generator=g).bfloat16()
    x = torch.randn(groups * tokens, k, device="cuda", generator=g).bfloat16()
    offs = torch.arange(1, groups + 1, device="cuda", dtype=torch.int32) * tokens
    out = torch.empty(groups, n, k, device="cuda", dtype=torch.bfloat16)
    loop_out = torch.empty_like(out)

    def loop():
        for e in range(groups):
            torch.matmul(dy[e * tokens:(e + 1) * tokens].t(), x[e * tokens:(e + 1) * tokens], out=loop_out[e])

    peers = {"nbwgmma.grouped_matmul(dy.t(), x)": lambda: grouped_matmul(dy.t(), x, offs, out=out)}
    try:
        ref = torch._grouped_mm(dy.t(), x, offs=offs)
        peers["torch._grouped_mm(dy.t(), x)"] = lambda: torch._grouped_mm(dy.t(), x, offs=offs)
    except (AttributeError, RuntimeError) as e:  # no such form in this PyTorch
        print(f"torch._grouped_mm(dy.t(), x, offs=offs): {str(e).splitlines()[0]}")
        loop()
        ref = loop_out.clone()
    peers["loop of torch.matmul"] = loop
    grouped_matmul(dy.t(), x, offs, out=out)
    rel = float(torch.linalg.norm(out.float() - ref.float()) / torch.linalg.norm(ref.float()))
    print(f"{groups}x{tokens}x{n}x{k} wgrad: relative difference to the reference {rel:.2e}")
    side_by_side(torch, peers, 2 * groups * tokens * n * k, f"{groups}x{tokens}x{n}x{k} wgrad", "grouped_matmul",
                 rounds, inner)


def bench_fp8(groups, tokens, n, k, rounds=15, inner=10):
    g = torch.Generator(device="cuda").manual_seed(0)
    total, kb, nb = groups * tokens, -(-k // 128), -(-n // 128)
    x = torch.randn(total, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    w = torch.randn(groups, n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    sa = torch.rand(total, kb, device="cuda", generator=g) + 0.5
    sw = torch.rand(groups, nb, kb, device="cuda", generator=g) + 0.5
    offs = torch.arange(1, groups + 1, device="cuda", dtype=torch.int32) * tokens
    out = torch.empty(total, n, device="cuda", dtype=torch.bfloat16)
    got = grouped_matmul(x, w.transpose(1, 2), offs, scale_a=sa, scale_b=sw, out=out)
    i = groups // 2  # one group against float64
    rows = slice(i * tokens, (i + 1) * tokens)
    ref = torch.zeros(tokens, n, device="cuda", dtype=torch.float64)
    for b in range(kb):
        blk = slice(128 * b, 128 * b + 128)
        ref += (x[rows, blk].double() @ w[i][:, blk].double().t()) * sa[rows, b, None].double() \
            * sw[i, :, b].double().repeat_interleave(128)[:n]
    rel = float(torch.linalg.norm(got[rows].double() - ref) / torch.linalg.norm(ref))
    print(f"{groups}x{tokens}x{n}x{k} fp8: relative error of group {i} against float64 {rel:.2e}")
    dense_w, dense_sw = w[0], sw[0]
    dense_out = torch.empty_like(out)
    peers = {"nbwgmma.grouped_matmul, block-scaled": lambda: grouped_matmul(x, w.transpose(1, 2), offs, scale_a=sa,
                                                                           scale_b=sw, out=out),
             "nbwgmma.matmul, dense, same size": lambda: matmul(x, dense_w.t(), scale_a=sa, scale_b=dense_sw,
                                                                out=dense_out)}
    side_by_side(torch, peers, 2 * total * n * k, f"{groups}x{tokens}x{n}x{k} fp8", "grouped_matmul", rounds, inner)


def bench_train(groups, tokens, n, k, rounds=15, inner=3):
    from nbwgmma.torch import grouped_mm

    g = torch.Generator(device="cuda").manual_seed(0)
    total = groups * tokens
    x = (torch.randn(total, k, device="cuda", generator=g) / k ** 0.5).bfloat16().requires_grad_()
    w1 = torch.randn(groups, n, k, device="cuda", generator=g).bfloat16().requires_grad_()
    w2 = (torch.randn(groups, k, n, device="cuda", generator=g) / n ** 0.5).bfloat16().requires_grad_()
    dy = torch.randn(total, k, device="cuda", generator=g).bfloat16()
    offs = torch.arange(1, groups + 1, device="cuda", dtype=torch.int32) * tokens

    def ours():
        h = grouped_mm(x, w1.transpose(1, 2), offs, None, "silu")
        return torch.autograd.grad(grouped_mm(h, w2.transpose(1, 2), offs), [x, w1, w2], dy)

    def theirs():
        h = torch.nn.functional.silu(torch._grouped_mm(x, w1.transpose(1, 2), offs=offs))
        return torch.autograd.grad(torch._grouped_mm(h, w2.transpose(1, 2), offs=offs), [x, w1, w2], dy)

    for name, a, b in zip(("dx", "dw1", "dw2"), ours(), theirs()):
        rel = float(torch.linalg.norm(a.float() - b.float()) / torch.linalg.norm(b.float()))
        print(f"{groups}x{tokens}x{n}x{k} train: {name} relative difference to PyTorch's {rel:.2e}")
    def fused():  # the op itself: SiLU fused, the up projection recomputed for its derivative
        h = torch.ops.nbwgmma.grouped_mm(x, w1.transpose(1, 2), offs, None, "silu")
        return torch.autograd.grad(torch.ops.nbwgmma.grouped_mm(h, w2.transpose(1, 2), offs), [x, w1, w2], dy)

    peers = {"nbwgmma.torch.grouped_mm step": ours, "torch._grouped_mm step": theirs,
             "torch.ops.nbwgmma.grouped_mm step": fused}
    side_by_side(torch, peers, 12 * total * n * k, f"{groups}x{tokens}x{n}x{k} train", "nbwgmma", rounds, inner)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__)
    args = sys.argv[1:]
    if args[:1] == ["--fp8"]:
        for s in args[1:] or ["8x4096x4096x7168", "32x256x4096x7168", "4x8192x7168x2048"]:
            bench_fp8(*(int(v) for v in s.split("x")))
    elif args[:1] == ["--train"]:
        for s in args[1:] or ["8x4096x4096x7168", "32x256x4096x7168", "4x8192x7168x2048"]:
            bench_train(*(int(v) for v in s.split("x")))
    elif args[:1] == ["--wgrad"]:
        for s in args[1:] or ["8x4096x4096x7168", "32x256x4096x7168"]:
            bench_wgrad(*(int(v) for v in s.split("x")))
    else:
        for s in args or ["8x4096x4096x7168", "32x256x4096x7168", "4x8192x7168x2048"]:
            bench(*(int(v) for v in s.split("x")))
