"""``python -m nbwgmma bench``: nbwgmma's GEMM against cuBLAS, in one process, same GPU.

Both run on the same random operands; each is timed with CUDA events around
batches of ten back-to-back calls after warm-up, the two libraries' batches taking
turns, and the median over the batches is reported per call. cuBLAS is reached
through PyTorch (``torch.matmul``, ``torch._scaled_mm`` for fp8), which the timed
runs need (``pip install 'nbwgmma[bench]'``). The error is ``||C - C_ref|| / ||C_ref||`` against
a float64 product of the same (rounded) operands computed on the GPU.

Layouts name how A and B are stored: ``KK`` (A row-major [M, K], B as
``b_nk.T``, both K-major: the default), ``KN`` (B row-major [K, N]), ``MK``
(A column-major), ``MN``.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys

from .errors import MatmulError, MatmulTypeError, NbwgmmaError

__all__ = ["bench", "problem", "device_times", "overhead", "first_call", "simulated_check", "side_by_side",
           "DEFAULT_SWEEP", "DTYPES", "LAYOUTS"]

#: input types and operand layouts ``bench`` knows (see the module docstring)
DTYPES = ("bf16", "f16", "tf32", "e4m3", "e5m2")
LAYOUTS = ("KK", "KN", "MK", "MN")

DEFAULT_SWEEP = [
    (4096, 4096, 4096), (8192, 8192, 8192), (16384, 16384, 16384), (8192, 28672, 8192),
    (8192, 8192, 28672), (512, 8192, 8192), (128, 8192, 8192), (5000, 3000, 4000),
]


def _check(dtype, layout="KK", dims=()):
    """The benchmark's own arguments, before any array exists (each a one-line error)."""
    if dtype not in DTYPES:
        raise MatmulTypeError(f"bench: dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
    if layout not in LAYOUTS:
        raise MatmulError(f"bench: layout must be one of {', '.join(LAYOUTS)}; got {layout!r}")
    for name, v in zip("mnk", dims):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise MatmulError(f"bench: {name} must be a positive integer; got {v!r}")


def _operands(torch, m, n, k, dtype, layout, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "tf32": torch.float32,
           "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[dtype]
    base = torch.bfloat16 if dtype in ("e4m3", "e5m2") else tdt
    a = torch.randn(m, k, device="cuda", generator=g, dtype=torch.float32).to(base)
    b = torch.randn(n, k, device="cuda", generator=g, dtype=torch.float32).to(base)
    a, bt = a.to(tdt), b.to(tdt)
    a = a if layout[0] == "K" else a.t().contiguous().t()
    b = bt.t() if layout[1] == "K" else bt.t().contiguous()
    return a, b


def _contenders(torch, matmul, a, b, dtype, layout, config):
    """(nbwgmma's call with ``config``, cuBLAS's call) of one problem; fp8 gives bf16 out."""
    if dtype == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
    if dtype in ("e4m3", "e5m2"):
        one = torch.ones((), device="cuda", dtype=torch.float32)
        b_kmajor = b if layout[1] == "K" else b.t().contiguous().t()
        return (lambda: matmul(a, b, scale_a=1.0, scale_b=1.0, out_dtype="bf16", config=config),
                lambda: torch._scaled_mm(a, b_kmajor, one, one, out_dtype=torch.bfloat16))
    return lambda: matmul(a, b, config=config), lambda: torch.matmul(a, b)


def problem(m, n, k, dtype="bf16", layout="KK", seed=0):
    """Random operands of one problem on the GPU and a function that returns nbwgmma's call
    for a ``config`` (None: the default path), with cuBLAS's call: ``(a, b, ours(config),
    cublas)``. fp8 products give bf16 out, as in :func:`bench`."""
    _check(dtype, layout, (m, n, k))
    import torch

    from .frontend.matmul import matmul

    a, b = _operands(torch, m, n, k, dtype, layout, seed)
    cublas = _contenders(torch, matmul, a, b, dtype, layout, None)[1]
    return a, b, lambda config=None: _contenders(torch, matmul, a, b, dtype, layout, config)[0], cublas


def device_times(torch, fns, warmup=2, repeats=15, inner=10):
    """Per-call device time of each of ``fns`` in milliseconds: the median over ``repeats``
    rounds, each timing ``inner`` back-to-back calls of every function in turn (CUDA events).
    The benchmark scripts and examples time their contenders with it.

    Each batch is enqueued behind a busy-wait kernel (``torch.cuda._sleep``) that lasts
    longer than the host takes to enqueue the batch (a batch the host was slower than the
    wait is timed again with a wait twice as long), so the events see the kernels back to back
    even where one call costs the host more than the GPU (small problems): this measures the
    kernels, not the Python launch path (``host_overhead`` measures that). Taking the functions
    in turn, round after round, exposes them alike to the clock and temperature drift of a GPU
    running near its power limit.
    """
    import time

    for fn in fns:
        for _ in range(warmup):
            fn()
    times = [[] for _ in fns]
    w, s, e = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    cycles = [1 << 20]  # about 0.5 ms at the H100's clock

    def batch(fn):
        while True:
            w.record()
            torch.cuda._sleep(cycles[0])
            s.record()
            h = time.perf_counter()
            for _ in range(inner):
                fn()
            h = (time.perf_counter() - h) * 1e3
            e.record()
            e.synchronize()
            if h + 0.05 < w.elapsed_time(s) or cycles[0] >= 1 << 28:
                return s.elapsed_time(e) / inner
            cycles[0] *= 2

    for _ in range(repeats):
        for fn, t in zip(fns, times):
            t.append(batch(fn))
    return [statistics.median(t) for t in times]


def side_by_side(torch, peers: dict, flops: float, label: str, who: str, rounds=15, inner=10) -> dict:
    """Time ``peers`` (name -> callable; the first is ours) with :func:`device_times` and print
    a line per peer: ``label``, its TFLOP/s for ``flops`` and its time over ours, as "(``who``
    is 1.234x)". Returns name -> median milliseconds. The benchmark scripts report with it."""
    med = dict(zip(peers, device_times(torch, list(peers.values()), 2, rounds, inner)))
    ours = next(iter(med.values()))
    for name, t in med.items():
        print(f"{label} {name:34s} {flops / t / 1e9:7.1f} TFLOP/s  ({who} is {t / ours:.3f}x)")
    return med


def host_overhead(fn, torch, calls=200):
    """Host seconds per call of ``fn`` (a small problem: the launch path dominates)."""
    import time

    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls


def overhead(size=256, dtype="bf16", calls=2000):
    """Host microseconds per call of ``matmul`` and of ``torch.matmul`` at ``size``^3."""
    if dtype not in _OVERHEAD_TYPES:  # torch.matmul has no fp8 product to compare with
        raise MatmulTypeError(f"bench --overhead: dtype must be one of {', '.join(_OVERHEAD_TYPES)}; got {dtype!r}")
    import torch

    from .frontend.matmul import matmul

    a, b = _operands(torch, size, size, size, dtype, "KK", 0)
    ours = host_overhead(lambda: matmul(a, b), torch, calls)
    theirs = host_overhead(lambda: torch.matmul(a, b), torch, calls)
    return {"size": size, "dtype": dtype, "gpu": torch.cuda.get_device_name(), "calls": calls,
            "nbwgmma_us": ours * 1e6, "torch_us": theirs * 1e6, "ratio": ours / theirs}


_FIRST_CALL = """
import json, sys, time
t0 = time.perf_counter()
import torch
torch.zeros(1, device="cuda")  # the CUDA context, which any GPU program pays for
t1 = time.perf_counter()
import nbwgmma
from nbwgmma import cache, matmul
t2 = time.perf_counter()
n = int(sys.argv[1])
a = torch.randn(n, n, device="cuda").to(getattr(torch, sys.argv[2]))
b = torch.randn(n, n, device="cuda").to(a.dtype).t()
torch.cuda.synchronize()
t3 = time.perf_counter()
matmul(a, b)
torch.cuda.synchronize()
t4 = time.perf_counter()
print(json.dumps({"import_torch_and_context_s": t1 - t0, "import_nbwgmma_s": t2 - t1,
                  "first_call_s": t4 - t3, "cache_hits": cache.stats["hits"], "cache_misses": cache.stats["misses"]}))
"""


def first_call(size=256, dtype="bf16"):
    """A new process's first ``matmul`` (kernel compile or cache load, tensor maps, launch),
    timed twice in fresh processes sharing a new, empty kernel cache: cold, then cached.
    Imports and the CUDA context are timed apart: every GPU program pays for those."""
    import os
    import subprocess
    import sys
    import tempfile

    if dtype not in _FIRST_CALL_TYPES:
        raise MatmulTypeError(f"bench --first-call: dtype must be one of {', '.join(_FIRST_CALL_TYPES)}; "
                              f"got {dtype!r}")
    tdt = {"bf16": "bfloat16", "f16": "float16"}[dtype]
    out = {"size": size, "dtype": dtype}
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, NBWGMMA_CACHE_DIR=d, NBWGMMA_CACHE="1")
        for name in ("cold", "cached"):
            r = subprocess.run([sys.executable, "-c", _FIRST_CALL, str(size), tdt], env=env, capture_output=True,
                               text=True, check=True)
            out[name] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def bench(m=8192, n=8192, k=8192, dtype="bf16", layout="KK", warmup=5, repeats=20, seed=0, config=None):
    """One shape: a dict with the median ms and TFLOP/s of nbwgmma and cuBLAS, their ratio, errors."""
    a, b, call, cublas = problem(m, n, k, dtype, layout, seed)
    import torch

    ours = call(config)
    c = ours()
    torch.cuda.synchronize()
    from .frontend.matmul import last_plan

    plan = last_plan()  # the plan of this shape's first call (a repeat of an earlier one may not say)
    used = plan.config if plan is not None and plan.out_shape + plan.mnk[2:] == (m, n, k) else None
    ref = a.double() @ b.double()
    err = float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))
    err_cublas = float(torch.linalg.norm(cublas().double() - ref) / torch.linalg.norm(ref))
    del ref
    t_ours, t_cublas = device_times(torch, (ours, cublas), warmup, repeats)
    flops = 2.0 * m * n * k
    return {
        "m": m, "n": n, "k": k, "dtype": dtype, "layout": layout,
        "gpu": torch.cuda.get_device_name(),
        "baseline": "cuBLAS via PyTorch " + torch.__version__,
        "nbwgmma_ms": t_ours, "cublas_ms": t_cublas,
        "nbwgmma_tflops": flops / t_ours / 1e9, "cublas_tflops": flops / t_cublas / 1e9,
        "ratio": t_cublas / t_ours,
        "rel_error": err, "cublas_rel_error": err_cublas,
        "repeats": repeats, "warmup": warmup, "config": "auto" if config == "auto" else "given" if config else "default",
        "kernel": used,
    }


