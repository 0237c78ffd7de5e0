"""matmul with scale arrays (block-scaled fp8) on the GPU: PyTorch tensors quantized per 1 x 128
(activations) and 128 x 128 (weights) as DeepSeek-V3 does, against a float64 product of the same
fp8 values and scales; small integers with power-of-two scales exact at long K; decoding shapes
(M = 1 ... 64), N = 2112, K not a multiple of 128; every scale kind and layout; bad scales
refused. Outputs are poisoned (NaN) before each call."""

import pytest

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from nbwgmma import MatmulError, MatmulTypeError, matmul  # noqa: E402

TDT = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
F8 = {"e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}
F8_MAX = {"e4m3": 448.0, "e5m2": 57344.0}
TOL = {"bf16": 1e-2, "f16": 2e-3, "f32": 1e-3}  # relative norm against float64: C's rounding, the fp8 block sums


def cdiv(a, b):
    return -(-a // b)


def quantize_rows(x, t):
    """x [M, K] -> (fp8 x, scales (M, KB) M-major as torch._scaled_mm takes them): one scale per
    row and 128-K block."""
    m, k = x.shape
    kb = cdiv(k, 128)
    xp = torch.nn.functional.pad(x, (0, kb * 128 - k)).view(m, kb, 128)
    s = (xp.abs().amax(-1).clamp(min=1e-4) / F8_MAX[t]).float()
    q = (xp / s[..., None]).to(F8[t]).view(m, kb * 128)[:, :k].contiguous()
    return q, s.t().contiguous().t()


def quantize_blocks(w, t):
    """w [N, K] -> (fp8 w, scales (NB, KB) row-major): one scale per 128 x 128 block."""
    n, k = w.shape
    nb, kb = cdiv(n, 128), cdiv(k, 128)
    wp = torch.nn.functional.pad(w, (0, kb * 128 - k, 0, nb * 128 - n)).view(nb, 128, kb, 128)
    s = (wp.abs().amax((1, 3)).clamp(min=1e-4) / F8_MAX[t]).float()
    q = (wp / s[:, None, :, None]).to(F8[t]).view(nb * 128, kb * 128)[:n, :k].contiguous()
    return q, s


def dequant(q, s_rows, s_cols):
    """float64 values of fp8 ``q`` [R, K] scaled by ``s_rows`` [R, KB] (expanded along K)."""
    r, k = q.shape
    return q.double() * s_rows.double().repeat_interleave(128, 1)[:, :k] * s_cols


def reference(xq, sx, wq, sw):
    n = wq.shape[0]
    a = dequant(xq, sx, 1.0)
    b = dequant(wq, sw.repeat_interleave(128, 0)[:n], 1.0)
    return a @ b.t()


def small_integers(m, n, k):
    """fp8 A [M, K] and w [N, K] of integers in [-1, 1], with 1 x 128 and 128 x 128 scales in
    {1/2, 1, 2} (row-major): every block sum and the scaled total are exact in f32."""
    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    x = torch.randint(-1, 2, (m, k), device="cuda", generator=g)
    w = torch.randint(-1, 2, (n, k), device="cuda", generator=g)
    sx = torch.exp2(torch.randint(-1, 2, (m, cdiv(k, 128)), device="cuda", generator=g).float())
    sw = torch.exp2(torch.randint(-1, 2, (cdiv(n, 128), cdiv(k, 128)), device="cuda", generator=g).float())
    return x.float().to(torch.float8_e4m3fn), sx, w.float().to(torch.float8_e4m3fn), sw


def rel(got, ref):
    return float(torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref))


SHAPES = [(4096, 2112, 7168 + 64), (1, 2112, 7168 + 64), (64, 7168, 2048), (33, 256, 4096), (1000, 520, 336),
          (300, 2112, 7232)]


@pytest.mark.parametrize("out_t", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("ta, tb", [("e4m3", "e4m3"), ("e5m2", "e4m3")])
def test_block_scaled_matches_float64(ta, tb, out_t):
    for m, n, k in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(m + 3 * n + 7 * k)
        x = torch.randn(m, k, device="cuda", generator=g) * torch.rand(m, 1, device="cuda", generator=g) * 4
        w = torch.randn(n, k, device="cuda", generator=g) * 0.05
        xq, sx = quantize_rows(x, ta)
        wq, sw = quantize_blocks(w, tb)
        ref = reference(xq, sx, wq, sw)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=TDT[out_t])
        c = matmul(xq, wq.t(), scale_a=sx, scale_b=sw.t(), out=out)  # torch._scaled_mm's layouts
        assert c is out and not torch.isnan(out).any()
        assert rel(out, ref) < TOL[out_t], (m, n, k, rel(out, ref))
        fresh = matmul(xq, wq.t(), scale_a=sx.contiguous(), scale_b=sw, out_dtype=out_t)  # row-major scales
        assert fresh.dtype == TDT[out_t] and rel(fresh, ref) < TOL[out_t]


@pytest.mark.parametrize("out_t", ["bf16", "f32"])
def test_256_row_tiles_exact_and_equal_to_128_row_tiles(out_t, monkeypatch):
    """256 x 128 tiles (the TMA thread staging the scales; taken by the front end where they need
    fewer rounds, forced here for ragged shapes): small integers with power-of-two scales, exact
    against float64, and bit for bit the 128-row kernel's output (the same promotions in the same
    order). 4096 x 7168 x 2048 takes them unforced."""
    from nbwgmma.frontend import scaled as front
    for m, n, k in [(1000, 520, 336), (300, 2112, 7232), (4096, 2112, 1024), (4096, 7168, 2048)]:
        xq, sx, wq, sw = small_integers(m, n, k)
        sx = sx.t().contiguous().t()  # M-major, as torch._scaled_mm takes it: staged
        ref = reference(xq, sx, wq, sw)
        outs = {}
        for tall in (False, True):
            natural = (m, n, k) == (4096, 7168, 2048)
            monkeypatch.setattr(front, "strip_tiles", lambda m, n, sms: False)  # (test_strip_... below)
            monkeypatch.setattr(front, "trio_tiles", lambda m, n, sms: False)  # (test_192_... below)
            if not natural:
                monkeypatch.setattr(front, "tall_tiles", lambda m, n, sms, tall=tall: tall)
            elif not tall:
                continue
            out = torch.full((m, n), float("nan"), device="cuda", dtype=TDT[out_t])
            matmul(xq, wq.t(), scale_a=sx, scale_b=sw.t(), out=out)
            assert torch.equal(out.double(), ref.to(TDT[out_t]).double()), (m, n, k, tall)
            outs[tall] = out
            monkeypatch.undo()
        if len(outs) == 2:
            assert torch.equal(outs[False], outs[True])
        assert any(c.bm == 256 for c in front._CONFIGS.values())


def test_strip_tiles_exact_and_equal_to_whole_tiles(monkeypatch):
    """256 x 128 tiles with N's last block of at most 64 columns in 256 x 64 tiles, two a unit
    (taken by the front end at 4096 x 2112; forced for the others: an odd count of 256-row tiles,
    the last partial; strips of 40 columns; a pair whose second tile has its second warpgroup's
    rows past M (800 rows); one whole column): exact against float64 and bit for bit the output
    of the front end's tiles without the strip (128 x 128, or 128 x 64 where it takes those)."""
    from nbwgmma.frontend import scaled as front
    rules = {name: getattr(front, name) for name in ("strip_tiles", "tall_tiles", "wide_tiles")}
    monkeypatch.setattr(front, "_CONFIGS", {})
    for m, n, k in [(4096, 2112, 1024), (600, 2112, 7232), (1000, 296, 336), (800, 296, 336), (2048, 168, 4096)]:
        xq, sx, wq, sw = small_integers(m, n, k)
        sx = sx.t().contiguous().t()
        ref = reference(xq, sx, wq, sw).to(torch.bfloat16)
        outs = []
        for strip in (False, True):
            if strip and (m, n) != (4096, 2112):
                monkeypatch.setattr(front, "strip_tiles", lambda m, n, sms: True)
            elif not strip:
                monkeypatch.setattr(front, "strip_tiles", lambda m, n, sms: False)
                monkeypatch.setattr(front, "tall_tiles", lambda m, n, sms: False)
                monkeypatch.setattr(front, "trio_tiles", lambda m, n, sms: False)
                monkeypatch.setattr(front, "wide_tiles", lambda m, n, sms: None)
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            matmul(xq, wq.t(), scale_a=sx, scale_b=sw.t(), out=out)
            assert torch.equal(out, ref), (m, n, k, strip)
            outs.append(out)
            for name, rule in rules.items():  # the rules back
                monkeypatch.setattr(front, name, rule)
        assert torch.equal(outs[0], outs[1])
    assert any(c.strip for c in front._CONFIGS.values())


def test_64_column_tiles_exact_and_equal_to_128_column_tiles(monkeypatch):
    """128 x 64 tiles (taken where twice the 128 x 128 tiles fit on the SMs at once; forced both
    ways here): exact on small integers against float64, bit for bit the 128-wide kernel's
    output, with A's scales staged (M-major) and read directly (row-major)."""
    from nbwgmma.frontend import scaled as front
    for m, n, k in [(1, 2112, 7232), (128, 7168, 2048), (200, 520, 336)]:
        xq, sx, wq, sw = small_integers(m, n, k)
        ref = reference(xq, sx, wq, sw)
        for scales in (sx.t().contiguous().t(), sx.contiguous()):
            outs = []
            for narrow in (True, False):
                monkeypatch.setattr(front, "narrow_tiles", lambda m, n, sms, narrow=narrow: narrow)
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                matmul(xq, wq.t(), scale_a=scales, scale_b=sw.t(), out=out)
                assert torch.equal(out.double(), ref.to(torch.bfloat16).double()), (m, n, k, narrow)
                outs.append(out)
                monkeypatch.undo()
            assert torch.equal(outs[0], outs[1])
    assert any(c.bn == 64 for c in front._CONFIGS.values())


def test_wide_tiles_exact_and_equal_to_128_column_tiles(monkeypatch):
    """128 x 144, 160 and 176 tiles (taken where they cut the SMs' rounds; forced here): exact on
    small integers against float64 and bit for bit the 128-wide kernel's output, on shapes whose
    tiles start at every offset into B's 128-column scale blocks, N and K ragged, with a bias and
    relu on one (exact too)."""
    from nbwgmma.frontend import scaled as front
    for m, n, k, w in [(1000, 2112, 7232, 176), (200, 520, 336, 144), (4096, 576, 2048, 160), (300, 1000, 1024, 144)]:
        xq, sx, wq, sw = small_integers(m, n, k)
        ref = reference(xq, sx, wq, sw)
        bias = torch.randint(-4, 5, (n,), device="cuda").float() if n == 1000 else None
        act = "relu" if bias is not None else None
        want = torch.relu(ref + bias.double()) if bias is not None else ref
        outs = []
        for width in (w, None):
            monkeypatch.setattr(front, "wide_tiles", lambda m, n, sms, width=width: width)
            monkeypatch.setattr(front, "tall_tiles", lambda m, n, sms: False)
            monkeypatch.setattr(front, "trio_tiles", lambda m, n, sms: False)
            out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            matmul(xq, wq.t(), scale_a=sx.t().contiguous().t(), scale_b=sw.t(), out=out, bias=bias, activation=act)
            assert torch.equal(out.double(), want.to(torch.bfloat16).double()), (m, n, k, width)
            outs.append(out)
            monkeypatch.undo()
        assert torch.equal(outs[0], outs[1])
    assert {c.bn for c in front._CONFIGS.values()} >= {144, 160, 176}


def test_192_row_tiles_exact_and_equal_to_256_row_tiles(monkeypatch):
    """192 x 128 tiles (three consumer warpgroups of 64 rows; taken by the front end where they
    need fewer rounds, forced here for ragged shapes): small integers with power-of-two scales,
    exact against float64 in bf16 and f16 out, and bit for bit the 256-row kernel's output (the
    same promotions in the same order). Rows past M: a last tile of 40 rows (two warpgroups idle),
    of 136 (one); the last row walked last (forced) at 1000 and 4096 rows. 6144 x 7168 x 1024
    takes them unforced."""
    from nbwgmma.frontend import scaled as front
    monkeypatch.setattr(front, "strip_tiles", lambda m, n, sms: False)
    for m, n, k, out_t in [(1000, 520, 336, "bf16"), (424, 2112, 7232, "f16"), (4096, 2112, 1024, "bf16"),
                           (6144, 7168, 1024, "bf16")]:
        xq, sx, wq, sw = small_integers(m, n, k)
        sx = sx.t().contiguous().t()  # M-major: staged
        ref = reference(xq, sx, wq, sw)
        outs = {}
        for trio in (True, False):
            if (m, n) != (6144, 7168) or not trio:
                monkeypatch.setattr(front, "trio_tiles", lambda m, n, sms, trio=trio: trio)
            if trio and m in (1000, 4096):  # the last tile row (40, 64 rows) walked last
                monkeypatch.setattr(front, "last_row", lambda m, n, sms: True)
            monkeypatch.setattr(front, "tall_tiles", lambda m, n, sms: True)
            out = torch.full((m, n), float("nan"), device="cuda", dtype=TDT[out_t])
            matmul(xq, wq.t(), scale_a=sx, scale_b=sw.t(), out=out)
            assert torch.equal(out.double(), ref.to(TDT[out_t]).double()), (m, n, k, trio)
            outs[trio] = out
            monkeypatch.undo()
            monkeypatch.setattr(front, "strip_tiles", lambda m, n, sms: False)
        assert torch.equal(outs[False], outs[True])
    assert any(c.bm == 192 for c in front._CONFIGS.values()) and any(c.last_row for c in front._CONFIGS.values())


@pytest.mark.parametrize("tiles", ["256x128", "128x128", "128x64"])
def test_stream_k_exact_with_every_tile(tiles, monkeypatch):
    """Stream-K (forced on, and off for the same call): the CTAs share the tiles' k-blocks evenly,
    so tiles are summed from the parts of two to dozens of CTAs (16 x 520 x 7232: 5 tiles of 57
    blocks over 132 SMs; 1000 x 520 x 336: one block per CTA, three per tile). Exact on small
    integers against float64 with A's scales staged (M-major) and read directly (row-major), and
    twice in a row (the tile counters are back at zero after each launch)."""
    from nbwgmma.frontend import scaled as front
    tall, narrow = tiles == "256x128", tiles == "128x64"
    monkeypatch.setattr(front, "tall_tiles", lambda m, n, sms: tall)
    monkeypatch.setattr(front, "narrow_tiles", lambda m, n, sms: narrow)
    monkeypatch.setattr(front, "strip_tiles", lambda m, n, sms: False)  # (whole tiles there: 4096 x 2112)
    monkeypatch.setattr(front, "trio_tiles", lambda m, n, sms: False)
    for m, n, k in [(4096, 2112, 7232), (16, 520, 7232), (1000, 520, 336), (300, 2112, 7232), (128, 7168, 2048)]:
        xq, sx, wq, sw = small_integers(m, n, k)
        ref = reference(xq, sx, wq, sw).to(torch.bfloat16).double()
        for scales in (sx.t().contiguous().t(), sx.contiguous()) if not tall else (sx.t().contiguous().t(),):
            for stream in (True, False, True):
                monkeypatch.setattr(front, "stream_tiles", lambda *a, stream=stream: stream)
                out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
                matmul(xq, wq.t(), scale_a=scales, scale_b=sw.t(), out=out)
                assert torch.equal(out.double(), ref), (m, n, k, tiles, stream, scales.stride())
    assert any(c.stream_k and c.bm == (256 if tall else 128) and c.bn == (64 if narrow else 128)
               for c in front._CONFIGS.values())


@pytest.mark.parametrize("bias_t, where, act, out_t", [("bf16", "col", "gelu_tanh", "bf16"),
                                                      ("f32", "row", "silu", "f32"), ("f16", "col", "relu", "f16")])
def test_bias_and_activation_after_the_scales(bias_t, where, act, out_t, monkeypatch):
    """``activation(product + bias)`` in the block-scaled epilogue (bias per column or per row, in
    bf16, f32 or f16), against float64 of the same fp8 values and scales within the output's
    tolerance: 256 x 128 tiles, stream-K (forced), 128 x 64 tiles, a decoding shape and a strip
    of 64 columns in 256 x 64 tiles."""
    fns = {"gelu_tanh": lambda x: 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3))),
           "silu": lambda x: x * torch.sigmoid(x), "relu": torch.relu}
    from nbwgmma.frontend import scaled as front

    rule = front.stream_tiles
    monkeypatch.setattr(front, "trio_tiles", lambda m, n, sms: False)  # (its own test below)
    for m, n, k in [(4096, 7168, 1024), (2304, 2048, 1024), (128, 7168, 1024), (16, 2112, 7232), (4096, 2112, 1024)]:
        # (stream-K forced where 128 x 128 tiles fill 3 rounds 73%; the default takes whole tiles)
        monkeypatch.setattr(front, "stream_tiles", (lambda *a: True) if m == 2304 else rule)
        g = torch.Generator(device="cuda").manual_seed(m + n)
        xq, sx = quantize_rows(torch.randn(m, k, device="cuda", generator=g), "e4m3")
        wq, sw = quantize_blocks(torch.randn(n, k, device="cuda", generator=g) * 0.05, "e4m3")
        length = n if where == "col" else m
        bias = torch.randn(length, device="cuda", generator=g).to(TDT[bias_t])
        ref = fns[act](reference(xq, sx, wq, sw) + (bias.double() if where == "col" else bias.double()[:, None]))
        out = torch.full((m, n), float("nan"), device="cuda", dtype=TDT[out_t])
        matmul(xq, wq.t(), scale_a=sx, scale_b=sw.t(), out=out, bias=bias if where == "col" else bias[:, None],
               activation=act)
        assert not torch.isnan(out).any() and rel(out, ref) < TOL[out_t], (m, n, k, rel(out, ref))


