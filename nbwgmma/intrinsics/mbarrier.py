"""mbarrier: shared-memory barriers with phases and transaction counts.

PTX ISA, "Parallel Synchronization and Communication Instructions: mbarrier"
(docs anchor ``#parallel-synchronization-and-communication-instructions-mbarrier``).

Every barrier argument is the 32-bit ``.shared::cta`` address of an 8-byte
aligned 64-bit word (see :func:`nbwgmma.intrinsics.address.smem_addr`).

Typical phase-parity protocol (one producer, one consumer)::

    if tid == 0:
        mbarrier_init(full, 1)
        fence_mbarrier_init()
    cuda.syncthreads()
    # producer:  mbarrier_arrive_expect_tx(full, nbytes); <TMA copy completing on full>
    # consumer:  mbarrier_wait_parity(full, phase); phase ^= 1
"""

from __future__ import annotations

import os

from llvmlite import ir
from numba import types
from numba.core import cgutils

from .. import backend
from ._asm import Imm, Out, Reg, ptx_intrinsic, ranged, u32, u64
from .errors import checked_intrinsic

__all__ = [
    "mbarrier_init",
    "mbarrier_arrive",
    "mbarrier_arrive_count",
    "mbarrier_arrive_expect_tx",
    "mbarrier_expect_tx",
    "mbarrier_try_wait",
    "mbarrier_try_wait_parity",
    "mbarrier_test_wait",
    "mbarrier_test_wait_parity",
    "mbarrier_wait",
    "mbarrier_wait_parity",
    "mbarrier_wait_timeout",
    "mbarrier_wait_parity_timeout",
    "DEBUG_WAIT_TIMEOUT_S",
    "mbarrier_inval",
    "mbarrier_arrive_cluster",
    "fence_mbarrier_init",
    "mbarrier_name",
]

_BAR = Reg("bar", u32)
# The counts of an mbarrier's phase live in 20 bits (PTX ISA: "Contents of the mbarrier object"):
# 1 to 2^20 - 1 expected arrivals, 0 to 2^20 - 1 transaction bytes at a time
_COUNT = ranged("count", u32, 1, 2**20 - 1, source="Contents of the mbarrier object, arrival counts")
_TX = ranged("tx", u32, 0, 2**20 - 1, source="Contents of the mbarrier object, tx-count")
_SCOPE = Imm("scope", choices=("cta", "cluster"), default="cta")

mbarrier_init = ptx_intrinsic(
    "mbarrier_init",
    "mbarrier.init.shared::cta.b64 [$bar], $count;",
    params=[_BAR, _COUNT],
    doc="``mbarrier.init.shared::cta.b64`` (PTX ISA: mbarrier.init). Set the expected "
    "arrival count of the barrier at ``bar`` to ``count`` and its phase to 0.",
)

mbarrier_arrive = ptx_intrinsic(
    "mbarrier_arrive",
    "mbarrier.arrive.release.$scope.shared::cta.b64 $state, [$bar];",
    params=[_BAR, _SCOPE],
    outs=[Out("state", u64)],
    doc="``mbarrier.arrive.release.{cta,cluster}.shared::cta.b64`` (PTX ISA: mbarrier.arrive). "
    "Arrive once; return the opaque phase state for :func:`mbarrier_try_wait`.",
)

mbarrier_arrive_count = ptx_intrinsic(
    "mbarrier_arrive_count",
    "mbarrier.arrive.release.$scope.shared::cta.b64 $state, [$bar], $count;",
    params=[_BAR, _COUNT, _SCOPE],
    outs=[Out("state", u64)],
    doc="``mbarrier.arrive.release.{scope}.shared::cta.b64 state, [bar], count`` (PTX ISA: "
    "mbarrier.arrive). Arrive ``count`` times at once; return the phase state.",
)

mbarrier_arrive_expect_tx = ptx_intrinsic(
    "mbarrier_arrive_expect_tx",
    "mbarrier.arrive.expect_tx.release.$scope.shared::cta.b64 $state, [$bar], $tx;",
    params=[_BAR, _TX, _SCOPE],
    outs=[Out("state", u64)],
    doc="``mbarrier.arrive.expect_tx.release.{scope}.shared::cta.b64`` (PTX ISA: "
    "mbarrier.arrive). Raise the pending transaction count by ``tx`` bytes, then arrive.",
)