def bench_auto(m, n, k, dtype="bf16", layout="KK", repeats=10, seed=0):
    """One shape: ``matmul``'s default path, ``config="auto"`` (tuned by this call: its seconds,
    after the default's kernel is built) and cuBLAS, timed side by side (:func:`device_times`),
    with the default timed twice (``default_a_a``, the two times' ratio: the noise)."""
    _, _, call, cublas = problem(m, n, k, dtype, layout, seed)
    import time

    import torch

    from .frontend import autotune

    default, auto = call(None), call("auto")
    c = default()
    torch.cuda.synchronize()
    t = time.perf_counter()
    tuned = auto()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t
    chosen = dict(autotune.last)
    # the default twice: how far two timings of one kernel differ (the noise)
    t_def, t_auto, t_cublas, t_def2 = device_times(torch, (default, auto, cublas, default), 3, repeats)
    return {"m": m, "n": n, "k": k, "dtype": dtype, "layout": layout, "gpu": torch.cuda.get_device_name(),
            "default_ms": t_def, "auto_ms": t_auto, "cublas_ms": t_cublas, "auto_over_default": t_def / t_auto,
            "default_a_a": t_def / t_def2,
            "ratio_default": t_cublas / t_def, "ratio_auto": t_cublas / t_auto, "tune_seconds": seconds,
            "config": chosen["config"], "source": chosen["source"], "margin": chosen.get("margin"),
            "timed": chosen.get("ms"), "same_bits": bool(torch.equal(c, tuned)) if chosen["config"] == {} else None}


