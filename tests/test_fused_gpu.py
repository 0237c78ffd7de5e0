"""matmul with a fused epilogue (bias, activation) on the GPU: PyTorch tensors against a
float64 reference, every activation, both bias kinds and none, bf16 and f16, ragged shapes,
long K; small integers exact; bad input refused."""

import math

import numpy as np
import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from nbwgmma import MatmulError, matmul  # noqa: E402

TOL = {"bf16": 1e-2, "f16": 2e-3}  # relative norm against float64: the rounding of C
TDT = {"bf16": torch.bfloat16, "f16": torch.float16}


def _act(name, x):
    if name is None:
        return x
    return {"relu": torch.relu, "gelu": torch.nn.functional.gelu, "silu": torch.nn.functional.silu,
            "sigmoid": torch.sigmoid,
            "gelu_tanh": lambda v: torch.nn.functional.gelu(v, approximate="tanh")}[name](x)


CASES = [("bf16", "col", "gelu_tanh", "f32"), ("bf16", "row", "relu", "bf16"), ("bf16", None, "silu", None),
         ("f16", "col", "gelu", "f16"), ("f16", "row", "sigmoid", "f32"), ("f16", "col", None, "f32")]
SHAPES = [(1000, 520, 328), (256, 384, 4096), (1, 128, 64), (8, 8, 8), (2048, 1032, 512)]


@pytest.mark.parametrize("t, where, act, bias_t", CASES)
def test_fused_matmul_matches_float64(t, where, act, bias_t):
    for m, n, k in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(m + 3 * n + 7 * k)
        x = torch.randn(m, k, device="cuda", generator=g).to(TDT[t])
        w = torch.randn(n, k, device="cuda", generator=g).to(TDT[t])
        bias = None
        x = (x.double() / math.sqrt(k)).to(TDT[t])  # keep the activations' inputs near 1
        ref = x.double() @ w.double().t()
        if where:
            shape = (n,) if where == "col" else (m, 1)
            bias = torch.randn(*shape, device="cuda", generator=g).to(getattr(torch, {"f32": "float32",
                                                                                     "bf16": "bfloat16",
                                                                                     "f16": "float16"}[bias_t]))
            ref = ref + bias.double()
        ref = _act(act, ref)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=TDT[t])
        c = matmul(x, w.t(), bias=bias, activation=act, out=out)
        assert c is out and torch.isfinite(c).all(), (m, n, k)
        rel = float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))
        assert rel <= TOL[t], f"{(m, n, k)}: relative error {rel:.3e}"


def test_row_major_weight_x_at_w_matches_float64():
    g = torch.Generator(device="cuda").manual_seed(9)
    for m, n, k in ((1000, 520, 328), (256, 384, 4096)):
        x = (torch.randn(m, k, device="cuda", generator=g) / math.sqrt(k)).bfloat16()
        w = torch.randn(k, n, device="cuda", generator=g).bfloat16()  # [K, N], N contiguous
        bias = torch.randn(n, device="cuda", generator=g)
        c = matmul(x, w, bias=bias, activation="silu")
        ref = torch.nn.functional.silu(x.double() @ w.double() + bias.double())
        rel = float(torch.linalg.norm(c.double() - ref) / torch.linalg.norm(ref))
        assert rel <= TOL["bf16"], ((m, n, k), rel)


