"""grouped_matmul against torch._grouped_mm (bf16, A (sum of tokens, K), experts' weights
(G, N, K) used as w.transpose(1, 2)) and against nbwgmma's dense product of the same total
size, in one process: batches of 10 calls taking turns, 15 rounds, median.

    python benchmarks/grouped.py [GxTOKENSxNxK ...]     (default: the three shapes of the issue)
"""
import sys

import torch

from nbwgmma import grouped_matmul, matmul
from nbwgmma.bench import side_by_side


def bench(groups, tokens, n, k, rounds=15, inner=10):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(groups * tokens, k, device="cuda", generator=g).bfloat16()
    w = torch.randn(groups, n, k, device="cuda", generator=g).bfloat16()
    offs = torch.arange(1, groups + 1, device="cuda", dtype=torch.int32) * tokens
    out = torch.empty(groups * tokens, n, device="cuda", dtype=torch.bfloat16)
    dense_w = torch.randn(n, k, device="cuda", generator=g).bfloat16()
    dense_out = torch.empty_like(out)
    peers = {"nbwgmma.grouped_matmul": lambda: grouped_matmul(x, w.transpose(1, 2), offs, out=out),
             "torch._grouped_mm": lambda: torch._grouped_mm(x, w.transpose(1, 2), offs=offs),
             "nbwgmma.matmul, dense, same size": lambda: matmul(x, dense_w.t(), out=dense_out)}
    side_by_side(torch, peers, 2 * groups * tokens * n * k, f"{groups}x{tokens}x{n}x{k}", "grouped_matmul", rounds,
                 inner)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__)
    for s in sys.argv[1:] or ["8x4096x4096x7168", "32x256x4096x7168", "4x8192x7168x2048"]:
        bench(*(int(v) for v in s.split("x")))
