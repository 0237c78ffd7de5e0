"""matmul with a fused epilogue (bias, activation) in Numba's CUDA simulator (run by
tests/test_sim.py in a child process with NUMBA_ENABLE_CUDASIM=1): exact on small integers
against float64, and the bad inputs refused before any launch."""

import math

import numpy as np
import pytest
from numba import config, cuda

from nbwgmma import MatmulError, matmul
from nbwgmma.frontend.matmul import last_plan
from nbwgmma.layout.wgmma_model import encode_elements

assert config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1"

RNG = np.random.default_rng(7)


def _bits(x, t):
    return cuda.to_device(encode_elements(x, t).view(np.uint16 if t == "bf16" else np.float16).reshape(x.shape))


def _f32(h, t):
    return (h.astype(np.uint32) << 16).view(np.float32) if t == "bf16" else h.astype(np.float32)


def _host(c, t):
    return _f32(c.copy_to_host(), t)


@pytest.mark.parametrize("m, n, k, where, act, t", [
    (200, 136, 72, "col", "relu", "bf16"),   # ragged M, N and K; two pairs of tiles
    (256, 128, 64, "row", "relu", "f16"),
    (130, 256, 136, None, "relu", "bf16"),
    (128, 64, 128, "col", None, "f16"),      # bias alone
])
def test_epilogue_is_exact_on_small_integers(m, n, k, where, act, t):
    _exact(m, n, k, where, act, t, b_row_major=False)


@pytest.mark.parametrize("m, n, k, where, t", [(136, 72, 72, "col", "bf16"), (130, 64, 136, None, "f16")])
def test_epilogue_of_a_row_major_b_is_exact(m, n, k, where, t):
    """B [K, N] with N contiguous (x @ w), read with wgmma's transpose bit."""
    _exact(m, n, k, where, "relu", t, b_row_major=True)


def _problem(m, n, k, where, act, alpha=1.0):
    """Small-integer A [M, K], w [N, K], a bias of kind ``where`` (f32) and the float64 reference
    ``act(alpha * A @ w.T + bias)``."""
    a, w = RNG.integers(-2, 3, (m, k)).astype(np.float64), RNG.integers(-2, 3, (n, k)).astype(np.float64)
    bias = None
    ref = alpha * (a @ w.T)
    if where == "col":
        bias = RNG.integers(-8, 9, n).astype(np.float32)
    elif where == "row":
        bias = RNG.integers(-8, 9, (m, 1)).astype(np.float32)
    if bias is not None:
        ref = ref + bias
    if act == "relu":
        ref = np.maximum(ref, 0)
    return a, w, bias, ref


def _exact(m, n, k, where, act, t, b_row_major):
    a, w, bias, ref = _problem(m, n, k, where, act)
    out = cuda.to_device(np.full((m, n), 0x7FC0 if t == "bf16" else np.nan, np.uint16 if t == "bf16" else np.float16))
    b = _bits(np.ascontiguousarray(w.T), t) if b_row_major else _bits(w, t).T
    matmul(_bits(a, t), b, bias=None if bias is None else cuda.to_device(bias), activation=act, out=out, in_dtype=t)
    np.testing.assert_array_equal(_host(out, t), ref)


def test_bad_epilogue_inputs_are_refused_before_launch():
    a, w = _bits(np.ones((64, 32)), "bf16"), _bits(np.ones((48, 32)), "bf16")
    cases = [
        (dict(bias=cuda.to_device(np.ones(47, np.float32))), r"bias must have shape \(48,\) or \(1, 48\).*got \(47,\)"),
        (dict(bias=cuda.to_device(np.ones((48, 1), np.float32))), r"or \(64, 1\) \(one per row\); got \(48, 1\)"),
        (dict(bias=cuda.to_device(np.ones(48, np.int32))), "bias must be f32, bf16 or f16; got s32"),
        (dict(bias=np.ones(48, np.float32)), "bias"),
        (dict(activation="tanh"), r"activation must be one of \['gelu', 'gelu_tanh', 'relu', 'sigmoid', 'silu'\]"),
    ]
    for kw, msg in cases:
        with pytest.raises(MatmulError, match=msg):
            matmul(a, w.T, in_dtype="bf16", **kw)


def test_strided_numba_vectors_are_copied():
    """A strided Numba bias (f16, per column) and a function's strided per-row vector (f32) are
    copied into contiguous f32 vectors and read by the library GEMM, with a config and B of
    neither layout (staged)."""
    t, (m, n, k) = "bf16", (72, 40, 48)
    a, w, _, _ = _problem(m, n, k, None, None)
    bias = RNG.integers(-8, 9, (n, 2)).astype(np.float16)
    rows = RNG.integers(-4, 5, (m, 3)).astype(np.float32)
    wide = _bits(np.repeat(w.T, 2, axis=1), t)[:, ::2]  # B [K, N] with a column stride of 2
    out = cuda.to_device(np.full((m, n), 0x7FC0, np.uint16))
    matmul(_bits(a, t), wide, bias=cuda.to_device(bias)[:, 1], activation="relu", epilogue=_plain_user,
           epilogue_args=(cuda.to_device(rows)[:, 2:3],), out=out, in_dtype=t, config={"bm": 64, "bn": 64})
    sign = np.where(np.add.outer(np.arange(m), np.arange(n)) % 2 == 0, 1, -1)  # (_plain_user's)
    np.testing.assert_array_equal(_host(out, t), np.maximum(a @ w.T + bias[:, 1], 0) + sign * rows[:, 2:3])


