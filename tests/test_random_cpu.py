"""Counter-based random numbers: the host model (nbwgmma.random) against Philox's known answers,
the word-to-float conversion at its edges, the kit's draws compiled (32-bit integer code, no
call, no local memory) and their typing errors."""

import numpy as np
import pytest
from numba import cuda

import nbwgmma.random as hr
from nbwgmma.intrinsics.errors import NbwgmmaTypingError
from nbwgmma.kit import rand, rand4x
from nbwgmma.report import compile_report

# Philox-4x32-10's known-answer vectors (Random123's kat_vectors): counter, key, result.
KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


@pytest.mark.parametrize("counter, key, want", KAT)
def test_philox_gives_its_authors_known_answers(counter, key, want):
    assert tuple(int(w) for w in hr.philox4x32(*counter, *key)) == want


def test_the_seed_is_the_key_and_the_offset_the_first_two_counter_words():
    offs = np.array([0, 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32 + 3, 5 << 40])
    seed = (7 << 32) | 9
    got = hr.randint4x(seed, offs)
    want = hr.philox4x32(offs & 0xFFFFFFFF, offs >> 32, 0, 0, 9, 7)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert got[0][4] != hr.randint4x(seed, 3)[0]  # 2^32 + 3 is not 3
    np.testing.assert_array_equal(hr.randint4x(-1, 5)[0], hr.philox4x32(5, 0, 0, 0, 2 ** 32 - 1, 2 ** 32 - 1)[0])


def test_words_become_uniforms_below_one_as_triton_scales_them():
    """Triton's fold and scale (4.6566127342e-10 as an f32: 2^-31 (1 - 2^-24)): the largest words
    give 1 - 2^-24, never 1.0."""
    assert hr.UNIFORM_SCALE.view(np.uint32) == 0x2FFFFFFF
    w = np.array([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 0x40000000], np.uint32)
    s = np.float64(hr.UNIFORM_SCALE)
    want = np.float32([0, s, 1 - 2 ** -24, 1 - 2 ** -24, 0, 2 ** 30 * s])
    np.testing.assert_array_equal(hr.uniform(w), want)
    u = hr.rand(3, np.arange(1 << 16))
    assert u.dtype == np.float32 and 0.49 < u.mean() < 0.51 and (u >= 0).all() and (u < 1).all()


@cuda.jit
def _four(out, seed, n):
    i = cuda.grid(1)
    if i < n:
        a, b, c, d = rand4x(seed, i)
        out[i] = a + b + c + d


def test_a_draw_compiles_to_32_bit_integer_code():
    """rand4x: ten rounds of IMAD.WIDE.U32 pairs and LOP3s, no CALL (no 64-bit division or
    multiplication routine), no local memory, no float64."""
    r = compile_report(_four, "(float32[:], int64, int32)")
    assert r.local_memory_ops == 0 and r.spill_stores == 0
    assert "CALL" not in r.sass and not any(op.startswith(("DADD", "DMUL", "DFMA", "F2F.F64")) for op in r.sass)
    assert 20 <= r.sass.get("IMAD", 0) <= 40 and 20 <= r.sass.get("LOP3", 0) <= 40
    assert sum(r.sass.values()) < 160


def test_a_float_offset_is_a_typing_error_at_the_call():
    @cuda.jit
    def kernel(out, seed):
        out[0] = rand(seed, 1.5)

    with pytest.raises(NbwgmmaTypingError, match=r"random_cpu.py:\d+: the kit.s random draws: offset must be an integer .*got float64"):
        compile_report(kernel, "(float32[:], int64)")


@cuda.jit(device=True, inline=True)
def _drop1(v, row, col, seed, p, n):
    return v if rand(seed, row * n + col) > p else np.float32(0.0)


@cuda.jit(device=True, inline=True)
def _drop4(a, b, c, d, row, col, seed, p, n):
    u0, u1, u2, u3 = rand4x(seed, row * n + col)
    z = np.float32(0.0)
    return a if u0 > p else z, b if u1 > p else z, c if u2 > p else z, d if u3 > p else z


def _dropout_kernel(mapped):
    from nbwgmma.intrinsics import acc_load, acc_store

    @cuda.jit
    def kernel(out, seed, p, n):  # (values loaded, not zeros: a dropout of zeros folds away)
        t = cuda.threadIdx.x
        acc = acc_load("f32.bf16.bf16", 64, out, t, 0, 0)
        acc_store(mapped(acc, t, 0, 0, seed, p, n), "f32.bf16.bf16", out, t, 0, 0)
    return kernel


def test_a_group_s_one_draw_costs_far_less_than_four_draws():
    """Dropout over a 64 x 64 fragment: acc_map4 with rand4x (8 draws a thread) against acc_map with
    rand (32 draws): 1008 against 1968 instructions in the kernel (the loads and stores alike in
    both); no local memory, no call."""
    from nbwgmma.kit import acc_map, acc_map4

    sig = "(float32[:, :], int64, float32, int64)"
    one = compile_report(_dropout_kernel(acc_map(_drop1, 64, nextra=3)), sig)
    four = compile_report(_dropout_kernel(acc_map4(_drop4, 64, nextra=3)), sig)
    assert one.local_memory_ops == four.local_memory_ops == 0 and "CALL" not in four.sass
    assert sum(four.sass.values()) < 0.6 * sum(one.sass.values())


@cuda.jit(device=True, inline=True)
def _three(a, b, c, d, row, col):
    return a, b, c


def test_a_group_function_returning_three_values_is_a_typing_error_at_the_call():
    from nbwgmma.intrinsics import acc_zeros
    from nbwgmma.kit import acc_map4

    mapped = acc_map4(_three, 16)

    @cuda.jit
    def kernel(out):
        acc = mapped(acc_zeros("f32.bf16.bf16", 16), cuda.threadIdx.x, 0, 0)
        out[0] = acc[0]

    with pytest.raises(NbwgmmaTypingError, match=r"random_cpu.py:\d+: acc_map4\(_three, n=16\): fn's result must be a "
                                                 r"tuple of 4 values \(the four values of its 2 x 2 group\); got a "
                                                 r"tuple of 3"):
        compile_report(kernel, "(float32[:],)")


def test_a_float_seed_or_offset_is_refused():
    """A float was cut to an integer: rand(1.5, 0) gave rand(1, 0), rand(1, 2.7) rand(1, 2)."""
    from nbwgmma.errors import KitError
    from nbwgmma.random import rand, rand4x_2x2, randint4x

    for call, name, got in ((lambda: rand(1.5, 0), "seed", "float 1.5"), (lambda: rand(1, 2.7), "offset", "float 2.7"),
                            (lambda: randint4x(True, 0), "seed", "bool True"),
                            (lambda: rand(1, np.array([0.0, 1.0])), "offset", "an array of float64"),
                            (lambda: rand4x_2x2(2.0, 16, 2), "seed", "float 2.0")):
        with pytest.raises(KitError, match=rf"^nbwgmma\.random: {name} must be an integer or an array of integers "
                                           rf"\(a 64-bit key or counter\); got {got}$"):
            call()
    assert rand(np.int32(1), np.uint64(2)) == rand(1, 2)
