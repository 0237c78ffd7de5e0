"""Block-scaled fp8 (1 x 128 activations, 128 x 128 weights, bf16 out) against cuBLASLt's
blockwise product (``torch._scaled_mm``) and nbwgmma's own per-tensor fp8 GEMM, in one process:
every contender in batches of 10 calls, taking turns, 15 rounds, median (``device_times``).
cuBLASLt refuses some shapes (N = 2112): the refusal is printed and the others still run.

``torch._scaled_mm``'s blockwise mode (PyTorch 2.9+) takes ``scale_a`` of shape (M, K/128)
with strides (1, M) ("outer-dim-major") and ``scale_b`` of shape (K/128, N/128) with strides
(1, K/128): the transpose of a row-major (N/128, K/128) weight scale. nbwgmma reads the same
tensors.

Then the accuracy table: the relative error (Frobenius norm) against float64 of the same fp8
values and scales, f32 out, at K = 7168 and 16384, for per-tensor scales accumulated by the
tensor cores over the whole K (nbwgmma's per-tensor path), per-tensor scales promoted every
128 K (the block-scaled kernel with constant scales), block scales promoted (nbwgmma) and
cuBLASLt's blockwise product.

    python benchmarks/scaled.py [MxNxK ...]
    python benchmarks/scaled.py --tiles [MxNxK ...]

``--tiles``: the default against the kernel held to whole 128 x 128 tiles (the front end's
choices of 256 x 128, 128 x 64, wide, strip and 192 x 128 tiles and of stream-K, ``frontend.scaled.tall_tiles``,
``narrow_tiles``, ``wide_tiles``, ``strip_tiles``, ``trio_tiles`` and ``stream_tiles``, answered no), in one process with cuBLASLt, outputs
compared bit for bit (stream-K sums a shared tile's parts in another order: equal to rounding).
"""
import sys

import torch

from nbwgmma import matmul
from nbwgmma.bench import side_by_side

SHAPES = ["4096x7168x7168", "4096x24576x1536", "128x7168x7168", "4096x2112x7168", "4096x7168x16384"]
E4M3 = torch.float8_e4m3fn


def cdiv(a, b):
    return -(-a // b)


def quantized(m, n, k, seed=0):
    """x [M, K] per 1 x 128 and w [N, K] per 128 x 128 (e4m3, amax scaling): (xq, sx M-major, wq, sw (NB, KB))."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g) * (torch.rand(m, 1, device="cuda", generator=g) * 4 + 0.1)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.05
    kb, nb = cdiv(k, 128), cdiv(n, 128)
    xp = torch.nn.functional.pad(x, (0, kb * 128 - k)).view(m, kb, 128)
    sx = xp.abs().amax(-1).clamp(min=1e-4) / 448.0
    xq = (xp / sx[..., None]).to(E4M3).view(m, kb * 128)[:, :k].contiguous()
    wp = torch.nn.functional.pad(w, (0, kb * 128 - k, 0, nb * 128 - n)).view(nb, 128, kb, 128)
    sw = wp.abs().amax((1, 3)).clamp(min=1e-4) / 448.0
    wq = (wp / sw[:, None, :, None]).to(E4M3).view(nb * 128, kb * 128)[:n, :k].contiguous()
    return x, w, xq, sx.float().t().contiguous().t(), wq, sw.float().contiguous()


def cublaslt(xq, sx, wq, sw, out_dtype=torch.bfloat16):
    return torch._scaled_mm(xq, wq.t(), scale_a=sx, scale_b=sw.t(), out_dtype=out_dtype)


def refusal(fn):
    """None if ``fn()`` runs, else the first line of the error it raises."""
    try:
        fn()
        torch.cuda.synchronize()
    except (RuntimeError, ValueError, NotImplementedError) as e:
        return str(e).strip().splitlines()[0][:160]
    return None


def bench(m, n, k, rounds=15, inner=10):
    _, _, xq, sx, wq, sw = quantized(m, n, k)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    plain = torch.empty_like(out)
    one = torch.ones((), device="cuda")
    peers = {"nbwgmma block-scaled (promoted)": lambda: matmul(xq, wq.t(), scale_a=sx, scale_b=sw.t(), out=out),
             "cuBLASLt _scaled_mm blockwise": lambda: cublaslt(xq, sx, wq, sw),
             "nbwgmma per-tensor fp8": lambda: matmul(xq, wq.t(), scale_a=1.0, scale_b=1.0, out=plain),
             "cuBLASLt _scaled_mm per-tensor": lambda: torch._scaled_mm(xq, wq.t(), scale_a=one, scale_b=one,
                                                                         out_dtype=torch.bfloat16)}
    for name in list(peers):
        why = refusal(peers[name])
        if why is not None:
            print(f"{m}x{n}x{k} {name:34s} refused: {why}")
            del peers[name]
    side_by_side(torch, peers, 2 * m * n * k, f"{m}x{n}x{k}", "nbwgmma block-scaled", rounds, inner)


def accuracy(m=2048, n=2048, ks=(7168, 16384)):
    """Relative errors against float64 of each product's own fp8 values and scales (f32 out)."""
    print(f"\nrelative error vs float64 of the same fp8 inputs and scales, {m}x{n}xK, f32 out")
    print(f"{'K':>6s}  {'per-tensor, fp8 accum':>22s}  {'per-tensor, promoted':>21s}  {'block, promoted':>16s}  "
          f"{'cuBLASLt blockwise':>19s}")
    for k in ks:
        x, w, xq, sx, wq, sw = quantized(m, n, k, seed=1)
        kb, nb = cdiv(k, 128), cdiv(n, 128)

        def rel(got, ref):
            return f"{float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref)):.2e}"

        # per tensor: one scale per operand
        tx, tw = float(x.abs().max()) / 448.0, float(w.abs().max()) / 448.0
        xt, wt = (x / tx).to(E4M3), (w / tw).to(E4M3)
        ref_t = (xt.double() @ wt.double().t()) * (tx * tw)
        fast = matmul(xt, wt.t(), scale_a=tx, scale_b=tw, out_dtype="f32")
        promoted = matmul(xt, wt.t(), scale_a=torch.full((m, kb), tx, device="cuda"),
                          scale_b=torch.full((nb, kb), tw, device="cuda"), out_dtype="f32")
        # per block
        a64 = xq.double() * sx.double().repeat_interleave(128, 1)[:, :k]
        b64 = wq.double() * sw.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)[:, :k]
        ref_b = a64 @ b64.t()
        ours = matmul(xq, wq.t(), scale_a=sx, scale_b=sw.t(), out_dtype="f32")
        theirs = None
        for dt in (torch.float32, torch.bfloat16):  # f32 out where cuBLASLt takes it
            if refusal(lambda: cublaslt(xq, sx, wq, sw, dt)) is None:
                theirs = f"{rel(cublaslt(xq, sx, wq, sw, dt), ref_b)}{'' if dt == torch.float32 else ' (bf16)'}"
                break
        print(f"{k:6d}  {rel(fast, ref_t):>22s}  {rel(promoted, ref_t):>21s}  {rel(ours, ref_b):>16s}  "
              f"{theirs or 'refused':>19s}")


