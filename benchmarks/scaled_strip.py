"""Block-scaled fp8 products whose N leaves a strip of at most 64 columns past its last whole
128-column block (N = 2112 = 16 x 128 + 64, a DeepSeek-V3 projection): the whole product
against its two parts, the whole 128-column blocks and the strip, each part as one call.

At 4096 x 2112 x 7168 whole 128 x 128 tiles make 544 tiles, 5 rounds on 132 SMs with 16 tiles
in the fifth, while the 2048 columns alone are 512 tiles in 4. The strip is timed as the front
end runs it (32 tiles of 128 x 64, each the whole K), and forced to stream-K over 128 x 64 and
over 128 x 128 tiles (every SM sharing its k-blocks); then the sum of the 2048 columns' time and
each strip's, against the whole product and nbwgmma's per-tensor fp8 product (issue: block-scaled
at least 0.9x per-tensor at 4096 x 2112 x 7168). Every variant is captured into a CUDA graph of
10 calls and replayed (no host time in the numbers), median of 15 replays; each split's output is
compared with the whole product's; the whole product is also timed forced to stream-K over
both tile sizes (stream-K sums a tile's parts in another order: equal to
rounding). "whole" is the front end's default: since the strip kernel (``ScaledConfig(strip=True)``,
256 x 128 tiles and the strip in 256 x 64 tiles two a unit, one launch) it is that kernel where
``frontend.scaled.strip_tiles`` takes it; the forced variants hold it off.

    python benchmarks/scaled_strip.py [MxNxK ...]
"""
import sys

import torch

from nbwgmma import matmul
from nbwgmma.frontend import scaled as front
from nbwgmma.frontend.matmul import SCALED_QUICK

from scaled import quantized  # (benchmarks/scaled.py, beside this script)

SHAPES = ["4096x2112x7168", "8192x2112x7168", "2048x2112x7168", "4096x576x7168"]
CHOICES = (front.stream_tiles, front.narrow_tiles, front.wide_tiles, front.strip_tiles, front.trio_tiles)


def choose(stream: bool, narrow: bool):
    """The front end's tile choice held to stream-K or not, 128 x 64 tiles or 128 x 128, never
    wide, strip or 192-row ones (the quick path forgotten, so the next call takes it)."""
    front.stream_tiles = (lambda *a, **kw: True) if stream else CHOICES[0]
    front.narrow_tiles = (lambda *a, **kw: True) if narrow else (lambda *a, **kw: False)
    front.wide_tiles = lambda *a, **kw: None
    front.strip_tiles = lambda *a, **kw: False
    front.trio_tiles = lambda *a, **kw: False
    SCALED_QUICK.clear()


def restore():
    front.stream_tiles, front.narrow_tiles, front.wide_tiles, front.strip_tiles, front.trio_tiles = CHOICES
    SCALED_QUICK.clear()


def graph_ms(fn, reps=10, rounds=15):
    """Median milliseconds of one call of ``fn``, from replays of a graph of ``reps`` calls."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # (a warm-up off the capture, as PyTorch's recipe)
        fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    times = []
    for _ in range(rounds):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1) / reps)
    return sorted(times)[rounds // 2]


def probe(m, n, k):
    _, _, xq, sx, wq, sw = quantized(m, n, k)
    nm = n // 128 * 128
    if nm == n or n - nm > 64:
        print(f"{m}x{n}x{k}: N leaves no strip of at most 64 columns; skipped")
        return
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    plain = torch.empty_like(out)
    restore()
    matmul(xq, wq.t(), scale_a=sx, scale_b=sw.t(), out=out)
    torch.cuda.synchronize()
    ref = out.double()
    ms = {"whole": graph_ms(lambda: matmul(xq, wq.t(), scale_a=sx, scale_b=sw.t(), out=out)),
          "per-tensor fp8": graph_ms(lambda: matmul(xq, wq.t(), scale_a=1.0, scale_b=1.0, out=plain)),
          "whole 128-column blocks": graph_ms(lambda: matmul(xq, wq[:nm].t(), scale_a=sx,
                                                             scale_b=sw[:nm // 128].t(), out=out[:, :nm]))}
    for name, held in {"whole, stream-K 128 x 64": (True, True),
                       "whole, stream-K 128 x 128": (True, False)}.items():
        choose(*held)
        out.fill_(float("nan"))
        matmul(xq, wq.t(), scale_a=sx, scale_b=sw.t(), out=out)
        torch.cuda.synchronize()
        err = float((out.double() - ref).abs().max() / ref.abs().max())
        ms[name] = graph_ms(lambda: matmul(xq, wq.t(), scale_a=sx, scale_b=sw.t(), out=out))
        print(f"{m}x{n}x{k} {name}: max |stream-K - whole| / max |whole| = {err:.2e}")
    restore()
    strips = {"strip, the front end's": None, "strip, stream-K 128 x 64": (True, True),
              "strip, stream-K 128 x 128": (True, False)}
    for name, held in strips.items():

        def strip():
            matmul(xq, wq[nm:].t(), scale_a=sx, scale_b=sw[nm // 128:].t(), out=out[:, nm:])
        out.fill_(float("nan"))
        restore()
        matmul(xq, wq[:nm].t(), scale_a=sx, scale_b=sw[:nm // 128].t(), out=out[:, :nm])
        if held:
            choose(*held)
        strip()
        torch.cuda.synchronize()
        err = float((out.double() - ref).abs().max() / ref.abs().max())
        ms[name] = graph_ms(strip)
        print(f"{m}x{n}x{k} {name}: max |split - whole| / max |whole| = {err:.2e}")
    restore()
    flops = 2 * m * n * k
    for name, t in ms.items():
        print(f"{m}x{n}x{k} {name:28s} {t * 1e3:8.1f} us  ({flops / t / 1e9:7.1f} TFLOP/s of the whole product)")
    for name in strips:
        t = ms["whole 128-column blocks"] + ms[name]
        print(f"{m}x{n}x{k} blocks + {name:26s} {flops / t / 1e9:7.1f} TFLOP/s = {ms['whole'] / t:.3f}x whole, "
              f"{ms['per-tensor fp8'] / t:.3f}x per-tensor")


if __name__ == "__main__":
    for s in sys.argv[1:] or SHAPES:
        probe(*(int(x) for x in s.split("x")))
