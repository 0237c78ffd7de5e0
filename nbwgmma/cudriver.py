"""The CUDA driver's kernel launch, called through ctypes: ``cuLaunchKernelEx`` and the
structures it takes (``CUlaunchConfig``, ``CUlaunchAttribute``), for
:class:`nbwgmma.launch.PreparedLaunch` (a repeated launch costs about a microsecond of host time
this way, a few times less than through the ``cuda.bindings`` wrapper)."""

from __future__ import annotations

import ctypes
import functools

__all__ = ["LaunchConfig", "LaunchAttribute", "launch_attributes", "driver_launch"]


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
