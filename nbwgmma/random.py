"""The counter-based random numbers of :mod:`nbwgmma.kit.random`, computed on the host in NumPy.

Philox-4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3",
SC 2011): a bijection of a 128-bit counter ``(c0, c1, c2, c3)`` under a 64-bit key ``(k0,
k1)``, ten rounds of two 32 x 32 -> 64-bit products with the multipliers
:data:`PHILOX_M` and the key raised by the Weyl constants :data:`PHILOX_W` between rounds.
Nothing is stored: the number at a counter is a pure function of (key, counter), so a kernel's
dropout mask (or any draw) is regenerated wherever it is needed, the backward pass and a test
on the host among them.

The conventions are those of Triton's ``tl.randint4x`` / ``tl.rand`` (3.x, with 64-bit
offsets): the key is the 64-bit ``seed`` split into its low and high words, the counter is
``(offset's low word, offset's high word, 0, 0)``, and the uniform float is the first word read as a signed
integer ``x``, folded to ``x`` or ``-x - 1`` (both in [0, 2^31 - 1]), converted to f32 and
multiplied by :data:`UNIFORM_SCALE`, Triton's ``4.6566127342e-10`` as an f32 (2^-31 (1 - 2^-24),
just under 2^-31): the result lies in [0, 1), at most 1 - 2^-24. Philox itself is checked against its
authors' known-answer vectors (tests/test_random_cpu.py).

* :func:`philox4x32` ``(c0, c1, c2, c3, k0, k1) -> (r0, r1, r2, r3)``: arrays of uint32;
* :func:`randint4x` ``(seed, offset)``: the four words at counter ``(offset lo, offset hi, 0, 0)``;
* :func:`rand` ``(seed, offset)``: the uniform f32 of the first word;
* :func:`rand4x` ``(seed, offset)``: four uniform f32, one a word;
* :func:`rand4x_2x2` ``(seed, rows, cols)``: the uniforms a kernel draws for its accumulator
  with :func:`nbwgmma.kit.acc_map4` and one ``rand4x`` a 2 x 2 group.
"""

from __future__ import annotations

import numpy as np

__all__ = ["PHILOX_M", "PHILOX_W", "PHILOX_ROUNDS", "UNIFORM_SCALE", "philox4x32", "randint4x", "rand", "rand4x", "rand4x_2x2",
           "uniform"]

#: The round multipliers (for the words c0 and c2).
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
#: The key's Weyl increments between rounds (k0, k1).
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
PHILOX_ROUNDS = 10
#: A folded word's scale to [0, 1): Triton's 4.6566127342e-10 as an f32, 2^-31 (1 - 2^-24) (bits 0x2FFFFFFF)
UNIFORM_SCALE = np.float32(4.6566127342e-10)

_MASK = np.uint64(0xFFFFFFFF)


def _u32(x):
    return np.asarray(x).astype(np.uint64) & _MASK


def philox4x32(c0, c1, c2, c3, k0, k1):
    """Philox-4x32-10 of the counters ``(c0, c1, c2, c3)`` under the key ``(k0, k1)`` (integer
    arrays or scalars, broadcast together, each taken modulo 2^32); four uint32 arrays."""
    c = [_u32(v) for v in (c0, c1, c2, c3)]
    k = [_u32(k0), _u32(k1)]
    m0, m1 = (np.uint64(m) for m in PHILOX_M)
    for _ in range(PHILOX_ROUNDS):
        p0 = m0 * c[0]  # < 2^64: exact in uint64
        p1 = m1 * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k[0], p1 & _MASK, (p0 >> np.uint64(32)) ^ c[3] ^ k[1], p0 & _MASK]
        k = [(k[0] + np.uint64(PHILOX_W[0])) & _MASK, (k[1] + np.uint64(PHILOX_W[1])) & _MASK]
    return tuple(np.broadcast_arrays(*c)[i].astype(np.uint32) for i in range(4))


def _integers(x, name: str):
    """``x`` as a NumPy array of integers, or the :class:`~nbwgmma.errors.KitError` naming the
    argument ``name`` (a float was cut to an integer, a draw of another key or counter)."""
    a = np.asarray(x)
    if a.dtype.kind not in "iu":
        from .errors import KitError

        got = f"{type(x).__name__} {x!r}" if a.ndim == 0 else f"an array of {a.dtype}"
        raise KitError(f"nbwgmma.random: {name} must be an integer or an array of integers (a 64-bit key or "
                       f"counter); got {got}"[:200])
    return a


def _key(seed, name: str = "seed"):
    s = _integers(seed, name).astype(np.int64).astype(np.uint64)  # a negative seed as its 64-bit pattern
    return s & _MASK, s >> np.uint64(32)


def randint4x(seed, offset):
    """The four uint32 words at counter ``(offset's low word, its high word, 0, 0)`` under ``seed``
    (both 64-bit integers, or arrays of them; negative ones as their two's-complement bits; a
    float is a :class:`~nbwgmma.errors.KitError`)."""
    k0, k1 = _key(seed)
    o0, o1 = _key(offset, "offset")
    return philox4x32(o0, o1, 0, 0, k0, k1)


def uniform(word):
    """uint32 words to f32 in [0, 1), as the kit's (and Triton's) uniform draws convert them."""
    x = np.asarray(word).astype(np.uint32).view(np.int32).astype(np.int64)
    x = np.where(x < 0, -x - 1, x)
    return (x.astype(np.float32) * UNIFORM_SCALE).astype(np.float32)


def rand(seed, offset):
    """The uniform f32 at ``offset`` under ``seed``: what :func:`nbwgmma.kit.rand` gives in a kernel."""
    return uniform(randint4x(seed, offset)[0])


def rand4x(seed, offset):
    """Four uniform f32 at ``offset`` under ``seed``, one from each word."""
    return tuple(uniform(w) for w in randint4x(seed, offset))


def rand4x_2x2(seed, rows, cols, *, ld=None, offset=0):
    """A ``(rows, cols)`` f32 array of the uniforms that ``acc_map4`` with ``rand4x(seed, offset +
    row * ld + col)`` gives each value of an output (``ld`` defaults to ``cols``): each 2 x 2
    group ``(r, c), (r, c + 1), (r + 8, c), (r + 8, c + 1)`` of the accumulator layout (``r % 16
    < 8``, ``c`` even) takes the four words of the draw at ``offset + r * ld + c``, in that
    order. (Tiles start at rows that are multiples of 16 and even columns.)"""
    ld = cols if ld is None else ld
    _integers(seed, "seed"), _integers(offset, "offset"), _integers(ld, "ld")
    i, j = np.indices((rows, cols))
    low = (i % 16) >= 8
    r, c = i - 8 * low, j - j % 2
    words = np.stack(rand4x(seed, np.asarray(offset, np.int64) + r.astype(np.int64) * ld + c))
    return np.take_along_axis(words, (2 * low + j % 2)[None], 0)[0]
