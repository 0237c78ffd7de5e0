"""Sustained runs under the board's power limit: each contender alone for a few seconds (after a
warm-up), while ``nvidia-smi`` samples the SM clock, the board power and the throttle reasons
every 100 ms; per contender the time per call (CUDA events over the whole run), the median
clock and power, and their product, the energy per call. Large products on an H100 run against
the power cap, so their sustained speed is the cap divided by the energy each product costs
(BENCHMARKS.md, "The power cap").

Contenders at each size: nbwgmma's dense ``matmul(x, w.t())`` and cuBLAS's ``x @ w.t()``, the
2:4-sparse ``matmul(x, w24.t())`` and cuSPARSELt's ``F.linear`` on the same pruned weight; f16
and bf16, random normal data. With ``--fused M N K``: bf16 bias + gelu_tanh, nbwgmma's
``matmul(x, w.t(), bias=b, activation="gelu_tanh")``, cuBLASLt's ``_addmm_activation`` and the
fused example (``examples/gemm_5_fused_epilogue.py``), beside both plain products.

    python benchmarks/sustained.py [--seconds 3] [N ...]       (N^3 products; default 8192)
    python benchmarks/sustained.py --fused 4096 14336 4096
    python benchmarks/sustained.py --configs '{"bm": 128, "bn": 256}' ... [--dtype bf16] [N ...]

``--configs``: the dense product alone, the default path and each ``config`` given beside cuBLAS
(the energy each tile or cluster costs a product).
"""
import argparse
import json
import subprocess
import time

import torch
import torch.nn.functional as F

from nbwgmma import Sparse24, matmul

TDT = {"bf16": torch.bfloat16, "f16": torch.float16}


def sustained(fn, seconds):
    """(us per call, median MHz, median W, the throttle reasons most sampled) of ``fn`` run alone."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_throttle_reasons.active",
                            "--format=csv,noheader,nounits", "-lms", "100"], stdout=subprocess.PIPE, text=True)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls, t0 = 0, time.time()
    start.record()
    while time.time() - t0 < seconds:
        for _ in range(20):
            fn()
        calls += 20
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    smi.terminate()
    rows = [r.split(", ") for r in smi.communicate()[0].strip().splitlines()]
    rows = rows[len(rows) // 10: len(rows) - len(rows) // 10] or rows  # the run's steady middle
    clock = sorted(float(r[0]) for r in rows)[len(rows) // 2]
    power = sorted(float(r[1]) for r in rows)[len(rows) // 2]
    reasons = max(set(r[2] for r in rows), key=[r[2] for r in rows].count)
    return start.elapsed_time(end) / calls * 1e3, clock, power, reasons


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sizes", nargs="*", type=int, default=[8192])
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--fused", nargs=3, type=int, metavar=("M", "N", "K"),
                   help="bias + gelu_tanh (bf16) at this size instead of the dense and sparse N^3 products")
    p.add_argument("--configs", nargs="+", metavar="JSON", help="dense products only: the default and these configs")
    p.add_argument("--dtype", default="bf16", choices=sorted(TDT), help="with --configs: the inputs' type")
    a = p.parse_args()
    if a.fused:
        return fused(*a.fused, a.seconds)
    if a.configs:
        return configs(a.sizes, a.dtype, [json.loads(c) for c in a.configs], a.seconds)
    from torch.sparse import to_sparse_semi_structured

    print(f"{'product':42s} {'us/call':>9s} {'MHz':>6s} {'W':>5s} {'J/call':>7s}  throttle")
    for size in a.sizes:
        for t in ("f16", "bf16"):
            g = torch.Generator(device="cuda").manual_seed(0)
            x = torch.randn(size, size, device="cuda", generator=g).to(TDT[t])
            w24 = Sparse24.from_dense(torch.randn(size, size, device="cuda", generator=g).to(TDT[t]), prune=True)
            w = w24.to_dense()
            out = torch.empty(size, size, device="cuda", dtype=TDT[t])
            ws = to_sparse_semi_structured(w)
            for name, fn in ((f"{t} {size}^3 dense nbwgmma", lambda: matmul(x, w.t(), out=out)),
                             (f"{t} {size}^3 dense cuBLAS", lambda: x @ w.t()),
                             (f"{t} {size}^3 sparse nbwgmma", lambda: matmul(x, w24.t(), out=out)),
                             (f"{t} {size}^3 sparse cuSPARSELt", lambda: F.linear(x, ws))):
                us, mhz, watts, why = sustained(fn, a.seconds)
                print(f"{name:42s} {us:9.1f} {mhz:6.0f} {watts:5.0f} {watts * us * 1e-6:7.3f}  {why}", flush=True)


def configs(sizes, dtype, cfgs, seconds):
    from nbwgmma.bench import problem

    print(f"{'product':60s} {'us/call':>9s} {'MHz':>6s} {'W':>5s} {'J/call':>7s} {'cuBLAS/this':>11s}  throttle")
    for size in sizes:
        _, _, ours, cublas = problem(size, size, size, dtype, "KK")
        fns = [(f"{dtype} {size}^3 " + (json.dumps(c) if c else "default"), ours(c)) for c in [None] + cfgs]
        rows = [(name, sustained(fn, seconds)) for name, fn in fns + [(f"{dtype} {size}^3 cuBLAS", cublas)]]
        t_cublas = rows[-1][1][0]
        for name, (us, mhz, watts, why) in rows:
            print(f"{name:60s} {us:9.1f} {mhz:6.0f} {watts:5.0f} {watts * us * 1e-6:7.3f} {t_cublas / us:11.3f}  {why}",
                  flush=True)


def fused(m, n, k, seconds):
    import pathlib
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "examples"))
    import gemm_5_fused_epilogue as example
    from nbwgmma.kit import gelu_tanh_approx

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    w = torch.randn(n, k, device="cuda", generator=g).bfloat16()
    bias = torch.randn(n, device="cuda", generator=g)
    b16 = bias.bfloat16()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    kernel = example.make_kernel(gelu_tanh_approx)  # (the example's own activation)
    ctas = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{'product':48s} {'us/call':>9s} {'MHz':>6s} {'W':>5s} {'J/call':>7s} {'TFLOP/s':>8s}  throttle")
    for name, fn in (("bias + gelu_tanh nbwgmma", lambda: matmul(x, w.t(), bias=b16, activation="gelu_tanh", out=out)),
                     ("bias + gelu_tanh cuBLASLt", lambda: torch._addmm_activation(b16, x, w.t(), use_gelu=True)),
                     ("bias + gelu_tanh example", lambda: example.run(kernel, x, w, bias, out, ctas)),
                     ("plain nbwgmma", lambda: matmul(x, w.t(), out=out)),
                     ("plain cuBLAS", lambda: torch.mm(x, w.t(), out=out))):
        us, mhz, watts, why = sustained(fn, seconds)
        print(f"{m}x{n}x{k} {name:34s} {us:9.1f} {mhz:6.0f} {watts:5.0f} {watts * us * 1e-6:7.3f} "
              f"{2 * m * n * k / us / 1e6:8.1f}  {why}", flush=True)


if __name__ == "__main__":
    main()
