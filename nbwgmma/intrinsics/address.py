"""Shared-memory addresses, cluster ids and cross-CTA address mapping.

PTX ISA sections: "Data Movement and Conversion Instructions: cvta", "mapa",
and "Special Registers: %cluster_ctarank, %cluster_nctarank, %clusterid".

nbwgmma passes shared memory to instructions as 32-bit ``.shared::cta``
addresses (``u32``): what ``mbarrier``, ``ldmatrix``, ``stmatrix``, TMA and the
``wgmma`` descriptors take.
"""

from __future__ import annotations

from ._asm import ArrayPtr, Imm, Out, Reg, f32, ptx_intrinsic, special_register, u32, u64

__all__ = [
    "smem_addr",
    "dynamic_smem_base",
    "cluster_ctarank",
    "cluster_nctarank",
    "cluster_id",
    "cluster_ctaid",
    "mapa",
]

_CVTA = """{
.reg .u64 %nbw_a;
cvta.to.shared.u64 %nbw_a, $ptr;
cvt.u32.u64 $addr, %nbw_a;
}"""

smem_addr = ptx_intrinsic(
    "smem_addr",
    _CVTA.replace("$ptr", "$array"),
    params=[ArrayPtr("array")],
    outs=[Out("addr", u32)],
    memory=False,
    side_effect=False,
    doc="``cvta.to.shared.u64`` (PTX ISA: cvta). The 32-bit shared-memory address of the "
    "first element of a ``cuda.shared.array``.",
)

_POW2 = Imm(
    "align",
    rule=lambda v: isinstance(v, int) and v >= 16 and (v & (v - 1)) == 0 and v <= 4096,
    expect="a power of two in [16, 4096]",
)

dynamic_smem_base = ptx_intrinsic(
    "dynamic_smem_base",
    lambda align: f"""{{
.reg .u64 %nbw_a;
.reg .u32 %nbw_s;
cvta.to.shared.u64 %nbw_a, $array;
cvt.u32.u64 %nbw_s, %nbw_a;
add.u32 %nbw_s, %nbw_s, {align - 1};
and.b32 $addr, %nbw_s, {(~(align - 1)) & 0xFFFFFFFF};
}}""",
    params=[ArrayPtr("array"), _POW2],
    outs=[Out("addr", u32)],
    memory=False,
    side_effect=False,
    doc="``cvta.to.shared.u64`` (PTX ISA: cvta), rounded up: the 32-bit shared address of "
    "the dynamic shared memory (``cuda.shared.array(0, ...)``) aligned to ``align`` bytes. "
    "Launch with ``align - 1`` extra bytes (see :func:`nbwgmma.launch.dynamic_smem_bytes`); "
    "128B-swizzled tiles need ``align=1024``.",
)


cluster_ctarank = special_register(
    "cluster_ctarank", "%cluster_ctarank",
    doc="``mov.u32 r, %cluster_ctarank`` (PTX ISA: Special Registers). This CTA's rank in its cluster.",
)
cluster_nctarank = special_register(
    "cluster_nctarank", "%cluster_nctarank",
    doc="``mov.u32 r, %cluster_nctarank`` (PTX ISA: Special Registers). The number of CTAs in the cluster.",
)

_AXIS = Imm("axis", choices=("x", "y", "z"), default="x")

cluster_id = ptx_intrinsic(
    "cluster_id",
    "mov.u32 $value, %clusterid.$axis;",
    params=[_AXIS],
    outs=[Out("value", u32)],
    memory=False,
    side_effect=False,
    doc="``mov.u32 r, %clusterid.{x,y,z}`` (PTX ISA: Special Registers). The cluster's id in the grid.",
)

cluster_ctaid = ptx_intrinsic(
    "cluster_ctaid",
    "mov.u32 $value, %cluster_ctaid.$axis;",
    params=[_AXIS],
    outs=[Out("value", u32)],
    memory=False,
    side_effect=False,
    doc="``mov.u32 r, %cluster_ctaid.{x,y,z}`` (PTX ISA: Special Registers). This CTA's "
    "position inside its cluster.",
)

