"""Batches of products through ``nbwgmma.matmul`` in Numba's CUDA simulator (run by
tests/test_sim.py in a child process with NUMBA_ENABLE_CUDASIM=1; also by hand:
NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/sim_batched_cases.py).

Outputs are poisoned (NaN) before each call and compared with float64 products; small
integers make every answer exact. The shapes cut tiles in M, N and K, so a matrix's tail
rows and columns must not reach the next matrix of the batch (3-D maps clip per matrix)."""

import numpy as np
import pytest
from numba import config, cuda
from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

from nbwgmma import MatmulError, matmul
from nbwgmma.layout.wgmma_model import decode_elements, encode_elements

assert config.ENABLE_CUDASIM, "run with NUMBA_ENABLE_CUDASIM=1"

RAW = {"bf16": np.uint16, "f16": np.float16, "f32": np.float32, "e4m3": np.uint8}


def bits(x, t):
    if t in ("f16", "f32"):
        return x.astype(RAW[t])
    return encode_elements(x, t).view(RAW[t]).reshape(x.shape)


def decoded(h, t):
    if t == "bf16":
        return decode_elements(h.view(np.uint8).reshape(h.shape[:-1] + (-1,)), "bf16").astype(np.float64)
    if t == "e4m3":
        return decode_elements(h.reshape(h.shape), "e4m3").astype(np.float64)
    return h.astype(np.float64)


def batch(nb, rows, cols, t, contiguous_cols, rng, hi=3):
    """(values, simulator array (nb, rows, cols)): the last dimension contiguous, or the one before."""
    x = rng.integers(-hi, hi + 1, (nb, rows, cols)).astype(np.float64)
    h = bits(x, t)
    if contiguous_cols:
        return x, cuda.to_device(h)
    # a batch of transposed matrices: (nb, cols, rows) in memory, seen as (nb, rows, cols)
    return x, _transposed_view(np.ascontiguousarray(h.transpose(0, 2, 1)))


def _transposed_view(h):
    """A simulator array (nb, cols, rows) seen as (nb, rows, cols), no copy."""
    return FakeCUDAArray(cuda.to_device(h)._ary.transpose(0, 2, 1))


def poisoned(shape, odt):
    """NaN in every element (bf16 0x7FC0, e4m3 0x7F)."""
    fill = {"bf16": 0x7FC0, "e4m3": 0x7F}.get(odt, np.nan)
    return cuda.to_device(np.full(shape, fill, RAW[odt]))


@pytest.mark.parametrize("t, a_k, b_k, odt", [
    ("bf16", True, True, "bf16"),   # both read in place, K-major
    ("f16", False, False, "f16"),   # both MN-major in place (wgmma transposes)
    ("bf16", True, False, "f32"),   # f32 values through TMA
    ("e4m3", False, True, "bf16"),  # fp8: A staged K-major, matrix by matrix
    ("f32", True, True, "f32"),     # tf32
])
def test_a_batch_of_products_exact(t, a_k, b_k, odt):
    rng = np.random.default_rng(1)
    nb, m, n, k = 3, 70, 72, 80
    a, da = batch(nb, m, k, t, a_k, rng)
    b, db = batch(nb, k, n, t, not b_k, rng)  # (B is [K, N]: K-major means K contiguous, not N)
    out = poisoned((nb, m, n), odt)
    raw = t in ("bf16", "e4m3")
    c = matmul(da, db, out=out, in_dtype=t if raw else None, config={"bm": 64, "bn": 64})
    assert c is out
    want = np.einsum("bmk,bkn->bmn", a, b)
    np.testing.assert_array_equal(decoded(out.copy_to_host(), odt), want)