def test_fused_matmul_is_exact_on_small_integers_and_allocates_its_output():
    g = torch.Generator(device="cuda").manual_seed(3)
    x = torch.randint(-2, 3, (300, 192), device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randint(-2, 3, (136, 192), device="cuda", generator=g).to(torch.bfloat16)
    bias = torch.randint(-8, 9, (136,), device="cuda", generator=g).float()
    c = matmul(x, w.t(), bias=bias, activation="relu")
    assert c.dtype == torch.bfloat16 and c.shape == (300, 136)
    ref = torch.relu(x.double() @ w.double().t() + bias.double())
    assert torch.equal(c.double(), ref)


def test_bad_bias_is_refused():
    x = torch.randn(64, 32, device="cuda").bfloat16()
    w = torch.randn(48, 32, device="cuda").bfloat16()
    with pytest.raises(MatmulError, match=r"bias must have shape \(48,\)"):
        matmul(x, w.t(), bias=torch.zeros(47, device="cuda"))
    with pytest.raises(MatmulError, match="bias"):
        matmul(x, w.t(), bias=torch.zeros(48))  # a host tensor
    with pytest.raises(MatmulError, match="activation must be one of"):
        matmul(x, w.t(), activation="tanh")


def test_user_epilogue_with_extras_matches_float64():
    from numba import cuda

    @cuda.jit(device=True)
    def scale_shift(v, row, col, s, shift, rowterm):
        return v * s + shift - rowterm

    g = torch.Generator(device="cuda").manual_seed(5)
    m, n, k = 1000, 520, 328
    x = (torch.randn(m, k, device="cuda", generator=g) / math.sqrt(k)).bfloat16()
    w = torch.randn(n, k, device="cuda", generator=g).bfloat16()
    bias = torch.randn(n, device="cuda", generator=g)
    shift = torch.randn(n, device="cuda", generator=g)
    rowterm = torch.randn(m, 1, device="cuda", generator=g).half()
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    matmul(x, w.t(), bias=bias, activation="gelu_tanh", epilogue=scale_shift, epilogue_args=(0.5, shift, rowterm),
           out=out)
    ref = torch.nn.functional.gelu(x.double() @ w.double().t() + bias.double(), approximate="tanh") * 0.5 \
        + shift.double() - rowterm.double()
    rel = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert rel <= TOL["bf16"], rel


def test_an_epilogue_that_does_not_compile_is_a_matmul_error_before_launch():
    from numba import cuda

    @cuda.jit(device=True)
    def broken(v, row, col):
        return v + undefined_name  # noqa: F821

    x = torch.randn(64, 32, device="cuda").bfloat16()
    w = torch.randn(48, 32, device="cuda").bfloat16()
    out = torch.full((64, 48), float("nan"), device="cuda", dtype=torch.bfloat16)
    with pytest.raises(MatmulError, match="the epilogue function broken does not compile"):
        matmul(x, w.t(), epilogue=broken, out=out)
    torch.cuda.synchronize()
    assert torch.isnan(out.float()).all()  # nothing ran


def test_alpha_beta_c_match_torch_addmm_and_work_in_place():
    g = torch.Generator(device="cuda").manual_seed(2)
    m, n, k = 1000, 520, 328
    x = (torch.randn(m, k, device="cuda", generator=g) / math.sqrt(k)).bfloat16()
    w = torch.randn(n, k, device="cuda", generator=g).bfloat16()
    c = torch.randn(m, n, device="cuda", generator=g).bfloat16()
    got = matmul(x, w.t(), c=c.t().contiguous().t(), alpha=0.5, beta=-2.0)
    ref = 0.5 * (x.double() @ w.double().t()) - 2.0 * c.double()
    assert float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref)) <= TOL["bf16"]
    acc = c.clone()
    matmul(x, w.t(), c=acc, out=acc)  # accumulate in place, beta 1
    ref = x.double() @ w.double().t() + c.double()
    assert float(torch.linalg.norm(acc.double() - ref) / torch.linalg.norm(ref)) <= TOL["bf16"]


@pytest.mark.parametrize("fmt, tdt, n", [("e4m3", "float8_e4m3fn", 520), ("e5m2", "float8_e5m2", 520),
                                         ("e4m3", "float8_e4m3fn", 528), ("e5m2", "float8_e5m2", 1040)])
