"""The sparse GEMM without a GPU: ptxas's view of the kernel, the metadata layout against the
per-tile model of :mod:`nbwgmma.layout.sparse`, every bad input to ``matmul`` with a ``Sparse24``
(fake CUDA arrays: the checks run before anything touches a device), and the simulator cases
(tests/sim_sparse_gemm_cases.py) in a child process."""

import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from numba import types

import nbwgmma
from nbwgmma import MatmulError, MatmulTypeError, Sparse24
from nbwgmma.kernels.sparse import SparseConfig, sparse_kernel
from nbwgmma.kit import SparseConsumers, TmaPipeline
from nbwgmma.layout import compress_24, meta_registers, meta_registers_pair, prune_24
from nbwgmma.layout.sparse_gemm import PAD_CODE, compress_bits, decompress_bits, gemm_meta, prune_bits, stage_k

HERE = pathlib.Path(__file__).parent


_INS = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.\w+)*)\s*(.*?)\s*;")


def _metadata_writes_in_flight(sass):
    """For each sparse HGMMA of ``sass``: follow every path (both ways at each branch) until the
    ``WARPGROUP.DEPBAR.LE gsb0, n`` that completes its group, and collect the instructions on
    the way that write its metadata register (the last register operand). Returns
    (wgmmas checked, offending lines)."""
    ins, labels = [], {}
    for line in sass.splitlines():
        lab = re.match(r"\s*(\.L_x_\d+):", line)
        if lab:
            labels[lab.group(1)] = len(ins)
        m = _INS.search(line)
        if m:
            ins.append((m.group(2) or "", m.group(3), m.group(4), line.strip()))

    def dest(i):  # the register an instruction writes first, if any
        op, args = i[1], i[2]
        if op.split(".")[0] in ("BRA", "EXIT", "BAR", "SYNCS", "WARPGROUP", "MEMBAR", "FENCE") or op.startswith("ST"):
            return None
        m = re.match(r"(R\d+)", args)
        return m and m.group(1)

    checked, bad = 0, []
    for j, (_, op, args, _) in enumerate(ins):
        if ".SP." not in op:
            continue
        checked += 1
        reg = re.findall(r"\bR\d+\b", args)[-1]
        stack, seen = [(j + 1, 1 if "gsb0" in args else 0)], set()  # (pc, groups closed since, this one's included)
        while stack:
            pc, closed = stack.pop()
            if pc >= len(ins) or (pc, closed) in seen:
                continue
            seen.add((pc, closed))
            pred, op2, args2, line = ins[pc]
            if op2.startswith("WARPGROUP.DEPBAR") and closed and closed - 1 >= int(args2.split(",")[-1], 16):
                continue  # at most n groups younger than this one are left: it is complete
            if dest(ins[pc]) == reg:
                bad.append(line)
            if op2.startswith(("HGMMA", "QGMMA", "IGMMA")) and "gsb0" in args2:
                closed += 1
            if op2 == "EXIT" and not pred:
                continue
            if op2.startswith("BRA"):
                stack.append((labels[re.search(r"(\.L_x_\d+)", args2).group(1)], closed))
                if not pred:
                    continue
            stack.append((pc + 1, closed))
    return checked, bad


@pytest.mark.xdist_group("sparse-gemm-bf16")  # compiled once with the example (tests/test_examples.py)
def test_kernel_compiles_clean(report_once):
    """The ``x @ w24.t()`` kernel (bf16, B K-major, D a transposed view): one wgmma group in flight
    (``DEPBAR.LE gsb0, 1``), the loop two stages a trip, a first and a last odd stage, one metadata
    load per stage after its "full" wait, no spills, no local memory, no serialized wgmma; and on
    no path is a sparse wgmma's metadata register written before the wait that completes it."""
    sig = (types.uint64, types.uint64, types.uint64, types.Array(types.uint16, 2, "A"), types.int32, types.int32,
           types.int32, types.int32)
    rep = report_once(sparse_kernel(SparseConfig("bf16")), sig)
    assert rep.sass_full.get("HGMMA.SP.64x256x32.F32.BF16") == 8, rep.sass_full
    assert rep.sass.get("HGMMA") == 8 and rep.sass.get("LDS") == 4, rep.sass
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0, rep
    assert not rep.wgmma_serialized and not rep.warnings, rep.warnings
    lines = rep.sass_text.splitlines()  # the k-loop: a "full" wait, the metadata load, the sparse wgmmas
    first = min(i for i, line in enumerate(lines) if "HGMMA.SP" in line)
    wait = max(i for i, line in enumerate(lines[:first]) if "SYNCS.PHASECHK" in line)
    assert any("LDS" in line for line in lines[wait:first])
    assert sum("WARPGROUP.DEPBAR.LE gsb0, 0x1" in line for line in lines) == 3
    checked, bad = _metadata_writes_in_flight(rep.sass_text)
    assert checked == 8 and not bad, bad
    assert rep.registers <= 168


