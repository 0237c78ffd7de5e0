"""CPU tests of wgmma: every legal form assembles for sm_90a into the right tensor-core
instruction with no local memory; every illegal form is a typing error naming the rule."""

import numpy as np
import pytest
from numba import cuda, types

from nbwgmma.intrinsics import *  # noqa: F401,F403
from nbwgmma.layout import (SWIZZLE_NAME, WGMMA_KINDS, a_frag_coords, acc_coords, decode_desc, encode_desc,
                            ldmatrix_lane_map, swizzle_addr, wgmma_kind)
from nbwgmma.report import compile_report

SIG = (types.float32[:], types.uint64[:], types.uint64[:], types.uint32[:])

#: SASS instruction of each input family.
SASS_OP = {16: "HGMMA", 32: "HGMMA", 8: "QGMMA", 1: "BGMMA"}


def sass_op(kind):
    k = wgmma_kind(kind)
    if k.atype in ("s8", "u8"):
        return "IGMMA"
    return SASS_OP[k.input_bits]


def build(kind, ns, rs=False, trans_a=0, trans_b=0, scale=1, extra=""):
    """One kernel issuing one wgmma per N in ``ns``."""
    lines = ["def kernel(out, da, db, regs):", "    a = (regs[0], regs[1], regs[2], regs[3])"]
    for i, n in enumerate(ns):
        # Each accumulator made, used and consumed before the next, so one is live at a time
        # (all made up front, ptxas serializes the wgmmas for lack of registers: C7511).
        lines += [f"    acc{n} = acc_zeros(KIND, {n})", "    wgmma_fence()"]
        if rs:
            call = f"wgmma_mma_async_rs(acc{n}, a, db[{i}], KIND, da[{i}] > 0, {scale}, {scale}, {trans_b}{extra})"
        else:
            call = (f"wgmma_mma_async(acc{n}, da[{i}], db[{i}], KIND, da[{i}] > 0, {scale}, {scale}, "
                    f"{trans_a}, {trans_b}{extra})")
        lines.append(f"    acc{n} = {call}")
        lines += ["    wgmma_commit_group()", "    wgmma_wait_group(0)"]
        last = n // 4 - 1 if kind.startswith("f16") else n // 2 - 1
        lines.append(f"    out[{i}] = acc{n}[0] + acc{n}[{last}]")
    ns_ = dict(globals(), KIND=kind)
    exec("\n".join(lines), ns_)
    return ns_["kernel"]


def variants():
    for kind, k in WGMMA_KINDS.items():
        scale = -1 if k.is_float else 1
        for rs in (False, True):
            yield pytest.param(kind, rs, 0, 0, scale, "", id=f"{kind}-{'rs' if rs else 'ss'}")
        if k.transposable:
            for ta, tb in ((1, 0), (0, 1), (1, 1)):
                yield pytest.param(kind, False, ta, tb, 1, "", id=f"{kind}-ss-t{ta}{tb}")
            yield pytest.param(kind, True, 0, 1, 1, "", id=f"{kind}-rs-t01")
        if k.atype in ("s8", "u8"):
            yield pytest.param(kind, False, 0, 0, 1, ", 0", id=f"{kind}-ss-satfinite")
            yield pytest.param(kind, True, 0, 0, 1, ", 1", id=f"{kind}-rs-satfinite")


def form_kernel(kind, rs, trans_a, trans_b, scale, extra):
    """(kernel, signature, launch bounds) of one wgmma form over every legal N."""
    if extra:
        extra = ", 1"  # satfinite=1
    kern = build(kind, list(wgmma_kind(kind).n_values), rs=rs, trans_a=trans_a, trans_b=trans_b, scale=scale,
                 extra=extra)
    return kern, SIG, (128, 1)


@pytest.mark.parametrize("kind, rs, trans_a, trans_b, scale, extra", list(variants()))
def test_every_legal_form_assembles(kind, rs, trans_a, trans_b, scale, extra, report_batch):
    k = wgmma_kind(kind)
    ns = list(k.n_values)
    rep = report_batch(form_kernel)  # compiled with the other forms of its batch (tests/conftest.py)
    op = sass_op(kind)
    assert rep.sass.get(op, 0) == len(ns), (op, dict(rep.sass))
    assert rep.local_memory_ops == 0 and rep.spill_bytes == 0 and rep.stack_frame == 0
    assert not rep.wgmma_serialized, rep.warnings
    for n in ns:
        assert f"m64n{n}k{k.k}" in rep.ptx


