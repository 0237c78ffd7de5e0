"""wgmma: warpgroup-level asynchronous matrix multiply-accumulate (sm_90a).

PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions"
(docs anchor ``#asynchronous-warpgroup-level-matrix-instructions``):
``wgmma.mma_async``, ``wgmma.fence``, ``wgmma.commit_group``, ``wgmma.wait_group``.

Every legal form comes from one table, :data:`nbwgmma.layout.kinds.WGMMA_KINDS`, keyed by the PTX
type string ``"<dtype>.<atype>.<btype>"``:

=================  ====  ==============  =======================  ==========
kind               K     accumulator     N                        transposes
=================  ====  ==============  =======================  ==========
f16.f16.f16        16    N/4 x u32       8..256 step 8            yes
f32.f16.f16        16    N/2 x f32       8..256 step 8            yes
f32.bf16.bf16      16    N/2 x f32       8..256 step 8            yes
f32.tf32.tf32      8     N/2 x f32       8..256 step 8            no
{f16,f32}.e4m3/e5m2 x e4m3/e5m2  32  as above  8..256 step 8       no
s32.{s8,u8}.{s8,u8}  32  N/2 x i32       8..32 step 8, 48..256 step 16  no
s32.b1.b1          256   N/2 x i32       as for s8                no
=================  ====  ==============  =======================  ==========

N is not passed: it is read off the accumulator, a ``UniTuple`` of registers
(``f16`` accumulators pack two halves per ``u32``). ``A`` comes from shared
memory (a 64-bit descriptor, :func:`wgmma_mma_async`) or from four ``u32``
registers (:func:`wgmma_mma_async_rs`); ``B`` always from a descriptor.

The sparse forms (PTX ISA, "wgmma.mma_async.sp", sm_90a) come from
:data:`nbwgmma.layout.kinds.WGMMA_SP_KINDS`: the same types but ``b1``, with twice the K
(k32 for f16/bf16, k16 for tf32, k64 for fp8 and s8/u8) and the same N. A is stored
compressed (64 x K/2, in shared memory as a dense operand of that shape, or in the four
registers of the dense A fragment of that shape); the 32-bit ``meta`` register of each
thread and the ``spsel`` immediate say where its kept elements sit
(:mod:`nbwgmma.layout.sparse` packs both on the host). :func:`wgmma_mma_async_sp` takes A
from a descriptor, :func:`wgmma_mma_async_sp_rs` from registers.

Call sequence (all 128 threads of the warpgroup, converged)::

    wgmma_fence()
    acc = wgmma_mma_async(acc, desc_a, desc_b, "f32.bf16.bf16", scale_d)
    wgmma_commit_group()
    wgmma_wait_group(0)
"""

from __future__ import annotations

from ..layout.kinds import INT8_TYPES, WGMMA_KINDS, WGMMA_SP_KINDS, wgmma_kind, wgmma_sp_kind
from ._asm import Frag, Imm, NbwgmmaTypingError, Out, Pred, Reg, ptx_intrinsic, u32, u64

__all__ = [
    "wgmma_mma_async",
    "wgmma_mma_async_rs",
    "wgmma_mma_async_sp",
    "wgmma_mma_async_sp_rs",
    "wgmma_fence",
    "wgmma_commit_group",
    "wgmma_wait_group",
]


