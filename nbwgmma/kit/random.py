"""Random numbers in kernels: Philox-4x32-10 draws keyed by a seed and counted by an offset,
what Triton's ``tl.rand(seed, offset)`` gives (bit for bit the same numbers).

A draw is a pure function of ``(seed, offset)``: nothing is stored, no state is carried, and
the same draw is made again wherever it is needed (a dropout mask in the backward pass, a host
test through :mod:`nbwgmma.random`). Give each element its own offset, usually its index in the
output (``row * n + col``, a 64-bit integer: its low and high words are the counter's first
two), and each use its own seed (or an offset past the elements of the uses before, as
PyTorch's generator advances its offset).

* :func:`rand` ``(seed, offset) -> f32`` in [0, 1) (at most 1 - 2^-24, as in Triton): one Philox evaluation, about 50 instructions (ten ``IMAD.WIDE.U32`` pairs and their
  ``LOP3``\\ s);
* :func:`rand4x` ``(seed, offset) -> (u0, u1, u2, u3)``: four independent uniforms from one
  evaluation, a quarter of the cost a draw: give offsets in steps of one to groups of four
  elements (a thread's two column pairs of a row pair, say);
* :func:`randint` ``(seed, offset)``, :func:`randint4x` ``(seed, offset)``: the uint32 words.

``seed`` and ``offset`` are integers of up to 64 bits: the seed's low and high words are the
key, the offset's the counter's first two words (the other two are 0), as Triton 3.x takes an
int64 offset. A negative 32-bit offset or seed is sign-extended here (its high word all ones),
where Triton takes 0 for an int32 offset's high word: give offsets that are not negative, or
int64 ones, for Triton's numbers. Index arithmetic such as ``row * n + col`` is 64-bit compiled
but wraps at 2^31 in the simulator where both are ``np.int32``: give ``n`` as an ``np.int64``
past 2^31 elements. For dropout
with probability ``p`` keep an element where ``rand(seed, offset) > p`` and scale the kept
ones by ``1 / (1 - p)`` (computed once, outside the per-element function), as Triton's
tutorial does; the host regenerates the mask as ``nbwgmma.random.rand(seed, offsets) > p``.
"""

from __future__ import annotations

from ..intrinsics.random import philox4x32, uint_to_uniform
from .device import inlined
from .typecheck import integer_check

__all__ = ["rand", "rand4x", "randint", "randint4x"]

_SEED = integer_check("the kit's random draws", "seed", "its 64 bits are Philox's key")
_OFFSET = integer_check("the kit's random draws", "offset", "its 64 bits are the counter's first two words")


@inlined
def _words(seed, offset):
    """Philox's four words for a checked ``seed`` and ``offset`` (each public draw checks its own
    arguments, so that a wrong one is reported at the kernel's line)."""
    return philox4x32(offset, offset >> 32, 0, 0, seed, seed >> 32)


@inlined
def randint4x(seed, offset):
    """The four uint32 words of Philox-4x32-10 at counter ``(offset's low word, its high word,
    0, 0)`` under key ``(seed's low word, seed's high word)``."""
    return _words(_SEED(seed), _OFFSET(offset))


@inlined
def randint(seed, offset):
    """The first uint32 word of :func:`randint4x`."""
    return _words(_SEED(seed), _OFFSET(offset))[0]


@inlined
def rand(seed, offset):
    """A uniform f32 in [0, 1) at ``offset`` under ``seed`` (Triton's ``tl.rand``)."""
    return uint_to_uniform(_words(_SEED(seed), _OFFSET(offset))[0])


@inlined
def rand4x(seed, offset):
    """Four uniform f32 in [0, 1) at ``offset`` under ``seed``, one from each word (Triton's
    ``tl.rand4x``)."""
    r0, r1, r2, r3 = _words(_SEED(seed), _OFFSET(offset))
    return uint_to_uniform(r0), uint_to_uniform(r1), uint_to_uniform(r2), uint_to_uniform(r3)
