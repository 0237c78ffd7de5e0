"""The producer thread of a persistent warp-specialized kernel: :func:`tile_producer`.

One thread walks the CTA's output tiles in the scheduler's order and fills the ring: for each
tile and each k-block it takes the next slot (``pipe.producer_acquire``: the "empty" wait and
the "full" barrier armed with the stage's bytes), issues the stage's TMA loads (your
``load``) and moves on (``pipe.advance``). The consumers take the stages in the same order::

    @cuda.jit(device=True, inline=True)
    def load(slot, full, kb, tm, tn, args):   # the TMA loads of one stage
        tmap_a, tmap_b = args
        tma_load_2d(slot, tmap_a, full, kb * BK, tm * BM)
        tma_load_2d(slot + A_BYTES, tmap_b, full, kb * BK, tn * BN)

    produce = tile_producer(pipe, sched, STAGE, load)
    ...
    if tid == 0:                                  # in the kernel: the producer thread
        produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, (tmap_a, tmap_b))

With clusters (``sched.cluster`` > 1) each CTA's producer walks the tiles of its own rank
(:func:`~nbwgmma.intrinsics.cluster_ctarank`): ``tm`` may then lie past M's last tile (``tn``
past N's, clusters along N), where the CTA still loads (its share of the multicast operand is
its peers' too) and its consumers store nothing; ``load`` finds its rank the same way
(``Cooperative.load_tile`` does).

With ``stream=True`` the walk is stream-K's: the CTA's whole tiles
(:func:`~nbwgmma.kit.stream_whole_units`), then its share of the other tiles' k-blocks
(:func:`~nbwgmma.kit.stream_range`), tile by tile, each tile from the k-block where the share
enters it to the one where it leaves (no clusters, no K slices; a
:class:`~nbwgmma.kit.StreamFixup` sums the tiles that CTAs share).

With ``batched=True`` the walk covers a batch of products of one shape (3-D maps: ``load`` gets
the product's index too).

With ``pairs=True`` (two ping-pong consumer warpgroups, :class:`~nbwgmma.kit.PingPong`) the
CTA's units are pairs of adjacent tiles, ``2p`` for the first consumer and ``2p + 1`` for
the second, and the walk goes over the pairs.

Once its last load is issued the walk calls ``griddep_launch_dependents()``: the stream's next
kernel, if launched with programmatic dependent launch, may be scheduled, its CTAs taking SMs
as this grid's leave (on an H100 that saves a few microseconds between back-to-back GEMMs).
"""

from __future__ import annotations

from numba import cuda

from ..errors import KitError, is_int
from ..intrinsics import cluster_ctarank, griddep_launch_dependents
from .device import device_function
from .pipeline import TmaPipeline
from .scheduler import TileScheduler, stream_walk

__all__ = ["tile_producer", "fill_stages"]


def _check_stage(owner: str, pipe, stage_bytes) -> int:
    """The slots' stride: ``stage_bytes``, or the ``stage_bytes`` of a consumer block given in its place
    (a :class:`~nbwgmma.kit.Cooperative`), checked."""
    if not isinstance(pipe, TmaPipeline):
        raise KitError(f"{owner}: pipe must be a TmaPipeline; got {pipe!r}")
    stage_bytes = getattr(stage_bytes, "stage_bytes", stage_bytes)
    if not is_int(stage_bytes) or stage_bytes <= 0 or stage_bytes % 1024:
        raise KitError(f"{owner}: stage_bytes must be a positive multiple of 1024 (the slots' "
                       f"alignment); got {stage_bytes!r}")
    return int(stage_bytes)


def _device_load(owner: str, load, batched: bool = False):
    """``load`` as a device function taking the stage's arguments (and the product's index where
    ``batched``): :func:`~.device.device_function` (a plain ``def`` or lambda made one, its arity
    checked here, at the builder's call, not in the kernel's typing)."""
    return device_function(owner, load, 7 if batched else 6,
                           "(slot, full, kb, tm, tn, args" + (", batch)" if batched else ")"), name="load")