def _validate(rs: bool, sparse: bool = False):
    def check(imms, argtypes):
        name = _NAMES[rs, sparse]
        kind = (wgmma_sp_kind if sparse else wgmma_kind)(imms["kind"])
        acc_ty = argtypes["acc"]
        if acc_ty.dtype != kind.acc_type:
            raise NbwgmmaTypingError(
                f"{name}: a {kind.key} accumulator holds {kind.acc_type} registers; got a tuple of {acc_ty.dtype}"
            )
        n = kind.n_of(imms["len_acc"])
        if n not in kind.n_values:
            raise NbwgmmaTypingError(
                f"{name}: {kind.key} allows N in {list(kind.n_values)}; an accumulator of "
                f"{imms['len_acc']} {kind.acc_type} registers means N={n}"
            )
        transposed = imms["trans_b"] or (not rs and imms["trans_a"])
        if transposed and not kind.transposable:
            raise NbwgmmaTypingError(
                f"{name}: imm-trans-a/b exist only for f16/bf16 inputs; got trans with {kind.key}"
            )
        if rs and imms.get("trans_a"):
            raise NbwgmmaTypingError(f"{name}: A from registers cannot be transposed; got trans_a=1")
        if not kind.is_float and (imms["scale_a"] != 1 or imms["scale_b"] != 1):
            raise NbwgmmaTypingError(
                f"{name}: imm-scale-a/b exist only for floating-point types; got "
                f"scale_a={imms['scale_a']}, scale_b={imms['scale_b']} with {kind.key}"
            )
        if imms["satfinite"] and kind.atype not in INT8_TYPES:
            raise NbwgmmaTypingError(f"{name}: .satfinite exists only for s8/u8 inputs; got {kind.key}")
        if sparse and imms["spsel"] not in kind.spsel_values:
            raise NbwgmmaTypingError(
                f"{name}: sp-sel must be 0 or 1 for 16- and 32-bit inputs (the thread pair T0,T1 or T2,T3 of "
                f"each quad holds the metadata) and 0 for 8-bit inputs (all four threads hold it); got "
                f"spsel={imms['spsel']} with {kind.key}"
            )

    return check


_NAMES = {
    (False, False): "wgmma_mma_async",
    (True, False): "wgmma_mma_async_rs",
    (False, True): "wgmma_mma_async_sp",
    (True, True): "wgmma_mma_async_sp_rs",
}


def _template(rs: bool, sparse: bool = False):
    op = "wgmma.mma_async.sp.sync.aligned" if sparse else "wgmma.mma_async.sync.aligned"

    def make(kind, len_acc, trans_a=0, trans_b=0, scale_a=1, scale_b=1, satfinite=0, spsel=0, **_):
        k = (wgmma_sp_kind if sparse else wgmma_kind)(kind)
        n = k.n_of(len_acc)
        # The sparse forms put the metadata register and the selector before scale-d.
        operands = f"$d, $a, $b, $meta, {spsel}, $scale_d" if sparse else "$d, $a, $b, $scale_d"
        if k.atype == "b1":
            head = f"{op}.{k.instruction(n)}.s32.b1.b1.and.popc"
            tail = ""
        elif k.dtype == "s32":
            sat = ".satfinite" if satfinite else ""
            head = f"{op}.{k.instruction(n)}{sat}.{k.key}"
            tail = ""
        else:
            head = f"{op}.{k.instruction(n)}.{k.key}"
            tail = f", {scale_a}, {scale_b}"
            if k.transposable:
                tail += f", {trans_b}" if rs else f", {trans_a}, {trans_b}"
        return f"{head} {operands}{tail};"

    return make


def _outs(kind, len_acc, **_):
    return [Out("d", WGMMA_KINDS[kind].acc_type, count=len_acc, tied="acc")]


_KIND = Imm("kind", choices=tuple(WGMMA_KINDS), expect="a wgmma type string such as 'f32.bf16.bf16'")
_SP_KIND = Imm("kind", choices=tuple(WGMMA_SP_KINDS),
               expect="a wgmma.mma_async.sp type string such as 'f32.bf16.bf16' (every dense type but s32.b1.b1)")
_SCALE = dict(choices=(1, -1), default=1)
_BIT = dict(choices=(0, 1), default=0)


def _mma(rs: bool, sparse: bool = False):
    a = Frag("a", u32, 4) if rs else Reg("a", u64)
    params = [Frag("acc", None), a, Reg("b", u64)]
    if sparse:
        # PTX order: d, a, b-desc, sp-meta, sp-sel, scale-d, ...; the selector is an immediate
        # (0..3 in the syntax; which values are legal depends on the type: see _validate).
        params += [Reg("meta", u32), _SP_KIND, Imm("spsel", choices=(0, 1, 2, 3), default=0)]
    else:
        params.append(_KIND)
    params += [
        Pred("scale_d", default=1),
        Imm("scale_a", **_SCALE),
        Imm("scale_b", **_SCALE),
    ]
    if not rs:
        params.append(Imm("trans_a", **_BIT))
    params += [Imm("trans_b", **_BIT), Imm("satfinite", **_BIT)]
    return params


