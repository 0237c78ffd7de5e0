"""One warpgroup, one 64xN tile: a chain of wgmmas over operands placed in shared memory.

The host lays A and B out in a shared-memory byte image with the layout model
(:mod:`nbwgmma.layout.wgmma_model`), with any swizzle, major-ness and
strides, and passes one descriptor per K step. The kernel copies the image to
1024-byte aligned dynamic shared memory, issues the wgmmas and stores D. The
teaching examples and the wgmma tests run on it, and its result is compared
with :func:`wgmma_reference` reading the same image through the same
descriptors.
"""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from ..intrinsics import (
    acc_store,
    acc_zeros,
    dynamic_smem_base,
    fence_proxy_async_shared,
    smem_addr,
    wgmma_commit_group,
    wgmma_fence,
    wgmma_mma_async,
    wgmma_mma_async_rs,
    wgmma_wait_group,
)
from ..layout.descriptor import SWIZZLE_BYTES, SWIZZLE_PERIOD, canonical_strides, encode_desc
from ..layout.fragment import a_frag_coords
from ..layout.kinds import wgmma_kind
from ..layout.wgmma_model import ELEMENT_BYTES, encode_elements, pack_operand, wgmma_reference
from ..kit import inlined

__all__ = ["tile_kernel", "TileProblem", "run_tile"]


@inlined
def stage_image(image):
    """Copy a shared-memory image into 1024-byte aligned dynamic shared memory; return its
    32-bit address. The copy is made visible to the async proxy (wgmma) before returning."""
    dyn = cuda.shared.array(0, np.uint8)
    base = dynamic_smem_base(dyn, 1024)
    off = base - smem_addr(dyn)
    for i in range(cuda.threadIdx.x, image.size, cuda.blockDim.x):
        dyn[off + i] = image[i]
    fence_proxy_async_shared()
    cuda.syncthreads()
    return base


@functools.lru_cache(maxsize=None)
def tile_kernel(kind: str, n: int, ksteps: int, rs: bool = False, trans_a: int = 0, trans_b: int = 0,
                scale_a: int = 1, scale_b: int = 1):
    """A ``@cuda.jit`` kernel for one (kind, N, K steps, A source, transposes, scales)."""

    if rs:
        @cuda.jit(launch_bounds=(128, 1))
        def kernel(image, desc_a, desc_b, a_regs, out):
            base = stage_image(image)
            tid = cuda.threadIdx.x
            acc = acc_zeros(kind, n)
            wgmma_fence()
            for s in range(ksteps):
                a = (a_regs[s, tid, 0], a_regs[s, tid, 1], a_regs[s, tid, 2], a_regs[s, tid, 3])
                acc = wgmma_mma_async_rs(acc, a, desc_b[s] + (base >> 4), kind, 1, scale_a, scale_b, trans_b)
            wgmma_commit_group()
            wgmma_wait_group(0)
            acc_store(acc, kind, out, tid, 0, 0)
    else:
        @cuda.jit(launch_bounds=(128, 1))
        def kernel(image, desc_a, desc_b, a_regs, out):
            base = stage_image(image)
            tid = cuda.threadIdx.x
            acc = acc_zeros(kind, n)
            wgmma_fence()
            for s in range(ksteps):
                acc = wgmma_mma_async(acc, desc_a[s] + (base >> 4), desc_b[s] + (base >> 4), kind, 1,
                                      scale_a, scale_b, trans_a, trans_b)
            wgmma_commit_group()
            wgmma_wait_group(0)
            acc_store(acc, kind, out, tid, 0, 0)

    return kernel


