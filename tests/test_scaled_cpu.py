"""The block-scaled fp8 kernel on CPU: ptxas's view of the DeepSeek-V3 configuration (1 x 128 A
scales, 128 x 128 B scales, bf16 out through TMA stores; the scales read directly by the
consumers, and staged by the scale warps where A's are column vectors) and of the rowwise fast
path; the configuration's and the kit block's argument checks."""

import pytest

from nbwgmma.errors import ConfigError
import re

from numba import types

from nbwgmma.kernels.scaled import ScaledConfig, scaled_kernel
from nbwgmma.frontend.scaled import last_row, narrow_tiles, strip_tiles, stream_tiles, trio_tiles, wide_tiles
from nbwgmma.kit import BlockScaled, StreamFixup, TileScheduler, TmaPipeline, acc_promote, acc_promote_cols, \
    box_rows, stream_walk, tile_producer
from nbwgmma.report import compile_reports

F32 = types.float32
# maps of A, B, C; C as an array (a stand-in with TMA stores); the scales (A's M-major, B's as the
# transpose of a row-major weight scale: any strides); m, n, k; alpha; stream-K's scratch and tile counters;
# the bias (the scratch standing in)
SIG = (types.uint64, types.uint64, types.uint64, F32[:, ::1], F32[:, :], F32[:, :], types.int32, types.int32,
       types.int32, F32, F32[::1], types.int32[::1], F32[::1])


def consumer_region(rep):
    """The SASS lines of the consumer warpgroups (after ``setmaxnreg.inc``, before the producer
    warpgroup's ``setmaxnreg.dec``)."""
    lines = rep.sass_text.splitlines()
    inc = next(i for i, line in enumerate(lines) if "USETMAXREG.TRY_ALLOC" in line)
    dec = next(i for i, line in enumerate(lines) if "USETMAXREG.DEALLOC" in line)
    assert inc < dec, "the consumers' branch comes first"
    return lines[inc:dec], lines[dec:]


def test_block_scaled_and_rowwise_kernels_compile_clean():
    block = ScaledConfig("e4m3", "e4m3", "bf16", "block", "block")  # A's scales row-major: read directly
    columns = ScaledConfig("e4m3", "e4m3", "bf16", "block", "block", a_columns=True)  # torch's layout: staged
    rowwise = ScaledConfig("e4m3", "e5m2", "f16", "row", "col")  # no promotion: the scales in the epilogue
    rep, rep_cols, rep_row = compile_reports([(scaled_kernel(c), SIG) for c in (block, columns, rowwise)])
    for r in (rep, rep_cols, rep_row):
        assert not r.wgmma_serialized and not r.setmaxnreg_ignored and not r.warnings, r.warnings
    assert rep_row.spill_bytes == 0 and rep_row.local_memory_ops == 0, rep_row
    # four m64n128k32 per 128-K stage; the promoted path: the first block, the loop's two (two
    # temporaries in turn), the last one
    assert rep.sass.get("QGMMA") == 16 and rep_row.sass.get("QGMMA") == 4, (rep.sass, rep_row.sass)
    for r in (rep, rep_cols):
        consumers, producers = consumer_region(r)
        text = "\n".join(consumers)
        # Promotion holds three fragments per thread (the sum, two blocks in turn): at most a few
        # scalars of the tile's set-up spill in the consumers, nothing in the main loop.
        q = [i for i, line in enumerate(consumers) if "QGMMA" in line]
        loop = "\n".join(consumers[q[4]:q[11] + 1])
        assert "F32.E4M3.E4M3" in loop and "LDL" not in loop and "STL" not in loop, loop
        assert r.spill_bytes <= 192, r
        # staged: the warpgroup index is warp-uniform (kit.warpgroup_index), the wgmma descriptors
        # live in uniform registers, none moved there (R2UR) in the main loop (ptxas may move a
        # scale read from a uniform address there: not a descriptor)
        moved = {int(u) for u in re.findall(r"R2UR UR(\d+)", loop)}
        descs = {int(u) + i for u in re.findall(r"gdesc\[UR(\d+)\]", loop) for i in range(4)}
        assert not moved & descs or r is rep, loop
        # promotion: one FFMA per accumulator value (64 per thread) after the wait that completes
        # the block, while the next block's wgmmas run (wait_group 1)
        assert text.count("FFMA") >= 128 and "WARPGROUP.DEPBAR.LE gsb0, 0x1" in loop
    # Read directly, the block scales are loaded ahead: no global load is issued between a block's
    # first and last wgmma, and no value loaded before them is read between them (it would hold
    # up the last one: loaded in their own block, ptxas put the multiply that needs them there).
    lines, _ = consumer_region(rep)
    q = [i for i, line in enumerate(lines) if "QGMMA" in line]
    for first in range(0, 16, 4):
        assert not any(re.search(r"\bLDG?\.E", line) for line in lines[q[first]:q[first + 3]])
        loaded = set()  # registers whose last value came from a global load
        for i in range(max(0, q[first] - 80), q[first + 3]):
            regs = re.findall(r"\bR\d+\b", lines[i].split("*/", 1)[-1].split(";")[0])
            if i >= q[first]:
                assert not set(regs[1:]) & loaded, (lines[i], loaded)
            if regs:
                (loaded.add if re.search(r"\bLDG?\.E", lines[i]) else loaded.discard)(regs[0])
    assert "LDGSTS" not in rep.sass_text
    # Staged, the scales come from shared memory (three words a block), never from global memory,
    # where the scale warps copied them with cp.async (16-byte vectors), arriving when they land.
    consumers, producers = consumer_region(rep_cols)
    text, prod = "\n".join(consumers), "\n".join(producers)
    assert "LDS" in text and not re.search(r"\bLDG|\bLD\.E", text), text
    assert "LDGSTS.E.BYPASS.128.ZFILL" in prod and "ARRIVES.LDGSTSBAR" in prod, prod
    assert rep_row.sass_full.get("FFMA", 0) < 64  # the fast path accumulates in the tensor cores
    assert "LDGSTS" not in rep_row.sass_text  # and has no scales to copy