def test_bias_activation_alpha_and_a_fresh_output():
    rng = np.random.default_rng(2)
    nb, m, n, k = 2, 65, 64, 64
    a, da = batch(nb, m, k, "f16", True, rng)
    b, db = batch(nb, k, n, "f16", False, rng)
    bias = rng.integers(-4, 5, n).astype(np.float32)
    c = matmul(da, db, bias=cuda.to_device(bias), activation="relu", alpha=2.0, config={"bm": 64, "bn": 64})
    assert c.shape == (nb, m, n)
    want = np.maximum(2.0 * np.einsum("bmk,bkn->bmn", a, b) + bias, 0)
    np.testing.assert_array_equal(c.copy_to_host().astype(np.float64), want)
    rbias = rng.integers(-4, 5, (m, 1)).astype(np.float32)  # one per row of each product
    c = matmul(da, db, bias=cuda.to_device(rbias), config={"bm": 64, "bn": 64})
    np.testing.assert_array_equal(c.copy_to_host().astype(np.float64), np.einsum("bmk,bkn->bmn", a, b) + rbias)


def test_ragged_widths_default_tile_and_a_batch_of_one():
    """N = 20 f16 (40-byte rows): the fresh output's rows are padded to 16 bytes for TMA (a view of
    the first 20 columns); the tile model's own tile; a batch of one matrix."""
    rng = np.random.default_rng(5)
    for nb in (2, 1):
        a, da = batch(nb, 33, 24, "f16", True, rng)
        b, db = batch(nb, 24, 20, "f16", False, rng)
        c = matmul(da, db)
        assert c.shape == (nb, 33, 20)
        np.testing.assert_array_equal(c.copy_to_host().astype(np.float64), np.einsum("bmk,bkn->bmn", a, b))


def test_beta_c_per_product_broadcast_and_in_place():
    """torch.baddbmm: alpha * A @ B + beta * C, C of the output's shape, one (M, N) matrix for every
    product, or out itself (accumulated in place)."""
    rng = np.random.default_rng(8)
    nb, m, n, k = 3, 70, 64, 48
    a, da = batch(nb, m, k, "f16", True, rng)
    b, db = batch(nb, k, n, "f16", False, rng)
    prod = np.einsum("bmk,bkn->bmn", a, b)
    c3 = rng.integers(-3, 4, (nb, m, n)).astype(np.float64)
    c2 = rng.integers(-3, 4, (m, n)).astype(np.float64)
    cfg = {"bm": 64, "bn": 64}
    got = matmul(da, db, c=cuda.to_device(c3.astype(np.float32)), alpha=2.0, beta=-1.0, config=cfg)
    np.testing.assert_array_equal(got.copy_to_host().astype(np.float64), 2 * prod - c3)
    got = matmul(da, db, c=cuda.to_device(c2.astype(np.float16)), beta=0.5, activation="relu", config=cfg)
    np.testing.assert_array_equal(got.copy_to_host().astype(np.float64), np.maximum(prod + 0.5 * c2, 0))
    out = cuda.to_device(c3.astype(np.float16))
    matmul(da, db, c=out, out=out, config=cfg)  # out += A @ B
    np.testing.assert_array_equal(out.copy_to_host().astype(np.float64), prod + c3)
    x, w = a.reshape(nb * m, k)[None], b[0]  # (1, 210, 48) @ (48, 64): the folded path takes c too
    dx = cuda.to_device(x.astype(np.float16))
    got = matmul(dx, cuda.to_device(w.astype(np.float16)), c=cuda.to_device(c3.reshape(1, nb * m, n).astype(np.float32)))
    np.testing.assert_array_equal(got.copy_to_host().astype(np.float64), x @ w + c3.reshape(1, nb * m, n))


def test_fp8_output_with_amax():
    rng = np.random.default_rng(3)
    nb, m, n, k = 2, 64, 64, 32
    a, da = batch(nb, m, k, "bf16", True, rng, hi=2)
    b, db = batch(nb, k, n, "bf16", False, rng, hi=2)
    amax = cuda.to_device(np.zeros(1, np.float32))
    out = poisoned((nb, m, n), "e4m3")
    matmul(da, db, out=out, in_dtype="bf16", out_dtype="e4m3", scale_out=0.5, amax=amax, config={"bm": 64, "bn": 64})
    want = np.einsum("bmk,bkn->bmn", a, b)
    got = decode_elements(out.copy_to_host(), "e4m3").astype(np.float64)
    ref = decode_elements(encode_elements(0.5 * want, "e4m3"), "e4m3").astype(np.float64).reshape(want.shape)
    np.testing.assert_array_equal(got, ref)
    assert amax.copy_to_host()[0] == np.abs(want).max()


