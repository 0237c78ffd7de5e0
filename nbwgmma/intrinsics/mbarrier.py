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

from ._asm import Imm, Out, Reg, ptx_intrinsic, u32, u64

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
    "mbarrier_inval",
    "mbarrier_arrive_cluster",
    "fence_mbarrier_init",
]

_BAR = Reg("bar", u32)
_SCOPE = Imm("scope", choices=("cta", "cluster"), default="cta")

mbarrier_init = ptx_intrinsic(
    "mbarrier_init",
    "mbarrier.init.shared::cta.b64 [$bar], $count;",
    params=[_BAR, Reg("count", u32)],
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
    params=[_BAR, Reg("count", u32), _SCOPE],
    outs=[Out("state", u64)],
    doc="``mbarrier.arrive.release.{scope}.shared::cta.b64 state, [bar], count`` (PTX ISA: "
    "mbarrier.arrive). Arrive ``count`` times at once; return the phase state.",
)

mbarrier_arrive_expect_tx = ptx_intrinsic(
    "mbarrier_arrive_expect_tx",
    "mbarrier.arrive.expect_tx.release.$scope.shared::cta.b64 $state, [$bar], $tx;",
    params=[_BAR, Reg("tx", u32), _SCOPE],
    outs=[Out("state", u64)],
    doc="``mbarrier.arrive.expect_tx.release.{scope}.shared::cta.b64`` (PTX ISA: "
    "mbarrier.arrive). Raise the pending transaction count by ``tx`` bytes, then arrive.",
)

mbarrier_expect_tx = ptx_intrinsic(
    "mbarrier_expect_tx",
    "mbarrier.expect_tx.relaxed.$scope.shared::cta.b64 [$bar], $tx;",
    params=[_BAR, Reg("tx", u32), _SCOPE],
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

mbarrier_wait_parity = ptx_intrinsic(
    "mbarrier_wait_parity",
    _WAIT_LOOP.replace("$kind", ".parity").replace("$arg", "$parity"),
    params=[_BAR, Reg("parity", u32), _SCOPE],
    doc="Loop on ``mbarrier.try_wait.parity.acquire.{scope}.shared::cta.b64`` (PTX ISA: "
    "mbarrier.test_wait/mbarrier.try_wait) until the phase with parity ``parity`` completes.",
)

mbarrier_wait = ptx_intrinsic(
    "mbarrier_wait",
    _WAIT_LOOP.replace("$kind", "").replace("$arg", "$state"),
    params=[_BAR, Reg("state", u64), _SCOPE],
    doc="Loop on ``mbarrier.try_wait.acquire.{scope}.shared::cta.b64`` (PTX ISA: "
    "mbarrier.test_wait/mbarrier.try_wait) until the phase recorded in ``state`` completes.",
)

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
mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%nbw_remote];
}""",
    params=[_BAR, Reg("cta", u32)],
    doc="``mbarrier.arrive.release.cluster.shared::cluster.b64`` (PTX ISA: mbarrier.arrive) "
    "on the barrier at the same offset in the shared memory of CTA ``cta`` of the cluster "
    "(address mapped with ``mapa``).",
)

fence_mbarrier_init = ptx_intrinsic(
    "fence_mbarrier_init",
    "fence.mbarrier_init.release.cluster;",
    doc="``fence.mbarrier_init.release.cluster`` (PTX ISA: membar/fence). Make prior "
    "``mbarrier.init`` visible to other threads of the cluster and to the async proxy.",
)