@pytest.mark.parametrize("m, n, k, where, act, t, config, how", [
    (16, 136, 72, "col", "relu", "bf16", None, "plain"),            # swapped small M: the bias per row of C^T
    (16, 136, 200, "col", "relu", "bf16", {"swap": 1, "bm": 64, "bn": 16, "stages": 2, "cluster_k": 2}, "plain"),  # swapped, K halves in a cluster
    (130, 72, 64, "row", "relu", "f16", {"split": 2}, "plain"),     # K slices summed, then the epilogue
    (96, 64, 40, "col", "relu", "bf16", None, "f32 out"),           # register stores (the direct epilogue)
    (72, 64, 64, "col", None, "f16", None, "strided B"),            # B staged through a K-major copy
    (80, 72, 64, "row", "relu", "bf16", None, "f16 bias"),          # the bias read as f16
    (64, 96, 32, None, None, "bf16", None, "alpha"),                # alpha alone: the scaled kernel
    (96, 56, 32, "row", "relu", "tf32", None, "plain"),             # f32 inputs as tf32, f32 out
    (256, 160, 64, "col", "relu", "bf16", {"bm": 256, "bn": 160}, "plain"),  # 5 parts through two slots
    (200, 160, 40, "col", "relu", "bf16", {"bm": 192, "bn": 144}, "plain"),  # three consumers (pick_tall's tile)
    (200, 160, 40, "col", "relu", "bf16", {"bm": 128, "bn": 160, "epilogue": "tma"}, "f32 out"),  # f32 by TMA
    (96, 64, 32, "row", "relu", "tf32", {"bm": 64, "bn": 64, "epilogue": "tma"}, "plain"),
])
def test_library_epilogue_is_exact(m, n, k, where, act, t, config, how):
    """A bias and/or an activation alone run on the library GEMM: its tile model, swapped small
    M, K slices, register stores, staging copies; exact on small integers."""
    alpha = 0.5 if how == "alpha" else 1.0
    a, w, bias, ref = _problem(m, n, k, where, act, alpha)
    if how == "f16 bias":
        bias = bias.astype(np.float16)
    kw = dict(bias=None if bias is None else cuda.to_device(bias), activation=act, config=config, alpha=alpha)
    if t == "tf32":
        out = cuda.to_device(np.full((m, n), np.nan, np.float32))
        matmul(cuda.to_device(a.astype(np.float32)), cuda.to_device(np.ascontiguousarray(w.T, np.float32)), out=out,
               **kw)
        np.testing.assert_array_equal(out.copy_to_host(), ref)
        return
    if how == "f32 out":
        out = cuda.to_device(np.full((m, n), np.nan, np.float32))
    else:
        out = cuda.to_device(np.full((m, n), 0x7FC0 if t == "bf16" else np.nan, np.uint16 if t == "bf16" else np.float16))
    b = _bits(w, t).T
    if how == "strided B":  # every other column of a wider array: neither layout TMA reads in place
        wide = np.zeros((2 * n, k))
        wide[::2] = w
        b = _bits(wide, t).T[:, ::2]
    matmul(_bits(a, t), b, out=out, in_dtype=t, **kw)
    got = out.copy_to_host()
    np.testing.assert_array_equal(got if how == "f32 out" else _f32(got, t), ref)


@cuda.jit(device=True, inline=True)
def _user(v, row, col, scale, colvec, rowvec):
    return v * scale + colvec - rowvec + (row % 3) - (col % 5)


def _plain_user(v, row, col, shift):  # a plain Python function: matmul compiles it
    return v + shift if (row + col) % 2 == 0 else v - shift


def test_user_epilogue_gets_row_col_and_its_extras_in_order():
    t, (m, n, k) = "bf16", (136, 72, 72)
    a, w = RNG.integers(-2, 3, (m, k)).astype(np.float64), RNG.integers(-2, 3, (n, k)).astype(np.float64)
    bias = RNG.integers(-8, 9, n).astype(np.float32)
    cv = RNG.integers(-4, 5, n).astype(np.float32)
    rv = RNG.integers(-4, 5, (m, 1)).astype(np.float32)
    rows, cols = np.indices((m, n))
    ref = np.maximum(a @ w.T + bias, 0) * 2 + cv - rv + rows % 3 - cols % 5
    out = cuda.to_device(np.full((m, n), 0x7FC0 if t == "bf16" else np.nan, np.uint16 if t == "bf16" else np.float16))
    matmul(_bits(a, t), _bits(w, t).T, bias=cuda.to_device(bias), activation="relu", epilogue=_user,
           epilogue_args=(2, cuda.to_device(cv), cuda.to_device(rv)), out=out, in_dtype=t)
    np.testing.assert_array_equal(_host(out, t), ref)
    a, w, rows, cols = a[:64], w[:48], rows[:64, :48], cols[:64, :48]  # one tile: a plain Python function
    out2 = cuda.to_device(np.full((64, 48), 0x7FC0, np.uint16))
    matmul(_bits(a, t), _bits(w, t).T, epilogue=_plain_user, epilogue_args=(1.5,), out=out2, in_dtype=t)
    np.testing.assert_array_equal(_host(out2, t), np.where((rows + cols) % 2 == 0, a @ w.T + 1.5, a @ w.T - 1.5))