def test_leading_dimensions_merge_and_a_2d_b_folds():
    rng = np.random.default_rng(4)
    x = rng.integers(-3, 4, (2, 3, 40, 48)).astype(np.float64)
    w = rng.integers(-3, 4, (2, 3, 48, 24)).astype(np.float64)
    c = matmul(cuda.to_device(x.astype(np.float16)), cuda.to_device(w.astype(np.float16)), config={"bm": 64, "bn": 64})
    assert c.shape == (2, 3, 40, 24)
    np.testing.assert_array_equal(c.copy_to_host().astype(np.float64), x @ w)
    w2 = w[0, 0]  # (batch..., M, K) @ (K, N): one product of all the rows
    c = matmul(cuda.to_device(x.astype(np.float16)), cuda.to_device(w2.astype(np.float16)))
    assert c.shape == (2, 3, 40, 24)
    np.testing.assert_array_equal(c.copy_to_host().astype(np.float64), x @ w2)


def test_a_2d_b_with_a_c_and_out_whose_matrices_are_transposed():
    """From a fuzz: a batched A times a 2-D B folds into one product of all the rows, which a C or
    an out with each matrix transposed cannot take; they were refused with a message naming the
    shape they had. They now run as a batch (the B one matrix for every product). And
    ``config={"stream_k": True}`` is taken as 1 (GemmConfig takes True)."""
    rng = np.random.default_rng(12)
    x = rng.integers(-3, 4, (2, 40, 32)).astype(np.float64)
    w = rng.integers(-3, 4, (32, 24)).astype(np.float64)
    cv = rng.integers(-3, 4, (2, 40, 24)).astype(np.float64)
    c = FakeCUDAArray(np.ascontiguousarray(cv.transpose(0, 2, 1)).astype(np.float32).transpose(0, 2, 1))
    got = matmul(cuda.to_device(x.astype(np.float16)), cuda.to_device(w.astype(np.float16)), c=c, out_dtype="f32")
    np.testing.assert_array_equal(got.copy_to_host().astype(np.float64), x @ w + cv)
    out = FakeCUDAArray(np.full((2, 24, 40), np.nan, np.float16).transpose(0, 2, 1))
    matmul(cuda.to_device(x.astype(np.float16)), cuda.to_device(w.astype(np.float16)), out=out)
    np.testing.assert_array_equal(out.copy_to_host().astype(np.float64), x @ w)
    got = matmul(cuda.to_device(x[0].astype(np.float16)), cuda.to_device(w.astype(np.float16)), config={"stream_k": True})
    np.testing.assert_array_equal(got.copy_to_host().astype(np.float64), x[0] @ w)


def test_two_batch_dimensions_that_do_not_merge_are_copied():
    """(B, S, H, D) seen as (B, H, S, D) (attention's heads): A's and B's batches are copied K-major by
    one kernel; the output is a fresh (B, H, S, S')."""
    rng = np.random.default_rng(7)
    q = rng.integers(-3, 4, (2, 40, 3, 32)).astype(np.float64)  # (B, S, H, D)
    kt = rng.integers(-3, 4, (2, 24, 3, 32)).astype(np.float64)
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    dq = FakeCUDAArray(cuda.to_device(q.astype(np.float16))._ary.transpose(0, 2, 1, 3))  # (B, H, S, D)
    dk = FakeCUDAArray(cuda.to_device(kt.astype(np.float16))._ary.transpose(0, 2, 3, 1))  # (B, H, D, S')
    c = matmul(dq, dk, config={"bm": 64, "bn": 64})
    assert c.shape == (2, 3, 40, 24)
    want = q.transpose(0, 2, 1, 3) @ kt.transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(c.copy_to_host().astype(np.float64), want)