def format_row(r):
    return (f"{r['m']:>6} {r['n']:>6} {r['k']:>6} {r['dtype']:>5} {r['layout']:>3}  "
            f"nbwgmma {r['nbwgmma_tflops']:7.1f} TFLOP/s  cuBLAS {r['cublas_tflops']:7.1f} TFLOP/s  "
            f"ratio {r['ratio']:.3f}  rel.err {r['rel_error']:.2e} (cuBLAS {r['cublas_rel_error']:.2e})  "
            f"{_kernel_text(r.get('kernel'))}")


def _kernel_text(cfg):
    if not cfg:
        return ""
    cfg = dict(cfg)
    tile = f"{cfg.pop('bm', '?')}x{cfg.pop('bn', '?')}"
    return " ".join([tile] + [f"{k}={v}" for k, v in sorted(cfg.items())])


#: Timing options of ``bench``: meaningless in the simulator, which runs threads as Python
_TIMED = ("sweep", "plot", "autotune", "overhead", "first_call")


def simulated_check(m, n, k, dtype="bf16", layout="KK", seed=0):
    """What ``bench`` does in Numba's CUDA simulator, where nothing can be timed: one
    ``matmul`` of ``dtype`` and ``layout`` on random normal operands (rounded to the
    type), its relative error against float64. The operands are Numba's (simulator)
    arrays, bf16/fp8 as raw bits with ``in_dtype``."""
    _check(dtype, layout, (m, n, k))
    import numpy as np
    from numba import cuda

    from .layout.wgmma_model import decode_elements, encode_elements
    from .frontend.matmul import matmul

    t = {"tf32": "f32"}.get(dtype, dtype)
    raw = {"bf16": np.uint16, "f16": np.float16, "f32": np.float32, "e4m3": np.uint8, "e5m2": np.uint8}[t]
    rng = np.random.default_rng(seed)

    def operand(rows, cols, k_major):  # [rows, K] values, stored K- or MN-major
        x = rng.standard_normal((rows, cols))
        if t == "f32":  # f32 in, read as tf32 by the tensor cores: the reference takes the f32 values
            bits = x.astype(np.float32)
            vals = bits.astype(np.float64)
        else:
            bits = encode_elements(x, t).view(raw).reshape(rows, cols)
            vals = decode_elements(bits.view(np.uint8).reshape(rows, -1), t).reshape(rows, cols)
        dev = cuda.to_device(bits) if k_major else cuda.to_device(np.ascontiguousarray(bits.T)).T
        return vals, dev

    a, da = operand(m, k, layout[0] == "K")
    b, db = operand(n, k, layout[1] == "K")
    odt = "f32" if t == "f32" else "f16" if t == "f16" else "bf16"
    c = matmul(da, db.T, in_dtype=t if t in ("bf16", "e4m3", "e5m2") else None, out_dtype=odt).copy_to_host()
    got = (c.astype(np.uint32) << 16).view(np.float32) if c.dtype == np.uint16 else c
    ref = a @ b.T
    err = float(np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref))
    return {"m": m, "n": n, "k": k, "dtype": dtype, "layout": layout, "gpu": None, "simulator": True,
            "out": odt, "rel_error": err}