def test_fp8_kernel_keeps_both_metadata_registers(report_once):
    """e4m3: two metadata registers per stage (one per k64 step), each unwritten on every path
    until its group's wait; no spills."""
    sig = (types.uint64, types.uint64, types.uint64, types.Array(types.uint16, 2, "A"), types.int32, types.int32,
           types.int32, types.int32)
    rep = report_once(sparse_kernel(SparseConfig("e4m3")), sig)
    assert rep.sass.get("LDS") == 8 and rep.spill_bytes == 0 and rep.local_memory_ops == 0, rep.sass
    assert _metadata_writes_in_flight(rep.sass_text) == (8, [])


def test_transposed_tma_store_kernel_compiles_clean(report_once):
    """``x @ w24.t()`` into a row-major out: each consumer's 64 x 256 rows leave as four
    transposed 64 x 64 blocks (one ``stmatrix.trans`` x4 per 16 columns, one TMA store per
    block), no element-wise global stores, no spills, 5 stages beside the one block."""
    cfg = SparseConfig("bf16", out_blocks=1)
    sig = (types.uint64,) * 4 + (types.int32,) * 4
    rep = report_once(sparse_kernel(cfg), sig)
    assert cfg.stages == 5 and "stmatrix.sync.aligned.m8n8.x4.trans" in rep.ptx
    assert rep.sass.get("STSM") == 16 and rep.sass.get("UTMASTG") == 4 and rep.sass.get("STG", 0) == 0, rep.sass
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0 and not rep.warnings, rep.warnings
    assert _metadata_writes_in_flight(rep.sass_text) == (8, [])
    with pytest.raises(ValueError, match="bn must be 128 or 256"):
        SparseConfig("bf16", bn=192, out_blocks=2)


