"""nbwgmma.capture without a GPU: the thread's capture mode relaxed and restored around a block
(a stand-in driver records the calls), the legacy stream never asked about, a decorated function
keeping its signature and its errors, and held buffers counted."""

import ctypes
import inspect

import pytest

from nbwgmma import capture


class _Driver:
    """cuStreamIsCapturing and cuThreadExchangeStreamCaptureMode as ctypes would call them."""

    def __init__(self, capturing=(), ptsz=False):
        self.capturing, self.mode, self.calls, self.ptsz = set(capturing), 0, [], ptsz

    def is_capturing(self, handle, status):
        h = handle.value or 0  # (ctypes gives None for a null pointer)
        self.calls.append(("is", h))
        ctypes.cast(status, ctypes.POINTER(ctypes.c_int))[0] = int(h in self.capturing)
        return 0

    def exchange(self, mode):
        p = ctypes.cast(mode, ctypes.POINTER(ctypes.c_int))
        old, self.mode = self.mode, p[0]
        p[0] = old
        self.calls.append(("mode", self.mode))
        return 0


@pytest.fixture
def driver(monkeypatch):
    d = _Driver(capturing={0x1234})
    monkeypatch.setattr(capture, "_driver", lambda: (d.is_capturing, d.exchange, d.ptsz))
    return d


def test_relaxed_sets_the_mode_and_restores_it_even_on_an_error(driver):
    with capture.relaxed():
        assert driver.mode == 2  # CU_STREAM_CAPTURE_MODE_RELAXED
    assert driver.mode == 0
    with pytest.raises(KeyError):
        with capture.relaxed():
            raise KeyError("x")
    assert driver.mode == 0
    with capture.relaxed(False):
        assert driver.mode == 0
    assert [c for c in driver.calls if c[0] == "mode"] == [("mode", 2), ("mode", 0)] * 2


def test_relaxed_restores_nothing_where_the_driver_refused_the_exchange(driver, monkeypatch):
    calls = []

    def refusing(mode):  # (CUDA_ERROR_NOT_INITIALIZED: the mode is left as it was)
        calls.append(ctypes.cast(mode, ctypes.POINTER(ctypes.c_int))[0])
        return 3

    monkeypatch.setattr(capture, "_driver", lambda: (driver.is_capturing, refusing, False))
    with capture.relaxed():
        pass
    assert calls == [2]  # one attempt, no "restore" that would leave the thread relaxed


def test_is_capturing_asks_about_a_stream_but_never_the_legacy_one(driver):
    assert capture.is_capturing(0x1234) and not capture.is_capturing(0x99)
    assert not capture.is_capturing(0)
    assert driver.calls == [("is", 0x1234), ("is", 0x99)]
    driver.ptsz = True  # handle 0: the per-thread default stream, which may capture
    driver.capturing.add(0)
    assert capture.is_capturing(0) and driver.calls[-1] == ("is", 0)


def test_a_call_captured_keeps_its_temporaries_and_refuses_host_reads(driver, monkeypatch):
    from nbwgmma import MatmulError

    monkeypatch.setattr(capture, "_HELD", [])
    capture.calling(0x99)
    x = object()
    assert capture.keep_if_captured(x) is x and capture._HELD == []
    capture.refuse_host_read("scale_a")
    capture.calling(0x1234)
    assert capture.keep_if_captured(x) is x and capture._HELD == [x]
    with pytest.raises(MatmulError, match="scale_a is a one-element array.*CUDA graph"):
        capture.refuse_host_read("scale_a")
    capture.calling(0)


def test_relaxed_call_relaxes_only_a_capturing_call_and_keeps_the_function(driver):
    @capture.relaxed_call(lambda x, stream=None: stream)
    def f(x, *, stream=None):
        """doc"""
        if x is None:
            raise ValueError("no x")
        return driver.mode

    assert f.__doc__ == "doc" and str(inspect.signature(f)) == "(x, *, stream=None)"
    assert f(1, stream=0x1234) == 2 and f(1, stream=0x99) == 0 and driver.mode == 0
    with pytest.raises(ValueError, match="no x"):
        f(None, stream=0x1234)
    assert driver.mode == 0

    @capture.relaxed_call(lambda x, stream=None: int(stream))  # a stream it cannot tell: runs as it is
    def g(x, *, stream=None):
        return driver.mode

    assert g(1, stream="not a stream") == 0


