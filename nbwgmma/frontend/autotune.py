"""Autotuning: time the default configuration against a few others, keep a faster one.

``matmul(a, b, config="auto")`` (or every ``matmul`` without a ``config`` when the
environment sets ``NBWGMMA_AUTOTUNE=1``) looks up the configuration tuned for the
call's *problem class*: GPU (name and SM count), operand types, operand layouts
(K- or MN-major, and whether each is read in place or through a K-major staging copy), output
type and epilogue, and the exact M, N, K. The first time a
class is seen, :func:`candidates` lists the default (``{}``: what ``matmul`` runs
without a ``config``) and a few challengers (the tile model's other good tiles, a narrow
tile that fills the waves better, a 2-CTA cluster, a wider tile-row group, a deeper pipeline
for one-consumer tiles, K slices for one wave of few tiles at a long K); each is
compiled and timed on the call's own arrays, on its stream, and the choice is kept in
memory and in ``autotune-<code hash>.json`` in the kernel cache directory
(:mod:`nbwgmma.cache`; nothing is written when that cache is off). Later calls and later
processes reuse it (and take ``matmul``'s fast path for repeated calls); a change to
nbwgmma's sources starts a new file, since timings belong to the code that made them.

Tuning only ever helps: a challenger replaces the default only when its median time is
below the default's by more than the measured noise (twice the default's median absolute
deviation over the rounds, at least :data:`MIN_MARGIN`). It costs at most
``NBWGMMA_AUTOTUNE_BUDGET`` seconds per class (default 3, compiles included): the default
always runs; a challenger whose kernel is built (compiled in this process, in the kernel cache
or shipped with the package; ``python -m nbwgmma precompile --autotune`` builds them all) costs
milliseconds and runs while the budget lasts; one that needs a compile (1.5-4 s on an H100
machine) is started only while the time spent plus a quarter more than the longest compile yet
(at least :data:`COMPILE_S`) fits the budget. So with the default budget only built challengers
are timed; the default's own compile, where it has one, counts too (it may leave no room for
any challenger), so a class costs at most the budget or that compile, whichever is longer, plus
the timing rounds (0.03-0.7 s per class over the 36 problems of ``benchmarks/sweep.py --auto``
on an H100, with ``precompile --autotune``'s kernels). A budget of 10 s or more lets the tuning
compile a few challengers. A choice made while some challenger was passed over for the budget
is kept for the process only, not written to the file: a later process (after ``precompile
--autotune``, say) tunes the class again. A kernel counts as built where its cubin is on disk
(a cubin this driver cannot load is then compiled after all: a rare case).

Timing is device time: each round launches a busy-wait kernel first, then the batch of
launches with CUDA events around it, so the host enqueues the batch while the GPU is
still waiting and the events see the kernels back to back even where one launch takes
the host longer than the kernel takes the GPU (small problems). A round whose batch took
the host longer to enqueue than the wait lasted is discarded and the wait doubled.
Rounds take the candidates in turn, so a clock or temperature drift hits all alike.
Candidates that fail to build or launch are skipped and recorded as such.

In the CUDA simulator nothing is timed: ``"auto"`` means the default.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time

from ..capture import is_capturing
from ..layout.kinds import wgmma_kind
from .few_tiles import K_SLICES_MIN_K, K_SLICES_MIN_M, best_slices, best_slices_64
from .tall_tiles import best_tall, tall_tile
from .tiles import (NARROW_BN, TILE256_BN, TILES, WIDE_BN, narrow_config, narrow_tile, padded_score, pick_small_m,
                    rank_tiles, swapped_config)

__all__ = ["candidates", "challengers", "enabled", "budget", "choices", "choices_path", "clear", "last", "problem_key",
           "choose", "time_candidates", "warm_within_budget", "pick", "MIN_MARGIN", "COMPILE_S", "BUILT_S"]

#: the least relative gain over the default for which a challenger is kept
MIN_MARGIN = 0.01

#: seconds a kernel's compile is expected to take at least (1.5-4 s on an H100 machine: a class
#: tuned with one challenger compiled took 2.1-4.3 s there, BENCHMARKS.md, 2026-11-27)
COMPILE_S = 3.0
#: seconds a built challenger's first run is expected to take at most (load, plan, two launches)
BUILT_S = 0.1

#: the most recent choice made or found: {"key", "config", "ms", "source"} (None before any)
last = None

_MEMO: dict = {}  # problem-class key -> entry, this process
_LOADED = [False]


def enabled() -> bool:
    """``NBWGMMA_AUTOTUNE`` set to 1/on/true/yes: ``matmul`` without ``config`` tunes."""
    return os.environ.get("NBWGMMA_AUTOTUNE", "").strip().lower() in ("1", "on", "true", "yes")


def budget() -> float:
    """Seconds a class's tuning may take (``NBWGMMA_AUTOTUNE_BUDGET``, default 3)."""
    try:
        return max(0.0, float(os.environ.get("NBWGMMA_AUTOTUNE_BUDGET", "3")))
    except ValueError:
        return 3.0