@pytest.mark.parametrize("m, n, k, bias", [(16, 2112, 7232, False), (1000, 520, 336, True), (4096, 576, 2048, False),
                                           (2304, 2048, 1024, True), (4096, 2112, 1024, True)])
def test_repeated_calls_take_the_quick_path_with_their_new_tensors(m, n, k, bias, monkeypatch):
    """A block-scaled call like one seen before skips the checks (frontend.scaled.ScaledQuick):
    new activations, scales and bias each call (new pointers), outputs exact on small integers
    and equal to the full path's (an ``out=`` call); narrow, wide, strip and stream-K (forced)
    tiles, with a bias and relu on some. A tensor of another layout misses the quick path and is checked again."""
    from nbwgmma.frontend import scaled as front

    if m == 2304:  # stream-K forced (the default takes whole 128 x 128 tiles there)
        monkeypatch.setattr(front, "stream_tiles", lambda *a: True)
        monkeypatch.setattr(front, "trio_tiles", lambda m, n, sms: False)
    act = "relu" if bias else None
    for i in range(4):
        xq, sx, wq, sw = small_integers(m, n, k)
        sign = (-1) ** i  # new values each round (still exact)
        xq = (xq.float() * sign).to(torch.float8_e4m3fn)
        sx = (sx * 2.0 ** (i % 2)).t().contiguous().t()
        b = torch.randint(-4, 5, (n,), device="cuda").float() if bias else None
        got = matmul(xq, wq.t(), scale_a=sx, scale_b=sw.t(), bias=b, activation=act)
        want = reference(xq, sx, wq, sw)
        if bias:
            want = torch.relu(want + b.double())
        assert torch.equal(got.double(), want.to(torch.bfloat16).double()), (m, n, k, i)
        full = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        matmul(xq, wq.t(), scale_a=sx, scale_b=sw.t(), bias=b, activation=act, out=full)
        assert torch.equal(got, full)
    key = front.quick_key(xq, wq.t(), sx, sw.t(), None, b, act)
    assert key in front.QUICK, "the repeated call is kept for the quick path"
    # a row-major A scale: another key, the full path's checks, the same values
    got = matmul(xq, wq.t(), scale_a=sx.contiguous(), scale_b=sw.t(), bias=b, activation=act)
    assert torch.equal(got.double(), want.to(torch.bfloat16).double())
    with pytest.raises(MatmulError):  # a scale of the wrong shape is still refused
        matmul(xq, wq.t(), scale_a=sx[:1], scale_b=sw.t())


