"""matmul's input rules, checked without a GPU (fake CUDA arrays), and the GEMM kernel's SASS."""

import re

import numpy as np
import pytest
from numba import types

from nbwgmma import MatmulError, matmul
from nbwgmma.errors import ConfigError
from nbwgmma.kernels.gemm import GemmConfig, gemm_kernel
from nbwgmma.frontend.shares import TALL_WIDER
from nbwgmma.frontend.tall_tiles import TALL_TILE
from nbwgmma.frontend.tiles import TILES, pick_small_m, pick_tile


class Fake:
    _next = [0x7F0000000000]

    def __init__(self, shape, dtype, device=None):
        ptr = Fake._next[0]
        Fake._next[0] += 1 << 30
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": np.dtype(dtype).str,
                                         "data": (ptr, False), "strides": None, "version": 3}


@pytest.mark.parametrize("a, b, kw, err, msg", [
    (Fake((4,), np.float16), Fake((4, 4), np.float16), {}, MatmulError, "must be 2-D, or batches of matrices"),
    (Fake((8, 16), np.float16), Fake((8, 16), np.float16), {}, MatmulError, "inner dimensions differ"),
    (Fake((8, 16), np.float16), Fake((16, 8), np.float32), {}, TypeError, "same type"),
    (Fake((8, 16), np.int32), Fake((16, 8), np.int32), {}, TypeError, "unsupported input type"),
    (np.zeros((8, 16), np.float16), Fake((16, 8), np.float16), {}, TypeError, "host numpy array"),
    (Fake((8, 16), np.float16), Fake((16, 8), np.float16), {"out": Fake((8, 9), np.float16)}, MatmulError, "shape (8, 8)"),
    (Fake((8, 16), np.float16), Fake((16, 8), np.float16), {"out": Fake((8, 8), np.float32), "out_dtype": "f16"}, MatmulError,
     "type f16"),
    (Fake((8, 16), np.float16), Fake((16, 8), np.float16), {"out": Fake((8, 8), np.int8)}, MatmulError,
     "the type of out"),
    (Fake((8, 16), np.float32), Fake((16, 8), np.float32), {"out": Fake((8, 8), np.float16)}, MatmulError, "tf32"),
    (Fake((8, 16), np.float16), Fake((16, 8), np.float16), {"out_dtype": "s8"}, MatmulError, "out_dtype"),
    (Fake((8, 16), np.float16), Fake((16, 8), np.float16), {"scale_a": 2.0}, MatmulError, "fp8 inputs only"),
    (Fake((8, 16), np.float32), Fake((16, 8), np.float32), {"out_dtype": "bf16"}, MatmulError, "tf32"),
    ("not an array", Fake((16, 8), np.float16), {}, TypeError, "__cuda_array_interface__"),
])
def test_bad_input_is_a_clear_error(a, b, kw, err, msg):
    with pytest.raises(err) as exc:
        matmul(a, b, **kw)
    assert msg in str(exc.value)


def test_out_overlapping_an_input_is_rejected():
    a = Fake((8, 16), np.float16)
    b = Fake((16, 8), np.float16)
    out = Fake((8, 8), np.float16)
    out.__cuda_array_interface__["data"] = (a.__cuda_array_interface__["data"][0] + 64, False)
    with pytest.raises(MatmulError, match="overlaps A"):
        matmul(a, b, out=out)


SIG = {"bf16": types.uint16, "f16": types.float16, "f32": types.float32}


# Every kernel configuration matmul can pick: (kind, out type, A major, B major, epilogue).
CONFIGS = [(kind, out, am, bm_, epi)
           for kind in ("f32.bf16.bf16", "f32.f16.f16")
           for am in ("K", "MN") for bm_ in ("K", "MN")
           for out, epi in (("bf16" if "bf16" in kind else "f16", "tma"), ("f32", "direct"))]
CONFIGS += [(kind, out, "K", "K", epi) for kind in ("f32.e4m3.e4m3", "f32.e5m2.e4m3")
            for out, epi in (("bf16", "tma"), ("f16", "tma"), ("f32", "direct"))]
CONFIGS += [("f32.tf32.tf32", "f32", "K", "K", "direct")]
CONFIGS = [c + (1,) for c in CONFIGS]
#: The library's default kernel (128x256, bf16, TMA epilogue), which test_every_automatic_tile_compiles_clean
#: and the gemm_4_library example compile too: one worker, one compile (conftest.report_once).
DEFAULT_GEMM = pytest.mark.xdist_group("gemm-128x256-bf16-tma")
CONFIGS = [pytest.param(*c, marks=DEFAULT_GEMM) if c == ("f32.bf16.bf16", "bf16", "K", "K", "tma", 1) else c
           for c in CONFIGS]
# Thread-block clusters multicasting B.
CONFIGS += [("f32.bf16.bf16", "bf16", "K", "K", "tma", 2), ("f32.bf16.bf16", "bf16", "MN", "MN", "tma", 2),
            ("f32.f16.f16", "f16", "K", "MN", "tma", 4), ("f32.e4m3.e4m3", "bf16", "K", "K", "tma", 2),
            ("f32.bf16.bf16", "f32", "K", "K", "direct", 2), ("f32.tf32.tf32", "f32", "K", "K", "direct", 4)]


def gemm_job(kind, out, a_major, b_major, epilogue, cluster):
    """(kernel, signature, launch bounds) of one configuration of CONFIGS."""
    cfg = GemmConfig(kind, scaled="e" in kind.split(".")[1], out=out, a_major=a_major, b_major=b_major,
                     epilogue=epilogue, cluster=cluster)
    c = types.uint64 if epilogue == "tma" else SIG[out][:, :]
    return gemm_kernel(cfg), (types.uint64, types.uint64, c, types.int32, types.int32, types.int32, types.float32), None


@pytest.mark.parametrize("kind, out, a_major, b_major, epilogue, cluster", CONFIGS)
def test_gemm_kernel_sass(kind, out, a_major, b_major, epilogue, cluster, report_once, report_batch):
    cfg = GemmConfig(kind, scaled="e" in kind.split(".")[1], out=out, a_major=a_major, b_major=b_major,
                     epilogue=epilogue, cluster=cluster)
    if (kind, out, a_major, b_major, epilogue, cluster) == ("f32.bf16.bf16", "bf16", "K", "K", "tma", 1):
        # the default kernel: shared with other tests (DEFAULT_GEMM)
        rep = report_once(*gemm_job(kind, out, a_major, b_major, epilogue, cluster)[:2])
    else:  # compiled with the other configurations of its batch (tests/conftest.py)
        rep = report_batch(gemm_job)
    op = "QGMMA" if cfg.esize == 1 else "HGMMA"
    assert rep.sass.get(op, 0) == 4 and rep.sass["UTMALDG"] >= 1
    if epilogue == "tma":
        # a tile's 16-bit results leave during the next tile's first stages (Cooperative.beside):
        # their stores in the loop, after a tile of fewer stages than parts, and after the last tile
        assert rep.sass["UTMASTG"] >= 1 and rep.sass["STSM"] == 3 * cfg.bn // 16 and rep.sass.get("STG", 0) == 0
    if cluster > 1:  # multicast loads, remote releases, cluster barriers at start and end
        assert ".multicast::cluster" in rep.ptx and "mbarrier.arrive.release.cta.shared::cluster" in rep.ptx
        assert rep.sass["UCGABAR_ARV"] == 2 and rep.sass["UCGABAR_WAIT"] == 2
        # Releases are CTA-scope remote arrives: the only GPU-wide fences are the two cluster
        # barriers' (a cluster-scope release per arrive halved the speed on an H100).
        assert rep.sass_full.get("MEMBAR.ALL.GPU", 0) == 2
    else:
        assert "multicast" not in rep.ptx and rep.sass.get("UCGABAR_WAIT", 0) == 0
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0
    assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored, rep.warnings


