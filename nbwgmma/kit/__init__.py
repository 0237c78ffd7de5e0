"""The authoring kit: the blocks the library GEMM is built from, for writing your own kernels.

* :mod:`~nbwgmma.kit.pipeline`: :class:`TmaPipeline`, the TMA producer / wgmma consumer ring
  of ``stages`` shared-memory slots with its "full" and "empty" mbarriers;
* :mod:`~nbwgmma.kit.scheduler`: :class:`TileScheduler`, a persistent grid's walk over output
  tiles (grouped rasterization, clusters along M or N, K slices);
* :mod:`~nbwgmma.kit.epilogue`: device functions over accumulator fragments (a user function
  mapped over every value with its row and column, or over each 2 x 2 group; bias,
  activations);
* :mod:`~nbwgmma.kit.reduce`: :func:`acc_row_reduce` and :func:`acc_col_reduce`, a fragment's
  rows or columns reduced in registers (max, min, sum; a function mapped first: softmax and
  log-sum-exp statistics, norms, a bias gradient); :func:`pair_store`, a row result stored,
  :func:`pair_atomic`, combined across tiles by atomics;
* :mod:`~nbwgmma.kit.amax`: an fp8 output's amax in the epilogue (:func:`acc_absmax` of a
  fragment, each warp's running maximum, one atomic max a warp at the kernel's end);
* :mod:`~nbwgmma.kit.groups`: :func:`group_walk`, a grouped GEMM's walk over its groups of rows
  (mixture-of-experts layers; ``offs`` read on the device);
* :mod:`~nbwgmma.kit.producer`: :func:`tile_producer`, the producer thread's walk over the CTA's
  tiles (each k-block: a slot of the ring, your TMA loads of the stage); :func:`fill_stages`,
  its inner loop, for a walk of your own;
* :mod:`~nbwgmma.kit.cooperative`: :class:`Cooperative`, consumer warpgroups sharing one tile,
  64 rows each (the library GEMM's: the largest tiles, the epilogue after the main loop), in
  clusters that multicast A's or B's tile; :func:`operand_loads`, its TMA boxes for the host's
  tensor maps;
* :mod:`~nbwgmma.kit.epilogue_warps`: :class:`EpilogueWarps`, the producer warpgroup's idle
  warps applying an activation to the consumers' staged C tile and storing it (the
  cooperative epilogue off the tensor cores' critical path);
* :mod:`~nbwgmma.kit.pingpong`: :class:`PingPong`, two consumer warpgroups taking 128 x 128
  tiles in turn (one's epilogue under the other's main loop);
* :mod:`~nbwgmma.kit.scaling`: :class:`BlockScaled`, two consumer warpgroups of a block-scaled
  fp8 GEMM (each 128-K block summed by the wgmma, then scaled and added in registers:
  promotion); :mod:`~nbwgmma.kit.promote`: the promotion itself, :func:`acc_promote` and
  :func:`acc_promote_cols` (a tile whose columns span several scale blocks);
* :mod:`~nbwgmma.kit.short_rows`: :func:`box_rows`, :func:`clear_rows` and :func:`short_map`, an
  operand of fewer rows than its tile (a decoding product's A) loaded in boxes of only its rows,
  the slot's other rows cleared once;
* :mod:`~nbwgmma.kit.sparse`: :class:`SparseConsumers`, two consumer warpgroups of a 2:4-sparse
  GEMM (``wgmma.mma_async.sp``, the metadata staged with the stage), and its producer's loads;
* :mod:`~nbwgmma.kit.stream_k`: :class:`StreamFixup`, stream-K's fix-up: tiles whose k-blocks
  CTAs share, their partial sums parked in global scratch and summed in K order (no CTA waits);
* :mod:`~nbwgmma.kit.cluster_k`: :class:`ClusterSplitK`, the two CTAs of a cluster each taking
  half of a tile's k-blocks (of 128 rows or, with one consumer, 64) and summing the halves
  through distributed shared memory;
* :mod:`~nbwgmma.kit.random`: :func:`rand` and its kin, counter-based random numbers
  (Philox-4x32-10 keyed by a seed, counted by an offset; Triton's ``tl.rand``): dropout and
  other draws in an epilogue, regenerated on the host by :mod:`nbwgmma.random`;
* :mod:`~nbwgmma.kit.timeline`: :func:`timeline_start` and :func:`timeline_stamp`, each CTA's SM and
  the times it reached the points you mark (read back by :class:`nbwgmma.timeline.Timeline`): which
  CTA of a wave fell behind, and where;
* :mod:`~nbwgmma.kit.device`: :func:`inlined`, device functions the compiler inlines
  (quick to compile; Numba's ``inline=True`` copies their IR at every call); :func:`select`,
  a conditional value without a branch in Numba's IR;
* :mod:`~nbwgmma.kit.warpgroup`: warpgroup index, thread and barrier; the turn two consumer
  warpgroups pass between their main loops.

Each block is a host-side object built once with compile-time constants; its device
functions are attributes, inlined into the kernels that call them, so a kernel written with
the kit compiles to the same instructions as one written out by hand. (The pipeline and
the scheduler are namespaces that Numba types as modules: a kernel calls ``pipe.advance(s,
ph)`` on a global ``pipe`` as it calls ``math.exp``. A shared-array shape must still be one
constant name: write ``NBARS = pipe.barrier_words`` at module level.)
"""

