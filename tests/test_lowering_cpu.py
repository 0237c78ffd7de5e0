"""nbwgmma.intrinsics.lowering: numba-cuda's search for singly assigned variables replaced by a
linear one, which must find the same variables in every function a kernel compiles."""

import math

import numpy as np
from numba import cuda, types

from nbwgmma.intrinsics import lowering
from nbwgmma.report import compile_report


def test_installed_on_the_numba_cuda_it_was_written_for():
    from numba.cuda.lowering import Lower

    assert lowering.install()  # (the package installed it at import; a second call keeps it)
    assert getattr(Lower._find_singly_assigned_variable, "replaced", False)


@cuda.jit
def _mixed(out, x, n):
    """Loops, branches, a variable assigned twice in one block, one assigned in two blocks."""
    t = cuda.threadIdx.x
    s = np.float32(0.0)
    for i in range(n):
        s += x[i] * t
    y = s
    y = y + np.float32(1.0)
    if t < n:
        z = math.exp(y)
    else:
        z = y
    w0 = z * 2
    w1 = w0 + z
    out[t] = w1 if t & 1 else w0


def test_the_same_variables_as_numba_cuda_finds(monkeypatch):
    from numba.cuda.lowering import Lower

    new = Lower._find_singly_assigned_variable
    seen = []

    def both(self):
        new.original(self)
        theirs = self._singly_assigned_vars
        new(self)
        seen.append(len(theirs))
        assert self._singly_assigned_vars == theirs

    monkeypatch.setattr(Lower, "_find_singly_assigned_variable", both)
    compile_report(_mixed, (types.float32[::1], types.float32[::1], types.int32))
    from nbwgmma.kit import acc_row_reduce
    from nbwgmma.intrinsics import acc_load

    row_max = acc_row_reduce("max", 64)

    @cuda.jit
    def reduce(out, src, n):
        t = cuda.threadIdx.x
        mx = row_max(acc_load("f32.bf16.bf16", 64, src, t, 0, 0), t, 0, 0, n)
        out[t] = mx[0] + mx[1]

    compile_report(reduce, (types.float32[::1], types.float32[:, ::1], types.int32))
    assert len(seen) >= 3 and max(seen) > 50, seen