mapa = ptx_intrinsic(
    "mapa",
    "mapa.shared::cluster.u32 $remote, $addr, $cta;",
    params=[Reg("addr", u32), Reg("cta", u32)],
    outs=[Out("remote", u32)],
    memory=False,
    side_effect=False,
    doc="``mapa.shared::cluster.u32`` (PTX ISA: mapa). Map the shared address ``addr`` of "
    "this CTA to the ``.shared::cluster`` address of the same offset in CTA ``cta`` of the "
    "cluster; use it with ``st.shared::cluster`` / ``ld.shared::cluster``.",
)

st_shared_cluster_u32 = ptx_intrinsic(
    "st_shared_cluster_u32",
    "st.shared::cluster.u32 [$addr], $value;",
    params=[Reg("addr", u32), Reg("value", u32)],
    doc="``st.shared::cluster.u32`` (PTX ISA: st). Store to a ``.shared::cluster`` address "
    "(from :func:`mapa`), possibly in a peer CTA's shared memory.",
)

ld_shared_cluster_u32 = ptx_intrinsic(
    "ld_shared_cluster_u32",
    "ld.shared::cluster.u32 $value, [$addr];",
    params=[Reg("addr", u32)],
    outs=[Out("value", u32)],
    doc="``ld.shared::cluster.u32`` (PTX ISA: ld). Load from a ``.shared::cluster`` address.",
)

st_shared_v4_b32 = ptx_intrinsic(
    "st_shared_v4_b32",
    "st.shared.v4.b32 [$addr], {$x, $y, $z, $w};",
    params=[Reg("addr", u32), Reg("x", u32), Reg("y", u32), Reg("z", u32), Reg("w", u32)],
    doc="``st.shared.v4.b32`` (PTX ISA: st). Store 16 bytes (four 32-bit values) at the 16-byte "
    "aligned ``.shared::cta`` address ``addr`` (clearing part of a TMA stage, say; follow it with "
    "``fence_proxy_async_shared`` and a barrier before wgmma or TMA reads the bytes).",
)

__all__ += ["st_shared_cluster_u32", "ld_shared_cluster_u32", "st_shared_v4_b32"]

ld_shared_v4_b32 = ptx_intrinsic(
    "ld_shared_v4_b32",
    "ld.shared.v4.b32 $v, [$addr];",
    params=[Reg("addr", u32)],
    outs=[Out("v", u32, count=4)],
    doc="``ld.shared.v4.b32`` (PTX ISA: ld). ``(x, y, z, w) = ld_shared_v4_b32(addr)``: load 16 "
    "bytes (four 32-bit values) from the 16-byte aligned ``.shared::cta`` address ``addr`` (a pass "
    "over a staged tile, as :class:`nbwgmma.kit.EpilogueWarps` makes; pair with "
    ":func:`st_shared_v4_b32`).",
)

__all__ += ["ld_shared_v4_b32"]

ld_shared_f32 = ptx_intrinsic(
    "ld_shared_f32",
    "ld.shared.f32 $v, [$addr];",
    params=[Reg("addr", u32)],
    outs=[Out("v", f32)],
    doc="``ld.shared.f32`` (PTX ISA: ld). Load one f32 from the 4-byte aligned ``.shared::cta`` "
    "address ``addr`` (a scale a producer staged beside a pipeline's stage, as "
    ":class:`nbwgmma.kit.BlockScaled` reads them).",
)

st_shared_f32 = ptx_intrinsic(
    "st_shared_f32",
    "st.shared.f32 [$addr], $v;",
    params=[Reg("addr", u32), Reg("v", f32)],
    doc="``st.shared.f32`` (PTX ISA: st). Store one f32 at the 4-byte aligned ``.shared::cta`` "
    "address ``addr`` (a producer thread staging a scale beside a pipeline's stage before it arms "
    "the stage's barrier, whose release orders the store before the consumers' reads).",
)