def test_fp8_output_with_scale_and_amax(fmt, tdt, n):
    """bf16 x @ w.T + bias, gelu_tanh, times scale_out, rounded to fp8: each code is the float64
    result's rounding or a neighbour (the kernel rounds its f32 value); amax is the largest
    |result| within f32 precision; small integers are exact. Rows of 520 bytes go out by plain
    stores, 528 and 1040 through shared memory and TMA."""
    g = torch.Generator(device="cuda").manual_seed(5)
    m, k = 1000, 4096
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    w = torch.randn(n, k, device="cuda", generator=g).bfloat16()
    bias = torch.randn(n, device="cuda", generator=g).bfloat16()
    ref = torch.nn.functional.gelu(x.double() @ w.double().t() + bias.double(), approximate="tanh")
    amax = torch.full((1,), 0.0, device="cuda")
    out = torch.full((m, n), float("nan"), device="cuda").to(getattr(torch, tdt))
    got = matmul(x, w.t(), bias=bias, activation="gelu_tanh", out=out, scale_out=0.25, amax=amax)
    assert got is out
    want = (ref * 0.25).to(getattr(torch, tdt)).double()  # float64's result rounded to the format
    err = (got.double() - want).abs()
    ulp = {"e4m3": 2.0 ** -3, "e5m2": 2.0 ** -2}[fmt]  # one code's step, relative
    assert torch.all(err <= want.abs() * ulp + 2.0 ** -9), float(err.max())
    assert float((err == 0).double().mean()) > 0.99
    assert abs(float(amax) - float(ref.abs().max())) <= 1e-4 * float(ref.abs().max())
    # exact: small integers, scale 1, results within the format's integers
    xi = torch.randint(-2, 3, (200, 64), device="cuda", generator=g).bfloat16()
    wi = torch.randint(-2, 3, (72, 64), device="cuda", generator=g).bfloat16()
    amax.zero_()
    got = matmul(xi, wi.t(), out_dtype=fmt, amax=amax)
    exact = xi.double() @ wi.double().t()
    assert got.dtype == getattr(torch, tdt) and torch.equal(got.double(), exact.to(getattr(torch, tdt)).double())
    assert float(amax) == float(exact.abs().max())


@pytest.mark.parametrize("m, n, k, t, config", [
    (16, 4096, 1024, "bf16", None),                 # swapped small M: codes stored from the registers
    (16, 4096, 4096, "bf16", None),                 # swapped, K halves in a cluster
    (200, 1024, 8192, "bf16", None),                # K slices
    (3000, 2000, 512, "bf16", None),                # 64-column multiples (fp8 codes go through TMA)
    (2048, 2048, 1024, "e4m3", {"bm": 128, "bn": 256}),  # fp8 in and out, amax in 4 parts
    (1000, 1000, 328, "bf16", {"bm": 128, "bn": 192}),   # 3 parts of 64 columns, ragged edges
])
def test_library_fp8_output_matches_float64(m, n, k, t, config):
    """fp8 outputs with a bias, gelu_tanh, scale_out and amax on the library GEMM: each code the
    float64 result's rounding or a neighbour, amax within f32 of the float64 one."""
    from nbwgmma.frontend.matmul import last_plan

    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    dt = torch.float8_e4m3fn if t == "e4m3" else torch.bfloat16
    x = (torch.randn(m, k, device="cuda", generator=g) * (4 if t == "e4m3" else 1)).to(dt)
    w = (torch.randn(n, k, device="cuda", generator=g) * (4 if t == "e4m3" else 1)).to(dt)
    bias = torch.randn(n, device="cuda", generator=g).bfloat16()
    sa = 0.125 if t == "e4m3" else 1.0
    ref = torch.nn.functional.gelu(x.double() @ w.double().t() * sa * sa + bias.double(), approximate="tanh")
    amax = torch.zeros(1, device="cuda")
    out = torch.full((m, n), float("nan"), device="cuda").to(torch.float8_e4m3fn)
    kw = dict(bias=bias, activation="gelu_tanh", scale_out=0.25, out_dtype="e4m3")
    if t == "e4m3":
        kw.update(scale_a=sa, scale_b=sa)
    matmul(x, w.t(), out=out, amax=amax, config=config, **kw)
    assert last_plan().cfg.out == "e4m3" and last_plan().cfg.amax
    want = (ref * 0.25).to(torch.float8_e4m3fn).double()
    err = (out.double() - want).abs()
    # (fp8 inputs: the tensor cores' fp8 accumulation is off by about 1e-3 of the sums (0.77 of sums
    # near 500 before the scales, measured), which moves a few small codes further than one step)
    slack = 2.0 ** -6 if t == "e4m3" else 2.0 ** -9
    assert torch.all(err <= want.abs() * 2.0 ** -3 + slack), float(err.max())
    assert float((err == 0).double().mean()) > 0.99
    tol = 3e-3 if t == "e4m3" else 1e-4  # (fp8 inputs: measured 1.2e-3 at 2048 x 2048 x 1024)
    assert abs(float(amax) - float(ref.abs().max())) <= tol * float(ref.abs().max())


