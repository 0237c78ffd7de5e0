"""The default path's tile: the kernel tile (and whether the product is swapped, C^T = B^T A^T) that a
``matmul`` call takes where its ``config`` names none, from the tile model's rules in turn
(:mod:`.tiles`, :mod:`.tall_tiles`): the few-row paths; a swap where the swapped problem tiles better;
the swapped 256-row tiles of tall products, or a 192-row tile over them; the wave and padding model's
tile; clusters' shares; the 192-row tiles; 128 x 192 over 128 x 256; narrow tiles for poorly filled
waves; one wave of 128-row tiles; swapped 256-row tiles that fill the waves better; swapped 192-row
tiles for tall products; K cut for products of few tiles; 256 x 128 for the row-by-row epilogue.
Each rule's measurements are in its docstring and BENCHMARKS.md."""

from __future__ import annotations

from .. import sim
from ..kernels.gemm_config import FP8_OUTS
from ..kit.pipeline import check_shares
from ..layout.kinds import wgmma_kind
from .few_tiles import pick_k_halves, pick_k_slices, pick_k_slices_64, pick_k_split
from .shares import share
from .tall_tiles import pick_swapped_tall, pick_tall, tall_over_swap
from .tiles import (pick_192, pick_narrow, pick_one_wave, pick_small_m, pick_swap, pick_swap_wide,
                    pick_swapped_256, pick_tile)

__all__ = ["pick_default"]


