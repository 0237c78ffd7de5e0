"""matmul captured in a CUDA graph (``torch.cuda.graph``, as ``torch.compile(mode="reduce-overhead")``
captures it) and replayed with new inputs: every path that keeps state between calls (staging
buffers, split-K and stream-K scratch, the rows epilogue, amax, batches) against float64.

Each case is captured twice: after a warm-up call on another stream (PyTorch's recipe), and as
the first call of its plan ever (the compile and every allocation inside the capture)."""

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from nbwgmma import matmul  # noqa: E402

# name: (a's shape, b's shape (stored transposed where "t"), matmul's keywords)
CASES = {
    "tma": ((256, 512), (384, 512, "t"), {}),
    "staged_k": ((200, 513), (300, 513, "t"), {}),
    "rows_out": ((256, 512), (1001, 512, "t"), {}),
    "split_k": ((128, 4096), (256, 4096, "t"), {"config": {"bm": 128, "bn": 128, "split": 4}}),
    "stream_k": ((384, 1024), (512, 1024, "t"), {"config": {"bm": 128, "bn": 128, "stream_k": 1}}),
    "bias_gelu": ((256, 512), (384, 512, "t"), {"bias": (384,), "activation": "gelu_tanh"}),
    "batched": ((3, 200, 256), (3, 320, 256, "t"), {}),
    "few_rows": ((16, 2048), (1024, 2048, "t"), {}),
}


def _fill(tensors, gen):
    for t in tensors:
        t.copy_(torch.randn(t.shape, device="cuda", generator=gen) / t.shape[-1] ** 0.5)


def _reference(a, b, kw):
    r = a.double() @ b.double()
    if "bias" in kw:
        r = torch.nn.functional.gelu(r + kw["bias"].double(), approximate="tanh")
    return r


def _setup(name, shift):
    (sa, sb, kw) = CASES[name]
    # a per-capture size shift makes the no-warm-up capture a plan never seen before in the process
    sa = (*sa[:-2], sa[-2] + shift, sa[-1])
    a = torch.empty(sa, device="cuda", dtype=torch.bfloat16)
    bs = torch.empty(sb[:-1], device="cuda", dtype=torch.bfloat16)
    b = bs.transpose(-1, -2)
    kw = dict(kw)
    vectors = []
    if "bias" in kw:
        kw["bias"] = torch.empty(kw["bias"], device="cuda", dtype=torch.bfloat16)
        vectors.append(kw["bias"])
    out = torch.empty((*sa[:-1], b.shape[-1]), device="cuda", dtype=torch.bfloat16)
    return a, bs, b, kw, out, [a, bs, *vectors]


