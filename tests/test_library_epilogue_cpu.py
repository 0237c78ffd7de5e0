"""The library GEMM's fused epilogue (a bias, an activation, beta * C) on CPU: the configuration's
checks, the plan's kernel signature, and ptxas's view of the kernels matmul builds for it."""

import re

import numpy as np
import pytest
from numba import cuda, types

from nbwgmma import launch
from nbwgmma.errors import ConfigError
from nbwgmma.frontend.arrays import ArrayInfo
from nbwgmma.frontend.plan import Plan
from nbwgmma.kernels.gemm import GemmConfig, gemm_kernel
from nbwgmma.kit import acc_map, activation
from nbwgmma.report import compile_report


def _row_major(ptr, rows, cols, es, dt):
    return ArrayInfo(ptr, (rows, cols), (cols * es, es), es, dt, 0, "numba")


def _plan(m, n, k, epi, c_dtype=None, monkeypatch=None):
    """The plan of a bf16 ``x @ w.T`` (A [M, K] and w [N, K] row-major) into a new bf16 out, with
    the epilogue options ``epi`` and a row-major C of ``c_dtype``, for a GPU of 132 SMs."""
    monkeypatch.setattr(launch, "device_limits", lambda device=None: dict(launch.H100_LIMITS, multiprocessors=132))
    a = _row_major(1 << 40, m, k, 2, "bf16")
    b = ArrayInfo(2 << 40, (k, n), (2, 2 * k), 2, "bf16", 0, "numba")  # w.T: K contiguous
    out = _row_major(3 << 40, m, n, 2, "bf16")
    c = None if c_dtype is None else _row_major(4 << 40, m, n, np.dtype(np.float32 if c_dtype == "f32" else
                                                                         np.uint16).itemsize, c_dtype)
    return Plan("f32.bf16.bf16", "bf16", a, b, out, dict(epi), False, c)


def test_config_checks_the_epilogue_options():
    for kw, key in ((dict(bias="diag"), "bias"), (dict(act="tanh"), "act"), (dict(bias="col", bias_type="f64"),
                                                                              "bias_type")):
        with pytest.raises(ConfigError) as e:
            GemmConfig(**kw)
        assert e.value.key == key, e.value
    cfg = GemmConfig(bias="row", act="silu", bias_type="bf16", with_c=True, epilogue="tma")
    assert "bf16 bias per row" in repr(cfg) and "beta * C" in repr(cfg) and "silu" in repr(cfg)
    assert GemmConfig(act="relu").bias_type == "f32"  # (no bias: its type plays no part)
    with pytest.raises(ValueError, match="vtype must be one of"):
        acc_map(activation("relu"), 64, vtype="f64")
    with pytest.raises(ValueError, match=r"one per vector \(2\); got \('bf16',\)"):
        acc_map(activation("relu"), 64, cols=1, rows=1, vtype=("bf16",))
    acc_map(cuda.jit(device=True)(lambda v, row, col, b, r: v + b + r), 64, cols=1, rows=1,
            vtype=("bf16", "f32"))  # (a type per vector)


def test_plan_signature_and_swapped_bias(monkeypatch):
    p = _plan(4096, 4096, 4096, {"bias": "col", "act": "gelu_tanh", "bias_type": "bf16"}, "f32", monkeypatch)
    sig = p.signature()
    assert sig[7] == types.Array(types.uint16, 1, "C")  # the bf16 bias as its bits, after alpha
    assert sig[8] == types.Array(types.float32, 2, "C") and sig[9] == types.float32  # C, beta
    assert p.cfg.bias == "col" and p.cfg.with_c and not p.swap
    s = _plan(16, 4096, 4096, {"bias": "col", "bias_type": "f16"}, None, monkeypatch)
    assert s.swap and s.cfg.bias == "row"  # a bias per column of out is one per row of out^T


