"""The on-disk kernel cache without a GPU: keys, files, bad files, switching it off."""

import pytest

from nbwgmma import cache


class FakeLib:
    def __init__(self, tag, setup=()):
        self._entry_name = f"kernel_{tag}"
        self._setup_functions = list(setup)
        self.tag = tag

    def get_cubin(self, cc=None):
        return f"CUBIN<{self.tag}/{cc}>".encode() + bytes(range(256))  # binary, with newlines


class FakeDispatcher:
    """Counts compiles; the 'cubin' names the signature it was compiled for."""

    def __init__(self, setup=()):
        self.compiles = 0
        self.setup = setup

    def compile(self, sig):
        self.compiles += 1
        lib = FakeLib("-".join(sig), self.setup)
        return type("K", (), {"_codelibrary": lib})()


@pytest.fixture
def cdir(tmp_path, monkeypatch):
    monkeypatch.setenv("NBWGMMA_CACHE_DIR", str(tmp_path / "c"))
    monkeypatch.delenv("NBWGMMA_CACHE", raising=False)
    return tmp_path / "c"


def test_miss_then_hit_returns_the_same_cubin(cdir):
    d = FakeDispatcher()
    before = dict(cache.stats)
    name, cubin, hit = cache.cached_cubin(d, ("u64", "i32"), ("gemm", 1), (9, 0))
    assert not hit and d.compiles == 1 and name == "kernel_u64-i32"
    assert cubin == b"CUBIN<u64-i32/(9, 0, 'a')>" + bytes(range(256))  # sm_90a
    assert len(list(cdir.glob("*.cubin"))) == 1
    again = cache.cached_cubin(FakeDispatcher(), ("u64", "i32"), ("gemm", 1), (9, 0))
    assert again == (name, cubin, True)
    assert cache.stats["hits"] == before["hits"] + 1 and cache.stats["misses"] == before["misses"] + 1


def test_holds_answers_without_reading_or_compiling(cdir, monkeypatch):
    """``holds``: whether a cubin is on disk for the key (the user's cache, else the shipped
    kernels); nothing compiled, nothing read; none with the cache off."""
    d = FakeDispatcher()
    assert not cache.holds(("gemm", 2), ("u64",), (9, 0))
    cache.cached_cubin(d, ("u64",), ("gemm", 2), (9, 0))
    assert cache.holds(("gemm", 2), ("u64",), (9, 0)) and d.compiles == 1
    assert not cache.holds(("gemm", 3), ("u64",), (9, 0)) and not cache.holds(("gemm", 2), ("i32",), (9, 0))
    monkeypatch.setattr(cache, "_read", lambda path: pytest.fail("holds reads no file"))
    assert cache.holds(("gemm", 2), ("u64",), (9, 0))
    monkeypatch.setenv("NBWGMMA_CACHE", "0")
    assert not cache.holds(("gemm", 2), ("u64",), (9, 0))


@pytest.mark.parametrize("change", ["key", "sig", "cc"])
def test_every_part_of_the_key_separates_entries(cdir, change):
    base = dict(sig=("u64",), key=("gemm", 1), cc=(9, 0))
    other = dict(base)
    other[change] = {"key": ("gemm", 2), "sig": ("u32",), "cc": (10, 0)}[change]
    d = FakeDispatcher()
    cache.cached_cubin(d, base["sig"], base["key"], base["cc"])
    _, _, hit = cache.cached_cubin(d, other["sig"], other["key"], other["cc"])
    assert not hit and d.compiles == 2
    assert len(list(cdir.glob("*.cubin"))) == 2


def test_a_damaged_file_is_recompiled_and_rewritten(cdir):
    d = FakeDispatcher()
    cache.cached_cubin(d, ("u64",), "k", (9, 0))
    (f,) = cdir.glob("*.cubin")
    for junk in (b"", b"garbage", f.read_bytes()[:20], cache._MAGIC + b"{not json}\nxx", cache._MAGIC + b'{"name": "x"}\n'):
        f.write_bytes(junk)
        _, cubin, hit = cache.cached_cubin(d, ("u64",), "k", (9, 0))
        assert not hit and cubin.startswith(b"CUBIN<u64")
    assert d.compiles == 6
    assert cache.cached_cubin(d, ("u64",), "k", (9, 0))[2]  # rewritten whole


def test_switched_off_compiles_every_time_and_writes_nothing(cdir, monkeypatch):
    monkeypatch.setenv("NBWGMMA_CACHE", "0")
    assert cache.cache_dir() is None
    d = FakeDispatcher()
    for _ in range(2):
        assert not cache.cached_cubin(d, ("u64",), "k", (9, 0))[2]
    assert d.compiles == 2 and not cdir.exists()


