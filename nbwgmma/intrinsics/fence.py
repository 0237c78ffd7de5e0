"""Memory and proxy fences.

PTX ISA, "Parallel Synchronization and Communication Instructions: membar/fence"
(docs anchor ``#parallel-synchronization-and-communication-instructions-membar``).

Shared memory written by ordinary stores (``st.shared``, ``stmatrix``) that the
async proxy (``wgmma``, TMA) reads next needs :func:`fence_proxy_async_shared`
in each writing thread before the barrier that orders it.
"""

from __future__ import annotations

from ._asm import Reg, ptx_intrinsic, u64

__all__ = [
    "fence_proxy_async",
    "fence_proxy_async_shared",
    "fence_proxy_async_global",
    "fence_proxy_tensormap_acquire",
    "fence_proxy_tensormap_release",
    "fence_acq_rel_gpu",
    "fence_acq_rel_cluster",
    "fence_acq_rel_cta",
]

fence_proxy_async = ptx_intrinsic(
    "fence_proxy_async",
    "fence.proxy.async;",
    doc="``fence.proxy.async`` (PTX ISA: membar/fence). Order generic-proxy accesses "
    "against async-proxy accesses in all state spaces.",
)

fence_proxy_async_shared = ptx_intrinsic(
    "fence_proxy_async_shared",
    "fence.proxy.async.shared::cta;",
    doc="``fence.proxy.async.shared::cta`` (PTX ISA: membar/fence). Make this thread's "
    "shared-memory writes visible to wgmma and TMA reads (the async proxy).",
)

fence_proxy_async_global = ptx_intrinsic(
    "fence_proxy_async_global",
    "fence.proxy.async.global;",
    doc="``fence.proxy.async.global`` (PTX ISA: membar/fence). Order global-memory "
    "accesses between the generic and async proxies.",
)

fence_proxy_tensormap_acquire = ptx_intrinsic(
    "fence_proxy_tensormap_acquire",
    "fence.proxy.tensormap::generic.acquire.gpu [$tmap], 128;",
    params=[Reg("tmap", u64)],
    doc="``fence.proxy.tensormap::generic.acquire.gpu [tmap], 128`` (PTX ISA: membar/fence). "
    "Acquire a 128-byte tensor map at generic address ``tmap`` written through the "
    "generic proxy before the tensor-map proxy (TMA) uses it.",
)

fence_proxy_tensormap_release = ptx_intrinsic(
    "fence_proxy_tensormap_release",
    "fence.proxy.tensormap::generic.release.gpu;",
    doc="``fence.proxy.tensormap::generic.release.gpu`` (PTX ISA: membar/fence). Release "
    "tensor-map writes made through the generic proxy.",
)

fence_acq_rel_gpu = ptx_intrinsic(
    "fence_acq_rel_gpu",
    "fence.acq_rel.gpu;",
    doc="``fence.acq_rel.gpu`` (PTX ISA: membar/fence). Acquire-release fence at GPU scope: "
    "with a relaxed atomic after it, a release of what this thread observed (a barrier "
    "before it: its CTA's writes) to other CTAs; after an atomic, an acquire of theirs. "
    "Weaker than ``cuda.threadfence()`` (``fence.sc.gpu``), which is also sequentially "
    "consistent (after a split-K park, one measured as slow as the other: BENCHMARKS.md).",
)

fence_acq_rel_cluster = ptx_intrinsic(
    "fence_acq_rel_cluster",
    "fence.acq_rel.cluster;",
    doc="``fence.acq_rel.cluster`` (PTX ISA: membar/fence). Acquire-release fence at "
    "cluster scope.",
)

fence_acq_rel_cta = ptx_intrinsic(
    "fence_acq_rel_cta",
    "fence.acq_rel.cta;",
    doc="``fence.acq_rel.cta`` (PTX ISA: membar/fence). Acquire-release fence at CTA scope.",
)