__all__ += ["ld_shared_f32", "st_shared_f32"]

st_global_v4_b32 = ptx_intrinsic(
    "st_global_v4_b32",
    """{
.reg .u64 %nbw_g;
cvta.to.global.u64 %nbw_g, $array;
add.u64 %nbw_g, %nbw_g, $offset;
st.global.v4.b32 [%nbw_g], {$x, $y, $z, $w};
}""",
    params=[ArrayPtr("array"), Reg("offset", u64), Reg("x", u32), Reg("y", u32), Reg("z", u32), Reg("w", u32)],
    doc="``st.global.v4.b32`` (PTX ISA: st; ``cvta.to.global`` of the array's address). Store 16 bytes "
    "(four 32-bit values) at byte ``offset`` from the first element of the global array ``array`` "
    "(16-byte aligned; no bounds check: the caller keeps it inside the array, as "
    ":class:`nbwgmma.kit.EpilogueWarps` does for rows of C).",
)

__all__ += ["st_global_v4_b32"]

ld_shared_b32 = ptx_intrinsic(
    "ld_shared_b32",
    "ld.shared.b32 $v, [$addr];",
    params=[Reg("addr", u32)],
    outs=[Out("v", u32)],
    doc="``ld.shared.b32`` (PTX ISA: ld). Load 4 bytes (a pair of 16-bit values, say) from the "
    "4-byte aligned ``.shared::cta`` address ``addr`` (a row of a staged tile, as "
    ":func:`nbwgmma.kit.store_rows_part` reads it).",
)

st_global_b16x2 = ptx_intrinsic(
    "st_global_b16x2",
    """{
.reg .u64 %nbw_g;
.reg .b64 %nbw_t;
.reg .pred %nbw_p;
.reg .b16 %nbw_lo, %nbw_hi;
cvta.to.global.u64 %nbw_g, $array;
add.u64 %nbw_g, %nbw_g, $offset;
and.b64 %nbw_t, %nbw_g, 3;
setp.eq.b64 %nbw_p, %nbw_t, 0;
mov.b32 {%nbw_lo, %nbw_hi}, $v;
@%nbw_p st.global.b32 [%nbw_g], $v;
@!%nbw_p st.global.b16 [%nbw_g], %nbw_lo;
@!%nbw_p st.global.b16 [%nbw_g+2], %nbw_hi;
}""",
    params=[ArrayPtr("array"), Reg("offset", u64), Reg("v", u32)],
    doc="``st.global.b32``, or two ``st.global.b16`` (PTX ISA: st; ``cvta.to.global`` of the "
    "array's address). Store the two 16-bit values of ``v`` (low half first) at byte ``offset`` "
    "from the first element of the global array ``array``: one 4-byte store where the address is "
    "4-byte aligned, else one 2-byte store each (a row of an out whose rows are an odd number of "
    "16-bit elements apart; no bounds check).",
)

st_global_b16 = ptx_intrinsic(
    "st_global_b16",
    """{
.reg .u64 %nbw_g;
.reg .b16 %nbw_lo, %nbw_hi;
cvta.to.global.u64 %nbw_g, $array;
add.u64 %nbw_g, %nbw_g, $offset;
mov.b32 {%nbw_lo, %nbw_hi}, $v;
st.global.b16 [%nbw_g], %nbw_lo;
}""",
    params=[ArrayPtr("array"), Reg("offset", u64), Reg("v", u32)],
    doc="``st.global.b16`` (PTX ISA: st). Store the low 16 bits of ``v`` at byte ``offset`` from "
    "the first element of the global array ``array`` (2-byte aligned; no bounds check): a row's "
    "last column where :func:`st_global_b16x2`'s pair would pass the row's end.",
)

__all__ += ["ld_shared_b32", "st_global_b16x2", "st_global_b16"]
