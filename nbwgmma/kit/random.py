"""Random numbers in kernels: Philox-4x32-10 draws keyed by a seed and counted by an offset,
what Triton's ``tl.rand(seed, offset)`` gives (bit for bit the same numbers).

A draw is a pure function of ``(seed, offset)``: nothing is stored, no state is carried, and
the same draw is made again wherever it is needed (a dropout mask in the backward pass, a host
test through :mod:`nbwgmma.random`). Give each element its own offset, usually its index in the
output (``row * n + col``; offsets are taken modulo 2^32, so past 2^32 elements fold a part of
the index into the seed instead), and each use its own seed (or a seed plus a multiple of the
element count, as PyTorch's generator offsets do).

* :func:`rand` ``(seed, offset) -> f32`` in [0, 1] (1.0 with probability about 2^-25, as in
  Triton): one Philox evaluation, about 50 instructions (ten ``IMAD.WIDE.U32`` pairs and their
  ``LOP3``\\ s);
* :func:`rand4x` ``(seed, offset) -> (u0, u1, u2, u3)``: four independent uniforms from one
  evaluation, a quarter of the cost a draw: give offsets in steps of one to groups of four
  elements (a thread's two column pairs of a row pair, say);
* :func:`randint` ``(seed, offset)``, :func:`randint4x` ``(seed, offset)``: the uint32 words.

``seed`` is an integer of up to 64 bits (its low and high words are the key), ``offset`` an
integer (its low 32 bits are the counter's first word; the other three are 0). For dropout
with probability ``p`` keep an element where ``rand(seed, offset) > p`` and scale the kept
ones by ``1 / (1 - p)`` (computed once, outside the per-element function), as Triton's
tutorial does; the host regenerates the mask as ``nbwgmma.random.rand(seed, offsets) > p``.
"""

from __future__ import annotations

from ..intrinsics.random import philox4x32, uint_to_uniform
from .device import inlined

__all__ = ["rand", "rand4x", "randint", "randint4x"]


@inlined
def randint4x(seed, offset):
    """The four uint32 words of Philox-4x32-10 at counter ``(offset, 0, 0, 0)`` under key
    ``(seed's low word, seed's high word)``."""
    return philox4x32(offset, 0, 0, 0, seed, seed >> 32)


@inlined
def randint(seed, offset):
    """The first uint32 word of :func:`randint4x`."""
    r0, r1, r2, r3 = philox4x32(offset, 0, 0, 0, seed, seed >> 32)
    return r0


@inlined
def rand(seed, offset):
    """A uniform f32 in [0, 1] at ``offset`` under ``seed`` (Triton's ``tl.rand``)."""
    r0, r1, r2, r3 = philox4x32(offset, 0, 0, 0, seed, seed >> 32)
    return uint_to_uniform(r0)


@inlined
def rand4x(seed, offset):
    """Four uniform f32 in [0, 1] at ``offset`` under ``seed``, one from each word (Triton's
    ``tl.rand4x``)."""
    r0, r1, r2, r3 = philox4x32(offset, 0, 0, 0, seed, seed >> 32)
    return uint_to_uniform(r0), uint_to_uniform(r1), uint_to_uniform(r2), uint_to_uniform(r3)