def _stages_that_fit(kind, bm, bn, epilogue, upto=8):
    """The deepest pipeline (at most ``upto`` stages) a tile fits in shared memory."""
    from ..kernels.gemm_config import GemmConfig

    for s in range(upto, 1, -1):
        try:
            GemmConfig(kind, bm=bm, bn=bn, stages=s, epilogue=epilogue, out="f32" if epilogue == "direct" else "bf16")
            return s
        except ValueError:
            continue
    return None


def candidates(kind, m, n, k, epilogue="tma", default=None, b_major="K", a_major="K", swapped=False) -> list:
    """The configurations (``matmul`` ``config`` dicts) timed for one problem: ``{}`` first
    (the default path's own choice, ``default`` = its config when known, e.g. ``{"bm": 128,
    "bn": 256}``), then challengers, most promising first (the budget may stop before the
    last): the tile model's three best tiles (:func:`nbwgmma.frontend.tiles.rank_tiles`, 256-row
    and wide tiles among them) other than the default's; the best of them that can pair up in 2-CTA clusters (two tile rows or
    more, B's tile in 64-column shares); the best one with groups of 16 tile rows (when it has
    more than 8); one-consumer tiles (BM = 64) among the three with as many stages as fit, up to
    8 (more bytes in flight for bandwidth-bound shapes: 128 x 8192 x 8192 ran 9% faster with 8
    than with 4 on an H100); with K-major B (``b_major``), second, a narrow tile where it fills
    the waves better than the default's (:func:`nbwgmma.frontend.tiles.narrow_config`: where the
    default path has not taken it itself, :func:`nbwgmma.frontend.tiles.pick_narrow`), then (second
    without one) for 16-bit inputs, K-major A and the TMA epilogue 192 x 144 tiles where the model
    has them doing at least the real work of the tile the default path takes (it takes them itself
    from 2% more: :func:`nbwgmma.frontend.tall_tiles.pick_tall`; a config the kernel refuses, as for an
    f32 or fp8 out, is skipped when timed, as a narrow tile is).
    For a 16-bit product of K-major A and B at a long K (one wave of few tiles), the best K slices of
    64- and 128-row tiles come first (:func:`slices_challengers`).
    Where the default path swaps a tall product (``swapped``: :func:`nbwgmma.frontend.tiles.pick_swap`,
    :func:`nbwgmma.frontend.tiles.pick_swap_wide`; ``default`` is then the unswapped plan's config),
    the unswapped default (``{"swap": 0}``) is the first challenger, so a swap that loses is undone.

    A product of few rows that the default path swaps (:func:`nbwgmma.frontend.tiles.swapped_small_m`:
    16-bit or fp8 inputs, K-major A, ``a_major``) tries the swapped kernel's other K slicings first
    (uncut, 2 and 4 slices and 2 halves in a cluster where they fit one wave): which pays depends
    on how much of B stays in the GPU's L2 between calls (BENCHMARKS.md, 2026-11-27: uncut, 1 x 4096 x 4096 ran 1.07x as fast
    as in 2 split-K slices, 16 x 4096 x 4096 0.95x).
    """
    from ..kernels.gemm_config import GemmConfig
    from ..launch import device_limits

    tiles = rank_tiles(m, n, 1, "any" if b_major == "K" else "64", bits=wgmma_kind(kind).input_bits)[:3]
    out = [{"bm": bm, "bn": bn} for bm, bn in tiles]
    if b_major == "K":
        dflt = (default["bm"], default["bn"]) if default and {"bm", "bn"} <= set(default) else tiles[0]
        sms = device_limits()["multiprocessors"]
        narrow = narrow_config(m, n, dflt, sms)
        if narrow is not None:
            out.insert(1, narrow)
        # 192 x 144 (tall_tiles.pick_tall's) where the model has it doing as much real work as the tile taken
        score, tall = best_tall(m, n, sms, plain=False)
        if wgmma_kind(kind).input_bits == 16 and epilogue == "tma" and a_major == "K" and tall not in out \
                and score >= padded_score(m, n, sms, "any"):
            out.insert(1 + (narrow is not None), tall)
    # each CTA of a cluster multicasts whole 64-column shares of B
    pairable = [(bm, bn) for bm, bn in tiles if bn % 128 == 0 and math.ceil(m / bm) >= 2]
    if pairable:
        out.append({"bm": pairable[0][0], "bn": pairable[0][1], "cluster": 2})
    bm, bn = tiles[0]
    if math.ceil(m / bm) > 8:
        out.append({"bm": bm, "bn": bn, "group_m": 16})
    for bm, bn in tiles:
        if bm > 64:  # two consumers: their default already takes as many stages as pay (GemmConfig)
            continue
        default_stages = GemmConfig(kind, bm=bm, bn=bn, epilogue=epilogue,
                                    out="f32" if epilogue == "direct" else "bf16").stages
        deepest = _stages_that_fit(kind, bm, bn, epilogue)
        if deepest is not None and deepest > default_stages:
            out.append({"bm": bm, "bn": bn, "stages": deepest})
    bits = wgmma_kind(kind).input_bits
    # one wave of few tiles at a long K: the best K slices of 64- and of 128-row tiles, first (few_tiles)
    out[:0] = slices_challengers(kind, m, n, k, epilogue, default, b_major, a_major, swapped)
    taken = pick_small_m(m, n, k, bits, a_kmajor=a_major == "K")  # the default path's choice for few rows
    if not (taken or {}).get("swap"):
        return [{}] + ([{"swap": 0}] if swapped else []) + [c for c in out if c != default]
    # the default path swaps (``default`` is then the unswapped plan's config: a challenger like the others)
    tiles, kblocks, sms = math.ceil(n / 64), math.ceil(k * bits / 1024), device_limits()["multiprocessors"]
    fits = [s for s in (1, 2, 4) if s == 1 or (tiles * s <= sms and kblocks >= 2 * s)]  # parts of K in one wave
    cuts = [swapped_config(taken["bn"], s) for s in fits]
    if 2 in fits:  # two parts also as halves on a 2-CTA cluster
        cuts.append(swapped_config(taken["bn"], halves=True))
    swapped = [c for c in cuts if c != taken]
    return [{}] + swapped + out