@pytest.mark.parametrize("fp8, out_dtype", [("float8_e4m3fn", None), ("float8_e5m2", "f16"),
                                            ("float8_e4m3fn", "e4m3")])
def test_fp8_inputs_with_bias_and_activation(fp8, out_dtype):
    """fp8 x @ w.T with per-tensor scales, a column bias and gelu_tanh, against float64 of the same
    fp8 values; bf16 (default), f16 or e4m3 out; ragged M and N, K a multiple of 16."""
    g = torch.Generator(device="cuda").manual_seed(9)
    m, n, k = 1000, 528, 4112  # (an e4m3 C's rows of 528 bytes: stored through TMA)
    tdt = getattr(torch, fp8)
    x = (torch.randn(m, k, device="cuda", generator=g) * 2).to(tdt)
    w = (torch.randn(n, k, device="cuda", generator=g) * 2).to(tdt)
    bias = torch.randn(n, device="cuda", generator=g).bfloat16()
    sa, sb = 0.5, 0.125
    ref = torch.nn.functional.gelu(sa * sb * (x.double() @ w.double().t()) + bias.double(), approximate="tanh")
    got = matmul(x, w.t(), bias=bias, activation="gelu_tanh", scale_a=sa, scale_b=sb, out_dtype=out_dtype)
    assert got.dtype == {None: torch.bfloat16, "f16": torch.float16, "e4m3": torch.float8_e4m3fn}[out_dtype]
    tol = {None: 1e-2, "f16": 2e-3, "e4m3": 7e-2}[out_dtype]
    err = float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref))
    assert err < tol, err


@pytest.mark.parametrize("m, n, k, where, act, t", [
    (16, 4096, 1024, "col", "gelu_tanh", "bf16"),   # swapped small M: the bias per row of C^T
    (32, 4096, 4096, "col", "gelu_tanh", "bf16"),   # swapped, K halves in a cluster
    (5000, 3000, 512, "row", "silu", "bf16"),       # swapped 256 x 152 tiles, C^T in parts of 80 and 72
    (1024, 1024, 1024, "col", "relu", "f16"),       # 64-row tiles
    (200, 1024, 8192, "col", "gelu", "bf16"),       # K slices
    (3000, 2056, 4096, None, "sigmoid", "f16"),
    (777, 1000, 300, "col", "gelu_tanh", "f32 out"),  # register stores of an f32 C
    (520, 264, 256, "row", "relu", "tf32"),
])
def test_library_epilogue_matches_float64(m, n, k, where, act, t):
    """A bias and/or activation alone run on the library GEMM (its tile model's paths), against
    float64."""
    from nbwgmma.frontend.matmul import last_plan

    g = torch.Generator(device="cuda").manual_seed(m + 5 * n + k)
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32 out": torch.bfloat16, "tf32": torch.float32}[t]
    x = (torch.randn(m, k, device="cuda", generator=g) / math.sqrt(k)).to(dt)
    w = torch.randn(n, k, device="cuda", generator=g).to(dt)
    bias = None if where is None else torch.randn(n if where == "col" else m, device="cuda", generator=g)
    vec = None if bias is None else (bias if where == "col" else bias[:, None])
    odt = torch.float32 if t in ("f32 out", "tf32") else dt
    out = torch.full((m, n), float("nan"), device="cuda", dtype=odt)
    matmul(x, w.t(), bias=vec, activation=act, out=out)
    assert last_plan().cfg.act == act and last_plan().cfg.bias == (None if where is None else
                                                                   {"col": "row", "row": "col"}[where]
                                                                   if last_plan().swap else where)
    ref = x.double() @ w.double().t()
    if bias is not None:
        ref = ref + (bias.double() if where == "col" else bias.double()[:, None])
    ref = _act(act, ref)
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert err < {"bf16": 1e-2, "f16": 2e-3, "f32 out": 1e-4, "tf32": 2e-3}[t], err


