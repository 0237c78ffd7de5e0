"""Each CTA's timeline in the library GEMM (``GemmConfig(trace=True)``, :mod:`nbwgmma.kit.timeline`):
when it started, on which SM, when its first stage landed, when its tiles and stores were done; and
what the records cost (the traced kernel's time against the same kernel without them).

    python benchmarks/timeline.py --problem 1876 480 8192 --configs '{"bm":64,"bn":128,"stages":8}' \
        '{"bm":64,"bn":120,"stages":8}' [--runs 5] [--json OUT.json]
    python benchmarks/timeline.py --resolution     # the steps %globaltimer moves in

bf16, A and B K-major (a config may take ``b_tail`` / ``a_tail``), C bf16 through the TMA epilogue, one CTA per SM over the work units (direct
launches). Per config: the untraced and traced kernels' times (device_times), then over ``--runs``
traced launches the spread of each event across CTAs (the median run's summary printed), and how
the CTAs that finished last differ from the rest: their start, the first stage's wait, their main
loop.
"""
import argparse
import json

import numpy as np
import torch

from nbwgmma.bench import device_times
from nbwgmma.frontend.plan import work_units
from nbwgmma.frontend.tails import tail_rows
from nbwgmma.kernels.gemm import GemmConfig, gemm_kernel
from nbwgmma.kernels.gemm_config import TRACE_EVENTS
from nbwgmma.launch import device_limits, launch
from nbwgmma.timeline import Timeline
from nbwgmma.tma import TensorMap


def setup(m, n, k, conf, trace):
    """(launch function, out, timeline or None) of the kernel of ``conf`` on fresh random operands."""
    cfg = GemmConfig("f32.bf16.bf16", epilogue="tma", out="bf16", trace=trace, **conf)
    g = torch.Generator(device="cuda").manual_seed(m * 7 + n * 3 + k)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    b = torch.randn(n, k, device="cuda", generator=g).to(torch.bfloat16)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    ta = TensorMap(a.view(torch.int16), (cfg.bm, cfg.bk), dtype="bf16")
    tb = TensorMap(b.view(torch.int16), (cfg.bn, cfg.bk), dtype="bf16")
    tc = TensorMap(out.view(torch.int16), (64, cfg.c_box), dtype="bf16", swizzle="128B" if cfg.c_box == 64 else "none")
    units = work_units(m, n, k, cfg.bm, cfg.bn, cfg.bk, cfg.cluster, cfg.split)
    grid = min(device_limits()["multiprocessors"], units)
    tl = Timeline(grid, TRACE_EVENTS) if trace else None
    tails = ()  # (b_tail, a_tail: the maps of B's last tile column and A's last tile row)
    if cfg.b_tail:
        tails += (TensorMap(b.view(torch.int16), (tail_rows(n, cfg.bn), cfg.bk), dtype="bf16"),)
    if cfg.a_tail:
        tails += (TensorMap(a.view(torch.int16), (tail_rows(m, cfg.bm), cfg.bk), dtype="bf16"),)
    args = (ta.address, tb.address) + tuple(t.address for t in tails) + \
        (tc.address, np.int32(m), np.int32(n), np.int32(k), np.float32(1)) + ((tl.array,) if trace else ())
    kern = gemm_kernel(cfg)

    def run():
        launch(kern, grid, cfg.threads, args, smem=cfg.smem_bytes + 1023)
    run()
    torch.cuda.synchronize()
    ref = (a.double() @ b.double().T)
    err = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    return run, out, tl, err, (a, b, ta, tb, tc, tails)


def resolution():
    """The steps %globaltimer and %clock64 take between back-to-back reads of one thread."""
    from numba import cuda

    from nbwgmma.intrinsics import clock64, globaltimer

    @cuda.jit
    def reads(t, c):
        for i in range(t.size):
            t[i] = globaltimer()
            c[i] = clock64()

    t = cuda.to_device(np.zeros(1 << 16, np.uint64))
    c = cuda.to_device(np.zeros(1 << 16, np.uint64))
    reads[1, 1](t, c)
    dt = np.diff(t.copy_to_host().astype(np.int64))
    dc = np.diff(c.copy_to_host().astype(np.int64))
    steps = dt[dt > 0]
    print(f"%globaltimer: {steps.size} steps in {dt.size} reads, step min {steps.min()} ns, median {np.median(steps):.0f} "
          f"ns; one read and store every {np.median(dc):.0f} cycles; span {dt.sum() / 1e3:.1f} us", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--problem", type=int, nargs=3)
    ap.add_argument("--configs", nargs="+")
    ap.add_argument("--resolution", action="store_true")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.resolution:
        resolution()
    if not args.problem:
        return
    m, n, k = args.problem
    records = []
    for text in args.configs:
        conf = json.loads(text)
        plain, out0, _, err0, keep0 = setup(m, n, k, conf, False)
        traced, out1, tl, err1, keep1 = setup(m, n, k, conf, True)
        t = device_times(torch, [plain, traced], 3, 10)
        print(f"{m}x{n}x{k} {conf}: {tl.ctas} CTAs; untraced {t[0]*1e3:.1f} us, traced {t[1]*1e3:.1f} us "
              f"({t[1]/t[0]:.3f}x); max rel error {err0:.1e} / {err1:.1e}", flush=True)
        runs = []
        for _ in range(args.runs):
            tl.array.copy_to_device(np.full((tl.ctas, 2 + len(TRACE_EVENTS)), -1, np.int64))
            traced()
            torch.cuda.synchronize()
            sm, tt = tl.times()
            runs.append((sm, tt))
        ends = [np.nanmax(tt[:, -1]) for _, tt in runs]
        mid = int(np.argsort(ends)[len(ends) // 2])
        sm, tt = runs[mid]
        print(tl.summary(times=runs[mid]), flush=True)
        start, first, end = tt[:, 0], tt[:, 2] - tt[:, 1], tt[:, 5]
        late = end >= np.quantile(end, 0.9)
        print(f"  ends over {args.runs} runs (us): {', '.join(f'{e:.1f}' for e in ends)}")
        print(f"  latest tenth of CTAs by end against the rest (median run): start {np.mean(start[late]):.2f} / "
              f"{np.mean(start[~late]):.2f} us, first stage's wait {np.mean(first[late]):.2f} / "
              f"{np.mean(first[~late]):.2f} us, first stage in to tiles done {np.mean((tt[:, 4] - tt[:, 2])[late]):.2f}"
              f" / {np.mean((tt[:, 4] - tt[:, 2])[~late]):.2f} us; their SMs {sorted(sm[late].tolist())}", flush=True)
        records.append(dict(problem=[m, n, k], config=conf, untraced_ms=t[0], traced_ms=t[1],
                            runs=[dict(sm=s.tolist(), t=np.where(np.isnan(x), -1, x).tolist()) for s, x in runs]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f)


if __name__ == "__main__":
    main()
