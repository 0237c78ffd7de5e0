"""An N-major B's row pitch against the product's speed: 5000 x N x 4000 bf16 with B [K, N] a view
of rows of ``pitch`` elements, matmul's default path, the same without the swap, the same B
K-major, and cuBLAS on both, timed in turn in one process (``nbwgmma.bench.device_times``),
TFLOP/s.

    python benchmarks/pitch.py [--m 5000] [--k 4000] [--cases 3000:3000,3000:3072,3008:3008,3072:3072]
"""
import argparse


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--m", type=int, default=5000)
    p.add_argument("--k", type=int, default=4000)
    p.add_argument("--cases", default="3000:3000,3000:3072,3008:3008,3072:3072", help="N:pitch,...")
    p.add_argument("--repeats", type=int, default=15)
    args = p.parse_args()
    import torch

    from nbwgmma import matmul
    from nbwgmma.bench import device_times
    from nbwgmma.frontend.matmul import last_plan

    torch.manual_seed(0)
    m, k = args.m, args.k
    names = ["KN default", "KN no swap", "KK default", "cuBLAS KN", "cuBLAS KK"]
    for case in args.cases.split(","):
        n, pitch = (int(v) for v in case.split(":"))
        a = torch.randn(m, k, device="cuda").bfloat16()
        b = torch.randn(k, pitch, device="cuda").bfloat16()[:, :n]  # N-major B, rows of `pitch` elements
        wt = b.t().contiguous()  # the same B, K-major
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        fns = [lambda: matmul(a, b, out=out), lambda: matmul(a, b, out=out, config={"swap": 0}),
               lambda: matmul(a, wt.t(), out=out), lambda: torch.matmul(a, b), lambda: torch.matmul(a, wt.t())]
        tiles = []
        for f in fns[:3]:
            f()
            plan = last_plan()
            tiles.append(f"{plan.cfg.bm}x{plan.cfg.bn}{' swapped' if plan.swap else ''}")
        times = device_times(torch, fns, 3, args.repeats)
        print(f"N={n} pitch={pitch} ({2 * pitch} bytes): "
              + "  ".join(f"{nm} {2 * m * n * k / t / 1e9:.0f}" for nm, t in zip(names, times)), tiles, flush=True)


if __name__ == "__main__":
    main()
