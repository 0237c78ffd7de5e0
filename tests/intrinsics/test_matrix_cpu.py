"""ldmatrix/stmatrix forms: PTX text and SASS (LDSM/STSM) for every .x1/.x2/.x4, with and
without .trans; and the swizzled accumulator store."""

import numpy as np
import pytest
from numba import cuda, types

from nbwgmma.intrinsics import *  # noqa: F401,F403
from nbwgmma.report import compile_report


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [0, 1])
def test_ldmatrix_stmatrix_forms(num, trans):
    src = f"""
def k(out):
    buf = cuda.shared.array(512, np.uint16)
    a = smem_addr(buf) + (cuda.threadIdx.x % 32) * 16
    r = ldmatrix(a, {num}, {trans})
    stmatrix(a, r, {trans})
    out[0] = r[0]
"""
    ns = dict(globals())
    exec(src, ns)
    rep = compile_report(ns["k"], (types.uint32[:],))
    t = ".trans" if trans else ""
    assert f"ldmatrix.sync.aligned.m8n8.x{num}{t}.shared::cta.b16" in rep.ptx
    assert f"stmatrix.sync.aligned.m8n8.x{num}{t}.shared::cta.b16" in rep.ptx
    assert rep.sass["LDSM"] == 1 and rep.sass["STSM"] == 1
    assert rep.local_memory_ops == 0


@pytest.mark.parametrize("swizzle", ["none", "32B", "64B", "128B"])
def test_acc_store_swizzled_compiles(swizzle):
    ns = dict(globals(), SW=swizzle)
    exec("def k2(out):\n    acc = acc_zeros('f32.bf16.bf16', 64)\n    buf = cuda.shared.array(4096, np.float32)\n"
         "    acc_store_swizzled(acc, 'f32.bf16.bf16', smem_addr(buf), cuda.threadIdx.x % 128, 128, SW)\n"
         "    out[0] = buf[cuda.threadIdx.x]\n", ns)
    rep = compile_report(ns["k2"], (types.float32[:],))
    assert rep.ptx.count("st.shared.b32") == 32 and rep.sass["STS"] >= 1
    assert rep.local_memory_ops == 0


def test_acc_store_swizzled_rejects_bad_rows():
    ns = dict(globals())
    exec("def k3(out):\n    acc = acc_zeros('f32.bf16.bf16', 64)\n"
         "    acc_store_swizzled(acc, 'f32.bf16.bf16', 0, 0, 24, '128B')\n", ns)
    with pytest.raises(Exception, match="multiple of 16"):
        compile_report(ns["k3"], (types.float32[:],))
