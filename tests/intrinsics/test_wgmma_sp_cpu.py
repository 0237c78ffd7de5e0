"""CPU tests of the sparse wgmma (``wgmma.mma_async.sp``): every form assembles for sm_90a into
the sparse tensor-core instruction with no local memory; every illegal form is a typing error
naming the rule; the 2:4 host tools and the metadata layout round-trip; the model of a whole
sparse tile equals the dense product of the operands."""

import numpy as np
import pytest
from numba import types

from nbwgmma.intrinsics import *  # noqa: F401,F403
from nbwgmma.layout import (WGMMA_KINDS, WGMMA_SP_KINDS, compress_24, decompress_24, meta_coords, meta_readers,
                            meta_registers, meta_registers_pair, prune_24, read_meta_registers,
                            read_sparse_a_registers, sparse_a_registers, sparse_violations, wgmma_sp_kind)
from nbwgmma.report import compile_report
from tests.wgmma_sp_tile import SparseTileProblem, sp_tile_kernel, sparse_operands

SIG = (types.float32[:], types.uint64[:], types.uint64[:], types.uint32[:])


def sass_op(kind):
    k = wgmma_sp_kind(kind)
    return "IGMMA" if k.atype in ("s8", "u8") else "QGMMA" if k.input_bits == 8 else "HGMMA"


def form_ns(kind, rs):
    """The N of one form's kernel: the smallest and largest, and a share of the others, dealt
    round-robin over the forms with the same N table, so that every legal N is assembled in
    some form (all N in every form would cost about 20 s of ptxas)."""
    forms = [(k, r) for k, v in WGMMA_SP_KINDS.items() if v.n_values == WGMMA_SP_KINDS[kind].n_values
             for r in (False, True)]
    ns = WGMMA_SP_KINDS[kind].n_values
    mine = ns[forms.index((kind, rs))::len(forms)]
    return sorted({ns[0], ns[-1], *mine})


def build(kind, ns, rs=False, spsel=0, trans_a=0, trans_b=0, scale=1, satfinite=0):
    """One kernel issuing one sparse wgmma per N in ``ns`` (metadata from ``regs[4 + i]``)."""
    lines = ["def kernel(out, da, db, regs):", "    a = (regs[0], regs[1], regs[2], regs[3])"]
    for i, n in enumerate(ns):
        # Each accumulator made, used and consumed before the next: one live at a time.
        lines += [f"    acc{n} = acc_zeros(KIND, {n})", "    wgmma_fence()"]
        tail = f"{scale}, {scale}, {trans_b}, {satfinite}" if rs else f"{scale}, {scale}, {trans_a}, {trans_b}, {satfinite}"
        if rs:
            call = f"wgmma_mma_async_sp_rs(acc{n}, a, db[{i}], regs[{4 + i}], KIND, {spsel}, da[{i}] > 0, {tail})"
        else:
            call = f"wgmma_mma_async_sp(acc{n}, da[{i}], db[{i}], regs[{4 + i}], KIND, {spsel}, da[{i}] > 0, {tail})"
        lines += [f"    acc{n} = {call}", "    wgmma_commit_group()", "    wgmma_wait_group(0)"]
        last = n // 4 - 1 if kind.startswith("f16") else n // 2 - 1
        lines.append(f"    out[{i}] = acc{n}[0] + acc{n}[{last}]")
    ns_ = dict(globals(), KIND=kind)
    exec("\n".join(lines), ns_)
    return ns_["kernel"]


def variants():
    for kind, k in WGMMA_SP_KINDS.items():
        scale = -1 if k.is_float else 1
        for rs in (False, True):
            src = "rs" if rs else "ss"
            yield pytest.param(kind, rs, 0, 0, 0, scale, 0, id=f"{kind}-{src}")
            if k.spsel_values == (0, 1):
                yield pytest.param(kind, rs, 1, 0, 0, 1, 0, id=f"{kind}-{src}-spsel1")
            if not k.is_float:
                yield pytest.param(kind, rs, 0, 0, 0, 1, 1, id=f"{kind}-{src}-satfinite")
        if k.transposable:
            for ta, tb in ((1, 0), (0, 1), (1, 1)):
                yield pytest.param(kind, False, 0, ta, tb, 1, 0, id=f"{kind}-ss-t{ta}{tb}")
            yield pytest.param(kind, True, 0, 0, 1, 1, 0, id=f"{kind}-rs-t01")


