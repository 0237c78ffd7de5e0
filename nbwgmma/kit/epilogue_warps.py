"""Epilogue warps: the producer warpgroup's idle warps finish the consumers' C tile.

With :class:`~nbwgmma.kit.Cooperative` consumers (both warpgroups on one tile, the largest
tiles) the epilogue runs while the tensor cores idle. :class:`EpilogueWarps` moves its
elementwise part (an activation, any function of one value) to warps that have nothing else
to do: warps 1-3 of the producer warpgroup (96 threads; warp 0 holds the TMA producer
thread). The consumers do what needs the f32 value and its row and column (a scale, a bias,
``beta * C``), convert their accumulator to 16-bit pairs, write it with ``stmatrix`` into one
shared C tile (``bm`` x ``bn``, 64 x 64 blocks with the 128-byte swizzle),
arrive on its "full" barrier and go on to their next main loop. The epilogue warps wait for
it, apply ``fn`` to every value in place (16 bytes a load, order free: the function sees no
coordinates), store the values themselves, 16 bytes at a time, only rows and columns below
the counts they are given (``drain_to``: a tile may end anywhere, as a grouped GEMM's group
does, where a TMA store clips only at the edges of its tensor map), each thread arriving on
the "empty" barrier the consumers wait on before writing their next tile once it has read
its chunks::

    ew = EpilogueWarps(activation("gelu_tanh"), 128, 256, "bf16")

    @cuda.jit(launch_bounds=(384, 1))
    def kernel(...):
        base, ring = pipe.setup()
        ebar = ew.setup()                        # two mbarriers, initialized; every thread
        cbuf = base + C_OFF                      # ew.tile_bytes of shared memory, 1 KiB aligned
        ...
        if tid < 128:
            setmaxnreg_dec(48)
            if tid == 0: ...                     # the TMA producer
            elif tid >= 32:                      # the epilogue warps, over the same tiles
                eph = 0
                for u in ...:
                    eph = ew.drain_to(ebar, cbuf, c_bytes, eph, tid - 32, row0, col0, m, n)
        else:                                    # consumer warpgroup cw, thread ct
            eph = 0
            for u in ...:
                acc, s, ph = coop.tile(...)
                regs = ...                       # bn / 4 packed 16-bit registers (acc_map, pack=)
                eph = ew.stage(regs, cbuf, ebar, eph, cw, ct)   # wait for the tile, write, arrive

``fn`` sees each value as rounded to the tile's 16-bit type (PyTorch's unfused
``F.gelu(x @ w.T + b)`` rounds there too) and its result is rounded again. The epilogue warps
take 48 registers (``setmaxnreg_dec(48)``: at 40 ptxas spilled around their loop; 56 with a
grouped GEMM's walk) and cost the consumers the tile's ``stmatrix`` and a barrier per tile.
One tile buffer: the consumers wait for it only if the epilogue warps have not finished the
previous tile by the end of the next main loop (on an H100 they kept up at 64 k-blocks per tile; at 16, K = 1024, the consumers
waited: BENCHMARKS.md, 2026-11-25).
"""

from __future__ import annotations

import types

import numpy as np
from numba import cuda

from ..errors import KitError, is_int
from ..intrinsics import (
    X2_FORMATS, acc_stmatrix_swizzled, f32_to_x2, fence_mbarrier_init, ld_shared_v4_b32, mbarrier_arrive, mbarrier_init,
    mbarrier_name, mbarrier_wait_parity, smem_addr, st_global_v4_b32, x2_to_f32,
)
from .device import inlined
from .typecheck import index_check

__all__ = ["EpilogueWarps", "THREADS", "no_epilogue_warps"]

#: Threads of the epilogue warps: warps 1-3 of warpgroup 0, threads 32-127 of the block.
THREADS = 96
_BLOCK = 64 * 64 * 2  # one 64 x 64 16-bit block of the tile, 128-byte swizzle


@cuda.jit(device=True, inline=True)
def no_epilogue_warps():
    """The stand-in for ``ew.setup()`` in a kernel built with and without epilogue warps: no
    barriers, 0 for their address."""
    return 0