def test_a_one_element_scale_is_read_at_every_call():
    """A one-element scale tensor beside a block-scaled one is a per-tensor scale, read on the
    host into alpha: calls that repeat with a new value of it must not take the quick path (which
    keeps its launch values), so each result follows its scale."""
    from nbwgmma.frontend import scaled as front

    m, n, k = 256, 520, 1024
    xq, sx, wq, _ = small_integers(m, n, k)
    sx = sx.t().contiguous().t()
    base = dequant(xq, sx, 1.0) @ wq.double().t()
    for i, value in enumerate((1.0, 2.0, 0.5, 4.0)):
        sb = torch.full((1,), value, device="cuda")
        got = matmul(xq, wq.t(), scale_a=sx, scale_b=sb)
        assert torch.equal(got.double(), (base * value).to(torch.bfloat16).double()), (i, value)
    assert front.quick_key(xq, wq.t(), sx, sb, None, None, None) not in front.QUICK


@pytest.mark.parametrize("m", [1, 2, 7, 16, 33, 64])
def test_decoding_shapes_exact_on_small_integers(m):
    """Integers in [-1, 1] and scales in {1/2, 1, 2}: every block sum and their scaled total are
    exact in f32, so the f32 output equals float64 at K = 7232 (57 blocks, the last half full)."""
    n, k = 2112, 7168 + 64
    xq, sx, wq, sw = small_integers(m, n, k)
    out = torch.full((m, n), float("nan"), device="cuda")
    matmul(xq, wq.t(), scale_a=sx, scale_b=sw, out=out)
    assert torch.equal(out.double(), reference(xq, sx, wq, sw))