from .amax import acc_absmax, amax_flush, amax_note, amax_start
from .cluster_k import ClusterSplitK
from .cooperative import Cooperative, operand_loads
from .device import inlined, select
from .epilogue_warps import EpilogueWarps, no_epilogue_warps
from .epilogue import (ACTIVATIONS, VECTOR_TYPES, acc_map, acc_map4, activation, col_values, gelu_tanh_approx, tma_store_block,
                       store_rows_part, tma_store_block_3d, tma_store_part, tma_store_part_3d)
from .groups import group_walk
from .pipeline import TmaPipeline
from .pingpong import PingPong
from .producer import fill_stages, tile_producer
from .random import rand, rand4x, randint, randint4x
from .reduce import PAIR_ATOMICS, REDUCE_OPS, acc_col_reduce, acc_row_reduce, pair_atomic, pair_store
from .promote import acc_promote, acc_promote_cols
from .scaling import SCALE_BLOCK, WIDE_COLS, BlockScaled
from .scheduler import (TileScheduler, stream_owner, stream_range, stream_segment, stream_walk, stream_whole_units,
                        tile_order, wave_order)
from .short_rows import box_rows, box_rows_device, clear_rows, short_map
from .sparse import SparseConsumers
from .stream_k import StreamFixup
from .timeline import timeline_cta, timeline_stamp, timeline_start
from .warpgroup import launch_regs, turn_pass, turn_wait, warpgroup_index, warpgroup_sync, warpgroup_thread

__all__ = ["TmaPipeline", "Cooperative", "operand_loads", "ClusterSplitK", "EpilogueWarps", "no_epilogue_warps", "PingPong", "SparseConsumers",
           "TileScheduler", "tile_order", "wave_order", "stream_range", "stream_owner", "stream_segment", "stream_whole_units", "stream_walk", "StreamFixup", "tile_producer", "fill_stages", "group_walk", "inlined", "select", "BlockScaled", "acc_promote", "acc_promote_cols", "SCALE_BLOCK", "WIDE_COLS", "acc_map", "acc_map4", "col_values", "VECTOR_TYPES", "tma_store_part", "store_rows_part", "tma_store_part_3d", "tma_store_block_3d",
           "acc_row_reduce", "acc_col_reduce", "pair_store", "pair_atomic", "PAIR_ATOMICS", "REDUCE_OPS", "rand", "rand4x", "randint", "randint4x",
           "tma_store_block", "activation", "ACTIVATIONS", "gelu_tanh_approx", "launch_regs", "warpgroup_index", "warpgroup_thread", "warpgroup_sync",
           "turn_wait", "turn_pass", "acc_absmax", "amax_start", "amax_note", "amax_flush", "box_rows", "box_rows_device",
           "clear_rows", "short_map", "timeline_start", "timeline_stamp", "timeline_cta"]
