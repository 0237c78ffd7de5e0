"""nbwgmma kernels in Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), thread by thread.

With the simulator on, every nbwgmma intrinsic is a Python function with the hardware's
semantics, built from the same models the GPU tests check:

* shared memory is one byte image per CTA; ``smem_addr`` / ``dynamic_smem_base`` return
  offsets into it (CTA rank ``r`` of a cluster in bits 24-31, as an H100 shows them), so
  descriptors, ``mapa`` and swizzles mean what they mean on the GPU. It starts poisoned,
  every byte 0xFF (NaN as f32, bf16 or f16; all ones as an integer), as an earlier kernel's
  leftovers would be: a thread's load of bytes nothing wrote reads garbage, not zeros;
* collective instructions are executed by their group together: the wgmma family
  (``fence``, ``mma_async``, ``commit_group``, ``wait_group``) and ``setmaxnreg`` by the 128
  threads of the warpgroup, ``ldmatrix``, ``stmatrix``, ``elect.sync`` and Numba's shuffles
  and votes by the threads of the warp, so no thread runs ahead of its warpgroup. Threads
  of one group reaching different collectives are reported;
* ``wgmma_mma_async`` reads A and B out of the image through swizzle, LBO and SBO
  (:func:`nbwgmma.layout.wgmma_model.wgmma_reference`) once for the warpgroup and
  hands each thread its fragment; ``wgmma_wait_group(n)`` completes all but the ``n``
  newest groups;
* TMA copies go through the tensor map (box, swizzle, out-of-bounds fill, multicast to
  every CTA in the mask) and complete on the mbarrier with their byte count; mbarriers keep
  phases, pending arrivals and transaction counts; named barriers, ``syncthreads`` and
  cluster barriers block the simulated threads. A named barrier counts whole warps, as the
  GPU does: a warp arrives once each of its threads that has not exited has arrived, so lane 0
  of a warp whose other lanes returned arrives for its warp.

The threads of a cluster run one at a time, each until it waits (:mod:`nbwgmma.sim.sched`).
The simulator reports what the hardware leaves undefined (:class:`SimHazard`), whatever
order the threads run in, because it tracks happens-before with vector clocks
(:mod:`nbwgmma.sim.core`) and the last writer and in-flight readers of every shared byte
(:mod:`nbwgmma.sim.shadow`):

* shared memory written (TMA, bulk copy, generic store, ``stmatrix``, fragment stores)
  while a wgmma or TMA store that reads it is not complete, or completed by a wait that is
  not ordered before the write (a stage released before its ``wgmma_wait_group``);
* an accumulator read before the ``wgmma_wait_group`` that covers its wgmma;
* generic stores read by wgmma or a TMA store without ``fence_proxy_async`` by the writer,
  with no barrier ordering the write before the read, or with the fence after the barrier or
  arrival that orders the write (the fence must come between the stores and the release the
  reader acquires). The wgmma instructions order nothing between a warpgroup's threads
  (``.sync`` waits for the warp): stores of the warpgroup's threads that a wgmma reads must be
  ordered before every thread's issue, and a thread's release after ``wgmma_wait_group``
  covers the wgmma's reads and what each thread did before its issue, not the other threads'
  loads after it (scales read for the promotion: each thread that reads a stage after its
  issue releases it);
* a wait for an mbarrier state token two or more phases after the token's phase (the ISA
  defines it for the current phase and the one before: more arrivals than a phase expects);
* named barrier 0 of fewer threads than the block while threads wait at ``syncthreads``, or the
  other way round (one hardware barrier with two counts; of the whole block it is the barrier
  ``syncthreads`` uses, and the two forms meet there);
* ``setmaxnreg_inc`` to fewer registers than the warpgroup owns, ``setmaxnreg_dec`` to more
  (from its last ``setmaxnreg``, or from the launch bounds' count where they bind below 248);
* a second ``cluster_arrive`` of a thread before its ``cluster_wait``;
* shared memory a TMA load or a ``cp_async`` writes, read before the reader observed the
  barrier phase the copy completes on (a ``cp_async``'s bytes land at its thread's
  ``cp_async_mbarrier_arrive_noinc``);
* an mbarrier given more transaction bytes than its phase expects, or more arrivals than
  it has pending;
* a warpgroup's first wgmma with no ``wgmma_fence`` before it;
* a wgmma reading a TMA tile through a descriptor of another swizzle than the tile's
  swizzling map, or through a map whose element type names another number format than the
  kind's (an ``f16`` map read as bf16; maps of integers, ``u16``, ``u8``, make no claim);
* a TMA store through a map whose swizzle differs from the one a swizzled fragment store
  (``acc_stmatrix_swizzled``, ``acc_store_swizzled``, ``acc_store_fp8_swizzled``) wrote the
  block in (a map without swizzle is a plain copy and makes no claim);
* a store or a copy over bytes another thread loaded, with nothing ordering the load first
  (checked against each byte's last reader; ``acc_add_shared``'s reads of an exchange buffer
  that a peer's ``acc_send_cluster`` overwrites too early included);
* a named barrier for more threads than the block has (a hang on the GPU; a hang in a block
  smaller than the kernel's launch bounds says so too);
* an mbarrier used before its ``mbarrier_init``, or with nothing (a ``syncthreads``, a cluster
  barrier) ordering the init before the use;
* two copies completing on one barrier phase that write the same bytes (overlapping
  destinations: which lands last is undefined);
* a TMA load, store, reduce or prefetch given a tensor map of another rank than its own
  (``tma_store_2d`` on a 3-D map: the operation's ``.dim`` and the map must agree);
* shared memory outside what the kernel has: the launch's dynamic shared memory and its
  static arrays (a launch with too little ``smem`` runs on the GPU out of bounds; the dynamic
  base sits 16 bytes past a 1 KiB boundary, so a launch without the slack that
  ``dynamic_smem_base``'s round-up takes, ``dynamic_smem_bytes``, is reported);
* a thread that leaves the kernel with bulk (TMA) stores still reading shared memory, no
  ``bulk_wait_group`` covering them, or with ``cp_async`` copies no arrival tied to a barrier;
* an ``.aligned`` cluster barrier (``cluster_sync()``, ``cluster_arrive()``, ...) that not
  every thread of a warp reaches (lanes returned early: use ``aligned=False``);
* static shared arrays that, with the launch's dynamic shared memory, exceed the 227 KiB a
  block may have (a :class:`SimError`: the GPU refuses the launch);
* a static shared array whose shape is an expression (``cuda.shared.array(2 * STAGES, ...)``,
  ``pipe.barrier_words``), which compiled for the GPU is a typing error at that line: the same
  :class:`~nbwgmma.intrinsics.errors.NbwgmmaTypingError` here (read from the call's source line;
  a call spread over several lines is not checked);
* a wgmma, TMA store or bulk copy reading shared memory that nothing has written since the
  launch (a load's destination, a box or an offset wrong, or a wait missing);
* a copy writing bytes that another copy, not known to this thread to have landed, also
  writes (both in flight: a box past the end of its stage overlapping the next stage's);
* a thread arriving at a named barrier whose previous generation other threads completed,
  with nothing ordering that completion before the arrival (two groups sharing an id: on the
  GPU they can complete each other's generations), in whatever order the threads ran;
* a CTA exiting (its last thread returning) before a peer's access to its shared memory or
  barriers is ordered (a cluster without its closing cluster barrier: ``pipe.teardown()``), a
  peer reaching a CTA that has exited, and a CTA exiting with a copy into its shared memory
  whose completion none of its threads waited for;
* a plain load or store of shared memory that other threads update with ``cuda.atomic``,
  unordered with any of those atomics, and an atomic unordered with another thread's plain
  store or load of its bytes (atomics among themselves are no race: :mod:`nbwgmma.sim.atomics`);
* a ``setmaxnreg_inc`` the CTA's register pool never satisfies (with launch bounds, the pool
  is ``65536 / threads`` rounded down to 8, times the threads: 168 x 384 for 384 threads, so
  128 x 48 + 256 x 232 registers wait forever): it waits, and stops with the counts;
* a generic store over bytes another thread stored to, with nothing ordering that store first
  (which value stays depends on the order the threads run in: two consumers writing one part of
  a tile); bytes stored with the value they already hold are not (threads all storing one flag's
  value: every order leaves the same bytes);
* a parity wait (``mbarrier_wait_parity``, ``try_wait_parity``) passing on phase ``p`` of a
  barrier whose phase ``p - 1`` nothing orders before it complete (no wait of the thread's own,
  no barrier or turn after another thread's, no arrival of its own that completed it, every
  other arrival of that phase ordered before it and no transaction bytes in it): the threads may run so that the barrier is still
  in phase ``p - 1`` there, and the same wait passes at once on ``p - 2`` (a ping-pong consumer
  skipping the other's stages without its turn, a phase not carried from one tile to the next).
  Arrivals ordered before the wait that are enough to complete phase ``p - 1`` in any order
  (phases of arrivals alone, no bytes) order it too: a thread making all but one of a count-1
  barrier's arrivals, another thread the last, unordered, then a wait on the last phase;
* a named barrier left part-way (arrivals, no completion) when its CTA exits (a turn passed to
  a warpgroup that takes none), and a thread's second ``bar.arrive`` before its warp's other
  threads made the first counted as its warp's next arrival, as on the GPU;
* two ``setmaxnreg`` of a warpgroup with nothing ordering every thread's first before the
  second (PTX ISA: the warps synchronize explicitly between them);
* a generic store over bytes a TMA, bulk or ``cp_async`` copy still writes (the storing thread
  has not observed the phase the copy completes on, nor has any thread ordered before it): the
  async write and the store are unordered;
* a ``.shared::cta`` instruction (``ldmatrix``, ``stmatrix``, ``ld_shared_*`` / ``st_shared_*``,
  the fragment stores, ``cp_async``, TMA and bulk stores' sources, the mbarrier family but
  ``mbarrier_arrive_cluster``) given a peer CTA's ``mapa`` address;
* ``ldmatrix`` / ``stmatrix`` row addresses not 16-byte aligned; a bulk copy's addresses or size
  not in 16-byte steps; a TMA box in shared memory not 128-byte aligned (the swizzle's period
  for a swizzled map);
* an mbarrier count (``mbarrier_init``, ``mbarrier_arrive_count``) outside [1, 2^20 - 1], a
  transaction count past 2^20 - 1, and a standalone ``mbarrier_expect_tx`` ordered before none
  of its phase's arrivals (on the GPU the arrivals can complete the phase first);
* a shared address naming no CTA of the cluster (a ``mapa`` rank past the cluster), or past a
  CTA's shared memory (a barrier's value passed for its address); ``mapa`` (so also
  ``mbarrier_arrive_cluster`` and the ``ld/st_shared_cluster_u32`` of a ``mapa`` address) and
  ``acc_send_cluster`` in a launch without clusters, even to the CTA's own rank (on an H200 a
  kernel that sent a fragment to its own CTA that way, ``mapa`` with ``st.async`` and
  cluster-scope arrivals, stopped with an illegal instruction).

Numba's warp functions (``shfl_sync`` ..., ``ballot_sync``, ``match_any_sync``,
``syncwarp``) run over the mask's lanes that exist and have not exited, as CUDA specifies
for non-exited threads; a shuffle reading a lane outside them gets the poison (NaN, every bit
set for an integer: the ISA leaves the value undefined); ``activemask`` gives the warp's
existing lanes. A view of a shared
array (a row, a slice) is an address, not a load: its elements are checked when read or
written.

What it does not model: register writes that Python cannot see (rebinding a fragment
variable while its wgmma is in flight is not flagged),
races on global memory between threads of one CTA (nor between CTAs: see below), a TMA or
bulk store's global bytes read before the ``bulk_wait_group`` that covers it, the memory
ordering of ``.relaxed`` operations (``cluster_arrive_relaxed`` and ``mbarrier_expect_tx`` act
as releases here, so data published through them alone is not flagged),
a wgmma or TMA store reading bytes that atomics updated (checked against plain stores only),
a row or slice of a shared array read whole by a NumPy operation (``out[:] = tile[r, :]``:
its elements read one by one are checked; a view alone is no access), ``ballot_sync`` and
``match_*_sync`` masks as unsigned ints (on the GPU a mask with lane 31 set is a negative
int32; mask arithmetic agrees), ``activemask`` after lanes of the warp returned (they count here; the threads run one at a
time, so which have returned says nothing of which run together on the GPU), mbarriers at more than 1024 shared addresses of one cluster (a
:class:`SimStopped`; initializing one address again, after ``mbarrier_inval``, reuses its
tracking, its phases counted on in the reports), two static shared arrays declared on one source line (one array here: static arrays are
identified by file and line, as in Numba's simulator; declare each on a line of its own),
a load followed by another thread's unordered store or copy where the load was not the last
read of those bytes (each byte keeps its last reader: a stage released by one thread while
another, not the last to read it, still reads is compute-sanitizer's racecheck's to report),
``ldmatrix``, ``stmatrix``, ``elect.sync`` and the shuffles as orderings between a warp's
threads (they join the warp's clocks here: a store of one lane read by another through them
with no ``syncwarp`` between is not flagged), a wgmma's TMA-loaded operands observed by one
thread of the warpgroup only (accepted: the wgmma waits for every warp's issue),
programmatic dependent
launch (``griddep_wait`` and ``griddep_launch_dependents`` do nothing here and grids run one
after another, so a kernel reading its inputs before ``griddep_wait`` in a ``pdl=True`` launch
is not reported), a missing ``wgmma_fence`` after the first (checked before a warpgroup's first wgmma
only: register accesses are invisible here), copies finishing out of order (a TMA
load lands when it is issued; a turn passed too early shows as a parity wait that nothing ordered
after the barrier's previous phase, above), a tensor map whose swizzle differs from the one the shared tile was written with (both give wrong numbers,
not a report), synchronization through memory (a flag stored with release semantics and read with acquire
semantics orders nothing here: an mbarrier initialized and published that way is reported
as unordered; use a barrier), and memory ordering weaker than sequential consistency (fences other than the proxy fence
are no-ops; an mbarrier wait's or arrival's scope, ``cta`` or ``cluster``, changes nothing here, so a
wait at CTA scope for bytes another CTA's ``st.async`` delivered is not flagged). Kernels are launched with :func:`nbwgmma.launch.launch`, which runs the CTAs
of one cluster at a time, clusters in increasing order (``NBWGMMA_SIM_ORDER=reverse``: decreasing;
the GPU promises neither, so a kernel whose CTAs meet through global memory is worth running
both ways; stores to global memory that race between CTAs, such as a partial tile written
over another's, show in neither order). A hazard inside one of nbwgmma's own blocks (a kit function, an intrinsic) names the
block's line and the kernel line that called it. A kernel that would hang on the GPU raises
:class:`SimStopped` the moment every thread of the cluster waits (or has exited), naming the
thread that waited longest, its kernel line, the barrier (with the name given by
``mbarrier_name``), its phase, pending arrivals and pending transaction bytes, then every other
place where threads wait; a ``setmaxnreg_inc`` that the register pool never satisfies leads
the report wherever it is (the other waits follow from it).
"""

