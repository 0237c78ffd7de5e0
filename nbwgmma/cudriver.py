"""The CUDA driver's kernel launch, called through ctypes: ``cuLaunchKernelEx`` and the
structures it takes (``CUlaunchConfig``, ``CUlaunchAttribute``), and :class:`DriverLaunch`, the
call with a fixed configuration and parameter buffer under :class:`nbwgmma.launch.PreparedLaunch`
(a repeated launch costs about a microsecond of host time this way, a few times less than
through the ``cuda.bindings`` wrapper)."""

from __future__ import annotations

import ctypes
import functools
import threading

from .errors import LaunchError

__all__ = ["LaunchConfig", "LaunchAttribute", "launch_attributes", "driver_launch", "DriverLaunch"]


class LaunchConfig(ctypes.Structure):
    """The driver's ``CUlaunchConfig``."""

    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p), ("attrs", ctypes.c_void_p),
                ("numAttrs", ctypes.c_uint)]


class LaunchAttribute(ctypes.Structure):
    """The driver's ``CUlaunchAttribute`` holding a cluster shape (its 64-byte value union
    starts with ``clusterDim``)."""

    _fields_ = [("id", ctypes.c_int), ("_pad", ctypes.c_char * 4), ("x", ctypes.c_uint), ("y", ctypes.c_uint),
                ("z", ctypes.c_uint), ("_rest", ctypes.c_char * 52)]


def launch_attributes(cluster, pdl):
    """``(attribute id, value)`` pairs of a launch, each value three unsigned words at the start
    of the attribute's value union: the cluster shape, and with ``pdl`` programmatic stream
    serialization allowed (its first word 1: the kernel may start before the previous one in
    the stream ends, and orders itself with ``griddep_wait``)."""
    from cuda.bindings import driver as drv

    ids = drv.CUlaunchAttributeID
    attrs = []
    if cluster is not None:
        attrs.append((int(ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION), tuple(cluster)))
    if pdl:
        attrs.append((int(ids.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION), (1, 0, 0)))
    return attrs


@functools.lru_cache(maxsize=None)
def driver_launch():
    """``cuLaunchKernelEx`` of the CUDA driver called through ctypes (about a microsecond a
    call, a few times less than the ``cuda.bindings`` wrapper), or None where the driver
    library cannot be opened this way."""
    import os
    import sys

    name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
        ptsz = os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0")
        fn = getattr(lib, "cuLaunchKernelEx_ptsz" if ptsz else "cuLaunchKernelEx")
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
    fn.restype = ctypes.c_int
    return fn


class DriverLaunch:
    """One kernel's launch with its configuration fixed: ``launch_values(stream, values)`` packs
    the parameter values into a fixed buffer of 8-byte slots (``pack``, a ``struct`` packer's
    ``pack_into``) and calls ``cuLaunchKernelEx`` on the raw ``CUstream`` ``stream``. Through
    ctypes with a configuration and a parameter-pointer array built here (``binding`` is
    ``"ctypes"``), or through ``cuda.bindings`` where the driver library cannot be opened that
    way (``"cuda.bindings"``). A failed launch raises :class:`~nbwgmma.errors.LaunchError`."""

    def __init__(self, handle, pack, nslots, grid, block, smem, cluster, pdl):
        self._handle, self._pack = handle, pack
        n = max(1, nslots)
        self._buf = ctypes.create_string_buffer(8 * n)
        base = ctypes.addressof(self._buf)
        self._ptrs = (ctypes.c_void_p * n)(*(base + 8 * i for i in range(n)))
        self._params = ctypes.addressof(self._ptrs)
        self._lock = threading.Lock()
        fn = driver_launch()
        if fn is not None:
            cfg = LaunchConfig(*grid, *block, smem, None, None, 0)
            attrs = launch_attributes(cluster, pdl)
            if attrs:
                self._attrs = (LaunchAttribute * len(attrs))(*(LaunchAttribute(i, b"", *v) for i, v in attrs))
                cfg.attrs, cfg.numAttrs = ctypes.addressof(self._attrs), len(attrs)
            self._ccfg, self._fn = cfg, fn
            # The call's arguments, converted once: configuration, function, parameter pointers.
            self._cargs = (ctypes.c_void_p(ctypes.addressof(cfg)), ctypes.c_void_p(int(handle)),
                           ctypes.c_void_p(self._params), None)
            self.binding = "ctypes"
            self.launch_values = self._launch_ctypes
        else:
            self._setup_bindings(grid, block, smem, cluster, pdl)
            self.binding = "cuda.bindings"
            self.launch_values = self._launch_bindings

    def _setup_bindings(self, grid, block, smem, cluster, pdl):
        from cuda.bindings import driver as drv

        cfg = drv.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = grid
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = block
        cfg.sharedMemBytes = smem
        attrs = []
        for ident, value in launch_attributes(cluster, pdl):
            at = drv.CUlaunchAttribute()
            at.id = drv.CUlaunchAttributeID(ident)
            if ident == int(drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION):
                at.value.clusterDim.x, at.value.clusterDim.y, at.value.clusterDim.z = value
            else:
                at.value.programmaticStreamSerializationAllowed = value[0]
            attrs.append(at)
        if attrs:
            cfg.attrs, cfg.numAttrs = attrs, len(attrs)
        self._cfg, self._launch, self._ok = cfg, drv.cuLaunchKernelEx, drv.CUresult.CUDA_SUCCESS
        self._streams: dict = {}

    def _launch_ctypes(self, stream: int, values):
        """Launch on the raw ``CUstream`` ``stream`` with the parameter ``values`` (a sequence)."""
        with self._lock:  # one parameter buffer and configuration: the driver copies them during the call
            self._pack(self._buf, 0, *values)
            self._ccfg.hStream = stream
            err = self._fn(*self._cargs)
        if err:
            from cuda.bindings import driver as drv

            raise LaunchError(f"cuLaunchKernelEx failed: {drv.CUresult(err)}")

    def _launch_bindings(self, stream: int, values):
        st = self._streams.get(stream)
        if st is None:
            from cuda.bindings import driver as drv

            if len(self._streams) > 64:
                self._streams.clear()
            st = self._streams[stream] = drv.CUstream(stream)
        with self._lock:
            self._pack(self._buf, 0, *values)
            self._cfg.hStream = st
            (err,) = self._launch(self._cfg, self._handle, self._params, 0)
        if err != self._ok:
            raise LaunchError(f"cuLaunchKernelEx failed: {err}")
