"""The kernels the compute-sanitizer tests run: every example and the library GEMM in each
path matmul can take, on small problems. ``python tests/sanitize_targets.py`` runs them all."""

import importlib.util
import pathlib
import sys

ROOT = pathlib.Path(__file__).parent.parent


def examples():
    for path in sorted((ROOT / "examples").glob("*.py")):
        if path.stem.startswith("debug_"):
            continue  # deliberately broken
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        kw = {"time_it": False} if "time_it" in mod.main.__code__.co_varnames else {}
        if "size" in mod.main.__code__.co_varnames:
            kw["size"] = 256
        mod.main(**kw)
        print(f"ran {path.name}", flush=True)


def gemms():
    import torch

    from nbwgmma import matmul

    g = torch.Generator(device="cuda").manual_seed(0)
    cases = [("bf16", "KK", None), ("bf16", "MN", None), ("f16", "KN", "f32"), ("e4m3", "KK", None),
             ("f32", "KK", None)]
    for dt, layout, out in cases:
        tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32, "e4m3": torch.float8_e4m3fn}[dt]
        a = torch.randn(200, 136, device="cuda", generator=g).to(tdt)
        bt = torch.randn(264, 136, device="cuda", generator=g).to(tdt)
        if layout[0] == "M":
            a = a.t().contiguous().t()
        b = bt.t() if layout[1] == "K" else bt.t().contiguous()
        kw = {"out_dtype": out} if out else {}
        if dt == "e4m3":
            kw.update(scale_a=1.0, scale_b=1.0)
        c = matmul(a, b, **kw)
        torch.cuda.synchronize()
        ref = a.double() @ b.double()
        rel = float((c.double() - ref).norm() / ref.norm())
        assert rel < 0.05, (dt, layout, rel)
        print(f"ran matmul {dt} {layout}: rel.err {rel:.2e}", flush=True)


if __name__ == "__main__":
    which = sys.argv[1:] or ["examples", "gemms"]
    for w in which:
        globals()[w]()
