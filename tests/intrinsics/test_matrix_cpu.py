"""ldmatrix/stmatrix forms: PTX text and SASS (LDSM/STSM) for every .x1/.x2/.x4, with and
without .trans; and the swizzled accumulator store."""

import numpy as np
import pytest
from numba import cuda, types

from nbwgmma.intrinsics import *  # noqa: F401,F403
from nbwgmma.layout import tile_block_offset, transposed_block_offset
from nbwgmma.report import compile_report


def ldmatrix_kernel(num, trans):
    src = f"""
def k(out):
    buf = cuda.shared.array(512, np.uint16)
    a = smem_addr(buf) + (cuda.threadIdx.x % 32) * 16
    r = ldmatrix(a, {num}, {trans})
    stmatrix(a, r, {trans})
    out[0] = r[0]
"""
    ns = dict(globals())
    exec(src, ns)
    return ns["k"], (types.uint32[:],), None


@pytest.mark.parametrize("num", [1, 2, 4])
@pytest.mark.parametrize("trans", [0, 1])
def test_ldmatrix_stmatrix_forms(num, trans, report_batch):
    rep = report_batch(ldmatrix_kernel)  # compiled with the other forms (tests/conftest.py)
    t = ".trans" if trans else ""
    assert f"ldmatrix.sync.aligned.m8n8.x{num}{t}.shared::cta.b16" in rep.ptx
    assert f"stmatrix.sync.aligned.m8n8.x{num}{t}.shared::cta.b16" in rep.ptx
    assert rep.sass["LDSM"] == 1 and rep.sass["STSM"] == 1
    assert rep.local_memory_ops == 0


def store_swizzled_kernel(swizzle):
    ns = dict(globals(), SW=swizzle)
    exec("def k2(out):\n    acc = acc_zeros('f32.bf16.bf16', 64)\n    buf = cuda.shared.array(4096, np.float32)\n"
         "    acc_store_swizzled(acc, 'f32.bf16.bf16', smem_addr(buf), cuda.threadIdx.x % 128, 128, SW)\n"
         "    out[0] = buf[cuda.threadIdx.x]\n", ns)
    return ns["k2"], (types.float32[:],), None


@pytest.mark.parametrize("swizzle", ["none", "32B", "64B", "128B"])
def test_acc_store_swizzled_compiles(swizzle, report_batch):
    rep = report_batch(store_swizzled_kernel)  # compiled with the other swizzles (tests/conftest.py)
    assert rep.ptx.count("st.shared.v2.b32") == 16 and rep.sass["STS"] >= 1  # (row neighbours in pairs)
    assert rep.local_memory_ops == 0


def test_acc_store_swizzled_rejects_bad_rows():
    ns = dict(globals())
    exec("def k3(out):\n    acc = acc_zeros('f32.bf16.bf16', 64)\n"
         "    acc_store_swizzled(acc, 'f32.bf16.bf16', 0, 0, 24, '128B')\n", ns)
    with pytest.raises(Exception, match="multiple of 16"):
        compile_report(ns["k3"], (types.float32[:],))


def store_fp8_swizzled_kernel(fmt):
    ns = dict(globals(), FMT=fmt)
    exec("def k5(out):\n    acc = acc_zeros('f32.bf16.bf16', 64)\n    buf = cuda.shared.array(4096, np.uint8)\n"
         "    acc_store_fp8_swizzled(acc, smem_addr(buf), cuda.threadIdx.x % 128, 64, '64B', FMT)\n"
         "    out[0] = buf[cuda.threadIdx.x]\n", ns)
    return ns["k5"], (types.uint8[:],), None


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_acc_store_fp8_swizzled_compiles(fmt, report_batch):
    """A 64 x 64 f32 fragment as fp8 codes: 16 pair conversions and 16 16-bit shared stores."""
    rep = report_batch(store_fp8_swizzled_kernel)  # compiled with the other format (tests/conftest.py)
    assert rep.ptx.count(f"cvt.rn.satfinite.{fmt}x2.f32") == 16 and rep.ptx.count("st.shared.b16") == 16
    assert rep.sass_full.get("STS.U16") == 16 and rep.local_memory_ops == 0, rep.sass_full


def test_acc_store_fp8_swizzled_rejects_bad_arguments():
    for args, msg in (("64, '64B', 'e4m4'", "fmt must be one of"), ("128, '64B', 'e4m3'", "at most the swizzle"),
                      ("24, 'none', 'e4m3'", "multiple of 16")):
        ns = dict(globals())
        exec(f"def k6(out):\n    acc = acc_zeros('f32.bf16.bf16', 64)\n    acc_store_fp8_swizzled(acc, 0, 0, {args})\n",
             ns)
        with pytest.raises(Exception, match=msg):
            compile_report(ns["k6"], (types.float32[:],))