def test_n_contiguous_b_staged_and_m1_fold():
    """Attention's P @ V with V (B, S, H, D) seen as (B, H, S, D): B's matrices N-contiguous in two
    batch strides, staged K-major (the kernel then reads K-major B); A of one row a matrix folds."""
    rng = np.random.default_rng(9)
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    p = rng.integers(-3, 4, (2, 3, 40, 24)).astype(np.float64)
    v = rng.integers(-3, 4, (2, 24, 3, 32)).astype(np.float64)
    dv = FakeCUDAArray(cuda.to_device(v.astype(np.float16))._ary.transpose(0, 2, 1, 3))
    c = matmul(cuda.to_device(p.astype(np.float16)), dv, config={"bm": 64, "bn": 64})
    np.testing.assert_array_equal(c.copy_to_host().astype(np.float64), p @ v.transpose(0, 2, 1, 3))
    x = rng.integers(-3, 4, (3, 8, 1)).astype(np.float64)  # (3, 1, 8) rows back to back
    dx = FakeCUDAArray(cuda.to_device(x.astype(np.float16))._ary.transpose(0, 2, 1))
    w = rng.integers(-3, 4, (8, 16)).astype(np.float64)
    c = matmul(dx, cuda.to_device(w.astype(np.float16)))
    np.testing.assert_array_equal(c.copy_to_host().astype(np.float64), x.transpose(0, 2, 1) @ w)


def _scaled_shift(v, row, col, w, s):
    return v * w + s * row - col


def test_an_epilogue_function_sees_each_products_rows_and_columns():
    """epilogue=(value, row, col, *extras) over a batch: row and col inside the product, a vector
    per column and a number, the same for every product; a given out TMA cannot write, too."""
    rng = np.random.default_rng(10)
    nb, m, n, k = 3, 70, 72, 40
    a, da = batch(nb, m, k, "f16", True, rng)
    b, db = batch(nb, k, n, "f16", False, rng)
    w = rng.integers(-2, 3, n).astype(np.float32)
    prod = np.einsum("bmk,bkn->bmn", a, b)
    want = prod * w + 2.0 * np.arange(m)[:, None] - np.arange(n)
    got = matmul(da, db, epilogue=_scaled_shift, epilogue_args=(cuda.to_device(w), 2.0), config={"bm": 64, "bn": 64})
    np.testing.assert_array_equal(got.copy_to_host().astype(np.float64), want)
    bias = rng.integers(-3, 4, n).astype(np.float32)  # with a bias and relu before the function
    got = matmul(da, db, bias=cuda.to_device(bias), activation="relu", epilogue=_scaled_shift,
                 epilogue_args=(cuda.to_device(w), 2.0), config={"bm": 64, "bn": 64})
    np.testing.assert_array_equal(got.copy_to_host().astype(np.float64),
                                  np.maximum(prod + bias, 0) * w + 2.0 * np.arange(m)[:, None] - np.arange(n))
    out = poisoned((nb, m, 18), "f32")  # (72-byte rows: the register stores)
    sub = cuda.to_device(bits(np.ascontiguousarray(b[:, :, :18]), "f16"))
    matmul(da, sub, out=out, epilogue=_scaled_shift, epilogue_args=(cuda.to_device(w[:18]), -1.0),
           config={"bm": 64, "bn": 64})
    np.testing.assert_array_equal(out.copy_to_host(), prod[:, :, :18] * w[:18] - np.arange(m)[:, None]
                                  - np.arange(18))


def test_harmless_config_values_pass():
    a = cuda.to_device(np.ones((2, 8, 16), np.float16))
    b = cuda.to_device(np.ones((2, 16, 8), np.float16))
    c = matmul(a, b, config={"swap": 0, "split": 1, "epilogue": "tma", "bm": 64, "bn": 64})
    np.testing.assert_array_equal(c.copy_to_host(), np.full((2, 8, 8), 16.0))


