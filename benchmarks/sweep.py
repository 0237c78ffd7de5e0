"""The broad sweep: matmul's default path (no ``config``) against cuBLAS on problems users run,
in one process on one GPU (``nbwgmma.bench.bench`` per problem: batches of 10 calls taking
turns, median). LLM projections and MLPs from decoding (M = 16) to prefill (M = 16384),
K-heavy and N-ragged shapes, squares, the four operand layouts, bf16, f16, fp8 and tf32.
Prints one row per problem, then the geometric mean and the worst ratio; writes the rows as
JSON and, with matplotlib, a plot of the ratios.

    python benchmarks/sweep.py [--json sweep.json] [--plot sweep.png] [--repeats 10]

``--mid``: the problems of :data:`MID` instead (mid-sized products, 384 to 6144 rows, K = 4096,
ragged and round N: the problems that trailed cuBLAS most when measured beside the sweep).

``--random COUNT [--seed S]``: instead, COUNT problems drawn at random (:func:`random_problems`):
shapes nobody tuned on, the honest measure of the default path on ragged problems.

``--auto``: instead, per problem, the default path against ``config="auto"`` (tuned in this
process, with its seconds) and cuBLAS; then the worst ``auto`` / default ratio and the longest
tuning.
"""
import argparse
import json
import random
import statistics

from nbwgmma.bench import bench, bench_auto, format_row

#: (dtype, layout, M, N, K): Llama-style 8B (hidden 4096, MLP 14336) and 70B (8192, 28672)
#: projections over batch * sequence, DeepSeek-style 7168 shapes, squares, K-heavy, ragged N.
SWEEP = [
    ("bf16", "KK", 16, 4096, 4096), ("bf16", "KK", 32, 8192, 8192), ("bf16", "KK", 128, 4096, 4096),
    ("bf16", "KK", 256, 4096, 14336), ("bf16", "KK", 512, 14336, 4096), ("bf16", "KK", 1024, 1024, 1024),
    ("bf16", "KK", 2048, 2048, 2048), ("bf16", "KK", 2048, 4096, 14336), ("bf16", "KK", 4096, 4096, 4096),
    ("bf16", "KK", 6144, 6144, 6144), ("bf16", "KK", 8192, 8192, 8192), ("bf16", "KK", 8192, 28672, 8192),
    ("bf16", "KK", 16384, 8192, 8192), ("bf16", "KK", 2048, 2048, 32768), ("bf16", "KK", 4096, 3000, 4096),
    ("bf16", "KK", 5000, 3000, 4000), ("bf16", "KK", 4096, 1000, 8192), ("bf16", "KN", 4096, 4096, 4096),
    ("bf16", "KN", 2048, 14336, 4096), ("bf16", "MK", 4096, 4096, 4096), ("bf16", "MN", 4096, 4096, 4096),
    ("f16", "KK", 64, 8192, 8192), ("f16", "KK", 2048, 14336, 4096), ("f16", "KK", 8192, 8192, 8192),
    ("f16", "KK", 16384, 4096, 4096), ("f16", "KN", 1024, 4096, 4096), ("f16", "MN", 512, 8192, 8192),
    ("e4m3", "KK", 128, 8192, 8192), ("e4m3", "KK", 512, 4096, 14336), ("e4m3", "KK", 2048, 7168, 7168),
    ("e4m3", "KK", 4096, 14336, 4096), ("e4m3", "KK", 8192, 8192, 8192), ("e4m3", "KK", 4096, 4096, 4096),
    ("tf32", "KK", 1024, 1024, 1024), ("tf32", "KK", 2048, 2048, 8192), ("tf32", "KK", 4096, 4096, 4096),
]

#: Mid-sized bf16 problems (K = 4096) that the sweep lacks; none was tuned on before it was listed.
MID = [("bf16", "KK", m, n, 4096) for m, n in (
    (384, 4096), (384, 6144), (512, 3008), (512, 5120), (640, 2048), (640, 7168), (768, 1536), (768, 14336),
    (1024, 5120), (1536, 1536), (1536, 7168), (2048, 11008), (3072, 1024), (5000, 5120), (6144, 1000))]