TILE_SHAPES = SHAPES + ["1024x7168x7168", "8192x7168x7168", "16384x4096x4096", "2048x4096x7168", "4096x4096x4096",
                       "8192x2048x7168", "2048x7168x7168", "128x2112x7168", "64x2112x7168", "256x2112x7168",
                       "128x4096x4096", "1x2112x7168", "16x7168x7168"]


def tiles(m, n, k, rounds=12):
    """The default path against 128 x 128 tiles forced, and cuBLASLt, TFLOP/s and ratios."""
    from nbwgmma.bench import device_times
    from nbwgmma.frontend import scaled as front

    rules = front.tall_tiles, front.narrow_tiles, front.stream_tiles, front.wide_tiles, front.strip_tiles, \
        front.trio_tiles
    _, _, xq, sx, wq, sw = quantized(m, n, k)
    outs = [torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(2)]

    def call(tall, narrow, stream, wide, strip, trio, out):
        front.tall_tiles, front.narrow_tiles, front.stream_tiles, front.wide_tiles, front.strip_tiles, \
            front.trio_tiles = tall, narrow, stream, wide, strip, trio
        try:
            return matmul(xq, wq.t(), scale_a=sx, scale_b=sw.t(), out=out)
        finally:
            front.tall_tiles, front.narrow_tiles, front.stream_tiles, front.wide_tiles, front.strip_tiles, \
                front.trio_tiles = rules

    never = lambda *a: None  # noqa: E731
    fns = [lambda: call(*rules, outs[0]), lambda: call(never, never, never, never, never, never, outs[1])]
    lt = refusal(lambda: cublaslt(xq, sx, wq, sw)) is None
    if lt:
        fns.append(lambda: cublaslt(xq, sx, wq, sw))
    for f in fns[:2]:
        f()
    same = torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16))
    diff = float((outs[0].double() - outs[1].double()).norm() / outs[1].double().norm())
    t = device_times(torch, fns, 2, rounds)
    fl = 2 * m * n * k / 1e9
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    strip = m % 4 == 0 and rules[4](m, n, sms)
    wide = None if strip else rules[3](m, n, sms)
    trio = m % 4 == 0 and not strip and not wide and rules[5](m, n, sms)
    bm = 192 if trio else 256 if strip or (rules[0](m, n, sms) and m % 4 == 0 and not wide) else 128
    bn = wide or (64 if bm == 128 and rules[1](m, n, sms) else 128)
    tile = f"{bm} x {bn}" + (" and a strip of 256 x 64" if strip else "") \
        + (", stream-K" if not strip and rules[2](m, n, k, sms, bm, bn) else "")
    line = f"{m}x{n}x{k}: default ({tile}) {fl / t[0]:.1f}  128 x 128 {fl / t[1]:.1f}  default/128x128 {t[1] / t[0]:.3f}"
    if lt:
        line += f"  cuBLASLt {fl / t[2]:.1f}  default/cuBLASLt {t[2] / t[0]:.3f}  128x128/cuBLASLt {t[2] / t[1]:.3f}"
    print(line + f"  bit for bit {same}" + ("" if same else f" (relative difference {diff:.1e})"),
          flush=True)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__)
    args = [a for a in sys.argv[1:] if a != "--tiles"]
    if "--tiles" in sys.argv:
        for s in args or TILE_SHAPES:
            tiles(*(int(v) for v in s.split("x")))
    else:
        for s in args or SHAPES:
            bench(*(int(v) for v in s.split("x")))
        accuracy()