def test_256_row_tiles_stage_scales_by_the_tma_thread_and_promote_two_waves():
    """256 x 128 tiles: the TMA thread's bulk copy of A's scales (no scale warps, no cp.async),
    each stage's two 128-row waves through one temporary (wait_group 0 before each promotion), two
    sums of 64 registers: no spills."""
    cfg = ScaledConfig("e4m3", "e4m3", "bf16", "block", "block", a_columns=True, bm=256)
    rep, = compile_reports([(scaled_kernel(cfg), SIG)])
    assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored and not rep.warnings, rep.warnings
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0, rep
    assert rep.sass.get("QGMMA") == 8 and rep.sass.get("UBLKCP", 0) >= 1, rep.sass
    assert "LDGSTS" not in rep.sass_text
    text = "\n".join(consumer_region(rep)[0])
    assert text.count("WARPGROUP.DEPBAR.LE gsb0, 0x0") == 2 and "gsb0, 0x1" not in text, text
    assert text.count("FFMA") >= 128, text
    assert cfg.smem <= 227 * 1024 and cfg.stages == 4


def test_192_row_tiles_run_three_consumers_with_one_temporary_each():
    """192 x 128 tiles: 512 threads, three consumer warpgroups of 160 registers beside a producer
    warpgroup of 24 (the register file's 64 K), each stage's one wave completed before its
    promotion; the TMA thread's bulk copy of A's scales; no spills. The front end's rule takes
    them where they need fewer rounds than 128- and 256-row tiles."""
    cfg = ScaledConfig("e4m3", "e4m3", "bf16", "block", "block", a_columns=True, bm=192)
    rep, = compile_reports([(scaled_kernel(cfg), SIG)])
    assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored and not rep.warnings, rep.warnings
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0, rep
    assert rep.sass.get("QGMMA") == 4 and rep.sass.get("UBLKCP", 0) >= 1 and "LDGSTS" not in rep.sass_text, rep.sass
    assert "USETMAXREG.TRY_ALLOC.CTAPOOL UP0, 0xa0" in rep.sass_text and "USETMAXREG.DEALLOC.CTAPOOL 0x18" in rep.sass_text
    text = "\n".join(consumer_region(rep)[0])
    assert text.count("WARPGROUP.DEPBAR.LE gsb0, 0x0") == 1 and "gsb0, 0x1" not in text, text
    assert text.count("FFMA") >= 64, text
    assert (cfg.threads, cfg.stages, cfg.a_box(100)) == (512, 4, (192, 128)) and cfg.smem <= 227 * 1024
    assert 128 * 24 + 3 * 128 * 160 <= 65536
    # the rule: rounds of tiles on 132 SMs
    assert trio_tiles(6144, 7168, 132) and trio_tiles(16384, 4096, 132) and trio_tiles(4096, 24576, 132)
    assert not any(trio_tiles(m, n, 132) for m, n in ((4096, 7168), (4224, 5632), (4096, 4096), (128, 7168)))