wgmma_mma_async = ptx_intrinsic(
    "wgmma_mma_async",
    _template(rs=False),
    params=_mma(rs=False),
    outs=_outs,
    validate=_validate(rs=False),
    doc="``wgmma.mma_async.sync.aligned.m64nNkK.<kind>`` with A and B from shared-memory "
    "descriptors (PTX ISA: wgmma.mma_async). "
    "``acc = wgmma_mma_async(acc, desc_a, desc_b, kind, scale_d=1, scale_a=1, scale_b=1, "
    "trans_a=0, trans_b=0, satfinite=0)``; ``scale_d`` false computes D = A*B.",
)

wgmma_mma_async_rs = ptx_intrinsic(
    "wgmma_mma_async_rs",
    _template(rs=True),
    params=_mma(rs=True),
    outs=_outs,
    validate=_validate(rs=True),
    doc="``wgmma.mma_async.sync.aligned.m64nNkK.<kind>`` with A from four registers per "
    "thread (the layout ``ldmatrix`` produces) and B from a descriptor (PTX ISA: "
    "wgmma.mma_async). ``acc = wgmma_mma_async_rs(acc, a_frag, desc_b, kind, scale_d=1, ...)``.",
)

wgmma_mma_async_sp = ptx_intrinsic(
    "wgmma_mma_async_sp",
    _template(rs=False, sparse=True),
    params=_mma(rs=False, sparse=True),
    outs=_outs,
    validate=_validate(rs=False, sparse=True),
    doc="``wgmma.mma_async.sp.sync.aligned.m64nNkK.<kind>``: D = A*B + D with a 2:4-sparse A (1:2 for "
    "tf32) stored compressed (64 x K/2) in shared memory behind ``desc_a``, B (K x N) behind ``desc_b``, "
    "and the positions of A's kept elements in the per-thread metadata register ``meta`` (PTX ISA: "
    "wgmma.mma_async.sp; \"Sparse matrix storage\" and \"Matrix fragments for warpgroup-level "
    "multiply-accumulate operation with sparse matrix A\"). "
    "``acc = wgmma_mma_async_sp(acc, desc_a, desc_b, meta, kind, spsel=0, scale_d=1, scale_a=1, "
    "scale_b=1, trans_a=0, trans_b=0, satfinite=0)``. ``spsel`` names the threads of each quad whose "
    "``meta`` is read: 0 (T0,T1) or 1 (T2,T3) for f16/bf16/tf32, 0 (all four) for 8-bit types; the "
    "layout is :func:`nbwgmma.layout.sparse.meta_coords`.",
)

wgmma_mma_async_sp_rs = ptx_intrinsic(
    "wgmma_mma_async_sp_rs",
    _template(rs=True, sparse=True),
    params=_mma(rs=True, sparse=True),
    outs=_outs,
    validate=_validate(rs=True, sparse=True),
    doc="``wgmma.mma_async.sp.sync.aligned.m64nNkK.<kind>`` with the compressed sparse A from four "
    "registers per thread (the dense A-fragment layout of the 64 x K/2 compressed tile) and B from a "
    "descriptor (PTX ISA: wgmma.mma_async.sp). "
    "``acc = wgmma_mma_async_sp_rs(acc, a_frag, desc_b, meta, kind, spsel=0, scale_d=1, scale_a=1, "
    "scale_b=1, trans_b=0, satfinite=0)``.",
)

wgmma_fence = ptx_intrinsic(
    "wgmma_fence",
    "wgmma.fence.sync.aligned;",
    doc="``wgmma.fence.sync.aligned`` (PTX ISA: wgmma.fence). Order prior register "
    "accesses before the next wgmma.mma_async reads them.",
)

wgmma_commit_group = ptx_intrinsic(
    "wgmma_commit_group",
    "wgmma.commit_group.sync.aligned;",
    doc="``wgmma.commit_group.sync.aligned`` (PTX ISA: wgmma.commit_group). Close the "
    "outstanding wgmma.mma_async operations into a group.",
)

wgmma_wait_group = ptx_intrinsic(
    "wgmma_wait_group",
    "wgmma.wait_group.sync.aligned $n;",
    params=[Imm("n", rule=lambda v: isinstance(v, int) and 0 <= v <= 7, expect="an integer in [0, 7]")],
    doc="``wgmma.wait_group.sync.aligned N`` (PTX ISA: wgmma.wait_group). Wait until at "
    "most ``N`` groups are pending; the accumulators of completed groups may then be read.",
)