@pytest.mark.parametrize("m, n, k, t", [
    (16, 4096, 1024, "bf16"),      # swapped small M: the function gets C^T's column as its row
    (16, 4096, 4096, "bf16"),      # swapped, K halves in a cluster
    (5000, 3000, 512, "bf16"),     # 256 x 160 tiles, C in parts through two slots (not swapped with a function)
    (200, 1024, 8192, "f16"),      # K slices
    (777, 1000, 300, "f32 out"),   # register stores of an f32 C
    (520, 264, 256, "tf32"),
    (1000, 520, 328, "x @ w"),     # B row-major (MN-major)
])
def test_library_user_epilogue_matches_float64(m, n, k, t):
    """A user function with a number, a bf16 vector per column, an f16 vector per row, and its row
    and column, after a bias and gelu_tanh, on the library GEMM, against float64."""
    from numba import cuda

    from nbwgmma.frontend.matmul import last_plan

    @cuda.jit(device=True)
    def mix(v, row, col, s, shift, rowterm):
        return v * s + shift - rowterm + (row % 7) * 0.25 - (col % 5) * 0.125

    g = torch.Generator(device="cuda").manual_seed(m + 3 * n + k)
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32 out": torch.bfloat16, "tf32": torch.float32,
          "x @ w": torch.bfloat16}[t]
    x = (torch.randn(m, k, device="cuda", generator=g) / math.sqrt(k)).to(dt)
    w = torch.randn(n, k, device="cuda", generator=g).to(dt)
    b = w.t().contiguous() if t == "x @ w" else w.t()
    bias = torch.randn(n, device="cuda", generator=g)
    shift = torch.randn(n, device="cuda", generator=g).bfloat16()
    rowterm = torch.randn(m, 1, device="cuda", generator=g).half()
    odt = torch.float32 if t in ("f32 out", "tf32") else dt
    out = torch.full((m, n), float("nan"), device="cuda", dtype=odt)
    kw = dict(bias=bias, activation="gelu_tanh", epilogue=mix, epilogue_args=(0.5, shift, rowterm))
    matmul(x, b, out=out, **kw)
    assert last_plan().cfg.user is not None and last_plan().cfg.extras[1][1] == "bf16"  # read as bf16 bits
    rows, cols = (torch.arange(d, device="cuda", dtype=torch.float64) for d in (m, n))
    ref = _act("gelu_tanh", x.double() @ w.double().t() + bias.double()) * 0.5 + shift.double() - rowterm.double() \
        + (rows % 7)[:, None] * 0.25 - (cols % 5)[None, :] * 0.125
    err = float(torch.linalg.norm(out.double() - ref) / torch.linalg.norm(ref))
    assert err < {"bf16": 1e-2, "f16": 2e-3, "f32 out": 1e-4, "tf32": 2e-3, "x @ w": 1e-2}[t], err


