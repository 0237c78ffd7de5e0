"""GEMM step 7: a mixture-of-experts layer forward on two grouped GEMMs.

A router (given here: one expert per token and its weight) sends each token to one of E
experts; each expert is an MLP ``down(silu(up(x) + b_up))``. The tokens are sorted by expert,
so each expert's rows sit together, and ``offs`` (int32, on the device) holds the running ends
of the groups. Two grouped GEMMs then compute every expert at once, one launch each, and the
host never reads the counts:

    h = grouped_matmul(xs, w_up.transpose(1, 2), offs, bias=b_up, activation="silu")
    ys = grouped_matmul(h, w_down.transpose(1, 2), offs)

(the experts' weights stored [E, out, in], as ``nn.Linear`` keeps them; the bias and the SiLU
run in the first GEMM's epilogue). The outputs go back to the tokens' order, scaled by the
router's weights.

    python examples/gemm_7_moe.py [TOKENS [D_MODEL D_FF]]

On an H100: checks the layer against float64 per-expert products and times it against a
PyTorch loop over the experts and against ``torch._grouped_mm`` with the bias and SiLU as
separate operations. Without a GPU it prints the grouped kernel's compile report; in the
simulator (``NUMBA_ENABLE_CUDASIM=1``) it runs a small layer of integers with ReLU (exact).
That report shows a few hundred bytes of spills: scalars of the kernel's walk over the groups
(the group a tile falls in, its row range), reloaded once a tile, none in the k-loop
(``tests/test_grouped_cpu.py`` checks the loop's SASS). A spill matters where it sits in the
main loop, not by its count alone.
"""

import sys

import numpy as np
from numba import cuda, types

from nbwgmma import grouped_matmul
from nbwgmma.kernels.grouped import grouped_kernel
from nbwgmma.layout import encode_elements

EXPERTS = 8


def moe_forward(x, expert, weight, w_up, b_up, w_down, act="silu"):
    """The layer on PyTorch tensors: ``x`` [T, D] bf16, ``expert`` [T] int64, ``weight`` [T]."""
    import torch

    order = torch.argsort(expert, stable=True)  # the tokens grouped by expert
    offs = torch.bincount(expert, minlength=w_up.shape[0]).cumsum(0).to(torch.int32)
    h = grouped_matmul(x[order], w_up.transpose(1, 2), offs, bias=b_up, activation=act)
    ys = grouped_matmul(h, w_down.transpose(1, 2), offs)
    y = torch.empty_like(ys)
    y[order] = ys * weight[order, None].to(ys.dtype)
    return y


def reference(x, expert, weight, w_up, b_up, w_down):
    """float64, one expert at a time."""
    import torch

    y = torch.zeros(x.shape, dtype=torch.float64, device=x.device)
    for e in range(w_up.shape[0]):
        rows = (expert == e).nonzero()[:, 0]
        h = torch.nn.functional.silu(x[rows].double() @ w_up[e].double().t() + b_up[e].double())
        y[rows] = (h @ w_down[e].double().t()) * weight[rows, None].double()
    return y


def simulate():
    """A layer of 3 experts, 150 tokens, integer data and ReLU (exact) in Numba's simulator."""
    rng = np.random.default_rng(0)
    t, d, f, e = 150, 64, 128, 3
    x, expert = rng.integers(-1, 2, (t, d)), rng.integers(0, e, t)  # |h| <= 68: exact in bf16
    w_up, b_up = rng.integers(-1, 2, (e, f, d)), rng.integers(-4, 5, (e, f)).astype(np.float32)
    w_down = rng.integers(-1, 2, (e, d, f))
    order = np.argsort(expert, kind="stable")
    offs = np.cumsum(np.bincount(expert, minlength=e)).astype(np.int32)

    def dev(a):  # bf16 bits on the device
        return cuda.to_device(encode_elements(a.astype(np.float64), "bf16").view(np.uint16).reshape(a.shape))

    w_up_t = dev(w_up.reshape(-1, d)).reshape(e, f, d)
    w_down_t = dev(w_down.reshape(-1, f)).reshape(e, d, f)
    h = grouped_matmul(dev(x[order]), _transposed(w_up_t), cuda.to_device(offs), bias=cuda.to_device(b_up),
                       activation="relu", in_dtype="bf16")
    ys = grouped_matmul(h, _transposed(w_down_t), cuda.to_device(offs), in_dtype="bf16")
    got = (ys.copy_to_host().astype(np.uint32) << 16).view(np.float32)
    want = np.concatenate([np.maximum(x[order][s:t_] @ w_up[g].T + b_up[g], 0) @ w_down[g].T
                           for g, (s, t_) in enumerate(zip(np.concatenate([[0], offs[:-1]]), offs))])
    want = (encode_elements(want, "bf16").view(np.uint16).astype(np.uint32) << 16).view(np.float32)  # y is bf16
    err = float(np.max(np.abs(got - want)))
    print(f"simulated MoE layer, {e} experts, {t} tokens: max |y - ref| = {err:g}")
    if err != 0.0:
        raise SystemExit("mismatch")
    return err