def test_192_row_tiles_walk_the_last_row_last_where_it_is_light():
    """``ScaledConfig(last_row=True)``: the scheduler walks the last tile row after the others (the
    kernel's SASS as clean as the grouped walk's); only with 192-row tiles. The rule: where that
    row holds at most 64 of M's rows and the rounds shrink by LAST_ROW_GAIN (4096 x 14336: 18.5
    against 19, which makes 192-row tiles the choice there); not where it holds more rows (8192,
    2048: 128), where the light tiles do not shorten the longest SM's share (4096 x 24576:
    31.5 against 32), where M is a multiple of 192, or where fewer than 16 whole rows come first
    (decoding products, a few hundred rows: not measured)."""
    cfg = ScaledConfig("e4m3", "e4m3", "bf16", "block", "block", a_columns=True, bm=192, last_row=True)
    assert cfg.sched.last_row and "last_row" in repr(cfg) and cfg.key() != \
        ScaledConfig("e4m3", "e4m3", "bf16", "block", "block", a_columns=True, bm=192).key()
    rep, = compile_reports([(scaled_kernel(cfg), SIG)])
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0 and rep.sass.get("QGMMA") == 4, rep
    for bad in (dict(bm=256, last_row=True), dict(bm=192, last_row="yes")):
        with pytest.raises(ConfigError, match="last_row must be a bool, True only with bm=192"):
            ScaledConfig("e4m3", "e4m3", "bf16", "block", "block", a_columns=True, **bad)
    assert last_row(4096, 14336, 132) and last_row(4096, 7168, 132) and trio_tiles(4096, 14336, 132)
    assert not any(last_row(m, n, 132) for m, n in ((4096, 24576), (8192, 7168), (2048, 7168), (6144, 7168),
                                                    (16384, 4096), (420, 264), (64, 7168), (400, 14336)))
    assert not trio_tiles(64, 7168, 132) and not trio_tiles(400, 14336, 132)  # (few whole rows: as before)


def test_strip_kernels_compile_clean():
    """256 x 128 tiles with a strip of 256 x 64 ones (the strip's tiles 64 wide, two a unit): both
    tiles' wgmmas (m64n128k32 and m64n64k32), each block completed before its promotion, no local
    memory in either main loop (a few words of the tile loop's set-up spill); B loaded in two
    64-row boxes a stage; the rule takes it where it cuts the rounds."""
    cfg = ScaledConfig("e4m3", "e4m3", "bf16", "block", "block", a_columns=True, bm=256, strip=True)
    rep, = compile_reports([(scaled_kernel(cfg), SIG)])
    assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored and not rep.warnings, rep.warnings
    assert rep.spill_bytes <= 64, rep
    assert rep.sass.get("QGMMA") == 16, rep.sass
    consumers, _ = consumer_region(rep)
    q = [i for i, line in enumerate(consumers) if "QGMMA" in line]
    shapes = {w for i in q for w in consumers[i].split() if w.startswith("QGMMA")}
    assert shapes == {"QGMMA.64x64x32.F32.E4M3.E4M3", "QGMMA.64x128x32.F32.E4M3.E4M3"}, shapes
    for first in range(0, len(q), 8):  # each loop: two waves' wgmmas and their promotions
        loop = "\n".join(consumers[q[first]:q[first + 7] + 150])
        assert "LDL" not in loop and "STL" not in loop, loop
    assert "\n".join(consumers).count("WARPGROUP.DEPBAR.LE gsb0, 0x0") == 4
    assert cfg.b_box == (64, 128) and cfg.units(4096, 2112) == 16 * 16 + 8 and cfg.units(600, 2112) == 3 * 16 + 2
    assert cfg.units(4096, 2176) == 16 * 17 and cfg.grid(4096, 2112, 7168, 132) == 132
    assert cfg.grid(256, 2112, 7168, 132) == 17
    assert strip_tiles(4096, 2112, 132) and strip_tiles(8192, 2112, 132) and strip_tiles(2048, 2112, 132)
    assert not strip_tiles(1024, 2112, 132) and not strip_tiles(4096, 576, 132)  # 128 x 144 tiles serve
    assert not strip_tiles(4096, 2176, 132) and not strip_tiles(4096, 2048, 132) and not strip_tiles(64, 32, 132)


