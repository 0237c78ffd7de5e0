"""Each tile's share of a 128 x 256 tile's rate, fitted from measurements of ``benchmarks/configs.py
--json``: the tile model (``nbwgmma.frontend.tiles``) rates a tile by its share times the real work it
does per SM slot (``work_fill``, ``taken_fill``), so a measured ratio to cuBLAS is taken as

    log(ratio) = log(work_fill) + log(share of the tile) + (a term per problem)

and the shares are the least-squares fit over every problem measured with two tiles or more, each
with its standard error. A tile is its rows x columns, ``s`` in front where the product is swapped;
a config with other keys (clusters, stages, split-K ...) counts as a tile of its own.

    python benchmarks/fit_shares.py RUN.json [RUN.json ...] [--sms 132] [--by-k]

``--by-k`` fits each K of the runs on its own as well (a tile whose share moves with K shows there).
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from nbwgmma.frontend.tiles import taken_fill  # noqa: E402

REFERENCE = "128x256"


def tile_name(config):
    """The name of a config's tile (``s256x160``, ``128x128 cluster_k=2``), or None without bm and bn."""
    if "bm" not in config or "bn" not in config:
        return None
    rest = " ".join(f"{k}={v}" for k, v in sorted(config.items()) if k not in ("bm", "bn", "swap"))
    return f"{'s' if config.get('swap') else ''}{config['bm']}x{config['bn']}" + (f" {rest}" if rest else "")


def fit(records, sms=132):
    """{tile name: (share, standard error, measurements)} of the records (those of ``configs.py --json``),
    the reference tile's share 1; the problems measured with one tile only play no part."""
    ratios = {}
    for r in records:
        name = tile_name(r["config"])
        if name is not None:
            ratios.setdefault((tuple(r["problem"]), name, r["config"]["bm"], r["config"]["bn"],
                               int(r["config"].get("swap", 0))), []).append(r["ratio"])
    tiles_of = {}
    for p, name, *_ in ratios:
        tiles_of.setdefault(p, set()).add(name)
    rows = [(key, rs) for key, rs in ratios.items() if len(tiles_of[key[0]]) > 1]
    problems = sorted({key[0] for key, _ in rows})
    names = sorted({key[1] for key, _ in rows} - {REFERENCE})
    pi = {p: i for i, p in enumerate(problems)}
    ni = {n: len(problems) + i for i, n in enumerate(names)}
    a = np.zeros((len(rows), len(problems) + len(names)))
    y = np.zeros(len(rows))
    count = {}
    for row, ((p, name, bm, bn, swap), rs) in enumerate(rows):
        filled = taken_fill(p[2], p[3], (bm, bn), swap, sms)
        a[row, pi[p]] = 1
        if name != REFERENCE:
            a[row, ni[name]] = 1
        y[row] = math.log(sum(rs) / len(rs)) - math.log(filled)
        count[name] = count.get(name, 0) + 1
    sol = np.linalg.lstsq(a, y, rcond=None)[0]
    resid = y - a @ sol
    dof = max(len(y) - np.linalg.matrix_rank(a), 1)
    cov = (resid @ resid) / dof * np.linalg.pinv(a.T @ a)
    out = {REFERENCE: (1.0, 0.0, count.get(REFERENCE, 0))} if REFERENCE in count else {}
    for name in names:
        share = math.exp(sol[ni[name]])
        out[name] = (share, share * math.sqrt(max(cov[ni[name], ni[name]], 0.0)), count[name])
    return out, math.sqrt(float(resid @ resid) / len(y)) if len(y) else 0.0


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", help="files of configs.py --json")
    p.add_argument("--sms", type=int, default=132, help="the GPU's SMs (132: an H100 SXM)")
    p.add_argument("--by-k", action="store_true", help="also fit each K on its own")
    args = p.parse_args()
    records = [r for path in args.runs for r in json.load(open(path))]
    groups = [("", records)]
    if args.by_k:
        groups += [(f"K = {k}: ", [r for r in records if r["problem"][4] == k])
                   for k in sorted({r["problem"][4] for r in records})]
    for label, group in groups:
        shares, rms = fit(group, args.sms)
        print(f"{label}{len(group)} measurements; residual {rms:.3f} (log scale, root mean square)")
        for name, (share, err, n) in sorted(shares.items(), key=lambda t: -t[1][0]):
            print(f"{name:>24s}  share {share:.3f} +- {err:.3f}  ({n} problems)")


if __name__ == "__main__":
    main()
