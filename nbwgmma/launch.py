"""Launch ``@cuda.jit`` kernels with large dynamic shared memory and clusters.

Numba's ``kernel[grid, block, stream, smem]`` has no cluster argument and
fails above 48 KiB of dynamic shared memory until the function's
``CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`` is raised. :func:`launch`
does both, keeps Numba's own argument marshalling, and checks the request
against the device before launching::

    launch(kernel, grid=(132,), block=(384,), args=(a, b, c),
           smem=dynamic_smem_bytes(200 * 1024), cluster=(2, 1, 1))
"""

from __future__ import annotations

import functools
import math
import struct
import threading

import numpy as np

from . import cudriver
from .bounds import launch_bounds
from .capture import is_capturing, relaxed
from .errors import KernelStoppedError, LaunchError, is_int, roles_unfilled
from .fastlaunch import (LaunchCache, Mismatch, arg_kind, array_arg_types, array_arg_values, reader, slots_of,
                         stream_handle)
from .intrinsics.errors import NbwgmmaTypingError, shortened
from .intrinsics.mbarrier import DEBUG_WAIT_TIMEOUT_S

__all__ = ["launch", "dynamic_smem_bytes", "max_active_clusters", "LaunchError", "KernelStoppedError",
           "device_limits", "H100_LIMITS", "PreparedLaunch", "array_arg_types", "array_arg_values", "LAUNCH_CACHE",
           "prepare", "PreparedKernel"]


def dynamic_smem_bytes(payload: int, align: int = 1024) -> int:
    """Bytes to request so that ``payload`` bytes fit after aligning the base to ``align``.

    Pairs with :func:`nbwgmma.intrinsics.dynamic_smem_base`.
    """
    if not is_int(payload) or payload < 0:
        raise LaunchError(f"dynamic_smem_bytes: payload must be a non-negative integer (bytes); got {payload!r}")
    if not is_int(align) or align < 1 or align & (align - 1):
        raise LaunchError(f"dynamic_smem_bytes: align must be a positive power of two; got {align!r}")
    return int(payload) + int(align) - 1


#: CUDA's limits on a grid's and a block's dimensions (x, y, z; a block's x and y are bounded
#: by its 1024 threads, checked with the device's limits)
_DIM_LIMITS = {"grid": (2 ** 31 - 1, 65535, 65535), "block": (None, None, 64)}


def _dim3(d, what):
    if is_int(d):
        d = (d,)
    if isinstance(d, (str, bytes)) or not hasattr(d, "__iter__") or not all(is_int(x) for x in d):
        raise LaunchError(f"{what} must be 1 to 3 positive integers; got {d!r}")
    d = tuple(int(x) for x in d)
    if not 1 <= len(d) <= 3 or any(x < 1 for x in d):
        raise LaunchError(f"{what} must be 1 to 3 positive integers; got {d}")
    for axis, x, lim in zip("xyz", d, _DIM_LIMITS.get(what, ())):
        if lim is not None and x > lim:
            raise LaunchError(f"{what} {d}: its {axis} dimension exceeds CUDA's limit of {lim}")
    return d + (1,) * (3 - len(d))


#: The limits of an H100 SXM (an H200 has the same), which the CUDA simulator enforces so
#: that a launch it accepts is one the GPU accepts too.
H100_LIMITS = {
    "multiprocessors": 132,
    "max_threads_per_block": 1024,
    "max_smem_optin": 232448,  # 227 KiB: the per-block opt-in maximum of sm_90
    "compute_capability": (9, 0),
    "max_portable_cluster": 8,
    "max_cluster": 16,
}


def device_limits(device=None) -> dict:
    """The limits :func:`launch` checks, read off the current device (cached per device);
    in Numba's CUDA simulator those of an H100 (:data:`H100_LIMITS`)."""
    from numba import cuda

    from . import sim

    if sim.enabled():  # the simulator's device has no limits of its own: hold kernels to an H100's
        return dict(H100_LIMITS)
    dev = device or cuda.get_current_device()
    return _limits(dev.id)


