"""Kernel configurations side by side: per problem, ``matmul``'s default path, each given
``config`` and cuBLAS, timed in turn in one process (``nbwgmma.bench.device_times``), each
result checked against the default's (same function: relative difference printed). A config
the kernel refuses for a problem is reported and skipped. Prints the ratio of each to cuBLAS.

    python benchmarks/configs.py [--mid | --problems bf16:KK:768x1536x4096,...]
        [--configs '{"stream_k": 1}' '{"bm": 256, "bn": 128}' ...] [--repeats 10]

Default problems: ``sweep.MID``; default configs: stream-K (128 x 128), 256 x 128, 128 x 192.

``--file PATH``: configs per problem instead, a line each, ``DTYPE:LAYOUT:MxNxK|{config}|{config}...``
(``#`` starts a comment), e.g. ``benchmarks/one_wave_heldout.txt``. ``--runs N`` repeats the whole
list N times in the process. The default's tile is printed beside its ratio (``s`` for a swapped
product). ``--json PATH`` also writes every measurement (problem, tile or config, ratio to cuBLAS)
for ``benchmarks/fit_shares.py``, and for ``benchmarks/heldout.py``, which summarises a hold-out (the
tile after over the tile before, by input type and K).

``--build DIR`` (no GPU needed) compiles, for sm_90a and a GPU of 132 SMs, the kernels the list's calls
load (each problem's default path and each config, in ``--jobs`` processes) into DIR as shipped kernels, and
exits; a run on the GPU machine with ``NBWGMMA_PREBUILT_DIR=DIR`` then loads them instead of compiling
(the same nbwgmma sources and numba-cuda version: the kernels' key holds both).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sweep import MID  # noqa: E402

CONFIGS = ['{"stream_k": 1}', '{"bm": 256, "bn": 128}', '{"bm": 128, "bn": 192}']


def parse_problem(text):
    dtype, layout, shape = text.split(":")
    m, n, k = (int(v) for v in shape.split("x"))
    return dtype, layout, m, n, k


def read_file(path):
    """[(problem, [config, ...])] of a ``--file``."""
    items = []
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        if line:
            first, *rest = line.split("|")
            items.append((parse_problem(first), [json.loads(c) for c in rest]))
    return items


def measure(problem_, configs, repeats, records=None):
    """One problem: its default path, each config and cuBLAS timed in turn; prints the ratios to cuBLAS
    and appends a record of each (the default's as its plan's tile) to ``records`` where given."""
    import torch

    from nbwgmma import NbwgmmaError
    from nbwgmma.bench import device_times, problem
    from nbwgmma.frontend.matmul import forget_plans, last_plan

    dtype, layout, m, n, k = problem_
    _, _, ours, cublas = problem(m, n, k, dtype, layout)
    default = ours()
    forget_plans()  # (a class called before takes the fast path, which leaves last_plan as it was)
    ref = default().float()
    plan = last_plan()
    tile = {"bm": plan.cfg.bm, "bn": plan.cfg.bn, "swap": int(plan.swap)}
    fns, diffs = [default], []
    for cfg in configs:
        fn = ours(cfg)
        try:
            out = fn().float()
        except NbwgmmaError as e:
            print(f"  {dtype}:{layout}:{m}x{n}x{k} {json.dumps(cfg)}: refused ({e})")
            fns.append(None)
            diffs.append(None)
            continue
        fns.append(fn)
        diffs.append(float(torch.linalg.norm(out - ref) / torch.linalg.norm(ref)))
    live = [f for f in fns if f is not None] + [cublas]
    times = iter(device_times(torch, live, 3, repeats))
    ms = [next(times) if f is not None else None for f in fns]
    t_cublas = next(times)
    cells = [f"{t_cublas / t:.3f}" if t else "-" for t in ms]
    if records is not None:
        records += [{"problem": [dtype, layout, m, n, k], "config": c, "default": i == 0, "ratio": t_cublas / t}
                    for i, (c, t) in enumerate(zip([tile, *configs], ms)) if t]
    shown = f"{cells[0]} [{'s' if tile['swap'] else ''}{tile['bm']}x{tile['bn']}]"
    print(f"{dtype:>5} {layout} {m:>5}x{n:>5}x{k:>5}  {shown:>16s}"
          + "  " + "  ".join(f"{json.dumps(cfg)} {c} (d {d:.0e})" if d is not None else f"{json.dumps(cfg)} {c}"
                             for cfg, c, d in zip(configs, cells[1:], diffs)), flush=True)


def build_one(item, directory):
    """Compile one (problem, config)'s kernel without a GPU into ``directory``, as shipped kernels
    (``precompile.cpu_build``; this process's lookups of them look there after): "built", "found" or
    the error."""
    import pathlib

    from nbwgmma import cache, launch
    from nbwgmma.precompile import cpu_build

    (dtype, layout, m, n, k), config = item
    cache.PREBUILT = pathlib.Path(directory)
    launch.device_limits = lambda device=None: dict(launch.H100_LIMITS, multiprocessors=132)
    try:
        return "built" if cpu_build(dtype, layout, config, m, n, k, tails=True, prebuilt=True) else "found"
    except Exception as e:  # noqa: BLE001 - reported; a config the kernel refuses is skipped on the GPU too
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def build(items, directory, jobs):
    """:func:`build_one` for every problem's default path and each of its configs, in ``jobs``
    processes (in this one for 1); prints a line per kernel that was not built or found."""
    import functools
    from concurrent.futures import ProcessPoolExecutor

    todo = [(pr, c) for pr, configs in items for c in [{}] + configs]
    one = functools.partial(build_one, directory=os.path.abspath(directory))
    if jobs == 1:
        got = [one(t) for t in todo]
    else:
        with ProcessPoolExecutor(jobs) as ex:
            got = list(ex.map(one, todo))
    for (pr, c), why in zip(todo, got):
        if why not in ("built", "found"):
            print(f"  {pr} {c}: {why}")
    print(f"{len(todo)} kernels: {got.count('built')} built, {got.count('found')} found, into {directory}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", help="comma-separated DTYPE:LAYOUT:MxNxK (default: sweep.MID)")
    p.add_argument("--configs", nargs="*", default=CONFIGS, help="JSON dicts of matmul's config")
    p.add_argument("--file", help="lines of DTYPE:LAYOUT:MxNxK|{config}|...: configs per problem")
    p.add_argument("--runs", type=int, default=1)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--json", help="write every measurement here (for benchmarks/fit_shares.py)")
    p.add_argument("--build", metavar="DIR", help="compile the kernels into DIR without a GPU, and exit")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for --build")
    args = p.parse_args()
    if args.file:
        items = read_file(args.file)
    else:
        configs = [json.loads(c) for c in args.configs]
        problems = [parse_problem(t) for t in args.problems.split(",")] if args.problems else MID
        items = [(pr, configs) for pr in problems]
    if args.build:
        build(items, args.build, args.jobs)
        return
    records = []
    for run in range(args.runs):
        print(f"run {run + 1}: problem, default [its tile], then each config; ratios to cuBLAS")
        for problem_, configs in items:
            measure(problem_, configs, args.repeats, records)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(records, f)


if __name__ == "__main__":
    main()
