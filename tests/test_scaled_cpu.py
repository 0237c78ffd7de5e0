"""The block-scaled fp8 kernel on CPU: ptxas's view of the DeepSeek-V3 configuration (1 x 128 A
scales, 128 x 128 B scales, bf16 out through TMA stores) and of the rowwise fast path; the
configuration's and the kit block's argument checks."""

import pytest
import re

from numba import types

from nbwgmma.kernels.scaled import ScaledConfig, scaled_kernel
from nbwgmma.kit import BlockScaled, TmaPipeline, acc_promote
from nbwgmma.report import compile_reports

F32 = types.float32
# maps of A, B, C; C as an array (a stand-in with TMA stores); the scales (A's M-major, B's as the
# transpose of a row-major weight scale: any strides); m, n, k; alpha
SIG = (types.uint64, types.uint64, types.uint64, F32[:, ::1], F32[:, :], F32[:, :], types.int32, types.int32,
       types.int32, F32)


def _main_loop(sass_text):
    """SASS lines from the last full-barrier wait before the first QGMMA to the line after the last QGMMA."""
    lines = sass_text.splitlines()
    q = [i for i, line in enumerate(lines) if "QGMMA" in line]
    wait = max(i for i, line in enumerate(lines[:q[0]]) if "SYNCS.PHASECHK" in line)
    return "\n".join(lines[wait:q[-1] + 2])  # and the wait that follows


def test_block_scaled_and_rowwise_kernels_compile_clean():
    block = ScaledConfig("e4m3", "e4m3", "bf16", "block", "block")
    rowwise = ScaledConfig("e4m3", "e5m2", "f16", "row", "col")  # no promotion: the scales in the epilogue
    rep, rep_row = compile_reports([(scaled_kernel(block), SIG), (scaled_kernel(rowwise), SIG)])
    for r in (rep, rep_row):
        assert r.spill_bytes == 0 and r.local_memory_ops == 0, r
        assert not r.wgmma_serialized and not r.warnings, r.warnings
    # four m64n128k32 per 128-K stage; the promoted loop is unrolled by two (two sets of scales)
    assert rep.sass.get("QGMMA") == 8 and rep_row.sass.get("QGMMA") == 4, (rep.sass, rep_row.sass)
    loop = _main_loop(rep.sass_text)
    assert "F32.E4M3.E4M3" in loop and "LDL" not in loop and "STL" not in loop, loop
    # promotion: one FFMA per accumulator value (64 per thread), after the wait that completes the block
    assert rep.sass_full.get("FFMA", 0) >= 64, rep.sass_full
    assert "WARPGROUP.DEPBAR.LE gsb0, 0x0" in loop
    # The block scales are loaded ahead: no global load is issued between a block's first and last
    # wgmma (a loaded value used there would hold up the last one), and none feeds the loop's FMULs
    # in the block that loads it.
    lines = rep.sass_text.splitlines()
    q = [i for i, line in enumerate(lines) if "QGMMA" in line]
    assert not any(re.search(r"\bLDG?\.E", line) for line in lines[q[0]:q[3]]), loop
    loaded = set()  # registers whose last value came from a global load
    for i in range(q[0] - 80, q[3]):
        regs = re.findall(r"\bR\d+\b", lines[i].split("*/", 1)[-1].split(";")[0])
        if i >= q[0]:
            assert not set(regs[1:]) & loaded, (lines[i], loaded)
        if regs:
            (loaded.add if re.search(r"\bLDG?\.E", lines[i]) else loaded.discard)(regs[0])
    assert rep_row.sass_full.get("FFMA", 0) < 64  # the fast path accumulates in the tensor cores


def test_configs_check_their_arguments():
    for kw, msg in ((dict(a_type="f16"), "a_type"), (dict(out="e4m3"), "out"), (dict(a_scale="col"), "a_scale"),
                    (dict(promote=False), "block scales need promotion"),
                    (dict(out="f32", epilogue="tma"), "16-bit C"), (dict(group_m=0), "group_m")):
        with pytest.raises(ValueError, match=msg):
            ScaledConfig(**kw)
    with pytest.raises(ValueError, match="fp8 kind"):
        BlockScaled("f32.bf16.bf16", TmaPipeline(4, consumers=2), a_block=True, b_block=True)
    with pytest.raises(ValueError, match="consumers=2"):
        BlockScaled("f32.e4m3.e4m3", TmaPipeline(4, consumers=1), a_block=True, b_block=True)
    with pytest.raises(ValueError, match="wgmma N"):
        acc_promote(100)