mbarrier_expect_tx = ptx_intrinsic(
    "mbarrier_expect_tx",
    "mbarrier.expect_tx.relaxed.$scope.shared::cta.b64 [$bar], $tx;",
    params=[_BAR, _TX, _SCOPE],
    doc="``mbarrier.expect_tx.relaxed.{scope}.shared::cta.b64`` (PTX ISA: mbarrier.expect_tx). "
    "Raise the pending transaction count by ``tx`` bytes without arriving.",
)

mbarrier_try_wait = ptx_intrinsic(
    "mbarrier_try_wait",
    "mbarrier.try_wait.acquire.$scope.shared::cta.b64 $done, [$bar], $state;",
    params=[_BAR, Reg("state", u64), _SCOPE],
    outs=[Out("done", pred=True)],
    doc="``mbarrier.try_wait.acquire.{scope}.shared::cta.b64`` (PTX ISA: "
    "mbarrier.test_wait/mbarrier.try_wait). True once the phase recorded in ``state`` has "
    "completed; may suspend the thread for a system-dependent time first.",
)

mbarrier_try_wait_parity = ptx_intrinsic(
    "mbarrier_try_wait_parity",
    "mbarrier.try_wait.parity.acquire.$scope.shared::cta.b64 $done, [$bar], $parity;",
    params=[_BAR, Reg("parity", u32), _SCOPE],
    outs=[Out("done", pred=True)],
    doc="``mbarrier.try_wait.parity.acquire.{scope}.shared::cta.b64`` (PTX ISA: "
    "mbarrier.test_wait/mbarrier.try_wait). True once the phase with parity ``parity`` "
    "(0 even, 1 odd) has completed.",
)

mbarrier_test_wait = ptx_intrinsic(
    "mbarrier_test_wait",
    "mbarrier.test_wait.acquire.$scope.shared::cta.b64 $done, [$bar], $state;",
    params=[_BAR, Reg("state", u64), _SCOPE],
    outs=[Out("done", pred=True)],
    doc="``mbarrier.test_wait.acquire.{scope}.shared::cta.b64`` (PTX ISA: "
    "mbarrier.test_wait/mbarrier.try_wait). Non-blocking test of the phase in ``state``.",
)

mbarrier_test_wait_parity = ptx_intrinsic(
    "mbarrier_test_wait_parity",
    "mbarrier.test_wait.parity.acquire.$scope.shared::cta.b64 $done, [$bar], $parity;",
    params=[_BAR, Reg("parity", u32), _SCOPE],
    outs=[Out("done", pred=True)],
    doc="``mbarrier.test_wait.parity.acquire.{scope}.shared::cta.b64`` (PTX ISA: "
    "mbarrier.test_wait/mbarrier.try_wait). Non-blocking test of the phase parity.",
)

# The wait loops live inside one asm block: the branch back stays in PTX, so no
# Python-level loop and no predicate round trip through a register. Labels are
# local to the braces, so the block may be inlined many times.
_WAIT_LOOP = """{
.reg .pred %nbw_p;
NBW_WAIT:
mbarrier.try_wait$kind.acquire.$scope.shared::cta.b64 %nbw_p, [$bar], $arg;
@!%nbw_p bra NBW_WAIT;
}"""

_plain_wait_parity = ptx_intrinsic(
    "mbarrier_wait_parity",
    _WAIT_LOOP.replace("$kind", ".parity").replace("$arg", "$parity"),
    params=[_BAR, Reg("parity", u32), _SCOPE],
    doc="Loop on ``mbarrier.try_wait.parity.acquire.{scope}.shared::cta.b64`` (PTX ISA: "
    "mbarrier.test_wait/mbarrier.try_wait) until the phase with parity ``parity`` completes.",
)