@pytest.mark.parametrize("m, n, k, t, config, how", [
    (16, 136, 72, "bf16", None, "plain"),               # swapped small M: (row, col) and the vectors transposed
    (16, 136, 200, "bf16", {"swap": 1, "bm": 64, "bn": 16, "stages": 2, "cluster_k": 2}, "plain"),  # swapped, K halves in a cluster
    (130, 72, 64, "f16", {"split": 2}, "plain"),        # K slices summed, then the function
    (96, 64, 40, "bf16", None, "f32 out"),              # register stores
    (72, 64, 64, "f16", None, "strided B"),             # B staged through a K-major copy
    (80, 72, 64, "bf16", None, "f16 vectors"),          # the bias and a vector read as f16, one as f32
    (96, 56, 32, "tf32", None, "plain"),                # f32 inputs as tf32, f32 out
    (256, 160, 64, "bf16", {"bm": 256, "bn": 160}, "c"),  # 5 parts through two slots, beta * C first
    (96, 96, 40, "bf16", {"bm": 64, "bn": 96, "epilogue": "tma"}, "f32 out"),  # f32 values by TMA, 3 boxes
])
def test_library_user_epilogue_is_exact(m, n, k, t, config, how):
    """A user function with its extras (a number, a vector per column, one per row) runs on the
    library GEMM wherever a plain call would: each value's (row, col) and vectors are the
    caller's, also where the kernel computes C^T; exact on small integers."""
    a, w, bias, _ = _problem(m, n, k, "col", None)
    cv = RNG.integers(-4, 5, n).astype(np.float32)
    rv = RNG.integers(-4, 5, (m, 1)).astype(np.float32)
    rows, cols = np.indices((m, n))
    cm = RNG.integers(-3, 4, (m, n)).astype(np.float32) if how == "c" else None
    ref = np.maximum(a @ w.T + (0 if cm is None else 0.5 * cm) + bias, 0) * 2 + cv - rv + rows % 3 - cols % 5
    if how == "f16 vectors":
        bias, cv = bias.astype(np.float16), cv.astype(np.float16)
    extras = (2, cuda.to_device(cv), cuda.to_device(rv))
    kw = dict(bias=cuda.to_device(bias), activation="relu", epilogue=_user, epilogue_args=extras, config=config)
    if cm is not None:
        kw.update(c=cuda.to_device(cm), beta=0.5)
    if t == "tf32":
        out = cuda.to_device(np.full((m, n), np.nan, np.float32))
        matmul(cuda.to_device(a.astype(np.float32)), cuda.to_device(np.ascontiguousarray(w.T, np.float32)), out=out,
               **kw)
        np.testing.assert_array_equal(out.copy_to_host(), ref)
        return
    out = cuda.to_device(np.full((m, n), np.nan, np.float32)) if how == "f32 out" else \
        cuda.to_device(np.full((m, n), 0x7FC0 if t == "bf16" else np.nan, np.uint16 if t == "bf16" else np.float16))
    b = _bits(w, t).T
    if how == "strided B":
        wide = np.zeros((2 * n, k))
        wide[::2] = w
        b = _bits(wide, t).T[:, ::2]
    matmul(_bits(a, t), b, out=out, in_dtype=t, **kw)
    assert last_plan().cfg.user is not None  # (the library GEMM ran it)
    got = out.copy_to_host()
    np.testing.assert_array_equal(got if how == "f32 out" else _f32(got, t), ref)


def test_bad_epilogue_arguments_are_refused():
    a, w = _bits(np.ones((64, 32)), "bf16"), _bits(np.ones((48, 32)), "bf16")
    cases = [
        (dict(epilogue_args=(1.0,)), "epilogue_args are the extra arguments of an epilogue function"),
        (dict(epilogue=3), "epilogue must be a function"),
        (dict(epilogue=_plain_user, epilogue_args=(1, 2, 3, 4, 5)), "up to 4 extras; got 5"),
        (dict(epilogue=_plain_user, epilogue_args=(cuda.to_device(np.ones(7, np.float32)),)),
         r"epilogue_args\[0\] must be a number or a vector of shape \(48,\)"),
        (dict(epilogue=_plain_user, epilogue_args=(cuda.to_device(np.ones(48, np.int32)),)),
         r"epilogue_args\[0\] must be f32, bf16 or f16; got s32"),
        (dict(epilogue=_plain_user, epilogue_args=1.0), "epilogue_args must be a tuple of the epilogue function's"),
        (dict(epilogue=_plain_user, epilogue_args=("x",)), r"epilogue_args\[0\] must be a number or a vector .*; got str"),
        # one argument short (here and on the GPU: checked before the kernel runs)
        (dict(epilogue=_plain_user, epilogue_args=()), "the epilogue function _plain_user does not compile with "
                                                        "arguments \\(value: f32, row: int64, col: int64\\)"),
    ]
    for kw, msg in cases:
        with pytest.raises(MatmulError, match=msg) as e:
            matmul(a, w.T, in_dtype="bf16", **kw)
        assert "\n" not in str(e.value)


def _undefined_name(v, row, col):
    return v + UNDEFINED_NAME  # noqa: F821


def _undefined_in_a_branch(v, row, col):  # (a call with row 0 never reaches the name)
    if row > 5:
        return v + NOT_DEFINED_EITHER  # noqa: F821
    return v


def _adds_text(v, row, col):
    return v + "a"


def _returns_a_pair(v, row, col):
    return v, v


def _kernel_only(v, row, col):  # cuda.threadIdx exists in a kernel only: left to the launch, which runs it
    return v + cuda.threadIdx.x * 0


def _line(fn, text):
    import inspect

    src, first = inspect.getsourcelines(fn)
    return first + next(i for i, x in enumerate(src) if text in x)


