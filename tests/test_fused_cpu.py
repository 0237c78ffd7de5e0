"""The fused-epilogue and grouped GEMM kernels on CPU: ptxas's view of one configuration each (the bf16 /
column bias / gelu_tanh one is the example's kernel, compiled by tests/test_examples.py)."""

from numba import cuda, types

from nbwgmma.kernels.fused import FusedConfig, fused_kernel
from nbwgmma.report import compile_report

F32 = types.float32
# maps of A, B, C; the bias; m, n, k; alpha; the user epilogue's extras (a scalar, a column vector, two
# unused); no C to add (a stand-in 2-D array) and beta; the fp8 output's codes, scale and amax
SIG = (types.uint64, types.uint64, types.uint64, F32[::1], types.int32, types.int32, types.int32, F32,
       F32, F32[::1], F32, F32, F32[:, ::1], F32, types.uint8[:, ::1], F32, F32[::1])


@cuda.jit(device=True, inline=True)
def _scale_shift(v, row, col, s, shift):
    return v * s + shift


def test_row_bias_silu_user_epilogue_f16_kernel_compiles_clean():
    cfg = FusedConfig("f16", "row", "silu", epilogue=_scale_shift, extras=("scalar", "col"))
    rep = compile_report(fused_kernel(cfg), SIG)
    assert rep.sass.get("HGMMA") == 8, rep.sass  # two m64n128k16 per K step, four K steps per stage
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0, rep
    assert not rep.wgmma_serialized and not rep.warnings, rep.warnings
    assert rep.sass_full.get("MUFU.EX2", 0) >= 64 and rep.sass_full.get("MUFU.RCP", 0) >= 64  # silu per value


def test_fp8_output_with_amax_kernel_compiles_clean():
    """bf16 in, e4m3 out: the scaled results converted two at a time (F2FP ... E4M3 pack) and
    stored 16 bits at a time; amax reduced per warp (SHFL) and one atomic per warp."""
    rep = compile_report(fused_kernel(FusedConfig("bf16", "col", "gelu_tanh", out="e4m3", amax=True)), SIG)
    assert rep.sass.get("HGMMA") == 8 and not rep.wgmma_serialized and not rep.warnings, rep
    assert rep.sass_full.get("F2FP.SATFINITE.E4M3.F32.PACK_AB_MERGE_C", 0) >= 64
    assert rep.sass_full.get("STG.E.U16") == 64 and rep.sass_full.get("SHFL.BFLY") == 10, rep.sass_full
    assert rep.sass.get("UTMASTG", 0) == 0
    lines = rep.sass_text.splitlines()  # a few registers spill in the epilogue, none in the main loop
    hgmma = [i for i, line in enumerate(lines) if "HGMMA" in line]
    wait = max(i for i, line in enumerate(lines[:hgmma[0]]) if "SYNCS.PHASECHK" in line)
    assert not any("LDL" in line or "STL" in line for line in lines[wait:hgmma[-1]])


def test_fp8_output_through_tma_compiles_clean():
    """An fp8 C with 16-byte aligned rows: codes converted in pairs into a 64B-swizzled shared
    block (STS.U16) and stored by TMA, no plain global stores, no spills (the plain-store
    epilogue spills 240 bytes)."""
    rep = compile_report(fused_kernel(FusedConfig("bf16", "col", "gelu_tanh", out="e4m3", amax=True, fp8_tma=True)),
                         SIG)
    assert rep.sass.get("HGMMA") == 8 and rep.sass.get("UTMASTG") == 4 and rep.sass_full.get("STS.U16") == 64, rep
    assert rep.sass_full.get("STG.E.U16", 0) == 0 and rep.spill_bytes == 0 and not rep.warnings, rep


def test_fp8_inputs_with_an_epilogue_compile_clean():
    """e4m3 A and B (128 K per stage: the same 128-byte rows), bf16 out through TMA."""
    rep = compile_report(fused_kernel(FusedConfig("e4m3", "col", "relu")), SIG)
    assert rep.sass.get("QGMMA") == 8 and rep.sass.get("UTMASTG") == 4, rep.sass
    assert rep.spill_bytes == 0 and not rep.wgmma_serialized and not rep.warnings, rep


def test_cooperative_schedule_compiles_clean():
    """128 x 256 tiles on kit.Cooperative: four m64n256 wgmmas per stage and warpgroup, no spills;
    16-bit C through stmatrix and TMA (the simulator runs it with C and an fp8 output)."""
    cfg = FusedConfig("bf16", "col", "gelu_tanh", schedule="cooperative")
    rep = compile_report(fused_kernel(cfg), SIG)
    assert rep.sass.get("HGMMA") == 4 and rep.sass.get("UTMASTG") == 4 and rep.sass.get("STSM") == 16, rep.sass
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0 and not rep.wgmma_serialized, rep
    assert fused_kernel(cfg) is not fused_kernel(FusedConfig("bf16", "col", "gelu_tanh"))


def test_config_checks_its_arguments():
    import pytest

    for kw, msg in ((dict(dtype="f32"), "dtype"), (dict(bias="both"), "bias"), (dict(act="tanh"), "activation"),
                    (dict(group_m=0), "group_m"), (dict(extras=("col",)), "no epilogue"),
                    (dict(epilogue=_scale_shift, extras=("diag",)), "extras"), (dict(out="f32"), "out must be"),
                    (dict(dtype="e4m3", b_major="MN"), "no transpose"), (dict(dtype="e5m2", out="e5m2x"), "out must"),
                    (dict(amax=True), "amax goes with an fp8 out"), (dict(schedule="coop"), "schedule"),
                    (dict(fp8_tma=True), "fp8_tma")):
        with pytest.raises(ValueError, match=msg):
            FusedConfig(**kw)


