"""CPU tests of the synchronization, control, address and cp.async intrinsics.

For each intrinsic: its PTX text, and the SASS instruction ptxas makes of it
for sm_90a (None where the instruction has no opcode of its own, e.g. a special
register folded into address arithmetic). Needs no GPU.
"""

import pathlib

import numpy as np
import pytest
from numba import cuda, types

from nbwgmma.intrinsics import *  # noqa: F401,F403
from nbwgmma.report import compile_report

SIG = (types.uint32[:], types.uint64[:])

# name: (statement in a kernel with `a` a shared barrier address and `s` a
# 64-bit value, PTX text, SASS opcode prefix or None)
CASES = {
    "mbarrier_init": ("mbarrier_init(a, 1)", "mbarrier.init.shared::cta.b64", "SYNCS.EXCH.64"),
    "mbarrier_arrive": ("st[1] = mbarrier_arrive(a)", "mbarrier.arrive.release.cta.shared::cta.b64", "SYNCS.ARRIVE.TRANS64"),
    "mbarrier_arrive_cluster_scope": ("st[1] = mbarrier_arrive(a, 'cluster')", "mbarrier.arrive.release.cluster.shared::cta.b64", "SYNCS.ARRIVE.TRANS64"),
    "mbarrier_arrive_count": ("st[1] = mbarrier_arrive_count(a, 2)", "mbarrier.arrive.release.cta.shared::cta.b64", "SYNCS.ARRIVE.TRANS64.ART0"),
    "mbarrier_arrive_expect_tx": ("st[1] = mbarrier_arrive_expect_tx(a, 1024)", "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64", "SYNCS.ARRIVE.TRANS64"),
    "mbarrier_expect_tx": ("mbarrier_expect_tx(a, 1024)", "mbarrier.expect_tx.relaxed.cta.shared::cta.b64", "SYNCS.ARRIVE.TRANS64.RED"),
    "mbarrier_try_wait": ("out[1] = mbarrier_try_wait(a, s)", "mbarrier.try_wait.acquire.cta.shared::cta.b64", "SYNCS.PHASECHK.TRANS64.TRYWAIT"),
    "mbarrier_try_wait_parity": ("out[1] = mbarrier_try_wait_parity(a, 1)", "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64", "SYNCS.PHASECHK.TRANS64.TRYWAIT"),
    "mbarrier_test_wait": ("out[1] = mbarrier_test_wait(a, s)", "mbarrier.test_wait.acquire.cta.shared::cta.b64", "SYNCS.PHASECHK.TRANS64"),
    "mbarrier_test_wait_parity": ("out[1] = mbarrier_test_wait_parity(a, 1)", "mbarrier.test_wait.parity.acquire.cta.shared::cta.b64", "SYNCS.PHASECHK.TRANS64"),
    "mbarrier_wait": ("mbarrier_wait(a, s)", "mbarrier.try_wait.acquire.cta.shared::cta.b64", "SYNCS.PHASECHK.TRANS64.TRYWAIT"),
    "mbarrier_wait_parity": ("mbarrier_wait_parity(a, 1)", "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64", "SYNCS.PHASECHK.TRANS64.TRYWAIT"),
    "mbarrier_wait_timeout": ("out[1] = mbarrier_wait_timeout(a, s, 1000)", "mov.u64 %nbw_t0, %globaltimer", "SYNCS.PHASECHK.TRANS64.TRYWAIT"),
    "mbarrier_wait_parity_timeout": ("out[1] = mbarrier_wait_parity_timeout(a, 0, 2000000000)", "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64", "CS2R"),
    "trap": ("trap()", "trap;", "BPT.TRAP"),
    "griddep_wait": ("griddep_wait()", "griddepcontrol.wait;", "ACQBULK"),
    "griddep_launch_dependents": ("griddep_launch_dependents()", "griddepcontrol.launch_dependents;", "PREEXIT"),
    "mbarrier_inval": ("mbarrier_inval(a)", "mbarrier.inval.shared::cta.b64", "SYNCS.CCTL.IV"),
    "mbarrier_arrive_cluster": ("mbarrier_arrive_cluster(a, 1)", "mbarrier.arrive.release.cta.shared::cluster.b64", "SYNCS.ARRIVE.TRANS64.RED"),
    "mbarrier_arrive_remote_cluster_scope": ("mbarrier_arrive_cluster(a, 1, 'cluster')", "mbarrier.arrive.release.cluster.shared::cluster.b64", "MEMBAR.ALL.GPU"),
    "fence_mbarrier_init": ("fence_mbarrier_init()", "fence.mbarrier_init.release.cluster", None),
    "fence_proxy_async": ("fence_proxy_async()", "fence.proxy.async;", "FENCE.VIEW.ASYNC.S"),
    "fence_proxy_async_shared": ("fence_proxy_async_shared()", "fence.proxy.async.shared::cta", "FENCE.VIEW.ASYNC.S"),
    "fence_proxy_async_global": ("fence_proxy_async_global()", "fence.proxy.async.global", "FENCE.VIEW.ASYNC.G"),
    "fence_proxy_tensormap_acquire": ("fence_proxy_tensormap_acquire(s)", "fence.proxy.tensormap::generic.acquire.gpu", "UTMACCTL.IV"),
    "fence_proxy_tensormap_release": ("fence_proxy_tensormap_release()", "fence.proxy.tensormap::generic.release.gpu", "MEMBAR.ALL.GPU"),
    "fence_acq_rel_gpu": ("fence_acq_rel_gpu()", "fence.acq_rel.gpu", "MEMBAR.ALL.GPU"),
    "fence_acq_rel_cluster": ("fence_acq_rel_cluster()", "fence.acq_rel.cluster", "MEMBAR.ALL.GPU"),
    "fence_acq_rel_cta": ("fence_acq_rel_cta()", "fence.acq_rel.cta", None),
    "named_barrier_sync": ("named_barrier_sync(1, 256)", "bar.sync 1, 256", "BAR.SYNC"),
    "named_barrier_arrive": ("named_barrier_arrive(2, 128)", "bar.arrive 2, 128", "BAR.ARV"),
    "named_barrier_sync_id": ("named_barrier_sync_id(1 + st[0] % 4, 128)", "bar.sync %r", "BAR.SYNC"),
    "cluster_arrive": ("cluster_arrive()", "barrier.cluster.arrive.release.aligned", "UCGABAR_ARV"),
    "cluster_arrive_relaxed": ("cluster_arrive_relaxed()", "barrier.cluster.arrive.relaxed.aligned", "UCGABAR_ARV"),
    "cluster_wait": ("cluster_wait()", "barrier.cluster.wait.acquire.aligned", "UCGABAR_WAIT"),
    "cluster_sync": ("cluster_sync()", "barrier.cluster.wait.acquire.aligned", "UCGABAR_WAIT"),
    "cluster_sync_unaligned": ("cluster_sync(False)", "barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;",
                               "UCGABAR_WAIT"),
    "cluster_arrive_unaligned": ("cluster_arrive(False)", "barrier.cluster.arrive.release;", "UCGABAR_ARV"),
    "cluster_wait_unaligned": ("cluster_wait(False)", "barrier.cluster.wait.acquire;", "UCGABAR_WAIT"),
    "elect_one_sync": ("out[1] = elect_one_sync()", "elect.sync", "ELECT"),
    "setmaxnreg_inc": ("setmaxnreg_inc(232)", "setmaxnreg.inc.sync.aligned.u32 232", "USETMAXREG.TRY_ALLOC"),
    "setmaxnreg_dec": ("setmaxnreg_dec(40)", "setmaxnreg.dec.sync.aligned.u32 40", "USETMAXREG.DEALLOC"),
    "smem_addr": ("out[1] = smem_addr(bar)", "cvta.to.shared.u64", None),
    "dynamic_smem_base": ("out[1] = dynamic_smem_base(dyn, 1024)", "and.b32", None),
    "cluster_ctarank": ("out[1] = cluster_ctarank()", "%cluster_ctarank", None),
    "cluster_nctarank": ("out[1] = cluster_nctarank()", "%cluster_nctarank", None),
    "cluster_id": ("out[1] = cluster_id('y')", "%clusterid.y", None),
    "cluster_ctaid": ("out[1] = cluster_ctaid()", "%cluster_ctaid.x", None),
    "mapa": ("out[1] = mapa(a, 1)", "mapa.shared::cluster.u32", "PRMT"),
    "st_shared_v4_b32": ("st_shared_v4_b32(a, 0, 1, 2, st[0])", "st.shared.v4.b32", "STS.128"),
    "ld_shared_v4_b32": ("x, y, z, w = ld_shared_v4_b32(a)\n    out[1] = x ^ y ^ z ^ w", "ld.shared.v4.b32", "LDS.128"),
    "st_global_v4_b32": ("st_global_v4_b32(out, 16, 1, 2, 3, st[0])", "st.global.v4.b32", "STG.E.128"),
    "ld_shared_b32": ("out[1] = ld_shared_b32(a)", "ld.shared.b32", "LDS"),
    "st_global_b16x2": ("st_global_b16x2(out, s * 2, st[0])", "st.global.b32", "STG.E.U16"),
    "st_global_b16": ("st_global_b16(out, s * 2, st[0])", "st.global.b16", "STG.E.U16"),
    "st_shared_cluster_u32": ("st_shared_cluster_u32(mapa(a, 1), 7)", "st.shared::cluster.u32", "ST.E"),
    "ld_shared_cluster_u32": ("out[1] = ld_shared_cluster_u32(mapa(a, 1))", "ld.shared::cluster.u32", "LD.E"),
    "ld_shared_f32": ("out[1] = ld_shared_f32(a) > 1", "ld.shared.f32", "LDS"),
    "st_shared_f32": ("st_shared_f32(a, np.float32(s))", "st.shared.f32", "STS"),
    "cp_async": ("cp_async(a, out, 4, 4)", "cp.async.ca.shared::cta.global", "LDGSTS.E"),
    "cp_async_zfill": ("cp_async_zfill(a, out, 16, st[0])", "cp.async.cg.shared::cta.global", "LDGSTS.E.BYPASS.128.ZFILL"),
    "cp_async_mbarrier_arrive_noinc": ("cp_async_mbarrier_arrive_noinc(a)", "cp.async.mbarrier.arrive.noinc.shared::cta.b64",
                                       "ARRIVES.LDGSTSBAR"),
    "prefetch_l1": ("prefetch_l1(out, s * 4)", "prefetch.global.L1", "CCTL.E.PF1"),
}