def test_tall_plan_swaps_to_256_row_tiles_and_its_fused_kernel_compiles_clean(monkeypatch):
    """5000 x 3000 x 4000 takes swapped 256 x 152 tiles (``tiles.pick_swap_wide``): C^T transposed
    in two parts of 80 and 72 columns, boxes of 8 rows of out, 4 stages; with a bias per column of
    out (per row of C^T) and gelu_tanh each part is mapped before it goes: 10 stmatrix a block (9
    .x4, 1 .x2), 19 TMA stores, one MUFU a value, no spills."""
    plain = _plan(5000, 3000, 4000, {}, None, monkeypatch)
    fused = _plan(5000, 3000, 4000, {"bias": "col", "act": "gelu_tanh", "bias_type": "bf16"}, None, monkeypatch)
    for p in (plain, fused):
        cfg = p.cfg
        assert p.swap and (cfg.bm, cfg.bn, cfg.c_transposed, cfg.c_widths, cfg.c_box, cfg.stages) == \
            (256, 152, True, (80, 72), 8, 4), cfg
    assert fused.cfg.bias == "row"
    # (beta * C stays unswapped: its epilogue parts would spill there)
    assert not _plan(5000, 3000, 4000, {"act": "silu"}, "f32", monkeypatch).swap
    rf = compile_report(gemm_kernel(fused.cfg), fused.signature())
    assert (rf.sass["HGMMA"], rf.sass["STSM"], rf.sass["UTMASTG"]) == (8, 20, 38), rf.sass
    assert rf.sass_full.get("MUFU.TANH", 0) == 2 * 76 and rf.spill_bytes == 0 and rf.local_memory_ops == 0, rf


def test_bias_gelu_kernel_compiles_like_the_plain_one(monkeypatch):
    """128 x 256 tiles (4096^3; 8192^3 takes 128 x 192, see test_matmul_cpu): the same HGMMAs, TMA
    stores and stmatrix as the plain kernel (whose stores, beside the next tile's stages, are written
    out in three places), one MUFU per value for gelu_tanh (tanh.approx, a 16-bit output), no spills,
    the bf16 bias's 64 values per thread loaded once per tile, between the last stage's wgmmas and the
    wait for them (two code paths: the vector covering the tile or not); with C added too, spills
    (240 bytes) only in the epilogue, none in
    the main loop."""
    plain = _plan(4096, 4096, 4096, {}, None, monkeypatch)
    fused = _plan(4096, 4096, 4096, {"bias": "col", "act": "gelu_tanh", "bias_type": "bf16"}, None, monkeypatch)
    rp = compile_report(gemm_kernel(plain.cfg), plain.signature())
    rf = compile_report(gemm_kernel(fused.cfg), fused.signature())
    for op, copies in (("HGMMA", 1), ("UTMASTG", 3), ("STSM", 3)):  # (the plain kernel's stores: in three places)
        assert copies * rf.sass.get(op) == rp.sass.get(op), (op, rf.sass, rp.sass)
    assert rf.spill_bytes == 0 and rf.local_memory_ops == 0 and not rf.warnings, rf
    # gelu_tanh on tanh.approx for a 16-bit output: one MUFU a value, no ex2 (the scheduler's rcp aside)
    assert rf.sass_full.get("MUFU.TANH", 0) == 128 and "MUFU.EX2" not in rf.sass_full, rf.sass_full
    lines = rf.sass_text.splitlines()
    last = max(i for i, line in enumerate(lines) if "HGMMA" in line)
    drained = min(i for i, line in enumerate(lines) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in line and i > last)
    loads = [i for i, line in enumerate(lines) if "LDG.E.U16" in line]  # (the bias's bf16 elements)
    assert len(loads) == 2 * 64 and all(last < i < drained for i in loads), (len(loads), last, drained, loads[:4])
    with_c = _plan(4096, 4096, 4096, {"bias": "col", "act": "gelu_tanh", "bias_type": "bf16"}, "bf16", monkeypatch)
    rc = compile_report(gemm_kernel(with_c.cfg), with_c.signature())
    assert rc.sass.get("HGMMA") == rp.sass.get("HGMMA") and rc.spill_bytes <= 240, rc
    lines = rc.sass_text.splitlines()
    hgmma = [i for i, line in enumerate(lines) if "HGMMA" in line]
    wait = max(i for i, line in enumerate(lines[:hgmma[0]]) if "SYNCS.PHASECHK" in line)
    assert not any("LDL" in line or "STL" in line for line in lines[wait:hgmma[-1]])