def test_every_scale_kind():
    m, n, k = 200, 264, 1000 + 8  # K a multiple of 16, not of 128
    g = torch.Generator(device="cuda").manual_seed(5)
    xq = (torch.randn(m, k, device="cuda", generator=g) * 8).to(torch.float8_e4m3fn)
    wq = (torch.randn(n, k, device="cuda", generator=g) * 8).to(torch.float8_e4m3fn)
    kb, nb = cdiv(k, 128), cdiv(n, 128)
    ra, cb = torch.rand(m, 1, device="cuda", generator=g) + 0.5, torch.rand(1, n, device="cuda", generator=g) + 0.5
    sa = torch.rand(m, kb, device="cuda", generator=g) + 0.5
    sw = torch.rand(nb, kb, device="cuda", generator=g) + 0.5
    plain = xq.double() @ wq.double().t()
    # rowwise alone: the tensor cores accumulate the whole K (fp8 accumulation: a looser bound)
    for kw in (dict(scale_a=ra, scale_b=cb), dict(scale_a=ra.view(m), scale_b=cb.view(n))):
        out = torch.full((m, n), float("nan"), device="cuda")
        matmul(xq, wq.t(), out=out, **kw)
        assert rel(out, plain * ra.double() * cb.double()) < 1e-2
    cases = [
        (dict(scale_a=sa, scale_b=cb), reference(xq, sa, wq, torch.ones(nb, kb, device="cuda")) * cb.double()),
        (dict(scale_a=ra, scale_b=sw), reference(xq, ra.expand(m, kb), wq, sw)),
        (dict(scale_a=sa, scale_b=sw, alpha=0.25), reference(xq, sa, wq, sw) * 0.25),
        (dict(scale_a=2.0, scale_b=sw.t()), reference(xq, torch.full((m, kb), 2.0, device="cuda"), wq, sw)),
        (dict(scale_a=torch.tensor([0.5], device="cuda"), scale_b=sw), reference(xq, torch.full((m, kb), 0.5,
                                                                                              device="cuda"), wq, sw)),
    ]
    for kw, ref in cases:
        out = torch.full((m, n), float("nan"), device="cuda")
        matmul(xq, wq.t(), out=out, **kw)
        assert rel(out, ref) < 1e-3, (list(kw), rel(out, ref))