def _run_simulated(args):
    asked = [f"--{f.replace('_', '-')}" for f in _TIMED if getattr(args, f, False)]
    if asked:
        print(f"bench {' '.join(asked)}: times kernels on an H100; the CUDA simulator (NUMBA_ENABLE_CUDASIM=1) "
              f"cannot", file=sys.stderr)
        return 1
    m, n, k = args.m, args.n, args.k
    note = ""
    if m * n * k > 256 ** 3:  # every simulated thread is a Python thread
        note = f" ({m}x{n}x{k} is too large to simulate)"
        m = n = k = 64
    r = simulated_check(m, n, k, args.dtype, args.layout)
    if args.json:
        print(json.dumps(r, indent=2))
    else:
        print(f"CUDA simulator: nothing to time; {m}x{n}x{k} {args.dtype} {args.layout} through matmul instead{note}: "
              f"relative error {r['rel_error']:.2e} ({r['out']} out) vs float64")
    return 0 if r["rel_error"] < 1e-2 else 1


_OVERHEAD_TYPES = ("bf16", "f16", "tf32")
_FIRST_CALL_TYPES = ("bf16", "f16")


def _check_cli(args):
    """Option combinations the parser cannot judge alone: refused before any GPU work (one
    line each through :func:`nbwgmma.__main__.main`)."""
    first_call, overhead = getattr(args, "first_call", False), getattr(args, "overhead", False)
    if first_call and overhead:
        raise NbwgmmaError("--first-call and --overhead are separate runs: give one")
    if first_call and args.dtype not in _FIRST_CALL_TYPES:
        raise NbwgmmaError(f"--first-call times {' or '.join(_FIRST_CALL_TYPES)}; got --dtype {args.dtype}")
    if overhead and args.dtype not in _OVERHEAD_TYPES:
        raise NbwgmmaError(f"--overhead compares with torch.matmul, which takes {', '.join(_OVERHEAD_TYPES)}; "
                           f"got --dtype {args.dtype}")


