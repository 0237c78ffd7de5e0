"""Build ``matmul``'s kernels ahead of time: ``python -m nbwgmma precompile``.

A new problem class costs its first call a compile (2-3 s on an H100 machine, see
BENCHMARKS.md); a kernel in the disk cache (:mod:`nbwgmma.cache`) costs 0.03-0.05 s. This
command fills the cache with every kernel ``matmul``'s default path can pick for plain
products (no ``config``, no epilogue): for each input type and operand layout, each tile of
the tile model (:data:`nbwgmma.frontend.shares.TILES`, the 256-row tiles of
:data:`nbwgmma.frontend.shares.TILE256_BN` and the wide ones of :data:`nbwgmma.frontend.shares.WIDE_BN`), the
narrow tiles of
:func:`nbwgmma.frontend.tiles.pick_narrow` (K-major B), the tiles of a swapped tall product
(:func:`nbwgmma.frontend.tiles.pick_swap`, :func:`nbwgmma.frontend.tiles.pick_swap_wide`), the 192-row
tiles of :func:`nbwgmma.frontend.tall_tiles.pick_tall` (192 x 144, 160 and 176; K-major A and B), swapped
too (:func:`nbwgmma.frontend.tall_tiles.pick_swapped_tall`), the one-wave
tiles of :func:`nbwgmma.frontend.tiles.pick_one_wave` (K-major A and B, swapped or not), the swapped
256-row tiles of fp8 products (:func:`nbwgmma.frontend.tiles.pick_swapped_256`), the K halves of
:func:`nbwgmma.frontend.few_tiles.pick_k_halves`, the K slices of
:func:`nbwgmma.frontend.few_tiles.pick_k_split`, :func:`nbwgmma.frontend.few_tiles.pick_k_slices` and
:func:`nbwgmma.frontend.few_tiles.pick_k_slices_64`, and each choice of
:func:`nbwgmma.frontend.tiles.pick_small_m`, with the output of the input type (bf16 for
fp8, f32 for tf32). Worker processes share the list (one per CPU core by default, at most
16), each running small products with an explicit ``config`` on the current GPU, which compiles
exactly the kernel (configuration and argument types) a large product of the class runs.
Run it once per machine and nbwgmma version (the cache is keyed by both), e.g. when
building a container image on the GPU machine.

With ``--autotune`` it also builds every challenger ``config="auto"`` may time (2-CTA clusters,
groups of 16 tile rows, deeper pipelines, narrow tiles), so that tuning a class costs its timing only.

With ``--arch sm_90a`` it needs no GPU: each worker builds the plan of a product from array
descriptions alone (:func:`cpu_plan`), compiles the plan's kernel for its argument types
(:meth:`nbwgmma.frontend.plan.Plan.signature`) to PTX with Numba and to a cubin with ``ptxas``
(:func:`nbwgmma.report.compile_cubin`), and stores it under the key a GPU process looks up. So a
container image or a cache directory shared by GPU machines can be filled on a build machine
without a GPU (the compilers and nbwgmma's sources must be the same as where it runs: they are
in the key).

With ``--tails`` it also builds, for each such kernel that is not swapped, its variants with tail maps
(B's last tile column, A's last tile row or both through maps of the rows they have:
:mod:`nbwgmma.frontend.tails`): the kernels a product of one wave whose last tile row or column is
mostly padding runs (:func:`tail_shapes` gives the products that take them).

Fused epilogues, block-scaled, grouped and sparse kernels are not covered: their first
call still compiles.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from .errors import ConfigError
from .frontend.few_tiles import K_HALVES_TILE, K_SLICES_64_TILES, K_SLICES_TILES, K_SPLIT_TILE
from .frontend.shares import TALL_WIDER
from .frontend.tall_tiles import TALL_TILE, tall_tile
from .frontend.tiles import (NARROW_BN, NARROW_BN_FP8_MAX, ONE_WAVE_BN, SWAP_BN, SWAP_M_FP8, TILE256_BN, TILES, WIDE_BN,
                             narrow_tile, swapped_config)

__all__ = ["ARCHS", "DTYPES", "LAYOUTS", "check_target", "cpu_plan", "cpu_worker", "kernel_list", "run", "tail_shapes",
           "worker"]

#: targets ``--arch`` builds for without a GPU: name -> (Numba's compute capability, the one a GPU reports)
ARCHS = {"sm_90a": ((9, 0, "a"), (9, 0))}

#: input types covered, and the operand layouts of each (fp8 and tf32 operands that are not
#: K-major are copied to K-major first, so they run the K-major kernels)
DTYPES = ("bf16", "f16", "e4m3", "e5m2", "tf32")
LAYOUTS = ("KK", "KN", "MK", "MN")
#: pick_small_m's choices
_SMALL_M = tuple({"bm": 64, "bn": 128, "stages": 8} | ({"split": s} if s > 1 else {}) for s in (1, 2, 4)) \
    + ({"bm": 64, "bn": 64, "stages": 8},)
#: pick_narrow's choices (K-major B only; for tf32, whose f32 out is stored from the registers, those of at most
#: NARROW_BN_FP8_MAX columns)
_NARROW = tuple(narrow_tile(bn) for bn in NARROW_BN)
#: and its swapped choices (one per narrow tile width and cut of K: uncut, 2 or 4 split-K slices, halves in a
#: cluster; 16-bit and fp8)
_SWAPPED = tuple(swapped_config(w, s) for w in SWAP_BN for s in (1, 2, 4)) + tuple(swapped_config(w, halves=True)
                                                                                  for w in SWAP_BN)
#: (fp8 swaps at most SWAP_M_FP8 rows: the narrower widths only)
_SWAPPED_FP8 = tuple(c for c in _SWAPPED if c["bn"] <= SWAP_M_FP8)


def kernel_list(dtypes=("bf16", "f16", "e4m3", "tf32"), layouts=LAYOUTS, autotune=False) -> list:
    """``(dtype, layout, config)`` for each kernel the default path can pick (see the module
    docstring); with ``autotune`` also every challenger ``config="auto"`` may time
    (:func:`nbwgmma.frontend.autotune.challengers`)."""
    from .frontend.autotune import challengers

    kinds = {"bf16": "f32.bf16.bf16", "f16": "f32.f16.f16", "e4m3": "f32.e4m3.e4m3", "e5m2": "f32.e5m2.e5m2",
             "tf32": "f32.tf32.tf32"}
    out = []
    for dt in dtypes:
        if dt not in DTYPES:
            raise ConfigError("dtype", f"precompile: dtype must be among {', '.join(DTYPES)}; got {dt!r}")
        sixteen = dt in ("bf16", "f16")
        configs = [{"bm": bm, "bn": bn} for bm, bn in TILES] + [dict(c) for c in _NARROW
                                                                if dt != "tf32" or c["bn"] <= NARROW_BN_FP8_MAX]
        configs += [{"bm": 256, "bn": bn} for bn in TILE256_BN] + [{"bm": 128, "bn": bn} for bn in WIDE_BN]
        if sixteen:  # (and the K halves and slices of products of few tiles: frontend.few_tiles)
            configs += [dict(c) for c in _SMALL_M] + [dict(K_HALVES_TILE), dict(K_SPLIT_TILE)]
        elif dt in ("e4m3", "e5m2"):
            configs += [dict(_SMALL_M[0]), dict(_SMALL_M[-1]), dict(K_HALVES_TILE)]
        else:  # tf32's f32 out: from the registers in one wave, through TMA from two (Plan._configure)
            configs += [dict(c, epilogue="tma") for c in configs if c["bn"] % 32 == 0]
        if autotune:
            configs += [c for c in challengers(kinds[dt], "direct" if dt == "tf32" else "tma") if c not in configs]
        for lay in layouts:
            if lay not in LAYOUTS:
                raise ConfigError("layout", f"precompile: layout must be among {', '.join(LAYOUTS)}; got {lay!r}")
            if not sixteen and lay != "KK":
                continue
            # (tiles whose N is not a multiple of 64 read B K-major only)
            out += [(dt, lay, c) for c in configs if lay[1] == "K" or c.get("bn", 64) % 64 == 0]
            if dt != "tf32" and lay[0] == "K":  # swapped small-M products: A's rows are the narrow tile's K-major B
                out += [(dt, lay, dict(c)) for c in (_SWAPPED if sixteen else _SWAPPED_FP8)]
            if sixteen and lay == "KK":  # 192-row tiles (pick_tall: K-major A and B), swapped too (pick_swapped_tall)
                out += [(dt, lay, tall_tile(bn)) for bn in (TALL_TILE[1], *TALL_WIDER) if tall_tile(bn) not in configs]
                out += [(dt, lay, {"swap": 1, **tall_tile(bn)}) for bn in (TALL_TILE[1], *TALL_WIDER)]
            if sixteen and lay[0] == "K":  # tall products swapped for their tiles' fill (pick_swap, pick_swap_wide)
                out += [(dt, lay, {"swap": 1, "bm": bm, "bn": bn}) for bm, bn in TILES]
                out += [(dt, lay, {"swap": 1, "bm": 256, "bn": bn}) for bn in TILE256_BN]
            if sixteen and lay == "KK":  # one wave of tiles in K slices (pick_k_slices, pick_k_slices_64: K-major A and B)
                out += [(dt, lay, dict(c)) for c in K_SLICES_TILES + K_SLICES_64_TILES if c not in configs]
            if dt != "tf32" and lay == "KK":  # one wave of 128-row tiles (pick_one_wave: K-major A and B)
                one = [{"bm": 128, "bn": bn} | swap for swap in ({}, {"swap": 1}) for bn in ONE_WAVE_BN]
                out += [(dt, lay, c) for c in one if (dt, lay, c) not in out]
            if not sixteen and dt != "tf32" and lay == "KK":  # fp8 swapped into 256-row tiles (pick_swapped_256)
                out += [(dt, lay, {"swap": 1, "bm": 256, "bn": bn}) for bn in TILE256_BN]
    return out


#: how each input type is stored (bf16 and fp8 as raw integers)
_STORAGE = {"bf16": "<u2", "f16": "<f2", "e4m3": "u1", "e5m2": "u1", "tf32": "<f4"}


def _rows_of(cfg) -> tuple:
    """The rows of the products that build ``cfg``'s kernels: a swapped plan writes out^T, which
    Numba types as contiguous ('C') for one row of out, as Fortran-ordered ('F') for more: both."""
    return (256, 1) if cfg.get("swap") else (256,)


def tail_shapes(cfg) -> tuple:
    """``((rows, n), ...)``: the products (``rows`` x ``n`` x 1024) that build ``cfg``'s kernels with tail
    maps (``--tails``): three, one wave each, whose last tile column, last tile row or both are padding
    enough that :func:`nbwgmma.frontend.tails.tail_pays` takes their maps (8 rows of the tile there, the
    padding summed over at least 256 rows a stage); none (an empty tuple) for a swapped config or one
    without a tile."""
    if cfg.get("swap") or "bm" not in cfg or "bn" not in cfg:
        return ()
    from .frontend.tails import TAIL_MIN_ROWS

    bm, bn = cfg["bm"], cfg["bn"]
    rm = -(-TAIL_MIN_ROWS // (bn - 8))  # tile rows, each saving bn - 8 rows of B's last column
    cn = -(-TAIL_MIN_ROWS // (bm - 8))
    return (bm * rm, bn * cn + 8), (bm * rm + 8, bn * cn), (bm * rm + 8, bn * cn + 8)


def _strides(rows, cols, row_major, itemsize) -> tuple:
    return (cols * itemsize, itemsize) if row_major else (itemsize, rows * itemsize)


def _failure(item, e) -> tuple:
    return item, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def _operands(dtype, layout, m, n, k):
    """Uninitialised Numba device arrays A [m, k], B [k, n] in ``layout`` (views with the
    strides of that layout: Numba's ``.T`` of a device array copies) and ``in_dtype``."""
    import numpy as np
    from numba import cuda

    np_dt = np.dtype(_STORAGE[dtype])

    def view(rows, cols, row_major):
        base = cuda.device_array(rows * cols, np_dt)
        return cuda.from_cuda_array_interface(
            {"shape": (rows, cols), "strides": _strides(rows, cols, row_major, np_dt.itemsize), "typestr": np_dt.str,
             "version": 3,
             "data": (base.__cuda_array_interface__["data"][0], False)}, owner=base, sync=False)

    a = view(m, k, layout[0] == "K")  # K-major A: row-major
    b = view(k, n, layout[1] != "K")  # K-major B: column-major
    return a, b, ({"in_dtype": dtype} if dtype in ("bf16", "e4m3", "e5m2") else {})


def worker(items, tails=False) -> tuple:
    """Run one small product per item (compiling its kernel or finding it cached), and with ``tails``
    those of :func:`tail_shapes`: ``(compiled, found in the cache, failures as (item, message))``."""
    from numba import cuda

    from . import cache
    from .frontend.matmul import matmul

    failed = []
    for dtype, layout, cfg in items:
        for rows, n in [(r, 256) for r in _rows_of(cfg)] + list(tail_shapes(cfg) if tails else ()):
            a, b, kw = _operands(dtype, layout, rows, n, 1024)
            if dtype in ("e4m3", "e5m2"):
                kw.update(scale_a=1.0, scale_b=1.0, out_dtype="bf16")
            try:
                matmul(a, b, config=cfg, **kw)
            except Exception as e:  # noqa: BLE001 - reported, the others still build
                failed.append(_failure((dtype, layout, cfg), e))
    cuda.synchronize()
    return cache.stats["misses"], cache.stats["hits"], failed


def cpu_plan(dtype, layout, cfg, rows=256, n=256, k=1024, tails=False):
    """The :class:`nbwgmma.frontend.plan.Plan` that :func:`worker`'s product of ``rows`` x ``n`` x
    ``k`` builds, from descriptions of its arrays alone (no GPU, no memory): A, B in ``layout``,
    a new row-major out of the default output type. Its kernel loads whole tiles (the kernels built
    ahead of time) unless ``tails``: then the last tile row and column take maps of their own where
    a call's plan would (:mod:`nbwgmma.frontend.tails`; such a kernel is built at its first call)."""
    import numpy as np

    from .frontend.args import check_call
    from .frontend.arrays import ArrayInfo
    from .frontend.plan import Plan

    es = np.dtype(_STORAGE[dtype]).itemsize
    name = "f32" if dtype == "tf32" else dtype

    def info(ptr, r, c, row_major, itemsize, dt):
        return ArrayInfo(ptr, (r, c), _strides(r, c, row_major, itemsize), itemsize, dt, 0, "numba")

    fp8 = dtype in ("e4m3", "e5m2")
    ia = info(1 << 40, rows, k, layout[0] == "K", es, name)
    ib = info(2 << 40, k, n, layout[1] != "K", es, name)
    ia, ib, kind, fp8, _, opts, odt, _ = check_call(
        ia, ib, None, in_dtype=None, out_dtype="bf16" if fp8 else None, scale_a=1.0 if fp8 else None,
        scale_b=1.0 if fp8 else None, config=dict(cfg), autotune_default=False)
    oes = 4 if odt == "f32" else 2
    if not tails:
        opts.update(a_tail=False, b_tail=False)
    return Plan(kind, odt, ia, ib, info(3 << 40, rows, n, True, oes, odt), opts, fp8)


def cpu_build(dtype, layout, cfg, rows, n, k=1024, tails=False, arch="sm_90a", prebuilt=False) -> bool:
    """Build the kernel of :func:`cpu_plan`'s plan (the same arguments) without a GPU for ``arch`` (one of
    :data:`ARCHS`), into the user's cache or with ``prebuilt`` among the shipped kernels
    (:data:`nbwgmma.cache.PREBUILT`): True where compiled, False where already there; raises where the
    plan or the compile fails or the cubin could not be written. The plan reads the device limits
    (:func:`nbwgmma.launch.device_limits`): set them for the GPU it is for."""
    from . import cache
    from .kernels.gemm import gemm_kernel
    from .report import compile_cubin

    cc, reported = ARCHS[arch]
    plan = cpu_plan(dtype, layout, cfg, rows, n, k, tails=tails)
    key, sig = ("gemm", plan.cfg.key()), plan.signature()
    if cache.lookup(key, sig, reported, prebuilt) is not None:
        return False
    name, cubin = compile_cubin(gemm_kernel(plan.cfg), sig, cc)
    if not cache.store(key, sig, reported, name, cubin, prebuilt):
        raise OSError("the cubin could not be written")
    return True


def cpu_worker(items, arch="sm_90a", sms=132, prebuilt=False, tails=False) -> tuple:
    """Build :func:`worker`'s kernels without a GPU (see the module docstring), for ``arch`` (one of
    :data:`ARCHS`) and a GPU of ``sms`` multiprocessors (the tile choice of a config without a tile
    depends on it), into the user's cache or with ``prebuilt`` among the kernels shipped with
    the package (:data:`nbwgmma.cache.PREBUILT`): ``(compiled, found in the cache, failures as
    (item, message))``; with ``tails`` also the kernels of :func:`tail_shapes`. Run it in a process of
    its own: it sets the device limits plans read."""
    from . import launch

    launch.device_limits = lambda device=None: dict(launch.H100_LIMITS, multiprocessors=sms)
    compiled = hits = 0
    failed = []
    for dtype, layout, cfg in items:
        shapes = [(r, 256, False) for r in _rows_of(cfg)] \
            + [(r, n, True) for r, n in (tail_shapes(cfg) if tails else ())]
        for rows, n, with_tails in shapes:
            try:
                if cpu_build(dtype, layout, cfg, rows, n, tails=with_tails, arch=arch, prebuilt=prebuilt):
                    compiled += 1
                else:
                    hits += 1
            except Exception as e:  # noqa: BLE001 - reported, the others still build
                failed.append(_failure((dtype, layout, cfg), e))
    return compiled, hits, failed


def check_target(arch, prebuilt):
    """``arch`` (one of :data:`ARCHS`, or None for the current GPU) and ``prebuilt`` go together:
    a :class:`~nbwgmma.errors.ConfigError` (a ``ValueError``) where they do not."""
    if arch is not None and arch not in ARCHS:
        raise ConfigError("arch", f"precompile: arch must be one of {', '.join(ARCHS)}; got {arch!r}")
    if prebuilt and arch is None:
        raise ConfigError("prebuilt", "precompile: --prebuilt kernels are built without a GPU: give --arch sm_90a "
                                      "as well")


def run(dtypes=("bf16", "f16", "e4m3", "tf32"), layouts=LAYOUTS, jobs=None, autotune=False, echo=print,
        arch=None, prebuilt=False, tails=False) -> dict:
    """Build :func:`kernel_list`'s kernels in ``jobs`` worker processes (default: one per CPU
    core, at most 16: each holds a CUDA context and about 0.5 GB of host memory), on the
    current GPU or, with ``arch`` (one of :data:`ARCHS`), without one (:func:`cpu_worker`),
    with ``prebuilt`` (``arch`` only) into the package's shipped kernels, with ``tails`` also the tail
    maps' kernels (:func:`tail_shapes`); returns a summary
    (kernels, compiled, cached, failures, seconds, cache directory)."""
    import json

    from .cache import PREBUILT, cache_dir

    check_target(arch, prebuilt)
    d = PREBUILT if prebuilt else cache_dir()
    if d is None:
        raise RuntimeError("precompile: the kernel cache is off (NBWGMMA_CACHE=0): nothing would be kept")
    items = kernel_list(tuple(dtypes), tuple(layouts), autotune)
    jobs = max(1, min(jobs or min(os.cpu_count() or 1, 16), len(items)))
    t = time.perf_counter()
    where = ([] if arch is None else ["--arch", arch] + (["--prebuilt"] if prebuilt else [])) \
        + (["--tails"] if tails else [])
    procs = [subprocess.Popen([sys.executable, "-m", "nbwgmma.precompile", *where, json.dumps(items[i::jobs])],
                              stdout=subprocess.PIPE, text=True) for i in range(jobs)]
    compiled = cached = 0
    failed = []
    for p in procs:
        stdout, _ = p.communicate()
        lines = stdout.strip().splitlines()
        if p.returncode or not lines:
            failed.append((None, f"a worker process ended with status {p.returncode}"))
            continue
        got = json.loads(lines[-1])
        compiled, cached = compiled + got["compiled"], cached + got["cached"]
        failed += [tuple(f) for f in got["failed"]]
    summary = {"kernels": len(items), "compiled": compiled, "cached": cached, "failed": failed,
               "seconds": round(time.perf_counter() - t, 2), "jobs": jobs, "cache_dir": str(d)}
    echo(f"precompile: {len(items)} kernels ({compiled} compiled, {cached} already cached) in "
         f"{summary['seconds']:.1f} s with {jobs} processes{' for ' + arch if arch else ''} into {d}")
    for item, why in failed:
        echo(f"  failed: {item}: {why}")
    return summary


if __name__ == "__main__":  # a worker: python -m nbwgmma.precompile [--arch sm_90a [--prebuilt]] [--tails] '<items>'
    import json

    todo = [tuple(x) for x in json.loads(sys.argv[-1])]
    flags = sys.argv[1:-1]
    with_tails = "--tails" in flags
    done, hits, bad = worker(todo, with_tails) if "--arch" not in flags else \
        cpu_worker(todo, flags[flags.index("--arch") + 1], prebuilt="--prebuilt" in flags, tails=with_tails)
    print(json.dumps({"compiled": done, "cached": hits, "failed": bad}))