@functools.lru_cache(maxsize=None)
def _limits(device_id):
    from numba import cuda

    dev = cuda.get_current_device()
    return {
        "multiprocessors": dev.MULTIPROCESSOR_COUNT,
        "max_threads_per_block": dev.MAX_THREADS_PER_BLOCK,
        "max_smem_optin": dev.MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        "compute_capability": dev.compute_capability,
        "max_portable_cluster": 8,
        "max_cluster": 16,
    }


_attr_lock = threading.Lock()
_smem_raised: dict = {}


def _raise_smem_limit(cufunc, nbytes):
    """Allow ``nbytes`` of dynamic shared memory for a Numba cufunc or a ``cuda.core`` Kernel
    on the current device (nothing to do up to the default 48 KiB)."""
    from cuda.bindings import driver as drv
    from numba import cuda

    if nbytes <= 48 * 1024:
        return
    device_id = cuda.get_current_device().id
    key = (int(cufunc.handle), device_id)
    with _attr_lock:
        if _smem_raised.get(key, 0) >= nbytes:
            return
        attr = drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
        (err,) = drv.cuKernelSetAttribute(attr, nbytes, cufunc.handle, device_id)
        if err != drv.CUresult.CUDA_SUCCESS:
            raise LaunchError(f"cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={nbytes}) failed: {err}")
        _smem_raised[key] = nbytes


def _core_stream(stream):
    from numba import cuda
    from numba.cuda.cudadrv import driver

    if stream is None or stream == 0:
        return driver._to_core_stream(0)
    if hasattr(stream, "__cuda_stream__") and not isinstance(stream, type(cuda.default_stream())):
        _, ptr = stream.__cuda_stream__()
        return driver._to_core_stream(cuda.external_stream(ptr))
    if isinstance(stream, int):
        return driver._to_core_stream(cuda.external_stream(stream))
    return driver._to_core_stream(stream)


def _check_whole_clusters(grid, cluster):
    for g, c, ax in zip(grid, cluster, "xyz"):
        if g % c:
            raise LaunchError(f"grid.{ax}={g} is not a multiple of cluster.{ax}={c}")


def _compiled(kernel, args, smem):
    """(compiled kernel, cufunc) for ``args``, with the dynamic shared memory limit raised to ``smem``."""
    try:
        kern = kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))
    except NbwgmmaTypingError as e:  # (its traceback from here: the compiler's frames left out)
        raise shortened(e) from None
    cufunc = kern._codelibrary.get_cufunc()
    _raise_smem_limit(cufunc, smem)
    return kern, cufunc


def _check_roles(kernel, kern, block):
    """Refuse a block below the launch bounds of a kernel compiled (``kern``) with ``setmaxnreg``:
    see :func:`roles_unfilled`. Costs nothing where the block fills the bounds."""
    bound, nthreads = (launch_bounds(kern) or launch_bounds(kernel) or (None,))[0], math.prod(block)
    if bound is None or nthreads >= bound or "setmaxnreg" not in kern.inspect_llvm():
        return
    raise LaunchError(roles_unfilled(getattr(kernel.py_func, "__qualname__", "the kernel"), nthreads, bound))


def _check_request(grid, block, smem, static_smem, kernel_max_threads, cluster, kernel=None):
    """The checks every launch path makes before launching: threads against the device and
    the kernel, dynamic + static shared memory against the opt-in limit, clusters against
    the device and the grid; ``kernel`` (a dispatcher) names the launch in the messages.
    Returns ``(smem, cluster as a 3-tuple or None)``."""
    name = getattr(getattr(kernel, "py_func", None), "__qualname__", None)
    try:
        return _checked_request(grid, block, smem, static_smem, kernel_max_threads, cluster)
    except LaunchError as e:
        if name is None:
            raise
        raise LaunchError(f"launch of {name}: {e}") from None