def test_default_directory_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("NBWGMMA_CACHE_DIR", raising=False)
    monkeypatch.delenv("NBWGMMA_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == tmp_path / "nbwgmma"


def test_unwritable_directory_still_compiles(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("NBWGMMA_CACHE_DIR", str(blocker / "sub"))
    d = FakeDispatcher()
    assert cache.cached_cubin(d, ("u64",), "k", (9, 0))[2] is False
    assert cache.cached_cubin(d, ("u64",), "k", (9, 0))[2] is False and d.compiles == 2


def test_kernels_with_load_time_setup_are_not_cached(cdir):
    d = FakeDispatcher(setup=[object()])
    assert cache.cached_cubin(d, ("u64",), "k", (9, 0)) is None
    assert not cdir.exists() or not list(cdir.glob("*.cubin"))


def test_an_assembler_failure_is_a_toolchain_error_and_other_errors_pass(cdir):
    """A kernel ptxas or the linker cannot build (the CUDA toolkit's exception, raised at the compile) is
    nbwgmma's ToolchainError naming the kernel and the architecture, the assembler's words kept; any
    other error (a typing error in the user's code) passes as it is. Nothing is cached."""
    from nbwgmma.errors import ToolchainError

    link_error = type("nvJitLinkError", (RuntimeError,), {"__module__": "cuda.bindings.nvjitlink"})

    class Failing(FakeDispatcher):
        __name__ = "gemm"

        def __init__(self, exc):
            super().__init__()
            self.exc = exc

        def compile(self, sig):
            raise self.exc

    with pytest.raises(ToolchainError, match=r"kernel gemm did not assemble for sm_90a: .*Insufficient registers"):
        cache.cached_cubin(Failing(link_error("ptxas fatal: Insufficient registers (128)")), ("u64",), "k", (9, 0))
    with pytest.raises(KeyError, match="typing"):
        cache.cached_cubin(Failing(KeyError("typing")), ("u64",), "k", (9, 0))
    assert not cdir.exists() or not list(cdir.glob("*.cubin"))


def test_clear_removes_the_files(cdir):
    for i in range(3):
        cache.cached_cubin(FakeDispatcher(), ("u64",), ("k", i), (9, 0))
    assert cache.clear() == 3
    assert not list(cdir.glob("*.cubin"))


def test_fingerprint_covers_the_package_sources():
    fp = cache.code_fingerprint()
    assert len(fp) == 64 and fp == cache.code_fingerprint()


def test_shipped_kernels_are_found_after_the_users_cache_whichever_compilers(cdir, tmp_path, monkeypatch):
    """A kernel shipped with the package (``precompile --arch sm_90a --prebuilt``) loads with no
    compile when the user's cache lacks it, under a key without the compiler versions; the user's
    cache is looked up first."""
    monkeypatch.setattr(cache, "PREBUILT", tmp_path / "shipped")
    sig, key = ("u64", "i32"), ("gemm", 7)
    assert cache.store(key, sig, (9, 0), "shipped_kernel", b"SHIPPED", prebuilt=True)
    assert cache.lookup(key, sig, (9, 0)) is None and cache.lookup(key, sig, (9, 0), prebuilt=True) == (
        "shipped_kernel", b"SHIPPED")
    before = dict(cache.stats)
    d = FakeDispatcher()
    assert cache.cached_cubin(d, sig, key, (9, 0)) == ("shipped_kernel", b"SHIPPED", True) and d.compiles == 0
    assert cache.stats["prebuilt"] == before["prebuilt"] + 1
    monkeypatch.setattr(cache, "code_fingerprint", lambda: "other compilers")  # the user's key moves, not the shipped one
    assert cache.cached_cubin(d, sig, key, (9, 0))[:2] == ("shipped_kernel", b"SHIPPED") and d.compiles == 0
    assert cache.cached_cubin(d, sig, ("gemm", 8), (9, 0))[2] is False and d.compiles == 1  # not shipped: compiled
    cache.store(key, sig, (9, 0), "users_kernel", b"USERS")
    assert cache.cached_cubin(d, sig, key, (9, 0))[:2] == ("users_kernel", b"USERS")
    monkeypatch.setattr(cache, "source_fingerprint", lambda: "other sources")  # nbwgmma changed: not shipped
    assert cache.lookup(key, sig, (9, 0), prebuilt=True) is None


def test_no_cache_means_no_shipped_kernels_either(cdir, tmp_path, monkeypatch):
    """``NBWGMMA_CACHE=0``: every process compiles, shipped kernels included."""
    monkeypatch.setattr(cache, "PREBUILT", tmp_path / "shipped")
    cache.store(("gemm", 9), ("u64",), (9, 0), "shipped_kernel", b"SHIPPED", prebuilt=True)
    monkeypatch.setenv("NBWGMMA_CACHE", "0")
    d = FakeDispatcher()
    assert cache.cached_cubin(d, ("u64",), ("gemm", 9), (9, 0))[2] is False and d.compiles == 1
