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

Call sequence (all 128 threads of the warpgroup, converged)::

    wgmma_fence()
    acc = wgmma_mma_async(acc, desc_a, desc_b, "f32.bf16.bf16", scale_d)
    wgmma_commit_group()
    wgmma_wait_group(0)
"""

from __future__ import annotations

from ..layout.kinds import INT8_TYPES, WGMMA_KINDS, wgmma_kind
from ._asm import Frag, Imm, NbwgmmaTypingError, Out, Pred, Reg, ptx_intrinsic, u32, u64

__all__ = [
    "wgmma_mma_async",
    "wgmma_mma_async_rs",
    "wgmma_fence",
    "wgmma_commit_group",
    "wgmma_wait_group",
]


def _validate(rs: bool):
    def check(imms, argtypes):
        name = "wgmma_mma_async_rs" if rs else "wgmma_mma_async"
        kind = wgmma_kind(imms["kind"])
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

    return check


def _template(rs: bool):
    def make(kind, len_acc, trans_a=0, trans_b=0, scale_a=1, scale_b=1, satfinite=0, **_):
        k = wgmma_kind(kind)
        n = k.n_of(len_acc)
        a = "$a"
        if k.atype == "b1":
            head = f"wgmma.mma_async.sync.aligned.{k.instruction(n)}.s32.b1.b1.and.popc"
            tail = ""
        elif k.dtype == "s32":
            sat = ".satfinite" if satfinite else ""
            head = f"wgmma.mma_async.sync.aligned.{k.instruction(n)}{sat}.{k.key}"
            tail = ""
        else:
            head = f"wgmma.mma_async.sync.aligned.{k.instruction(n)}.{k.key}"
            tail = f", {scale_a}, {scale_b}"
            if k.transposable:
                tail += f", {trans_b}" if rs else f", {trans_a}, {trans_b}"
        return f"{head} $d, {a}, $b, $scale_d{tail};"

    return make


def _outs(kind, len_acc, **_):
    return [Out("d", wgmma_kind(kind).acc_type, count=len_acc, tied="acc")]


_KIND = Imm("kind", choices=tuple(WGMMA_KINDS), expect="a wgmma type string such as 'f32.bf16.bf16'")
_SCALE = dict(choices=(1, -1), default=1)
_BIT = dict(choices=(0, 1), default=0)


def _mma(rs: bool):
    a = Frag("a", u32, 4) if rs else Reg("a", u64)
    params = [
        Frag("acc", None),
        a,
        Reg("b", u64),
        _KIND,
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