def make_kernel(stmt):
    src = f"""
def kernel(out, st):
    bar = cuda.shared.array(2, np.uint64)
    dyn = cuda.shared.array(0, np.uint8)
    a = smem_addr(bar)
    s = st[0]
    {stmt}
    out[0] = a
"""
    ns = dict(globals())
    exec(src, ns)
    return ns["kernel"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_ptx_and_sass(name, report_batch):
    stmt, ptx_text, sass_op = CASES[name]
    rep = report_batch(lambda name: (make_kernel(CASES[name][0]), SIG, (128, 1)))  # with its batch (conftest.py)
    assert ptx_text in rep.ptx, f"{ptx_text!r} not in the PTX of {name}"
    assert rep.arch == "sm_90a"
    assert rep.local_memory_ops == 0 and rep.spill_bytes == 0
    if sass_op is not None:
        assert any(op.startswith(sass_op) for op in rep.sass_full), (
            f"{name}: no SASS opcode starting with {sass_op}; got {sorted(rep.sass_full)}"
        )
    assert not rep.warnings, rep.warnings


def test_every_public_intrinsic_is_covered():
    import nbwgmma.intrinsics as intr

    sync_modules = [intr.address, intr.async_copy, intr.control, intr.fence, intr.mbarrier]
    host_only = {"mbarrier_name"}  # emits no instruction: tests/intrinsics/test_mbarrier_name_cpu.py
    # Intrinsics that emit no instruction, each tested by a file of its own.
    elsewhere = {"mbarrier_name": "test_mbarrier_name_cpu.py"}
    here = pathlib.Path(__file__).parent
    for name, test_file in elsewhere.items():
        assert name in (here / test_file).read_text(), (name, test_file)
    public = {n for m in sync_modules for n in m.__all__ if callable(getattr(m, n)) and not n.isupper()} - host_only
    assert public <= set(CASES) | set(elsewhere), sorted(public - set(CASES) - set(elsewhere))


@pytest.mark.parametrize(
    "stmt, message",
    [
        ("named_barrier_sync(16, 128)", "barrier id in [0, 15]"),
        ("named_barrier_sync(1, 100)", "multiple of 32"),
        ("named_barrier_arrive(1, 0)", "multiple of 32"),
        ("setmaxnreg_inc(20)", "multiple of 8 in [24, 256]"),
        ("setmaxnreg_dec(260)", "multiple of 8 in [24, 256]"),
        ("setmaxnreg_inc(100)", "multiple of 8 in [24, 256]"),
        ("setmaxnreg_inc(out[0])", "compile-time constant"),
        ("named_barrier_sync(out[0], 128)", "compile-time constant"),
        ("mbarrier_arrive(a, 'gpu')", "one of 'cta', 'cluster'"),
        ("out[1] = dynamic_smem_base(dyn, 1000)", "power of two"),
        ("out[1] = cluster_id('w')", "one of 'x', 'y', 'z'"),
        ("out[1] = smem_addr(s)", "must be an array"),
        ("mbarrier_init(a, bar)", "scalar convertible"),
        ("cp_async(a, out, 0, 2)", "one of 4, 8, 16"),
    ],
)
def test_typing_errors(stmt, message):
    with pytest.raises(Exception) as exc:
        compile_report(make_kernel(stmt), SIG)
    text = str(exc.value)
    assert message in text, text
    # Errors say what was given as well as what was expected.
    assert "got" in text