def test_n256_accumulator_stays_in_registers():
    """The m64n256k16 f32 accumulator (128 registers per thread) never touches local memory."""

    def kernel(out, da, db):
        acc = acc_undef("f32.bf16.bf16", 256)
        wgmma_fence()
        for i in range(8):
            acc = wgmma_mma_async(acc, da[i], db[i], "f32.bf16.bf16", i > 0)
        wgmma_commit_group()
        wgmma_wait_group(0)
        acc_store(acc, "f32.bf16.bf16", out, cuda.threadIdx.x % 128, 0, 0)

    rep = compile_report(kernel, (types.float32[:, :], types.uint64[:], types.uint64[:]), launch_bounds=(128, 1))
    assert rep.sass["HGMMA"] >= 1
    assert rep.spill_bytes == 0 and rep.stack_frame == 0 and rep.local_memory_ops == 0
    assert "HGMMA.64x256x16.F32.BF16" in rep.sass_full


ILLEGAL = [
    ("acc = wgmma_mma_async(acc_zeros('f32.bf16.bf16', 64), d, d, 'f32.bf16.bf16', 1, 1, 1, 0, 0, 0)[0:1]", None),
    ("acc = wgmma_mma_async(acc_zeros('f32.e4m3.e4m3', 64), d, d, 'f32.e4m3.e4m3', 1, 1, 1, 1, 0)", "only for f16/bf16"),
    ("acc = wgmma_mma_async(acc_zeros('f32.tf32.tf32', 64), d, d, 'f32.tf32.tf32', 1, 1, 1, 0, 1)", "only for f16/bf16"),
    ("acc = wgmma_mma_async(acc_zeros('s32.s8.s8', 64), d, d, 's32.s8.s8', 1, -1)", "only for floating-point"),
    ("acc = wgmma_mma_async(acc_zeros('f32.bf16.bf16', 64), d, d, 'f32.bf16.bf16', 1, 1, 1, 0, 0, 1)", ".satfinite exists only"),
    ("acc = wgmma_mma_async(acc_zeros('f32.bf16.bf16', 64), d, d, 'f32.bf16.bf16', 1, 2)", "one of 1, -1"),
    ("acc = wgmma_mma_async(acc_zeros('f32.bf16.bf16', 64), d, d, 'f16.bf16.bf16')", "wgmma type string"),
    ("acc = wgmma_mma_async(acc_zeros('f32.f16.f16', 64), d, d, 'f16.f16.f16')", "holds uint32 registers"),
    ("acc = wgmma_mma_async((np.float32(1), np.float32(2), np.float32(3)), d, d, 'f32.bf16.bf16')", "means N=6"),
    ("acc = wgmma_mma_async(acc_zeros('s32.s8.s8', 32), d, d, 's32.s8.u8')", None),
    ("acc = acc_zeros('s32.s8.s8', 40)", "allows N in"),
    ("acc = acc_zeros('s32.b1.b1', 264)", "allows N in"),
    ("acc = acc_zeros('f32.bf16.bf16', 12)", "allows N in"),
    # Numba folds kinds[0] to the literal 'x': the kind's own check answers.
    ("acc = wgmma_mma_async(acc_zeros('f32.bf16.bf16', 64), d, d, kinds[0])", "wgmma type string such as 'f32.bf16.bf16'; got 'x'"),
    ("wgmma_wait_group(8)", "in [0, 7]"),
    ("wgmma_wait_group(int(d))", "compile-time constant"),
    ("acc = wgmma_mma_async_rs(acc_zeros('f32.bf16.bf16', 64), (u, u, u), d, 'f32.bf16.bf16')", "tuple of 4"),
    ("r = ldmatrix(u, 3)", "one of 1, 2, 4"),
    ("stmatrix(u, (u, u, u))", "1, 2 or 4"),
]


@pytest.mark.parametrize("stmt, message", [c for c in ILLEGAL if c[1]])
def test_illegal_forms_are_typing_errors(stmt, message):
    src = f"def kernel(out, dd, uu):\n    d = dd[0]\n    u = uu[0]\n    kinds = ('x',)\n    {stmt}\n"
    ns = dict(globals())
    exec(src, ns)
    with pytest.raises(Exception) as exc:
        compile_report(ns["kernel"], (types.float32[:], types.uint64[:], types.uint32[:]))
    assert message in str(exc.value), str(exc.value)


def test_integer_n_table_matches_the_isa():
    # PTX ISA: .s8/.u8/.b1 shapes are n8, n16, n24, then multiples of 16 up to 256.
    assert WGMMA_KINDS["s32.s8.s8"].n_values == (8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160,
                                                  176, 192, 208, 224, 240, 256)
    assert WGMMA_KINDS["f32.bf16.bf16"].n_values == tuple(range(8, 257, 8))
    assert len(WGMMA_KINDS) == 17  # f16x2, bf16, tf32, 8 fp8, 4 int8, b1