@pytest.mark.parametrize("dtype, cluster, b_major", [("f16", 2, "K"), ("bf16", 4, "K"), ("bf16", 2, "MN")])
def test_cluster_kernels_multicast_b_without_spills(report_once, dtype, cluster, b_major):
    """Clusters along M: B's share loaded with a multicast TMA (a box of bn / cluster rows, or
    64-column boxes MN-major), the producer's walk over its rank's tiles in its registers (no
    spills: 56 or 64 of them, the consumers' counts within the launch's pool), the same wgmmas."""
    cfg = SparseConfig(dtype, b_major=b_major, cluster=cluster, out_blocks=int(b_major == "K"))
    d = types.uint64 if b_major == "K" else types.Array(types.uint16, 2, "A")
    rep = report_once(sparse_kernel(cfg), (types.uint64,) * 3 + (d,) + (types.int32,) * 4)
    assert cfg.b_rows == (256 // cluster if b_major == "K" else 64)
    assert "2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster" in rep.ptx
    assert "barrier.cluster.arrive" in rep.ptx and "setmaxnreg.inc.sync.aligned.u32" in rep.ptx
    assert rep.sass.get("HGMMA") == 8 and rep.spill_bytes == 0 and rep.local_memory_ops == 0, rep.sass
    assert _metadata_writes_in_flight(rep.sass_text) == (8, [])
    with pytest.raises(ValueError, match="whole swizzle atoms"):
        SparseConfig("f16", bn=64, b_major="MN", cluster=2)
    with pytest.raises(ValueError, match="cluster must be 1, 2 or 4"):
        SparseConfig("f16", cluster=3)


def test_metadata_check_sees_a_rolled_loop_reusing_the_register():
    """The path check itself: a rolled loop whose next load rewrites the register of a wgmma still
    in flight (the form that gave wrong products) is caught across the back edge."""
    sass = """
    /*0100*/                   LDS R152, [R10] ;
.L_x_1:
    /*0110*/                   HGMMA.SP.64x256x32.F32.BF16 R24, gdesc[UR20], R24, R152, 0x0 ;
    /*0120*/                   HGMMA.SP.64x256x32.F32.BF16 R24, gdesc[UR20], R24, R152, 0x1, gsb0 ;
    /*0130*/                   LDS R152, [R11] ;
    /*0140*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
    /*0150*/               @P0 BRA `(.L_x_1) ;
    /*0160*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
    /*0170*/                   EXIT ;
"""
    checked, bad = _metadata_writes_in_flight(sass)
    assert checked == 2 and bad and all("LDS R152" in b for b in bad)
    clean = sass.replace("LDS R152, [R11]", "LDS R153, [R11]")
    assert _metadata_writes_in_flight(clean) == (2, [])


def test_config_and_block_check_their_arguments():
    for kw, msg in ((dict(dtype="f32"), "dtype"), (dict(bn=96), "bn must be"), (dict(b_major="N"), "b_major"),
                    (dict(dtype="e4m3", b_major="MN"), "no transpose"), (dict(group_m=0), "group_m"),
                    (dict(stages=6), "stages must be 2 to 5")):
        with pytest.raises(ValueError, match=msg):
            SparseConfig(**kw)
    with pytest.raises(ValueError, match="consumers=2"):
        SparseConsumers("f32.f16.f16", TmaPipeline(4, consumers=1))
    with pytest.raises(ValueError, match="16-bit or fp8"):
        SparseConsumers("f32.tf32.tf32", TmaPipeline(4, consumers=2))


@pytest.mark.parametrize("esize", [2, 1])
def test_gemm_metadata_is_the_models_registers_per_stage_and_block(esize):
    """Stage kb, block mb of :func:`gemm_meta` = ``meta_registers_pair`` of the stage's two K steps
    (16-bit) or ``meta_registers`` of each (fp8), padding rows and chunks the valid 0b0100."""
    rng = np.random.default_rng(esize)
    kind = "f32.f16.f16" if esize == 2 else "f32.e4m3.e4m3"
    rows, k = 70, 2 * stage_k(esize) + 16
    bits = rng.integers(1, 1 << (8 * esize), (rows, k)).astype(np.uint16 if esize == 2 else np.uint8)
    values, codes = compress_bits(prune_bits(bits, esize), esize)
    np.testing.assert_array_equal(decompress_bits(values, codes), prune_bits(bits, esize))
    meta = gemm_meta(codes, esize)
    sk = stage_k(esize) // 4
    assert meta.shape == (3, 2, 3 - esize, 128)
    for kb in range(3):
        for mb in range(2):
            tile = np.full((64, sk), PAD_CODE, np.uint8)
            part = codes[64 * mb:64 * mb + 64, sk * kb:sk * kb + sk]
            tile[:part.shape[0], :part.shape[1]] = part
            if esize == 2:
                want = [meta_registers_pair(tile[:, :8], tile[:, 8:], kind)]
            else:
                want = [meta_registers(tile[:, :16], kind), meta_registers(tile[:, 16:], kind)]
            np.testing.assert_array_equal(meta[kb, mb], np.stack(want))


def test_bit_level_prune_and_compress_are_the_models():
    rng = np.random.default_rng(7)
    w = rng.standard_normal((16, 32)).astype(np.float16)
    pruned = prune_bits(w.view(np.uint16), 2)
    np.testing.assert_array_equal(pruned.view(np.float16), prune_24(w).astype(np.float16))
    values, codes = compress_bits(pruned, 2)
    v2, c2 = compress_24(pruned.view(np.float16))
    np.testing.assert_array_equal(values.view(np.float16), v2)
    np.testing.assert_array_equal(codes, c2)


class Fake:
    """A CUDA array as far as the checks can tell; ``copy_to_host`` gives ``host`` (a weight for
    ``Sparse24.from_dense``)."""

    def __init__(self, shape, dtype, strides=None, ptr=0x7F0000000000, host=None):
        self.host = host
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": np.dtype(dtype).str, "data": (ptr, False),
                                         "strides": strides, "version": 3}

    def copy_to_host(self):
        return self.host