@DEFAULT_GEMM
def test_a_tiles_stores_run_under_the_next_tiles_wgmmas(report_once):
    """The default kernel (128 x 256, two parts of 128 columns a consumer): the stmatrix and TMA
    stores of a tile's results sit between the next tile's wgmmas of a stage and the wait that
    keeps one group in flight (``Cooperative.beside``), not between the tiles."""
    rep = report_once(*gemm_job("f32.bf16.bf16", "bf16", "K", "K", "tma", 1)[:2])
    lines = rep.sass_text.splitlines()
    last = max(i for i, line in enumerate(lines) if "HGMMA" in line)
    first = min(i for i, line in enumerate(lines) if "HGMMA" in line)
    keep = min(i for i, line in enumerate(lines) if "WARPGROUP.DEPBAR.LE gsb0, 0x1" in line)
    assert first < last < keep, (first, last, keep)
    under = [line for line in lines[last:keep] if "STSM" in line or "UTMASTG" in line]
    assert sum("STSM" in line for line in under) == 256 // 16 and sum("UTMASTG" in line for line in under) == 4, under


def test_gemm_config_rules():
    assert GemmConfig(bm=192, bn=128, stages=5).consumer_regs == 152
    assert GemmConfig().consumer_regs == 232
    with pytest.raises(ValueError, match="setmaxnreg split needs"):
        GemmConfig(bm=192, bn=128, consumer_regs=232)
    # 384 threads launch with 168 registers each: 504 per thread slot, not 512 (48 + 2 x 232
    # hung on an H100 in setmaxnreg.inc).
    with pytest.raises(ValueError, match="has 504"):
        GemmConfig(producer_regs=48, consumer_regs=232)
    assert GemmConfig(cluster=4, b_major="MN").producer_regs == 48
    with pytest.raises(ValueError, match="227 KiB"):
        GemmConfig(stages=5)
    with pytest.raises(ValueError, match="wgmma N"):
        GemmConfig(bn=260)
    assert GemmConfig(epilogue="tma").stages == 4 and GemmConfig(epilogue="tma").c_parts == 2
    assert GemmConfig(epilogue="tma", c_parts=1).stages == 3 and GemmConfig().stages == 4
    assert GemmConfig(epilogue="tma", bn=192).c_parts == 1
    with pytest.raises(ValueError, match="16-bit inputs"):
        GemmConfig("f32.e4m3.e4m3", b_major="MN")
    f32 = GemmConfig(out="f32", epilogue="tma")  # (f32 values: 128B-swizzled 32-column boxes, parts that keep 4 stages)
    assert (f32.c_box, f32.c_parts, f32.stages) == (32, 4, 4), f32
    assert GemmConfig(out="f32", epilogue="tma", bn=128).c_parts == 2  # (128 x 128: 6 stages)
    with pytest.raises(ValueError, match="f32 values take epilogue='direct'"):
        GemmConfig(out="f32", epilogue="tma", c_transposed=True)
    with pytest.raises(ValueError, match="of 32 for f32 values"):
        GemmConfig(out="f32", epilogue="tma", c_parts=4, bn=192)  # (48 columns)
    with pytest.raises(ValueError, match="fp8 codes take epilogue='direct'"):
        GemmConfig(out="e4m3", epilogue="tma", c_transposed=True)
    with pytest.raises(ValueError, match="amax goes with an fp8 output"):
        GemmConfig(amax=True)
    assert GemmConfig(out="e4m3", epilogue="tma", amax=True).c_parts == 1  # (a plain amax: the whole part)
    assert GemmConfig(out="e4m3", epilogue="tma", amax=True, act="relu").c_parts == 4  # (with an epilogue: 64 columns)
    assert GemmConfig(out="e4m3", amax=True).zero_padding and not GemmConfig(out="e4m3", amax=True, act="sigmoid").zero_padding
    with pytest.raises(ValueError, match="cluster must be 1, 2 or 4"):
        GemmConfig(cluster=3)
    with pytest.raises(ValueError, match="whole swizzle atoms"):
        GemmConfig(bn=64, b_major="MN", cluster=2)
    assert GemmConfig(bn=64, cluster=4).cluster == 4  # 16 K-major rows per CTA: two atoms
    # clusters along N share A: its rows split into whole atoms, B's need not
    assert GemmConfig(bm=256, bn=40, cluster=2, multicast="A").multicast == "A"
    assert "cluster=2 sharing A" in repr(GemmConfig(bm=256, bn=160, cluster=2, multicast="A"))
    with pytest.raises(ValueError, match="splits A's 64 rows into whole swizzle atoms"):
        GemmConfig(bm=64, a_major="MN", cluster=2, multicast="A")
    for bad in (dict(multicast="A"), dict(multicast="C", cluster=2)):
        with pytest.raises(ValueError, match="multicast .* must be 'B', or 'A' with a cluster of 2 or 4"):
            GemmConfig(**bad)
    # 256-row tiles: two consumers of 128 rows (240 registers each), four of 64 with split-K
    c = GemmConfig(bm=256, bn=168, epilogue="tma")
    assert (c.consumers, c.blocks, c.producer_regs, c.consumer_regs, c.c_box) == (2, 2, 24, 240, 168)
    # their C in parts of 32 columns or more through two slots where that makes room for a fourth stage
    assert (c.stages, c.c_parts, c.c_slots) == (3, 1, 1)  # (7 parts of 24 ran slower)
    c = GemmConfig(bm=256, bn=160, epilogue="tma")
    assert (c.stages, c.c_parts, c.c_slots, c.c_box) == (4, 5, 2, 32)
    c = GemmConfig(bm=256, bn=152, epilogue="tma")  # (19 parts of 8 columns: not taken)
    assert (c.stages, c.c_parts, c.c_slots) == (3, 1, 1)
    assert GemmConfig(bm=256, bn=160, epilogue="tma", stages=3).c_slots == 1  # (3 stages fit C whole)
    c = GemmConfig(bm=256, bn=160, epilogue="tma", stages=4)  # the default's own stages: its parts too
    assert (c.stages, c.c_parts, c.c_slots) == (4, 5, 2)
    for kw, msg in (({"epilogue": "direct", "c_parts": 3}, "c_parts must divide BN"),
                    ({"epilogue": "tma", "bn": 192, "c_slots": 2}, "give c_parts too"),
                    ({"epilogue": "tma", "bn": 256, "c_parts": 4, "c_slots": 3}, "c_slots must be 1, or 2")):
        with pytest.raises(ValueError, match=msg):
            GemmConfig(**kw)
    assert (GemmConfig(bm=256, bn=128, split=2).consumers, GemmConfig(bm=256, bn=128, consumers=4).blocks) == (4, 1)
    for kw, msg in (({"bm": 256, "bn": 192}, "at most 168 columns"), ({"bm": 128, "bn": 256, "consumers": 1}, "168"),
                    ({"bm": 256, "bn": 152, "split": 2}, "at most 128 columns"),
                    ({"bm": 192, "bn": 128, "consumers": 1}, "bm / 128 for bm 128 or 256"),
                    ({"bm": 256, "bn": 128, "consumers": 2, "stream_k": 1}, "without split, stream_k"),
                    ({"bm": 128, "bn": 192, "epilogue": "tma", "c_transposed": True, "c_parts": 2},
                     "transposed C of 64-column multiples"),
                    ({"bm": 256, "bn": 152, "c_transposed": True, "epilogue": "tma", "c_parts": 18},
                     "one multiple of 8 but the last"),
                    ({"bm": 128, "bn": 200, "c_transposed": True, "epilogue": "direct"}, "through the TMA epilogue")):
        with pytest.raises(ValueError, match=msg):
            GemmConfig(**kw)
    # a transposed C (swapped): 64 x 64 blocks; other widths in parts of one multiple of 8 columns but
    # the last, stored in boxes of 8 rows of out (the rows of C^T's transposed tile)
    for kw, want in (({"bm": 256, "bn": 152}, (4, (80, 72), 8)),
                     ({"bm": 256, "bn": 152, "c_parts": 3}, (4, (56, 56, 40), 8)),
                     ({"bm": 256, "bn": 144, "c_parts": 2}, (4, (72, 72), 8)),
                     ({"bm": 128, "bn": 256}, (4, (128, 128), 64)),
                     ({"bm": 256, "bn": 152, "c_parts": 5, "c_slots": 2}, (4, (32, 32, 32, 32, 24), 8))):
        c = GemmConfig(epilogue="tma", c_transposed=True, **kw)
        assert (c.stages, c.c_widths, c.c_box) == want, (kw, c)
    # narrow widths: one unswizzled box per 64 rows, or two halves where a stage more fits (224)
    assert (GemmConfig(bn=144, epilogue="tma").c_box, GemmConfig(bn=224, epilogue="tma").c_parts) == (144, 2)
    assert (GemmConfig(bn=224, epilogue="tma").stages, GemmConfig(bn=232, epilogue="tma").c_parts) == (4, 1)
    with pytest.raises(ValueError, match="multiple of 8"):
        GemmConfig(bn=232, epilogue="tma", c_parts=2)


