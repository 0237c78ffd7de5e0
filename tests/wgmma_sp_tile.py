"""One warpgroup, one 64 x N tile of sparse wgmmas (``wgmma.mma_async.sp``), for the tests: the
host lays the compressed A and B out in a shared-memory byte image and packs the metadata
registers with :mod:`nbwgmma.layout.sparse`; the kernel issues one sparse wgmma per K step and
stores D. Used by the GPU tests (tests/intrinsics/test_wgmma_sp_gpu.py), the simulator's
(tests/sim_sparse_cases.py) and the CPU model tests."""

from __future__ import annotations

import functools

import numpy as np
from numba import cuda

from nbwgmma.intrinsics import (acc_store, acc_zeros, wgmma_commit_group, wgmma_fence, wgmma_mma_async_sp,
                                wgmma_mma_async_sp_rs, wgmma_wait_group)
from nbwgmma.kernels.wgmma_tile import stage_image
from nbwgmma.layout import (ELEMENT_BYTES, SWIZZLE_BYTES, SWIZZLE_PERIOD, canonical_strides, compress_24,
                            decode_elements, encode_desc, encode_elements, meta_registers_pair, meta_registers,
                            pack_operand, read_sparse_a_registers, sparse_a_registers, wgmma_sp_kind,
                            wgmma_sp_reference)

#: Selector modes: every K step with sp-sel 0, every one with 1, or pairs of K steps sharing one
#: register (T0, T1 the even step with sp-sel 0, T2, T3 the odd one with sp-sel 1).
SPSEL_MODES = ("0", "1", "pair")


