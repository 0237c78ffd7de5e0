"""The K-grouped form of grouped_matmul (A (M, total), B (total, N): MoE weight gradients) on
CPU: ptxas's view of its kernel, bad input refused before any launch, and the simulator cases
(tests/sim_grouped_wgrad_cases.py) in a child process."""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from numba import types

from nbwgmma import grouped_matmul
from nbwgmma.errors import MatmulError, MatmulTypeError

HERE = pathlib.Path(__file__).parent
SIG = (types.uint64, types.uint64, types.uint64, types.int32[::1], types.int32, types.int32, types.int32)


def test_kernel_compiles_clean_for_both_types():
    """Two m64n128k16 wgmmas per K step with both transpose bits (A M-contiguous, B N-contiguous),
    the group's last block cleared with 16-byte stores and a proxy fence, 64 x 64 parts of C
    through stmatrix and 3-D TMA stores; no spills, no local memory, no serialized wgmma."""
    from nbwgmma.kernels.grouped_wgrad import grouped_wgrad_kernel
    from nbwgmma.report import compile_reports

    for rep in compile_reports([(grouped_wgrad_kernel(t), SIG) for t in ("bf16", "f16")]):
        assert rep.sass.get("HGMMA") == 8 and rep.sass_full.get("UTMASTG.3D") == 4, rep.sass
        assert all("tnspA.tnspB" in line for line in rep.sass_text.splitlines() if "HGMMA" in line)
        assert rep.sass_full.get("STS.128", 0) >= 4 and rep.sass_full.get("FENCE.VIEW.ASYNC.S", 0) >= 2
        assert rep.spill_bytes == 0 and rep.local_memory_ops == 0, rep
        assert not rep.wgmma_serialized and not rep.warnings, rep.warnings
        # the walk's divisions are 32-bit; the two 64-bit ones left are the persistent loops' trip counts
        assert rep.sass_text.count("div_s64) ;") <= 2, rep.sass_text.count("div_s64) ;")


class Fake:
    """A CUDA array as far as the argument checks can tell (its pointer is never read)."""

    _next = [0x7F0000000000]

    def __init__(self, shape, dtype, strides=None):
        ptr = Fake._next[0]
        Fake._next[0] += 1 << 30
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": np.dtype(dtype).str, "data": (ptr, False),
                                         "strides": strides, "version": 3}


def _dyt(total=64, m=32, dtype=np.float16):
    """dy.t() of a row-major dy (total, M): (M, total) with M contiguous."""
    es = np.dtype(dtype).itemsize
    return Fake((m, total), dtype, strides=(es, m * es))


OFFS = Fake((3,), np.int32)
BAD = {
    "B-not-sharing-total": ((_dyt(), Fake((63, 16), np.float16), OFFS), {}, MatmulError,
                            "must share the grouped dimension"),
    "B-uint16-no-in_dtype": ((_dyt(), Fake((64, 16), np.uint16), OFFS), {}, MatmulTypeError,
                             r"B holds uint16: say with in_dtype='bf16' or 'f16'"),
    "B-bf16-A-f16": ((_dyt(), Fake((64, 16), np.uint16), OFFS), {"in_dtype": "bf16"}, MatmulTypeError,
                     "in_dtype=bf16 reads raw 2-byte integers; A holds f16"),
    "A-host": ((np.zeros((32, 64), np.float16), Fake((64, 16), np.float16), OFFS), {}, MatmulTypeError,
               "^grouped_matmul: A: "),
    "f32-inputs": ((_dyt(dtype=np.float32), Fake((64, 16), np.float32), OFFS), {}, MatmulTypeError,
                   "must both be bf16 or both f16"),
    "offs-int64": ((_dyt(), Fake((64, 16), np.float16), Fake((3,), np.int64)), {}, MatmulTypeError,
                   "offs must be int32"),
    "offs-2-D": ((_dyt(), Fake((64, 16), np.float16), Fake((3, 1), np.int32)), {}, MatmulError,
                 "offs must be 1-D"),
    "offs-host": ((_dyt(), Fake((64, 16), np.float16), np.array([1, 2, 3], np.int32)), {}, MatmulTypeError,
                  "offs: expected a CUDA array"),
    "out-shape": ((_dyt(), Fake((64, 16), np.float16), OFFS), {"out": Fake((3, 32, 15), np.float16)}, MatmulError,
                  r"out must be a \(3, 32, 16\) f16 array"),
    "out-type": ((_dyt(), Fake((64, 16), np.float16), OFFS), {"out": Fake((3, 32, 16), np.float32)}, MatmulError,
                 "out must be a"),
    "out-dtype": ((_dyt(), Fake((64, 16), np.float16), OFFS), {"out_dtype": "f32"}, MatmulTypeError,
                  "output has the input type"),
    "activation": ((_dyt(), Fake((64, 16), np.float16), OFFS), {"activation": "relu"}, MatmulError,
                   "takes neither"),
    # from a hunt for bad input: the scales were taken and ignored (an unscaled product, no error)
    "scales": ((_dyt(), Fake((64, 16), np.float16), OFFS), {"scale_a": 2.0, "scale_b": 3.0}, MatmulError,
               "scale_a and scale_b apply to fp8 operands with a 3-D B; the 2-D x 2-D form"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_raises_one_line_naming_the_argument(name):
    args, kw, exc, msg = BAD[name]
    with pytest.raises(exc, match=msg) as e:
        grouped_matmul(*args, **kw)
    assert "\n" not in str(e.value)


def test_in_the_cuda_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env.pop("NBWGMMA_DEBUG_WAIT", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-o", "addopts=", "-p", "no:cacheprovider",
                        "-p", "no:hypothesispytest", "-p", "no:benchmark", str(HERE / "sim_grouped_wgrad_cases.py")],
                       env=env, capture_output=True, text=True, timeout=600, cwd=HERE.parent)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and "failed" not in r.stdout and "skipped" not in r.stdout
