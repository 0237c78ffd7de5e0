"""Which of ``matmul``'s plans load the last tile column of B and the last tile row of A through maps
of the rows the operands have there (:class:`~nbwgmma.kernels.gemm_config.GemmConfig`'s ``b_tail``
and ``a_tail``): the rule, its limits and its switches. Host-side only.

TMA writes a whole box into shared memory, rows past the tensor as zeros, and those rows cost more
than real ones, summed over the CTAs that load them at once (BENCHMARKS.md, 2026-12-07): a map whose
box holds only the rows the tensor has there saves that where the padding is large and the product
runs in one wave; elsewhere the second map and the zeroing of the stages' rows past it cost 0-3%."""

from __future__ import annotations

import math

from ..kit.short_rows import box_rows

__all__ = ["B_TAIL_MAP", "A_TAIL_MAP", "TAIL_MAX_WAVES", "TAIL_MIN_ROWS", "tail_rows", "tail_pays", "tail_maps"]

#: B's last tile column through a map of the rows N has there, where B is read in place K-major and
#: :func:`tail_pays` (False: through B's own map, the rows past N as zeros)
B_TAIL_MAP = True
#: the same for A's last tile row
A_TAIL_MAP = True
#: :func:`tail_pays`' limits: the waves of work units the grid runs, and the rows past the tensor that
#: the last tile row's (column's) boxes would bring in each stage, summed over its tiles
TAIL_MAX_WAVES = 1
TAIL_MIN_ROWS = 256


def tail_rows(size: int, tile: int) -> int:
    """The rows of the box of an operand's last ``tile``-row block (``size`` rows in all): the rows
    the operand has there, rounded up to 8 (:func:`~nbwgmma.kit.box_rows`); ``tile`` where it is whole.
    The kernel works out the same with ``box_rows_device``."""
    return box_rows(size - (size - 1) // tile * tile, tile)


def tail_pays(size: int, tile: int, tiles: int, waves: float) -> bool:
    """Whether the last of an operand's ``tile``-row blocks (``size`` rows in all; ``tiles`` tiles
    along the other dimension take it) is loaded through a map of the rows it has: where the product
    runs in at most :data:`TAIL_MAX_WAVES` waves and those tiles' boxes would bring at least
    :data:`TAIL_MIN_ROWS` rows past the tensor a stage. On an H100 (bf16, BENCHMARKS.md, 2026-12-07)
    one-wave products whose padding came to 288-5280 rows a stage ran 1.11-2.03x as fast so (1920 x
    480 x 8192 in 64 x 128 tiles: 960 rows, 1.29-1.45x; A's last tile row of 263 x 11088 x 4096 in
    128 x 256 tiles: 5280, 1.21x), those with 144-224 0.97-1.02x, and products of several waves
    0.99-1.01x. A rule fitted to twelve problems, not yet held out."""
    padding = (tile - tail_rows(size, tile)) * tiles
    return size % tile != 0 and waves <= TAIL_MAX_WAVES and padding >= TAIL_MIN_ROWS


def tail_maps(cfg, m: int, n: int, k: int, a_path, b_path, units: int) -> dict:
    """The ``GemmConfig`` options (``{"b_tail": True, "a_tail": True}`` or fewer) of a plan of ``cfg``
    for the kernel's ``m`` x ``n`` x ``k`` whose operands take ``a_path`` and ``b_path`` (``(major,
    view)``, a view of None for a staging copy) and whose grid shares out ``units`` work units
    (:func:`nbwgmma.frontend.plan.work_units`): an operand read in place K-major, outside a batch,
    stream-K and a cluster that shares it, where :func:`tail_pays`."""
    if cfg.batched or cfg.stream_k or not (m % cfg.bm or n % cfg.bn):
        return {}
    from ..launch import device_limits

    waves = units / max(1, device_limits()["multiprocessors"] // cfg.cta_cluster)
    opts = {}
    in_place = (a_path[0] == "K" and a_path[1] is not None, b_path[0] == "K" and b_path[1] is not None)
    if B_TAIL_MAP and in_place[1] and (cfg.cluster == 1 or cfg.multicast == "A") \
            and tail_pays(n, cfg.bn, math.ceil(m / cfg.bm), waves):
        opts["b_tail"] = True
    if A_TAIL_MAP and in_place[0] and (cfg.cluster == 1 or cfg.multicast == "B") \
            and tail_pays(m, cfg.bm, math.ceil(n / cfg.bn), waves):
        opts["a_tail"] = True
    return opts
