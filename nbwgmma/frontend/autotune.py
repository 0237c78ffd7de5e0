"""Autotuning: time a few kernel configurations on the caller's operands, keep the fastest.

``matmul(a, b, config="auto")`` (or every ``matmul`` without a ``config`` when the
environment sets ``NBWGMMA_AUTOTUNE=1``) looks up the configuration tuned for the
call's *problem class*: GPU (name and SM count), operand types, operand layouts
(K- or MN-major), output type and epilogue, and the exact M, N, K. The first time a
class is seen, :func:`candidates` lists a small set of configurations (the tile
model's three best tiles, a 2-CTA cluster, a wider tile-row group, a deeper
pipeline for one-consumer tiles), each is compiled and timed on the call's own arrays, on
its stream, and the fastest is kept in memory and in ``autotune-<code hash>.json``
in the kernel cache directory (:mod:`nbwgmma.cache`; nothing is written when that
cache is off). Later calls and later processes reuse the choice; a change to
nbwgmma's sources starts a new file, since timings belong to the code that made them.

Timing: every candidate is launched twice (compile, warm-up); then ``rounds``
rounds each time ``inner`` back-to-back launches of every candidate in turn
(CUDA events), so a clock or temperature drift during tuning hits all of them
alike; a candidate's time is its median over the rounds. The tuning call blocks
until its timings are in (the first call of a class only). Candidates that fail to
build or launch are skipped and recorded as such.

In the CUDA simulator nothing is timed: ``"auto"`` means the tile model's pick.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time

from .tiles import rank_tiles

__all__ = ["candidates", "enabled", "choices", "choices_path", "clear", "last", "problem_key", "choose",
           "time_candidates"]

#: the most recent choice made or found: {"key", "config", "ms", "source"} (None before any)
last = None

_MEMO: dict = {}  # problem-class key -> entry, this process
_LOADED = [False]


def enabled() -> bool:
    """``NBWGMMA_AUTOTUNE`` set to 1/on/true/yes: ``matmul`` without ``config`` tunes."""
    return os.environ.get("NBWGMMA_AUTOTUNE", "").strip().lower() in ("1", "on", "true", "yes")


def _stages_that_fit(kind, bm, bn, epilogue, upto=8):
    """The deepest pipeline (at most ``upto`` stages) a tile fits in shared memory."""
    from ..kernels.gemm import GemmConfig

    for s in range(upto, 1, -1):
        try:
            GemmConfig(kind, bm=bm, bn=bn, stages=s, epilogue=epilogue, out="bf16" if epilogue == "tma" else "f32")
            return s
        except ValueError:
            continue
    return None


def candidates(kind, m, n, k, epilogue="tma") -> list:
    """The configurations (``matmul`` ``config`` dicts) tried for one problem, best guess
    first: the tile model's three best tiles (:func:`nbwgmma.frontend.tiles.rank_tiles`); the best
    of them that can pair up in 2-CTA clusters (two tile rows or more, B's tile in 64-column
    shares); the best one with groups of 16 tile rows (when it has more than 8); one-consumer
    tiles (BM = 64) among the three with as many stages as fit, up to 8 (more bytes in flight
    for bandwidth-bound shapes: 128 x 8192 x 8192 ran 9% faster with 8 than with 4 on an H100).
    """
    from ..kernels.gemm import GemmConfig

    tiles = rank_tiles(m, n)[:3]
    out = [{"bm": bm, "bn": bn} for bm, bn in tiles]
    # each CTA of a cluster multicasts whole 64-column shares of B
    pairable = [(bm, bn) for bm, bn in tiles if (bn // 64) % 2 == 0 and math.ceil(m / bm) >= 2]
    if pairable:
        out.append({"bm": pairable[0][0], "bn": pairable[0][1], "cluster": 2})
    bm, bn = tiles[0]
    if math.ceil(m / bm) > 8:
        out.append({"bm": bm, "bn": bn, "group_m": 16})
    for bm, bn in tiles:
        if bm > 64:  # two consumers: 6 stages of 128 x 128 measured 10-45% slower than 4 on an H100
            continue
        default = GemmConfig(kind, bm=bm, bn=bn, epilogue=epilogue,
                             out="bf16" if epilogue == "tma" else "f32").stages
        deepest = _stages_that_fit(kind, bm, bn, epilogue)
        if deepest is not None and deepest > default:
            out.append({"bm": bm, "bn": bn, "stages": deepest})
    return out


def problem_key(kind, odt, a_major, b_major, epilogue, m, n, k) -> str:
    """The problem class a choice is kept for (see the module docstring)."""
    from numba import cuda

    from ..launch import device_limits

    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
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


def time_candidates(run, configs, stream, inner=3, rounds=7):
    """Milliseconds per launch of ``run(config)`` for each config (None where it failed),
    measured as the module docstring says; ``stream`` a Numba stream or 0."""
    from numba import cuda

    ok = []
    for cfg in configs:
        try:
            run(cfg)
            run(cfg)
            ok.append(cfg)
        except Exception:  # noqa: BLE001 - a candidate this problem cannot run is skipped
            continue
    times = {id(c): [] for c in ok}
    start, end = cuda.event(timing=True), cuda.event(timing=True)
    for _ in range(rounds):
        for cfg in ok:
            start.record(stream)
            for _ in range(inner):
                run(cfg)
            end.record(stream)
            end.synchronize()
            times[id(cfg)].append(cuda.event_elapsed_time(start, end) / inner)
    return [statistics.median(times[id(c)]) if id(c) in times else None for c in configs]


def choose(key, make_configs, run, stream):
    """The tuned config for ``key``: known already, or the fastest of ``make_configs()``
    timed now with ``run(config)`` on ``stream``."""
    global last
    _load()
    entry = _MEMO.get(key)
    if entry is None:
        configs = make_configs()
        ms = time_candidates(run, configs, stream)
        timed = [(t, i) for i, t in enumerate(ms) if t is not None]
        if not timed:
            raise RuntimeError(f"autotune: no candidate configuration ran for {key}: {configs}")
        best = min(timed)[1]
        entry = {"config": configs[best],
                 "ms": [[c, t] for c, t in zip(configs, ms)],
                 "date": time.strftime("%Y-%m-%d")}
        _MEMO[key] = entry
        _save(key, entry)
        source = "tuned"
    else:
        source = "cached"
    last = {"key": key, "config": dict(entry["config"]), "ms": entry.get("ms"), "source": source}
    return dict(entry["config"])