def _transposed(w):
    """w [E, out, in] as the view [E, in, out] the grouped GEMM takes (no copy; Numba's
    device arrays take the axes as one tuple)."""
    return w.transpose((0, 2, 1))


def benchmark(tokens, d, f, repeats=15):
    import torch

    from nbwgmma.bench import side_by_side

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(tokens, d, device="cuda", generator=g).bfloat16()
    expert = torch.randint(0, EXPERTS, (tokens,), device="cuda", generator=g)
    weight = torch.rand(tokens, device="cuda", generator=g)
    w_up = (torch.randn(EXPERTS, f, d, device="cuda", generator=g) / d ** 0.5).bfloat16()
    b_up = torch.randn(EXPERTS, f, device="cuda", generator=g).bfloat16()
    w_down = (torch.randn(EXPERTS, d, f, device="cuda", generator=g) / f ** 0.5).bfloat16()
    args = (x, expert, weight, w_up, b_up, w_down)
    ref = reference(*args)
    err = float(torch.linalg.norm(moe_forward(*args).double() - ref) / torch.linalg.norm(ref))

    def torch_loop():  # the per-expert loop (reads the counts on the host)
        y = torch.empty_like(x)
        for e in range(EXPERTS):
            rows = (expert == e).nonzero()[:, 0]
            h = torch.nn.functional.silu(torch.nn.functional.linear(x[rows], w_up[e], b_up[e]))
            y[rows] = torch.nn.functional.linear(h, w_down[e]) * weight[rows, None].to(x.dtype)
        return y

    def torch_grouped():  # the same grouped products in PyTorch, bias and SiLU unfused
        order = torch.argsort(expert, stable=True)
        offs = torch.bincount(expert, minlength=EXPERTS).cumsum(0).to(torch.int32)
        counts = torch.bincount(expert, minlength=EXPERTS)
        h = torch._grouped_mm(x[order], w_up.transpose(1, 2), offs=offs)
        h = torch.nn.functional.silu(h + torch.repeat_interleave(b_up, counts, dim=0, output_size=tokens))
        ys = torch._grouped_mm(h, w_down.transpose(1, 2), offs=offs)
        y = torch.empty_like(ys)
        y[order] = ys * weight[order, None].to(ys.dtype)
        return y

    peers = {"nbwgmma, two grouped GEMMs": lambda: moe_forward(*args), "PyTorch loop over experts": torch_loop}
    if hasattr(torch, "_grouped_mm"):
        peers["torch._grouped_mm, bias + SiLU apart"] = torch_grouped
    side_by_side(torch, peers, 2 * tokens * d * f * 2, f"{tokens} tokens, {d}x{f}, {EXPERTS} experts", "nbwgmma",
                 repeats)
    print(f"relative error vs float64: {err:.2e}")
    if not err < 1e-2:
        raise SystemExit("mismatch")
    return err


#: the grouped kernel with a bias per expert and SiLU: maps of A and B, out (bf16 bits), offs,
#: n, k, rows per group (masked layout only), the bias rows and whether there is one per group,
#: then a map of A in short boxes and their rows (decoding: few tokens a group; unused here)
SIG = (types.uint64, types.uint64, types.uint16[:, ::1], types.int32[::1], types.int32, types.int32, types.int32,
       types.float32[:, ::1], types.int32, types.uint64, types.int32)


def main(tokens=16384, d=4096, f=14336):
    """Returns the relative error of the layer against float64 (0.0 where nothing ran on a GPU)."""
    from nbwgmma.demo import run_example

    return run_example("the grouped GEMM kernel (bias per expert, SiLU)", simulate,
                       lambda: (grouped_kernel("bf16", bias=True, act="silu"), SIG), benchmark, tokens, d, f)


if __name__ == "__main__":
    main(*(int(x) for x in sys.argv[1:4]))