def test_bad_scales_are_refused_before_launch():
    m, n, k = 64, 256, 512
    xq = torch.ones(m, k, device="cuda").to(torch.float8_e4m3fn)
    wq = torch.ones(n, k, device="cuda").to(torch.float8_e4m3fn)
    sa, sw = torch.ones(m, 4, device="cuda"), torch.ones(2, 4, device="cuda")
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    cases = [
        (dict(scale_a=torch.ones(m, 5, device="cuda"), scale_b=sw), MatmulError, r"scale_a must be .* got shape"),
        (dict(scale_a=sa, scale_b=torch.ones(3, 4, device="cuda")), MatmulError, r"scale_b must be .* got shape"),
        (dict(scale_a=sa.half(), scale_b=sw), MatmulTypeError, "scale_a must be f32; got f16"),
        (dict(scale_a=sa.cpu(), scale_b=sw), MatmulTypeError, "scale_a"),
        (dict(scale_a=sa, scale_b=sw, c=sa), MatmulError, "an epilogue function or C do not take tensor scales yet"),
        (dict(scale_a=sa, scale_b=sw, activation="tanh"), MatmulError, "activation must be one of"),
    ]
    for kw, err, msg in cases:
        with pytest.raises(err, match=msg):
            matmul(xq, wq.t(), out=out, **kw)
    with pytest.raises(MatmulError, match="must be row-major"):  # B [K, N] row-major: fp8 wgmma reads K-major B
        matmul(xq, wq.t().contiguous(), scale_a=sa, scale_b=sw)
    torch.cuda.synchronize()
    assert torch.isnan(out.float()).all()  # nothing ran