@pytest.mark.parametrize("warm", [True, False], ids=["warmed", "cold"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_replays_follow_new_inputs(name, warm):
    a, _, b, kw, out, inputs = _setup(name, 0 if warm else 8)
    gen = torch.Generator(device="cuda").manual_seed(len(name))
    _fill(inputs, gen)
    if warm:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            matmul(a, b, out=out, **kw)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        matmul(a, b, out=out, **kw)
    # eager calls of the same plan on other arrays, before and beside each replay (on another
    # stream: a buffer the graph shared with them would race), must not disturb it
    a2, _, b2, kw2, out2, inputs2 = _setup(name, 0 if warm else 8)
    side = torch.cuda.Stream()
    for _ in range(2):
        _fill(inputs + inputs2, gen)
        out.fill_(float("nan"))
        out2.fill_(float("nan"))
        matmul(a2, b2, out=out2, **kw2)
        side.wait_stream(torch.cuda.current_stream())
        graph.replay()
        with torch.cuda.stream(side):
            for _ in range(3):
                matmul(a2, b2, out=out2, **kw2)
        torch.cuda.synchronize()
        for o, x, y, k_ in ((out, a, b, kw), (out2, a2, b2, kw2)):
            ref = _reference(x, y, k_)
            rel = float(torch.linalg.norm(o.double() - ref) / torch.linalg.norm(ref))
            assert torch.isfinite(o).all() and rel <= 1e-2, (name, rel)


def test_fp8_out_with_amax_replays():
    """e4m3 out with amax: the graph holds the atomic max; the caller zeroes amax before each replay
    (as before each eager call)."""
    m, n, k = 256, 384, 512
    gen = torch.Generator(device="cuda").manual_seed(5)
    a = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)
    bs = torch.empty(n, k, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.float8_e4m3fn)
    amax = torch.zeros(1, device="cuda", dtype=torch.float32)
    _fill([a, bs], gen)
    matmul(a, bs.t(), out=out, amax=amax, scale_out=2.0)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        amax.zero_()
        matmul(a, bs.t(), out=out, amax=amax, scale_out=2.0)
    for _ in range(2):
        _fill([a, bs], gen)
        amax.fill_(float("nan"))
        out.view(torch.uint8).fill_(0x7F)  # e4m3 NaN
        graph.replay()
        torch.cuda.synchronize()
        ref = a.double() @ bs.double().t()
        want = (2.0 * ref).clamp(-448, 448)
        err = (out.double() - want).abs()
        assert bool((err <= want.abs() * 2 ** -4 + 2 ** -9).all()), float(err.max())  # (3 mantissa bits)
        assert abs(float(amax) - float(ref.abs().max())) <= 1e-3 * float(ref.abs().max())


@pytest.mark.parametrize("config", [None, {"bm": 128, "bn": 128, "split": 3}], ids=["plain", "split_k"])
def test_cupy_stream_capture_replays(config):
    """CuPy's capture (``Stream.begin_capture``) of a call whose operands are staged (K = 515: rows
    not 16 bytes apart) as its first call, with a strided bias (converted to f32 for the kernel):
    the staging buffers, scratch and converted bias outlive the capture, however CuPy's pool is
    used after it."""
    cupy = pytest.importorskip("cupy")
    import numpy as np

    m, n, k = 300, 260, 515 + (config is not None) * 2048
    rng = np.random.default_rng(k)
    a = cupy.empty((m, k), cupy.float16)
    b = cupy.empty((k, n), cupy.float16)
    bias2 = cupy.empty((n, 2), cupy.float16)
    out = cupy.full((m, n), np.nan, cupy.float16)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        matmul(a, b, out=out, bias=bias2[:, 0], stream=s, config=config)
        graph = s.end_capture()
    for _ in range(2):
        ha = rng.standard_normal((m, k)).astype(np.float16)
        hb = (rng.standard_normal((k, n)) / k ** 0.5).astype(np.float16)
        hbias = rng.standard_normal(n).astype(np.float16)
        a.set(ha)
        b.set(hb)
        bias2[:, 0] = cupy.asarray(hbias)
        out.fill(np.nan)
        churn = [cupy.full(4096, 7.0, cupy.float32) for _ in range(64)]  # (freed blocks handed out again)
        del churn
        cupy.cuda.Device().synchronize()
        graph.launch(stream=s)
        s.synchronize()
        ref = ha.astype(np.float64) @ hb.astype(np.float64) + hbias.astype(np.float64)
        got = cupy.asnumpy(out).astype(np.float64)
        rel = np.linalg.norm(got - ref) / np.linalg.norm(ref)
        assert np.isfinite(got).all() and rel <= 1e-2, rel


@pytest.mark.parametrize("stream_k, strip", [(False, False), (True, False), (False, True)],
                         ids=["tiles", "stream_k", "strip"])
def test_block_scaled_fp8_replays(stream_k, strip, monkeypatch):
    """Block-scaled fp8 (1 x 128 and 128 x 128 scales) captured as a first call, whole tiles,
    stream-K (its scratch and counters the graph's own) and the strip kernel (256 x 128 tiles and
    N's last 40 columns in 256 x 64 ones): exact on small integers with power-of-two scales, new
    values at each replay."""
    from nbwgmma.frontend import scaled as front

    from .test_scaled_gpu import reference, small_integers

    monkeypatch.setattr(front, "stream_tiles", lambda *a, **k: stream_k)
    monkeypatch.setattr(front, "strip_tiles", lambda *a, **k: strip)
    m, n, k = 1000, 296 if strip else 520 + 8 * stream_k, 336
    xq, sx, wq, sw = small_integers(m, n, k)
    sa, sb = sx.t().contiguous().t(), sw.t()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        matmul(xq, wq.t(), scale_a=sa, scale_b=sb, out=out)
    for seed in range(2):
        nxq, nsx, nwq, nsw = small_integers(m, n, k)
        xq.copy_(nxq.flip(0) if seed else nxq)
        wq.copy_(nwq)
        sa.copy_(nsx)
        sb.copy_(nsw.t())
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ref = reference(xq, sa, wq, sb.t()).to(torch.bfloat16).double()
        assert torch.equal(out.double(), ref), (stream_k, strip, seed)


def test_compiled_reduce_overhead_mlp_follows_new_inputs():
    """``torch.compile(mode="reduce-overhead")`` (CUDA graphs) of an MLP of nbwgmma Linears, one of
    them with 250 input features (its operand staged: rows of 500 bytes): each step's output
    equals the eager model's on the same input, and is within bf16's rounding of float64."""
    import nbwgmma.torch as nbt

    torch.manual_seed(3)
    mlp = torch.nn.Sequential(nbt.Linear(250, 512, activation="gelu_tanh"), nbt.Linear(512, 136)).cuda().bfloat16()
    compiled = torch.compile(mlp, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for step in range(4):
            x = torch.randn(96, 250, device="cuda").bfloat16()
            torch.compiler.cudagraph_mark_step_begin()
            got = compiled(x).clone()
            want = mlp(x)
            assert torch.equal(got, want), step
            w1, b1, w2, b2 = (p.double() for p in mlp.parameters())
            h = torch.nn.functional.gelu(x.double() @ w1.t() + b1, approximate="tanh").bfloat16().double()
            ref = h @ w2.t() + b2
            assert float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref)) <= 1e-2, step