def _check_stage_tx(owner: str, stage_tx, batched: bool = False):
    if stage_tx is not None and (batched or not callable(stage_tx)):
        raise KitError(f"{owner}: stage_tx must be a device function stage_tx(args) -> bytes, and a batched "
                       f"walk takes none; got stage_tx={stage_tx!r}, batched={batched!r}")


def fill_stages(pipe: TmaPipeline, stage_bytes: int, load, *, stage_tx=None):
    """The device function ``fill(ring, base, s, ph, tm, tn, kb0, kb1, args) -> (s, ph)`` of one
    producer thread: for each k-block ``kb`` of ``kb0 .. kb1 - 1`` it takes the ring's next slot
    (``pipe.producer_acquire``: the "empty" wait, the "full" barrier armed with ``stage_bytes``),
    calls ``load(slot, full, kb, tm, tn, args)`` (your TMA loads of the stage, a device function
    or a plain ``def``, which is made one; the slot at ``base + s * stage_bytes``) and advances, returning the ring's position for the next call.
    ``tm`` and ``tn`` reach ``load`` as they are: a tuple such as ``(batch, tile_row)`` passes
    through. The loop of :func:`tile_producer`, for a walk of your own (a batch, a triangle of
    causal tiles): walk the same units in the producer and in the consumers (one device
    function decoding a unit, called by both), and end the producer with
    ``griddep_launch_dependents()`` as ``tile_producer`` does. ``stage_tx``, a device function
    ``stage_tx(args) -> bytes``, gives the bytes a stage's barrier expects where they are known
    only at run time (a box of :func:`~nbwgmma.kit.box_rows` rows; default: ``stage_bytes``)."""
    STAGE = _check_stage("fill_stages", pipe, stage_bytes)
    load = _device_load("fill_stages", load)
    _check_stage_tx("fill_stages", stage_tx)
    if stage_tx is None:
        @cuda.jit(device=True, inline=True)
        def stage_tx(args):
            return STAGE

    @cuda.jit(device=True, inline=True)
    def fill(ring, base, s, ph, tm, tn, kb0, kb1, args):
        tx = stage_tx(args)
        for kb in range(kb0, kb1):
            full = pipe.producer_acquire(ring, s, ph, tx)
            load(base + s * STAGE, full, kb, tm, tn, args)
            s, ph = pipe.advance(s, ph)
        return s, ph

    return fill