def sparse_operands(kind, n, ksteps, rng, random=False):
    """(A, B): a 2:4-sparse A [64, ksteps*K] whose chunks use every position pattern (1:2 for
    tf32) and a B [N, ksteps*K]; small nonzero integers (exact in every type), or normal
    random data (A pruned by keeping random positions)."""
    k = wgmma_sp_kind(kind)
    K = ksteps * k.k

    def values(t, shape):
        if t == "s8":
            v = rng.integers(-128, 128, shape)
        elif t == "u8":
            v = rng.integers(1, 256, shape)
        elif random:
            return rng.standard_normal(shape)
        else:
            v = rng.integers(-3, 4, shape)
        return np.where(v == 0, 1, v).astype(np.float64 if t not in ("s8", "u8") else np.int64)

    c = k.chunk
    dense = values(k.atype, (64, K))
    patterns = np.array([(i, j) for i in range(c) for j in range(i + 1, c)]) if c == 4 else np.array([[0], [1]])
    pick = patterns[rng.integers(0, len(patterns), (64, K // c))]  # [64, chunks, kept]
    keep = np.zeros((64, K // c, c), bool)
    np.put_along_axis(keep, pick, True, axis=-1)
    a = np.where(keep.reshape(64, K), dense, 0)
    return a, values(k.btype, (n, K))


class SparseTileProblem:
    """A 64 x N x (ksteps * K) sparse problem: the compressed A and B in one shared-memory image
    (one descriptor per K step and operand), the metadata registers of every K step, and the
    selector of each step (``spsel``: one of :data:`SPSEL_MODES`).

    With a selector, the registers the instruction does not read (T2, T3 with sp-sel 0, T0, T1
    with 1) hold other, valid metadata: a result that used them would differ from the model.
    """

    def __init__(self, kind, n, ksteps, a, b, *, swizzle="none", swizzle_b=None, trans_a=0, trans_b=0, spsel="0"):
        self.kind, self.n, self.ksteps = kind, n, ksteps
        self.k = k = wgmma_sp_kind(kind)
        if spsel not in SPSEL_MODES or (spsel != "0" and k.input_bits == 8):
            raise ValueError(f"spsel mode {spsel!r} is not legal for {kind}")
        if spsel == "pair" and ksteps % 2:
            raise ValueError("pairs of K steps need an even number of steps")
        self.spsel, self.trans_a, self.trans_b = spsel, trans_a, trans_b
        self.swizzle_a, self.swizzle_b = swizzle, swizzle_b or swizzle
        self.a, self.b = a, b
        self.values, self.meta = compress_24(a, k.atype)
        self.image, self.desc_a, self.desc_b = self._layout()
        self.meta_regs = self._meta_registers()

    def step_spsel(self, s):
        return {"0": 0, "1": 1, "pair": s % 2}[self.spsel]

    def _meta_registers(self):
        k = self.k
        per = k.k // k.chunk
        tiles = [self.meta[:, s * per:(s + 1) * per] for s in range(self.ksteps)]
        regs = np.zeros((self.ksteps, 128), np.uint32)
        for s, tile in enumerate(tiles):
            if k.input_bits == 8:
                regs[s] = meta_registers(tile, self.kind)
            elif self.spsel == "pair":
                pair = tiles[s - s % 2], tiles[s - s % 2 + 1]
                regs[s] = meta_registers_pair(*pair, self.kind)
            else:
                other = np.roll(tile, 1, axis=0)  # valid codes of other rows, never read
                regs[s] = meta_registers_pair(*((tile, other) if self.spsel == "0" else (other, tile)), self.kind)
        return regs

    def _place(self, cursor, rows, t, major, kelems, swizzle):
        """(start, lbo, sbo, size) of a dense canonical [rows, kelems] tile at or after ``cursor``."""
        es = ELEMENT_BYTES[t]
        start = -(-cursor // max(SWIZZLE_PERIOD[swizzle], 128)) * max(SWIZZLE_PERIOD[swizzle], 128)
        if major == "K":
            lbo, sbo = canonical_strides(swizzle, int(kelems * es))
            return start, lbo, sbo, -(-rows // 8) * sbo
        es = int(es)
        if swizzle == "none":
            sbo, lbo = 128, 128 * -(-rows * es // 16)
            return start, lbo, sbo, lbo * -(-kelems // 8)
        span = SWIZZLE_BYTES[swizzle]
        sbo = 8 * span
        lbo = sbo * -(-kelems // 8)
        return start, lbo, sbo, lbo * -(-rows * es // span)

    def _layout(self):
        k = self.k
        image = np.zeros(224 * 1024, np.uint8)
        cursor = 0
        descs = {"a": [], "b": []}
        for name, mat, rows, t, cols, major, sw in (
            ("a", self.values, 64, k.atype, k.a_cols, "MN" if self.trans_a else "K", self.swizzle_a),
            ("b", self.b, self.n, k.btype, k.k, "MN" if self.trans_b else "K", self.swizzle_b),
        ):
            kbytes = int(cols * ELEMENT_BYTES[t])
            # A K-major swizzled atom row holds span/kbytes K steps side by side (a K step inside
            # the atom is a byte offset on the start address); otherwise one step per tile.
            per = max(1, SWIZZLE_BYTES[sw] // kbytes) if major == "K" and sw != "none" else 1
            for s0 in range(0, self.ksteps, per):
                steps = min(per, self.ksteps - s0)
                chunk = np.zeros((rows, per * cols), mat.dtype)
                chunk[:, :steps * cols] = mat[:, s0 * cols:(s0 + steps) * cols]
                start, lbo, sbo, size = self._place(cursor, rows, t, major, per * cols, sw)
                pack_operand(image, start, chunk, t, major, sw, lbo, sbo)
                descs[name] += [encode_desc(start + j * kbytes, lbo, sbo, sw) for j in range(steps)]
                cursor = start + size
        nbytes = -(-cursor // 1024) * 1024
        return image[:nbytes].copy(), np.array(descs["a"], np.uint64), np.array(descs["b"], np.uint64)

    def a_registers(self):
        """[ksteps, 128, 4] uint32: the compressed A of each K step in registers (RS form)."""
        c = self.k.a_cols
        return np.stack([sparse_a_registers(self.values[:, s * c:(s + 1) * c], self.kind)
                         for s in range(self.ksteps)])

    def reference(self, scale_a=1, scale_b=1, rs=False):
        """D through the model, K step by K step, reading what the kernel hands the instruction."""
        regs = self.a_registers() if rs else None
        out = 0
        for s in range(self.ksteps):
            out = out + wgmma_sp_reference(
                self.image, self.kind, self.n, int(self.desc_a[s]), int(self.desc_b[s]), self.meta_regs[s],
                spsel=self.step_spsel(s), trans_a=self.trans_a, trans_b=self.trans_b, scale_a=scale_a,
                scale_b=scale_b, a_values=read_sparse_a_registers(regs[s], self.kind) if rs else None)
        return out

    def dense_product(self):
        """A @ B^T of the dense operands as the element type holds them (no layout involved)."""
        k = self.k
        a = decode_elements(encode_elements(self.a, k.atype), k.atype).reshape(self.a.shape)
        b = decode_elements(encode_elements(self.b, k.btype), k.btype).reshape(self.b.shape)
        return a @ b.T


@functools.lru_cache(maxsize=None)
def sp_tile_kernel(kind, n, ksteps, rs=False, spsel="0", trans_a=0, trans_b=0, scale_a=1, scale_b=1):
    """A ``@cuda.jit`` kernel: one sparse wgmma per K step, then D stored [64, N]."""
    sel_even = 1 if spsel == "1" else 0
    sel_odd = 0 if spsel == "0" else 1

    if rs:
        @cuda.jit(launch_bounds=(128, 1))
        def kernel(image, desc_a, desc_b, a_regs, meta, out):
            base = stage_image(image)
            tid = cuda.threadIdx.x
            acc = acc_zeros(kind, n)
            for s in range(ksteps):
                a = (a_regs[s, tid, 0], a_regs[s, tid, 1], a_regs[s, tid, 2], a_regs[s, tid, 3])
                wgmma_fence()  # orders the loads of A and the metadata before the wgmma reads them
                if s % 2 == 0:
                    acc = wgmma_mma_async_sp_rs(acc, a, desc_b[s] + (base >> 4), meta[s, tid], kind, sel_even, 1,
                                                scale_a, scale_b, trans_b)
                else:
                    acc = wgmma_mma_async_sp_rs(acc, a, desc_b[s] + (base >> 4), meta[s, tid], kind, sel_odd, 1,
                                                scale_a, scale_b, trans_b)
            wgmma_commit_group()
            wgmma_wait_group(0)
            acc_store(acc, kind, out, tid, 0, 0)
    else:
        @cuda.jit(launch_bounds=(128, 1))
        def kernel(image, desc_a, desc_b, a_regs, meta, out):
            base = stage_image(image)
            tid = cuda.threadIdx.x
            acc = acc_zeros(kind, n)
            for s in range(ksteps):
                da, db = desc_a[s] + (base >> 4), desc_b[s] + (base >> 4)
                wgmma_fence()  # orders the load of the metadata before the wgmma reads it
                if s % 2 == 0:
                    acc = wgmma_mma_async_sp(acc, da, db, meta[s, tid], kind, sel_even, 1, scale_a, scale_b,
                                             trans_a, trans_b)
                else:
                    acc = wgmma_mma_async_sp(acc, da, db, meta[s, tid], kind, sel_odd, 1, scale_a, scale_b,
                                             trans_a, trans_b)
            wgmma_commit_group()
            wgmma_wait_group(0)
            acc_store(acc, kind, out, tid, 0, 0)

    return kernel


def run_sp_tile(p: SparseTileProblem, *, rs=False, scale_a=1, scale_b=1):
    """Run the tile kernel (GPU or simulator) on a poisoned output; return D as a host array."""
    from nbwgmma.launch import dynamic_smem_bytes, launch

    dt = {"f32": np.float32, "f16": np.float16, "s32": np.int32}[p.k.dtype]
    out = cuda.to_device(np.full((64, p.n), np.nan if dt != np.int32 else -(2 ** 31), dt))
    regs = p.a_registers() if rs else np.zeros((p.ksteps, 128, 4), np.uint32)
    kern = sp_tile_kernel(p.kind, p.n, p.ksteps, rs, p.spsel, p.trans_a, p.trans_b, scale_a, scale_b)
    args = (cuda.to_device(p.image), cuda.to_device(p.desc_a), cuda.to_device(p.desc_b), cuda.to_device(regs),
            cuda.to_device(p.meta_regs), out)
    launch(kern, 1, 128, args, smem=dynamic_smem_bytes(p.image.size, 1024))
    return out.copy_to_host()
