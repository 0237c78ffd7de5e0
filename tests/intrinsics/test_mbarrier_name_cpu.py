"""``mbarrier_name`` labels a barrier for the simulator and costs nothing on the GPU."""

import numpy as np
import pytest
from numba import cuda, types

from nbwgmma.intrinsics import mbarrier_init, mbarrier_name, smem_addr
from nbwgmma.report import compile_report

SIG = (types.int32[:],)


def _kernel(named):
    def kernel(out):
        bars = cuda.shared.array(4, np.uint64)
        a = smem_addr(bars)
        for s in range(4):
            mbarrier_init(a + 8 * s, 1)
            if named:
                mbarrier_name(a + 8 * s, "full", s)
        out[0] = a
    return kernel


def test_the_name_emits_no_instruction():
    plain = compile_report(_kernel(False), SIG, launch_bounds=(128, 1))
    named = compile_report(_kernel(True), SIG, launch_bounds=(128, 1))
    assert "nbwgmma: mbarrier" not in named.ptx
    assert named.sass_full == plain.sass_full


def test_the_name_must_be_a_string_literal():
    def kernel(out):
        bars = cuda.shared.array(1, np.uint64)
        mbarrier_name(smem_addr(bars), out[0])

    with pytest.raises(Exception, match="argument 'name' must be a compile-time constant \\(a string literal\\)"):
        compile_report(kernel, SIG)