def _checked_request(grid, block, smem, static_smem, kernel_max_threads, cluster):
    lim = device_limits()
    nthreads = math.prod(block)
    if nthreads > lim["max_threads_per_block"]:
        raise LaunchError(
            f"block of {nthreads} threads {block} exceeds the device limit of {lim['max_threads_per_block']}"
        )
    smem = int(smem)
    if smem < 0:
        raise LaunchError(f"dynamic shared memory must be >= 0 bytes; got {smem}")
    if smem + static_smem > lim["max_smem_optin"]:
        raise LaunchError(
            f"dynamic shared memory {smem} B + static {static_smem} B exceeds the device's opt-in limit "
            f"of {lim['max_smem_optin']} B per block by {smem + static_smem - lim['max_smem_optin']} B (fewer "
            f"pipeline stages, or smaller tiles)"
        )
    if kernel_max_threads and nthreads > kernel_max_threads:
        raise LaunchError(
            f"block of {nthreads} threads exceeds this kernel's limit of {kernel_max_threads} "
            f"(launch bounds or register use)"
        )
    if cluster is not None:
        cluster = _dim3(cluster, "cluster")
        csize = math.prod(cluster)
        if lim["compute_capability"] < (9, 0):
            raise LaunchError(f"clusters need compute capability 9.0; device has {lim['compute_capability']}")
        if csize > lim["max_portable_cluster"]:
            raise LaunchError(f"cluster of {csize} CTAs {cluster} exceeds the portable limit of 8")
        _check_whole_clusters(grid, cluster)
    return smem, cluster


def max_active_clusters(kernel, args, block, cluster, *, smem: int = 0, stream=0) -> int:
    """How many clusters of shape ``cluster`` of ``kernel`` (a ``@cuda.jit`` dispatcher
    compiled for ``args``, or a ``cuda.core`` Kernel with ``args=None``) can be resident
    at once (``cuOccupancyMaxActiveClusters``).

    A persistent grid of clusters should not exceed it: clusters are placed whole
    inside one GPC, so on an H100 fewer than ``SMs / cluster size`` may fit.
    """
    from cuda.core import LaunchConfig

    block, cluster = _dim3(block, "block"), _dim3(cluster, "cluster")
    if args is None:
        core_kernel = kernel
        _raise_smem_limit(core_kernel, int(smem))
    else:
        core_kernel = _compiled(kernel, args, int(smem))[1].kernel
    cfg = LaunchConfig(grid=cluster, block=block, shmem_size=int(smem), cluster=cluster)
    return int(core_kernel.occupancy.max_active_clusters(cfg, stream=_core_stream(stream)))


#: struct codes of the argument slots of :class:`PreparedLaunch` (8-byte slots)
_SLOT = {"u64": "Q", "i64": "q", "u32": "I4x", "i32": "i4x", "f32": "f4x", "f64": "d"}


def param_struct(arg_types) -> struct.Struct:
    """The packing of kernel parameters of ``arg_types`` into consecutive 8-byte slots."""
    bad = [t for t in arg_types if t not in _SLOT]
    if bad:
        raise LaunchError(f"argument types must be among {sorted(_SLOT)}; got {bad}")
    return struct.Struct("<" + "".join(_SLOT[t] for t in arg_types))


class PreparedLaunch:
    """Repeated launches of one ``cuda.core`` Kernel with one shape, at the cost of one
    ``cuLaunchKernelEx`` and packing the argument values.

    ``arg_types`` names each kernel parameter's C type (``"u64"``, ``"i64"``, ``"u32"``,
    ``"i32"``, ``"f32"``, ``"f64"``), in order, as the compiled kernel takes them (a
    Numba array parameter is several: :func:`array_arg_types`, :func:`array_arg_values`).
    The launch's checks (shared memory against the device,
    whole clusters, threads) run once here; a call then only writes the values into a
    fixed parameter buffer and launches on ``stream`` (a raw ``CUstream`` handle)::

        pl = PreparedLaunch(kernel, grid=132, block=384, arg_types=("u64", "i32"), smem=200_000)
        pl(stream_handle, tensor_map_address, n)

    The driver is called through ctypes with a launch configuration and a parameter-pointer
    array built here (``binding`` says ``"ctypes"``), or through ``cuda.bindings`` where the
    driver library cannot be opened that way (``"cuda.bindings"``).
    """

    def __init__(self, kernel, grid, block, arg_types, *, smem: int = 0, cluster=None, pdl: bool = False):
        grid, block = _dim3(grid, "grid"), _dim3(block, "block")
        attrs = kernel.attributes
        smem, cluster = _check_request(grid, block, smem, attrs.shared_size_bytes, attrs.max_threads_per_block,
                                       cluster)
        _raise_smem_limit(kernel, smem)
        self._kernel = kernel
        self.grid, self.block, self.smem, self.cluster, self.pdl = grid, block, smem, cluster, bool(pdl)
        self.driver = cudriver.DriverLaunch(kernel.handle, param_struct(arg_types).pack_into, len(arg_types),
                                            grid, block, smem, cluster, pdl)
        self.binding = self.driver.binding
        self.launch_values = self.driver.launch_values

    def __call__(self, stream: int, *values):
        self.launch_values(stream, values)


