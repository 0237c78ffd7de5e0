"""The grouped GEMM's kernels on CPU: ptxas's view of both schedules (ping-pong, and cooperative
with its epilogue warps), with and without a bias and an activation."""

from numba import types


def test_grouped_kernel_compiles_clean():
    from nbwgmma.kernels.grouped import grouped_kernel

    def sig(schedule):  # the cooperative kernel's epilogue warps store C as bytes
        out = types.uint16[:, ::1] if schedule == "pingpong" else types.uint8[:, ::1]
        return (types.uint64, types.uint64, out, types.int32[::1], types.int32, types.int32, types.int32,
                types.float32[:, ::1], types.int32, types.uint64, types.int32)
    # The kernels spill a few scalars of the group walk per tile, outside the main loop, never inside it;
    # the epilogue (a bias per group and column, an activation) goes in 64 x 64 parts and adds none.
    from nbwgmma.report import compile_reports

    cases = ((True, True, "silu", "MN", "pingpong", False), (False, True, "gelu_tanh", "K", "cooperative", False),
             (True, False, None, "MN", "cooperative", False), (False, False, None, "K", "pingpong", True))
    jobs = [(grouped_kernel("bf16", masked, bias=bias, act=act, b_major=bm, schedule=sch, short=short), sig(sch))
            for masked, bias, act, bm, sch, short in cases]  # (short: decoding's short boxes of A)
    for rep, (_, _, act, _, sch, _) in zip(compile_reports(jobs), cases):
        epi = act is not None
        # ping-pong: two m64n128 wgmmas per K step; cooperative: one m64n256
        assert rep.sass.get("HGMMA") == (8 if sch == "pingpong" else 4) and rep.spill_bytes <= 384, rep
        if sch == "pingpong":
            assert (rep.sass_full.get("MUFU.EX2", 0) >= 128) == epi, rep.sass_full
        else:  # the activation on the epilogue warps, 16 bytes (8 values) a pass, their 16-byte stores;
            # gelu_tanh on tanh.approx (one MUFU.TANH a value, no exponential)
            assert (8 <= rep.sass_full.get("MUFU.TANH", 0) <= 32) == epi, rep.sass_full
            assert "MUFU.EX2" not in rep.sass_full, rep.sass_full
            assert rep.sass_full.get("STG.E.128", 0) >= 1 and rep.sass.get("STSM") == 16, rep.sass_full
        assert not rep.warnings, rep.warnings
        lines = rep.sass_text.splitlines()
        hgmma = [i for i, line in enumerate(lines) if "HGMMA" in line]
        wait = max(i for i, line in enumerate(lines[:hgmma[0]]) if "SYNCS.PHASECHK" in line)
        loop = "\n".join(lines[wait:hgmma[-1]])
        assert "LDL" not in loop and "STL" not in loop, loop


def test_a_masked_product_of_no_groups_returns_its_empty_output():
    """A 3-D A of G = 0 groups divided by G (ZeroDivisionError); now its empty out comes back."""
    import numpy as np

    import nbwgmma

    class Fake:  # a CUDA array as far as the checks can tell (its memory is never touched)
        def __init__(self, shape, dtype, strides):
            self.__cuda_array_interface__ = {"shape": shape, "typestr": np.dtype(dtype).str,
                                             "data": (0x7F0000000000, False), "strides": strides, "version": 3}

    out = Fake((0, 8, 16), np.float16, (256, 32, 2))
    got = nbwgmma.grouped_matmul(Fake((0, 8, 16), np.float16, (256, 32, 2)), Fake((0, 16, 16), np.float16,
                                 (512, 32, 2)), Fake((0,), np.int32, None), out=out)
    assert got is out