def test_an_epilogue_that_cannot_run_is_refused_before_the_launch_naming_its_line():
    """The simulator ran the kernel and failed in it with the function's own NameError (the
    compiled path refused the call before any launch), and a result that is not one number was
    reported at nbwgmma's kit/typecheck.py and acc_map; both are now refused before the launch,
    naming the function and its line, as the compiled path does."""
    import re

    a, w = _bits(np.ones((64, 32)), "bf16"), _bits(np.ones((48, 32)), "bf16")
    for fn, reason, text in ((_undefined_name, "NameError: name 'UNDEFINED_NAME' is not defined", "UNDEFINED_NAME"),
                             (_undefined_in_a_branch, "NameError: name 'NOT_DEFINED_EITHER' is not defined",
                              "NOT_DEFINED_EITHER"),
                             (_adds_text, "TypeError: ", '"a"'), (_returns_a_pair, "it returns tuple, not a number",
                                                                   "return v, v")):
        out = cuda.to_device(np.full((64, 48), np.nan, np.float32))
        with pytest.raises(MatmulError, match=rf"^matmul: the epilogue function {fn.__name__} does not compile with "
                                              rf"arguments \(value: f32, row: int64, col: int64\): "
                                              rf"\w*{re.escape(reason)}.* \(at {re.escape(__file__)}:"
                                              rf"{_line(fn, text)}\)$") as exc:
            matmul(a, w.T, in_dtype="bf16", out=out, epilogue=fn)
        assert "\n" not in str(exc.value)
        assert np.isnan(out.copy_to_host()).all()  # refused before the launch
    out = matmul(a, w.T, in_dtype="bf16", out_dtype="f32", epilogue=_kernel_only)
    np.testing.assert_array_equal(out.copy_to_host(), np.full((64, 48), 32.0))


def _log_of_the_value(v, row, col):  # (a logarithm raises for v <= 0 in Python; a kernel gives -inf or NaN)
    return math.log(v) if row >= 4 else v


def test_an_epilogue_python_arithmetic_rejects_is_a_sim_error_at_its_line():
    """A user epilogue whose arithmetic Python refuses for some values (a logarithm of a negative
    number, here from row 4; row 0, the check before the launch, is fine) raised Python's bare
    ValueError mid-launch, where the compiled kernel gives NaN without an error: the simulator
    cannot model that call and now says so, as a SimError naming the function's line, its arguments
    and the error."""
    import re

    from nbwgmma.sim import SimError

    a, w = _bits(-np.ones((64, 32)), "bf16"), _bits(np.ones((48, 32)), "bf16")
    with pytest.raises(SimError, match=rf"^thread \d+ of block \(\d+, 0, 0\) at {re.escape(__file__)}:"
                                       rf"{_line(_log_of_the_value, 'math.log')}.* in _log_of_the_value\("
                                       r"np\.float32\(-32\.0\), np\.int64\(\d+\), np\.int64\(\d+\)\): Python's "
                                       r"arithmetic raised ValueError: math domain error\. A compiled kernel raises no "
                                       r"error there"):
        matmul(a, w.T, in_dtype="bf16", out_dtype="f32", epilogue=_log_of_the_value)


def test_alpha_beta_c_any_strides_and_in_place():
    t, (m, n, k) = "bf16", (136, 72, 72)  # |results| < 256: integers exact in bf16
    a, w = RNG.integers(-1, 2, (m, k)).astype(np.float64), RNG.integers(-1, 2, (n, k)).astype(np.float64)
    bias = RNG.integers(-8, 9, n).astype(np.float32)
    c = RNG.integers(-4, 5, (m, n)).astype(np.float32)
    da, db = _bits(a, t), _bits(w, t).T
    # C of f32 with transposed strides, alpha and beta
    ct = cuda.to_device(np.ascontiguousarray(c.T))
    out = cuda.to_device(np.full((m, n), 0x7FC0, np.uint16))
    matmul(da, db, bias=cuda.to_device(bias), c=ct.T, alpha=2, beta=-1, out=out, in_dtype=t)
    np.testing.assert_array_equal(_host(out, t), 2 * (a @ w.T) - c + bias)
    # in place: C is the output (bf16), beta 1 by default
    acc = cuda.to_device(encode_elements(c.astype(np.float64), "bf16").view(np.uint16).reshape(m, n))
    matmul(da, db, c=acc, out=acc, in_dtype=t)
    np.testing.assert_array_equal(_host(acc, t), a @ w.T + c)
    # beta = 0: C is not read (its NaN stays out), as torch.addmm
    out = cuda.to_device(np.full((m, n), 0x7FC0, np.uint16))
    matmul(da, db, bias=cuda.to_device(bias), c=cuda.to_device(np.full((m, n), np.nan, np.float32)), beta=0, out=out,
           in_dtype=t)
    np.testing.assert_array_equal(_host(out, t), a @ w.T + bias)