def _refuse_tensor_maps(args, what: str) -> None:
    """A :class:`LaunchError` for a :class:`~nbwgmma.tma.TensorMap` passed as an argument itself
    (the kernel takes its address)."""
    from .tma import TensorMap

    for i, a in enumerate(args):
        if isinstance(a, TensorMap):
            raise LaunchError(f"{what}: argument {i} is a TensorMap; pass its address (the uint64 the tma_* "
                              f"intrinsics take): tmap.address")


def _check_call(kernel, args, stream, pdl, what: str) -> None:
    """The :class:`LaunchError` (named ``what``, or "launch of <kernel>") for a ``kernel`` that is
    not a ``@cuda.jit`` kernel, ``args`` its signature cannot bind, a ``stream`` that is none or
    a ``pdl`` that is not a bool: checked alike for the simulator and the GPU, before either."""
    py_func = getattr(kernel, "py_func", None)
    device = getattr(kernel, "targetoptions", {}).get("device") or getattr(kernel, "_device", False)
    if not callable(py_func) or device is True:
        raise LaunchError(f"{what}: kernel must be a @cuda.jit kernel (a Numba dispatcher, not a device function); "
                          f"got {'a device function' if device is True else type(kernel).__name__} {kernel!r}"[:200])
    what = f"launch of {py_func.__qualname__}" if what == "launch" else what
    import inspect

    try:
        inspect.signature(py_func).bind(*args)
    except TypeError as e:
        raise LaunchError(f"{what}: {e}: the kernel takes {py_func.__name__}{inspect.signature(py_func)}; got "
                          f"{len(args)} argument(s)") from None
    bad = stream_handle(stream) is None and not type(stream).__module__.startswith(("numba.", "cuda."))
    if bad or (is_int(stream) and not 0 <= stream < 1 << 64):  # (Numba's, cuda.core's objects as they are)
        raise LaunchError(f"{what}: stream must be 0, a raw handle (an integer in [0, 2^64)), a Numba or PyTorch "
                          f"stream or an object with __cuda_stream__; got {type(stream).__name__} {stream!r}"[:200])
    if not (isinstance(pdl, (bool, np.bool_)) or (is_int(pdl) and pdl in (0, 1))):
        raise LaunchError(f"{what}: pdl must be a bool (or 0 or 1); got {type(pdl).__name__} {pdl!r}"[:200])