def slices_challengers(kind, m, n, k, epilogue, default, b_major, a_major, swapped) -> list:
    """The challengers :func:`candidates` tries first for a 16-bit product of K-major A and B, K >=
    :data:`~.few_tiles.K_SLICES_MIN_K` and M >= :data:`~.few_tiles.K_SLICES_MIN_M` stored by TMA and not
    swapped: :func:`~.few_tiles.best_slices_64`'s and :func:`~.few_tiles.best_slices`'s configs where they
    fit one wave, other than the default's (``default``: its config). The default path takes one of them
    only where it fills the wave 1.25x better than its tile; where it does not, the other may still pay
    (on an H100, 1169 x 408 x 8192: the default's 128 x 136 in four slices 0.84x cuBLAS, 64 x 208 in three
    0.94x; BENCHMARKS.md, 2026-12-08)."""
    if wgmma_kind(kind).input_bits != 16 or (a_major, b_major) != ("K", "K") or epilogue != "tma" or swapped \
            or k < K_SLICES_MIN_K or m < K_SLICES_MIN_M:
        return []
    from ..launch import device_limits

    sms = device_limits()["multiprocessors"]
    taken = tuple((default or {}).get(key, 1) for key in ("bm", "bn", "split"))
    return [c for fill, c in (best_slices_64(m, n, k, sms), best_slices(m, n, k, sms))
            if fill > 0 and (c["bm"], c["bn"], c["split"]) != taken]