def run_cli(args):
    from .demo import gpu_available, simulated

    _check_cli(args)
    if simulated():
        return _run_simulated(args)
    if not gpu_available():
        from numba import types

        from .kernels.gemm import GemmConfig, gemm_kernel
        from .report import ToolchainError, compile_report

        kind = {"bf16": "f32.bf16.bf16", "f16": "f32.f16.f16", "tf32": "f32.tf32.tf32",
                "e4m3": "f32.e4m3.e4m3", "e5m2": "f32.e5m2.e5m2"}[args.dtype]
        # What matmul runs for this type on contiguous K-major operands and a new output.
        tf32 = args.dtype == "tf32"
        cfg = GemmConfig(kind, scaled=args.dtype in ("e4m3", "e5m2"), out="f32" if tf32 else "bf16",
                         epilogue="direct" if tf32 else "tma")
        c_t = types.float32[:, :] if tf32 else types.uint64  # an array, or C's tensor map
        sig = (types.uint64, types.uint64, c_t, types.int32, types.int32, types.int32, types.float32)
        try:
            rep = compile_report(gemm_kernel(cfg), sig)
        except ToolchainError as e:
            raise NbwgmmaError(f"no sm_90 GPU, and no compile report either: {str(e).splitlines()[0]}") from None
        if args.json:
            print(json.dumps({"gpu": None, "message": "no sm_90 GPU found", "config": repr(cfg),
                              "report": rep.to_dict()}, indent=2))
        else:
            print(f"No sm_90 GPU (H100/H200) found: compile report of the GEMM kernel {cfg} instead.\n")
            print(rep)
        return 0
    if importlib.util.find_spec("torch") is None:  # cuBLAS is reached through PyTorch
        raise NbwgmmaError("needs PyTorch to reach cuBLAS: pip install 'nbwgmma[bench]'")
    if getattr(args, "plot", None) and importlib.util.find_spec("matplotlib") is None:  # before, not after, the runs
        raise NbwgmmaError("--plot needs matplotlib: pip install 'nbwgmma[plot]'")
    if getattr(args, "first_call", False):
        r = first_call(dtype=args.dtype)
        if args.json:
            print(json.dumps(r, indent=2))
        else:
            for name in ("cold", "cached"):
                x = r[name]
                print(f"{name:>6}: first matmul {x['first_call_s']:.3f} s (cache hits {x['cache_hits']}, misses "
                      f"{x['cache_misses']}); before it: import torch + CUDA context "
                      f"{x['import_torch_and_context_s']:.2f} s, import nbwgmma {x['import_nbwgmma_s']:.2f} s")
        return 0
    if getattr(args, "overhead", False):
        r = overhead(dtype=args.dtype)
        print(json.dumps(r, indent=2) if args.json else
              f"host time per call at {r['size']}^3 {r['dtype']}: nbwgmma {r['nbwgmma_us']:.1f} us, "
              f"torch.matmul {r['torch_us']:.1f} us, ratio {r['ratio']:.2f}")
        return 0
    shapes = DEFAULT_SWEEP if args.sweep else [(args.m, args.n, args.k)]
    rows = []
    for m, n, k in shapes:
        config = "auto" if getattr(args, "autotune", False) else getattr(args, "config", None)
        r = bench(m, n, k, args.dtype, args.layout, args.warmup, args.repeats, config=config)
        rows.append(r)
        if not args.json:
            print(format_row(r), flush=True)
    if args.sweep and len(rows) > 1:
        gm = statistics.geometric_mean([r["ratio"] for r in rows])
        if not args.json:
            print(f"geometric mean ratio {gm:.3f}")
    if args.plot:
        plot(rows, args.plot)
    if args.json:
        print(json.dumps(rows[0] if len(rows) == 1 else rows, indent=2))
    return 0


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['m']}x{r['n']}x{r['k']}" for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.bar([i - 0.2 for i in x], [r["nbwgmma_tflops"] for r in rows], 0.4, label="nbwgmma")
    ax.bar([i + 0.2 for i in x], [r["cublas_tflops"] for r in rows], 0.4, label="cuBLAS")
    ax.set_xticks(list(x), labels, rotation=30, ha="right")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"{rows[0]['dtype']} GEMM on {rows[0]['gpu']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
