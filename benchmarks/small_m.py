"""Few rows: matmul's default path against every K-slice choice of the swapped small-M kernel
and cuBLAS, in one process (``nbwgmma.bench.device_times``, the contenders in turn). Prints per
problem the ratio to cuBLAS of the default, of the uncut kernel, of K in 2 halves on the two CTAs
of a cluster, in 4 and in 2 split-K slices (``frontend.tiles.swapped_config``), and the cut of K
the default took.

    python benchmarks/small_m.py [--rows 1,16,32,64] [--n 2048,2560,3072,4096] [--k 2048,4096,8192]
        [--dtype bf16] [--repeats 15]
"""
import argparse
import math
import statistics


def parts(cfg):
    """How the swapped config ``cfg`` cuts K, in words."""
    return "halves" if cfg.get("cluster_k") == 2 else f"{cfg['split']} slices" if cfg.get("split") else "uncut"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", help="at most 64 (e4m3: 32; default 1,16,32,64, e4m3 1,16,32)")
    p.add_argument("--n", default="2048,2560,3072,4096")
    p.add_argument("--k", default="2048,4096,8192")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "f16", "e4m3"))
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args()
    import torch

    from nbwgmma.bench import device_times, problem
    from nbwgmma.frontend.tiles import SWAP_M, SWAP_M_FP8, swapped_config, swapped_small_m
    from nbwgmma.launch import device_limits

    sms = device_limits()["multiprocessors"]
    bits = 8 if args.dtype == "e4m3" else 16
    limit = SWAP_M if bits == 16 else SWAP_M_FP8
    args.rows = args.rows or ("1,16,32,64" if bits == 16 else "1,16,32")
    if any(int(v) > limit for v in args.rows.split(",")):
        p.error(f"--rows: the default path swaps at most {limit} rows of {args.dtype}")
    best = []
    for m in (int(v) for v in args.rows.split(",")):
        for n in (int(v) for v in args.n.split(",")):
            for k in (int(v) for v in args.k.split(",")):
                _, _, ours, cublas = problem(m, n, k, args.dtype, "KK")
                took = swapped_small_m(m, n, k, sms, bits)
                bn = took["bn"]
                cuts = [swapped_config(bn), swapped_config(bn, halves=True), swapped_config(bn, 4), swapped_config(bn, 2)]
                fns = [ours(None)] + [ours(c) for c in cuts]
                t = device_times(torch, fns + [cublas], 3, args.repeats)
                r = [t[-1] / x for x in t[:-1]]
                best.append(r[0] / max(r[1:]))
                print(f"{args.dtype} {m:>3} x {n:>5} x {k:>5} ({math.ceil(n / 64):>3} tiles, {math.ceil(k * bits / 1024):>3} "
                      f"k-blocks): default {r[0]:.3f} ({parts(took)})  uncut {r[1]:.3f}  2 halves {r[2]:.3f}  "
                      f"4 slices {r[3]:.3f}  2 slices {r[4]:.3f}  cuBLAS {t[-1] * 1e3:.2f} us", flush=True)
    print(f"default / best of the four: geometric mean {statistics.geometric_mean(best):.3f}, worst "
          f"{min(best):.3f}")


if __name__ == "__main__":
    main()
