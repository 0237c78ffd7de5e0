"""Hold-out of the tail-map rule (``nbwgmma.frontend.tails.tail_pays``): random one-wave-sized products
(bf16, and e4m3 in one draw of four, K of 2048-8192) whose default tile leaves a partial tile row or
column; the default path (the rule's choice) timed against the same config with the opposite choice
(the tail maps off, or on wherever the product runs in one wave), two rounds of ``device_times`` with
cuBLAS in the same process; outputs compared bit for bit.

    python benchmarks/tail_heldout.py [SEED=9500] [BUDGET_S=200]

One line per problem: the tile (swapped where the kernel computes out^T), the maps each choice takes,
the padding rows a stage of B's last column and A's last row (summed over their tiles), rule / other
per round and their geometric mean, cuBLAS / rule. (benchmarks/tail_maps_heldout_h100.txt: seed 9500.)
"""
import math
import random
import sys
import time

import torch
import nbwgmma
import nbwgmma.frontend.tails as P
from nbwgmma.frontend.matmul import last_plan
from nbwgmma.bench import device_times

seed = int(sys.argv[1]) if len(sys.argv) > 1 else 9500
budget = float(sys.argv[2]) if len(sys.argv) > 2 else 200
rng = random.Random(seed)
t0 = time.time()
torch.manual_seed(seed)
done = 0
while time.time() - t0 < budget and done < 24:
    m = int(math.exp(rng.uniform(math.log(96), math.log(4096))))
    n = int(math.exp(rng.uniform(math.log(256), math.log(12288)))) // 8 * 8
    if not 3e5 < m * n < 4.5e6:
        continue
    k = rng.choice([2048, 4096, 8192])
    dt = rng.choice(["bf16", "bf16", "bf16", "e4m3"])
    if dt == "e4m3":  # (cuBLAS's fp8 product takes N and M in steps of 16)
        n, m = n // 16 * 16, max(16, m // 16 * 16)
    a = torch.randn(m, k, device="cuda")
    b = torch.randn(n, k, device="cuda")
    if dt == "bf16":
        a, b = a.to(torch.bfloat16), b.to(torch.bfloat16).T
        cub = lambda: a @ b
        kw = {}
    else:
        a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).T
        one = torch.ones((), device="cuda")
        cub = lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)
        kw = dict(out_dtype="bf16", scale_a=1.0, scale_b=1.0)
    x = nbwgmma.matmul(a, b, **kw)
    pl = last_plan()
    cfg = dict(pl.config)
    bm, bn = pl.cfg.bm, pl.cfg.bn
    sw = getattr(pl, "swap", False)
    if not ((n if sw else m) % bm or (m if sw else n) % bn) or pl.cfg.batched or pl.cfg.stream_k:
        continue
    rule = (pl.cfg.b_tail, pl.cfg.a_tail)
    # the opposite choice: tails off (switches), or on wherever one wave allows (TAIL_MIN_ROWS 0)
    if any(rule):
        P.B_TAIL_MAP = P.A_TAIL_MAP = False
    else:
        P.TAIL_MIN_ROWS = 0
    y = nbwgmma.matmul(a, b, config=cfg, **kw)
    other = (last_plan().cfg.b_tail, last_plan().cfg.a_tail)
    P.B_TAIL_MAP = P.A_TAIL_MAP = True
    P.TAIL_MIN_ROWS = 256
    if other == rule:
        print(f"{dt} {m}x{n}x{k} {bm}x{bn}: not one wave / no tail either way ({rule})", flush=True)
        continue
    eq = torch.equal(x, y)
    opp = lambda: nbwgmma.matmul(a, b, config=cfg, **kw)  # planned above with the opposite choice
    dflt = lambda: nbwgmma.matmul(a, b, **kw)
    rs = []
    for r in range(2):
        t = device_times(torch, [dflt, opp, cub], 3, 10)
        rs.append((t[1] / t[0], t[2] / t[0]))
    g = math.sqrt(rs[0][0] * rs[1][0])
    km, kn = (n, m) if getattr(pl, "swap", False) else (m, n)  # (the kernel's rows and columns)
    pad_b = (bn - P.tail_rows(kn, bn)) * math.ceil(km / bm) if kn % bn else 0
    pad_a = (bm - P.tail_rows(km, bm)) * math.ceil(kn / bn) if km % bm else 0
    print(f"{dt} {m}x{n}x{k} {bm}x{bn}{' swapped' if sw else ''} rule(b,a)={rule} other={other} pad(b,a)=({pad_b},{pad_a}) "
          f"rule/other {rs[0][0]:.3f} {rs[1][0]:.3f} geo {g:.3f}; cuBLAS/rule {rs[0][1]:.3f} {rs[1][1]:.3f}; equal {eq}",
          flush=True)
    done += 1
print(f"done {done} in {time.time()-t0:.0f} s")