class TileProblem:
    """A 64 x N x (ksteps * K) problem laid out in one shared-memory image.

    Each K step's slice of A (64 x K) and B (N x K) is placed with its own
    descriptor: ``swizzle``, ``major`` ("K" or "MN"), LBO and SBO per operand.
    """

    def __init__(self, kind, n, ksteps, a, b, *, swizzle="none", trans_a=0, trans_b=0):
        self.kind, self.n, self.ksteps = kind, n, ksteps
        self.k = wgmma_kind(kind)
        self.a, self.b = a, b
        self.swizzle, self.trans_a, self.trans_b = swizzle, trans_a, trans_b
        self.image, self.desc_a, self.desc_b = self._layout()

    def _steps_per_slice(self, t, major):
        """K steps that share one placement: a K-major swizzled atom holds span/kbytes steps."""
        kbytes = int(self.k.k * ELEMENT_BYTES[t])
        if major == "K" and self.swizzle != "none":
            return max(1, SWIZZLE_BYTES[self.swizzle] // kbytes), kbytes
        return 1, kbytes

    def _place(self, cursor, rows, t, major, kelems):
        """(start, lbo, sbo, size) of a dense canonical [rows, kelems] tile at or after ``cursor``."""
        es = ELEMENT_BYTES[t]
        sw = self.swizzle
        align = max(SWIZZLE_PERIOD[sw], 128)
        start = -(-cursor // align) * align
        if major == "K":
            lbo, sbo = canonical_strides(sw, int(kelems * es))
            size = -(-rows // 8) * sbo
        else:
            es = int(es)
            if sw == "none":
                # Core matrices of 8 K-rows x 16 bytes of M/N; SBO along M/N, LBO along K.
                sbo = 128
                lbo = 128 * -(-rows * es // 16)
                size = lbo * -(-kelems // 8)
            else:
                # Rows of `span` bytes of M/N, 8 K-rows per atom: SBO along K, LBO along M/N.
                span = SWIZZLE_BYTES[sw]
                sbo = 8 * span
                lbo = sbo * -(-kelems // 8)
                size = lbo * -(-rows * es // span)
        return start, lbo, sbo, size

    def _layout(self):
        k = self.k
        image = np.zeros(256 * 1024, np.uint8)
        cursor = 0
        descs = {"a": [], "b": []}
        for name, mat, rows, t, major in (
            ("a", self.a, 64, k.atype, "MN" if self.trans_a else "K"),
            ("b", self.b, self.n, k.btype, "MN" if self.trans_b else "K"),
        ):
            per, kbytes = self._steps_per_slice(t, major)
            for s0 in range(0, self.ksteps, per):
                steps = min(per, self.ksteps - s0)
                kelems = per * k.k  # a whole atom; unused K columns stay zero
                chunk = np.zeros((rows, kelems), mat.dtype)
                chunk[:, : steps * k.k] = mat[:, s0 * k.k:(s0 + steps) * k.k]
                start, lbo, sbo, size = self._place(cursor, rows, t, major, kelems)
                pack_operand(image, start, chunk, t, major, self.swizzle, lbo, sbo)
                for j in range(steps):
                    descs[name].append(encode_desc(start + j * kbytes, lbo, sbo, self.swizzle))
                cursor = start + size
        nbytes = -(-cursor // 1024) * 1024
        return image[:nbytes].copy(), np.array(descs["a"], np.uint64), np.array(descs["b"], np.uint64)

    def a_registers(self):
        """[ksteps, 128, 4] u32: the A fragment of each K step, per thread (RS form)."""
        k = self.k
        coords = a_frag_coords(self.kind)  # [128, 4, E, 2]
        regs = np.zeros((self.ksteps, 128, 4), np.uint32)
        for s in range(self.ksteps):
            sl = self.a[:, s * k.k:(s + 1) * k.k]
            vals = sl[coords[..., 0], coords[..., 1]]  # [128, 4, E]
            flat = vals.reshape(128 * 4, -1)
            raw = encode_elements(flat, k.atype)  # [512, 4] bytes
            regs[s] = raw.view(np.uint32).reshape(128, 4)
        return regs

    def reference(self, scale_a=1, scale_b=1):
        out = None
        for s in range(self.ksteps):
            d = wgmma_reference(self.image, self.kind, self.n, int(self.desc_a[s]), int(self.desc_b[s]),
                                trans_a=self.trans_a, trans_b=self.trans_b, scale_a=scale_a, scale_b=scale_b)
            out = d if out is None else out + d
        return out


def out_dtype(kind: str):
    return {"f32": np.float32, "f16": np.float16, "s32": np.int32}[wgmma_kind(kind).dtype]


def run_tile(problem: TileProblem, *, rs=False, scale_a=1, scale_b=1, sentinel=None):
    """Run the tile kernel on the GPU; return D as a host array."""
    from ..launch import dynamic_smem_bytes, launch

    p = problem
    dt = out_dtype(p.kind)
    fill = sentinel if sentinel is not None else (np.nan if dt != np.int32 else -(2**31))
    out = cuda.to_device(np.full((64, p.n), fill, dt))
    regs = p.a_registers() if rs else np.zeros((p.ksteps, 128, 4), np.uint32)
    kern = tile_kernel(p.kind, p.n, p.ksteps, rs, p.trans_a, p.trans_b, scale_a, scale_b)
    args = (cuda.to_device(p.image), cuda.to_device(p.desc_a), cuda.to_device(p.desc_b), cuda.to_device(regs), out)
    launch(kern, 1, 128, args, smem=dynamic_smem_bytes(p.image.size, 1024))
    return out.copy_to_host()
