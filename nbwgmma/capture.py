"""Calls captured into a CUDA graph (``torch.cuda.graph``, ``torch.compile(mode="reduce-overhead")``,
CuPy's ``Stream.begin_capture``, the driver's ``cuStreamBeginCapture``).

A captured call's kernels are recorded, not run; they run at each replay of the graph, with the
buffers they were given at capture. So:

* what a first call does once (compile and load a kernel, allocate its scratch) is done with the
  calling thread's capture mode relaxed (:func:`relaxed`): in PyTorch's default ("global") mode
  ``cuMemAlloc`` and module loads fail while any capture is under way, and invalidate it;
* a buffer a captured kernel reads or writes (a staging copy of an operand TMA cannot read,
  split-K's and stream-K's scratch) is the graph's own, never shared with eager calls or other
  graphs, and kept for the life of the process (:func:`hold`): nothing here learns when a graph
  is destroyed;
* scratch that must start at zero is zeroed by a memset captured into the graph, so each replay
  starts from zero;
* nothing is timed (``config="auto"`` takes the tile model's pick where no tuned choice is known);
* a tensor map's 128-byte device copy (:mod:`nbwgmma.tma`) is made on a stream of its own with
  the mode relaxed, and never freed.

The stream test is the driver's ``cuStreamIsCapturing`` (through ctypes: about a microsecond),
asked at most once a call: each entry point records its call's stream (:func:`calling`), and
the places that need to know ask :func:`call_captured`, which keeps the answer for that call."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
import threading

__all__ = ["is_capturing", "relaxed", "relaxed_call", "calling", "call_captured", "keep_if_captured", "refuse_host_read",
           "hold", "held_bytes"]

_RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED
_HELD: list = []  # buffers captured kernels use (kept: a graph may replay at any time)
_CALL = threading.local()  # .stream, .captured: this thread's call under way (calling(), call_captured())


@functools.lru_cache(maxsize=None)
def _driver():
    """(cuStreamIsCapturing, cuThreadExchangeStreamCaptureMode, whether handle 0 names the
    per-thread default stream) of the CUDA driver, or None where its library cannot be opened (no
    GPU: nothing is ever captured)."""
    name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
        ptsz = os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0")
        test = getattr(lib, "cuStreamIsCapturing_ptsz" if ptsz else "cuStreamIsCapturing")
        mode = lib.cuThreadExchangeStreamCaptureMode
    except (OSError, AttributeError):
        return None
    test.argtypes, test.restype = (ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)), ctypes.c_int
    mode.argtypes, mode.restype = (ctypes.POINTER(ctypes.c_int),), ctypes.c_int
    return test, mode, ptsz


def is_capturing(stream_handle: int) -> bool:
    """Whether the stream with raw ``CUstream`` handle ``stream_handle`` is capturing into a
    graph (also while a capture it belongs to was invalidated: its calls fail anyway)."""
    drv = _driver()
    # (the legacy default stream never captures; handle 0 is the per-thread one under
    # CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM=1, which may)
    if drv is None or not (stream_handle or drv[2]):
        return False
    status = ctypes.c_int(0)
    if drv[0](ctypes.c_void_p(stream_handle), ctypes.byref(status)) != 0:
        return False  # (a handle the driver refuses: the launch names it)
    return status.value != 0


@contextlib.contextmanager
def relaxed(active: bool = True):
    """Run the block with the calling thread's capture mode relaxed (where ``active``): allocations,
    module loads and synchronous copies on other streams are allowed while a capture is under way;
    the mode the thread had is restored after."""
    drv = _driver() if active else None
    if drv is None:
        yield
        return
    mode = ctypes.c_int(_RELAXED)
    if drv[1](ctypes.byref(mode)) != 0:  # (the driver not yet initialized: no capture under way)
        yield
        return
    try:
        yield
    finally:
        drv[1](ctypes.byref(mode))


def relaxed_call(stream_of_call):
    """Decorator: run the function with the thread's capture mode relaxed (:func:`relaxed`) where
    the stream of its call, ``stream_of_call(*args, **kwargs)`` (a raw handle), is capturing (a
    call whose stream cannot be told runs as it is: the function's checks name the argument)."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            try:
                calling(stream_of_call(*args, **kwargs))
                active = call_captured()
            except Exception:  # noqa: BLE001 - an argument the function refuses
                active = False
            with relaxed(active):
                return fn(*args, **kwargs)
        return call
    return wrap


def calling(stream_handle: int) -> None:
    """Record ``stream_handle`` as the stream of the call under way on this thread (what
    :func:`call_captured` asks about; its answer is forgotten here, since a capture may have begun
    on the stream since the last call)."""
    _CALL.stream, _CALL.captured = stream_handle, None


def call_captured() -> bool:
    """Whether the stream :func:`calling` last recorded on this thread is capturing (asked of the
    driver once a call)."""
    captured = getattr(_CALL, "captured", None)
    if captured is None:
        captured = _CALL.captured = is_capturing(getattr(_CALL, "stream", 0))
    return captured


def keep_if_captured(x):
    """``x``, a temporary a kernel of the call under way reads (a converted bias, say), held where
    that call (:func:`calling`) is being captured: a graph reads it at every replay, after the
    array library that made it would have given its memory to something else. (PyTorch's
    temporaries need no hold: memory freed during a capture stays in the graph's pool.)"""
    if call_captured():
        hold(x)
    return x


def refuse_host_read(name: str) -> None:
    """Raise :class:`nbwgmma.MatmulError` where the call under way (:func:`calling`) is being
    captured: its argument ``name``, a one-element device array, would be read on the host once,
    at capture, and the graph would keep that value."""
    if call_captured():
        from .errors import MatmulError

        raise MatmulError(f"matmul: {name} is a one-element array, read on the host at each call, which a call "
                          f"captured into a CUDA graph cannot do (the graph would keep the value seen at capture); "
                          f"pass a number, or scales per row (M, 1) and per column (1, N), which the kernel reads")


def hold(*buffers):
    """Keep ``buffers`` (device arrays captured kernels use) for the life of the process; returns
    the first."""
    _HELD.extend(buffers)
    return buffers[0] if buffers else None


def held_bytes() -> int:
    """Bytes of device memory :func:`hold` keeps."""
    return sum(int(getattr(b, "nbytes", 0)) for b in _HELD)