def test_repeated_fused_calls_take_the_quick_path_with_each_calls_bias():
    """A repeated bias + activation call of PyTorch tensors skips the checks (the fast path: the
    last full-path plan stays another problem's) and reads each call's own bias."""
    from nbwgmma.frontend.matmul import last_plan

    g = torch.Generator(device="cuda").manual_seed(11)
    x = torch.randint(-2, 3, (200, 96), device="cuda", generator=g).to(torch.bfloat16)
    w = torch.randint(-2, 3, (136, 96), device="cuda", generator=g).to(torch.bfloat16)
    other = torch.randint(-2, 3, (64, 96), device="cuda", generator=g).to(torch.bfloat16)
    for _ in range(2):  # the second round's first call may register the quick path
        matmul(x, w.t(), bias=torch.zeros(136, device="cuda", dtype=torch.bfloat16), activation="relu")
        matmul(other, w.t(), bias=torch.zeros(136, device="cuda", dtype=torch.bfloat16), activation="relu")
    seen = last_plan()
    for shift in (-3.0, 5.0):
        bias = torch.randint(-8, 9, (136,), device="cuda", generator=g).to(torch.bfloat16) + shift
        got = matmul(x, w.t(), bias=bias, activation="relu")
        assert torch.equal(got.double(), torch.relu(x.double() @ w.double().t() + bias.double()))
    param = torch.nn.Parameter(bias + 1)  # (an nn.Linear's bias takes it too)
    got = matmul(x, w.t(), bias=param, activation="relu")
    assert torch.equal(got.double(), torch.relu(x.double() @ w.double().t() + param.detach().double()))
    assert last_plan() is seen  # no full-path call since


def test_strided_bias_on_a_side_stream():
    """A strided bias (its f32 copy made by PyTorch) with ``stream=``: the copy is made on that
    stream, where the kernel reads it."""
    g = torch.Generator(device="cuda").manual_seed(11)
    x = torch.randint(-2, 3, (300, 256), device="cuda", generator=g).bfloat16()
    w = torch.randint(-2, 3, (264, 256), device="cuda", generator=g).bfloat16()
    wide = torch.randint(-8, 9, (264, 2), device="cuda", generator=g).bfloat16()
    side = torch.cuda.Stream()
    out = torch.full((300, 264), float("nan"), device="cuda", dtype=torch.bfloat16)
    side.wait_stream(torch.cuda.current_stream())
    matmul(x, w.t(), bias=wide[:, 0], activation="relu", out=out, stream=side)
    side.synchronize()
    assert torch.equal(out.double(), torch.relu(x.double() @ w.double().t() + wide[:, 0].double()))


@pytest.mark.isolated(timeout=300)  # (a hang fails this test, not the suite)
@pytest.mark.parametrize("m, n, k, epi", [(4100, 2048, 256, {}), (2056, 4104, 192, {"activation": "relu"}),
                                          (4100, 2060, 128, {"bias": True})])
def test_large_fp8_output_amax_is_exact(m, n, k, epi):
    """e4m3 codes and amax of 2^23 outputs and more on the library GEMM (two or more tiles per CTA:
    each warp's running maximum over them), small integers so both are exact; ragged edges whose
    padding holds a bias (masked maxima), none (TMA stores) or relu (direct stores; padding zero:
    no mask). amax accumulates into the value it holds."""
    g = torch.Generator(device="cuda").manual_seed(m + n)
    x = torch.randint(-2, 3, (m, k), device="cuda", generator=g).bfloat16()
    w = torch.randint(-2, 3, (n, k), device="cuda", generator=g).bfloat16()
    if epi.get("bias"):  # the last column: below 100 in every row of C, 100 in the padding rows past M
        x, w[-1] = x.abs() + 1, -1
    ref, kw = x.double() @ w.double().t() / 16, {}
    if epi.get("bias"):
        bias = torch.randint(-4, 5, (n,), device="cuda", generator=g).bfloat16()
        bias[-1] = 100
        ref, kw = ref + bias.double(), {"bias": bias}
    if epi.get("activation"):
        ref, kw = torch.relu(ref), {"activation": "relu"}
    out = torch.full((m, n), float("nan"), device="cuda").to(torch.float8_e4m3fn)
    amax = torch.full((1,), 0.5, device="cuda")
    matmul(x, w.t(), out=out, alpha=1 / 16, scale_out=0.5, amax=amax, **kw)
    assert torch.equal(out.double(), (ref * 0.5).to(torch.float8_e4m3fn).double())
    assert float(amax) == max(0.5, float(ref.abs().max()))