def random_problems(count, seed=2026):
    """``count`` problems drawn with ``seed``: K-major A and B, M from 256 to 16384, N a multiple of
    16 up to 16384 (TMA's 16-byte rows, and cuBLASLt's fp8 needs N a multiple of 16), K one of
    1024, 2048, 4096, 8192; every fourth e4m3, the others bf16."""
    rng = random.Random(seed)
    problems = []
    for i in range(count):
        dtype = "e4m3" if i % 4 == 3 else "bf16"
        m = rng.randint(256, 16384)
        n = rng.randint(16, 1024) * 16
        problems.append((dtype, "KK", m, n, rng.choice([1024, 2048, 4096, 8192])))
    return problems


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", help="write the rows to this file")
    p.add_argument("--plot", help="write a plot of the ratios to this file (needs matplotlib)")
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--auto", action="store_true", help="the default path against config='auto'")
    p.add_argument("--mid", action="store_true", help="the mid-sized problems (MID) instead of the sweep")
    p.add_argument("--random", type=int, metavar="COUNT", help="COUNT random problems instead (random_problems)")
    p.add_argument("--seed", type=int, default=2026, help="the random problems' seed")
    args = p.parse_args()
    problems = random_problems(args.random, args.seed) if args.random else MID if args.mid else SWEEP
    if args.auto:
        return main_auto(args, problems)
    rows = []
    for dtype, layout, m, n, k in problems:
        r = bench(m, n, k, dtype, layout, warmup=3, repeats=args.repeats)
        rows.append(r)
        print(format_row(r), flush=True)
    ratios = [r["ratio"] for r in rows]
    worst = min(rows, key=lambda r: r["ratio"])
    print(f"{len(rows)} problems on {rows[0]['gpu']}: geometric mean {statistics.geometric_mean(ratios):.3f}, worst "
          f"{worst['ratio']:.3f} ({worst['dtype']} {worst['layout']} {worst['m']}x{worst['n']}x{worst['k']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.plot:
        plot(rows, args.plot)


def main_auto(args, problems):
    rows = []
    for dtype, layout, m, n, k in problems:
        r = bench_auto(m, n, k, dtype, layout, repeats=args.repeats)
        rows.append(r)
        print(f"{m:>6} {n:>6} {k:>6} {dtype:>5} {layout:>3}  default {r['ratio_default']:.3f}x cuBLAS, auto "
              f"{r['ratio_auto']:.3f}x (auto/default {r['auto_over_default']:.3f}, tuned in {r['tune_seconds']:.2f} s,"
              f" margin {r['margin'] or 0:.3f}, A/A {r['default_a_a']:.3f}) {r['config']}", flush=True)
    worst = min(rows, key=lambda r: r["auto_over_default"])
    slowest = max(rows, key=lambda r: r["tune_seconds"])
    geo = statistics.geometric_mean
    print(f"{len(rows)} problems on {rows[0]['gpu']}: geometric mean default {geo([r['ratio_default'] for r in rows]):.3f},"
          f" auto {geo([r['ratio_auto'] for r in rows]):.3f}; worst auto/default {worst['auto_over_default']:.3f} "
          f"({worst['dtype']} {worst['m']}x{worst['n']}x{worst['k']}); longest tuning {slowest['tune_seconds']:.2f} s "
          f"({slowest['dtype']} {slowest['m']}x{slowest['n']}x{slowest['k']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['dtype']} {r['layout']} {r['m']}x{r['n']}x{r['k']}" for r in rows]
    fig, ax = plt.subplots(figsize=(12, 4.5))
    ax.bar(range(len(rows)), [r["ratio"] for r in rows], color=["C0" if r["ratio"] >= 1 else "C3" for r in rows])
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks(range(len(rows)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel("cuBLAS time / nbwgmma time")
    ax.set_title(f"matmul's default path against cuBLAS, {rows[0]['gpu']} "
                 f"(geometric mean {statistics.geometric_mean([r['ratio'] for r in rows]):.3f})")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
