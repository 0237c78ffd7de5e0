"""A hold-out's summary from ``benchmarks/configs.py --json``: per problem the ratio of the tile after to
the tile before (both timed in the same call, so the ratio of their ratios to cuBLAS), the geometric mean
over the runs; then the geometric mean, range and count of losses over all problems, by input type and
by K.

    python benchmarks/heldout.py RUN.json [--before first|last|default] [--after last|first|default] [--loss 0.98]

Before is each problem's first config of the ``--file`` line (``--before first``, the default), its last
(``--before last``: a line ``problem|{after}|...|{before}``, the tile before the rule last) or the default
path's tile (``--before default``: a probe, the candidate forced beside the default); after is its last
config (``--after last``, the default: a line ``problem|{before}|{after}``), its first, or the default
path's tile (``--after default``: a line ``problem|{before}`` measured with the rule in place).
"""
import argparse
import json
import math
from collections import defaultdict


def pairs(records, before="first", after="last"):
    """{problem tuple: [after / before, one per run]} of ``configs.py --json`` records (``before``, ``after``:
    see the module's docstring; not both the default's: ValueError). A default record
    starts a problem's measurement; the configs that follow in the records are that measurement's, in the
    order of the ``--file`` line (a config the kernel refused has no record: such a measurement is left
    out)."""
    if before == after:
        raise ValueError(f"before and after are both the {'default' if before == 'default' else before + ' config'}'s "
                         "tile: no pair")
    out = defaultdict(list)
    groups = []
    for r in records:
        if r["default"]:
            groups.append((tuple(r["problem"]), r["ratio"], []))
        elif groups and tuple(r["problem"]) == groups[-1][0]:
            groups[-1][2].append(r["ratio"])
    for problem, default, configs in groups:
        ends = {"default": default, "first": configs[0] if configs else None,
                "last": configs[-1] if configs else None}
        # (no config measured, or only one where both ends are configs)
        if ends[before] is None or ends[after] is None or (len(configs) < 2 and "default" not in (before, after)):
            continue
        out[problem].append(ends[after] / ends[before])
    return dict(out)


def geo(values):
    """The geometric mean of positive ``values``."""
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summary(per_problem, loss=0.98):
    """[(class, problems, geometric mean, least, most, losses)] over all problems, each input type and
    each K; a problem's ratio is the geometric mean of its runs, a loss one below ``loss``."""
    ratios = {p: geo(rs) for p, rs in per_problem.items()}
    classes = defaultdict(list)
    for p, r in ratios.items():
        classes["all"].append(r)
        classes[p[0]].append(r)
        classes[f"K = {p[4]}"].append(r)
    order = ["all"] + sorted(c for c in classes if not c.startswith("K") and c != "all") + \
        sorted((c for c in classes if c.startswith("K")), key=lambda c: int(c.split()[-1]))
    return [(c, len(classes[c]), geo(classes[c]), min(classes[c]), max(classes[c]),
             sum(r < loss for r in classes[c])) for c in order]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", help="a file of configs.py --json")
    p.add_argument("--before", choices=("first", "last", "default"), default="first")
    p.add_argument("--after", choices=("last", "first", "default"), default="last")
    p.add_argument("--loss", type=float, default=0.98, help="a ratio below this counts as a loss")
    args = p.parse_args()
    try:
        per_problem = pairs(json.load(open(args.run)), args.before, args.after)
    except ValueError as e:
        p.error(str(e))
    for prob, rs in sorted(per_problem.items(), key=lambda kv: geo(kv[1])):
        dtype, layout, m, n, k = prob
        print(f"{dtype:>5} {layout} {m:>5}x{n:>5}x{k:>5}  {geo(rs):.3f}  ({' / '.join(f'{r:.3f}' for r in rs)})")
    print("class  problems  geometric mean  range  losses")
    for c, count, g, lo, hi, losses in summary(per_problem, args.loss):
        print(f"{c}  {count}  {g:.3f}x  {lo:.3f}-{hi:.3f}  {losses}")


if __name__ == "__main__":
    main()