def is_base(spsel, trans_a, trans_b, satfinite):
    return not (spsel or trans_a or trans_b or satfinite)


def form_kernel(kind, rs, spsel, trans_a, trans_b, scale, satfinite):
    """(kernel, signature, launch bounds) of one sparse form: the base form of each kind and A
    source at the N of :func:`form_ns`, its other immediates at the smallest N."""
    ns = form_ns(kind, rs) if is_base(spsel, trans_a, trans_b, satfinite) else [wgmma_sp_kind(kind).n_values[0]]
    return build(kind, ns, rs, spsel, trans_a, trans_b, scale, satfinite), SIG, (128, 1)


@pytest.mark.parametrize("kind, rs, spsel, trans_a, trans_b, scale, satfinite", list(variants()))
def test_sparse_forms_assemble(kind, rs, spsel, trans_a, trans_b, scale, satfinite, report_batch):
    k = wgmma_sp_kind(kind)
    ns = form_ns(kind, rs) if is_base(spsel, trans_a, trans_b, satfinite) else [k.n_values[0]]
    rep = report_batch(form_kernel)  # compiled with the other forms of its batch (tests/conftest.py)
    op = sass_op(kind)
    assert rep.sass.get(op, 0) == len(ns), (op, dict(rep.sass))
    sparse_ops = sum(c for name, c in rep.sass_full.items() if name.startswith(op + ".SP."))
    assert sparse_ops == len(ns), dict(rep.sass_full)
    assert rep.local_memory_ops == 0 and rep.spill_bytes == 0 and rep.stack_frame == 0
    assert not rep.wgmma_serialized, rep.warnings
    for n in ns:
        assert f"wgmma.mma_async.sp.sync.aligned.m64n{n}k{k.k}" in rep.ptx
    assert (".satfinite" in rep.ptx) == bool(satfinite)


def test_every_legal_n_is_assembled_in_some_form():
    for kind, k in WGMMA_SP_KINDS.items():
        assert {k.n_values[0], k.n_values[-1]} <= set(form_ns(kind, False))
    for table in {k.n_values for k in WGMMA_SP_KINDS.values()}:
        covered = {n for kind, k in WGMMA_SP_KINDS.items() if k.n_values == table for rs in (False, True)
                   for n in form_ns(kind, rs)}
        assert covered == set(table)


def test_sparse_table_matches_the_isa():
    # PTX ISA, wgmma.mma_async.sp: every dense type but b1; m64nNk32 f16/bf16, k16 tf32, k64 8-bit.
    assert set(WGMMA_SP_KINDS) == set(WGMMA_KINDS) - {"s32.b1.b1"}
    assert len(WGMMA_SP_KINDS) == 16
    for key, k in WGMMA_SP_KINDS.items():
        assert k.k == {"f16": 32, "bf16": 32, "tf32": 16}.get(k.atype, 64) == 2 * WGMMA_KINDS[key].k
        assert k.n_values == WGMMA_KINDS[key].n_values and k.sparse and not WGMMA_KINDS[key].sparse
        assert k.a_cols * 2 == k.k
        assert k.spsel_values == ((0,) if k.input_bits == 8 else (0, 1))
        assert k.chunk == (2 if k.atype == "tf32" else 4)
    assert WGMMA_SP_KINDS["s32.u8.s8"].n_values == (8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176,
                                                     192, 208, 224, 240, 256)