def test_grouped_kernel_compiles_clean():
    from nbwgmma.kernels.grouped import grouped_kernel

    def sig(schedule):  # the cooperative kernel's epilogue warps store C as bytes
        out = types.uint16[:, ::1] if schedule == "pingpong" else types.uint8[:, ::1]
        return (types.uint64, types.uint64, out, types.int32[::1], types.int32, types.int32, types.int32,
                types.float32[:, ::1], types.int32)
    # The kernels spill a few scalars of the group walk per tile, outside the main loop, never inside it;
    # the epilogue (a bias per group and column, an activation) goes in 64 x 64 parts and adds none.
    from nbwgmma.report import compile_reports

    cases = ((True, True, "silu", "MN", "pingpong"), (False, True, "silu", "K", "cooperative"),
             (True, False, None, "MN", "cooperative"))
    jobs = [(grouped_kernel("bf16", masked, bias=bias, act=act, b_major=bm, schedule=sch), sig(sch))
            for masked, bias, act, bm, sch in cases]
    for rep, (_, _, act, _, sch) in zip(compile_reports(jobs), cases):
        epi = act is not None
        # ping-pong: two m64n128 wgmmas per K step; cooperative: one m64n256
        assert rep.sass.get("HGMMA") == (8 if sch == "pingpong" else 4) and rep.spill_bytes <= 384, rep
        if sch == "pingpong":
            assert (rep.sass_full.get("MUFU.EX2", 0) >= 128) == epi, rep.sass_full
        else:  # the activation on the epilogue warps, 16 bytes (8 values) a pass, their 16-byte stores
            assert (8 <= rep.sass_full.get("MUFU.EX2", 0) <= 32) == epi, rep.sass_full
            assert rep.sass_full.get("STG.E.128", 0) >= 1 and rep.sass.get("STSM") == 16, rep.sass_full
        assert not rep.warnings, rep.warnings
        lines = rep.sass_text.splitlines()
        hgmma = [i for i, line in enumerate(lines) if "HGMMA" in line]
        wait = max(i for i, line in enumerate(lines[:hgmma[0]]) if "SYNCS.PHASECHK" in line)
        loop = "\n".join(lines[wait:hgmma[-1]])
        assert "LDL" not in loop and "STL" not in loop, loop


def test_epilogue_warps_schedule_compiles_clean():
    """The cooperative main loop with the activation on the producer warpgroup's warps 1-3
    (kit.EpilogueWarps): the consumers' stmatrix of the whole 128 x 256 tile; the epilogue
    warps' 16-byte shared loads and stores, gelu_tanh's ex2 per value, eight TMA stores per
    tile; no spills at 48 registers for them."""
    cfg = FusedConfig("bf16", "col", "gelu_tanh", schedule="epilogue_warps")
    rep = compile_report(fused_kernel(cfg), SIG)
    assert rep.sass.get("HGMMA") == 4 and rep.sass.get("UTMASTG") == 8 and rep.sass.get("STSM") == 16, rep.sass
    assert rep.sass_full.get("LDS.128", 0) >= 1 and rep.sass_full.get("STS.128", 0) >= 1, rep.sass_full
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0 and not rep.wgmma_serialized and not rep.warnings, rep
    assert "USETMAXREG.DEALLOC.CTAPOOL 0x30" in rep.sass_text  # the producer warpgroup keeps 48 registers
    # the epilogue warps' loop over 16-byte chunks (8 values each, ptxas unrolls it a few times),
    # not the consumers' 128 values per thread of the cooperative schedule
    assert 8 <= rep.sass_full.get("MUFU.EX2", 0) <= 32, rep.sass_full


def test_epilogue_warps_schedule_is_refused_where_it_cannot_run():
    import pytest

    for kw in ({"act": None}, {"out": "e4m3"}, {"epilogue": _scale_shift}):
        with pytest.raises(ValueError, match="epilogue_warps"):
            FusedConfig(**{"dtype": "bf16", "bias": "col", "act": "relu", "schedule": "epilogue_warps", **kw})


def test_schedule_rule():
    from nbwgmma.frontend.fused import schedule_for

    assert schedule_for("bf16", "bf16", 8192, 8192, 8192, "gelu_tanh", False) == "epilogue_warps"
    assert schedule_for("f16", "f16", 4096, 14336, 4096, "silu", False) == "epilogue_warps"
    assert schedule_for("bf16", "bf16", 4096, 4096, 4096, "gelu_tanh", False) == "pingpong"  # M x N < 2^25
    assert schedule_for("bf16", "bf16", 8192, 8192, 2048, "gelu_tanh", False) == "pingpong"  # K < 4096
    assert schedule_for("bf16", "bf16", 8192, 8192, 8192, None, False) == "pingpong"  # nothing to offload
    assert schedule_for("bf16", "bf16", 8192, 8192, 8192, "relu", True) == "pingpong"  # a user function
    assert schedule_for("bf16", "e4m3", 8192, 8192, 8192, "relu", False) == "cooperative"
    assert schedule_for("bf16", "e4m3", 256, 256, 128, None, False) == "cooperative"  # fp8 out, any size