@pytest.mark.parametrize("m, n, k, config, how", [
    (16, 136, 64, None, "swapped"),                      # C^T read through its transposed view
    (16, 136, 200, {"swap": 1, "bm": 64, "bn": 16, "stages": 2, "cluster_k": 2}, "swapped"),  # K halves in a cluster, then C
    (130, 72, 64, {"split": 2}, "in place"),             # K slices summed, then C (the output itself)
    (256, 160, 64, {"bm": 256, "bn": 160}, "f32 c"),     # 5 parts through two slots, an f32 C
    (96, 64, 40, None, "f32 out"),                       # register stores, C transposed
    (130, 64, 40, {"bm": 128, "bn": 64, "epilogue": "tma"}, "f32 out"),  # f32 values by TMA
])
def test_library_beta_c_is_exact(m, n, k, config, how):
    """beta * C on the library GEMM (with alpha, a bias and relu): C of any strides, f32 or bf16,
    the output itself; exact on small integers."""
    t = "bf16"
    a, w = RNG.integers(-2, 3, (m, k)).astype(np.float64), RNG.integers(-2, 3, (n, k)).astype(np.float64)
    c = RNG.integers(-8, 9, (m, n)).astype(np.float64)
    bias = RNG.integers(-8, 9, n).astype(np.float32)
    ref = np.maximum(0.5 * (a @ w.T) + 2.0 * c + bias, 0)
    if how == "f32 c":
        cd = cuda.to_device(c.astype(np.float32))
    elif how == "f32 out":
        cd = cuda.to_device(np.ascontiguousarray(c.T, np.float32)).T
    else:
        cd = cuda.to_device(encode_elements(c, "bf16").view(np.uint16).reshape(m, n))
    if how == "in place":
        out = cd
    elif how == "f32 out":
        out = cuda.to_device(np.full((m, n), np.nan, np.float32))
    else:
        out = cuda.to_device(np.full((m, n), 0x7FC0, np.uint16))
    matmul(_bits(a, t), _bits(w, t).T, bias=cuda.to_device(bias), activation="relu", c=cd, alpha=0.5, beta=2.0,
           out=out, in_dtype=t, config=config)
    got = out.copy_to_host()
    np.testing.assert_array_equal(got if how == "f32 out" else _f32(got, t), ref)


def test_bad_c_and_beta_are_refused():
    a, w = _bits(np.ones((64, 32)), "bf16"), _bits(np.ones((48, 32)), "bf16")
    for kw, msg in ((dict(c=cuda.to_device(np.ones((64, 47), np.float32))), r"c must have shape \(64, 48\)"),
                    (dict(beta=2.0), "beta scales C; got beta=2.0 and no c"),
                    (dict(c=cuda.to_device(np.ones((64, 48), np.int32))), "c must be bf16, f16 or f32; got s32"),
                    (dict(c=cuda.to_device(np.ones((64, 48), np.float32)), beta="1"), "beta must be a real number"),
                    (dict(alpha="2"), "alpha must be a real number")):
        with pytest.raises(MatmulError, match=msg):
            matmul(a, w.T, in_dtype="bf16", **kw)


def test_uint16_out_and_c_are_bf16_bits_and_refused_with_f16_values():
    """A uint16 array holds bf16 bits (NumPy has no bf16). With f16 operands given as uint16 bits
    (in_dtype="f16") a uint16 out or C might as well be f16 bits, so it is refused (it was written
    or read as bf16: wrong numbers and no error); float16 arrays, or out_dtype="bf16" said, take
    the call (float16 operands with a uint16 out: bf16 bits, as before)."""
    from nbwgmma import MatmulTypeError

    rng = np.random.default_rng(3)
    x, w, cv = rng.integers(-2, 3, (64, 32)), rng.integers(-2, 3, (48, 32)), rng.integers(-8, 9, (64, 48))
    from nbwgmma.layout import to_bits

    a, wt = cuda.to_device(to_bits(x, "f16")), cuda.to_device(to_bits(w, "f16")).T  # raw uint16, as documented
    raw = cuda.to_device(np.zeros((64, 48), np.uint16))
    with pytest.raises(MatmulTypeError,
                       match=r"out is uint16, which nbwgmma reads as bf16 bits, and A or B holds f16 bits"):
        matmul(a, wt, in_dtype="f16", out=raw)
    with pytest.raises(MatmulTypeError,
                       match=r"c is uint16, which nbwgmma reads as bf16 bits, and A or B holds f16 bits"):
        matmul(a, wt, in_dtype="f16", c=cuda.to_device(to_bits(cv, "f16")), beta=1.0)
    with pytest.raises(MatmulTypeError, match=r"got u16 \(a uint16 array's values cannot be told apart"):
        matmul(a, wt, in_dtype="f16", bias=cuda.to_device(np.zeros(48, np.uint16)))
    want = x @ w.T + cv
    out = cuda.to_device(np.full((64, 48), np.nan, np.float16))
    matmul(a, wt, in_dtype="f16", out=out, c=cuda.to_device(cv.astype(np.float16)), beta=1.0)
    np.testing.assert_array_equal(out.copy_to_host().astype(np.float64), want)
    raw = cuda.to_device(np.full((64, 48), 0x7FC0, np.uint16))
    matmul(a, wt, in_dtype="f16", out=raw, out_dtype="bf16")  # said: bf16 bits
    np.testing.assert_array_equal(_f32(raw.copy_to_host(), "bf16"), x @ w.T)


def _row_shift(v, row, col):  # grows with the row: padding rows past M would raise amax
    return v + row


@pytest.mark.parametrize("fmt, n", [("e4m3", 72), ("e5m2", 80)])
def test_fp8_output_and_amax_are_exact(fmt, n):
    """Codes equal the model's rounding of the float64 result times scale_out; amax is the largest
    |result| inside C (rows past M hold larger padding values: they must not count). Rows of 72
    bytes go out by plain stores, rows of 80 through shared memory and TMA (the tile partial)."""
    from nbwgmma.layout.wgmma_model import float_to_fp8

    t, (m, k) = "bf16", (136, 72)
    a, w = RNG.integers(-2, 3, (m, k)).astype(np.float64), RNG.integers(-2, 3, (n, k)).astype(np.float64)
    bias = RNG.integers(-8, 9, n).astype(np.float32)
    ref = np.maximum(a @ w.T + bias, 0) + np.arange(m)[:, None]
    out = cuda.to_device(np.full((m, n), 0xAA, np.uint8))
    amax = cuda.to_device(np.full(1, 0.0, np.float32))
    matmul(_bits(a, t), _bits(w, t).T, bias=cuda.to_device(bias), activation="relu", epilogue=_row_shift, out=out,
           out_dtype=fmt, in_dtype=t, scale_out=0.5, amax=amax)
    np.testing.assert_array_equal(out.copy_to_host(), float_to_fp8(ref * 0.5, fmt))
    assert amax.copy_to_host()[0] == np.abs(ref).max()