def challengers(kind, epilogue="tma") -> list:
    """Every challenger :func:`candidates` can list for any shape, beyond the plain tiles of
    the tile model (``python -m nbwgmma precompile --autotune`` builds them ahead of time)."""
    out = []
    out += [narrow_tile(bn) for bn in NARROW_BN]  # (K-major B only)
    if wgmma_kind(kind).input_bits == 16:  # (K-major B)
        out.append(tall_tile())
    for bm, bn in [(256, bn) for bn in TILE256_BN] + [(128, bn) for bn in WIDE_BN]:  # (the tile model's others)
        out += ([{"bm": bm, "bn": bn}] if bn % 64 else []) + [{"bm": bm, "bn": bn, "group_m": 16}]
    out += [{"bm": 256, "bn": bn, "cluster": 2} for bn in TILE256_BN if bn % 128 == 0]
    for bm, bn in TILES:
        if (bn // 64) % 2 == 0:
            out.append({"bm": bm, "bn": bn, "cluster": 2})
        out.append({"bm": bm, "bn": bn, "group_m": 16})
        if bm == 64:
            deepest = _stages_that_fit(kind, bm, bn, epilogue)
            if deepest is not None:
                out.append({"bm": bm, "bn": bn, "stages": deepest})
    return out


def problem_key(kind, odt, a_path, b_path, epilogue, m, n, k) -> str:
    """The problem class a choice is kept for (see the module docstring); ``a_path`` and ``b_path`` are
    the plan's operand paths, ``(major, view)``, a view of None where the operand is read through its
    K-major staging copy (keyed "K*": a copy's reads cost what its padded rows cost, not the caller's)."""
    from numba import cuda

    from ..launch import device_limits

    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    a_major, b_major = (major + ("*" if view is None else "") for major, view in (a_path, b_path))
    return (f"{name}/{device_limits()['multiprocessors']}sm|{kind}->{odt}|{a_major}/{b_major}-major|"
            f"{epilogue}|{m}x{n}x{k}")


def choices_path():
    """The file the choices of the current code are kept in (None when the kernel cache is off)."""
    from ..cache import cache_dir, code_fingerprint

    d = cache_dir()
    return None if d is None else d / f"autotune-{code_fingerprint()[:16]}.json"


def _read_file(path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _load():
    if not _LOADED[0]:
        _LOADED[0] = True
        path = choices_path()
        if path is not None:
            for key, entry in _read_file(path).items():
                if isinstance(entry, dict) and isinstance(entry.get("config"), dict):
                    _MEMO.setdefault(key, entry)


def _save(key, entry):
    from ..cache import write_atomic

    path = choices_path()
    if path is None:
        return
    data = _read_file(path)  # other processes may have added classes meanwhile
    data[key] = entry
    # a read-only or full disk: the choice lives in this process only
    write_atomic(path, json.dumps(data, indent=1, sort_keys=True).encode())


def choices() -> dict:
    """Every choice known to this process (this one's and those on disk): key -> entry."""
    _load()
    return dict(_MEMO)


def clear() -> None:
    """Forget the choices, in memory and on disk (for the current code)."""
    _MEMO.clear()
    _LOADED[0] = True
    path = choices_path()
    if path is not None:
        try:
            path.unlink()
        except OSError:
            pass


def _busy_wait(stream, sleeps):
    from ..kernels.copy import busy_wait_kernel, sized_to_data

    with sized_to_data():  # (one thread on purpose: no small-grid warning for the user)
        busy_wait_kernel[1, 1, stream](sleeps)


def warm_within_budget(run, configs, budget_s, clock=time.perf_counter, built=None, skipped=None) -> list:
    """The configs, in order, that compiled (or loaded) and ran twice (``run(config)``) within
    the budget: the first always gets its turn; a later one only while the seconds spent plus
    what its first run may take fit in ``budget_s``: :data:`BUILT_S` where ``built(config)``
    says its kernel is built, else a quarter more than the longest compile yet (at least
    :data:`COMPILE_S`). A config that does not fit is passed over (appended to ``skipped``, a
    list, where given); a later built one may still run."""
    t0, longest = clock(), COMPILE_S
    ok = []
    for i, cfg in enumerate(configs):
        ready = built is not None and built(cfg)
        if i and clock() - t0 + (BUILT_S if ready else 1.25 * longest) > budget_s:
            if skipped is not None:
                skipped.append(cfg)
            continue
        t = clock()
        try:
            run(cfg)  # compile (or load from the kernel cache) and a first launch
            if not ready:
                longest = max(longest, clock() - t)
            run(cfg)
            ok.append(cfg)
        except Exception:  # noqa: BLE001 - a candidate this problem cannot run is skipped
            if not ready:
                longest = max(longest, clock() - t)
    return ok


def time_candidates(run, configs, stream, budget_s=None, rounds=7, batch_ms=0.2, clock=time.perf_counter,
                    built=None, skipped=None):
    """``(ms, rounds_ms)``: milliseconds per launch of ``run(config)`` for each config (None
    where it failed or the budget left it out: see the module docstring and
    :func:`warm_within_budget`, which ``built`` and ``skipped`` are passed to) and each one's time per round
    (empty where None). ``stream`` a Numba stream or 0."""
    from numba import cuda

    # what the timing itself takes (7 rounds of a few ms per candidate) is kept out of the compiles' share
    ok = warm_within_budget(run, configs, (budget() if budget_s is None else budget_s) - 0.3, clock, built, skipped)
    if not ok:
        return [None] * len(configs), [[] for _ in configs]
    e0, e1, e2 = (cuda.event(timing=True) for _ in range(3))
    wait = [64]  # nanosleeps of about 1 us each ahead of a batch; doubled while the host falls behind

    def batch(cfg, inner):
        """(device ms per launch, host ms to enqueue) of ``inner`` launches behind a busy wait;
        device None where the GPU may have waited for the host (the wait is doubled then)."""
        e0.record(stream)
        _busy_wait(stream, wait[0])
        e1.record(stream)
        h = clock()
        for _ in range(inner):
            run(cfg)
        h = (clock() - h) * 1e3
        e2.record(stream)
        e2.synchronize()
        if h + 0.05 >= cuda.event_elapsed_time(e0, e1) and wait[0] < _MAX_WAIT:
            wait[0] = min(2 * wait[0], _MAX_WAIT)
            return None, h
        return cuda.event_elapsed_time(e1, e2) / inner, h

    one, host = None, 0.0
    while one is None:  # one launch of the first config sets the batch size and the wait
        one, host = batch(ok[0], 1)
    inner = max(2, min(64, math.ceil(batch_ms / max(one, 1e-4))))
    wait[0] = max(wait[0], min(_MAX_WAIT, math.ceil(2e3 * host * inner)))
    times = {id(c): [] for c in ok}
    for _ in range(rounds):
        for cfg in ok:
            t = None
            while t is None:
                t, _ = batch(cfg, inner)
            times[id(cfg)].append(t)
    ms = [statistics.median(times[id(c)]) if id(c) in times else None for c in configs]
    return ms, [times.get(id(c), []) for c in configs]


_MAX_WAIT = 1 << 16  # about 65 ms


def pick(ms, rounds_ms) -> tuple:
    """``(index, margin)``: the config kept among timed ones, the first being the default: the
    fastest, if its median is below the default's by more than ``margin`` (twice the default's
    median absolute deviation over its rounds, relative, at least :data:`MIN_MARGIN`), else the
    default (index 0; the fastest if the default did not run)."""
    timed = [(t, i) for i, t in enumerate(ms) if t is not None]
    if not timed:
        return None, None
    if ms[0] is None:
        return min(timed)[1], None
    d = ms[0]
    mad = statistics.median(abs(x - d) for x in rounds_ms[0]) if rounds_ms and rounds_ms[0] else 0.0
    margin = max(MIN_MARGIN, 2 * mad / d)
    best_t, best = min(timed)
    return (best if best_t < d * (1 - margin) else 0), margin


def choose(key, make_configs, run, stream, built=None):
    """The tuned config for ``key``: known already, or chosen now among ``make_configs()``
    (the default ``{}`` first) timed with ``run(config)`` on ``stream`` (``built(config)``: whether
    its kernel needs no compile; see :func:`warm_within_budget`). On a stream capturing into a CUDA
    graph nothing can be timed: an unknown class takes the default, not remembered."""
    global last
    _load()
    entry = _MEMO.get(key)
    if entry is None and is_capturing(int(stream)):
        last = {"key": key, "config": {}, "ms": None, "source": "captured", "seconds": None, "margin": None,
                "skipped": 0}
        return {}
    if entry is None:
        configs = make_configs()
        t = time.perf_counter()
        skipped = []
        ms, rounds_ms = time_candidates(run, configs, stream, built=built, skipped=skipped)
        best, margin = pick(ms, rounds_ms)
        if best is None:
            raise RuntimeError(f"autotune: no candidate configuration ran for {key}: {configs}")
        entry = {"config": configs[best],
                 "ms": [[c, t_] for c, t_ in zip(configs, ms)],
                 "margin": margin,
                 "seconds": round(time.perf_counter() - t, 3),
                 "skipped": len(skipped),  # challengers passed over for the budget
                 "date": time.strftime("%Y-%m-%d")}
        _MEMO[key] = entry
        if not skipped:  # (else a later process, its kernels built, may tune the class in full)
            _save(key, entry)
        source = "tuned"
    else:
        source = "cached"
    last = {"key": key, "config": dict(entry["config"]), "ms": entry.get("ms"), "source": source,
            "seconds": entry.get("seconds"), "margin": entry.get("margin"), "skipped": entry.get("skipped", 0)}
    return dict(entry["config"])