def test_without_a_driver_nothing_is_capturing(monkeypatch):
    monkeypatch.setattr(capture, "_driver", lambda: None)
    assert not capture.is_capturing(0x1234)
    with capture.relaxed():
        pass


def test_held_buffers_are_counted(monkeypatch):
    monkeypatch.setattr(capture, "_HELD", [])
    import numpy as np

    a, b = np.zeros(10, np.float32), np.zeros(3, np.int32)
    assert capture.hold(a, b) is a
    assert capture.held_bytes() == 52


def test_a_call_asks_the_driver_once_and_each_call_asks_anew(driver):
    capture.calling(0x1234)
    assert capture.call_captured() and capture.call_captured()
    assert driver.calls.count(("is", 0x1234)) == 1
    driver.capturing.discard(0x1234)  # (the capture ended between two calls on the stream)
    capture.calling(0x1234)
    assert not capture.call_captured() and driver.calls.count(("is", 0x1234)) == 2
    capture.calling(0)


def test_grouped_matmul_runs_relaxed_on_a_capturing_stream(driver, monkeypatch):
    """grouped_matmul's whole body (its checks, its kernel's compile and load, its allocations)
    runs with the thread's mode relaxed where its stream is capturing, and only there."""
    from nbwgmma.frontend import grouped

    modes = []

    def described(x, name, fn):  # (the body's first step: note the mode, then stop)
        modes.append(driver.mode)
        raise RuntimeError("stop")

    monkeypatch.setattr(grouped, "lib_of", lambda a: "numba")
    monkeypatch.setattr(grouped, "stream_of", lambda lib, stream, fn: stream)
    monkeypatch.setattr(grouped, "described", described)
    for stream, mode in ((0x1234, 2), (0x99, 0)):
        with pytest.raises(RuntimeError, match="stop"):
            grouped.grouped_matmul(None, None, None, stream=stream)
    assert modes == [2, 0] and driver.mode == 0
    capture.calling(0)


def test_a_first_launch_compiles_and_loads_relaxed_on_a_capturing_stream(driver, monkeypatch):
    """``launch()``'s first launch of a signature (compile, module load, shared memory limit)
    runs with the thread's mode relaxed where its stream is capturing, and only there."""
    import numpy as np
    from numba import cuda

    import nbwgmma.launch as ln

    @cuda.jit
    def k(x):
        x[0] = 1

    modes = []

    def compiled(kernel, args, smem):  # (where the kernel would be compiled and loaded: note the mode, stop)
        modes.append(driver.mode)
        raise RuntimeError("stop")

    monkeypatch.setattr(ln, "_compiled", compiled)
    monkeypatch.setattr(ln, "_repeat_launch", lambda *a: None)
    for stream in (0x1234, 0x99):
        with pytest.raises(RuntimeError, match="stop"):
            ln.launch(k, 1, 32, (np.int32(3),), stream=stream)
    assert modes == [2, 0] and driver.mode == 0


def test_matmul_runs_its_full_path_relaxed_on_a_capturing_stream(driver, monkeypatch):
    """matmul's full path (checks, plan, compile, load, allocations) runs with the thread's mode
    relaxed where its call is captured, and only there."""
    from nbwgmma.frontend import matmul as mm

    modes = []

    def full(*args):  # (the full path: note the mode, then stop)
        modes.append(driver.mode)
        raise RuntimeError("stop")

    monkeypatch.setattr(mm, "_capturing", lambda a, stream: stream == 0x1234)
    monkeypatch.setattr(mm, "_full", full)
    for stream in (0x1234, 0x99):
        with pytest.raises(RuntimeError, match="stop"):
            mm.matmul(None, None, stream=stream)
    assert modes == [2, 0] and driver.mode == 0
