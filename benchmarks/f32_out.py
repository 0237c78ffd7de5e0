"""f32 outputs: matmul's default (TMA stores where there are more tiles than SMs) against the
same product with ``config={"epilogue": "direct"}`` (register stores) and cuBLAS, in one
process (``nbwgmma.bench.device_times``, 12 rounds): tf32 products and f32 outputs of bf16
inputs. Prints TFLOP/s, the ratios, the error against float64, whether both outputs are
identical and both plans' configurations.

    python benchmarks/f32_out.py
"""
import torch

from nbwgmma import matmul
from nbwgmma.bench import device_times, problem
from nbwgmma.frontend.matmul import last_plan

PROBLEMS = (("tf32", 4096, 4096, 4096), ("tf32", 8192, 8192, 4096), ("tf32", 2048, 2048, 8192),
            ("tf32", 1024, 1024, 1024), ("tf32", 5000, 3000, 4000), ("tf32", 768, 1536, 4096),
            ("bf16", 4096, 4096, 4096), ("bf16", 8192, 8192, 8192))


def contenders(dt, m, n, k):
    """(a, b, default, register stores, cuBLAS) of one problem with an f32 output."""
    if dt == "tf32":
        a, b, ours, cublas = problem(m, n, k, "tf32", "KK")
        return a, b, ours(), ours({"epilogue": "direct"}), cublas
    a, b, _, _ = problem(m, n, k, "bf16", "KK")
    out = torch.empty(m, n, device="cuda")
    return (a, b, lambda: matmul(a, b, out=out), lambda: matmul(a, b, out=out, config={"epilogue": "direct"}),
            lambda: torch.mm(a, b, out_dtype=torch.float32))


def main():
    for dt, m, n, k in PROBLEMS:
        a, b, new, old, cublas = contenders(dt, m, n, k)
        x = new().double()
        cfg_new = last_plan().cfg
        y = old().double()
        cfg_old = last_plan().cfg
        ref = a.double() @ b.double()
        err = float(torch.linalg.norm(x - ref) / torch.linalg.norm(ref))
        ts = device_times(torch, [new, old, cublas], 2, 12)
        f = 2 * m * n * k / 1e9
        print(f"{dt} {m}x{n}x{k}: default {f / ts[0]:.1f} direct {f / ts[1]:.1f} cublas {f / ts[2]:.1f} TFLOP/s | "
              f"default/direct {ts[1] / ts[0]:.3f} default/cublas {ts[2] / ts[0]:.3f} direct/cublas "
              f"{ts[2] / ts[1]:.3f} | err {err:.2e} identical {torch.equal(x, y)} | {cfg_new} vs {cfg_old}",
              flush=True)


if __name__ == "__main__":
    main()