@pytest.mark.parametrize("layout", ["K", "staged"])
def test_sparse_weight_replays(layout):
    """``x @ w24.t()`` with a 2:4-sparse weight captured as a first call: x read in place (K
    contiguous) or copied K-major by PyTorch (M contiguous: the copy the graph's own). Exact on
    small integers, new x at each replay."""
    from nbwgmma import Sparse24

    m, n, k = 300, 264, 512
    g = torch.Generator(device="cuda").manual_seed(11)
    w = torch.randint(-2, 3, (n, k), device="cuda", generator=g).bfloat16()
    w24 = Sparse24.from_dense(w, prune=True)
    dense = w24.to_dense().double()
    x = torch.empty(m, k, device="cuda", dtype=torch.bfloat16) if layout == "K" else \
        torch.empty(k, m, device="cuda", dtype=torch.bfloat16).t()
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        matmul(x, w24.t(), out=out)
    for _ in range(2):
        x.copy_(torch.randint(-2, 3, (m, k), device="cuda", generator=g).bfloat16())
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out.double(), (x.double() @ dense.t()).bfloat16().double()), layout


def test_host_reads_are_refused_in_a_capture():
    """A one-element scale array (read on the host at each call) and grouped_matmul's
    validate=True (offs read on the host) are clear errors inside a capture, not a capture that
    keeps the values it saw."""
    from nbwgmma import MatmulError, grouped_matmul

    a8 = torch.randn(128, 256, device="cuda").to(torch.float8_e4m3fn)
    b8 = torch.randn(192, 256, device="cuda").to(torch.float8_e4m3fn)
    one = torch.ones(1, device="cuda")
    x = torch.randn(256, 128, device="cuda").bfloat16()
    w = torch.randn(2, 64, 128, device="cuda").bfloat16()
    offs = torch.tensor([100, 256], device="cuda", dtype=torch.int32)
    for call in (lambda: matmul(a8, b8.t(), scale_a=one, scale_b=2.0),
                 lambda: grouped_matmul(x, w.transpose(1, 2), offs, validate=True),
                 lambda: grouped_matmul(x.t(), x, offs, validate=True)):
        graph = torch.cuda.CUDAGraph()
        with pytest.raises(MatmulError, match="CUDA graph"):
            with torch.cuda.graph(graph):
                call()


@pytest.mark.parametrize("form", ["moe", "masked", "wgrad"])
def test_grouped_first_call_captured(form):
    """grouped_matmul captured as the first call of its kind in a fresh process (its kernel
    compiled or read from the disk cache and loaded, offs passed to the launch, all inside the
    capture) in each form, new values and counts at each replay. (In this process another test
    may have loaded the kernel already, and the capture would not load it.)"""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    child = f"from tests.test_graphs_gpu import grouped_first_call_captured as f; f({form!r}); print('ok')"
    r = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, cwd=root, timeout=300)
    assert r.returncode == 0 and r.stdout.split()[-1:] == ["ok"], r.stderr[-3000:]