ACC = "acc_zeros('f32.bf16.bf16', 64)"
ILLEGAL = [
    (f"acc = wgmma_mma_async_sp({ACC}, d, d, u, 's32.b1.b1')", "every dense type but s32.b1.b1"),
    (f"acc = wgmma_mma_async_sp({ACC}, d, d, u, 'f32.bf16.bf16', 2)", "sp-sel must be 0 or 1"),
    ("acc = wgmma_mma_async_sp(acc_zeros('f32.e4m3.e4m3', 64), d, d, u, 'f32.e4m3.e4m3', 1)",
     "0 for 8-bit inputs"),
    ("acc = wgmma_mma_async_sp_rs(acc_zeros('s32.s8.s8', 64), (u, u, u, u), d, u, 's32.s8.s8', 1)",
     "0 for 8-bit inputs"),
    (f"acc = wgmma_mma_async_sp({ACC}, d, d, u, 'f32.bf16.bf16', 4)", "one of 0, 1, 2, 3"),
    (f"acc = wgmma_mma_async_sp({ACC}, d, d, u, 'f32.bf16.bf16', int(u))", "compile-time constant"),
    ("acc = wgmma_mma_async_sp(acc_zeros('f32.tf32.tf32', 64), d, d, u, 'f32.tf32.tf32', 0, 1, 1, 1, 1)",
     "only for f16/bf16"),
    ("acc = wgmma_mma_async_sp(acc_zeros('s32.s8.u8', 64), d, d, u, 's32.s8.u8', 0, 1, -1)", "only for floating"),
    (f"acc = wgmma_mma_async_sp({ACC}, d, d, u, 'f32.bf16.bf16', 0, 1, 1, 1, 0, 0, 1)", ".satfinite exists only"),
    (f"acc = wgmma_mma_async_sp({ACC}, d, d, 1.5, 'f32.bf16.bf16')", "no implicit float conversion"),
    ("acc = wgmma_mma_async_sp(acc_zeros('s32.s8.s8', 40), d, d, u, 's32.s8.s8')", "allows N in"),
    ("acc = wgmma_mma_async_sp(acc_zeros('f32.f16.f16', 64), d, d, u, 'f16.f16.f16')", "holds uint32 registers"),
    (f"acc = wgmma_mma_async_sp_rs({ACC}, (u, u, u), d, u, 'f32.bf16.bf16')", "tuple of 4"),
    (f"acc = wgmma_mma_async_sp_rs({ACC}, (u, u, u, u), d, u, 'f32.bf16.bf16', trans_a=1)",
     "unexpected keyword argument 'trans_a'"),
]


@pytest.mark.parametrize("stmt, message", ILLEGAL, ids=[m for _, m in ILLEGAL])
def test_illegal_sparse_forms_are_typing_errors(stmt, message):
    from nbwgmma.intrinsics.errors import NbwgmmaTypingError

    src = f"def kernel(out, dd, uu):\n    d = dd[0]\n    u = uu[0]\n    {stmt}\n"
    ns = dict(globals())
    exec(src, ns)
    with pytest.raises((NbwgmmaTypingError, TypeError)) as exc:
        compile_report(ns["kernel"], (types.float32[:], types.uint64[:], types.uint32[:]))
    assert message in str(exc.value), str(exc.value)


# -- the host tools ---------------------------------------------------------------------------