@pytest.mark.parametrize("m, n, k, fmt, config, how", [
    (16, 144, 64, "e4m3", {"swap": 1}, "plain"),          # swapped small M: codes stored from the registers
    (16, 144, 200, "e5m2", {"swap": 1, "bm": 64, "bn": 16, "stages": 2, "cluster_k": 2}, "plain"),  # swapped, K halves in a cluster
    (16, 136, 64, "e4m3", None, "plain"),                 # rows of 136 bytes (not 16-byte multiples): plain stores
    (130, 128, 64, "e5m2", {"split": 2}, "plain"),        # K slices summed, then the codes (TMA, 64B swizzle)
    (256, 192, 64, "e4m3", {"bm": 128, "bn": 192, "c_parts": 3}, "plain"),  # 3 parts of 64 columns
    (200, 256, 96, "e4m3", {"bm": 128, "bn": 256}, "plain"),  # 128 x 256 in halves, ragged M
    (96, 72, 40, "e4m3", None, "strided out"),            # every other column of a wider array: plain stores
])
def test_library_fp8_output_and_amax_are_exact(m, n, k, fmt, config, how):
    """fp8 outputs on the library GEMM (its tile model, swapped small M, K slices, TMA stores of
    64B-swizzled codes, plain stores): the model's rounding of the float64 result times
    scale_out; amax the largest |result| inside C (the function raises padding rows past M)."""
    from nbwgmma.frontend.matmul import last_plan
    from nbwgmma.layout.wgmma_model import float_to_fp8

    t = "bf16"
    a, w = RNG.integers(-2, 3, (m, k)).astype(np.float64), RNG.integers(-2, 3, (n, k)).astype(np.float64)
    bias = RNG.integers(-8, 9, n).astype(np.float32)
    ref = np.maximum(a @ w.T + bias, 0) + np.arange(m)[:, None]
    if how == "strided out":
        wide = cuda.to_device(np.full((m, 2 * n), 0xAA, np.uint8))
        out = wide[:, ::2]
    else:
        out = cuda.to_device(np.full((m, n), 0xAA, np.uint8))
    amax = cuda.to_device(np.full(1, 0.0, np.float32))
    matmul(_bits(a, t), _bits(w, t).T, bias=cuda.to_device(bias), activation="relu", epilogue=_row_shift, out=out,
           out_dtype=fmt, in_dtype=t, scale_out=0.5, amax=amax, config=config)
    cfg = last_plan().cfg
    assert cfg.out == fmt and cfg.amax, cfg
    assert cfg.epilogue == ("direct" if how == "strided out" or last_plan().swap or n % 16 else "tma"), cfg
    assert last_plan().swap == bool(config and config.get("swap"))
    got = (wide.copy_to_host()[:, ::2] if how == "strided out" else out.copy_to_host())
    np.testing.assert_array_equal(got, float_to_fp8(ref * 0.5, fmt))
    assert amax.copy_to_host()[0] == np.abs(ref).max()
    if how == "strided out":  # the columns between were not written
        assert (wide.copy_to_host()[:, 1::2] == 0xAA).all()


def test_bad_fp8_output_arguments_are_refused():
    a, w = _bits(np.ones((64, 32)), "bf16"), _bits(np.ones((48, 32)), "bf16")
    out8 = cuda.to_device(np.zeros((64, 48), np.uint8))
    cases = [
        (dict(scale_out=2.0), "scale_out and amax go with an fp8 output"),
        (dict(out=out8, out_dtype="e4m3", amax=cuda.to_device(np.zeros(2, np.float32))),
         r"amax must be a one-element f32 array"),
        (dict(out=out8, out_dtype="e4m3", scale_out="2"), "scale_out must be a real number"),
        (dict(out=out8, out_dtype="e4m3", amax=cuda.to_device(np.zeros(1, np.float64))),
         r"amax must be a one-element f32 array; got f64"),
    ]
    for kw, msg in cases:
        with pytest.raises(MatmulError, match=msg):
            matmul(a, w.T, in_dtype="bf16", **kw)