@pytest.mark.isolated(timeout=300)
@pytest.mark.parametrize("vtype", [np.float32, np.float16])
def test_strided_numba_vectors_are_copied(vtype):
    """Strided Numba vectors (a bias, a function's per-row vector) are copied into contiguous f32
    ones and read by the library GEMM, the call on a stream of its own; exact on small integers.
    (A blocking stream: this does not tell a copy on the call's stream from one on the legacy
    default stream.)"""
    from numba import cuda

    @cuda.jit(device=True)
    def plus_row(v, row, col, r):
        return v + r

    rng = np.random.default_rng(3)
    m, n, k = 300, 264, 128
    a = rng.integers(-2, 3, (m, k)).astype(np.float16)
    b = rng.integers(-2, 3, (k, n)).astype(np.float16)
    bias = rng.integers(-8, 9, (n, 3)).astype(vtype)
    rows = rng.integers(-4, 5, (m, 2)).astype(vtype)
    s = cuda.stream()
    da, db, dbias, drows = (cuda.to_device(v, stream=s) for v in (a, b, bias, rows))
    out = cuda.to_device(np.full((m, n), np.nan, np.float16), stream=s)
    matmul(da, db, bias=dbias[:, 1], activation="relu", epilogue=plus_row, epilogue_args=(drows[:, 1:2],),
           out=out, stream=s)
    s.synchronize()
    ref = np.maximum(a.astype(np.float64) @ b + bias[:, 1], 0) + rows[:, 1:2]
    np.testing.assert_array_equal(out.copy_to_host().astype(np.float64), ref)


def test_k_zero_products_run_their_epilogue():
    """K = 0 with a bias, an activation, C or fp8 block scales: PyTorch's values for the empty
    sum (``addmm`` of an empty product, ``gelu(bias)``), for 2-D products and batches."""
    m, n = 96, 136
    x, w = torch.empty(m, 0, device="cuda", dtype=torch.bfloat16), torch.empty(n, 0, device="cuda",
                                                                              dtype=torch.bfloat16)
    bias = torch.randn(n, device="cuda")
    got = matmul(x, w.t(), bias=bias, activation="gelu_tanh")
    want = torch.nn.functional.gelu(bias.double(), approximate="tanh").expand(m, n)
    assert float((got.double() - want).abs().max()) <= 1e-2
    c = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    got = matmul(x, w.t(), c=c, beta=0.5, alpha=2.0)
    torch.testing.assert_close(got, torch.addmm(c, x, w.t(), beta=0.5, alpha=2.0), rtol=0, atol=0)
    xb = torch.empty(3, m, 0, device="cuda", dtype=torch.float16)
    got = matmul(xb, torch.empty(3, 0, n, device="cuda", dtype=torch.float16), bias=bias.half(), activation="relu")
    assert torch.equal(got, torch.relu(bias.half()).expand(3, m, n))
    x8, w8 = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    got = matmul(x8, w8.t(), scale_a=torch.ones(m, 0, device="cuda"), scale_b=torch.ones(2, 0, device="cuda"),
                 bias=bias, activation="relu", out_dtype="f32")
    assert torch.equal(got, torch.relu(bias).expand(m, n))
