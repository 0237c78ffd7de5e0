"""matmul with scale arrays (rowwise, 1 x 128, 128 x 128) in Numba's CUDA simulator (run by
tests/test_sim.py in a child process with NUMBA_ENABLE_CUDASIM=1): exact on small integers with
power-of-two scales against float64 (the f32 accumulator holds every partial sum exactly, so
the output is the float64 product rounded once to its type), and bad scales refused before
any launch. Problems stay a few tiles: the simulator runs every thread in Python."""

import numpy as np
import pytest
from numba import config, cuda

from nbwgmma import MatmulError, MatmulTypeError, matmul
from nbwgmma.layout.wgmma_model import decode_elements, encode_elements

assert config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1"

RAW = {"bf16": np.uint16, "f16": np.float16, "f32": np.float32}
POISON = {"bf16": 0x7FC0, "f16": np.nan, "f32": np.nan}


def fp8(x, t):
    return cuda.to_device(encode_elements(x, t).reshape(x.shape))


def rounded(x, t):
    """float64 values as the output type stores them (round to nearest even)."""
    if t == "f32":
        return x.astype(np.float32).astype(np.float64)
    return decode_elements(encode_elements(x, t), t).reshape(x.shape)


def host(c, t):
    h = c.copy_to_host()
    return decode_elements(h.view(np.uint8).reshape(h.shape[0], -1), "bf16") if t == "bf16" else h.astype(np.float64)


def pow2(rng, shape):
    return np.exp2(rng.integers(-2, 3, shape)).astype(np.float32)