@pytest.mark.parametrize("t", ["e4m3", "e5m2"])
def test_fp8_inputs_with_bias_and_fp8_or_bf16_output_are_exact(t):
    """fp8 A and B with per-tensor scales (folded into alpha), bias and ReLU; bf16 out, then
    e4m3 out with scale_out and amax."""
    from nbwgmma.layout.wgmma_model import float_to_fp8

    m, n, k = 136, 72, 208
    rng = np.random.default_rng(17)  # (its own: the data must not depend on which tests ran before)
    a, w = rng.integers(-2, 3, (m, k)).astype(np.float64), rng.integers(-2, 3, (n, k)).astype(np.float64)
    bias = rng.integers(-8, 9, n).astype(np.float32)
    ref = np.maximum(2.0 * (a @ w.T) + bias, 0)
    ref16 = _f32(encode_elements(ref, "bf16").view(np.uint16).reshape(ref.shape), "bf16")  # (above 256: rounded)
    da, dw = cuda.to_device(encode_elements(a, t)), cuda.to_device(encode_elements(w, t))
    out = cuda.to_device(np.full((m, n), 0x7FC0, np.uint16))
    matmul(da, dw.T, bias=cuda.to_device(bias), activation="relu", out=out, in_dtype=t, scale_a=0.5, scale_b=4.0)
    np.testing.assert_array_equal(_host(out, "bf16"), ref16)
    if t == "e5m2":  # the fp8 output once, with e4m3 inputs
        return
    out8, amax = cuda.to_device(np.full((m, n), 0xAA, np.uint8)), cuda.to_device(np.zeros(1, np.float32))
    matmul(da, dw.T, bias=cuda.to_device(bias), activation="relu", out=out8, in_dtype=t, out_dtype="e4m3",
           scale_out=0.125, amax=amax, scale_a=0.5, scale_b=4.0)
    np.testing.assert_array_equal(out8.copy_to_host(), float_to_fp8(ref * 0.125, "e4m3"))
    assert amax.copy_to_host()[0] == ref.max()
    # B [K, N] row-major: the library GEMM stages it K-major (an fp8 output too)
    b_rows = cuda.to_device(np.ascontiguousarray(encode_elements(w.T, t)))
    out = cuda.to_device(np.full((m, n), 0x7FC0, np.uint16))
    matmul(da, b_rows, bias=cuda.to_device(bias), activation="relu", out=out, in_dtype=t, scale_a=0.5, scale_b=4.0)
    np.testing.assert_array_equal(_host(out, "bf16"), ref16)
    out8 = cuda.to_device(np.full((m, n), 0xAA, np.uint8))
    matmul(da, b_rows, bias=cuda.to_device(bias), activation="relu", out=out8, in_dtype=t, out_dtype="e4m3",
           scale_out=0.125, scale_a=0.5, scale_b=4.0)
    np.testing.assert_array_equal(out8.copy_to_host(), float_to_fp8(ref * 0.125, "e4m3"))
    strided = cuda.to_device(np.stack([bias, bias], 1))[:, 0]  # (a strided Numba bias: copied)
    out8 = cuda.to_device(np.full((m, n), 0xAA, np.uint8))
    matmul(da, b_rows, bias=strided, activation="relu", out=out8, in_dtype=t, out_dtype="e4m3", scale_out=0.125,
           scale_a=0.5, scale_b=4.0)
    np.testing.assert_array_equal(out8.copy_to_host(), float_to_fp8(ref * 0.125, "e4m3"))


def test_c_in_place_then_user_epilogue_and_fp8_out():
    """beta * C in place, then an e4m3 output with amax (padding rows past M must not count)."""
    from nbwgmma.layout.wgmma_model import float_to_fp8

    t, (m, n, k) = "bf16", (136, 80, 72)  # fp8 rows of 80 bytes: stored through TMA
    a, w = RNG.integers(-1, 2, (m, k)).astype(np.float64), RNG.integers(-1, 2, (n, k)).astype(np.float64)
    c = RNG.integers(-4, 5, (m, n)).astype(np.float64)
    da, db = _bits(a, t), _bits(w, t).T
    acc = cuda.to_device(encode_elements(c, "bf16").view(np.uint16).reshape(m, n))
    matmul(da, db, c=acc, out=acc, alpha=2, in_dtype=t)
    np.testing.assert_array_equal(_host(acc, t), 2 * (a @ w.T) + c)
    out = cuda.to_device(np.full((m, n), 0xAA, np.uint8))
    amax = cuda.to_device(np.full(1, 0.0, np.float32))
    matmul(da, db, epilogue=_row_shift, out=out, out_dtype="e4m3", in_dtype=t, scale_out=0.5, amax=amax)
    ref = a @ w.T + np.arange(m)[:, None]
    np.testing.assert_array_equal(out.copy_to_host(), float_to_fp8(ref * 0.5, "e4m3"))
    assert amax.copy_to_host()[0] == np.abs(ref).max()


def test_gelu_tanh_with_c_and_alpha():
    """beta * C, alpha, a bias and gelu_tanh: within two bf16 roundings of the float64 result."""
    t, (m, n, k) = "bf16", (120, 72, 64)
    a, w = RNG.integers(-2, 3, (m, k)).astype(np.float64), RNG.integers(-2, 3, (n, k)).astype(np.float64)
    c = RNG.integers(-4, 5, (m, n)).astype(np.float64) / 4
    bias = RNG.integers(-8, 9, n).astype(np.float32) / 8
    cd = cuda.to_device(encode_elements(c, "bf16").view(np.uint16).reshape(m, n))
    out = cuda.to_device(np.full((m, n), 0x7FC0, np.uint16))
    matmul(_bits(a, t), _bits(w, t).T, bias=cuda.to_device(bias), activation="gelu_tanh", c=cd, beta=0.5, alpha=0.25,
           out=out, in_dtype=t)
    x = 0.25 * (a @ w.T) + 0.5 * c + bias
    ref = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(_host(out, t), ref, rtol=2 ** -7, atol=2 ** -10)