def test_64_column_tiles_compile_clean():
    """128 x 64 tiles (few-row products): m64n64k32 wgmmas, 32-register fragments, staged and
    direct; as at 128 columns at most a few scalars spill, none in the consumers' main loop, where
    the descriptors stay in uniform registers."""
    cfgs = [ScaledConfig("e4m3", "e4m3", "bf16", "block", "block", a_columns=cols, bn=64) for cols in (True, False)]
    for cfg, rep in zip(cfgs, compile_reports([(scaled_kernel(c), SIG) for c in cfgs])):
        assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored and not rep.warnings, rep.warnings
        assert rep.spill_bytes <= 192, rep
        consumers, _ = consumer_region(rep)
        q = [i for i, line in enumerate(consumers) if "QGMMA" in line]
        loop = "\n".join(consumers[q[4]:q[11] + 1])
        assert "LDL" not in loop and "STL" not in loop and ("R2UR" not in loop or not cfg.a_columns), loop
        assert "QGMMA.64x64x32.F32.E4M3.E4M3" in rep.sass_text and "64x128" not in rep.sass_text
        assert cfg.stage_bytes == 24 * 1024


def test_wide_tiles_compile_clean_and_promote_by_column_offset():
    """128 x 176 and 128 x 144 tiles: one m64nNk32 wgmma group a stage completed (wait_group 0)
    before its promotion, one FFMA per value (each column's B scale fixed per offset case, picked
    by a branch: no select per value), three B scales read from the slot, C in two unswizzled
    halves (two TMA stores, 11 or 9 stmatrix a part); no spills; five stages fit."""
    cfgs = [ScaledConfig("e4m3", "e4m3", "bf16", "block", b, a_columns=True, bn=bn)
            for bn, b in ((176, "block"), (144, "block"), (144, "col"))]
    for cfg, rep in zip(cfgs, compile_reports([(scaled_kernel(c), SIG) for c in cfgs])):
        assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored and not rep.warnings, rep.warnings
        # (B's column scales, which the front end does not take wide: a word or two of the set-up spills)
        assert rep.spill_bytes <= (0 if cfg.b_scale == "block" else 16), rep
        assert rep.sass.get("QGMMA") == 4 and f"QGMMA.64x{cfg.bn}x32.F32.E4M3.E4M3" in rep.sass_text, rep.sass
        consumers, _ = consumer_region(rep)
        text = "\n".join(consumers)
        q = [i for i, line in enumerate(consumers) if "QGMMA" in line]
        loop = "\n".join(consumers[q[0]:q[-1] + 200])  # the block's wgmmas and its promotion
        assert "LDL" not in loop and "STL" not in loop, loop
        assert text.count("WARPGROUP.DEPBAR.LE gsb0, 0x0") == 1 and "gsb0, 0x1" not in text, text
        assert text.count("FFMA") == cfg.bn // 2, text  # the promotion's, once (the offset cases share them)
        assert rep.sass.get("UTMASTG") == 2 and rep.sass.get("STSM") == 2 * -(-cfg.bn // 32), rep.sass
        assert cfg.c_cols == cfg.bn // 2 and cfg.c_swizzle == "none"
        assert cfg.stages == 5 and cfg.smem + 1024 <= 227 * 1024
    # the rule: wide tiles where they cut the SMs' rounds by enough
    assert wide_tiles(4096, 576, 132) == 144 and wide_tiles(128, 18432, 132) == 144
    assert wide_tiles(4096, 2112, 132) is None and wide_tiles(4096, 7168, 132) is None
    assert wide_tiles(256, 4608, 132) is None and wide_tiles(128, 7168, 132) is None


def test_stream_k_kernels_compile_clean():
    """Stream-K (256 x 128, 128 x 128 and 128 x 64 with staged scales): a main loop for the tiles
    taken whole and one for the shared ones (twice the wgmmas), two atomics per shared tile (the
    count, and the first CTA's read of it), no local memory between a block's wgmmas."""
    cfgs = [ScaledConfig("e4m3", "e4m3", "bf16", "block", "block", a_columns=True, bm=bm, bn=bn, stream_k=True)
            for bm, bn in ((256, 128), (128, 128), (128, 64))]
    for cfg, rep in zip(cfgs, compile_reports([(scaled_kernel(c), SIG) for c in cfgs])):
        assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored and not rep.warnings, rep.warnings
        assert rep.sass.get("QGMMA") == (16 if cfg.bm == 256 else 32), rep.sass
        assert rep.sass.get("ATOMG", 0) + rep.sass.get("RED", 0) == 2, rep.sass
        consumers, _ = consumer_region(rep)
        q = [i for i, line in enumerate(consumers) if "QGMMA" in line]
        for first in range(0, len(q), 4):  # each block's four wgmmas, and what runs between them
            block = "\n".join(consumers[q[first]:q[first + 3] + 1])
            assert "LDL" not in block, block
        assert cfg.workspace_floats(132) == 2 * 132 * cfg.bm * cfg.bn and cfg.grid(4096, 2112, 7168, 132) == 132
    assert ScaledConfig(stream_k=True).grid(64, 64, 256, 132) == 2  # at most one CTA per k-block


def test_stream_k_rule_and_blocks_check_their_arguments():
    """Stream-K where 128 x 128 tiles fill their rounds poorly, never for fewer tiles than SMs;
    128 x 64 tiles where twice the tiles fit one round (decoding products too: A's box holds
    only M's rows, kit.box_rows); StreamFixup's, the stream-K producer walk's and stream_walk's
    checks."""
    assert [narrow_tiles(m, n, 132) for m, n in ((16, 7168), (1, 2112), (128, 7168), (64, 8448), (64, 8576),
                                                  (16, 24576), (256, 7168))] == [True] * 4 + [False] * 3
    assert box_rows(16, 128) == 16 and box_rows(1, 128) == 8 and box_rows(200, 128) == 128
    assert ScaledConfig().a_box(16) == (16, 128) and ScaledConfig(bm=256, a_columns=True).a_box(16) == (128, 128)
    assert not stream_tiles(4096, 2112, 7168, 132)  # 544 tiles in 5 rounds: 82%
    assert stream_tiles(128 * 7, 19 * 128, 7168, 132)  # 133 tiles in 2 rounds: 50%
    assert not stream_tiles(2304, 2048, 7168, 132)  # 288 tiles in 3 rounds: 73%
    assert not stream_tiles(8192, 2112, 7168, 132)  # 1088 in 9: 92%
    assert not stream_tiles(128, 7168, 7168, 132)  # 56 tiles: one round of fewer tiles than SMs
    assert not stream_tiles(4096, 2112, 128, 132)  # one K block
    assert not stream_tiles(4096, 2112, 7168, 132, 256, 128)  # measured with 128 x 128 tiles only
    for kw, msg in ((dict(kind="f16.f16.f16"), "f32 accumulator"), (dict(bn=100), "wgmma N"),
                    (dict(consumers=5), "consumers"), (dict(fragments=3), "fragments"),
                    (dict(first_thread=64), "first_thread"), (dict(barrier=0), "barrier")):
        args = {"kind": "f32.e4m3.e4m3", "bn": 128, **kw}
        with pytest.raises(ValueError, match=msg):
            StreamFixup(args.pop("kind"), args.pop("bn"), **args)
    assert StreamFixup("f32.bf16.bf16", 128, fragments=2).tile_floats == 256 * 128
    pipe = TmaPipeline(4, consumers=2)
    with pytest.raises(ValueError, match="stream-K's walk takes no pairs, clusters or K slices"):
        tile_producer(pipe, TileScheduler(128, 128, 64, split=2), 32768, None, stream=True)
    for sched in (TileScheduler(128, 128, 64, split=2), TileScheduler(128, 128, 64, cluster=2), None):
        with pytest.raises(ValueError, match="stream_walk: sched must be a TileScheduler without clusters or K slices"):
            stream_walk(sched, None)


def test_bias_and_activation_in_the_epilogue_compile_clean():
    """A bf16 bias per column and gelu_tanh (one MUFU.TANH a value for a 16-bit output), and an f32
    bias per row with relu through the register stores: nothing spills between a block's wgmmas;
    the staged kernel's epilogue spills a few more scalars than without them (192 bytes against
    108), the register stores' kernel a few of the tile's set-up values (8 bytes), none in the
    main loop."""
    bf16 = ScaledConfig("e4m3", "e4m3", "bf16", "block", "block", a_columns=True, bias="col", bias_type="bf16",
                        activation="gelu_tanh")
    f32 = ScaledConfig("e4m3", "e4m3", "f32", "block", "block", epilogue="direct", bias="row", activation="relu")
    sigs = [SIG[:-1] + (types.uint16[::1],), SIG]
    for cfg, rep in zip((bf16, f32), compile_reports([(scaled_kernel(c), s) for c, s in zip((bf16, f32), sigs)])):
        assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored and not rep.warnings, rep.warnings
        consumers, _ = consumer_region(rep)
        text = "\n".join(consumers)
        q = [i for i, line in enumerate(consumers) if "QGMMA" in line]
        for first in range(0, len(q), 4):
            assert "LDL" not in "\n".join(consumers[q[first]:q[first + 3] + 1])
        assert rep.spill_bytes <= (256 if cfg.epilogue == "tma" else 32), rep.spill_bytes
        if cfg.activation == "gelu_tanh":
            assert text.count("MUFU.TANH") >= 64, text.count("MUFU.TANH")
        else:  # relu: no transcendental
            assert "MUFU.TANH" not in text and "MUFU.EX2" not in text
    with pytest.raises(ValueError, match="bias"):
        ScaledConfig(bias="both")
    with pytest.raises(ValueError, match="activation"):
        ScaledConfig(activation="tanh")


def test_configs_check_their_arguments():
    for kw, msg in ((dict(a_type="f16"), "a_type"), (dict(out="e4m3"), "out"), (dict(a_scale="col"), "a_scale"),
                    (dict(promote=False), "block scales need promotion"),
                    (dict(out="f32", epilogue="tma"), "16-bit C"), (dict(group_m=0), "group_m")):
        with pytest.raises(ValueError, match=msg):
            ScaledConfig(**kw)
    with pytest.raises(ValueError, match="fp8 kind"):
        BlockScaled("f32.bf16.bf16", TmaPipeline(4, consumers=2), a_block=True, b_block=True)
    with pytest.raises(ValueError, match="producers=33 .* and consumers=256"):  # staged: each consumer thread releases
        BlockScaled("f32.e4m3.e4m3", TmaPipeline(4, consumers=2), a_block=True, b_block=True, a_columns=True)
    with pytest.raises(ValueError, match="producers=1 .* and consumers=2"):  # read directly
        BlockScaled("f32.e4m3.e4m3", TmaPipeline(4, consumers=1), a_block=True, b_block=True)
    for kw in (dict(bm=256), dict(bm=192), dict(a_columns=True, bm=64), dict(a_columns=True, bm=192, stream_k=True),
               dict(a_columns=True, bm=192, epilogue="direct", out="f32")):  # (192, 256: A's scales in columns)
        with pytest.raises(ValueError, match="bm must be 128, or 192 or 256"):
            ScaledConfig(**kw)
    with pytest.raises(ValueError, match="bn must be 128, 64 with bm=128"):  # (256 x 64 tiles: a strip's only)
        ScaledConfig(a_columns=True, bm=256, bn=64)
    for kw in (dict(bm=128), dict(bm=256, stream_k=True), dict(bm=256, epilogue="direct")):
        with pytest.raises(ValueError, match="strip takes 256 x 128 tiles"):
            ScaledConfig(a_columns=True, strip=True, **kw)
    for kw in (dict(bn=176), dict(a_columns=True, bn=176, stream_k=True), dict(a_columns=True, bn=192),
               dict(a_columns=True, bn=176, bm=256), dict(a_columns=True, bn=176, out="f32", epilogue="direct")):
        with pytest.raises(ValueError, match=r"bn must be 128, 64 with bm=128, or one of \(144, 160, 176\)"):
            ScaledConfig(**kw)
    with pytest.raises(ValueError, match="cols must be 128, 64, or one of"):
        BlockScaled("f32.e4m3.e4m3", TmaPipeline(4, consumers=2), a_block=True, b_block=True, cols=32)
    tall = TmaPipeline(4, consumers=256)
    for kw, msg in ((dict(b_box=48), "b_box"), (dict(b_box=32), "b_box"), (dict(stride=40000), "stride"),
                    (dict(stride=16384), "stride")):
        with pytest.raises(ValueError, match=msg):
            BlockScaled("f32.e4m3.e4m3", tall, a_block=True, b_block=True, a_columns=True, rows=256, **kw)
    with pytest.raises(ValueError, match="b_box"):  # (two B boxes: 256-row tiles only)
        BlockScaled("f32.e4m3.e4m3", TmaPipeline(6, consumers=256, producers=33), a_block=True, b_block=True,
                    a_columns=True, b_box=64)
    with pytest.raises(ValueError, match="staged scales"):  # wide tiles: the scales staged
        BlockScaled("f32.e4m3.e4m3", TmaPipeline(4, consumers=2), a_block=True, b_block=True, cols=176)
    with pytest.raises(ValueError, match="rows must be 128, 192 or 256"):
        BlockScaled("f32.e4m3.e4m3", TmaPipeline(4, consumers=256, producers=33), a_block=True, b_block=True,
                    a_columns=True, rows=64)
    with pytest.raises(ValueError, match="256-row tiles take A's block scales"):
        BlockScaled("f32.e4m3.e4m3", TmaPipeline(4, consumers=2), a_block=True, b_block=True, rows=256)
    with pytest.raises(ValueError, match="producers=1 .* and consumers=256"):  # 256 rows: the TMA thread stages
        BlockScaled("f32.e4m3.e4m3", TmaPipeline(4, consumers=256, producers=33), a_block=True, b_block=True,
                    a_columns=True, rows=256)
    with pytest.raises(ValueError, match="wgmma N"):
        acc_promote(100)
    with pytest.raises(ValueError, match="multiple of 16"):
        acc_promote_cols(168)


def test_block_scaled_grouped_kernel_compiles_clean():
    """The fp8 grouped GEMM: the block-scaled consumers' 16 QGMMAs (a loop unrolled by two, first
    and last block apart), no spills or local memory, for the 2-D and masked walks and e5m2 x e4m3,
    with a bias per group and an activation (SiLU's exponential on the MUFU), and with A's short
    boxes for tiles of few rows."""
    from nbwgmma.kernels.grouped_scaled import grouped_scaled_kernel

    sig = (types.uint64, types.uint64, types.uint16[:, ::1], types.int32[::1], types.float32[:, :],
           types.float32[:, :, :], types.int32, types.int32, types.int32, types.float32[:, ::1], types.int32,
           types.uint64, types.int32)
    f32_out = sig[:2] + (types.float32[:, ::1],) + sig[3:]
    jobs = [(grouped_scaled_kernel("e4m3", "e4m3"), sig), (grouped_scaled_kernel("e5m2", "e4m3", masked=True), f32_out),
            (grouped_scaled_kernel("e4m3", "e4m3", bias=True, act="silu"), sig),
            (grouped_scaled_kernel("e4m3", "e4m3", short=True), sig)]  # (decoding: A's short boxes)
    for rep, epi in zip(compile_reports(jobs), (False, False, True, False)):
        assert sum(v for op, v in rep.sass.items() if "GMMA" in op) == 16, rep.sass
        # (the epilogue's form kept one scalar of the walk in local memory, reloaded once a tile, until
        # the tile order divided in 32 bits)
        assert rep.spill_bytes == 0 and rep.local_memory_ops == 0, rep
        lines = rep.sass_text.splitlines()
        gmma = [i for i, line in enumerate(lines) if "GMMA" in line]
        assert not any("LDL" in line or "STL" in line for line in lines[gmma[0]:gmma[-1]])
        assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored and not rep.warnings, rep
        assert (rep.sass_full.get("MUFU.EX2", 0) >= 64) == epi, rep.sass_full
    with pytest.raises(ValueError, match="a_type must be one of"):
        grouped_scaled_kernel("bf16", "e4m3")
    with pytest.raises(ValueError, match="activation must be one of"):
        grouped_scaled_kernel("e4m3", "e4m3", act="tanh")
    with pytest.raises(ValueError, match="out must be one of"):
        grouped_scaled_kernel("e4m3", "e4m3", out="e4m3")