class EpilogueWarps(types.ModuleType):
    """Epilogue warps applying ``fn`` (a device function of one f32 value, or None to store the
    values as they are) to a ``bm`` x ``bn`` C tile of 16-bit ``dtype`` that ``consumers``
    warpgroups (64 rows each) write, and storing the results. The tile
    takes :attr:`tile_bytes` of shared memory (1 KiB aligned). Device functions (inlined):

    * ``setup() -> ebar``: every thread; thread 0 initializes the two mbarriers (in static
      shared memory, at ``ebar``), then a barrier of the CTA;
    * consumers: ``acquire(ebar, eph) -> eph`` (wait until the tile is free; every consumer
      thread), ``write(regs, cbuf, cw, j, ct)`` (warpgroup ``cw``'s 16 packed registers of
      its 64-column part ``j``, as ``acc_map(..., 64, pack=dtype)`` or ``acc_to_bf16x2`` of a
      64-column slice gives them), ``commit(ebar)`` (every consumer thread, after its writes);
      ``stage(regs, cbuf, ebar, eph, cw, ct) -> eph`` the three at once, ``regs`` the
      warpgroup's ``bn / 4`` packed registers (its parts one after another);
    * epilogue warps: ``drain_to(ebar, cbuf, c, eph, ht, row0, col0, m, n) -> eph`` (thread
      ``ht`` = 0-95 of them: wait for the tile, ``fn`` over it, its values inside rows ``m``
      and columns ``n`` stored at (``row0``, ``col0``) of ``c``, C's bytes as a 2-D uint8 array
      with 16-byte aligned rows).

    Both sides start with ``eph = 0`` and walk the same tiles in the same order."""

    def __init__(self, fn, bm: int, bn: int, dtype: str = "bf16", *, consumers: int | None = None):
        if dtype not in X2_FORMATS:
            raise KitError(f"EpilogueWarps: dtype must be one of {X2_FORMATS}; got {dtype!r}")
        if not is_int(bm) or bm % 64 or not 64 <= bm <= 256:
            raise KitError(f"EpilogueWarps: bm must be 64, 128, 192 or 256 (64 rows per consumer); got {bm!r}")
        if not is_int(bn) or bn % 64 or not 64 <= bn <= 256:
            raise KitError(f"EpilogueWarps: bn must be a multiple of 64 up to 256; got {bn!r}")
        bm, bn = int(bm), int(bn)
        if consumers is None:
            consumers = bm // 64
        if not is_int(consumers) or consumers != bm // 64:
            raise KitError(f"EpilogueWarps: consumers must be bm / 64 = {bm // 64} (64 rows each); got {consumers!r}")
        consumers = int(consumers)
        if fn is not None and not callable(fn):
            raise KitError(f"EpilogueWarps: fn must be a device function of one value or None; got {fn!r}")
        super().__init__(f"EpilogueWarps({getattr(fn, '__name__', fn)}, {bm}x{bn}, {dtype})")
        self.fn, self.bm, self.bn, self.dtype, self.consumers = fn, bm, bn, dtype, consumers
        self.tile_bytes = bm * bn * 2
        self._build()

    def __repr__(self):
        name = getattr(self.fn, "__name__", self.fn)
        return f"EpilogueWarps({name}, bm={self.bm}, bn={self.bn}, dtype={self.dtype!r})"

    def _build(self):
        fn, FMT = self.fn, self.dtype
        ARRIVALS = 128 * self.consumers
        RELEASES = THREADS  # "empty": each epilogue thread's arrival once it has read its chunks
        PARTS = self.bn // 64  # 64-column blocks per consumer
        CHUNKS = self.tile_bytes // 16

        if fn is None:
            @inlined
            def one(w):
                return w
        else:
            @inlined
            def one(w):
                lo, hi = x2_to_f32(w, FMT)
                return f32_to_x2(fn(lo), fn(hi), FMT)

        @cuda.jit(device=True, inline=True)  # Numba-inlined: its shared array becomes the kernel's
        def setup():
            bars = cuda.shared.array(2, np.uint64)
            ebar = smem_addr(bars)
            if cuda.threadIdx.x == 0:
                mbarrier_init(ebar, ARRIVALS)
                mbarrier_name(ebar, "c_full", 0)
                mbarrier_init(ebar + 8, RELEASES)
                mbarrier_name(ebar + 8, "c_empty", 0)
                fence_mbarrier_init()
            cuda.syncthreads()
            return ebar

        @inlined
        def acquire(ebar, eph):
            mbarrier_wait_parity(ebar + 8, eph ^ 1)  # parity 1 is the phase before the first
            return eph ^ 1

        @inlined
        def write(regs, cbuf, cw, j, ct):
            write_cw(cw)  # (simulated: a consumer index past the tile's is refused, as a constant is at typing)
            acc_stmatrix_swizzled(regs, cbuf + (cw * PARTS + j) * _BLOCK, ct, 128, "128B")

        @inlined
        def commit(ebar):
            mbarrier_arrive(ebar)

        # stage: acquire, the parts written out with constant slices (a tuple indexed at run
        # time would go to local memory), commit
        src = ["def stage(regs, cbuf, ebar, eph, cw, ct):", "    eph = acquire(ebar, eph)"]
        src += [f"    write(regs[{16 * j}:{16 * (j + 1)}], cbuf, cw, {j}, ct)" for j in range(PARTS)]
        src += ["    commit(ebar)", "    return eph"]
        ns = {"acquire": acquire, "write": write, "commit": commit}
        exec(compile("\n".join(src), f"<nbwgmma.kit.EpilogueWarps stage, {PARTS} parts>", "exec"), ns)
        stage = inlined(ns["stage"])

        @inlined
        def put(c, row, col, n, x, y, z, w):
            """Eight 16-bit values (x..w, low halves first) at bytes ``[row, 2 col ...)`` of ``c``;
            past C's last whole 16 bytes, only those left of column ``n``."""
            if col + 8 <= n:
                st_global_v4_b32(c, row * c.strides[0] + 2 * col, x, y, z, w)
            else:
                for e in range(8):
                    if col + e < n:
                        v = (x if e < 2 else y if e < 4 else z if e < 6 else w) >> (16 * (e % 2))
                        c[row, 2 * (col + e)] = v & 0xFF
                        c[row, 2 * (col + e) + 1] = (v >> 8) & 0xFF

        @inlined
        def drain_to(ebar, cbuf, c, eph, ht, row0, col0, m, n):
            drain_ht(ht)  # (simulated: a thread index outside 0-95 is refused: tid - 32, not tid)
            mbarrier_wait_parity(ebar, eph)
            for i in range(ht, CHUNKS, THREADS):
                # chunk i: 16 bytes of block b at row r of the block, physical chunk q % 8 of the
                # 128-byte row, which holds the row's logical chunk (q % 8) ^ (r % 8) (128B swizzle)
                b, q = i >> 9, i & 511
                r = q >> 3
                row = row0 + b // PARTS * 64 + r
                col = col0 + b % PARTS * 64 + (((q & 7) ^ (r & 7)) << 3)
                x, y, z, w = ld_shared_v4_b32(cbuf + 16 * i)
                if row < m and col < n:
                    put(c, row, col, n, one(x), one(y), one(z), one(w))
            mbarrier_arrive(ebar + 8)  # this thread has read its chunks: the consumers may rewrite them
            return eph ^ 1

        write_cw = index_check(write, "EpilogueWarps.write", "cw", self.consumers,
                               "the consumer warpgroup, 64 rows of the tile each")
        drain_ht = index_check(drain_to, "EpilogueWarps.drain_to", "ht", THREADS,
                               "the epilogue thread, tid - 32 for warps 1-3 of warpgroup 0")
        self.setup, self.acquire, self.write, self.commit, self.stage = setup, acquire, write, commit, stage
        self.drain_to = drain_to