def test_gelu_tanh_form_follows_the_output_type(monkeypatch):
    """gelu_tanh into a 16-bit output runs on tanh.approx (one MUFU a value); into f32 it keeps the
    accurate x / (1 + 2^z) form (ex2 and rcp a value)."""
    from nbwgmma.report import compile_reports

    monkeypatch.setattr(launch, "device_limits", lambda device=None: dict(launch.H100_LIMITS, multiprocessors=132))
    a = _row_major(1 << 40, 1024, 1024, 2, "bf16")
    b = ArrayInfo(2 << 40, (1024, 1024), (2, 2048), 2, "bf16", 0, "numba")
    plans = [Plan("f32.bf16.bf16", odt, a, b, _row_major(3 << 40, 1024, 1024, es, odt), {"act": "gelu_tanh"}, False)
             for odt, es in (("bf16", 2), ("f32", 4))]
    r16, r32 = compile_reports([(gemm_kernel(p.cfg), p.signature()) for p in plans])
    values = [p.cfg.bn // 2 * p.cfg.bm // (64 * p.cfg.consumers) for p in plans]  # per consumer thread
    assert r16.sass_full.get("MUFU.TANH") == values[0] and "MUFU.EX2" not in r16.sass_full, r16.sass_full
    assert r32.sass_full.get("MUFU.EX2") == values[1] and "MUFU.TANH" not in r32.sass_full, r32.sass_full


def test_bias_values_per_tile_only_where_they_fit(monkeypatch):
    """256-row tiles with a bf16 bias and gelu_tanh: 256 x 160 (5 parts a block) loads the bias
    once per tile under the last wgmmas with no spills; 256 x 168 (the default at 2048 x 11008 x
    4096, one part a block, where a tile's values spilled 696 bytes) keeps its loads by part and
    its 88 bytes of spills."""
    from nbwgmma.report import compile_reports

    epi = {"bias": "col", "act": "gelu_tanh", "bias_type": "bf16"}
    by_parts = _plan(4096, 14336, 4096, epi, None, monkeypatch)
    whole = _plan(2048, 11008, 4096, epi, None, monkeypatch)
    assert (by_parts.cfg.bm, by_parts.cfg.bn, by_parts.cfg.c_parts) == (256, 160, 5), by_parts.cfg
    assert (whole.cfg.bm, whole.cfg.bn, whole.cfg.c_parts) == (256, 168, 1), whole.cfg
    rp, rw = compile_reports([(gemm_kernel(p.cfg), p.signature()) for p in (by_parts, whole)])
    assert rp.spill_bytes == 0 and rw.spill_bytes <= 88, (rp, rw)
    for r, hoisted in ((rp, True), (rw, False)):
        lines = r.sass_text.splitlines()
        last = max(i for i, line in enumerate(lines) if "HGMMA" in line)
        drained = min(i for i, line in enumerate(lines) if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in line and i > last)
        loads = [i for i, line in enumerate(lines) if "LDG.E.U16" in line]
        assert all(last < i < drained for i in loads) == hoisted, (hoisted, last, drained, loads[:4])


def _scale_shift(v, row, col, s, cv, rv):
    return v * s + cv - rv + row - col


def test_config_checks_a_user_function_and_its_extras():
    for kw in (dict(extras=(("col", "f32"),)), dict(user=len, extras=(("diag", "f32"),)),
               dict(user=len, extras=(("scalar", "bf16"),)), dict(user=len, extras=(("col", "f32"),) * 5)):
        with pytest.raises(ConfigError) as e:
            GemmConfig(**kw)
        assert e.value.key == "extras", e.value
    with pytest.raises(ConfigError, match="user must be a device function"):
        GemmConfig(user=3)
    assert GemmConfig(user_t=True).user_t is False  # (no function: nothing is transposed)


def test_a_user_function_is_typed_alone_before_the_kernel(monkeypatch):
    """A function Numba cannot type (or that returns no number) is a MatmulError naming it, from a
    compile of the function alone (typed inside the GEMM kernel, the same error took Numba 154 s;
    alone about half a second); a function that compiles is compiled alone once."""
    from numba import cuda

    from nbwgmma.errors import MatmulError
    from nbwgmma.frontend import fused
    from nbwgmma.frontend.fused import user_epilogue

    compiled = []  # (function, device) of every compile the checks ask for
    real = cuda.compile_ptx
    monkeypatch.setattr(fused.cuda, "compile_ptx", lambda f, sig, **kw: compiled.append((f, kw.get("device")))
                        or real(f, sig, **kw))

    def broken(v, row, col):
        return v + undefined_name  # noqa: F821

    def pair(v, row, col, s):
        return v, s

    def adds_text(v, row, col):
        return v + "a"

    # Numba's reason and the function's line, in one line without terminal escapes (it kept only
    # Numba's first line: "Failed in cuda mode pipeline (step: nopython frontend)")
    line = broken.__code__.co_firstlineno + 1
    with pytest.raises(MatmulError, match=rf"the epilogue function broken does not compile with arguments "
                                          rf"\(value: f32, row: int64, col: int64\): NameError: name 'undefined_name' "
                                          rf"is not defined \(at {re.escape(__file__)}:{line}\)$"):
        user_epilogue(broken, (), 64, 48, 0)
    with pytest.raises(MatmulError, match=r"the epilogue function adds_text does not compile .*: No implementation of "
                                          r"function Function\(<built-in function add>\) found for signature: >>> "
                                          r"add\(float32, .*str.*\) \(at .*:\d+\)$") as exc:
        user_epilogue(adds_text, (), 64, 48, 0)
    assert "\x1b" not in str(exc.value) and "\n" not in str(exc.value)
    with pytest.raises(MatmulError, match=r"the epilogue function pair does not compile .*col: int64, f32\): "
                                          rf"it returns UniTuple\(float32 x 2\), not a number \(at "
                                          rf"{re.escape(__file__)}:{pair.__code__.co_firstlineno + 1}\)$"):
        user_epilogue(cuda.jit(device=True)(pair), (2.0,), 64, 48, 0)
    for _ in range(2):
        fn, kinds, infos = user_epilogue(_scale_shift, (2.0, 1.0, 0.5), 64, 48, 0)
    assert kinds == ("scalar",) * 3 and infos == (None,) * 3 and fn.py_func is _scale_shift
    assert compiled == [(broken, True), (adds_text, True), (pair, True), (_scale_shift, True)], compiled


def test_user_function_signature_and_swapped_extras(monkeypatch):
    from numba import cuda

    fn = cuda.jit(device=True, inline=True)(_scale_shift)
    extras = (("scalar", "f32"), ("col", "bf16"), ("row", "f16"))
    p = _plan(4096, 4096, 4096, {"bias": "row", "bias_type": "f32", "user": fn, "extras": extras}, None, monkeypatch)
    sig = p.signature()
    assert sig[7] == types.Array(types.float32, 1, "C") and sig[8] == types.float32  # the bias, then the extras
    assert sig[9] == types.Array(types.uint16, 1, "C") and sig[10] == types.Array(types.float16, 1, "C")
    assert not p.cfg.user_t and "user" not in p.config and "extras" not in p.config
    s = _plan(16, 4096, 4096, {"user": fn, "extras": extras}, None, monkeypatch)
    assert s.swap and s.cfg.user_t  # C^T: the function gets the kernel's column as its row
    assert s.cfg.extras == (("scalar", "f32"), ("row", "bf16"), ("col", "f16"))


def test_user_function_kernel_keeps_the_main_loop(monkeypatch):
    """128 x 256 tiles with a bias, gelu_tanh and a user function of a number, two vectors and the
    row and column: the plain kernel's HGMMAs, TMA stores and stmatrix (once: the plain kernel stores
    beside the next tile's stages, its store code in three places); no local memory between the
    main loop's first wait and its last HGMMA. (The spills, 248 bytes, are around the epilogue:
    64-bit row and column arithmetic per value; without it, 52.)"""
    from numba import cuda

    fn = cuda.jit(device=True, inline=True)(_scale_shift)
    plain = _plan(4096, 4096, 4096, {}, None, monkeypatch)
    user = _plan(4096, 4096, 4096, {"bias": "col", "act": "gelu_tanh", "bias_type": "bf16", "user": fn,
                                    "extras": (("scalar", "f32"), ("col", "bf16"), ("row", "f32"))}, None, monkeypatch)
    rp = compile_report(gemm_kernel(plain.cfg), plain.signature())
    ru = compile_report(gemm_kernel(user.cfg), user.signature())
    for op, copies in (("HGMMA", 1), ("UTMASTG", 3), ("STSM", 3)):
        assert copies * ru.sass.get(op) == rp.sass.get(op), (op, ru.sass, rp.sass)
    assert ru.spill_bytes <= 256, ru
    lines = ru.sass_text.splitlines()
    hgmma = [i for i, line in enumerate(lines) if "HGMMA" in line]
    wait = max(i for i, line in enumerate(lines[:hgmma[0]]) if "SYNCS.PHASECHK" in line)
    assert not any("LDL" in line or "STL" in line for line in lines[wait:hgmma[-1]])


def test_fp8_output_kernels_store_codes_by_tma(monkeypatch):
    """e4m3 in and out at 128 x 256 (8192^3): the plain kernel's QGMMAs, the codes stored through
    TMA (one store per 64-column block of each consumer's part), no spills; with amax the same
    whole part (padding stays zero: no mask), no spills, one atomic max per warp at the end; with
    amax and a bias (masked maxima) parts of 64 columns, no spills either."""
    from nbwgmma.frontend.args import check_call

    monkeypatch.setattr(launch, "device_limits", lambda device=None: dict(launch.H100_LIMITS, multiprocessors=132))

    def plan(epi, odt):
        a = _row_major(1 << 40, 8192, 8192, 1, "e4m3")
        b = ArrayInfo(2 << 40, (8192, 8192), (1, 8192), 1, "e4m3", 0, "numba")
        a, b, kind, _, _, opts, odt, _ = check_call(a, b, None, in_dtype=None, out_dtype=odt, scale_a=1.0,
                                                    scale_b=1.0, config=None, autotune_default=False)
        return Plan(kind, odt, a, b, _row_major(3 << 40, 8192, 8192, 1 if odt == "e4m3" else 2, odt),
                    {**opts, **epi}, True)

    plain, codes, amax = plan({}, "bf16"), plan({}, "e4m3"), plan({"amax": True}, "e4m3")
    biased = plan({"amax": True, "bias": "col", "bias_type": "bf16"}, "e4m3")
    assert codes.cfg.epilogue == "tma" and codes.cfg.out == "e4m3" and amax.cfg.c_parts == 1 and biased.cfg.c_parts == 4
    rp, rc, ra, rb = (compile_report(gemm_kernel(p.cfg), p.signature()) for p in (plain, codes, amax, biased))
    gmma = [op for op in rp.sass if "GMMA" in op]
    assert gmma and all(rc.sass.get(op) == rp.sass.get(op) == ra.sass.get(op) for op in gmma), (rc.sass, rp.sass)
    for r in (rc, ra, rb):
        assert r.sass.get("UTMASTG") and r.spill_bytes == 0 and r.local_memory_ops == 0, r
    assert sum(v for op, v in ra.sass.items() if "ATOM" in op) == 1, ra.sass  # (the amax's one atomic max)


def test_the_default_fused_kernels_of_the_common_tiles_compile_clean(monkeypatch):
    """The fused epilogues a CPU audit found clean (2026-12-06: 388 of 423 default kernels over 5,003
    shapes) stay clean, on the tiles the default path takes most: 128 x 256, 192 x 144, 128 x 192,
    the swapped 256 x 152 and 128 x 256, with a bias per column and gelu_tanh, silu, relu, and the erf
    gelu with a bias per column (libdevice's erff spilled 48 bytes at 128 x 192 there)."""
    from nbwgmma.report import compile_reports

    cases = [((9800, 12088), {"bias": "col", "act": "gelu_tanh", "bias_type": "bf16"}, (128, 256, False)),
             ((6360, 8864), {"bias": "col", "act": "silu", "bias_type": "f32"}, (192, 144, False)),
             ((6672, 5368), {"bias": "col", "act": "gelu_tanh", "bias_type": "bf16"}, (256, 152, True)),
             ((9888, 320), {"act": "relu"}, (128, 256, True)),
             ((8192, 8192), {"bias": "col", "act": "gelu", "bias_type": "f32"}, (128, 192, False))]
    plans = [_plan(m, n, 4096, epi, None, monkeypatch) for (m, n), epi, _ in cases]
    assert [(p.cfg.bm, p.cfg.bn, p.swap) for p in plans] == [tile for _, _, tile in cases]
    for p, r in zip(plans, compile_reports([(gemm_kernel(p.cfg), p.signature()) for p in plans])):
        assert r.spill_bytes == 0 and r.local_memory_ops == 0 and r.sass.get("HGMMA", 0) >= 1, (p.cfg, r)


def test_fused_products_take_swapped_256_row_tiles_that_compile_clean(monkeypatch):
    """With a fused bias and activation the default path takes swapped 256-row tiles of at most 152
    columns (tiles.SWAP256_FUSED_MAX_BN: their transposed parts spilled from 160 with gelu_tanh), and
    never those of tiles.pick_swapped_256 (plain products only); the widest it takes, with a
    bias per column and gelu_tanh, compiles with no spills and no local memory."""
    from nbwgmma.frontend.tiles import SWAP256_FUSED_MAX_BN
    from nbwgmma.report import compile_report

    def plan(m, n, epi):
        return _plan(m, n, 4096, epi, None, monkeypatch)

    fused = {"bias": "col", "act": "gelu_tanh", "bias_type": "bf16"}
    # 8000 x 5368: swapped 256 x 160 plain, 256 x 144 fused; 7832 x 7656: 256 x 152 fused (the widest);
    # 1862 x 2768: swapped 256 x 160 (tiles.pick_swapped_256) for a plain product only
    assert [(q.cfg.bm, q.cfg.bn, q.swap) for q in (plan(8000, 5368, {}), plan(8000, 5368, fused))] == \
        [(256, 160, True), (256, 144, True)]
    p = plan(7832, 7656, fused)
    assert (p.cfg.bm, p.cfg.bn, p.swap) == (256, SWAP256_FUSED_MAX_BN, True)
    assert (plan(1862, 2768, {}).cfg.bm, plan(1862, 2768, {}).swap) == (256, True)
    assert not plan(1862, 2768, fused).swap
    rep = compile_report(gemm_kernel(p.cfg), p.signature())
    assert rep.sass["HGMMA"] >= 1 and rep.spill_bytes == 0 and rep.local_memory_ops == 0, rep


def test_swapped_256_row_tiles_only_for_plain_products(monkeypatch):
    """tiles.pick_swapped_256 (2353 x 8880: swapped 256 x 160 tiles for a plain product, four waves) is not
    taken with a fused bias or activation (there 160 columns spill) or with beta * C (unmeasured)."""
    plain = _plan(2353, 8880, 4096, {}, None, monkeypatch)
    assert (plain.cfg.bm, plain.cfg.bn, plain.swap) == (256, 160, True)
    for epi, c in (({"bias": "col", "act": "gelu_tanh", "bias_type": "bf16"}, None), ({"act": "relu"}, None),
                   ({}, "bf16"), ({}, "f32")):
        p = _plan(2353, 8880, 4096, epi, c, monkeypatch)
        assert not p.swap, (epi, c, p.cfg)  # (the unswapped tile taken before the rule)