def test_every_epilogue_call_runs_on_the_library_gemm(monkeypatch):
    """Large fp8 outputs with amax, Numba f16 and strided vectors, user functions, a config: every
    call with an epilogue plans the library GEMM; launches stubbed (the simulator would take hours
    at this size)."""
    import nbwgmma.frontend.plan as plan_mod

    class Routed(Exception):
        pass

    def to_library(self, *a, **k):
        raise Routed(str(self.cfg.amax))

    monkeypatch.setattr(plan_mod.Plan, "__call__", to_library)
    m, n, k = 4096, 2048, 16
    a, w = cuda.to_device(np.zeros((m, k), np.uint16)), cuda.to_device(np.zeros((n, k), np.uint16))
    out, amax = cuda.to_device(np.zeros((m, n), np.uint8)), cuda.to_device(np.zeros(1, np.float32))
    f16 = cuda.to_device(np.zeros(n, np.float16))
    strided = cuda.to_device(np.zeros((n, 2), np.float32))[:, 0]
    for kw in (dict(), dict(bias=cuda.to_device(np.zeros(n, np.float32))), dict(bias=f16), dict(bias=strided),
               dict(epilogue=_row_shift), dict(epilogue=_plain_user, epilogue_args=(f16,)),
               dict(epilogue=_plain_user, epilogue_args=(strided,)), dict(config={"bm": 128, "bn": 128})):
        with pytest.raises(Routed, match="True"):
            matmul(a, w.T, in_dtype="bf16", out=out, out_dtype="e4m3", amax=amax, **kw)


def _k0_user(v, row, col, w):
    return v + row * 2.0 - col + w


def test_k_zero_with_an_fp8_output_or_an_epilogue():
    """K = 0: the product is zeros, and the epilogue still runs on them: an fp8 output alone is
    zeros (amax left as it is); a bias, an activation, C and your function give their values
    (a product of zeros of K = 16 stands in), amax the largest of them."""
    m, n = 64, 72
    a, b = cuda.to_device(np.zeros((m, 0), np.uint16)), cuda.to_device(np.zeros((0, n), np.uint16))
    out = cuda.to_device(np.full((m, n), 0xAA, np.uint8))
    amax = cuda.to_device(np.full(1, 3.0, np.float32))
    matmul(a, b, in_dtype="bf16", out=out, out_dtype="e4m3", amax=amax, scale_out=0.5)
    assert (out.copy_to_host() == 0).all() and amax.copy_to_host()[0] == 3.0
    bias = np.arange(n, dtype=np.float32) - 30
    got = matmul(a, b, in_dtype="bf16", bias=cuda.to_device(bias), activation="relu", out_dtype="f32")
    np.testing.assert_array_equal(got.copy_to_host(), np.broadcast_to(np.maximum(bias, 0), (m, n)))
    c = RNG.integers(-8, 8, (m, n)).astype(np.float32)
    out = cuda.to_device(np.full((m, n), np.nan, np.float32))
    matmul(a, b, in_dtype="bf16", c=cuda.to_device(c), beta=0.5, alpha=3.0, out=out, epilogue=_k0_user,
           epilogue_args=(2.0,))
    np.testing.assert_array_equal(out.copy_to_host(), 0.5 * c + 2.0 * np.arange(m)[:, None] - np.arange(n) + 2.0)
    amax = cuda.to_device(np.zeros(1, np.float32))
    codes = matmul(a, b, in_dtype="bf16", bias=cuda.to_device(bias), out_dtype="e4m3", amax=amax)
    assert amax.copy_to_host()[0] == 41.0
    assert (codes.copy_to_host() == encode_elements(np.broadcast_to(bias, (m, n)), "e4m3")).all()
    out = cuda.to_device(np.full((m, n), np.nan, np.float32))  # beta = 0: C unread, zeros as a batch gives
    matmul(a, b, in_dtype="bf16", c=cuda.to_device(np.full((m, n), np.nan, np.float32)), beta=0, out=out,
           out_dtype="f32")
    assert (out.copy_to_host() == 0).all()


@pytest.mark.parametrize("m, n, k, config, act", [
    (130, 144, 64, {"bm": 128, "bn": 128}, None),           # TMA stores, ragged M and N
    (130, 136, 64, None, "relu"),                           # direct stores (136-byte rows)
    (130, 128, 256, {"split": 2}, None),                    # K slices
    (16, 144, 64, {"swap": 1}, None),                       # swapped
    (16, 144, 200, {"swap": 1, "bm": 64, "bn": 16, "stages": 2, "cluster_k": 2}, None),  # swapped, K halves in a cluster
    (200, 128, 64, {"cluster": 2}, None),                   # a cluster whose second tile lies past M
])
def test_amax_without_a_mask_is_exact(m, n, k, config, act):
    """An fp8 output's amax where the tile's padding stays zero (no bias or function: no mask):
    exact, and every padding value left out by being zero."""
    from nbwgmma.layout.wgmma_model import float_to_fp8

    a, w, _, ref = _problem(m, n, k, None, act)
    out = cuda.to_device(np.full((m, n), 0xAA, np.uint8))
    amax = cuda.to_device(np.full(1, 0.0, np.float32))
    matmul(_bits(a, "bf16"), _bits(w, "bf16").T, out=out, out_dtype="e4m3", in_dtype="bf16", scale_out=0.5,
           amax=amax, config=config, **({} if act is None else {"activation": act}))
    assert last_plan().cfg.amax and last_plan().cfg.zero_padding
    np.testing.assert_array_equal(out.copy_to_host(), float_to_fp8(ref * 0.5, "e4m3"))
    assert amax.copy_to_host()[0] == np.abs(ref).max()


@pytest.mark.parametrize("config", [{"bm": 128, "bn": 128}, {"bm": 256, "bn": 160}])
def test_a_16bit_column_bias_loaded_under_the_last_wgmmas_is_exact(config, monkeypatch):
    """A 16-bit column bias with a 16-bit output through TMA on a GPU the tile model plans for:
    the bias loaded once a tile, under the main loop's last wgmmas (no case took that path)."""
    from tests.sim_frontend_cases import on_a_gpu_of

    on_a_gpu_of(monkeypatch, 2, "forward")
    test_library_epilogue_is_exact(200, 264, 200, "col", "relu", "f16", config, "f16 bias")
