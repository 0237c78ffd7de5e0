"""What a partial tile costs: one tile config timed at several problems in one process
(``nbwgmma.bench.device_times``), e.g. a problem whose last tile column leaves rows of B's box past N
beside its neighbours with whole tiles; us per call and TFLOP/s, two rounds.

    python benchmarks/partial_tiles.py [--dtype bf16] [--repeats 15] CASE ...

CASE is ``MxNxK:BMxBN[:STAGES]``, e.g. ``1920x480x8192:64x128:8``. Default: 64 x 128 tiles (8 stages) at
1920 x {512, 504, 496, 480, 448, 400} x 8192, at 1912 / 1880 / 1860 x 512 x 8192 (rows of A's box past M)
and at 1920 x 512 x {8160, 8136} (K rows of 16320 and 16272 bytes).
"""
import argparse

DEFAULT = ([f"1920x{n}x8192:64x128:8" for n in (512, 504, 496, 480, 448, 400)]
           + [f"{m}x512x8192:64x128:8" for m in (1912, 1880, 1860)]
           + [f"1920x512x{k}:64x128:8" for k in (8160, 8136)])


def parse(case):
    shape, tile, *stages = case.split(":")
    m, n, k = (int(v) for v in shape.split("x"))
    bm, bn = (int(v) for v in tile.split("x"))
    cfg = {"bm": bm, "bn": bn}
    if stages:
        cfg["stages"] = int(stages[0])
    return (m, n, k), cfg


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cases", nargs="*", default=DEFAULT)
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--repeats", type=int, default=15)
    a = p.parse_args()
    import torch

    from nbwgmma.bench import device_times, problem

    cases = [parse(c) for c in a.cases]
    fns = []
    for (m, n, k), cfg in cases:
        fn = problem(m, n, k, a.dtype, "KK")[2](cfg)
        fn()
        fns.append(fn)
    for r in range(2):
        for ((m, n, k), cfg), t in zip(cases, device_times(torch, fns, 3, a.repeats)):
            print(f"round {r} {a.dtype} {m}x{n}x{k} {cfg['bm']}x{cfg['bn']}: {t * 1e3:8.2f} us "
                  f"{2 * m * n * k / t / 1e9:7.1f} TFLOP/s", flush=True)


if __name__ == "__main__":
    main()
