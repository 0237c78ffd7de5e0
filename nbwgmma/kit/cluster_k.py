"""K halves in a cluster: two CTAs share each tile, one half of its k-blocks each, and sum the
halves through distributed shared memory.

A problem of few tiles leaves SMs idle (72 tiles of 128 x 128 on an H100's 132 SMs). Cutting
each tile's K in two doubles the work units; split-K does it through a global workspace (each
slice parks its f32 part, a fence, a counter, a re-read by the last one), which costs several
microseconds per tile. Here the two CTAs of a cluster of two take the same tile, rank 0 the
first half of its k-blocks and rank 1 the second (:attr:`ClusterSplitK.k_half`), and after the
main loop they trade halves of the accumulator: a tile of 128 rows is two consumer
warpgroups of 64, and rank ``r`` keeps rows ``64 r ...`` (its consumer ``cw == r``); a tile of
64 rows (``consumers=1``, the few-row products' narrow tiles) is one, and rank 0 keeps it
whole while rank 1 only sends. The consumer that does not keep its rows sends its fragment
with ``st.async`` into the peer CTA's exchange buffer
(:func:`~nbwgmma.intrinsics.acc_send_cluster`, the bytes completing on the peer's "received"
mbarrier) and goes on to its next tile at once; the keeper waits for the peer's part, adds it
(:func:`~nbwgmma.intrinsics.acc_add_shared`), tells the peer its buffer is free again (a remote
arrival on the peer's "free" mbarrier) and stores its 64 rows. Nothing goes through global
memory, no fence, no counter; the sum is the same whichever rank finished first (the keeper's
half plus the peer's: IEEE addition commutes)::

    ck = ClusterSplitK(bn=128)                      # (consumers=1 for 64-row tiles)
    ...                                             # launch with clusters of 2 CTAs
    if tid == 0:
        ck.init(xbars)                              # then cluster_sync() before any use
    kb0, kb1 = ck.k_half(kblocks, rank)             # producer and consumers alike
    ...
    acc, keep = ck.exchange(acc, xbuf, xbars, j, cw, ct, rank)   # j: the CTA's tile count
    if keep:
        ...store rows 64 * cw ... of the tile

``xbuf`` is ``buffer_bytes`` of shared memory (16-byte aligned), ``xbars`` ``barrier_words``
mbarriers; a CTA must not exit while its peer may still send or arrive: end the kernel with
``cluster_sync(False)`` (not ``.aligned``: a producer warp's other threads may have left). A half
of no k-blocks (K of one block) is an accumulator of zeros. The keeper's warpgroup frees the
buffer with one arrival at cluster scope after a warpgroup barrier (its reads ordered before the
sender's next ``st.async`` across the two CTAs); the keeper waits for the bytes with an acquire
at cluster scope (``st.async`` completes them with release at cluster scope; PTX ISA: st.async).
"""

from __future__ import annotations

import types

from ..errors import KitError, is_int
from ..intrinsics import (acc_add_shared, acc_send_cluster, fence_mbarrier_init, mbarrier_arrive_cluster,
                          mbarrier_arrive_expect_tx, mbarrier_init, mbarrier_name, mbarrier_wait_parity)
from .device import inlined
from .warpgroup import warpgroup_sync

__all__ = ["ClusterSplitK"]


class ClusterSplitK(types.ModuleType):
    """The K-halves exchange of a 128 x ``bn`` tile between the two CTAs of a cluster (two
    consumer warpgroups of 64 rows each, f32 accumulators of ``bn / 2`` values per thread), or
    of a 64 x ``bn`` tile (``consumers=1``: rank 1's consumer sends, rank 0's keeps).
    ``buffer_bytes`` (64 x bn x 4) of shared memory and ``barrier_words`` mbarriers per CTA.
    Device functions: ``init(bars)`` (one thread), ``k_half(kblocks, rank) -> (kb0, kb1)`` and
    ``exchange(acc, buf, bars, j, cw, ct, rank) -> (acc, keep)`` (every thread of every consumer
    warpgroup, once per tile, ``j`` counting the CTA's tiles from 0)."""

    barrier_words = 2

    @staticmethod
    def bytes_for(bn: int) -> int:
        """Shared-memory bytes of the exchange buffer for tiles ``bn`` wide: one 64-row f32
        fragment (the ``buffer_bytes`` of a ``ClusterSplitK(bn)``)."""
        return 64 * bn * 4

    def __init__(self, bn: int, consumers: int = 2):
        if not is_int(bn) or bn % 8 or not 8 <= bn <= 256:
            raise KitError(f"ClusterSplitK: bn must be a multiple of 8 from 8 to 256 (a wgmma N); got {bn!r}")
        bn = int(bn)
        if not is_int(consumers) or consumers not in (1, 2):
            raise KitError(f"ClusterSplitK: consumers must be 2 (128-row tiles) or 1 (64-row tiles); got "
                             f"{consumers!r}")
        super().__init__(f"ClusterSplitK({bn})")
        self.bn, self.consumers = bn, consumers
        self.buffer_bytes = self.bytes_for(bn)
        self._build()

    def __repr__(self):
        return f"ClusterSplitK(bn={self.bn}{', consumers=1' if self.consumers == 1 else ''})"

    def _build(self):
        BYTES = self.buffer_bytes
        ONE = self.consumers == 1

        @inlined
        def init(bars):
            mbarrier_init(bars, 1)  # "received": the keeper's arrival with the bytes it expects
            mbarrier_init(bars + 8, 1)  # "free": the peer's keeper warpgroup, once all its threads have read
            mbarrier_name(bars, "received")
            mbarrier_name(bars + 8, "free")
            fence_mbarrier_init()

        @inlined
        def k_half(kblocks, rank):
            return rank * kblocks // 2, (rank + 1) * kblocks // 2

        @inlined
        def exchange(acc, buf, bars, j, cw, ct, rank):
            if (rank != 0) if ONE else (cw != rank):  # the peer keeps these rows: send them into its buffer
                if j > 0:  # the peer has read the previous part (its release at cluster scope)
                    mbarrier_wait_parity(bars + 8, (j - 1) & 1, "cluster")
                acc_send_cluster(acc, buf, bars, (1 - rank) if ONE else cw, ct)  # (two consumers: cw is the peer)
                return acc, False
            if ct == 0:
                mbarrier_arrive_expect_tx(bars, BYTES)
            mbarrier_wait_parity(bars, j & 1, "cluster")  # st.async's bytes complete with release.cluster
            acc = acc_add_shared(acc, buf, ct)
            warpgroup_sync(cw)  # every thread of the warpgroup has read its part of the buffer
            if ct == 0:
                mbarrier_arrive_cluster(bars + 8, 1 - rank, "cluster")
            return acc, True

        self.init, self.k_half, self.exchange = init, k_half, exchange