@pytest.mark.parametrize("kind, a_major, b_major, cluster", [
    ("f32.bf16.bf16", "K", "K", 1), ("f32.bf16.bf16", "MN", "MN", 1), ("f32.e4m3.e4m3", "K", "K", 1),
    ("f32.tf32.tf32", "K", "K", 1), ("f32.bf16.bf16", "K", "K", 2), ("f32.bf16.bf16", "K", "MN", 4)])
def test_expect_tx_matches_the_boxes(kind, a_major, b_major, cluster):
    """The protocol check matmul runs before a plan's first launch: the stage's expect_tx byte
    count equals the bytes of the TMA boxes the producer issues."""
    from nbwgmma.frontend.plan import Plan
    from nbwgmma.tma import TensorMap

    plan = Plan.__new__(Plan)
    plan.cfg = GemmConfig(kind, a_major=a_major, b_major=b_major, out="f32", cluster=cluster)
    dt = kind.split(".")[1]
    es = {"bf16": 2, "e4m3": 1, "tf32": 4}[dt]
    npdt = {1: np.uint8, 2: np.float16, 4: np.float32}[es]
    big = Fake((1024, 1024), npdt)
    bk = plan.cfg.bk

    def tmap(major, rows):
        box = (rows, bk) if major == "K" else (bk, 64)
        return TensorMap(big, box, dtype=dt, swizzle="128B", encode=False)

    # With a cluster each CTA loads a 1/cluster share of B (K-major: a box of 256/cluster rows).
    plan.check_expect_tx(tmap(a_major, 128), tmap(b_major, 256 // cluster))
    with pytest.raises(RuntimeError, match="expect_tx announces"):
        plan.check_expect_tx(TensorMap(big, (16, 16), dtype=dt, swizzle="none", encode=False),
                              tmap(b_major, 256 // cluster))
    if cluster > 1 and b_major == "K":  # a whole B box per CTA would be counted cluster times
        with pytest.raises(RuntimeError, match="expect_tx announces"):
            plan.check_expect_tx(tmap(a_major, 128), tmap(b_major, 256))


def test_clusters_sharing_a_load_a_share_of_a_and_compile_clean():
    """``multicast="A"``: each CTA of a cluster loads ``bm / cluster`` rows of A (one box; the
    peers' shares complete the stage's bytes) and all of B; 256 x 160 in clusters of two compiles
    to multicast loads without spills; wider 256-row tiles are refused in clusters."""
    from nbwgmma.frontend.plan import Plan
    from nbwgmma.report import compile_report
    from nbwgmma.tma import TensorMap

    plan = Plan.__new__(Plan)
    plan.cfg = cfg = GemmConfig(bm=256, bn=160, cluster=2, multicast="A", epilogue="tma", out="bf16")
    big = Fake((1024, 1024), np.float16)
    share = TensorMap(big, (128, 64), dtype="bf16", swizzle="128B", encode=False)
    plan.check_expect_tx(share, TensorMap(big, (160, 64), dtype="bf16", swizzle="128B", encode=False))
    with pytest.raises(RuntimeError, match="expect_tx announces"):  # a B share instead
        plan.check_expect_tx(TensorMap(big, (256, 64), dtype="bf16", swizzle="128B", encode=False),
                             TensorMap(big, (80, 64), dtype="bf16", swizzle="128B", encode=False))
    with pytest.raises(ValueError, match="in clusters take tiles of at most 160 columns"):
        GemmConfig(bm=256, bn=168, cluster=2, multicast="A")
    sig = (types.uint64, types.uint64, types.uint64, types.int32, types.int32, types.int32, types.float32)
    rep = compile_report(gemm_kernel(cfg), sig)
    assert rep.ptx.count(".multicast::cluster") >= 1 and rep.sass["UCGABAR_WAIT"] == 2
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0, rep


@pytest.mark.parametrize("bm, bn, swapped", [
    pytest.param(*t, False, marks=DEFAULT_GEMM) if t == (128, 256) else (*t, False)
    for t in (*TILES, TALL_TILE, *((192, w) for w in TALL_WIDER))] + [(192, w, True) for w in (TALL_TILE[1], *TALL_WIDER)])
def test_every_automatic_tile_compiles_clean(bm, bn, swapped, report_once, report_batch):
    """The tiles matmul picks by shape (smaller ones for small M x N; 192 x 144, 160 and 176: three
    consumers, also swapped, their C^T stored transposed: tall_tiles.pick_swapped_tall)."""
    sig = (types.uint64, types.uint64, types.uint64, types.int32, types.int32, types.int32, types.float32)

    def job(bm, bn, swapped):
        return gemm_kernel(GemmConfig("f32.bf16.bf16", bm=bm, bn=bn, epilogue="tma", c_transposed=swapped)), sig, None

    # the default tile is shared with other tests; the others compile together (tests/conftest.py)
    rep = report_once(*job(bm, bn, swapped)[:2]) if (bm, bn) == (128, 256) else report_batch(job)
    assert rep.sass["HGMMA"] == 4 and rep.sass["UTMALDG"] >= 1 and rep.sass["UTMASTG"] >= 1
    assert rep.spill_bytes == 0 and not rep.wgmma_serialized and not rep.setmaxnreg_ignored


def test_192_row_tiles_wider_than_176_columns_are_refused():
    """Three consumers of 64 rows spill from 184 columns and do not compile at 208: a clear ConfigError,
    not ptxas's failure at the launch. A transposed C of 176 columns goes out in thirds (in halves it
    spilled 72 bytes)."""
    for bn in (184, 192, 208, 256):
        with pytest.raises(ConfigError, match="at most 176 columns"):
            GemmConfig("f32.bf16.bf16", bm=192, bn=bn, epilogue="tma")
    assert GemmConfig("f32.bf16.bf16", bm=192, bn=176, epilogue="tma", c_transposed=True).c_widths == (64, 64, 48)
    assert GemmConfig("f32.bf16.bf16", bm=192, bn=160, epilogue="tma", c_transposed=True).c_parts == 2


def test_192_row_tile_with_a_fused_bias_and_activation_compiles_clean():
    """A fused product's 192-row tile (192 x 144: the wider ones spill there, so tall_tiles.best_tall keeps
    them to plain products) with a bias per column, read as matmul passes it (a contiguous vector),
    and gelu_tanh: no spills, no local memory."""
    from nbwgmma.report import compile_report

    cfg = GemmConfig("f32.bf16.bf16", bm=192, bn=144, epilogue="tma", bias="col", act="gelu_tanh",
                     bias_type="bf16")
    sig = (types.int64, types.int64, types.int64, types.int32, types.int32, types.int32, types.float32,
           types.Array(types.uint16, 1, "C"))
    rep = compile_report(gemm_kernel(cfg), sig)
    assert rep.sass["HGMMA"] >= 1 and rep.spill_bytes == 0 and rep.local_memory_ops == 0, rep


def test_tile_choice_by_shape(monkeypatch):
    import sys

    monkeypatch.setattr(sys.modules["nbwgmma.launch"], "device_limits", lambda device=None: {"multiprocessors": 132})
    pick = pick_tile
    assert pick(8192, 8192) == (128, 256)
    assert pick(512, 8192) == (128, 256)  # 128 tiles of 128 x 256
    assert pick(128, 8192) == (64, 128)  # 32 tiles of 128 x 256 would leave 100 SMs idle
    assert pick(256, 256) == (64, 64)
    assert pick(256, 256, cluster=2) == (64, 128)  # B shares of whole 64-column boxes
    assert pick(256, 256, cluster=4) == (128, 256)
    # 480 tiles of 128 x 256 fill 3.6 waves of 132 SMs; 640 of 128 x 192 fill 4.85
    assert pick(5000, 3000) == (128, 192)
    assert pick(5000, 3000, cluster=2) == (128, 256)
    for m, n in ((4096, 4096), (16384, 16384), (8192, 28672)):
        assert pick(m, n) == (128, 256)
    # a batch fills the waves with every product's tiles (one 1024^2 product alone: 64 x 128)
    assert pick(1024, 1024) == (64, 128) and pick(1024, 1024, count=64) == (128, 256)
    # ... and what a tile computes past a product's edge weighs: N = 128 in 128 x 128 tiles
    assert pick(2048, 128, count=32) == (128, 128)


def test_small_m_choice(monkeypatch):
    """At most 256 rows of 16-bit inputs whose 64 x 128 tiles fit one wave: those tiles with 8
    stages, K in 4 slices (2 for fewer k-blocks) where 4 slices of every tile fit the SMs."""
    import sys

    monkeypatch.setattr(sys.modules["nbwgmma.launch"], "device_limits", lambda device=None: {"multiprocessors": 132})
    t = {"bm": 64, "bn": 128, "stages": 8}
    a_mn = {"a_kmajor": False}  # a column-major A: no swap
    assert pick_small_m(16, 4096, 4096, 16, **a_mn) == t | {"split": 4}  # 32 tiles x 4 slices of 16 k-blocks
    assert pick_small_m(16, 4096, 2048, 16, **a_mn) == t | {"split": 2}  # 32 k-blocks: 2 slices
    assert pick_small_m(16, 4096, 1024, 16, **a_mn) == t  # 16 k-blocks: uncut
    assert pick_small_m(32, 8192, 8192, 16, **a_mn) == t  # 64 tiles: uncut (32 rows: 64 x 128 tiles stay)
    # Swapped (C^T = B^T A^T): N in 64-row tiles, the rows in a tile 8, 16, 32, 40, 48 or 64 wide.
    sw = {"swap": 1, "bm": 64, "stages": 16}
    assert pick_small_m(48, 4096, 4096, 16) == sw | {"bn": 48, "stages": 15, "cluster_k": 2}
    assert pick_small_m(33, 4096, 2048, 16) == sw | {"bn": 40}
    assert pick_small_m(16, 4096, 4096, 16) == sw | {"bn": 16, "cluster_k": 2}  # 64 tiles x 2 halves in clusters
    assert pick_small_m(1, 4096, 1024, 16) == sw | {"bn": 8}  # 16 k-blocks: uncut; one row, 8 columns
    assert pick_small_m(40, 4096, 1024, 16) == sw | {"bn": 40} and pick_small_m(41, 4096, 1024, 16) == sw | {"bn": 48}
    assert pick_small_m(32, 8192, 8192, 16) == sw | {"bn": 32}  # 128 tiles: uncut
    assert pick_small_m(16, 14336, 4096, 16) == sw | {"bn": 16}  # 224 tiles: within two waves
    assert pick_small_m(64, 2048, 8192, 16) == sw | {"bn": 64, "stages": 14, "split": 4}
    assert pick_small_m(16, 28672, 8192, 16) is None  # 448 tiles: the tile model
    assert pick_small_m(16, 4096, 4096, 8) == sw | {"bn": 16}  # fp8 too (narrow tiles: no spills); 32 k-blocks
    # K slices: none below 48 k-blocks; 4 where 4 fit one wave; 2 where B stays in L2 (<= 32 MiB), as halves
    # in clusters where they fill 80% of the SMs
    assert pick_small_m(16, 4096, 2048, 16) == sw | {"bn": 16}  # 32 k-blocks: uncut
    assert pick_small_m(16, 2048, 3072, 16) == sw | {"bn": 16, "split": 4}  # 32 tiles, 48 k-blocks
    assert pick_small_m(16, 2560, 6144, 16) == sw | {"bn": 16, "split": 2}  # 40 tiles (80 CTAs: no clusters), B 30 MiB
    assert pick_small_m(16, 2560, 8192, 16) == sw | {"bn": 16}  # B 40 MiB: uncut
    assert pick_small_m(64, 4096, 4096, 16) == sw | {"bn": 64, "stages": 13, "cluster_k": 2}  # (the exchange buffer)
    assert pick_small_m(16, 3072, 8192, 16) == sw | {"bn": 16}  # B 48 MiB: from DRAM, uncut
    assert pick_small_m(16, 4096, 8192, 16) == sw | {"bn": 16}  # B 64 MiB
    assert pick_small_m(128, 4096, 4096, 16) == t | {"bn": 64}  # 64 tiles: 128 of 64 columns fit
    assert pick_small_m(64, 8192, 8192, 8) == t | {"bn": 64}  # fp8 swaps up to 32 rows only
    assert pick_small_m(32, 8192, 8192, 8) == sw | {"bn": 32}
    assert pick_small_m(256, 4096, 14336, 16) == t  # 128 tiles
    assert pick_small_m(200, 1024, 8192, 16) == t | {"split": 4}  # 32 tiles
    assert pick_small_m(128, 14336, 4096, 16) is None  # 224 tiles: more than a wave, the tile model decides
    assert pick_small_m(512, 4096, 4096, 16) is None
    assert pick_small_m(128, 8192, 8192, 8) == t  # fp8: the same tiles, never cut
    assert pick_small_m(16, 4096, 4096, 8, a_kmajor=False) == t
    assert pick_small_m(16, 4096, 4096, 32) is None  # tf32: the tile model
    assert pick_small_m(32, 8192, 8192, 16, cluster=2) is None
    for m, n, k in ((16, 4096, 4096), (200, 1024, 8192), (256, 4096, 14336)):
        c = pick_small_m(m, n, k, 16, a_kmajor=False)
        GemmConfig("f32.bf16.bf16", epilogue="tma", **c)
        GemmConfig("f32.bf16.bf16", epilogue="direct", out="f32", a_major="MN", b_major="MN", **c)


@pytest.mark.parametrize("kind, out, epilogue, bm, bn, split", [
    ("f32.bf16.bf16", "bf16", "tma", 128, 256, 4), ("f32.bf16.bf16", "bf16", "tma", 128, 128, 2),
    ("f32.f16.f16", "f32", "direct", 128, 256, 3), ("f32.bf16.bf16", "bf16", "tma", 128, 192, 3),
    ("f32.bf16.bf16", "bf16", "tma", 64, 64, 2),  # (few_tiles.pick_k_split's)
    ("f32.bf16.bf16", "bf16", "tma", 64, 248, 4), ("f32.f16.f16", "bf16", "tma", 128, 136, 3),  # (pick_k_slices_64's, pick_k_slices')
])
def test_split_k_kernels_compile_clean(kind, out, epilogue, bm, bn, split, report_batch):
    """Split-K: the same main loop (4 HGMMA, no spills), one atomic per slice for the tile
    count, and the partial tiles moved as coalesced f32 rows (no local memory)."""
    def job(kind, out, epilogue, bm, bn, split):
        cfg = GemmConfig(kind, bm=bm, bn=bn, out=out, epilogue=epilogue, split=split, scaled="e4m3" in kind)
        c_t = types.uint64 if epilogue == "tma" else types.float32[:, :]
        return gemm_kernel(cfg), (types.uint64, types.uint64, c_t, types.int32, types.int32, types.int32,
                                  types.float32, types.float32[::1], types.int32[::1]), None

    rep = report_batch(job)  # compiled with the other configurations of its batch (tests/conftest.py)
    assert rep.sass["HGMMA"] == 4
    assert rep.sass.get("ATOMG", 0) + rep.sass.get("RED", 0) >= 1
    assert rep.spill_bytes == 0 and rep.stack_frame == 0 and rep.local_memory_ops == 0
    assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored


def test_stream_k_kernels_compile_clean():
    """Stream-K (128 x 128 with the TMA epilogue, 128 x 96 with the direct one): two main loops
    (4 HGMMA each: the whole tiles of the first waves, then the shared pieces), two atomics (the tile count, and the read of it by the CTA that finishes a shared
    tile without parking), no spills; the config's rules."""
    from nbwgmma.report import compile_reports

    jobs = []
    for bn, epilogue in ((128, "tma"), (96, "direct")):
        cfg = GemmConfig("f32.bf16.bf16", bm=128, bn=bn, out="bf16", epilogue=epilogue, stream_k=1)
        c_t = types.uint64 if epilogue == "tma" else types.uint16[:, :]
        jobs.append((gemm_kernel(cfg), (types.uint64, types.uint64, c_t, types.int32, types.int32, types.int32,
                                        types.float32, types.float32[::1], types.int32[::1])))
    for rep in compile_reports(jobs):
        assert rep.sass["HGMMA"] == 8 and rep.sass.get("ATOMG", 0) + rep.sass.get("RED", 0) == 2, rep.sass
        assert rep.spill_bytes == 0 and rep.local_memory_ops == 0
        assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored
    for kw, msg in ((dict(split=2), "without K slices"), (dict(cluster=2), "without K slices or clusters"),
                    (dict(bn=256, epilogue="tma"), "at most 128 columns"),
                    (dict(bn=192, epilogue="direct"), "at most 128 columns")):
        with pytest.raises(ValueError, match=msg):
            GemmConfig("f32.bf16.bf16", stream_k=1, **kw)


def test_split_and_stream_k_kernels_build_for_every_tile_height():
    """Split-K and stream-K kernels of 64, 128 and 256 rows (one, two and four consumer warpgroups
    sharing the tile's counters through kit.StreamFixup) build (the kernel's Python is run; the
    compile is left to the tests above)."""
    for bm in (64, 128, 256):
        for kw in (dict(split=2), dict(stream_k=1)):
            cfg = GemmConfig("f32.bf16.bf16", bm=bm, bn=128, out="bf16", **kw)
            assert cfg.consumers == bm // 64 and gemm_kernel(cfg) is not None


@pytest.mark.parametrize("kind, out, epilogue, bn, bm", [("f32.bf16.bf16", "bf16", "tma", 128, 128),
                                                         ("f32.bf16.bf16", "f32", "direct", 192, 128),
                                                         ("f32.e4m3.e4m3", "bf16", "tma", 256, 128),
                                                         ("f32.f16.f16", "f16", "direct", 160, 128),
                                                         ("f32.bf16.bf16", "bf16", "direct", 16, 64),
                                                         ("f32.bf16.bf16", "f32", "direct", 64, 64)])
def test_cluster_k_kernels_compile_clean(kind, out, epilogue, bn, bm, report_batch):
    """K halves in clusters of two: the consumer that sends its rows issues one st.async (STAS)
    per four values, the keeper reads them back with 16-byte loads; cluster barriers at the
    start and the end only; no spills, no local memory, the four wgmmas unserialized. 64-row
    tiles (one consumer, the few-row products' narrow tiles) the same."""

    def job(kind, out, epilogue, bn, bm):
        cfg = GemmConfig(kind, bm=bm, bn=bn, out=out, epilogue=epilogue, cluster_k=2, scaled="e4m3" in kind)
        assert cfg.consumers == bm // 64
        c = types.uint64 if epilogue == "tma" else SIG[out][:, :]
        return gemm_kernel(cfg), (types.uint64, types.uint64, c, types.int32, types.int32, types.int32,
                                  types.float32), None

    rep = report_batch(job)
    op = "QGMMA" if "e4m3" in kind else "HGMMA"
    # (the 16-column tile's k-loop is unrolled three times, as without cluster_k)
    assert rep.sass.get(op, 0) == (12 if bn == 16 else 4) and rep.sass["STAS"] == bn // 8 and rep.sass["LDS"] >= bn // 8
    assert "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32" in rep.ptx
    assert rep.sass["UCGABAR_ARV"] == 2 and rep.sass["UCGABAR_WAIT"] == 2
    assert "multicast" not in rep.ptx
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0
    assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored, rep.warnings


def test_cluster_k_config_rules():
    from nbwgmma.kit import ClusterSplitK

    assert repr(ClusterSplitK(64, consumers=1)) == "ClusterSplitK(bn=64, consumers=1)"
    for bad in (3, True, "1"):
        with pytest.raises(ValueError, match="consumers must be 2 .128-row tiles. or 1 .64-row tiles."):
            ClusterSplitK(64, consumers=bad)
    assert GemmConfig(bm=64, bn=16, cluster_k=2).consumers == 1
    cfg = GemmConfig(bm=128, bn=128, epilogue="tma", cluster_k=2)
    assert (cfg.cta_cluster, cfg.x_bytes, cfg.producer_regs) == (2, 32768, 56)
    assert cfg.stages * cfg.stage_bytes + cfg.c_bytes + cfg.x_bytes == cfg.smem_bytes <= 227 * 1024
    for kw, msg in ((dict(bm=256), "64- or 128-row tiles"), (dict(cluster=2), "no cluster"), (dict(split=2), "split"),
                    (dict(stream_k=1), "stream_k"), (dict(cluster_k=3), "cluster_k must be 1 or 2"),
                    (dict(bn=256, epilogue="direct"), "at most 192 columns")):
        with pytest.raises(ValueError, match=msg):
            GemmConfig(**({"bm": 128, "bn": 128, "cluster_k": 2} | kw))


def test_split_k_config_rules():
    with pytest.raises(ValueError, match="split must be"):
        GemmConfig("f32.bf16.bf16", split=5)
    with pytest.raises(ValueError, match="without clusters"):
        GemmConfig("f32.bf16.bf16", split=2, cluster=2)
    with pytest.raises(ValueError, match="16-bit inputs"):
        GemmConfig("f32.e4m3.e4m3", split=2, scaled=True)
    assert GemmConfig("f32.e4m3.e4m3", bm=64, bn=16, split=2, scaled=True).split == 2  # narrow fp8 tiles: no spills
    assert GemmConfig("f32.bf16.bf16", split=2).key() != GemmConfig("f32.bf16.bf16").key()


class _Strided:
    def __init__(self, shape, dtype, strides=None):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": np.dtype(dtype).str,
                                         "data": (0x7F0000000000, False), "strides": strides, "version": 3}


def test_default_plan_takes_narrow_tiles_for_one_wave(monkeypatch):
    """One wave of 128 x 128 tiles leaving SMs idle (640 x 2048 on 132 SMs: 80 tiles) becomes 128 x 80
    tiles (130) with the TMA epilogue (one unswizzled box per 64 rows) and the 7 stages that fit
    beside its C tile where B is K-major (the direct epilogue and 8 stages for an f32 out); not with
    B N-major, not for several waves, not where the caller set the stages, the epilogue, a cluster
    or K slices."""
    import nbwgmma.launch
    from nbwgmma.frontend.args import described
    from nbwgmma.frontend.plan import Plan

    monkeypatch.setattr(nbwgmma.launch, "device_limits", lambda device=None: {"multiprocessors": 132})

    def plan(m, n, b_kmajor=True, k=512, **opts):
        ia = described(_Strided((m, k), np.uint16), "A")._replace(dtype="bf16")
        ib = described(_Strided((k, n), np.uint16, (2, 2 * k) if b_kmajor else None), "B")._replace(dtype="bf16")
        odt, oes = ("f32", np.float32) if opts.pop("f32_out", False) else ("bf16", np.uint16)
        io = described(_Strided((m, n), oes), "out")._replace(dtype=odt)
        return Plan("f32.bf16.bf16", odt, ia, ib, io, opts, False)

    p = plan(640, 2048)
    assert (p.cfg.bm, p.cfg.bn, p.cfg.stages, p.cfg.epilogue, p.cfg.c_box) == (128, 80, 7, "tma", 80)
    assert p.config == {"bm": 128, "bn": 80}
    p = plan(640, 2048, f32_out=True)
    assert (p.cfg.bm, p.cfg.bn, p.cfg.stages, p.cfg.epilogue) == (128, 80, 8, "direct")
    assert plan(640, 2048, swap=0).cfg.bn == 80  # (the autotuner's probe)
    # 128 x 192 tiles filling their wave poorly (384 x 6144: 96 of 132) become 128 x 144 (129), 5 stages
    assert (plan(384, 6144).cfg.bn, plan(384, 6144).cfg.stages) == (144, 5)
    for p in (plan(640, 2048, b_kmajor=False), plan(640, 2048, stages=4), plan(640, 2048, cluster=2)):
        assert (p.cfg.bm, p.cfg.bn) == (128, 128), p.cfg
    assert plan(640, 2048, epilogue="tma").cfg.epilogue == "tma"
    assert (plan(2048, 2048).cfg.bn, plan(8192, 8192, k=4096, stages=4).cfg.bn) == (256, 256)
    # 128 x 192 for 128 x 256 where its fuller last wave does 1.5% more real work per SM slot (pick_192:
    # 8192^3, 20.8 waves against 15.5), from K = 2048, for 16-bit outputs by TMA, B either way, no tile
    # given; not where the two fill alike (6144 x 12288) or the padding costs more (16384 x 4096)
    assert plan(8192, 8192, k=4096).config == {"bm": 128, "bn": 192}
    assert plan(8192, 8192, k=4096, b_kmajor=False).cfg.bn == 192
    for p in (plan(8192, 8192, k=4096, f32_out=True), plan(8192, 8192, k=4096, stages=4)):
        assert (p.cfg.bm, p.cfg.bn) == (128, 256), p.config
    # below K = 2048 pick_192 stays out, but the tile model's short-K share of 128 x 192 (tiles.SHORT_K_SHARES)
    # takes it there itself
    for k in (512, 1024):
        assert plan(8192, 8192, k=k).cfg.bn == 192
    assert plan(16384, 4096, k=4096).cfg.bn == 256 and plan(6144, 12288, k=4096).cfg.bn == 160  # (256 x 160)
    # 128 x 256 tiles filling their waves poorly over several (2048 x 11008: 6 waves, 87%) become 256 x 168
    # tiles (4 waves, 100%) in two consumers of 128 rows; 256 x 128 only with B N-major (128 x 256 there)
    p = plan(2048, 11008)
    assert (p.cfg.bm, p.cfg.bn, p.cfg.consumers, p.cfg.blocks, p.cfg.c_box) == (256, 168, 2, 2, 168), p.config
    assert (plan(2048, 11008, b_kmajor=False).cfg.bm, plan(2048, 11008, stages=3).cfg.bm) == (128, 128)
    assert plan(640, 7168).cfg.bm == 128  # one wave of 256-row tiles: the narrow 128-row tile
    # a tall product whose swapped tiles fill the waves better: C^T = B^T A^T in 128 x 192 tiles
    # (3072 x 1024: 96 tiles of 128 x 256 on 132 SMs; swapped, 128 of 128 x 192), stored transposed by TMA
    # cluster_k alone: 128-row tiles of at most 192 columns (128 x 128 where the model picks wider)
    for m, n in ((4096, 4096), (768, 1408)):
        p = plan(m, n, cluster_k=2)
        assert (p.cfg.bm, p.cfg.bn, p.cfg.cluster_k) == (128, 128, 2) and not p.swap, p.config
    p = plan(3072, 1024, k=4096)
    assert p.swap and (p.cfg.bm, p.cfg.bn, p.cfg.epilogue, p.cfg.c_transposed) == (128, 192, "tma", True)
    assert p.mnk == (1024, 3072, 4096)
    p = plan(3072, 1024, k=4096, f32_out=True)  # (an f32 out: stored from the registers)
    assert p.swap and (p.cfg.epilogue, p.cfg.c_transposed) == ("direct", False)
    assert p.config == {"bm": 128, "bn": 192, "swap": 1}
    for p in (plan(3072, 1024, k=4096, swap=0), plan(3072, 1024, k=4096, cluster=2), plan(3072, 1024, k=4096, stages=3),
              plan(3072, 1024, f32_out=True)):  # (the last: K of 512, too short to swap with register stores)
        assert not p.swap, p.config
    assert plan(3072, 1024).swap  # (K of 512: the transposed TMA stores pay at any K)
    # a given config the C tile does not fit beside: the register stores (the TMA epilogue where asked)
    p = plan(3072, 1024, k=4096, swap=1, bm=128, bn=192, stages=5)
    assert (p.cfg.epilogue, p.cfg.stages) == ("direct", 5)
    with pytest.raises(MatmulError, match="stages"):
        plan(3072, 1024, k=4096, swap=1, bm=128, bn=192, stages=5, epilogue="tma")
    assert plan(2048, 11008, c_parts=2).cfg.bn == 256  # (a given c_parts keeps the tile model's plain tiles)


def test_a_plain_stream_k_config_takes_128_column_tiles(monkeypatch):
    """``config={"stream_k": 1}`` alone: 128 x 128 tiles (64 x 128 for at most 64 rows), no K
    slices or swap from the small-M choice, no narrow tile; with the TMA epilogue where out takes it."""
    import nbwgmma.launch
    from nbwgmma.frontend.args import described
    from nbwgmma.frontend.plan import Plan

    monkeypatch.setattr(nbwgmma.launch, "device_limits", lambda device=None: {"multiprocessors": 132})
    for m, n, k in ((8192, 8192, 4096), (2048, 2048, 4096), (200, 1024, 8192), (16, 4096, 4096), (640, 2048, 4096)):
        ia = described(_Strided((m, k), np.uint16), "A")._replace(dtype="bf16")
        ib = described(_Strided((k, n), np.uint16, (2, 2 * k)), "B")._replace(dtype="bf16")
        io = described(_Strided((m, n), np.uint16), "out")._replace(dtype="bf16")
        cfg = Plan("f32.bf16.bf16", "bf16", ia, ib, io, {"stream_k": 1}, False).cfg
        assert (cfg.bm, cfg.bn, cfg.stream_k, cfg.split, cfg.epilogue) == (64 if m <= 64 else 128, 128, 1, 1, "tma")


def test_maps_of_rows_off_the_sectors_promote_128_bytes():
    """A tensor map whose rows start off the 32-byte sectors (bf16 rows of 6000 bytes: an N-major B
    of N = 3000) promotes 128 bytes into L2 (26-29% slower reads at 256 on an H100, 11-17% of it
    back at 128); aligned rows 256."""
    from nbwgmma.frontend.views import l2_promotion

    assert l2_promotion("bf16", ((4000, 3000), (3000, 1))) == "128B"
    assert l2_promotion("f16", ((4000, 1000), (1000, 1))) == "128B"
    for dtype, pitch in (("bf16", 3072), ("bf16", 3008), ("bf16", 4000), ("e4m3", 4096), ("tf32", 3000)):
        assert l2_promotion(dtype, ((64, pitch), (pitch, 1))) == "256B", (dtype, pitch)
    assert l2_promotion("bf16", ((3000,), (1,))) == "256B"  # (one dimension: no rows)
    # (a grouped B [G, K, N]: its rows' pitch, not only the groups', decides)
    assert l2_promotion("bf16", ((8, 4000, 3000), (4000 * 3000, 3000, 1))) == "128B"
    assert l2_promotion("bf16", ((8, 4000, 3072), (4000 * 3072, 3072, 1))) == "256B"
    assert l2_promotion("f64", ((64, 3000), (3000, 1))) == "256B"  # (no TMA type: the map itself refuses it)


def test_scratch_is_per_stream_and_per_thread_on_the_per_thread_default_stream():
    """Split-K's and stream-K's scratch (partial tiles, tile counters) is shared by the launches of
    one stream, which run in order: keyed by the raw handle, except the per-thread default stream,
    one handle naming a different stream in each host thread, whose launches may run at once."""
    import threading

    from nbwgmma.frontend.args import PER_THREAD_STREAM, stream_key

    keys = []
    t = threading.Thread(target=lambda: keys.append((stream_key(PER_THREAD_STREAM), stream_key(0), stream_key(77))))
    t.start()
    t.join()
    theirs = keys[0]
    assert stream_key(PER_THREAD_STREAM) != theirs[0] and stream_key(PER_THREAD_STREAM) == stream_key(PER_THREAD_STREAM)
    assert (stream_key(0), stream_key(77)) == theirs[1:] == (0, 77)


def test_staged_copy_keeps_its_buffer_and_prepared_kernel(monkeypatch):
    """A plan's staging copy of an operand TMA cannot read (frontend.views.StagedCopy): one buffer
    and one prepared copy kernel for all its calls; each call hands the kernel that call's operand
    (seen flat from its lowest element, with the geometry in elements: rows, padded columns,
    count, columns, the first element, strides, a batch's two dimensions) on the call's stream;
    the 64-bit kernel for negative strides."""
    import numpy as np

    import nbwgmma.launch as launch_module
    from nbwgmma.frontend import views
    from nbwgmma.frontend.arrays import ArrayInfo
    from nbwgmma.kernels.copy import pad_copy_kernel, pad_copy_wide_kernel

    calls, prepared = [], []

    class Prepared:
        def __call__(self, src, dst, *params, stream):
            calls.append((src.__cuda_array_interface__, dst, params, stream))

    def prepare(kernel, grid, block, args):
        prepared.append((kernel, grid, block))
        return Prepared()

    class Cuda:
        @staticmethod
        def device_array(shape, dtype, stream=0):
            return np.zeros(shape, dtype)

    monkeypatch.setattr(launch_module, "prepare", prepare)
    monkeypatch.setattr(views, "cuda", Cuda)
    one = ArrayInfo(0x1000, (300, 513), (1026, 2), 2, "bf16", 0, "torch")  # K = 513: rows 1026 bytes apart
    st = views.StagedCopy(one, False)
    for ptr, stream in ((0x1000, 7), (0x9000, 7), (0x5000, 9)):
        assert st(one._replace(ptr=ptr), stream) is st.dst
    assert st.dst.shape == (300, 576) and len(prepared) == 1 and prepared[0][0] is pad_copy_kernel
    flat = (300, 576, 1, 513, 0, 513, 1, 1, 0, 0, 0)  # rows padded to 128 bytes (1026 -> 1152)
    assert [(c[0]["data"][0], c[0]["shape"], c[2], c[3]) for c in calls] == [
        (0x1000, (153900,), flat, 7), (0x9000, (153900,), flat, 7), (0x5000, (153900,), flat, 9)]
    assert len({id(c[1]) for c in calls}) == 1 and calls[0][1].shape == (300 * 576,)
    # a batch of B (K x N, N contiguous) in two strides, copied transposed: (count, N, Kpad)
    b = ArrayInfo(0x2000, (513, 72), (144, 2), 2, "bf16", 0, "torch")
    bt = views.StagedCopy(b, True, (6, ((2, 400000), (3, 100000))))
    bt(b, 0)
    assert bt.dst.shape == (6, 72, 576) and calls[-1][0]["shape"] == (200000 + 100000 + 512 * 72 + 72,)
    assert calls[-1][2] == (72, 576, 6, 513, 0, 72, 1, 3, 200000, 50000, 1)
    # B = w.t() of a row-major w (72, 513): K contiguous, read through w itself, not transposed
    wt = ArrayInfo(0x3000, (513, 72), (2, 1026), 2, "bf16", 0, "torch")
    views.StagedCopy(wt, True)(wt, 0)
    assert calls[-1][2] == (72, 576, 1, 513, 0, 513, 1, 1, 0, 0, 0)
    # rows in reverse (a negative stride): from the lowest row, its first element 299 rows up
    rev = ArrayInfo(0x400000, (300, 513), (-1026, 2), 2, "bf16", 0, "cupy")
    views.StagedCopy(rev, False)(rev, 0)
    assert prepared[-1][0] is pad_copy_wide_kernel and calls[-1][0]["data"][0] == 0x400000 - 299 * 1026
    assert calls[-1][2] == (300, 576, 1, 513, 299 * 513, -513, 1, 1, 0, 0, 0)
    # a stride that is not a whole number of elements: refused
    with pytest.raises(ValueError, match="not multiples of its element size"):
        views.StagedCopy(one._replace(strides=(1027, 2)), False)
    # past the bytes kept in all: a fresh buffer at each call
    monkeypatch.setattr(views, "STAGING_KEEP_BYTES", 0)
    loose = views.StagedCopy(one, False)
    assert not loose.kept and loose(one, 0) is not loose(one, 0)


@pytest.mark.parametrize("dtype, layout, m, n, k, staged", [
    ("bf16", "KK", 8192, 8192, 8136, (False, True)),    # rows of 16272 bytes: 16 off the 32-byte sectors; B's copy
    ("bf16", "KK", 16384, 4096, 4104, (False, True)),   # B's copy's share 650/16384
    ("bf16", "KK", 4096, 4096, 4072, (False, True)),    # 0.16
    ("bf16", "KK", 4096, 1024, 4072, (False, True)),
    ("bf16", "KK", 2048, 2048, 2040, (False, False)),   # 0.32: past 0.25, and A is not staged instead
    ("bf16", "KK", 1920, 512, 8136, (False, False)),
    ("bf16", "KK", 8192, 8192, 8000, (False, False)),   # 16000-byte rows: 64-byte aligned, read in place
    ("bf16", "KK", 4096, 4096, 4096, (False, False)),
    ("bf16", "KN", 5000, 3000, 4000, (False, True)),    # N-major B of 6000-byte rows (swapped: the kernel's A)
    ("e4m3", "KK", 8192, 8192, 8208, (False, True)),    # 1-byte elements: 8208 = 16 mod 32
    ("tf32", "KK", 4096, 16384, 4100, (False, True)),   # 4-byte elements: 16400 = 16 mod 32
    ("tf32", "KK", 8192, 8192, 8196, (False, True)),    # B's copy of 269 MB, within half the kept bytes
    ("bf16", "KK", 8192, 8192, 8, (False, False)),      # rows of 16 bytes: shorter than a box row
    ("bf16", "KN", 8192, 40, 8192, (False, False)),     # N-major B of 80-byte rows: the same
    ("bf16", "KK", 16384, 16384, 16392, (False, False)),  # B's copy of 539 MB: past half the kept bytes
])
def test_operands_whose_rows_lie_off_the_sectors_are_staged_where_that_pays(sms_132, monkeypatch, dtype, layout, m,
                                                                             n, k, staged):
    """An operand TMA could read in place but whose rows start 16 bytes off the 32-byte sectors
    (frontend.views.misaligned_rows) is read through its K-major staging copy (128-byte rows) where
    its copy's estimated share of the product's time is within MAX_COPY_SHARE and its bytes within
    half of STAGING_KEEP_BYTES: the kernel's B, or its A where B's rows are aligned, never both;
    other operands are read in place. MAX_COPY_SHARE = 0 turns it off."""
    from nbwgmma.precompile import cpu_plan

    plan = cpu_plan(dtype, layout, {}, rows=m, n=n, k=k)
    # (a swapped plan's A is the caller's B)
    a_path, b_path = (plan.b_path, plan.a_path) if plan.swap else (plan.a_path, plan.b_path)
    assert (a_path[1] is None, b_path[1] is None) == staged
    assert all(p[0] == "K" for p, s in zip((a_path, b_path), staged) if s)
    if any(staged):
        from nbwgmma.frontend import views

        monkeypatch.setattr(views, "MAX_COPY_SHARE", 0)
        plan = cpu_plan(dtype, layout, {}, rows=m, n=n, k=k)
        assert plan.a_path[1] is not None and plan.b_path[1] is not None


@pytest.mark.parametrize("count, broadcast_b, staged", [(1, False, True), (2, False, True), (4, False, False),
                                                     (4, True, True)])
def test_a_batchs_copies_count_every_matrix(sms_132, count, broadcast_b, staged):
    """A batch of bf16 4096 x 16384 x 4104 products (rows 16 bytes off the sectors; B's copy's share
    0.16) stages B while its copies of every matrix come to at most half of STAGING_KEEP_BYTES (136 MB
    a product; a B broadcast to every product copied once); A is read in place."""
    from nbwgmma.frontend.arrays import ArrayInfo
    from nbwgmma.frontend.plan import Plan

    m, n, k = 4096, 16384, 4104
    ia = ArrayInfo(1 << 40, (m, k), (k * 2, 2), 2, "bf16", 0, "numba")
    ib = ArrayInfo(2 << 40, (k, n), (2, k * 2), 2, "bf16", 0, "numba")  # K-major B
    io = ArrayInfo(3 << 40, (m, n), (n * 2, 2), 2, "bf16", 0, "numba")
    batch = (count, m * k * 2 + 64, 0 if broadcast_b else n * k * 2 + 64, m * n * 2)
    plan = Plan("f32.bf16.bf16", "bf16", ia, ib, io, {}, False, batch=batch)
    assert (plan.a_path[1] is None, plan.b_path[1] is None) == (False, staged)


def test_padded_copy_kernels_compile_to_tiles():
    """The staging copies' kernels (64 x 64 tiles, a transposed source through shared memory)
    compile for sm_90a with no spills and at most 64 registers (4 blocks of 256 threads an SM):
    16 loads and 16 stores of global memory a thread per tile, all loads issued before the first
    store (so that 16 are in flight), the 32-bit kernel's index math cheaper than the 64-bit
    one's. (With 4 elements a thread, 80 registers and 64-bit index math a copy ran at a third of
    the memory's speed, bound by its instructions.)"""
    from numba import types

    from nbwgmma.kernels.copy import pad_copy_kernel, pad_copy_wide_kernel
    from nbwgmma.report import compile_reports

    sig = (types.Array(types.uint16, 1, "C"), types.Array(types.uint16, 1, "C")) + (types.int64,) * 11
    narrow, wide = compile_reports([(pad_copy_kernel, sig), (pad_copy_wide_kernel, sig)])
    for rep in (narrow, wide):
        assert rep.spill_bytes == 0 and rep.local_memory_ops == 0 and rep.registers <= 64
        assert rep.sass.get("LDG", 0) == 16 and rep.sass.get("STG", 0) == 16
        assert rep.sass.get("STS", 0) == 16 and rep.sass.get("LDS", 0) == 16 and rep.sass.get("BAR", 0) == 2
        seq = "".join(op[0] for op in re.findall(r"\b(LDG|STG)\.", rep.sass_text))
        assert seq == "L" * 16 + "S" * 16, seq
    assert sum(narrow.sass.values()) < 0.9 * sum(wide.sass.values())


@pytest.mark.parametrize("bm, bn, kw", [(128, 256, ()), (256, 128, (("consumers", 2),)), (128, 128, (("split", 2),)),
                                        (128, 256, (("bias", "col"), ("act", "gelu_tanh"))),
                                        (128, 256, (("batched", True),)),
                                        (256, 128, (("batched", True), ("consumers", 2)))])
def test_rows_epilogue_kernels_compile_clean(bm, bn, kw, report_batch):
    """The rows epilogue (16-bit rows TMA cannot write): each 64 x 64 part staged with 16 stmatrix
    and read back a row per warp (16 4-byte shared loads a thread), stored in 4-byte pieces where a
    row's pair is aligned (one STG.E a load) and 2-byte ones otherwise, with no spills: a
    predicated split of the value into halves once kept both halves of every store alive (1176
    bytes of spills)."""
    def job(bm, bn, kw):
        kw = dict(kw)  # (the batch's keys: hashable)
        cfg = GemmConfig("f32.bf16.bf16", bm=bm, bn=bn, out="bf16", epilogue="rows", **kw)
        c = types.uint16[:, :, :] if kw.get("batched") else types.uint16[:, :]  # (a batch's: 3-D)
        sig = [types.uint64, types.uint64, c, types.int32, types.int32, types.int32, types.float32]
        if kw.get("split"):
            sig += [types.float32[::1], types.int32[::1]]
        if kw.get("bias"):
            sig.append(types.float32[::1])
        if kw.get("batched"):
            sig.append(types.int32)
        return gemm_kernel(cfg), tuple(sig), None

    rep = report_batch(job)
    cfg = GemmConfig("f32.bf16.bf16", bm=bm, bn=bn, out="bf16", epilogue="rows", **dict(kw))
    assert cfg.c_widths == (64,) * (bn // 64) and cfg.c_bytes == cfg.consumers * 8192
    stores = cfg.blocks * bn // 64  # 64 x 64 parts a consumer stores at each call site
    assert rep.sass["STSM"] == 4 * stores  # (stmatrix.x4: 16 columns each)
    assert rep.sass_full.get("LDS", 0) >= 16 * stores
    assert rep.sass_full.get("STG.E", 0) >= 16 * stores and rep.sass.get("UTMASTG", 0) == 0
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0
    assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored, rep.warnings


def test_rows_epilogue_config_rules():
    """epilogue='rows' takes 16-bit outputs (of one product or a batch) in parts of 64 columns, no
    cluster_k."""
    from nbwgmma.errors import ConfigError

    assert GemmConfig("f32.bf16.bf16", bm=128, bn=192, out="bf16", epilogue="rows", batched=True).c_parts == 3
    for kw, msg in (({"out": "f32"}, "out=f32"), ({"bn": 224}, "bn=224"),
                    ({"cluster_k": 2, "bm": 128, "bn": 128}, "cluster_k=2"), ({"out": "e4m3"}, "out=e4m3")):
        with pytest.raises(ConfigError, match=msg):
            GemmConfig("f32.bf16.bf16", epilogue="rows", **{"out": "bf16", **kw})
    with pytest.raises(ConfigError, match="'tma', 'direct' or 'rows'"):
        GemmConfig(epilogue="register")
    with pytest.raises(ConfigError, match="one block a consumer"):  # (c_slots=2 put consumer 1's past the smem)
        GemmConfig("f32.bf16.bf16", bm=128, bn=128, epilogue="rows", c_parts=2, c_slots=2)