def test_k_zero_and_empty_batches():
    a = cuda.to_device(np.ones((2, 5, 0), np.float16))
    b = cuda.to_device(np.ones((2, 0, 7), np.float16))
    out = poisoned((2, 5, 7), "f16")
    matmul(a, b, out=out)
    assert (out.copy_to_host() == 0).all()
    c = matmul(cuda.to_device(np.ones((0, 5, 8), np.float16)), cuda.to_device(np.ones((0, 8, 7), np.float16)))
    assert c.shape == (0, 5, 7)
    # with a bias and an activation: their values over the zero product, in every matrix
    bias = np.arange(7, dtype=np.float16) - 3
    got = matmul(a, b, bias=cuda.to_device(bias), activation="relu", out_dtype="f32").copy_to_host()
    np.testing.assert_array_equal(got, np.broadcast_to(np.maximum(bias, 0), (2, 5, 7)))


@pytest.mark.parametrize("a_shape, b_shape, kw, says", [
    ((2, 8, 16), (3, 16, 8), {}, "batch dimensions must be equal"),
    ((2, 8, 16), (16, 8), {"c": (8, 8)}, "not one matrix for every product"),
    ((2, 8, 16), (2, 16, 8), {"c": (3, 8, 8)}, "c must have shape (2, 8, 8) or (8, 8)"),
    ((2, 8, 16), (2, 16, 8), {"config": {"split": 2}}, "without split"),
    ((2, 8, 16), (16, 8), {"bias": (8, 1)}, "a bias per column"),
    ((2, 8, 16), (2, 16, 8), {"out": (2, 8, 9)}, "out must have shape (2, 8, 8)"),
    ((2, 8, 16), (16, 8), {"epilogue": lambda v, r, c: v}, "epilogue function with a batch of A over a 2-D B"),
])
def test_bad_batches_are_clear_errors(a_shape, b_shape, kw, says):
    a = cuda.to_device(np.ones(a_shape, np.float16))
    b = cuda.to_device(np.ones(b_shape, np.float16))
    kw = dict(kw)
    for name in ("bias", "out", "c"):
        if isinstance(kw.get(name), tuple):
            kw[name] = cuda.to_device(np.ones(kw[name], np.float16))
    with pytest.raises(MatmulError, match=f".*{says.replace('(', '[(]').replace(')', '[)]')}"):
        matmul(a, b, **kw)


@pytest.mark.parametrize("form", ["2-D A", "interleaved A over 2-D B", "expanded A", "2-D A staged", "expanded B"])
def test_one_operand_for_every_product(form):
    """torch.matmul's broadcast: one matrix of A (or B) for every product of the other's batch,
    its map one matrix deep (GemmConfig broadcast), never copied per product; an operand TMA
    cannot read in place (odd K) staged once. Exact on small integers, the output poisoned."""
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    from nbwgmma.frontend.matmul import last_plan

    rng = np.random.default_rng(11)
    nb, m, n, k = 3, 70, 72, 40 if form != "2-D A staged" else 37
    a = rng.integers(-3, 4, (m, k)).astype(np.float64)
    b = rng.integers(-3, 4, (nb, k, n)).astype(np.float64)
    want = np.einsum("mk,bkn->bmn", a, b)
    if form == "interleaved A over 2-D B":  # (S, B, K) seen as (B, S, K): A's matrices interleave
        a = rng.integers(-3, 4, (nb, m, k)).astype(np.float64)
        b = rng.integers(-3, 4, (k, n)).astype(np.float64)
        want = a @ b
        seq_first = cuda.to_device(np.ascontiguousarray(a.transpose(1, 0, 2), np.float16))
        da = FakeCUDAArray(seq_first._ary.transpose(1, 0, 2))
    elif form == "expanded A":  # a batch stride of 0
        da = FakeCUDAArray(np.broadcast_to(cuda.to_device(a.astype(np.float16))._ary, (nb, m, k)))
    else:
        da = cuda.to_device(a.astype(np.float16))
    if form == "expanded B":
        b = b[0]
        want = np.einsum("bmk,kn->bmn", np.broadcast_to(a, (nb, m, k)), b)
        da = cuda.to_device(np.ascontiguousarray(np.broadcast_to(a, (nb, m, k)), np.float16))
        db = FakeCUDAArray(np.broadcast_to(cuda.to_device(b.astype(np.float16))._ary, (nb, k, n)))
    else:
        db = cuda.to_device(b.astype(np.float16))
    out = poisoned((nb, m, n), "f16")
    matmul(da, db, out=out, config={"bm": 64, "bn": 64})
    np.testing.assert_array_equal(out.copy_to_host().astype(np.float64), want)
    assert last_plan().cfg.broadcast == ("B" if form in ("interleaved A over 2-D B", "expanded B") else "A")
    plan = last_plan()  # every operand read in place (matrices that interleave too) but an odd K's
    assert (plan.a_path[1] is None) == ("staged" in form or "odd K" in form) and plan.b_path[1] is not None
    c = matmul(da, db)  # the tile model's tile, a fresh output
    assert c.shape == (nb, m, n)
    np.testing.assert_array_equal(c.copy_to_host().astype(np.float64), want)