def grouped_first_call_captured(form):
    """The body of :func:`test_grouped_first_call_captured`, run in a fresh process."""
    from nbwgmma import grouped_matmul

    g_, n, k = 3, 136, 200
    gen = torch.Generator(device="cuda").manual_seed(len(form))
    if form == "wgrad":  # A (M, total) and B (total, N): one product per group of the total
        a = torch.empty(72, 384, device="cuda", dtype=torch.bfloat16)
        b = torch.empty(384, n, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(g_, 72, n, device="cuda", dtype=torch.bfloat16)
    elif form == "masked":
        a = torch.empty(g_, 160, k, device="cuda", dtype=torch.bfloat16)
        b = torch.empty(g_, n, k, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        out = torch.empty(g_, 160, n, device="cuda", dtype=torch.bfloat16)
    else:
        a = torch.empty(416, k, device="cuda", dtype=torch.bfloat16)
        b = torch.empty(g_, n, k, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        out = torch.empty(416, n, device="cuda", dtype=torch.bfloat16)
    offs = torch.zeros(g_, device="cuda", dtype=torch.int32)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        grouped_matmul(a, b, offs, out=out)
    for sizes in ([100, 0, 60], [17, 130, 13]) if form == "masked" else ([128, 0, 256], [40, 300, 44]):
        a.copy_(torch.randint(-2, 3, a.shape, device="cuda", generator=gen))
        b.copy_(torch.randint(-2, 3, b.shape, device="cuda", generator=gen))
        counts = torch.tensor(sizes, device="cuda", dtype=torch.int32)
        offs.copy_(counts if form == "masked" else counts.cumsum(0).int())  # (masked: counts; else running ends)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        ends = offs.tolist()
        for i in range(g_):
            if form == "masked":
                want = a[i, :sizes[i]].double() @ b[i].double()
                got = out[i, :sizes[i]]
            elif form == "wgrad":
                lo = ends[i - 1] if i else 0
                want = a[:, lo:ends[i]].double() @ b[lo:ends[i]].double()
                got = out[i]
            else:
                lo = ends[i - 1] if i else 0
                want = a[lo:ends[i]].double() @ b[i].double()
                got = out[lo:ends[i]]
            assert torch.equal(got.double(), want.bfloat16().double()), (form, sizes, i)  # (one rounding)


def test_compiled_reduce_overhead_training_steps_match_eager():
    """``torch.compile(mode="reduce-overhead")`` of forward and backward through nbwgmma Linears
    (the backward's products on the same GEMM, one operand staged: 250 features): each step's
    loss and gradients equal the eager model's on the same batch."""
    import copy

    import nbwgmma.torch as nbt

    torch.manual_seed(4)
    eager = torch.nn.Sequential(nbt.Linear(250, 256, activation="silu"), nbt.Linear(256, 72)).cuda().bfloat16()
    model = copy.deepcopy(eager)
    compiled = torch.compile(model, mode="reduce-overhead")
    for step in range(4):
        x = torch.randn(128, 250, device="cuda").bfloat16()
        torch.compiler.cudagraph_mark_step_begin()
        loss = compiled(x).float().square().mean()
        loss.backward()
        want = eager(x).float().square().mean()
        want.backward()
        assert torch.allclose(loss, want, rtol=1e-3), step
        for p, q in zip(model.parameters(), eager.parameters()):
            assert p.grad is not None and torch.allclose(p.grad.float(), q.grad.float(), rtol=2e-2, atol=1e-3), step
            p.grad = q.grad = None


def test_cupy_capture_of_a_first_launch():
    """A user kernel's first ``launch()`` with CuPy arrays inside CuPy's capture: CuPy's arrays name
    their stream in ``__cuda_array_interface__``, and the launch must not synchronize it (illegal
    while capturing). Each replay follows new values."""
    cupy = pytest.importorskip("cupy")
    import numpy as np
    from numba import cuda

    from nbwgmma.launch import launch

    @cuda.jit
    def axpy(x, y, alpha, n):
        i = cuda.grid(1)
        if i < n:
            y[i] = alpha * x[i] + y[i]

    n = 1000
    x = cupy.empty(n, cupy.float32)
    y = cupy.empty(n, cupy.float32)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        launch(axpy, (n + 127) // 128, 128, (x, y, 3.0, n), stream=s)
        graph = s.end_capture()
    rng = np.random.default_rng(5)
    for _ in range(2):
        hx = rng.integers(-8, 8, n).astype(np.float32)
        hy = rng.integers(-8, 8, n).astype(np.float32)
        x.set(hx)
        y.set(hy)
        cupy.cuda.Device().synchronize()
        graph.launch(stream=s)
        s.synchronize()
        assert np.array_equal(cupy.asnumpy(y), 3.0 * hx + hy)


def test_torch_capture_of_a_first_launch():
    """A user kernel's first ``launch()`` inside ``torch.cuda.graph`` (PyTorch's "global" capture
    mode, in which a module load invalidates the capture): compiled and loaded with the mode
    relaxed; each replay follows new values."""
    from numba import cuda

    from nbwgmma.launch import launch

    @cuda.jit  # (defined here: no earlier launch can have loaded it)
    def axpy(x, y, alpha, n):
        i = cuda.grid(1)
        if i < n:
            y[i] = alpha * x[i] + y[i]

    n = 1000
    x = torch.empty(n, device="cuda")
    y = torch.empty(n, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        launch(axpy, (n + 127) // 128, 128, (x, y, 3.0, n), stream=torch.cuda.current_stream())
    gen = torch.Generator(device="cuda").manual_seed(6)
    for _ in range(2):
        hx = torch.randint(-8, 8, (n,), device="cuda", generator=gen).float()
        hy = torch.randint(-8, 8, (n,), device="cuda", generator=gen).float()
        x.copy_(hx)
        y.copy_(hy)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, 3.0 * hx + hy)
