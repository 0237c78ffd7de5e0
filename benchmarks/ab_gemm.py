"""A/B: the library GEMM kernel of an earlier commit and the current one, same process, same
operands, batches of launches taking turns.

    python benchmarks/ab_gemm.py [OLD_COMMIT]     # default 050dd31, the GEMM before the kit

The old module is read out of git (``git show OLD:nbwgmma/kernels/gemm.py``) with its
package-relative imports made absolute, so both kernels use today's intrinsics."""
import importlib.util
import pathlib
import re
import subprocess
import sys
import tempfile

import numpy as np
import torch

from nbwgmma.bench import device_times  # noqa: E402
from nbwgmma.kernels import gemm as gemm_new  # noqa: E402


def _old_module(commit):
    src = subprocess.run(["git", "show", f"{commit}:nbwgmma/kernels/gemm.py"], capture_output=True, text=True,
                         check=True, cwd=pathlib.Path(__file__).parent).stdout
    src = re.sub(r"^from \.\.(\w)", r"from nbwgmma.\1", src, flags=re.M)
    path = pathlib.Path(tempfile.mkdtemp()) / "gemm_old.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("gemm_old", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gemm_old = _old_module(sys.argv[1] if len(sys.argv) > 1 else "050dd31")
from nbwgmma.launch import launch  # noqa: E402
from nbwgmma.tma import TensorMap  # noqa: E402


def run(kind, m=8192, n=8192, k=8192, rounds=15, inner=10):
    tdt = {"bf16": torch.bfloat16, "e4m3": torch.float8_e4m3fn}[kind]
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", generator=g).to(tdt)
    b = torch.randn(n, k, device="cuda", generator=g).to(tdt)
    outs, kerns = {}, {}
    for name, mod in (("old", gemm_old), ("new", gemm_new)):
        cfg = mod.GemmConfig(f"f32.{kind}.{kind}", bm=128, bn=256, epilogue="tma", out="bf16")
        c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        ta = TensorMap(a, (cfg.bm, cfg.bk), dtype=kind)
        tb = TensorMap(b, (cfg.bn, cfg.bk), dtype=kind)
        tc = TensorMap(c, (64, 64), dtype="bf16")
        args = (ta.address, tb.address, tc.address, np.int32(m), np.int32(n), np.int32(k), np.float32(1))
        kern = mod.gemm_kernel(cfg)
        grid = min(torch.cuda.get_device_properties(0).multi_processor_count, (m // cfg.bm) * (n // cfg.bn))
        f = (lambda kern=kern, args=args, grid=grid, cfg=cfg: launch(kern, grid, cfg.threads, args, smem=cfg.smem_bytes + 1023))
        f()
        torch.cuda.synchronize()
        outs[name], kerns[name] = c, f
    same = torch.equal(outs["old"].view(torch.int16), outs["new"].view(torch.int16))
    ref = a.double() @ b.double().t()
    err = float(torch.linalg.norm(outs["new"].double() - ref) / torch.linalg.norm(ref))
    med = dict(zip(kerns, device_times(torch, list(kerns.values()), 2, rounds)))
    fl = 2 * m * n * k
    print(f"A/B {kind} {m}x{n}x{k}: old {fl / med['old'] / 1e9:.1f} TFLOP/s, new {fl / med['new'] / 1e9:.1f} TFLOP/s, "
          f"new/old speed {med['old'] / med['new']:.4f}; outputs bit-identical: {same}; rel err new {err:.2e}", flush=True)


for rep in range(3):
    for kind in ("bf16", "e4m3"):
        run(kind, rounds=25)