@pytest.mark.parametrize("odt, n, tile", [("f16", 20, (64, 64)), ("f32", 27, (64, 64)), ("e4m3", 40, (64, 64)),
                                          ("bf16", 12, (64, 64)), ("bf16", 131, (256, 128))])
def test_an_output_tma_cannot_write_goes_out_into_each_products_matrix(odt, n, tile):
    """A given contiguous out whose rows are not 16 bytes apart (torch.bmm's out of an odd width):
    each tile's product stored into its matrix, 16-bit ones a row per warp through shared memory
    (the rows epilogue), others from the registers (the tails in M and N must not reach the next
    matrix); a bias and relu ride along, and fp8 codes with amax."""
    from nbwgmma.frontend.matmul import last_plan

    rng = np.random.default_rng(9)
    nb, m, k, hi = (3, 70, 8, 1) if odt == "e4m3" else (3, 70, 40, 3)  # (fp8 codes: integers up to 16 exact)
    a, da = batch(nb, m, k, "f16", True, rng, hi)
    b, db = batch(nb, k, n, "f16", False, rng, hi)
    bias = rng.integers(-4, 5, n).astype(np.float32)
    out = poisoned((nb, m, n), odt)
    kw = {"amax": cuda.to_device(np.zeros(1, np.float32)), "out_dtype": "e4m3"} if odt == "e4m3" else {}
    config = {"bm": tile[0], "bn": tile[1]} | ({"consumers": 2} if tile[0] == 256 else {})
    got = matmul(da, db, out=out, bias=cuda.to_device(bias), activation="relu", config=config, **kw)
    assert got is out
    assert last_plan().cfg.epilogue == ("rows" if odt in ("f16", "bf16") else "direct")
    want = np.maximum(np.einsum("bmk,bkn->bmn", a, b) + bias, 0)
    np.testing.assert_array_equal(decoded(out.copy_to_host(), odt), want)
    if odt == "e4m3":
        assert kw["amax"].copy_to_host()[0] == want.max()


def test_interleaved_output_is_refused():
    """Matrices of out that interleave (a transposed batch dimension): no store path writes them
    each once."""
    a = cuda.to_device(np.ones((2, 8, 16), np.float16))
    b = cuda.to_device(np.ones((2, 16, 8), np.float16))
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

    out = FakeCUDAArray(cuda.to_device(np.zeros((8, 2, 8), np.float16))._ary.transpose(1, 0, 2))
    with pytest.raises(MatmulError, match="matrices and their elements apart"):
        matmul(a, b, out=out)


def test_repeated_calls_take_new_operands():
    """A second call like the first takes matmul's quick path (the plan kept): new data, new output."""
    rng = np.random.default_rng(6)
    got = []
    for seed in range(3):
        a, da = batch(2, 40, 32, "f16", True, rng)
        b, db = batch(2, 32, 24, "f16", seed % 2 == 0, rng)
        c = matmul(da, db)
        got.append((c, np.einsum("bmk,bkn->bmn", a, b)))
    assert len({id(c) for c, _ in got}) == 3
    for c, want in got:
        np.testing.assert_array_equal(c.copy_to_host().astype(np.float64), want)