_plain_wait = ptx_intrinsic(
    "mbarrier_wait",
    _WAIT_LOOP.replace("$kind", "").replace("$arg", "$state"),
    params=[_BAR, Reg("state", u64), _SCOPE],
    doc="Loop on ``mbarrier.try_wait.acquire.{scope}.shared::cta.b64`` (PTX ISA: "
    "mbarrier.test_wait/mbarrier.try_wait) until the phase recorded in ``state`` completes.",
)

# The same loop with a deadline read off %globaltimer (nanoseconds, PTX ISA "Special
# Registers: %globaltimer"): falls through with done = false once ``timeout_ns`` passed.
_TIMED_LOOP = """{
.reg .pred %nbw_p;
.reg .u64 %nbw_t0, %nbw_t;
mov.u64 %nbw_t0, %globaltimer;
NBW_WAIT:
mbarrier.try_wait$kind.acquire.$scope.shared::cta.b64 %nbw_p, [$bar], $arg;
@%nbw_p bra NBW_DONE;
mov.u64 %nbw_t, %globaltimer;
sub.u64 %nbw_t, %nbw_t, %nbw_t0;
setp.lt.u64 %nbw_p, %nbw_t, $timeout_ns;
@%nbw_p bra NBW_WAIT;
NBW_DONE:
mov.pred $done, %nbw_p;
}"""

mbarrier_wait_parity_timeout = ptx_intrinsic(
    "mbarrier_wait_parity_timeout",
    _TIMED_LOOP.replace("$kind", ".parity").replace("$arg", "$parity"),
    params=[_BAR, Reg("parity", u32), Reg("timeout_ns", u64), _SCOPE],
    outs=[Out("done", pred=True)],
    doc="``mbarrier.try_wait.parity`` loop with a deadline (PTX ISA: mbarrier.test_wait/"
    "mbarrier.try_wait, %globaltimer): True once the phase with parity ``parity`` completed, "
    "False if ``timeout_ns`` nanoseconds passed first.",
)

mbarrier_wait_timeout = ptx_intrinsic(
    "mbarrier_wait_timeout",
    _TIMED_LOOP.replace("$kind", "").replace("$arg", "$state"),
    params=[_BAR, Reg("state", u64), Reg("timeout_ns", u64), _SCOPE],
    outs=[Out("done", pred=True)],
    doc="``mbarrier.try_wait`` loop with a deadline (PTX ISA: mbarrier.test_wait/"
    "mbarrier.try_wait, %globaltimer): True once the phase in ``state`` completed, False if "
    "``timeout_ns`` nanoseconds passed first.",
)


def debug_wait_timeout_s() -> float | None:
    """The debug-mode deadline of every mbarrier wait loop, or None when debug mode is off.

    ``NBWGMMA_DEBUG_WAIT=1`` (read when nbwgmma is imported) turns it on;
    ``NBWGMMA_DEBUG_WAIT_S`` sets the deadline in seconds (default 2).
    """
    if os.environ.get("NBWGMMA_DEBUG_WAIT", "0").strip().lower() in ("", "0", "false", "no", "off"):
        return None
    return float(os.environ.get("NBWGMMA_DEBUG_WAIT_S", "2"))


def _debug_wait(name, timed, argname, argty, argfmt):
    """``name`` in debug mode: the timed loop, and on a timeout a message and ``trap``."""
    timeout_ns = int(DEBUG_WAIT_TIMEOUT_S * 1e9)

    @checked_intrinsic(prefer_literal=True, name=name)
    def fn(typingctx, bar, arg, scope=types.Omitted("cta")):
        sig_t, cg_t = timed._defn(typingctx, bar, arg, types.uint64, scope)
        ret_sig = types.void(bar, arg, scope)

        def codegen(context, builder, sig, args):
            from numba.cuda import nvvmutils

            tmo = context.get_constant(types.uint64, timeout_ns)
            done = cg_t(context, builder, sig_t, [args[0], args[1], tmo, args[2]])
            with builder.if_then(builder.not_(done), likely=False):
                i32 = ir.IntType(32)
                vals = [nvvmutils.call_sreg(builder, r) for r in ("ctaid.x", "ctaid.y", "ctaid.z", "tid.x")]
                vals.append(builder.udiv(vals[3], i32(32)))
                vals.append(context.cast(builder, args[0], sig.args[0], types.uint32))
                vals.append(context.cast(builder, args[1], sig.args[1], argty))
                fmt = context.insert_string_const_addrspace(
                    builder,
                    f"nbwgmma: mbarrier wait timed out after {DEBUG_WAIT_TIMEOUT_S:g} s: block (%d, %d, %d) "
                    f"thread %d (warp %d), barrier at shared address 0x%x, waiting for {argname} {argfmt}\n")
                arr = cgutils.alloca_once_value(builder, cgutils.make_anonymous_struct(builder, vals))
                vprintf = nvvmutils.declare_vprint(builder.module)
                builder.call(vprintf, (fmt, builder.bitcast(arr, ir.PointerType(ir.IntType(8)))))
                builder.call(ir.InlineAsm(ir.FunctionType(ir.VoidType(), []), "trap;", "", side_effect=True), [])
            return context.get_dummy_value()

        return ret_sig, codegen

    fn.__doc__ = (f"Debug-mode ``{name}``: gives up after {DEBUG_WAIT_TIMEOUT_S:g} s, prints the block, "
                  "thread, warp, barrier address and awaited phase, and traps.")
    return fn


