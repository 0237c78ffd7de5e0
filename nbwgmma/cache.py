"""On-disk cache of compiled kernels (cubins), so a new process skips the compile.

A ``@cuda.jit`` kernel is compiled by Numba (typing, LLVM, NVVM, ptxas: seconds
for the GEMM). :func:`cached_kernel` keeps the resulting cubin in a file named by
a hash of everything the code depends on: the key the caller gives (the kernel's
configuration), the argument types, the compute capability, nbwgmma's own source
files, the debug-wait setting and the versions of numba-cuda, llvmlite and the
CUDA toolkit's compiler. A later process with the same key loads the cubin
(``cuda.core.ObjectCode``) in milliseconds.

Where: ``$NBWGMMA_CACHE_DIR``, else ``$XDG_CACHE_HOME/nbwgmma``, else
``~/.cache/nbwgmma``. ``NBWGMMA_CACHE=0`` turns the cache off (every process
compiles). Files are written to a temporary name and renamed, so processes that
share the directory never read half a file; a file that does not parse is
ignored and rewritten.

Kernels shipped with the package (:data:`PREBUILT`, filled by ``python -m nbwgmma
precompile --arch sm_90a --prebuilt`` before a wheel is built) are looked up after the
user's cache (not with ``NBWGMMA_CACHE=0``). Their key leaves out the compiler versions: a cubin is finished machine
code for its architecture, whichever NVVM and llvmlite built it; it keeps nbwgmma's
sources, the debug-wait setting and numba-cuda's version (the kernels' parameter layout).
A shipped cubin the driver cannot load (built by a newer toolkit than the driver knows)
is compiled here instead.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pathlib
import tempfile

__all__ = ["PREBUILT", "cache_dir", "cached_cubin", "cached_kernel", "clear", "code_fingerprint", "holds", "lookup",
           "source_fingerprint", "stats", "store", "write_atomic"]

_MAGIC = b"nbwgmma-cubin-1\n"

#: this process's lookups: cubins loaded from disk ("hits", of which "prebuilt" shipped with the
#: package) and compiled ("misses")
stats = {"hits": 0, "prebuilt": 0, "misses": 0}

#: the kernels shipped with the package (see the module's text; empty in a source checkout), or
#: ``$NBWGMMA_PREBUILT_DIR`` (a packager's staging directory, a test's)
PREBUILT = pathlib.Path(os.environ.get("NBWGMMA_PREBUILT_DIR") or pathlib.Path(__file__).parent / "prebuilt")


def cache_dir() -> pathlib.Path | None:
    """The cache directory, or ``None`` when ``NBWGMMA_CACHE=0``."""
    if os.environ.get("NBWGMMA_CACHE", "1").strip().lower() in ("0", "off", "false", "no"):
        return None
    d = os.environ.get("NBWGMMA_CACHE_DIR")
    if d:
        return pathlib.Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "nbwgmma"


def clear() -> int:
    """Delete every cached cubin; return how many files were removed."""
    d = cache_dir()
    n = 0
    if d is not None and d.is_dir():
        for f in d.glob("*.cubin"):
            f.unlink(missing_ok=True)
            n += 1
    return n


@functools.lru_cache(maxsize=None)
def source_fingerprint() -> str:
    """Hash of what a built kernel depends on wherever it was built: nbwgmma's sources, the
    debug-wait setting and numba-cuda's version (the kernels' parameter layout)."""
    import numba_cuda

    from .intrinsics.mbarrier import DEBUG_WAIT_TIMEOUT_S

    h = hashlib.sha256()
    root = pathlib.Path(__file__).parent
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    h.update(f"numba-cuda {numba_cuda.__version__}".encode())
    h.update(repr(DEBUG_WAIT_TIMEOUT_S).encode())
    return h.hexdigest()


@functools.lru_cache(maxsize=None)
def code_fingerprint() -> str:
    """:func:`source_fingerprint` and the compiler versions: any change makes new keys."""
    import llvmlite

    h = hashlib.sha256(source_fingerprint().encode())
    h.update(f"llvmlite {llvmlite.__version__}".encode())
    try:
        from cuda.bindings import nvvm

        h.update(repr(nvvm.version()).encode())
    except Exception:  # no NVVM binding: the numba-cuda version stands for it
        pass
    return h.hexdigest()


def _arch(cc) -> tuple:
    """Numba's target for ``cc``: (9, 0) -> (9, 0, "a"), the arch-specific sm_90a that
    wgmma and setmaxnreg need (what Numba picks by itself for the current device)."""
    cc = tuple(cc)
    return cc if len(cc) == 3 else (cc[0], cc[1], "a" if cc >= (9, 0) else "")


def _key(key, sig, cc, prebuilt=False) -> str:
    text = json.dumps([repr(key), [str(t) for t in sig], list(cc),
                       source_fingerprint() if prebuilt else code_fingerprint()])
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _read(path: pathlib.Path):
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data.startswith(_MAGIC):
        return None
    head, sep, cubin = data[len(_MAGIC):].partition(b"\n")
    try:
        name = json.loads(head)["name"]
    except (ValueError, KeyError, TypeError):
        return None
    return (name, cubin) if sep and cubin else None


def write_atomic(path: pathlib.Path, data: bytes) -> bool:
    """Write ``data`` to a temporary file beside ``path`` and rename it over ``path``, so
    readers in other processes see the old file or the new one, never half of one.
    False (nothing written) on a read-only or full disk."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        return True
    except OSError:
        return False