@pytest.mark.parametrize("atype", ["f16", "bf16", "tf32", "e4m3", "s8"])
def test_prune_compress_decompress_round_trip(atype, rng):
    x = rng.standard_normal((64, 128))
    p = prune_24(x, atype)
    c = 2 if atype == "tf32" else 4
    groups = p.reshape(64, -1, c)
    assert ((groups != 0).sum(-1) == c // 2).all()  # exactly half kept (normal data has no zeros)
    # The kept ones are the largest magnitudes of their chunk.
    kept = np.abs(groups).min(-1, where=groups != 0, initial=np.inf)
    dropped = np.abs(x.reshape(64, -1, c)).max(-1, where=groups == 0, initial=0)
    assert (kept >= dropped).all()
    values, meta = compress_24(p, atype)
    assert values.shape == (64, 64) and meta.shape == (64, 128 // c) and meta.dtype == np.uint8
    np.testing.assert_array_equal(decompress_24(values, meta, atype), p)
    assert set(np.unique(meta)) <= ({0b0100, 0b1110} if c == 2 else {0b0100, 0b1000, 0b1100, 0b1001, 0b1101, 0b1110})
    # Pruning twice changes nothing; a pruned matrix has no violations.
    np.testing.assert_array_equal(prune_24(p, atype), p)
    assert len(sparse_violations(p, atype)) == 0


def test_compress_codes_follow_the_isa_examples():
    # Kept positions (1, 3) -> first index in bits 0-1, second in bits 2-3: 0b1101.
    values, meta = compress_24(np.array([[0, 5, 0, 7, 1, 2, 0, 0]]), "f16")
    assert meta.tolist() == [[0b1101, 0b0100]] and values.tolist() == [[5, 7, 1, 2]]
    # tf32 1:2: element 0 kept -> 0b0100, element 1 kept -> 0b1110.
    values, meta = compress_24(np.array([[3.0, 0, 0, 4.0]]), "tf32")
    assert meta.tolist() == [[0b0100, 0b1110]] and values.tolist() == [[3.0, 4.0]]
    # A chunk with fewer nonzeros than it keeps names distinct positions (the lowest zeros).
    values, meta = compress_24(np.array([[0, 0, 9, 0, 0, 0, 0, 0]]), "s8")
    assert meta.tolist() == [[0b1000, 0b0100]] and values.tolist() == [[0, 9, 0, 0]]
    # Ties in magnitude keep the lower position.
    assert prune_24(np.array([[1.0, -1.0, 1.0, 1.0]])).tolist() == [[1.0, -1.0, 0.0, 0.0]]


def test_a_matrix_that_is_not_sparse_is_refused_with_its_row():
    x = np.zeros((8, 16))
    x[5, 4:7] = 1.0  # three nonzeros in columns 4..7 of row 5
    assert sparse_violations(x).tolist() == [[5, 4]]
    with pytest.raises(ValueError, match=r"row 5 of A is not 2:4 sparse: columns 4\.\.7 hold 3 nonzeros"):
        compress_24(x)
    with pytest.raises(ValueError, match="row 0 of A is not 1:2 sparse"):
        compress_24(np.ones((2, 4)), "tf32")
    with pytest.raises(ValueError, match="multiple of 4"):
        prune_24(np.ones((2, 6)))


def test_undefined_metadata_is_refused():
    with pytest.raises(ValueError, match="two 2-bit positions must differ"):
        decompress_24(np.ones((1, 2)), np.array([[0b0101]]))
    with pytest.raises(ValueError, match="only 0b0100 and 0b1110"):
        decompress_24(np.ones((1, 1)), np.array([[0b1000]]), "tf32")
    # A code with the positions the other way round is defined: the first value goes to position 2.
    assert decompress_24(np.array([[5, 7]]), np.array([[0b0010]])).tolist() == [[7, 0, 5, 0]]


@pytest.mark.parametrize("kind", ["f32.bf16.bf16", "f16.f16.f16", "f32.tf32.tf32", "f32.e4m3.e5m2", "s32.u8.s8"])
def test_metadata_registers_cover_the_tile_once_per_selector(kind, rng):
    k = wgmma_sp_kind(kind)
    chunks = k.k // k.chunk
    coords = meta_coords(kind)
    for spsel in k.spsel_values:
        c = coords[meta_readers(kind, spsel)].reshape(-1, 2)
        assert sorted((c[:, 0] * chunks + c[:, 1]).tolist()) == list(range(64 * chunks)), spsel
    meta = rng.integers(0, 16, (64, chunks)).astype(np.uint8)
    regs = meta_registers(meta, kind)
    for spsel in k.spsel_values:  # every thread holds its part: any legal selector reads the tile
        np.testing.assert_array_equal(read_meta_registers(regs, kind, spsel), meta)
    with pytest.raises(ValueError, match="undefined"):
        read_meta_registers(regs, kind, 2)


def test_metadata_layout_names_the_isa_threads():
    # f16/bf16: T0 holds row 0 chunks 0-3 (columns 0-15) in bits 0-15 and row 8 in bits 16-31,
    # T1 columns 16-31; T2, T3 the same with sp-sel 1; warp 1 rows 16-31.
    c = meta_coords("f32.bf16.bf16")
    assert c[0].tolist() == [[0, 0], [0, 1], [0, 2], [0, 3], [8, 0], [8, 1], [8, 2], [8, 3]]
    assert c[1][0].tolist() == [0, 4] and (c[2] == c[0]).all() and (c[3] == c[1]).all()
    assert c[4][0].tolist() == [1, 0] and c[32][0].tolist() == [16, 0]
    # 8-bit: T0 row 0, T1 row 8 (columns 0-31), T2 row 0, T3 row 8 (columns 32-63), 8 chunks each.
    c = meta_coords("s32.s8.s8")
    assert c[0][:, 0].tolist() == [0] * 8 and c[0][:, 1].tolist() == list(range(8))
    assert c[1][0].tolist() == [8, 0] and c[2][0].tolist() == [0, 8] and c[3][7].tolist() == [8, 15]
    assert meta_readers("f32.f16.f16", 1)[:4].tolist() == [False, False, True, True]
    assert meta_readers("s32.s8.s8", 0).all()


def test_paired_metadata_registers_carry_two_k_steps(rng):
    kind = "f32.f16.f16"
    m0, m1 = (rng.integers(0, 16, (64, 8)).astype(np.uint8) for _ in range(2))
    regs = meta_registers_pair(m0, m1, kind)
    np.testing.assert_array_equal(read_meta_registers(regs, kind, 0), m0)
    np.testing.assert_array_equal(read_meta_registers(regs, kind, 1), m1)
    with pytest.raises(ValueError, match="no pair"):
        meta_registers_pair(m0, m1, "f32.e4m3.e4m3")


@pytest.mark.parametrize("kind", ["f32.bf16.bf16", "f32.tf32.tf32", "f16.e5m2.e4m3", "s32.s8.u8"])
def test_sparse_a_registers_round_trip(kind, rng):
    k = wgmma_sp_kind(kind)
    values = rng.integers(-3, 4, (64, k.a_cols)) if k.atype != "u8" else rng.integers(0, 200, (64, k.a_cols))
    regs = sparse_a_registers(values, kind)
    assert regs.shape == (128, 4) and regs.dtype == np.uint32
    np.testing.assert_array_equal(read_sparse_a_registers(regs, kind), values)


@pytest.mark.parametrize("kind", list(WGMMA_SP_KINDS))
def test_model_of_a_sparse_tile_is_the_dense_product(kind, rng):
    """Compressed A and B laid out in shared memory, metadata in registers (the registers the
    selector does not read hold other codes), read back through descriptors and selectors by the
    model: D equals A @ B^T of the dense operands, for each A source, selector and swizzle."""
    k = wgmma_sp_kind(kind)
    for swizzle in ("none", "64B", "128B"):
        for spsel in ("0",) if k.input_bits == 8 else ("0", "1", "pair"):
            a, b = sparse_operands(kind, 24, 4, rng)
            p = SparseTileProblem(kind, 24, 4, a, b, swizzle=swizzle, spsel=spsel)
            want = p.dense_product()
            assert np.abs(want).sum() > 0
            for rs in (False, True):
                np.testing.assert_array_equal(p.reference(rs=rs), want, err_msg=f"{swizzle} {spsel} rs={rs}")
    if k.transposable:
        for swizzle in ("none", "32B", "64B", "128B"):
            for ta, tb in ((1, 0), (0, 1), (1, 1)):
                a, b = sparse_operands(kind, 16, 2, rng)
                p = SparseTileProblem(kind, 16, 2, a, b, swizzle=swizzle, trans_a=ta, trans_b=tb,
                                      swizzle_b="64B" if swizzle == "32B" and not tb else None)
                np.testing.assert_array_equal(p.reference(), p.dense_product(), err_msg=f"{swizzle} t{ta}{tb}")


def test_model_refuses_what_it_cannot_say():
    """A K-major B of 64 bytes of K in a 32-byte swizzle row: where the hardware reads the rest
    is not modeled."""
    from nbwgmma.layout import encode_desc, wgmma_sp_reference

    image = np.zeros(4096, np.uint8)
    with pytest.raises(NotImplementedError, match="32B swizzle row"):
        wgmma_sp_reference(image, "f32.f16.f16", 8, encode_desc(0, 16, 256, "32B"), encode_desc(1024, 16, 256, "32B"),
                           np.full(128, 0x44444444, np.uint32))


@pytest.mark.parametrize("kind, n, rs, spsel, trans_a, trans_b", [
    ("f32.bf16.bf16", 64, True, "pair", 0, 1), ("f16.f16.f16", 32, False, "1", 1, 1), ("s32.s8.u8", 256, False, "0", 0, 0),
])
def test_gpu_tile_kernel_compiles_clean(kind, n, rs, spsel, trans_a, trans_b):
    """The kernel of the GPU tests (tests/wgmma_sp_tile.py) compiles for sm_90a with the sparse
    instruction and no local memory."""
    out = {"f32": types.float32, "f16": types.float16, "s32": types.int32}[wgmma_sp_kind(kind).dtype]
    sig = (types.uint8[:], types.uint64[:], types.uint64[:], types.uint32[:, :, :], types.uint32[:, :], out[:, :])
    rep = compile_report(sp_tile_kernel(kind, n, 4, rs, spsel, trans_a, trans_b), sig)
    op = sass_op(kind)
    assert any(name.startswith(op + ".SP.") for name in rep.sass_full), dict(rep.sass_full)
    assert rep.local_memory_ops == 0 and rep.spill_bytes == 0