def test_descriptor_encode_decode_round_trip(rng):
    for _ in range(200):
        sw = rng.choice(["none", "32B", "64B", "128B"])
        addr, lbo, sbo = (int(rng.integers(0, 1 << 14)) * 16 for _ in range(3))
        base = int(rng.integers(0, 8))
        d = encode_desc(addr, lbo, sbo, sw, base)
        assert decode_desc(d) == dict(addr=addr, lbo=lbo, sbo=sbo, base_offset=base, swizzle=sw)
    # The lab's unswizzled A tile: LBO 128, SBO 256.
    assert decode_desc(encode_desc(0x400, 128, 256))["sbo"] == 256
    assert encode_desc(0, 16, 1024, "128B") >> 62 == 1


#: (addr, lbo, sbo, swizzle code): low and high field values, unaligned bits to drop
DESC_FIELDS = [(0x1400, 16, 1024, 1), (0x3FFF0, 128, 256, 0), (0x80, 0x10, 0x3FFF0, 3), (0x2008F, 0x4C, 0x40C, 2)]


def _desc_kernel(out, f):
    i = cuda.grid(1)
    if i < f.shape[0]:
        out[i, 0] = make_desc(f[i, 0], f[i, 1], f[i, 2], f[i, 3])
        out[i, 1] = desc_advance(out[i, 0], 32)
        out[i, 2] = desc_advance(out[i, 0], 2048)


def expected_descs(fields):
    """What make_desc / desc_advance(32, 2048) must give: the host encoding of each field's
    bits 4-17 (the descriptor keeps addresses in 16-byte units)."""
    f16 = lambda v: ((v >> 4) & 0x3FFF) << 4  # noqa: E731
    rows = []
    for addr, lbo, sbo, code in fields:
        d = encode_desc(f16(addr), f16(lbo), f16(sbo), SWIZZLE_NAME[code])
        rows.append([d, (d & ~0xFFFFFFFF) | ((d + 2) & 0xFFFFFFFF), (d & ~0xFFFFFFFF) | ((d + 128) & 0xFFFFFFFF)])
    return np.array(rows, np.uint64)


def test_device_descriptor_is_32_bit_ptx():
    rep = compile_report(_desc_kernel, (types.uint64[:, :], types.uint32[:, :]))
    # Fields by bit-field extract/insert on 32-bit words, joined once; a K step adds to the low word.
    assert "bfe.u32" in rep.ptx and "bfi.b32" in rep.ptx and "mov.b64" in rep.ptx and "add.u32" in rep.ptx
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0
    assert "HGMMA" not in rep.sass


def test_simulator_descriptor_matches_host():
    from nbwgmma.sim import IMPLS

    want = expected_descs(DESC_FIELDS)
    for row, (addr, lbo, sbo, code) in zip(want, DESC_FIELDS):
        d = IMPLS["make_desc"](np.uint32(addr), np.uint32(lbo), np.uint32(sbo), np.uint32(code))
        assert [int(d), int(IMPLS["desc_advance"](d, 32)), int(IMPLS["desc_advance"](d, 2048))] == [int(x) for x in row]
    # The host twin agrees with the ISA table.
    for addr, lbo, sbo, code in DESC_FIELDS[:3]:
        d = encode_desc(addr, lbo, sbo, {0: "none", 1: "128B", 2: "64B", 3: "32B"}[code])  # the ISA's table
        assert d & 0x3FFF == (addr >> 4) & 0x3FFF and (d >> 62) == code


def test_swizzle_128b_is_the_documented_xor():
    offs = np.arange(2048)
    want = offs ^ (((offs >> 7) & 7) << 4)
    np.testing.assert_array_equal(swizzle_addr(offs, "128B"), want)
    # A swizzle permutes 16-byte chunks inside each period.
    for sw, period in (("32B", 256), ("64B", 512), ("128B", 1024)):
        phys = swizzle_addr(offs, sw)
        assert sorted(phys[:period]) == list(range(period))
        np.testing.assert_array_equal(phys % 16, offs % 16)


def test_accumulator_layout_covers_the_tile_once():
    for kind in ("f32.bf16.bf16", "f16.f16.f16", "s32.s8.s8"):
        for n in (8, 24, 144, 256):
            c = acc_coords(kind, n).reshape(-1, 2)
            flat = c[:, 0] * n + c[:, 1]
            assert sorted(flat) == list(range(64 * n))
    # PTX ISA figure: thread 0 holds (0,0),(0,1),(8,0),(8,1); thread 5 holds row 1, cols 2,3.
    c = acc_coords("f32.bf16.bf16", 8)
    assert c[0].tolist() == [[0, 0], [0, 1], [8, 0], [8, 1]]
    assert c[5][:2].tolist() == [[1, 2], [1, 3]]
    assert c[32][0].tolist() == [16, 0]


