"""The fused-epilogue GEMM kernel on CPU: ptxas's view of one configuration (the bf16 /
column bias / gelu_tanh one is the example's kernel, compiled by tests/test_examples.py)."""

from numba import types

from nbwgmma.kernels.fused import FusedConfig, fused_kernel
from nbwgmma.report import compile_report

SIG = (types.uint64, types.uint64, types.uint64, types.float32[::1], types.int32, types.int32, types.int32,
       types.float32)


def test_row_bias_silu_f16_kernel_compiles_clean():
    rep = compile_report(fused_kernel(FusedConfig("f16", "row", "silu")), SIG)
    assert rep.sass.get("HGMMA") == 8, rep.sass  # two m64n128k16 per K step, four K steps per stage
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0, rep
    assert not rep.wgmma_serialized and not rep.warnings, rep.warnings
    assert rep.sass_full.get("MUFU.EX2", 0) >= 64 and rep.sass_full.get("MUFU.RCP", 0) >= 64  # silu per value


def test_config_checks_its_arguments():
    import pytest

    for kw, msg in ((dict(dtype="f32"), "dtype"), (dict(bias="both"), "bias"), (dict(act="tanh"), "activation"),
                    (dict(group_m=0), "group_m")):
        with pytest.raises(ValueError, match=msg):
            FusedConfig(**kw)