DEBUG_WAIT_TIMEOUT_S = debug_wait_timeout_s()

if DEBUG_WAIT_TIMEOUT_S is None or backend.active():  # simulated waits always have a deadline
    mbarrier_wait_parity = _plain_wait_parity
    mbarrier_wait = _plain_wait
else:
    mbarrier_wait_parity = _debug_wait("mbarrier_wait_parity", mbarrier_wait_parity_timeout, "parity",
                                       types.uint32, "%u")
    mbarrier_wait = _debug_wait("mbarrier_wait", mbarrier_wait_timeout, "state", types.uint64, "0x%llx")

mbarrier_inval = ptx_intrinsic(
    "mbarrier_inval",
    "mbarrier.inval.shared::cta.b64 [$bar];",
    params=[_BAR],
    doc="``mbarrier.inval.shared::cta.b64`` (PTX ISA: mbarrier.inval). Invalidate the "
    "barrier so its memory may be reused.",
)

mbarrier_arrive_cluster = ptx_intrinsic(
    "mbarrier_arrive_cluster",
    """{
.reg .b32 %nbw_remote;
mapa.shared::cluster.u32 %nbw_remote, $bar, $cta;
mbarrier.arrive.release.$scope.shared::cluster.b64 _, [%nbw_remote];
}""",
    params=[_BAR, Reg("cta", u32), _SCOPE],
    doc="``mbarrier.arrive.release.{scope}.shared::cluster.b64`` (PTX ISA: mbarrier.arrive) "
    "on the barrier at the same offset in the shared memory of CTA ``cta`` of the cluster "
    "(address mapped with ``mapa``). ``scope`` 'cta' (PTX's default) suits releasing a "
    "buffer this thread has finished reading (e.g. after ``wgmma_wait_group``); 'cluster' "
    "also makes this thread's earlier writes visible cluster-wide first, which on an H100 "
    "costs a GPU-wide ``MEMBAR`` per arrive (measured: it halved the clustered GEMM's speed).",
)

fence_mbarrier_init = ptx_intrinsic(
    "fence_mbarrier_init",
    "fence.mbarrier_init.release.cluster;",
    doc="``fence.mbarrier_init.release.cluster`` (PTX ISA: membar/fence). Make prior "
    "``mbarrier.init`` visible to other threads of the cluster and to the async proxy.",
)

mbarrier_name = ptx_intrinsic(
    "mbarrier_name",
    "// nbwgmma: mbarrier $name",
    params=[_BAR, Imm("name", rule=lambda v: isinstance(v, str) and v.isprintable() and "\n" not in v,
                      expect="a string literal"), Reg("index", types.int32, default=-1)],
    side_effect=False,
    memory=False,
    doc="``mbarrier_name(bar, name, index=-1)``: give the barrier at ``bar`` a name for the "
    "simulator's reports (``name`` or ``name[index]``, e.g. ``mbarrier_name(full, 'full', s)``). "
    "Emits no instruction on the GPU: an asm comment without effects, which LLVM removes.",
)