def launch(kernel, grid, block, args, *, stream=0, smem: int = 0, cluster=None, pdl: bool = False):
    """Launch ``kernel`` (a ``@cuda.jit`` dispatcher) on ``args``.

    ``smem`` is the dynamic shared memory in bytes (any size up to the device's
    opt-in limit); ``cluster`` the cluster shape (``None`` for no cluster);
    ``stream`` a Numba stream, an object with ``__cuda_stream__`` (CuPy,
    PyTorch, cuda.core) or a raw handle. Raises :class:`LaunchError` before
    launching when the request exceeds the device.

    ``pdl=True`` launches with programmatic dependent launch: the kernel may start while the
    stream's previous kernel still runs (its CTAs take SMs as that kernel's leave, once it
    called ``griddep_launch_dependents`` or ended), which saves a few microseconds per launch
    of back-to-back kernels. Only for a kernel that calls ``griddep_wait()`` before it reads
    or writes any memory another kernel may use (``TmaPipeline.setup()`` does); a kernel
    without it would race with the one before. Taken where the arguments can be packed for
    the short path (arrays and numbers), else the launch is an ordinary one.

    The first launch of a signature (kernel, grid, block, ``smem``, ``cluster`` and the
    kinds of ``args``: array element types, dimensions and layouts, scalar types) compiles
    the kernel and keeps a :class:`PreparedKernel` for it; later ones find it by the
    arguments' Python types, check their kinds as a prepared kernel does, and cost a few
    microseconds of host time (:mod:`nbwgmma.fastlaunch`). Launches of device arrays and
    numbers, the first included, are ordered on ``stream`` only, like a PyTorch operator:
    Numba's synchronization of the stream an array's ``__cuda_array_interface__`` names is
    skipped (so a first launch may be captured into a CUDA graph). Other arguments (host
    arrays, records) take Numba's argument handling, copies and synchronization included.
    """
    if type(args) is not tuple and not isinstance(args, (tuple, list)):
        raise LaunchError(f"launch: args must be a tuple of the kernel's arguments; got {type(args).__name__}")
    try:  # the repeat path: prepared kernels by kernel, launch shape as given and argument types
        quick_key = (id(kernel), grid, block, smem, cluster, pdl, *map(type, args))
        hits = _QUICK.get(quick_key)
    except TypeError:  # an unhashable grid, block or cluster (a list): the path below
        quick_key = hits = None
    if hits is not None:
        handle = stream if type(stream) is int else stream_handle(stream)
        if handle is not None:
            for pk in hits:
                try:
                    values = pk.values(args)
                except Mismatch:  # another element type, dimension count or layout
                    continue
                pk._launch(handle, values)
                return

    from . import sim

    _refuse_tensor_maps(args, "launch()")
    grid = _dim3(grid, "grid")
    block = _dim3(block, "block")
    if not is_int(smem) or smem < 0:
        raise LaunchError(f"launch: smem must be a non-negative integer (bytes); got {smem!r}")
    if is_int(stream) and type(stream) is not int:  # (a NumPy integer: a raw handle)
        stream = int(stream)
    _check_call(kernel, tuple(args), stream, pdl, "launch")
    if sim.enabled():  # Numba's CUDA simulator: the intrinsics run as Python (nbwgmma.sim)
        # The GPU's checks against an H100's limits. The simulator does not compile, so
        # static shared memory (a few mbarriers in nbwgmma's kernels) is known only as the
        # kernel allocates it: sim.run checks it then; the launch bounds are those the kernel
        # was declared with.
        max_threads = (launch_bounds(kernel) or (0,))[0]
        smem, cluster = _check_request(grid, block, smem, 0, max_threads, cluster, kernel)
        sim.run(kernel, grid, block, args, smem=smem, cluster=cluster,
                smem_limit=device_limits()["max_smem_optin"])
        return

    fast = None
    if DEBUG_WAIT_TIMEOUT_S is None:  # a repeated launch of the same signature skips Numba's argument path
        fast = _repeat_launch(kernel, grid, block, args, stream, smem, cluster, quick_key, pdl)
        if fast is True:
            return

    from cuda.core import LaunchConfig
    from cuda.core import launch as core_launch

    handle = stream_handle(stream)
    # a first launch inside a CUDA graph's capture compiles and loads the kernel: with the
    # thread's capture mode relaxed, as PyTorch's "global" mode forbids module loads (nbwgmma.capture)
    with relaxed(handle is not None and is_capturing(handle)):
        kern, cufunc = _compiled(kernel, args, 0)  # the limit is raised once the request is checked
        _check_roles(kernel, kern, block)
        kern.bind()
        smem, cluster = _check_request(grid, block, smem, cufunc.attrs.shared, cufunc.attrs.maxthreads, cluster,
                                       kernel)
        _raise_smem_limit(cufunc, smem)
    cfg = dict(grid=grid, block=block, shmem_size=smem)
    if cluster is not None:
        # cuda.core (0.4 on) counts the grid in clusters where a cluster is given; ``grid`` counts CTAs
        cfg["grid"] = tuple(g // c for g, c in zip(grid, cluster))
        cfg["cluster"] = cluster

    if fast is not None:  # through the prepared kernel it keeps for the signature, as later launches go
        prepared = PreparedKernel._of_compiled(kernel, kern, cufunc, grid, block, args, fast[-1], smem, cluster,
                                               pdl=pdl)
        if prepared is not None and handle is not None:
            try:
                prepared._launch(handle, prepared.values(args))
            except struct.error:  # a scalar that does not fit its parameter: Numba's path says which
                pass
            else:
                LAUNCH_CACHE.put(fast, kernel, prepared)
                _remember(quick_key, prepared)
                return
    core_stream = _core_stream(stream)
    kernelargs, retr = [], []
    for t, v in zip(kern.argument_types, args):
        kern._prepare_args(t, v, core_stream, retr, kernelargs)
    core_launch(core_stream, LaunchConfig(**cfg), cufunc.kernel, *kernelargs)
    for wb in retr:
        wb()
    if DEBUG_WAIT_TIMEOUT_S is not None:
        _sync_debug(core_stream, kernel)


#: Prepared kernels of the signatures launched so far (see :mod:`nbwgmma.fastlaunch`),
#: by (kernel, grid, block, smem, cluster, argument kinds).
LAUNCH_CACHE = LaunchCache()

#: The same prepared kernels by (kernel id, grid, block, smem and cluster as the caller gave
#: them, argument Python types): a short list each, tried in turn, the first whose readers
#: take the arguments launching them.
_QUICK: dict = {}


def _remember(quick_key, prepared):
    if quick_key is None:
        return
    if len(_QUICK) >= 1024:
        _QUICK.clear()
    hits = _QUICK.setdefault(quick_key, [])
    if prepared not in hits:
        if len(hits) >= 8:
            del hits[0]
        hits.append(prepared)


def _repeat_launch(kernel, grid, block, args, stream, smem, cluster, quick_key, pdl):
    """Launch through the cache of prepared kernels by argument kinds and ``pdl``
    (:mod:`nbwgmma.fastlaunch`): True when done (the kernel is then also remembered under
    ``quick_key``); else the kind key to remember after Numba's path has launched, or None
    when this launch cannot be cached (an argument or stream kind it does not take)."""
    handle = stream_handle(stream)
    if handle is None:
        return None
    key, values = LaunchCache.key(kernel, grid, block, int(smem),
                                  None if cluster is None else _dim3(cluster, "cluster"), args, pdl)
    if key is None:
        return None
    hit = LAUNCH_CACHE.get(key)
    if hit is None:
        return key
    hit[1]._launch(handle, values)
    _remember(quick_key, hit[1])
    return True


def _sync_debug(core_stream, kernel):
    """Debug-wait mode: wait for the kernel and name it if it stopped."""
    try:
        core_stream.sync()
    except Exception as e:  # the driver's error type depends on the binding
        name = getattr(getattr(kernel, "py_func", None), "__qualname__", repr(kernel))
        raise KernelStoppedError(
            f"kernel {name} stopped: {e}. In debug-wait mode this is usually an mbarrier wait that "
            f"passed its {DEBUG_WAIT_TIMEOUT_S:g} s deadline; the kernel printed which block, thread and "
            f"barrier above. The CUDA context is unusable after a trap: restart the process."
        ) from e


class PreparedKernel:
    """A ``@cuda.jit`` kernel compiled for the argument kinds of an example call, with its
    grid, block, shared memory and cluster fixed: ``pk(*args, stream=0)`` launches it with
    new arguments of the same kinds for a few microseconds of host time (the way
    :func:`nbwgmma.matmul` launches its GEMM). Build it with :func:`prepare`.

    Arrays may be PyTorch tensors, CuPy arrays, Numba device arrays or any object with
    ``__cuda_array_interface__``; scalars ``int``, ``float`` or NumPy numbers. Each call
    checks, per argument, what fixes the compiled code: an array's element type, number of
    dimensions and layout (C-contiguous, Fortran-contiguous or any, as in the example; a
    PyTorch tensor's device too) and that a scalar is a number that fits its parameter.
    Shapes, strides, pointers and scalar values are free to change. A wrong argument raises
    :class:`LaunchError` naming it, before anything is launched. The call is ordered on
    ``stream`` only, like a PyTorch operator (see :func:`launch`).
    """

    def __init__(self, kernel, grid, block, args, *, smem: int = 0, cluster=None, pdl: bool = False):
        from . import sim

        if sim.enabled():
            raise LaunchError("prepare() needs the GPU: in Numba's CUDA simulator use launch()")
        _check_call(kernel, tuple(args), 0, pdl, "prepare()")
        _refuse_tensor_maps(args, "prepare()")
        grid, block = _dim3(grid, "grid"), _dim3(block, "block")
        kinds = [arg_kind(a) for a in args]
        bad = [i for i, k in enumerate(kinds) if k is None]
        if bad:
            raise LaunchError(f"prepare(): argument {bad[0]} ({type(args[bad[0]]).__name__}) is not a CUDA array or "
                              f"an int/float/NumPy number; launch() takes it")
        kern, cufunc = _compiled(kernel, args, 0)
        _check_roles(kernel, kern, block)
        self._setup(kernel, kern, cufunc, grid, block, args, [k[0] for k in kinds], smem, cluster, pdl, exact=False)

    @classmethod
    def _of_compiled(cls, kernel, kern, cufunc, grid, block, args, kinds, smem, cluster, pdl=False):
        """The prepared kernel :func:`launch` keeps for a signature it launched through Numba
        (``kern``, ``cufunc`` compiled for ``args`` of ``kinds``), or None where its
        argument types cannot be packed."""
        self = cls.__new__(cls)
        ok = self._setup(kernel, kern, cufunc, grid, block, args, kinds, smem, cluster, pdl, exact=True)
        return self if ok else None

    def _setup(self, kernel, kern, cufunc, grid, block, args, kinds, smem, cluster, pdl=False, *, exact):
        slots = slots_of(kern.argument_types)
        if slots is None:
            if exact:
                return False
            raise LaunchError(f"prepare(): the kernel's argument types {kern.argument_types} include one it cannot "
                              f"pack (arrays of numbers and int/float scalars only); launch() takes them")
        self.launcher = PreparedLaunch(cufunc.kernel, grid, block, slots, smem=smem, cluster=cluster, pdl=pdl)
        self.readers = tuple(reader(k, a, i, exact) for i, (k, a) in enumerate(zip(kinds, args)))
        self._slots = slots
        self.nargs = len(args)
        self.kernel = kernel
        self._launch = self.launcher.launch_values
        return True

    def values(self, args) -> list:
        """The parameter values of ``args``; raises :class:`nbwgmma.fastlaunch.Mismatch` for an
        argument of another kind than the example's."""
        values = []
        for r, a in zip(self.readers, args):
            values.extend(r(a))
        return values

    def __call__(self, *args, stream=0):
        if len(args) != self.nargs:
            raise LaunchError(f"prepared kernel takes {self.nargs} arguments; got {len(args)}")
        try:
            values = []
            for r, a in zip(self.readers, args):
                values.extend(r(a))
        except Mismatch as e:
            raise LaunchError(f"prepared kernel: {e}") from None
        handle = stream if type(stream) is int else stream_handle(stream)
        if handle is None:
            raise LaunchError(f"stream must be 0, a raw handle, a PyTorch stream or have __cuda_stream__; got {stream!r}")
        try:
            self._launch(handle, values)
        except struct.error:
            raise LaunchError(f"prepared kernel: {self._unfit(args)}") from None

    def _unfit(self, args) -> str:
        """Which scalar argument does not fit its parameter (after ``struct`` refused one)."""
        pos = 0
        for i, (r, a) in enumerate(zip(self.readers, args)):
            n = len(r(a))
            if n == 1:
                code = self._slots[pos]
                try:
                    param_struct((code,)).pack(a)
                except struct.error as e:
                    return f"argument {i} ({a!r}) does not fit the kernel's {code} parameter: {e}"
            pos += n
        return "an argument does not fit its parameter"


def prepare(kernel, grid, block, args, *, smem: int = 0, cluster=None, pdl: bool = False) -> PreparedKernel:
    """``kernel`` compiled for the kinds of ``args`` and ready to launch on ``grid`` x ``block``
    with ``smem`` bytes of dynamic shared memory and ``cluster`` (and with ``pdl``, programmatic
    dependent launch, as :func:`launch` takes it): see :class:`PreparedKernel`::

        gemm = prepare(my_kernel, grid, 384, (ta.address, tb.address, c, m, n, k), smem=SMEM)
        for step in range(1000):
            gemm(ta.address, tb.address, c, m, n, k)
    """
    return PreparedKernel(kernel, grid, block, args, smem=smem, cluster=cluster, pdl=pdl)