def stmatrix_swizzled_kernel(swizzle, row_bytes, n):
    ns = dict(globals(), SW=swizzle, RB=row_bytes, N=n)
    exec("def k4(src, out):\n    t = cuda.threadIdx.x % 128\n    acc = acc_load('f32.bf16.bf16', N, src, t, 0, 0)\n"
         "    buf = cuda.shared.array(16384, np.uint16)\n"
         "    acc_stmatrix_swizzled(acc_to_bf16x2(acc), smem_addr(buf), t, RB, SW)\n"
         "    out[0] = buf[cuda.threadIdx.x]\n", ns)
    return ns["k4"], (types.float32[:, :], types.uint16[:]), None


@pytest.mark.parametrize("swizzle, row_bytes, n", [(sw, rb, n) for sw, rb in (("none", 128), ("32B", 32), ("64B", 64),
                                                                              ("128B", 128))
                                                    for n in (16, 64, 200, 256) if rb <= 2 * n])
def test_acc_stmatrix_swizzled_compiles(swizzle, row_bytes, n, report_batch):
    rep = report_batch(stmatrix_swizzled_kernel)  # compiled with the other cases (tests/conftest.py)
    assert rep.ptx.count("stmatrix.sync.aligned.m8n8.x4.shared::cta.b16") == n // 16
    assert rep.ptx.count("stmatrix.sync.aligned.m8n8.x2.shared::cta.b16") == (n % 16) // 8
    assert rep.sass["STSM"] == -(-n // 16) and rep.sass["F2FP"] == n // 4
    assert rep.local_memory_ops == 0 and rep.spill_bytes == 0


@pytest.mark.parametrize("stmt, message", [
    ("acc_stmatrix_swizzled(acc_to_bf16x2(acc), 0, 0, 256, '128B')", "at most 128 bytes"),
    ("acc_stmatrix_swizzled(acc_to_bf16x2(acc), 0, 0, 48, 'none')", "multiple of 32"),
    ("acc_stmatrix_swizzled(acc, 0, 0, 128, '128B')", "tuple of 2\\*k u32"),
    ("acc_stmatrix_swizzled(acc_to_bf16x2(acc), 0, 0, 128, '16B')", "swizzle must be one of"),
])
def test_acc_stmatrix_swizzled_typing_errors(stmt, message):
    ns = dict(globals())
    exec(f"def k5(out):\n    acc = acc_zeros('f32.bf16.bf16', 128)\n    {stmt}\n", ns)
    with pytest.raises(Exception, match=message):
        compile_report(ns["k5"], (types.float32[:],))


def stmatrix_transposed_kernel(n):
    ns = dict(globals(), N=n)
    exec("def k7(src, out):\n    t = cuda.threadIdx.x % 128\n    acc = acc_load('f32.bf16.bf16', N, src, t, 0, 0)\n"
         "    buf = cuda.shared.array(16384, np.uint16)\n"
         "    acc_stmatrix_transposed(acc_to_bf16x2(acc), smem_addr(buf), t)\n"
         "    out[0] = buf[cuda.threadIdx.x]\n", ns)
    return ns["k7"], (types.float32[:, :], types.uint16[:]), None


@pytest.mark.parametrize("n", [16, 24, 64, 152, 256])
def test_acc_stmatrix_transposed_compiles(n, report_batch):
    """One ``stmatrix.x4.trans`` per 16 columns, one ``.x2.trans`` for an odd last 8, no local memory."""
    rep = report_batch(stmatrix_transposed_kernel)  # compiled with the other widths (tests/conftest.py)
    assert rep.ptx.count("stmatrix.sync.aligned.m8n8.x4.trans.shared::cta.b16") == n // 16
    assert rep.ptx.count("stmatrix.sync.aligned.m8n8.x2.trans.shared::cta.b16") == (n % 16) // 8
    assert rep.sass["STSM"] == -(-n // 16) and rep.local_memory_ops == 0 and rep.spill_bytes == 0


def test_acc_stmatrix_transposed_typing_errors():
    ns = dict(globals())
    exec("def k8(out):\n    r = np.uint32(0)\n"
         "    acc_stmatrix_transposed((r, r, r), 0, 0)\n", ns)
    with pytest.raises(Exception, match="multiple of 8"):
        compile_report(ns["k8"], (types.float32[:],))


def test_transposed_block_offset_is_the_swizzled_transpose():
    r, c = np.meshgrid(np.arange(64), np.arange(256), indexing="ij")
    off = transposed_block_offset(r, c)
    assert np.unique(off).size == off.size and off.min() == 0 and off.max() == 256 * 128 - 2
    assert np.all(off // 128 == c)  # column c of the fragment: row c of the tile
    assert np.all((off % 128) // 16 == (r // 8) ^ (c % 8)) and np.all(off % 16 == (r % 8) * 2)


@pytest.mark.parametrize("esize, row_bytes, swizzle", [(2, 128, "128B"), (2, 64, "64B"), (2, 32, "32B"),
                                                       (4, 128, "128B"), (4, 64, "none")])
def test_tile_block_offset_is_a_dense_bijection(esize, row_bytes, swizzle):
    n = 256
    r, c = np.meshgrid(np.arange(64), np.arange(n), indexing="ij")
    off = tile_block_offset(r, c, esize, row_bytes, swizzle)
    assert off.min() == 0 and np.all(off % esize == 0)
    assert np.unique(off).size == off.size and off.max() == 64 * n * esize - esize
    # Each 16-byte chunk holds 16 / esize neighbours of one row (what stmatrix and TMA move).
    assert np.all(off[:, 1::2] - off[:, ::2] == esize) if esize == 2 else True


def test_acc_load_compiles_without_local_memory():
    ns = dict(globals())
    exec("def k6(src, out):\n    acc = acc_load('f32.bf16.bf16', 256, src, cuda.threadIdx.x % 128, 0, 0)\n"
         "    acc_store(acc, 'f32.bf16.bf16', out, cuda.threadIdx.x % 128, 0, 0)\n", ns)
    rep = compile_report(ns["k6"], (types.float32[:, :], types.float32[:, :]))
    assert rep.local_memory_ops == 0 and rep.spill_bytes == 0 and rep.sass["LDG"] == 128


def test_acc_load_and_store_move_row_neighbours_in_pairs_on_contiguous_rows():
    ns = dict(globals())
    exec("def k7(src, out):\n    acc = acc_load('f32.bf16.bf16', 64, src, cuda.threadIdx.x % 128, 0, 0)\n"
         "    acc_store(acc, 'f32.bf16.bf16', out, cuda.threadIdx.x % 128, 0, 0)\n", ns)
    rep = compile_report(ns["k7"], (types.float32[:, ::1], types.uint16[:, ::1]))
    # 32 values per thread: 16 pairs (one 8-byte load, one 4-byte store of two bf16 each) where the
    # thread's whole part lies inside and is aligned, else 32 single-element accesses
    assert rep.sass_full.get("LDG.E.64") == 16 and rep.sass_full.get("STG.E") == 16, rep.sass_full
    assert rep.sass_full.get("LDG.E") == 32 and rep.sass_full.get("STG.E.U16") == 32, rep.sass_full
    assert rep.sass_full.get("F2FP.BF16.F32.PACK_AB", 0) >= 16 and rep.local_memory_ops == 0


def exchange_kernel(n):
    ns = dict(globals())
    exec("def kx(out):\n"
         "    buf = cuda.shared.array(0, np.uint8)\n"
         "    bar = cuda.shared.array(1, np.uint64)\n"
         "    t = cuda.threadIdx.x % 128\n"
         f"    acc = acc_add_shared(acc_zeros('f32.bf16.bf16', {n}), smem_addr(buf), t)\n"
         "    acc_send_cluster(acc, smem_addr(buf), smem_addr(bar), 1, t)\n"
         "    out[t] = acc[0]\n", ns)
    return ns["kx"], (types.float32[:],), None


@pytest.mark.parametrize("n", [8, 128, 256])
def test_accumulator_exchange_compiles(n, report_batch):
    """``acc_send_cluster``: one ``st.async`` of 16 bytes (STAS) per four values, to the peer's
    address from ``mapa``; ``acc_add_shared``: one 16-byte shared load (LDS.128) per four values;
    no local memory."""
    rep = report_batch(exchange_kernel)  # compiled with the other widths (tests/conftest.py)
    assert rep.ptx.count("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32") == n // 8
    assert rep.ptx.count("ld.shared.v4.f32") == n // 8 and "mapa.shared::cluster.u32" in rep.ptx
    assert rep.sass["STAS"] == n // 8 and rep.sass_full.get("LDS.128", 0) == n // 8
    assert rep.local_memory_ops == 0 and rep.spill_bytes == 0


def test_accumulator_exchange_typing_errors():
    ns = dict(globals())
    exec("def ky(out):\n    acc_send_cluster(acc_zeros('f16.f16.f16', 64), 0, 0, 1, 0)\n", ns)
    exec("def kz(out):\n    out[0] = acc_add_shared(acc_zeros('f32.bf16.bf16', 64), 0.5, 0)[0]\n", ns)
    with pytest.raises(Exception, match="acc_send_cluster: expected an f32 accumulator"):
        compile_report(ns["ky"], (types.float32[:],))
    with pytest.raises(Exception, match="acc_add_shared: 'base' must be an integer"):
        compile_report(ns["kz"], (types.float32[:],))