def reference(a, w, sa, sw):
    """float64 ``sum_kb (a_kb @ w_kb^T) * sa[:, kb] * sw[nb, kb]``; ``sa`` [M, KB] and ``sw``
    [NB, KB] (block scales: per row and per weight block, broadcast here)."""
    m, k = a.shape
    n = w.shape[0]
    out = np.zeros((m, n))
    for kb in range(-(-k // 128)):
        blk = slice(128 * kb, 128 * kb + 128)
        s = sa[:, kb][:, None] * np.repeat(sw[:, kb], 128)[:n][None, :]
        out += (a[:, blk] @ w[:, blk].T) * s
    return out


def _operands(m, n, k, seed, ta="e4m3", tb="e4m3"):
    rng = np.random.default_rng(seed)
    a = rng.integers(-2, 3, (m, k)).astype(np.float64)
    w = rng.integers(-2, 3, (n, k)).astype(np.float64)
    return rng, a, w, fp8(a, ta), fp8(w, tb).T  # B = w.T: [K, N], K contiguous


def _run(a_dev, b_dev, m, n, t, **kw):
    out = cuda.to_device(np.full((m, n), POISON[t], RAW[t]))
    got = matmul(a_dev, b_dev, out=out, in_dtype=kw.pop("in_dtype", "e4m3"), **kw)
    assert got is out
    return host(out, t)


def _check_staged(m, n, k, seed, b_kind):
    """A's 1 x 128 scales M-major (staged) with B's 128 x 128 block scales (``b_kind`` "block") or
    its column scales ("col": the epilogue's; B's row of block scales is never read): exact."""
    kb = -(-k // 128)
    rng, a, w, ad, bd = _operands(m, n, k, seed)
    sa, sw = pow2(rng, (m, kb)), pow2(rng, (-(-n // 128), kb))
    sa_dev = cuda.to_device(np.ascontiguousarray(sa.T)).T  # M-major
    if b_kind == "block":
        got = _run(ad, bd, m, n, "bf16", scale_a=sa_dev, scale_b=cuda.to_device(sw).T)
        np.testing.assert_array_equal(got, rounded(reference(a, w, sa, sw), "bf16"))
    else:
        cb = pow2(rng, n)
        got = _run(ad, bd, m, n, "bf16", scale_a=sa_dev, scale_b=cuda.to_device(cb.reshape(1, n)))
        np.testing.assert_array_equal(got, rounded(reference(a, w, sa, np.ones_like(sw)) * cb, "bf16"))


@pytest.mark.parametrize("narrow", [False, True])
def test_1x128_a_and_128x128_b_in_torch_layouts(narrow, monkeypatch):
    """scale_a (M, KB) with strides (1, M), scale_b (KB, NB) with strides (1, KB) (torch._scaled_mm's
    blockwise layouts); two N tiles (the second partial), three K blocks (the last partial); tiles
    128 wide, and 64 wide (three N tiles, two in the first 128-column scale block)."""
    from nbwgmma.frontend import scaled as front
    monkeypatch.setattr(front, "narrow_tiles", lambda m, n, sms: narrow)
    m, n, k = 72, 136, 288
    rng, a, w, ad, bd = _operands(m, n, k, 1)
    sa, sw = pow2(rng, (m, 3)), pow2(rng, (2, 3))
    sa_dev = cuda.to_device(np.ascontiguousarray(sa.T)).T  # M-major
    sb_dev = cuda.to_device(sw).T  # (KB, NB), the transpose of the weight's row-major scale
    got = _run(ad, bd, m, n, "bf16", scale_a=sa_dev, scale_b=sb_dev)
    np.testing.assert_array_equal(got, rounded(reference(a, w, sa, sw), "bf16"))
    assert any(c.bn == (64 if narrow else 128) for c in front._CONFIGS.values())


@pytest.mark.parametrize("m, b_kind", [(420, "block"), (72, "col")])
def test_256_row_tiles_stage_their_scales_by_the_tma_thread(m, b_kind, monkeypatch):
    """256 x 128 tiles (forced: the front end takes them for many tiles): the TMA thread copies
    each stage's A scales with one bulk copy and stores B's beside them, each consumer promotes
    two 128-row waves through one temporary. 420 rows: a second tile whose second wave is
    partial; 72 rows: one tile, its first wave partial and its second past M. Two N tiles (the
    second partial), three K blocks (the last partial)."""
    from nbwgmma.frontend import scaled as front
    monkeypatch.setattr(front, "tall_tiles", lambda m, n, sms: True)
    monkeypatch.setattr(front, "trio_tiles", lambda m, n, sms: False)
    _check_staged(m, 136, 288, 11, b_kind)
    assert any(c.bm == 256 for c in front._CONFIGS.values()), "a 256-row configuration ran"


@pytest.mark.parametrize("m, n, k, b_kind, ctas", [(420, 136, 288, "block", 2), (72, 136, 288, "block", 1),
                                                   (200, 264, 416, "block", 3), (136, 136, 160, "block", 1)])
def test_192_row_tiles_three_consumers(m, n, k, b_kind, ctas, monkeypatch):
    """192 x 128 tiles (forced: the front end takes them where they need fewer rounds): three
    consumer warpgroups of 64 rows, one temporary each, the TMA thread staging the scales as for
    256 rows. 420 rows: a third tile of 36 rows (two warpgroups idle); 72: one tile, its second
    and third warpgroups past M; 200 x 264 on 3 CTAs, 4 K blocks (the last
    partial); 136 rows: the third warpgroup alone past M, 2 K blocks."""
    from nbwgmma.frontend import scaled as front
    monkeypatch.setattr(front, "tall_tiles", lambda m, n, sms: True)
    monkeypatch.setattr(front, "trio_tiles", lambda m, n, sms: True)
    monkeypatch.setattr(front, "_SIM_CTAS", ctas)
    monkeypatch.setattr(front, "_CONFIGS", {})
    _check_staged(m, n, k, 15, b_kind)
    assert any(c.bm == 192 and c.threads == 512 for c in front._CONFIGS.values()), "a 192-row configuration ran"
    if m == 72:  # B's column scales: never 192 rows (the epilogue's vector of them would spill)
        monkeypatch.setattr(front, "_CONFIGS", {})
        _check_staged(m, n, k, 15, "col")
        assert not any(c.bm == 192 for c in front._CONFIGS.values())



@pytest.mark.parametrize("m, n, ctas", [(420, 264, 3), (200, 520, 2), (136, 136, 1)])
def test_192_row_tiles_walk_the_last_row_last(m, n, ctas, monkeypatch):
    """192 x 128 tiles with the last tile row walked after the others (forced: the front end takes
    it where that row holds at most 64 rows and the rounds shrink): 420 rows (its last row 36
    rows: two warpgroups idle) on 3 CTAs, 200 (8 rows) on 2 over five tile columns, one tile row
    alone (136 rows): exact."""
    from nbwgmma.frontend import scaled as front
    monkeypatch.setattr(front, "tall_tiles", lambda m, n, sms: True)
    monkeypatch.setattr(front, "trio_tiles", lambda m, n, sms: True)
    monkeypatch.setattr(front, "last_row", lambda m, n, sms: True)
    monkeypatch.setattr(front, "_SIM_CTAS", ctas)
    monkeypatch.setattr(front, "_CONFIGS", {})
    _check_staged(m, n, 288, 17, "block")
    assert [c.last_row for c in front._CONFIGS.values()] == [True], "the last row walked last"


@pytest.mark.parametrize("w, n, b_kind, k", [(176, 520, "block", 288), (144, 304, "block", 288), (144, 200, "col", 288),
                                             (160, 520, "block", 160), (176, 520, "block", 256)])
def test_wide_tiles_promote_across_the_b_scale_blocks_they_span(w, n, b_kind, k, monkeypatch):
    """128-row tiles wider than 128 columns (forced: the front end takes them where they fill
    the SMs' rounds better): 176 x 3 tiles start 0, 48 and 96 columns into a block of B's scales,
    the last spanning three (blocks 2, 3 and 4, the fourth partial and the fifth past N); 144
    ones start 0, 16, 32 columns in; C leaves in two unswizzled halves of 88 (72) columns. With
    B's scales per column (the epilogue's) the promotion takes A's alone. 72 rows (one tile, rows
    past M), three K blocks (the last partial); two (the column halves' loop runs once; 160:
    80-column halves start 0, 32 ... columns into a block). (With one K block A's scales are
    one per row: the front end takes them as row scales, no wide tiles.)"""
    from nbwgmma.frontend import scaled as front
    monkeypatch.setattr(front, "wide_tiles", lambda m, n, sms: w)
    _check_staged(72, n, k, 14, b_kind)
    assert any(c.bn == w for c in front._CONFIGS.values()), "the wide configuration ran"


@pytest.mark.parametrize("tall, direct, ctas, n, narrow", [(False, False, 5, 136, False), (True, False, 5, 136, False),
                                                           (False, True, 5, 136, False), (False, False, 2, 632, False),
                                                           (False, False, 5, 72, True), (False, True, 3, 200, True)])
def test_stream_k_sums_tiles_that_ctas_share(tall, direct, ctas, n, narrow, monkeypatch):
    """Stream-K (forced). 5 CTAs, two N tiles (the second partial) of 5 K blocks (the last
    partial): no tile taken whole, 10 k-blocks shared, 2 a CTA: each tile is summed from three
    CTAs' parts, the middle CTA holding the first tile's last block and the second's first (its
    scratch slots 0 and 1). 2 CTAs, 5 tiles: the first two taken whole, one each, the other
    three's 15 k-blocks shared (the third whole in the first CTA's share, the fourth summed
    from both, the fifth whole in the second's). 128-row tiles with the scales staged (A's in
    torch's layout) or read directly (row-major), 256-row tiles (two fragments per consumer
    parked). Run twice: the CTAs in increasing order (a tile's first CTA comes first, parks its
    part, the last one sums) and in decreasing order (the first CTA comes last and adds the
    others' parts to its own); the tile counters are back at zero after each launch. ``narrow``:
    128 x 64 tiles (a strip of N = 72 past a block-scale block, and N = 200 in 4 tiles across
    two B scale blocks)."""
    from nbwgmma.frontend import scaled as front
    monkeypatch.setattr(front, "tall_tiles", lambda m, n, sms: tall)
    monkeypatch.setattr(front, "trio_tiles", lambda m, n, sms: False)
    monkeypatch.setattr(front, "narrow_tiles", lambda m, n, sms: narrow)
    monkeypatch.setattr(front, "stream_tiles", lambda *a: True)
    monkeypatch.setattr(front, "_SIM_CTAS", ctas)
    m, k = (200 if tall else 72), 544
    rng, a, w, ad, bd = _operands(m, n, k, 12)
    sa, sw = pow2(rng, (m, 5)), pow2(rng, (-(-n // 128), 5))
    sa_dev = cuda.to_device(sa) if direct else cuda.to_device(np.ascontiguousarray(sa.T)).T
    for order in ("forward", "reverse"):
        monkeypatch.setenv("NBWGMMA_SIM_ORDER", order)
        got = _run(ad, bd, m, n, "bf16", scale_a=sa_dev, scale_b=cuda.to_device(sw).T)
        np.testing.assert_array_equal(got, rounded(reference(a, w, sa, sw), "bf16"))
    assert any(c.stream_k and c.bm == (256 if tall else 128) and c.bn == (64 if narrow else 128)
               and c.a_columns == (not direct) for c in front._CONFIGS.values()), "the stream-K configuration ran"
    assert not front._SCRATCH[next(iter(front._SCRATCH))][1].copy_to_host().any()


@pytest.mark.parametrize("m, n, b_kind, ctas", [(600, 296, "block", 1), (420, 296, "block", 2), (512, 168, "col", 3),
                                               (1060, 168, "block", 2), (800, 296, "row bias", 2)])
def test_strip_tiles_after_the_whole_ones(m, n, b_kind, ctas, monkeypatch):
    """256 x 128 tiles with N's last block (40 columns) in 256 x 64 tiles, two a unit after the
    whole tiles (forced: the front end takes them where they cut the SMs' rounds): three 256-row
    tiles (the third partial: a unit of one strip tile), two, two of 512 rows, five (the fifth of
    36 rows, its second warpgroup's rows past M), four (the fourth of 32 rows: a pair's second
    tile half past M); B's block scales, its column scales (the epilogue's), or block scales with
    an f32 bias per row and relu; 1 to 3 CTAs, each walking its units in turn."""
    from nbwgmma.frontend import scaled as front
    monkeypatch.setattr(front, "strip_tiles", lambda m, n, sms: True)
    monkeypatch.setattr(front, "_SIM_CTAS", ctas)
    monkeypatch.setattr(front, "_CONFIGS", {})
    if b_kind == "row bias":
        k, kb = 288, 3
        rng, a, w, ad, bd = _operands(m, n, k, 13)
        sa, sw = pow2(rng, (m, kb)), pow2(rng, (-(-n // 128), kb))
        bias = rng.integers(-8, 9, m).astype(np.float32)
        got = _run(ad, bd, m, n, "bf16", scale_a=cuda.to_device(np.ascontiguousarray(sa.T)).T,
                   scale_b=cuda.to_device(sw).T, bias=cuda.to_device(bias.reshape(m, 1)), activation="relu")
        np.testing.assert_array_equal(got, rounded(np.maximum(reference(a, w, sa, sw) + bias[:, None], 0), "bf16"))
    else:
        _check_staged(m, n, 288, 11, b_kind)
    assert any(c.strip for c in front._CONFIGS.values()), "the strip configuration ran"


def test_bias_and_activation_after_the_scales():
    """``activation(alpha * product + bias)`` in the epilogue: an f32 bias per column with relu
    (exact: small integers), an f32 bias per row with gelu_tanh (f32 out: the exact tanh
    formula, against float64 within f32 rounding), an f16 bias with silu on the 256-row tiles."""
    from nbwgmma.frontend import scaled as front
    m, n, k = 72, 136, 288
    rng, a, w, ad, bd = _operands(m, n, k, 21)
    sa, sw = pow2(rng, (m, 3)), pow2(rng, (2, 3))
    sa_dev, sb_dev = cuda.to_device(np.ascontiguousarray(sa.T)).T, cuda.to_device(sw).T
    ref = reference(a, w, sa, sw)
    bc = rng.integers(-8, 9, n).astype(np.float64)
    got = _run(ad, bd, m, n, "bf16", scale_a=sa_dev, scale_b=sb_dev, alpha=0.5,
               bias=cuda.to_device(bc.astype(np.float32)), activation="relu")
    np.testing.assert_array_equal(got, rounded(np.maximum(0.5 * ref + bc, 0), "bf16"))
    br = rng.standard_normal((m, 1))
    got = _run(ad, bd, m, n, "f32", scale_a=sa_dev, scale_b=sb_dev, bias=cuda.to_device(br.astype(np.float32)),
               activation="gelu_tanh")
    x = ref + br.astype(np.float32)
    want = 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
    mt = 200
    rng, a, w, ad, bd = _operands(mt, n, k, 22)
    sa = pow2(rng, (mt, 3))
    bh = rng.integers(-4, 5, n).astype(np.float16)
    orig = front.tall_tiles
    front.tall_tiles = lambda m, n, sms: True
    try:
        got = _run(ad, bd, mt, n, "bf16", scale_a=cuda.to_device(np.ascontiguousarray(sa.T)).T, scale_b=sb_dev,
                   bias=cuda.to_device(bh), activation="silu")
    finally:
        front.tall_tiles = orig
    x = reference(a, w, sa, sw) + bh
    np.testing.assert_allclose(got, rounded(x / (1 + np.exp(-x)), "bf16"), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("k", [112, 512, 640])
def test_every_block_count_promotes_each_block_once(k):
    """1, 4 and 5 K blocks (no loop; one turn and an odd last block; two turns): the promoted
    loop takes two blocks per turn (two temporaries), then one or two more; distinct scales per
    block catch a block promoted twice or with another's scale."""
    m, n = 24, 40
    kb = -(-k // 128)
    rng, a, w, ad, bd = _operands(m, n, k, 5)
    sa, sw = pow2(rng, (m, kb)), pow2(rng, (1, kb))
    got = _run(ad, bd, m, n, "f32", scale_a=cuda.to_device(sa), scale_b=cuda.to_device(sw).T)
    np.testing.assert_array_equal(got, reference(a, w, sa, sw))


def test_row_scales_with_weight_blocks_f32_out_mixed_fp8():
    """A per row (M,), B's scale in the weight's own order (NB, KB); e5m2 x e4m3, f32 out (direct)."""
    m, n, k = 40, 200, 288  # NB = 2, KB = 3 (a square scale would be read in b's order)
    rng, a, w, ad, bd = _operands(m, n, k, 2, ta="e5m2")
    ra, sw = pow2(rng, m), pow2(rng, (2, 3))
    got = _run(ad, bd, m, n, "f32", scale_a=cuda.to_device(ra), scale_b=cuda.to_device(sw), alpha=0.5,
               in_dtype=("e5m2", "e4m3"))
    np.testing.assert_array_equal(got, reference(a, w, np.repeat(ra[:, None], 3, 1) * 0.5, sw))


def test_1x128_a_with_column_scales_f16_out_and_a_number():
    m, n, k = 24, 72, 256
    rng, a, w, ad, bd = _operands(m, n, k, 3)
    sa, cb = pow2(rng, (m, 2)), pow2(rng, n)
    got = _run(ad, bd, m, n, "f16", scale_a=cuda.to_device(sa), scale_b=cuda.to_device(cb.reshape(1, n)))
    np.testing.assert_array_equal(got, rounded(reference(a, w, sa, np.ones((1, 2))) * cb, "f16"))
    got = _run(ad, bd, m, n, "f16", scale_a=cuda.to_device(sa), scale_b=2.0)  # a per-tensor number with blocks
    np.testing.assert_array_equal(got, rounded(reference(a, w, sa, np.ones((1, 2))) * 2, "f16"))


def test_rowwise_scales_run_the_fast_path():
    """(M, 1) and (1, N), torch._scaled_mm's rowwise: no promotion, the scales in the epilogue."""
    m, n, k = 20, 48, 64
    rng, a, w, ad, bd = _operands(m, n, k, 4)
    ra, cb = pow2(rng, (m, 1)), pow2(rng, (1, n))
    got = _run(ad, bd, m, n, "bf16", scale_a=cuda.to_device(ra), scale_b=cuda.to_device(cb))
    np.testing.assert_array_equal(got, rounded((a @ w.T) * ra * cb, "bf16"))


def test_config_auto_takes_the_default_path():
    """From the simulator fuzz: ``config="auto"`` (the tuned configuration: none is tuned for
    scale arrays) was refused with block scales ("config applies to calls without tensor
    scales"); it now runs the default path. A config dict is still refused."""
    m, n, k = 24, 40, 256
    rng, a, w, ad, bd = _operands(m, n, k, 9)
    sa, sw = pow2(rng, (m, 2)), pow2(rng, (1, 2))
    got = _run(ad, bd, m, n, "bf16", scale_a=cuda.to_device(sa), scale_b=cuda.to_device(sw), config="auto")
    np.testing.assert_array_equal(got, rounded(reference(a, w, sa, sw), "bf16"))
    with pytest.raises(MatmulError, match="config applies to calls without tensor scales so far"):
        _run(ad, bd, m, n, "bf16", scale_a=cuda.to_device(sa), scale_b=cuda.to_device(sw), config={"bm": 128})


def test_one_row_and_an_odd_n_store_directly():
    """M = 1 (decoding), N = 20 (bf16 rows of 40 bytes: no TMA store), K not a multiple of 128."""
    m, n, k = 1, 20, 144
    rng, a, w, ad, bd = _operands(m, n, k, 5)
    sa, sw = pow2(rng, (m, 2)), pow2(rng, (1, 2))
    got = _run(ad, bd, m, n, "bf16", scale_a=cuda.to_device(sa), scale_b=cuda.to_device(sw))
    np.testing.assert_array_equal(got, rounded(reference(a, w, sa, sw), "bf16"))


def test_per_tensor_scales_as_one_element_arrays_and_with_blocks_on_the_other_side():
    """From a hunt for valid calls the library refused: one-element Numba arrays as per-tensor
    scales were refused (float() of a device array); a per-tensor A scale (a number or none) with
    128 x 128 B blocks crashed the simulator at M >= 2 (the 1 x 1 stand-in indexed by row)."""
    m, n, k = 16, 24, 256
    rng, a, w, ad, bd = _operands(m, n, k, 7)
    got = _run(ad, bd, m, n, "f32", scale_a=cuda.to_device(np.array([2.0], np.float32)),
               scale_b=cuda.to_device(np.array([[0.5]], np.float32)))
    np.testing.assert_array_equal(got, a @ w.T)
    sw = pow2(rng, (1, 2))
    for sa in (None, 4.0, cuda.to_device(np.array([4.0], np.float32))):
        got = _run(ad, bd, m, n, "f32", scale_a=sa, scale_b=cuda.to_device(sw))
        np.testing.assert_array_equal(got, reference(a, w, np.ones((m, 2)), sw) * (1.0 if sa is None else 4.0))


def test_empty_products_with_scale_arrays_and_a_one_row_weight_scale():
    """From a fuzz of the scaled path: M = 0 (or N = 0) with scale arrays raised a bare IndexError
    (an empty scale taken for a per-tensor one and read); now an empty result. And a B scale of
    shape (1, N) is one scale per column, also where it could be a weight's (NB, KB) scale (N <=
    128, KB == N: documented); the weight's scale passed as its transpose is read as blocks."""
    k = 256
    for m, n in ((0, 64), (16, 0)):
        a0 = cuda.to_device(np.zeros((m, k), np.uint8))
        b0 = cuda.to_device(np.zeros((n, k), np.uint8)).T
        for sa, sb in (((m, 1), (1, n)), ((m, 2), (2, -(-n // 128))), ((m, 2), (1, n))):
            got = matmul(a0, b0, in_dtype="e4m3", scale_a=cuda.to_device(np.ones(sa, np.float32)),
                         scale_b=cuda.to_device(np.ones(sb, np.float32)), out_dtype="f32")
            assert got.shape == (m, n)
    m, n, k = 4, 8, 1024  # KB == N == 8, NB == 1
    rng, a, w, ad, bd = _operands(m, n, k, 10)
    sa, sw = pow2(rng, (m, 8)), pow2(rng, (1, 8))
    got = _run(ad, bd, m, n, "f32", scale_a=cuda.to_device(sa), scale_b=cuda.to_device(sw))
    np.testing.assert_array_equal(got, reference(a, w, sa, np.ones((1, 8))) * sw)  # per column
    got = _run(ad, bd, m, n, "f32", scale_a=cuda.to_device(sa), scale_b=cuda.to_device(np.ascontiguousarray(sw.T)))
    np.testing.assert_array_equal(got, reference(a, w, sa, sw))  # (KB, NB): 128 x 128 blocks


def test_k_zero_with_scale_arrays_writes_the_bias_and_activation():
    """K = 0 with per-row and per-column or 1 x 128 block scales (KB = 0): zeros, or with a bias
    and an activation their values (the epilogue over a product of zeros)."""
    m, n = 16, 40
    a0 = cuda.to_device(np.zeros((m, 0), np.uint8))
    b0 = cuda.to_device(np.zeros((n, 0), np.uint8)).T
    bias = np.arange(n, dtype=np.float32) - 20
    for sa, sb in (((m, 1), (1, n)), ((m, 0), (1, 0))):
        scales = dict(scale_a=cuda.to_device(np.ones(sa, np.float32)), scale_b=cuda.to_device(np.ones(sb, np.float32)))
        np.testing.assert_array_equal(_run(a0, b0, m, n, "f32", **scales), np.zeros((m, n)))
        got = _run(a0, b0, m, n, "f32", bias=cuda.to_device(bias), activation="relu", **scales)
        np.testing.assert_array_equal(got, np.broadcast_to(np.maximum(bias, 0), (m, n)))


def test_fp8_outputs_with_scale_arrays_are_a_matmul_error():
    """They were a bare ValueError from the kernel's configuration, scale_out and amax ignored."""
    m, n, k = 16, 32, 64
    _, _, _, ad, bd = _operands(m, n, k, 8)
    with pytest.raises(MatmulError, match="fp8 outputs .* take per-tensor scales so far"):
        matmul(ad, bd, in_dtype="e4m3", scale_a=cuda.to_device(np.ones((m, 1), np.float32)),
               scale_b=cuda.to_device(np.ones((1, n), np.float32)), out_dtype="e4m3", scale_out=0.5)


def test_bad_scales_and_operands_are_refused_before_launch():
    m, n, k = 16, 48, 160  # KB = 2, NB = 1
    _, _, _, ad, bd = _operands(m, n, k, 6)
    good_a, good_b = cuda.to_device(np.ones((m, 2), np.float32)), cuda.to_device(np.ones((1, 2), np.float32))
    out = cuda.to_device(np.full((m, n), 0x7FC0, np.uint16))
    cases = [
        (dict(scale_a=cuda.to_device(np.ones((m, 3), np.float32))), MatmulError,
         r"scale_a must be a number or an f32 array of shape \(16,\) or \(16, 1\) .* got shape \(16, 3\)"),
        (dict(scale_b=cuda.to_device(np.ones((2, 2), np.float32))), MatmulError,
         r"scale_b must be .*\(2, 1\) / \(1, 2\) \(128 x 128 blocks\) .* got shape \(2, 2\)"),
        (dict(scale_a=cuda.to_device(np.ones((m, 2), np.float16))), MatmulTypeError, "scale_a must be f32; got f16"),
        (dict(scale_a=np.ones((m, 2), np.float32)), MatmulTypeError, "scale_a"),
        (dict(scale_b=good_b, c=cuda.to_device(np.ones((m, n), np.float32))), MatmulError,
         "an epilogue function or C do not take tensor scales yet"),
        (dict(scale_b=good_b, bias=cuda.to_device(np.ones(n + 1, np.float32))), MatmulError,
         r"bias must have shape \(48,\) or \(1, 48\)"),
        (dict(scale_b=good_b, activation="tanh"), MatmulError, "activation must be one of"),
        (dict(scale_b=good_b, config={"bm": 128}), MatmulError, "config applies to calls without tensor scales"),
        (dict(scale_a=good_a, alpha="2"), MatmulTypeError, "alpha must be a real number"),
    ]
    inside = cuda.to_device(np.full((m, n), np.nan, np.float32))  # scales in out's own memory: read after a
    with pytest.raises(MatmulError, match="out overlaps scale_a"):  # tile wrote them (a wrong answer before)
        matmul(ad, bd, in_dtype="e4m3", out=inside, scale_a=inside[:, :2], scale_b=good_b)
    for kw, err, msg in cases:
        with pytest.raises(err, match=msg):
            matmul(ad, bd, in_dtype="e4m3", out=out, **kw)
    row_major_b = fp8(np.ones((k, n)), "e4m3")  # [K, N] with N contiguous: fp8 wgmma reads K-major B only
    with pytest.raises(MatmulError, match=r"B \(as w.T with w \[N, K\] row-major\) must be row-major"):
        matmul(ad, row_major_b, in_dtype="e4m3", scale_a=good_a)
    odd_k = fp8(np.ones((m, 40)), "e4m3")  # rows of 40 bytes: TMA needs 16-byte multiples
    with pytest.raises(MatmulError, match="A must be row-major with a 16-byte aligned base"):
        matmul(odd_k, fp8(np.ones((n, 40)), "e4m3").T, in_dtype="e4m3", scale_a=cuda.to_device(np.ones(m, np.float32)))
    np.testing.assert_array_equal(out.copy_to_host(), np.full((m, n), 0x7FC0))  # nothing ran