def pick_default(opts, given, kind, m, n, k, a_major, b_major, io, odt, tma_out, batch=None, c_info=None):
    """Add the default path's tile to ``opts`` (a plan's config so far: ``given``, the caller's
    ``config``, with the call's epilogue options), which names no ``bm`` or ``bn``: ``bm``, ``bn``, and
    ``swap`` where the product is swapped (with the few-row paths' other keys). ``kind``: the wgmma
    kind; M x N x K the product; ``a_major``, ``b_major``: "K" or "MN", how the kernel will read A and
    B; ``io``: out's :class:`~.arrays.ArrayInfo`; ``odt``: out's type; ``tma_out``: out is stored by
    TMA (a row-major array of 16-byte aligned rows, not f32); ``batch``: a batch's (count, strides) or
    None; ``c_info``: the C of beta * C or None."""
    cluster = opts.get("cluster", 1)  # one GemmConfig rejects below: pick as for no cluster
    wk = wgmma_kind(kind)
    a_kmajor = a_major == "K"
    swappable = opts.get("swap", 1) != 0 and "epilogue" not in opts and batch is None and a_kmajor
    small = None if "split" in opts or opts.get("cluster_k", 1) != 1 or batch else \
        pick_small_m(m, n, k, wk.input_bits, cluster, a_kmajor=swappable)
    if small is not None:
        opts.update({key: v for key, v in small.items() if key not in opts})
    else:  # (a forced swap tiles the swapped problem, N x M)
        from ..launch import device_limits

        sms = device_limits()["multiprocessors"]
        untied = not ({"cluster", "split", "epilogue", "stages", "stream_k", "c_parts", "c_slots", "consumers",
                       "multicast", "producer_regs", "consumer_regs"} & set(given)
                      or given.get("cluster_k", 1) != 1 or given.get("swap") or sim.enabled())
        free = untied and not batch
        # (C^T tiles better; a swapped fp8 output is stored from the registers, not by TMA)
        tma16 = tma_out and odt not in FP8_OUTS
        if free and swappable and pick_swap(m, n, k, wk.input_bits, sms, tma16):
            opts["swap"] = 1
        rows, cols = (n, m) if opts.get("swap", 0) else (m, n)
        # 256-row and wide tiles where nothing given rules them out (widths not a multiple of 64:
        # K-major B)
        b_kmajor = b_major == "K"
        # (fp8 codes go out through TMA in 64-column blocks: widths of 64-column multiples)
        widths = None if not free or opts.get("swap") else "any" if b_kmajor and odt not in FP8_OUTS else "64"
        # (a cluster along N shares A's rows: any tile width, rows that split into whole atoms)
        share_b = cluster in (2, 4) and opts.get("multicast", "B") == "B"
        # a tall product whose swapped 256-row tiles fill the waves better (stored transposed by TMA;
        # not with beta * C or a user function: their epilogue parts there spill 0.7-1.4 KB, unmeasured)
        plain = not opts.get("bias") and opts.get("act") is None
        wide = free and swappable and not opts.get("swap") and c_info is None and opts.get("user") is None \
            and pick_swap_wide(m, n, wk.input_bits, sms, widths, tma16, plain, k)
        # ... unless a 192-row tile (tall_tiles.best_tall) unswapped does enough more real work than the
        # swapped ones (the wider 192-row tiles for plain products: with a bias or activation they spill)
        tall = wide and tall_over_swap(m, n, wide, sms, widths, wk.input_bits, plain, k)
        if tall:
            opts.update(tall)
        else:
            if wide:
                opts["swap"] = 1
            opts["bm"], opts["bn"] = wide or pick_tile(rows, cols, cluster if share_b else 1, widths,
                                                       batch[0] if batch else 1, k, wk.input_bits)
        if cluster in (2, 4) and opts.get("multicast") == "A":
            for bm, bn in ((opts["bm"], opts["bn"]), (128, 256), (256, 128)):
                try:
                    check_shares("matmul", bm, a_major, cluster, "A")
                except ValueError:
                    continue
                opts["bm"], opts["bn"] = bm, bn
                break
        if opts.get("cluster_k", 1) != 1 and (opts["bm"] != 128 or opts["bn"] > 192):
            opts["bm"], opts["bn"] = 128, 128  # (K halves: 128-row tiles; wider ones leave 2-3 stages)
        # a 192-row tile (192 x 144, wider where plain) where it does enough more real work (K-major A,
        # 16-bit outputs by TMA; not with beta * C or a user function: with C it spills 272-276 bytes)
        if free and not opts.get("swap") and tma16 and c_info is None and opts.get("user") is None and a_kmajor:
            opts.update(pick_tall(m, n, sms, widths, wk.input_bits, plain, k) or {})
        # 128 x 192 for 128 x 256 where it fills the waves enough better (16-bit outputs by TMA)
        if free and not opts.get("swap") and tma16:
            opts.update(pick_192(m, n, k, (opts["bm"], opts["bn"]), sms, wk.input_bits) or {})
        # a tile that fills its one or two waves poorly: a narrower one (B K-major)
        if free and not opts.get("swap") and b_kmajor and odt not in FP8_OUTS:
            opts.update(pick_narrow(m, n, (opts["bm"], opts["bn"]), sms, wk.input_bits, tma_out) or {})
        # a tile that fills one wave much better: 128 rows by a width in steps of 8, swapped or not
        # (K-major A and B, 16-bit outputs by TMA; not with beta * C or a user function: unmeasured)
        if free and tma16 and b_kmajor and a_kmajor and c_info is None and opts.get("user") is None:
            one = pick_one_wave(m, n, (opts["bm"], opts["bn"]), opts.get("swap", 0), sms, swappable)
            if one is not None:
                opts.update(one)
            # ... or swapped 256-row tiles, their rows along N, that do enough more real work (16-bit or fp8 inputs)
            if swappable and plain:  # (with a fused bias and activation 256 x 160 spills there)
                tile, swapped = (opts["bm"], opts["bn"]), opts.get("swap", 0)
                opts.update(pick_swapped_256(m, n, k, tile, swapped, sms, wk.input_bits,
                                             1.0 if swapped else share(tile, k, wk.input_bits)) or {})
        # a 192-row tile swapped, its rows along N, where it does enough more real work than the tile
        # taken (tall plain products, K-major A and B, 16-bit outputs by TMA)
        if free and swappable and plain and tma16 and b_kmajor and c_info is None and opts.get("user") is None:
            opts.update(pick_swapped_tall(m, n, sms, (opts["bm"], opts["bn"]), opts.get("swap", 0),
                                          wk.input_bits, k) or {})
        # 64-row tiles of a long K filling few SMs: K cut (few_tiles; 16-bit outputs by TMA, plain products:
        # measured so)
        if free and not opts.get("swap") and tma16 and plain and c_info is None and opts.get("user") is None:
            tile = (opts["bm"], opts["bn"])
            opts.update(pick_k_halves(m, n, k, tile, sms, wk.input_bits) or pick_k_split(m, n, k, tile, sms, wk.input_bits)
                        or {})
            # ... or tiles with K in 2-4 slices that fill the one wave better (K-major A and B): 128-row ones
            # for 128 x 128 or 64 x 128, 64-row ones for 64 x 64 (K whole or in two slices; 8 stages for 64 x 64,
            # else as many as fit)
            tile = (opts["bm"], opts["bn"])
            slices = a_kmajor and b_kmajor and (
                "split" not in opts and pick_k_slices(m, n, k, tile, opts.get("cluster_k", 1) == 2, sms, wk.input_bits)
                or pick_k_slices_64(m, n, k, tile, opts.get("split", 1), sms, wk.input_bits))
            if slices:
                for key in ("cluster_k", "stages"):
                    opts.pop(key, None)
                opts.update(slices)
        # 16-bit rows TMA cannot write (an odd N) go out a row per warp (the "rows" epilogue
        # below): 256 x 128 tiles for 128 x 256 ones, as many; on an H200, with the rows epilogue,
        # 0.99-1.21x 128 x 256 (BENCHMARKS.md, 2026-12-04)
        if untied and not tma_out and odt in ("bf16", "f16") and not opts.get("swap") and m >= 256 \
                and (opts["bm"], opts["bn"]) == (128, 256) and io.strides[1] == io.itemsize:
            opts.update(bm=256, bn=128, consumers=2)