def _w24(m=64, k=64, dtype="f16"):
    """A Sparse24 over fake arrays (nothing is uploaded or launched by the checks)."""
    return Sparse24(Fake((m, k // 2), np.float16), Fake((2, 128), np.int32), None, (m, k), 2, 1, dtype, "numba", None)


def test_a_weight_that_is_not_24_names_its_first_row_and_columns():
    w = np.zeros((6, 12), np.float16)
    w[:, 1] = 1
    w[3, 4:8] = 1
    w[4, 0:4] = 2
    with pytest.raises(MatmulError, match=r"^Sparse24.from_dense: row 3 is not 2:4 sparse: columns 4\.\.7 hold 4 "
                                          r"nonzeros \(2 such groups of 4 in all\); prune it first"):
        Sparse24.from_dense(Fake(w.shape, np.float16, host=w))
    for bad, msg, exc in ((Fake((8, 6), np.float16), "K a positive multiple of 4", MatmulError),
                          (Fake((8, 8), np.float32), "must be f16, bf16, e4m3 or e5m2", MatmulTypeError),
                          (np.zeros((8, 8), np.float16), "expected a CUDA array", MatmulTypeError)):
        with pytest.raises(exc, match=msg):
            Sparse24.from_dense(bad)
    with pytest.raises(MatmulTypeError, match=r"dtype='bf16' reads 2-byte raw bits; got a weight of u8 \(1-byte"):
        Sparse24.from_dense(Fake((8, 8), np.uint8), dtype="bf16")


BAD = {
    "not-transposed-right": (lambda w: (Fake((8, 64), np.float16), w), {}, MatmulError,
                             "on the right transposed, as F.linear uses a weight"),
    "transposed-left": (lambda w: (w.t(), Fake((64, 8), np.float16)), {}, MatmulError, "on the left as is"),
    "two-sparse": (lambda w: (w, w.t()), {}, MatmulError, "got two Sparse24"),
    "dtype": (lambda w: (Fake((8, 64), np.float32), w.t()), {}, MatmulTypeError, "the Sparse24's type f16; got A of f32"),
    "inner": (lambda w: (Fake((8, 32), np.float16), w.t()), {}, MatmulError, r"inner dimensions differ"),
    "inner-left": (lambda w: (w, Fake((32, 8), np.float16)), {}, MatmulError, r"inner dimensions differ"),
    "bias": (lambda w: (Fake((8, 64), np.float16), w.t()), {"bias": Fake((64,), np.float32)}, MatmulError,
             "bias is not taken so far"),
    "bias-host": (lambda w: (Fake((8, 64), np.float16), w.t()), {"bias": np.ones(64, np.float32)}, MatmulError,
                  "bias is not taken so far .*got bias=a ndarray"),  # (its == is elementwise)
    "alpha": (lambda w: (w, Fake((64, 8), np.float16)), {"alpha": 2.0}, MatmulError, "alpha is not taken"),
    "out-shape": (lambda w: (Fake((8, 64), np.float16), w.t()), {"out": Fake((64, 8), np.float16)}, MatmulError,
                  r"out must have shape \(8, 64\)"),
    "out-type": (lambda w: (Fake((8, 64), np.float16), w.t()), {"out": Fake((8, 64), np.float32)}, MatmulTypeError,
                 "out must have type f16"),
    "out-dtype": (lambda w: (Fake((8, 64), np.float16), w.t()), {"out_dtype": "f32"}, MatmulTypeError,
                  "product is f16"),
    "strides": (lambda w: (Fake((8, 64), np.float16, strides=(130, 2)), w.t()), {"out": Fake((8, 64), np.float16)},
                MatmulError, "16-byte aligned rows"),
    "rows-backward": (lambda w: (Fake((8, 64), np.float16, strides=(-128, 2)), w.t()),
                      {"out": Fake((8, 64), np.float16)}, MatmulError,
                      r"dense operand .* 16-byte aligned rows and address; got shape \(8, 64\), strides \(-128, 2\)"),
    "config": (lambda w: (w, Fake((64, 8), np.float16)), {"config": {"bm": 64}}, MatmulError, "keys among"),
    "host": (lambda w: (np.zeros((8, 64), np.float16), w.t()), {}, MatmulTypeError, "A: expected a CUDA array"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_sparse_inputs_raise_one_line_before_launch(name):
    make, kw, exc, msg = BAD[name]
    a, b = make(_w24())
    with pytest.raises(exc, match=msg) as e:
        nbwgmma.matmul(a, b, **kw)
    assert "\n" not in str(e.value)


def test_fp8_dense_operand_must_be_k_contiguous():
    w24 = _w24(dtype="e4m3")
    x = Fake((8, 64), np.uint8, strides=(1, 8))  # [T, K] with T contiguous
    with pytest.raises(MatmulError, match="K contiguous"):
        nbwgmma.matmul(x, w24.t(), in_dtype="e4m3", out=Fake((8, 64), np.uint16))


def test_in_the_cuda_simulator():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    env.pop("NBWGMMA_DEBUG_WAIT", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-o", "addopts=", "-p", "no:cacheprovider",
                        "-p", "no:hypothesispytest", "-p", "no:benchmark", str(HERE / "sim_sparse_gemm_cases.py")],
                       env=env, capture_output=True, text=True, timeout=600, cwd=HERE.parent)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert " passed" in r.stdout and "failed" not in r.stdout and "skipped" not in r.stdout


def test_prune_must_be_a_bool():
    """prune="no" pruned (a non-empty string is true)."""
    from nbwgmma import MatmulTypeError, Sparse24

    with pytest.raises(MatmulTypeError, match="prune must be True or False; got 'no'"):
        Sparse24.from_dense(object(), prune="no")