def tile_producer(pipe: TmaPipeline, sched: TileScheduler, stage_bytes: int, load, *, pairs: bool = False,
                  stream: bool = False, batched: bool = False, stage_tx=None):
    """The device function ``produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, args)`` of
    one producer thread (see the module's text): ``load(slot, full, kb, tm, tn, args)`` is a
    device function (a plain ``def`` is made one) issuing the TMA loads of k-block ``kb`` of tile (``tm``, ``tn``) into the
    slot at shared address ``slot`` on barrier ``full``; ``args`` (a tuple: tensor maps, sizes)
    reaches it unchanged. Slots are ``stage_bytes`` apart from ``base``; given the consumers' block
    (``coop``, a :class:`~nbwgmma.kit.Cooperative`) in its place, its
    ``stage_bytes``, and ``sched.bk`` must be its ``bk`` (a ``KitError`` otherwise). The walk is
    ``sched``'s (the CTA's cluster rank; units without K slices), over pairs with ``pairs``,
    stream-K's share of the units' k-blocks with ``stream``. With ``batched`` it walks a batch
    of products: ``produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, args, batches)`` takes
    ``batches * nunits`` units (``sched.batch_unit`` decodes each into its product and unit, as
    the consumers' walk must too) and calls ``load(slot, full, kb, tm, tn, args, batch)``.
    ``stage_tx(args) -> bytes``: as :func:`fill_stages` takes it (``args`` as given here)."""
    if not isinstance(pipe, TmaPipeline) or not isinstance(sched, TileScheduler):
        raise KitError(f"tile_producer: pipe must be a TmaPipeline and sched a TileScheduler; got {pipe!r}, "
                         f"{sched!r}")
    _check_stage("tile_producer", pipe, stage_bytes)
    bk = getattr(stage_bytes, "bk", None)  # a consumer block given for its stage: its k-block and the walk's agree
    if bk is not None and bk != sched.bk:
        raise KitError(f"tile_producer: the scheduler's k-block ({sched.bk}) must be the consumers' ({bk}: "
                       f"{type(stage_bytes).__name__}.bk), or the walk counts K in other steps than the consumers' "
                       f"wgmmas take it; got {sched!r}")
    if pipe.cluster != sched.cluster:
        raise KitError(f"tile_producer: the pipe's cluster ({pipe.cluster}) and the scheduler's ({sched.cluster}) "
                         f"must be the same")
    if sched.cluster_k != 1:
        raise KitError(f"tile_producer: a scheduler with cluster_k walks each tile's half of the k-blocks "
                         f"(ClusterSplitK.k_half), which this walk does not; got {sched!r}")
    if pairs and sched.cluster > 1:
        raise KitError(f"tile_producer: pairs of tiles take no clusters; got {sched!r}")
    if batched and (pairs or stream):
        raise KitError(f"tile_producer: a batched walk takes no pairs or stream-K; got pairs={pairs!r}, "
                       f"stream={stream!r}")
    if stream and (pairs or sched.cluster > 1 or sched.split > 1):
        raise KitError(f"tile_producer: stream-K's walk takes no pairs, clusters or K slices; got pairs={pairs!r}, "
                         f"{sched!r}")
    _check_stage_tx("tile_producer", stage_tx, batched)
    load = _device_load("tile_producer", load, batched)
    CL = sched.cluster
    if batched:  # the stage loads take the product's index, which fill passes in its args
        user_load = load

        @cuda.jit(device=True, inline=True)
        def load(slot, full, kb, tm, tn, args_batch):
            user_load(slot, full, kb, tm, tn, args_batch[0], args_batch[1])

    fill = fill_stages(pipe, stage_bytes, load, stage_tx=stage_tx)  # tile (tm, tn)'s k-blocks kb0 .. kb1 - 1

    @cuda.jit(device=True, inline=True)
    def stages(ring, base, s, ph, u, kblocks, tiles_mc, tiles_n, args):  # unit u's k-blocks
        tm, tn = sched.tile(u, tiles_mc, tiles_n, cluster_ctarank() if CL > 1 else 0)
        return fill(ring, base, s, ph, tm, tn, 0, kblocks, args)

    if stream:
        @cuda.jit(device=True, inline=True)
        def whole(st, tm, tn, kblocks, a):
            return fill(a[0], a[1], st[0], st[1], tm, tn, 0, kblocks, a[2])

        @cuda.jit(device=True, inline=True)
        def piece(st, t, tm, tn, kb0, kb1, kblocks, first, total, a):
            return fill(a[0], a[1], st[0], st[1], tm, tn, kb0, kb1, a[2])

        walk = stream_walk(sched, whole, piece)

        @cuda.jit(device=True, inline=True)
        def produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, args):
            walk((0, 0), nunits, kblocks, tiles_mc, tiles_n, (ring, base, args))
            griddep_launch_dependents()
    elif batched:
        @cuda.jit(device=True, inline=True)
        def produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, args, batches):
            s, ph = 0, 0
            for u in range(sched.first(), batches * nunits, sched.step()):
                b, v = sched.batch_unit(u, nunits)
                tm, tn = sched.tile(v, tiles_mc, tiles_n, cluster_ctarank() if CL > 1 else 0)
                s, ph = fill(ring, base, s, ph, tm, tn, 0, kblocks, (args, b))
            griddep_launch_dependents()
    elif pairs:
        @cuda.jit(device=True, inline=True)
        def produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, args):
            s, ph = 0, 0
            for pair in range(sched.first(), (nunits + 1) // 2, sched.step()):
                for u in range(2 * pair, min(2 * pair + 2, nunits)):  # the two consumers' tiles
                    s, ph = stages(ring, base, s, ph, u, kblocks, tiles_mc, tiles_n, args)
            griddep_launch_dependents()
    else:
        @cuda.jit(device=True, inline=True)
        def produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, args):
            s, ph = 0, 0
            for u in range(sched.first(), nunits, sched.step()):
                s, ph = stages(ring, base, s, ph, u, kblocks, tiles_mc, tiles_n, args)
            griddep_launch_dependents()

    return produce
