"""The kernels the compute-sanitizer tests run: every example, the library GEMM in each
path matmul can take, its fused epilogue, the grouped GEMM's schedules, the block-scaled
fp8 GEMM's two ways with the scales, on small problems. ``python tests/sanitize_targets.py`` runs them all."""

import pathlib
import sys

ROOT = pathlib.Path(__file__).parent.parent
if __package__ in (None, ""):  # run as a script: the repository's root on the path, for tests.scripts
    sys.path.insert(0, str(ROOT))
from tests.scripts import load_script  # noqa: E402


#: The examples' problem sizes under the sanitizer: their first arguments (each defaults to a
#: benchmark size, up to 16384 tokens for the MoE layer, that takes the tools many minutes).
SMALL = {"gemm_5_fused_epilogue": (256,), "gemm_6_sparse": (256,), "gemm_7_moe": (256, 256, 512),
         "gemm_8_swiglu": (256, 256, 512), "gemm_9_w8a8": (256,), "gemm_11_dropout": (256,),
         "gemm_12_wgrad": (256, 256, 1024)}


def untimed():
    """Each example's timing loops cut to one call a contender: the tools check the kernels, and
    every extra launch costs them seconds."""
    import nbwgmma.bench
    import nbwgmma.demo

    times, report = nbwgmma.bench.device_times, nbwgmma.demo.gemm_report
    nbwgmma.bench.device_times = lambda torch, fns, warmup=2, repeats=15, inner=10: times(torch, fns, 0, 1, 1)
    nbwgmma.demo.gemm_report = lambda name, run, c, a, b, repeats=10: report(name, run, c, a, b, 1)


def examples():
    untimed()
    for path in sorted((ROOT / "examples").glob("*.py")):
        if path.stem.startswith("debug_"):
            continue  # deliberately broken
        mod = load_script("examples", path.stem)
        params = mod.main.__code__.co_varnames[:mod.main.__code__.co_argcount]
        kw = {"time_it": False} if "time_it" in params else {}
        args = SMALL.get(path.stem, (256,) if "size" in params else ())
        mod.main(*args, **kw)
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
    # operands TMA cannot read in place (rows not 16 bytes apart): the padded copy kernels first,
    # A copied as it is, B (N contiguous, N odd) transposed through shared memory; a batch of two
    for nb, m, k, n in ((1, 200, 133, 77), (2, 70, 131, 75)):
        a = torch.randn(nb, m, k, device="cuda", generator=g).bfloat16()
        b = torch.randn(nb, k, n, device="cuda", generator=g).bfloat16()
        c = matmul(a[0], b[0]) if nb == 1 else matmul(a, b)
        torch.cuda.synchronize()
        ref = (a.double() @ b.double())[0] if nb == 1 else a.double() @ b.double()
        rel = float((c.double() - ref).norm() / ref.norm())
        assert rel < 0.05, (nb, m, k, n, rel)
        print(f"ran matmul of staged operands {nb}x{m}x{n}x{k}: rel.err {rel:.2e}", flush=True)
    # an out TMA cannot write (131 columns: rows 262 bytes apart): the rows epilogue, parts through
    # shared memory stored a row per warp, clipped at M and N
    a = torch.randn(200, 136, device="cuda", generator=g).bfloat16()
    b = torch.randn(136, 131, device="cuda", generator=g).bfloat16()
    c = matmul(a, b, config={"bm": 128, "bn": 128})
    torch.cuda.synchronize()
    ref = a.double() @ b.double()
    rel = float((c.double() - ref).norm() / ref.norm())
    assert rel < 0.05, rel
    print(f"ran matmul into rows TMA cannot write: rel.err {rel:.2e}", flush=True)


def fused():
    """The library GEMM's fused epilogue (bias, gelu_tanh; an fp8 output with amax), and the grouped
    GEMM on both of its schedules, with more tiles than SMs (each CTA walks several: the epilogue
    warps' tile buffer is reused)."""
    import torch

    import nbwgmma.frontend.grouped as grouped_front
    from nbwgmma import grouped_matmul, matmul

    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(2048, 128, device="cuda", generator=g).bfloat16()
    w = torch.randn(4096, 128, device="cuda", generator=g).bfloat16()
    bias = torch.randn(4096, device="cuda", generator=g).bfloat16()
    ref = torch.nn.functional.gelu(a.double() @ w.double().t() + bias.double(), approximate="tanh")
    amax = torch.zeros(1, device="cuda")
    for name, kw in (("bf16", {}), ("e4m3 + amax", {"out_dtype": "e4m3", "amax": amax})):
        c = matmul(a, w.t(), bias=bias, activation="gelu_tanh", **kw)
        torch.cuda.synchronize()
        rel = float((c.double() - ref).norm() / ref.norm())
        assert rel < 0.05, (name, rel)
        print(f"ran fused {name}: rel.err {rel:.2e}", flush=True)
    offs = torch.tensor([700, 700, 2048], device="cuda", dtype=torch.int32)  # an empty group
    ws = torch.randn(3, 4096, 128, device="cuda", generator=g).bfloat16()
    rows = grouped_front.COOPERATIVE_ROWS
    for name, threshold in (("pingpong", 1 << 30), ("cooperative", 0)):
        grouped_front.COOPERATIVE_ROWS = threshold
        try:
            c = grouped_matmul(a, ws.transpose(1, 2), offs)
        finally:
            grouped_front.COOPERATIVE_ROWS = rows
        torch.cuda.synchronize()
        ref = torch.cat([a[:700].double() @ ws[0].double().t(), a[700:].double() @ ws[2].double().t()])
        rel = float((c.double() - ref).norm() / ref.norm())
        assert rel < 0.02, (name, rel)
        print(f"ran grouped {name}: rel.err {rel:.2e}", flush=True)


def scaled():
    """Block-scaled fp8 with A's scales in torch's layout (the scale warps copy them beside each
    stage) and row-major (the consumers read them), over several tiles and K blocks."""
    import torch

    from nbwgmma import matmul

    g = torch.Generator(device="cuda").manual_seed(0)
    m, n, k = 260, 264, 1024
    kb, nb = k // 128, -(-n // 128)
    a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    sw = torch.rand(nb, kb, device="cuda", generator=g) + 0.5
    ref = None
    sa = (torch.rand(kb, m, device="cuda", generator=g) + 0.5).t()  # M-major (torch's layout)
    for name, s in (("staged", sa), ("direct", sa.contiguous())):  # the same values, row-major
        c = matmul(a, w.t(), scale_a=s, scale_b=sw, out_dtype="f32")
        torch.cuda.synchronize()
        if ref is None:
            a64 = (a.double().view(m, kb, 128) * sa.double()[:, :, None]).view(m, k)
            w64 = w.double() * sw.double().repeat_interleave(128, 0)[:n].repeat_interleave(128, 1)
            ref = a64 @ w64.t()
        rel = float((c.double() - ref).norm() / ref.norm())
        assert rel < 1e-3, (name, rel)  # the fp8 tensor cores sum a 128-K block with fewer bits than f32
        print(f"ran block-scaled {name}: rel.err {rel:.2e}", flush=True)


if __name__ == "__main__":
    which = sys.argv[1:] or ["examples", "gemms", "fused", "scaled"]
    for w in which:
        globals()[w]()