from __future__ import annotations

import ast
import inspect
import itertools
import linecache
import os
import sys

import numpy as np

from ..bounds import launch_bounds
from . import arith, barriers, collective, sync, wgmma  # noqa: F401  importing them registers their implementations
from .copy import register_tensor_map
from .core import Cluster, SimError, SimHazard, SimStopped, SimThread, enabled, kernel_line
from .cta import CTA, SharedArray
from .declare import IMPLS, declare
from .device import device_modules_held, fast_device_function
from .fragment import FRAGMENT_IMPLS
from .sched import current
from .site import where
from .warp import BIT_FUNCTIONS, WARP_FUNCTIONS

__all__ = ["enabled", "SimError", "SimStopped", "SimHazard", "run", "register_tensor_map", "declare", "IMPLS",
           "FRAGMENT_IMPLS", "install", "install_jit_shim"]


_SHAPES_SEEN: dict = {}  # (file, line) -> None, or the shape expression a shared array was given there


def _constant_shape(node, frame) -> bool:
    """Whether the expression ``node`` is a shape Numba types as a compile-time constant: an
    integer literal, a name, a module's attribute, or a tuple of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, int)
    if isinstance(node, ast.Name):
        return True
    if isinstance(node, ast.Tuple):
        return all(_constant_shape(e, frame) for e in node.elts)
    if isinstance(node, ast.Attribute):  # a module's constant (mod.N) is a global; an object's is not
        base = node.value
        while isinstance(base, ast.Attribute):
            base = base.value
        obj = frame.f_locals.get(base.id, frame.f_globals.get(base.id)) if isinstance(base, ast.Name) else None
        return inspect.ismodule(obj)
    return False


def _run_time_shape(frame) -> str | None:
    """Compiled, a shared array's shape must be a compile-time constant (Numba's typing, which
    nbwgmma reports at the line): the shape expression of the ``cuda.shared.array`` call on the
    line ``frame`` runs, where it is not one (``2 * STAGES``, ``pipe.barrier_words``), else None
    (also for a statement this line alone does not hold)."""
    key = (frame.f_code.co_filename, frame.f_lineno)
    if key not in _SHAPES_SEEN:
        got = None
        try:
            tree = ast.parse(linecache.getline(*key).strip())
        except SyntaxError:
            tree = None
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "array" \
                    and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "shared":
                shape = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "shape"), None)
                if shape is not None and not _constant_shape(shape, frame):
                    got = ast.unparse(shape)
        _SHAPES_SEEN[key] = got
    return _SHAPES_SEEN[key]


class _Shared:
    def array(self, shape, dtype, alignment=None):
        from numba.cuda import types as nbtypes
        from numba.cuda.np import numpy_support

        if isinstance(dtype, nbtypes.Type):
            dtype = numpy_support.as_dtype(dtype)
        f = sys._getframe(1)
        got = _run_time_shape(f)
        if got is not None:  # (the GPU's compilation refuses it: so does the simulator, in its words)
            from ..intrinsics.errors import NbwgmmaTypingError, array_shape_message

            raise NbwgmmaTypingError(f"{f.f_code.co_filename}:{f.f_lineno}: "
                                     f"{array_shape_message('cuda.shared.array', got)}", highlighting=False)
        return current().cta.array(shape, dtype, (f.f_code.co_filename, f.f_lineno))


def _yielding_atomics():
    """Numba's simulated ``cuda.atomic``, each operation followed by a pause of the thread: the
    threads of a cluster run one at a time (:mod:`nbwgmma.sim.sched`), so one spinning on an
    atomic (a spin lock's ``cas``) lets the one it waits for run. On shared memory an atomic is
    checked as one (:mod:`nbwgmma.sim.atomics`), not as a plain load and store that race with
    the other threads' atomics."""
    from numba.cuda.simulator.kernelapi import FakeCUDAAtomic

    def yielding(name, f):
        def op(self, array, *args, **kwargs):
            th = current()
            if isinstance(th, SimThread) and isinstance(array, SharedArray):  # checked as one access, not a load
                index = (0,) * array.ndim if name == "compare_and_swap" else args[0]  # and a store
                array = array.atomic_view(index, f"cuda.atomic.{name}")
            if array.dtype.kind in "iu":
                # Python int operands converted to the array's type, as Numba does on the GPU
                # (atomic.add(u32, i, -1) decrements; NumPy 2 refuses -1 as a uint32)
                first = 0 if name == "compare_and_swap" else 1  # (the others' first argument: the index)
                args = args[:first] + tuple(np.asarray(v).astype(array.dtype)[()] if isinstance(v, int) else v
                                            for v in args[first:])
            with np.errstate(over="ignore"):
                old = f(self, array, *args, **kwargs)
            if isinstance(th, SimThread):
                th.cl.sched.pause(th)
            return old
        return op

    ops = {name: yielding(name, f) for name, f in vars(FakeCUDAAtomic).items()
           if callable(f) and not name.startswith("_")}
    return type("SimAtomic", (FakeCUDAAtomic,), ops)()


def _module_class():
    from numba.cuda.simulator.kernelapi import FakeCUDAModule

    class SimCUDAModule(FakeCUDAModule):
        """Numba's in-kernel ``cuda`` module with per-CTA shared memory, warp collectives,
        yielding atomics, and the thread's indices and barriers read off the running
        simulated thread (Numba's read them off the operating-system thread)."""

        _nbw_shared = _Shared()
        _nbw_atomic = _yielding_atomics()

        @property
        def shared(self):
            return self._nbw_shared

        @property
        def atomic(self):
            return self._nbw_atomic

        @property
        def threadIdx(self):
            return current().threadIdx

        @property
        def blockIdx(self):
            return current().blockIdx

        @property
        def laneid(self):
            return current().thread_id % 32

        def syncthreads(self):
            current().syncthreads()

        def syncthreads_count(self, val):
            return collective.syncthreads_count(val)

        def syncthreads_and(self, val):
            return collective.syncthreads_and(val)

        def syncthreads_or(self, val):
            return collective.syncthreads_or(val)

    for name, f in {**WARP_FUNCTIONS, **BIT_FUNCTIONS}.items():
        setattr(SimCUDAModule, name, staticmethod(f))
    return SimCUDAModule


def _kernel_arg(a):
    from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray, FakeWithinKernelCUDAArray

    if isinstance(a, FakeCUDAArray):
        return FakeWithinKernelCUDAArray(a)
    if isinstance(a, np.ndarray) and a.ndim > 0:
        return FakeWithinKernelCUDAArray(FakeCUDAArray(a))
    return a


def _launch_registers(bounds):
    """The most registers per thread launch bounds ``(threads, blocks)`` allow (168 for 384
    threads), or None without bounds: what a ``setmaxnreg`` increase past it starts from (sim.barriers)."""
    if bounds is None:
        return None
    threads, blocks = bounds
    return min(256, 65536 // (threads * max(1, blocks))) // 8 * 8  # 256: never below the GPU's


def run(kernel, grid, block, args, smem=0, cluster=None, smem_limit=None):
    """Run a ``@cuda.jit`` kernel (the simulator's ``FakeCUDAKernel``) on ``args``: one
    cluster at a time (in the order ``NBWGMMA_SIM_ORDER`` says, see the module docstring),
    the threads of its CTAs one at a time (:mod:`nbwgmma.sim.sched`). Raises the first exception of
    any simulated thread (:class:`SimHazard` for a hazard, :class:`SimStopped` for a wait
    that can never finish). ``smem_limit``: the shared bytes a block may have, dynamic and
    static together (:class:`SimError` when the static arrays push a launch past it).
    ``cluster`` None: a launch without clusters (each CTA alone; the ``.shared::cluster`` forms
    are hazards there)."""
    from numba.cuda.simulator.kernel import _push_kernel_context
    from numba.cuda.simulator.kernelapi import swapped_cuda_module

    fn = kernel.py_func
    mod = _module_class()(grid, block, 0)
    kargs = [_kernel_arg(a) for a in args]
    nthreads = int(np.prod(block))
    bounds = launch_bounds(kernel)
    regs = _launch_registers(bounds)
    clustered = cluster is not None
    cluster = tuple(cluster) if clustered else (1, 1, 1)
    ncl = [g // c for g, c in zip(grid, cluster)]
    order = [tuple(reversed(c)) for c in itertools.product(*(range(n) for n in reversed(ncl)))]
    how = os.environ.get("NBWGMMA_SIM_ORDER", "forward")
    if how not in ("forward", "reverse"):
        raise SimError(f"NBWGMMA_SIM_ORDER must be 'forward' or 'reverse'; got {how!r}")
    with _push_kernel_context(mod), swapped_cuda_module(fn, mod), device_modules_held(mod):
        for cidx in (reversed(order) if how == "reverse" else order):
            cl = Cluster(int(np.prod(cluster)), nthreads, bounds[0] if bounds else None, fn.__qualname__)
            threads = []
            ctas = []
            for local in itertools.product(*(range(c) for c in reversed(cluster))):
                local = tuple(reversed(local))
                rank = local[0] + cluster[0] * (local[1] + cluster[1] * local[2])
                ctas.append((rank, local))
            for rank, local in sorted(ctas):
                cta = CTA(cl, rank, nthreads, int(smem))
                cta.reg_start = regs
                cta.smem_limit = smem_limit
                cta.cluster_idx, cta.local = cidx, local
                cl.ctas.append(cta)
                bidx = tuple(c * s + l for c, s, l in zip(cidx, cluster, local))
                for t in itertools.product(*(range(b) for b in reversed(block))):
                    threads.append(SimThread(fn, kargs, cta, bidx, tuple(reversed(t)), block))
            cl.dims = tuple(cluster)
            cl.grid = tuple(grid)
            cl.clustered = clustered
            cl.sched.run(threads)
            if cl.error is not None:
                raise cl.error


def install():
    """Make nbwgmma run in Numba's CUDA simulator: register the simulator's implementations of
    the intrinsics (:mod:`nbwgmma.backend`) and its ``cuda.jit`` shim. nbwgmma's package runs
    this first thing when the simulator is on, before anything imports the intrinsics."""
    from .. import backend

    backend.register(declare, FRAGMENT_IMPLS, kernel_line)
    install_jit_shim()


def install_jit_shim():
    """The simulator's ``cuda.jit`` lacks ``launch_bounds``: accept it, so kernel sources run
    unchanged, and keep it on the kernel as ``launch_bounds`` so that
    :func:`nbwgmma.launch.launch` refuses a block larger than the bound, as the GPU does.
    Device functions become :class:`~nbwgmma.sim.device.SimDeviceFunction` (plain calls
    during a launch)."""
    from numba import cuda
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    jit = cuda.jit
    if getattr(jit, "_nbw_shim", False):
        return

    def keep(kernel, bounds):
        if bounds is not None and not isinstance(kernel, type) and hasattr(kernel, "py_func"):
            kernel.launch_bounds = bounds
        return fast_device_function(kernel)

    def shim(*args, launch_bounds=None, **kwargs):
        out = jit(*args, **kwargs)
        if isinstance(out, FakeCUDAKernel):  # cuda.jit(fn)
            return keep(out, launch_bounds)
        return lambda fn: keep(out(fn), launch_bounds)  # a decorator: cuda.jit(device=True), ...

    shim._nbw_shim = True
    cuda.jit = shim