def _write(path: pathlib.Path, name: str, cubin: bytes) -> None:
    # a failed write only costs the next process a compile
    write_atomic(path, _MAGIC + json.dumps({"name": name}).encode() + b"\n" + bytes(cubin))


def _path(key, sig, cc, prebuilt=False) -> pathlib.Path | None:
    d = PREBUILT if prebuilt else cache_dir()
    return d / f"{_key(key, sig, cc, prebuilt)}.cubin" if d is not None else None


def lookup(key, sig, cc, prebuilt=False):
    """``(entry name, cubin)`` stored for ``key``, ``sig`` and compute capability ``cc``
    (as the GPU reports it, e.g. (9, 0)) in the user's cache, or with ``prebuilt`` among the
    package's shipped kernels; None where there is none."""
    path = _path(key, sig, cc, prebuilt)
    return _read(path) if path is not None else None


def holds(key, sig, cc) -> bool:
    """Whether :func:`cached_cubin` would find ``key`` for ``sig`` and ``cc`` on disk (the user's
    cache, else the shipped kernels) rather than compile it; the file is not read."""
    path = _path(key, sig, cc)
    return path is not None and (path.is_file() or _path(key, sig, cc, prebuilt=True).is_file())


def store(key, sig, cc, name: str, cubin: bytes, prebuilt=False) -> bool:
    """Keep a cubin built elsewhere (``precompile --arch``, no GPU) where :func:`cached_cubin`
    looks for ``key``, ``sig`` and ``cc``: the user's cache, or with ``prebuilt`` the package's
    shipped kernels (:data:`PREBUILT`); False where the cache is off or not writable."""
    path = _path(key, sig, cc, prebuilt)
    if path is None:
        return False
    _write(path, name, cubin)
    return path.is_file()


def cached_cubin(dispatcher, sig, key, cc):
    """``(entry name, cubin, hit)`` of ``dispatcher`` compiled for ``sig`` and compute
    capability ``cc``: from the disk cache when it holds ``key`` (any ``repr``-stable value
    naming the kernel's code), else compiled by Numba and stored. ``None`` for a kernel
    whose module needs Numba's load-time setup (it cannot be loaded from a bare cubin)."""
    found, _ = _stored_or_compiled(dispatcher, sig, key, cc)
    return found


def _stored(key, sig, cc):
    """``((entry name, cubin), "cache" | "prebuilt")`` from the user's cache or else the shipped
    kernels (none with ``NBWGMMA_CACHE=0``: every process compiles), or ``(None, None)``."""
    path = _path(key, sig, cc)
    found = _read(path) if path is not None else None
    if found is not None:
        return found, "cache"
    if path is not None and PREBUILT.is_dir():
        found = lookup(key, sig, cc, prebuilt=True)
        if found is not None:
            return found, "prebuilt"
    return None, None


def _stored_or_compiled(dispatcher, sig, key, cc):
    """(:func:`cached_cubin`'s answer, where it came from: "cache", "prebuilt" or None for a
    compile)."""
    found, source = _stored(key, sig, cc)
    if found is not None:
        stats["hits"] += 1
        stats["prebuilt"] += source == "prebuilt"
        return (*found, True), source
    return _compiled(dispatcher, sig, cc, _path(key, sig, cc)), None


def _compiled(dispatcher, sig, cc, path):
    stats["misses"] += 1
    try:
        lib = dispatcher.compile(tuple(sig))._codelibrary
        if getattr(lib, "_setup_functions", None):
            return None
        cubin = lib.get_cubin(cc=_arch(cc))
    except Exception as e:  # noqa: BLE001 - the CUDA toolkit's assembler or linker failed: say so
        if "link" not in type(e).__name__.lower():  # (nvJitLink's error, Numba's LinkerError; ptxas runs there)
            raise
        from .errors import ToolchainError

        arch = "sm_%d%d%s" % _arch(cc)
        raise ToolchainError(f"kernel {getattr(dispatcher, '__name__', dispatcher)} did not assemble for {arch}: "
                             f"{str(e).strip()[:1500]}") from e
    name, cubin = lib._entry_name, bytes(getattr(cubin, "code", cubin))  # bytes or a cuda.core ObjectCode
    if path is not None:
        _write(path, name, cubin)
    return name, cubin, False


def cached_kernel(dispatcher, sig, key, cc):
    """``(cuda.core Kernel, hit)`` for :func:`cached_cubin`'s kernel, loaded on the current device."""
    from cuda.core import ObjectCode

    found, source = _stored_or_compiled(dispatcher, sig, key, cc)
    if source is not None:
        try:
            return ObjectCode.from_cubin(found[1]).get_kernel(found[0]), True
        except Exception:  # noqa: BLE001 - a stored cubin this driver cannot load (a newer toolkit built it)
            stats["hits"] -= 1  # compiled here and kept in the user's cache, which is looked up first
            stats["prebuilt"] -= source == "prebuilt"
            found = _compiled(dispatcher, sig, cc, _path(key, sig, cc))
    if found is None:
        return dispatcher.compile(tuple(sig))._codelibrary.get_cufunc().kernel, False
    return ObjectCode.from_cubin(found[1]).get_kernel(found[0]), False
