"""The first ``matmul`` of a new process, per problem class, with the kernel cache as it is:
each class in a fresh process (imports and the CUDA context timed apart), then the same
class again in another fresh process. Run it after ``python -m nbwgmma precompile`` to time
first calls that load their kernels, or with ``NBWGMMA_CACHE_DIR`` set to an empty folder to
time compiles.

    python benchmarks/first_call.py [DTYPE:LAYOUT:MxNxK ...]
"""
import json
import subprocess
import sys

CLASSES = ["bf16:KK:8192x8192x8192", "bf16:KN:4096x14336x4096", "f16:MN:512x8192x8192", "bf16:KK:32x8192x8192",
           "bf16:KK:5000x3000x4000", "e4m3:KK:4096x4096x4096", "tf32:KK:2048x2048x8192", "f16:KK:1024x1024x1024"]

_CHILD = """
import json, sys, time
t0 = time.perf_counter()
import torch
torch.zeros(1, device="cuda")
t1 = time.perf_counter()
from nbwgmma import cache, matmul
t2 = time.perf_counter()
dtype, layout, shape = sys.argv[1].split(":")
m, n, k = (int(v) for v in shape.split("x"))
base = {"bf16": torch.bfloat16, "f16": torch.float16, "tf32": torch.float32, "e4m3": torch.bfloat16}[dtype]
a = torch.randn(m, k, device="cuda").to(base)
b = torch.randn(n, k, device="cuda").to(base)
kw = {}
if dtype == "e4m3":
    a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    kw = {"scale_a": 1.0, "scale_b": 1.0, "out_dtype": "bf16"}
a = a if layout[0] == "K" else a.t().contiguous().t()
b = b.t() if layout[1] == "K" else b.t().contiguous()
torch.cuda.synchronize()
t3 = time.perf_counter()
matmul(a, b, **kw)
torch.cuda.synchronize()
t4 = time.perf_counter()
print(json.dumps({"first_call_s": t4 - t3, "hits": cache.stats["hits"], "misses": cache.stats["misses"],
                  "import_torch_and_context_s": t1 - t0, "import_nbwgmma_s": t2 - t1}))
"""


def first_call(cls):
    r = subprocess.run([sys.executable, "-c", _CHILD, cls], capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    for cls in sys.argv[1:] or CLASSES:
        one, two = first_call(cls), first_call(cls)
        print(f"{cls:28s} first call {one['first_call_s']:.3f} s (cache hits {one['hits']}, misses {one['misses']}), "
              f"again in a new process {two['first_call_s']:.3f} s; imports: torch + context "
              f"{one['import_torch_and_context_s']:.2f} s, nbwgmma {one['import_nbwgmma_s']:.2f} s", flush=True)


if __name__ == "__main__":
    main()