def test_a_fragment_layout_covers_the_tile_once():
    for kind in ("f32.bf16.bf16", "f32.tf32.tf32", "s32.s8.s8", "f32.e4m3.e4m3", "s32.b1.b1"):
        k = wgmma_kind(kind)
        c = a_frag_coords(kind).reshape(-1, 2)
        flat = c[:, 0] * k.k + c[:, 1]
        assert sorted(flat) == list(range(64 * k.k)), kind


def test_ldmatrix_lane_map():
    m = ldmatrix_lane_map()
    assert m[0].tolist() == [[0, 0], [0, 1]] and m[31].tolist() == [[7, 6], [7, 7]]
    t = ldmatrix_lane_map(trans=True)
    assert t[1].tolist() == [[2, 0], [3, 0]]


@pytest.mark.parametrize("kind, out_ty", [
    ("f32.bf16.bf16", types.float32), ("f32.bf16.bf16", types.uint16), ("f32.bf16.bf16", types.float16),
    ("f16.f16.f16", types.float16), ("f16.f16.f16", types.float32), ("s32.s8.s8", types.int32),
])
def test_acc_store_compiles_for_every_output_type(kind, out_ty):

    ns = dict(globals(), KIND=kind)
    exec("def k(out):\n    acc = acc_zeros(KIND, 64)\n    acc_store(acc, KIND, out, cuda.threadIdx.x % 128, 0, 0)", ns)
    rep = compile_report(ns["k"], (out_ty[:, :],))
    assert rep.local_memory_ops == 0


def test_to_bits_and_from_bits_round_trip_every_raw_type():
    """The host helpers for bf16/f16/fp8 as raw integers: the shape kept, the type's integer size,
    values the type holds exactly read back exactly, others rounded to nearest even."""
    from nbwgmma.layout import from_bits, to_bits

    exact = np.array([[1.5, -2.0, 0.25], [3.0, -0.5, 8.0]])
    for t, dt in (("bf16", np.uint16), ("f16", np.uint16), ("e4m3", np.uint8), ("e5m2", np.uint8)):
        bits = to_bits(exact, t)
        assert bits.dtype == dt and bits.shape == exact.shape
        np.testing.assert_array_equal(from_bits(bits, t), exact)
    assert from_bits(to_bits(np.float64(1 + 2 ** -8), "bf16"), "bf16") == 1.0  # a tie: to even
    assert from_bits(to_bits(np.float64(1 + 3 * 2 ** -8), "bf16"), "bf16") == 1 + 2 ** -6
    assert to_bits(np.ones((2, 3, 4)), "f16").shape == (2, 3, 4)
    with pytest.raises(ValueError, match="t must be one of"):
        to_bits(exact, "f32")
    with pytest.raises(ValueError, match="bf16 elements are 2-byte integers; got uint8"):
        from_bits(np.zeros(3, np.uint8), "bf16")


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_rounding_is_cvt_rn_satfinite(fmt):
    """float_to_fp8 (the host's and the simulator's fp8 outputs) rounds as the GPU's
    ``cvt.rn.satfinite``: every finite code to itself, midpoints to the even code (1.1875 in
    e4m3 lies between 0x39 and 0x3A: 0x3A), the nearest code elsewhere, past the largest
    finite value (and infinities) to it, -0.0 to 0x80, NaN to 0x7F."""
    from nbwgmma.layout.wgmma_model import float_to_fp8, fp8_to_float

    table = fp8_to_float(np.arange(256), fmt)  # every code's value
    finite = np.isfinite(table)
    np.testing.assert_array_equal(float_to_fp8(table[finite], fmt), np.arange(256)[finite])
    pos = table[:int(finite[:128].sum())]
    mid = (pos[:-1] + pos[1:]) / 2
    even = np.arange(len(mid)) + np.arange(len(mid)) % 2
    np.testing.assert_array_equal(float_to_fp8(mid, fmt), even)
    np.testing.assert_array_equal(float_to_fp8(-mid, fmt), even | 0x80)
    if fmt == "e4m3":
        assert float_to_fp8(np.float64(1.1875), fmt) == 0x3A and float_to_fp8(np.float64(1.0625), fmt) == 0x38
    x = np.random.default_rng(3).standard_normal(4000) * 60
    got = fp8_to_float(float_to_fp8(x, fmt), fmt)
    nearest = np.abs(np.abs(x)[:, None] - pos[None, :]).min(-1)
    np.testing.assert_array_equal(np.abs(np.abs(x) - np.abs(got)), nearest)
    big = pos[-1]
    np.testing.assert_array_equal(fp8_to_float(float_to_fp8(np.array([3 * big, np.inf, -np.inf]), fmt), fmt),
                                  [big, big, -big])
    np.testing.assert_array_equal(float_to_fp8(np.array([-0.0, 0.0, np.nan]), fmt), [0x80, 0, 0x7F])