def _padded_copy(buf, first, shape, strides, transpose, batch=None, wide=None):
    """Run the padded copy kernel on the view of the flat numpy ``buf`` from element ``first``
    of ``shape`` and element ``strides`` (its last two dimensions the matrix; with ``batch`` =
    ((d0, s0), (d1, s1)) in elements, two batch dimensions before them): the kernel that
    ``copy_params`` picks, or the 64-bit one with ``wide``. Returns (the copy, what it must
    equal in its unpadded columns, whether the 32-bit kernel ran)."""
    from nbwgmma.frontend.arrays import ArrayInfo
    from nbwgmma.frontend.views import copy_params
    from nbwgmma.kernels.copy import COPY_BLOCK, copy_grid, pad_copy_kernel, pad_copy_wide_kernel
    from nbwgmma.launch import launch

    es = buf.itemsize
    ptr0 = 1 << 20  # (an address for the model: only differences matter)
    info = ArrayInfo(ptr0 + first * es, shape, tuple(st * es for st in strides), es, "raw", None, "numpy")
    bat = None if batch is None else (batch[0][0] * batch[1][0], tuple((d, st * es) for d, st in batch))
    lo, extent, params, need_wide = copy_params(info, transpose, bat)
    start = (lo - ptr0) // es
    rows, kpad, count = params[:3]
    dst = cuda.to_device(np.full((count, rows, kpad), 7, buf.dtype))
    use_wide = need_wide or bool(wide)
    kern = pad_copy_wide_kernel if use_wide else pad_copy_kernel
    launch(kern, copy_grid(rows, kpad, count), COPY_BLOCK, (cuda.to_device(buf[start:start + extent]),
                                                            dst.reshape(dst.size), *params))
    lead = ((1, 0), (1, 0)) if batch is None else batch
    full = np.lib.stride_tricks.as_strided(buf[first:], tuple(d for d, _ in lead) + shape,
                                           tuple(st * es for _, st in lead) + tuple(st * es for st in strides))
    mats = full.reshape((count,) + shape)
    return dst.copy_to_host(), (mats.transpose(0, 2, 1) if transpose else mats), not use_wide


@pytest.mark.parametrize("transpose", [False, True])
def test_the_padded_copy_kernels(transpose):
    """The staging copies' kernels on their own (the front end copies with numpy in the simulator):
    a matrix whose rows and columns cut the 64 x 64 tiles, stored row- or column-major (read
    along its contiguous dimension either way), a batch in two strides (fp8), a matrix of
    negative strides (the 64-bit kernel), f32; each into rows padded with zeros, transposed or
    not."""
    rng = np.random.default_rng(11)
    cases = [  # (buffer, first element, shape, element strides, batch, force the 64-bit kernel)
        (rng.integers(0, 60000, 80 * 70, dtype=np.uint16), 0, (70, 75), (80, 1), None, False),
        (rng.integers(0, 60000, 80 * 76, dtype=np.uint16), 3, (70, 75), (1, 71), None, False),
        (rng.integers(0, 60000, 80 * 70, dtype=np.uint16), 0, (70, 75), (80, 1), None, True),
        (rng.integers(0, 250, 5000, dtype=np.uint8), 5, (33, 20), (41, 1), ((3, 1320), (2, 660)), False),
        (rng.integers(0, 60000, 70 * 80, dtype=np.uint16), 69 * 80 + 74, (70, 75), (-80, -1), None, False),
        (rng.integers(0, 1 << 30, 40 * 70, dtype=np.uint32), 0, (66, 9), (40, 1), None, False),
    ]
    ran = set()
    for buf, first, shape, strides, batch, wide in cases:
        got, want, narrow = _padded_copy(buf, first, shape, strides, transpose, batch, wide)
        ran.add(narrow)
        cols = want.shape[2]
        assert got.shape[2] == -(-cols * buf.itemsize // 128) * 128 // buf.itemsize  # rows padded to 128 bytes
        np.testing.assert_array_equal(got[:, :, :cols], want)
        assert (got[:, :, cols:] == 0).all()
    assert ran == {True, False}  # (both kernels: negative strides and `wide` take the 64-bit one)
