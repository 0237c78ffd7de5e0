"""Plans and launches of :func:`nbwgmma.matmul`: for one kind of call (types, shapes,
strides, alignment, config), the operand paths, the kernel configuration, the tensor maps,
the staging copies and the launch.

Which path runs:

* Operands are read in place by TMA when one of their dimensions is contiguous
  and the base address and the other stride are multiples of 16 bytes (TMA's
  rules). K contiguous ("K-major": a row-major A, a column-major B) works for
  every type; M or N contiguous ("MN-major": a column-major A, a row-major B)
  works for bf16/f16, whose wgmma reads either layout through its transpose
  bit. Anything else (fp8/tf32 MN-major operands, odd leading dimensions,
  misaligned or strided views) is first copied into a fresh K-major buffer
  whose rows are padded to 128 bytes with zeros: the same answer for one extra
  pass over that operand. So are operands TMA could read but whose rows lie 16 bytes off
  the 32-byte sectors, where the product is large enough to pay for the copy
  (:func:`.views.staged_for_speed`).
* ``out``: a bf16/f16 ``out`` that TMA can write (row-major, 16-byte aligned base and row
  pitch) gets the TMA-store epilogue (a tile whose width is not a multiple of 64, as the narrow
  tiles of :func:`.tiles.pick_narrow` and the 256-row tiles of :func:`.tiles.pick_tile`, in one
  unswizzled box per 64 rows; a swapped plan's tiles of 128 rows or more transposed through
  shared memory into boxes of ``out``); so do fp8 codes and an f32 ``out`` (tiles of 32-column
  multiples, not swapped); any other ``out`` (any strides) and a swapped small M's narrow tiles
  get element-wise stores from the registers.
* The tile, where ``config`` names none: :func:`.default_tile.pick_default`, the tile model's rules.
* Swapped plans (``config["swap"]``, the default for a few rows: :func:`.tiles.swapped_small_m`,
  and for 16-bit products whose swapped tiles fill the waves better: :func:`.tiles.pick_swap`,
  :func:`.tiles.pick_swap_wide` and :func:`.tiles.pick_swapped_256` for 256-row ones,
  :func:`.tall_tiles.pick_swapped_tall` for 192-row ones)
  compute C^T = B^T A^T: the operands trade places, the kind's types too, and the output is
  written through its transposed view.
* In Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) the same plan runs through
  :func:`nbwgmma.launch.launch`, thread by thread, on the simulator's host-memory
  arrays; staging copies are made with numpy there (the copy kernel would run a
  Python thread per element).
"""

from __future__ import annotations

import math
import threading

import numpy as np
from numba import cuda  # every call needs it: imported with the package, not by the first call

from .. import sim
from ..capture import call_captured, calling, relaxed
from ..errors import ConfigError, MatmulError
from ..intrinsics.mbarrier import DEBUG_WAIT_TIMEOUT_S
from ..launch import array_arg_types, array_arg_values
from ..kernels.gemm_config import FP8_OUTS
from ..layout.kinds import wgmma_kind
from .args import NP_OF, config_error, stream_key, stream_scratch
from .arrays import ArrayInfo, array_info, numba_layout, numpy_dtype
from .default_tile import pick_default
from .tails import tail_maps, tail_rows
from .views import (StagedCopy, batched_view, copy_params, kmajor_copy, nb_stream, numba_view, staged_for_speed,
                    tensor_map, tma_view, transposed)

__all__ = ["Plan", "work_units", "EPILOGUE_OPTIONS"]

#: the fused epilogue's options of a plan (:class:`~nbwgmma.kernels.gemm.GemmConfig`'s), which
#: ``config`` does not take and :attr:`Plan.config` leaves out
EPILOGUE_OPTIONS = ("bias", "act", "bias_type", "with_c", "user", "extras", "user_t", "amax")

_SIM = sim.enabled()  # Numba's CUDA simulator (chosen once, when Numba is imported)


class Plan:
    """Everything about a matmul call that does not depend on the data pointers: paths,
    kernel configuration, compiled kernel and launch configuration. The first call of a
    plan loads the kernel from the disk cache (:mod:`nbwgmma.cache`, compiling it on a miss)
    and prepares a :class:`nbwgmma.launch.PreparedLaunch`, which every call then uses. In
    debug-wait mode and in the CUDA simulator each call goes through
    :func:`nbwgmma.launch.launch` instead (checked, synchronized, named on failure)."""

    def __init__(self, kind, odt, ia, ib, io, opts, fp8, c_info=None, batch=None):
        m, k = ia.shape
        n = ib.shape[1]
        given = opts
        opts = dict(opts)
        # a batch of products (torch.bmm's): (count, the strides in bytes from one matrix of A, B and
        # out to the next); ia, ib and io describe one matrix each. The kernel reads and writes 3-D
        # maps; no swap, and the tile model's pick for one product.
        self.batch = batch
        if batch is not None:
            opts["batched"] = True
            # an operand whose matrices are 0 bytes apart is one matrix for every product (torch.matmul's
            # broadcast): its map one matrix deep, every product's loads reading it
            bc = "".join(x for x, st in (("A", batch[1]), ("B", batch[2])) if st == 0)
            if bc:
                opts["broadcast"] = bc
        # C's TMA view: the caller's out, row-major with 16-byte aligned rows (a swapped kernel's C
        # is its transpose, stored through boxes of this view)
        self.c_view = tma_view(io, m, n, io.strides[0], io.strides[1])
        if batch is not None:  # 3-D: one matrix of the batch per box (else the register stores)
            self.c_view = batched_view(self.c_view, batch[0], batch[3], io.itemsize)
        tma_out = self.c_view is not None and odt != "f32"  # (the tile pickers' 16-bit and fp8 stores)
        if opts.get("stream_k") and "bm" not in opts and "bn" not in opts:
            # stream-K balances the SMs itself: 128 x 128 tiles (64 rows for a few), no swap, no K slices
            opts["bm"], opts["bn"] = (64 if m <= 64 else 128), 128
        if "bm" not in opts and "bn" not in opts:
            transposable = wgmma_kind(kind).transposable
            a_path, b_path = _operand_paths(ia, ib, transposable, m, n, batch)
            pick_default(opts, given, kind, m, n, k, a_path[0], b_path[0], io, odt, tma_out, batch, c_info)
        # swap: the kernel computes C^T = B^T A^T (B's columns fill the wgmma's 64-row blocks,
        # A's few rows its N): every call swaps its operands and transposes its output view.
        self.swap = bool(opts.pop("swap", 0))
        self.out_shape = (m, n)  # the caller's [M, N]; ``mnk`` is the kernel's (swapped: N, M, K)
        if self.swap:
            ia, ib, io, m, n = transposed(ib), transposed(ia), transposed(io), n, m
            c_info = None if c_info is None else transposed(c_info)
            acc, ta, tb = kind.split(".")
            kind = f"{acc}.{tb}.{ta}"  # mixed fp8 (e4m3 x e5m2): the types trade places too
            flip = {"col": "row", "row": "col", "scalar": "scalar"}
            if opts.get("bias"):  # a bias per column of out is one per row of out^T
                opts["bias"] = flip[opts["bias"]]
            if opts.get("user") is not None:  # so are a user function's vectors; it gets out's row and column
                opts["extras"] = tuple((flip[kind], t) for kind, t in opts.get("extras", ()))
                opts["user_t"] = True
        self.mnk = (m, n, k)
        self.c_info = io  # C as the kernel sees it (swapped: out^T; a batch's: 3-D, for the register stores)
        if batch is not None:
            self.c_info = io._replace(shape=(batch[0],) + io.shape, strides=(batch[3],) + io.strides)
        self.beta_c = c_info  # the C of beta * C (with_c) as the kernel sees it
        if c_info is not None:
            opts["with_c"] = True
        try:
            self._configure(kind, odt, ia, ib, io, opts, fp8)
        except ConfigError as e:  # the caller's config: name its entry at fault
            err = config_error(e, given)
            if self.swap:
                err = MatmulError(f"{err} (swapped: the kernel computes C^T = B^T A^T, so its A is your B^T, its B "
                                  f"your A^T, its C your out^T)")
            raise err from None
        if self.swap:
            self.config["swap"] = 1
        cfg = self.cfg
        self.odt = odt
        self.launcher = None  # a PreparedLaunch of the kernel after the first call
        self.workspaces = {}  # split-K: stream (args.stream_key) -> (f32 partial tiles, int32 tile counters)
        self._staged = {}  # (operand, stream, thread) -> [StagedCopy, its tensor map]: operands read through copies
        self._operands = (ia, ib)  # A and B as the kernel reads them (the first call's; again() staging others)
        # TMA boxes: K-major [rows, BK] (the shared operand: this CTA's share of the tile's rows),
        # MN-major [BK, 64]; the kit's Cooperative loads them (GemmConfig.loads)
        self.boxes = (cfg.loads[0][0], cfg.loads[1][0])
        if batch is not None:  # 3-D: one matrix of the batch per box (the paths' views are 3-D: _configure)
            self.boxes = ((1,) + self.boxes[0], (1,) + self.boxes[1])
        self._memo = [None] * 5  # (pointer, tensor map) last used for A, B, C, B's last tile column, A's last tile row

    def _configure(self, kind, odt, ia, ib, io, opts, fp8):
        """Operand paths, output view and kernel configuration (``GemmConfig`` checks ``opts``)."""
        from ..kernels.gemm_config import GemmConfig

        probe = GemmConfig(kind, **{k_: v for k_, v in opts.items() if k_ in ("bm", "bn")})
        transposable = probe.k.transposable
        # f32 operands are read by the tensor cores as tf32. A is [M, K]; B is [K, N], seen as
        # [N, K] with its strides swapped.
        m, n, _ = self.mnk
        self.a_path, self.b_path = _operand_paths(ia, ib, transposable, m, n, self.batch)
        if self.batch is not None:  # the batch's 3-D views; a batch TMA cannot read is staged K-major
            paths = []
            for i, (path, info) in enumerate(((self.a_path, ia), (self.b_path, ib))):
                view = batched_view(path[1], *self._depth(i), info.itemsize, reads=True)
                paths.append((path[0], view) if view is not None else ("K", None))
            self.a_path, self.b_path = paths
        self.tdt = ({"f32": "tf32"}.get(ia.dtype, ia.dtype), {"f32": "tf32"}.get(ib.dtype, ib.dtype))
        # Swapped, the kernel's C is out^T: each tile goes transposed through shared memory into
        # TMA boxes of out (tiles of 128 rows or more; a swapped small M's narrow tiles are stored
        # from the registers).
        tma_ok = self.c_view is not None and (not self.swap or (probe.bm >= 128 and odt not in FP8_OUTS
                                                                and odt != "f32"))
        asked = "epilogue" in opts
        if odt == "f32" and tma_ok and not asked and self.batch is None:
            # f32 values through TMA where a CTA has tiles after the first, whose main loop the
            # stores overlap (H100: 1.009-1.032x the register stores at 512-2048 tiles of 128 x
            # 256); with one tile per CTA the parts' waits cost more (0.956-0.972x at 128 tiles)
            from ..launch import device_limits

            m, n, k = self.mnk
            units = work_units(m, n, k, probe.bm, probe.bn, probe.bk, split=opts.get("split", 1))
            tma_ok = units > device_limits()["multiprocessors"]
        epilogue = opts.pop("epilogue", "tma" if tma_ok else "direct")
        if epilogue == "direct" and not asked and odt in ("bf16", "f16") and not self.swap \
                and probe.bn % 64 == 0 and opts.get("cluster_k", 1) == 1 \
                and (self.mnk[1] == 1 or io.strides[1] == io.itemsize):
            # 16-bit rows TMA cannot write (an odd N): a part at a time through shared memory, stored a
            # row per warp; on an H200 1.25-1.35x the register stores at 64-256 x 128, 1.1-2.2x at
            # 128 x 256 (BENCHMARKS.md, 2026-12-04)
            epilogue = "rows"
        if epilogue == "rows" and (self.swap or (self.mnk[1] > 1 and io.strides[1] != io.itemsize)):
            raise MatmulError("matmul: config['epilogue'] 'rows' does not take a swapped product (its kernel writes "
                              "out^T), config['swap'] = 0 does" if self.swap else
                              f"matmul: config['epilogue'] 'rows' needs an out whose columns are contiguous; got "
                              f"{odt} with strides {io.strides}")
        if epilogue == "tma" and not tma_ok:
            raise MatmulError(f"matmul: config['epilogue'] 'tma' needs a row-major out with 16-byte aligned "
                              f"rows{' and, swapped, tiles of 128 rows or more and a 16-bit out' if self.swap else ''}"
                              f"; got {odt} with strides {io.strides} at {io.ptr:#x}")
        # the tile and the given parameters (the epilogue follows from out; the fused epilogue's options,
        # which config does not take, are left out)
        self.config = {k_: v for k_, v in opts.items()
                       if k_ not in EPILOGUE_OPTIONS and k_ not in ("batched", "broadcast")}

        def config(epilogue):
            return GemmConfig(kind, scaled=fp8, a_major=self.a_path[0], b_major=self.b_path[0], out=odt,
                              epilogue=epilogue, c_transposed=self.swap and epilogue == "tma", **opts)

        try:
            self.cfg = config(epilogue)
        except ConfigError:
            if asked or epilogue == "direct":
                raise
            # a C tile the caller's stages or c_parts leave no room for: the register stores
            self.cfg = config("direct")
        cfg = self.cfg
        m, n, k = self.mnk
        # B's last tile column and A's last tile row through maps of the rows N and M have there
        tails = {} if "b_tail" in opts else tail_maps(cfg, m, n, k, self.a_path, self.b_path, self.work_units())
        if tails:
            opts.update(tails)
            self.cfg = config(cfg.epilogue)
        #: the boxes of B's last tile column and A's last tile row (b_tail, a_tail): the rows N (M) has
        #: there, rounded up to 8
        self.tail_box = (tail_rows(n, cfg.bn), cfg.bk) if self.cfg.b_tail else None
        self.a_tail_box = (tail_rows(m, cfg.bm), cfg.bk) if self.cfg.a_tail else None

    def _map(self, slot, x, ptr, view, tdt, box, swizzle="128B"):
        """The tensor map of operand ``slot`` read in place at ``ptr`` (the last one is kept at hand)."""
        memo = self._memo[slot]
        if memo is not None and memo[0] == ptr:
            return memo[1]
        tm = tensor_map(x, ptr, tdt, box, view, keep=False, swizzle=swizzle)
        self._memo[slot] = (ptr, tm)
        return tm

    def tail_maps(self, a, pa, b, pb) -> tuple:
        """The addresses of the maps of B's last tile column and A's last tile row, those the kernel
        takes (``cfg.b_tail``, ``cfg.a_tail``), in its order (after B's map)."""
        cfg = self.cfg
        return ((self._map(3, b, pb, self.b_path[1], self.tdt[1], self.tail_box).address,) if cfg.b_tail else ()) \
            + ((self._map(4, a, pa, self.a_path[1], self.tdt[0], self.a_tail_box).address,) if cfg.a_tail else ())

    def c_map(self, out, io):
        """The address of C's tensor map for the TMA epilogue: (64, 64) boxes in 128-byte swizzled
        blocks (a transposed C: (c_box, 64)), or a narrow tile's one unswizzled (64, bn) box."""
        box = self.cfg.c_box
        if self.cfg.c_transposed:  # rows of C^T's transposed tile: c_box rows of out, 64 columns
            box, swizzle = (box, 64), "128B"
        elif self.odt in FP8_OUTS:  # codes: 64 x 64-byte boxes, 64B-swizzled
            box, swizzle = (64, 64), "64B"
        elif self.odt == "f32":  # values: 64 x 32 (128-byte) boxes, 128B-swizzled
            box, swizzle = (64, 32), "128B"
        else:
            box, swizzle = (64, box), "128B" if box == 64 else "none"
        if self.batch is not None:  # one matrix of the batch per box
            box = (1,) + box
        return self._map(2, out, io.ptr, self.c_view, self.odt, box, swizzle).address

    def _depth(self, i):
        """(matrices, bytes from one to the next) in the 3-D map of operand ``i`` (0: A, 1: B) of a
        batch: one where the operand is one matrix for every product."""
        count, stride = self.batch[0], self.batch[1 + i]
        return (1, 0) if stride == 0 else (count, stride)

    def maps(self, x, info, is_b, stream):
        """The tensor map of A or B: read in place, or of a K-major staging copy."""
        i = int(is_b)
        path, tdt, box = (self.a_path, self.b_path)[i], self.tdt[i], self.boxes[i]
        if path[1] is not None:
            return self._map(i, x, info.ptr, path[1], tdt, box)
        bat = None if self.batch is None else self._depth(i)
        key = (i, stream_key(stream), threading.get_ident())
        captured = not _SIM and call_captured()  # (a graph's own buffer: nbwgmma.capture)
        staged = None if captured else self._staged.get(key)
        if staged is None:
            try:  # (the simulator checks what the copy kernels take, then copies with numpy)
                if _SIM:
                    copy_params(info, is_b, bat)
                else:
                    with relaxed(captured):
                        staged = [StagedCopy(info, is_b, bat, captured), None]
                    if not captured:
                        self._staged[key] = staged
            except ValueError as e:  # (a stride neither TMA nor the copy kernels can step)
                name = "ab"[i ^ bool(self.swap)]  # (a swapped plan's kernel reads b as its A)
                raise MatmulError(f"matmul: {name} (copied first: TMA cannot read it in place) {e}") from None
        if _SIM:
            cp, staged = kmajor_copy(x, info, is_b, bat), None
        else:  # the plan's staging copy of this operand for this stream and host thread
            with relaxed(captured):
                cp = staged[0](info, stream)
            if staged[1] is not None:
                return staged[1]
            if not staged[0].kept or captured:
                staged = None
        ci = array_info(cp)
        v = tma_view(ci, ci.shape[-2], info.shape[0] if is_b else info.shape[1], ci.strides[-2], ci.strides[-1])
        if bat is not None:
            v = batched_view(v, bat[0], ci.strides[0], ci.itemsize)
        tm = tensor_map(cp, ci.ptr, tdt, box, v, keep=True)  # (a fresh buffer outlives the launch)
        if staged is not None:
            staged[1] = tm
        return tm

    def __call__(self, a, ia, b, ib, out, io, alpha, stream_handle, bias=None, c=None, beta=0.0, extras=(),
                 scale_out=1.0, amax=None):
        """Launch the plan's kernel on these arrays (``bias``: (1-D info, owner) of the vector of a
        plan with a fused bias, as :func:`nbwgmma.frontend.fused.bias_operand` gives it; ``c``:
        (info, owner) of a plan's C, added as ``beta * C``; ``extras``: a user epilogue's, each a
        vector as ``bias`` or a number; an fp8 output's ``scale_out`` and ``amax``, (info, owner) of
        a one-element f32 array)."""
        calling(stream_handle)  # (maps made now ask whether it captures: nbwgmma.capture)
        if self.swap:
            a, ia, b, ib, io = b, transposed(ib), a, transposed(ia), transposed(io)
            c = None if c is None else (transposed(c[0]), c[1])
        m, n, k = self.mnk
        cfg = self.cfg
        ta = self.maps(a, ia, False, stream_handle)
        tb = self.maps(b, ib, True, stream_handle)
        tail = self.tail_maps(a, ia.ptr, b, ib.ptr)
        tma_c = cfg.epilogue == "tma"
        c_map = self.c_map(out, io) if tma_c else 0
        work = None  # (the scratch asked once: a captured call's is made anew at each ask)
        if self.launcher is None or DEBUG_WAIT_TIMEOUT_S is not None:  # (never set in the simulator)
            self.check_expect_tx(ta, tb)
            c_arg = c_map if tma_c else numba_view(self.c_info._replace(ptr=io.ptr), out)
            args = (ta.address, tb.address) + tail + (c_arg, np.int32(m), np.int32(n), np.int32(k), np.float32(alpha))
            if cfg.bias:
                args += (numba_view(*bias),)
            if cfg.with_c:
                args += (numba_view(*c), np.float32(beta))
            args += tuple(np.float32(x) if kind == "scalar" else numba_view(*x)
                          for (kind, _), x in zip(cfg.extras, extras))
            if cfg.out in FP8_OUTS:
                args += (np.float32(scale_out),) + ((numba_view(amax[0]._replace(shape=(1,), strides=(4,)), amax[1]),)
                                                     if cfg.amax else ())
            if cfg.uses_workspace:
                work = self.workspace(stream_handle)
                args += work[:2]
            if self.batch is not None:
                args += (np.int32(self.batch[0]),)
            if DEBUG_WAIT_TIMEOUT_S is not None or _SIM:  # checked launches that name a stopped kernel
                from ..kernels.gemm import gemm_kernel
                from ..launch import launch

                kern = gemm_kernel(cfg)
                grid, cluster, smem = self.launch_shape(kern, args)
                launch(kern, grid, cfg.threads, args, stream=nb_stream(stream_handle), smem=smem, cluster=cluster)
                return
            self.launcher = self._prepare(args)
        self._launch(stream_handle, ta.address, tb.address, c_map, io, alpha, bias, c, beta, extras, scale_out, amax,
                     work, tail)

    def _launch(self, stream_handle, ta, tb, c_map, io, alpha, bias=None, c=None, beta=0.0, extras=(), scale_out=1.0,
                amax=None, work=None, tail=()):
        m, n, k = self.mnk
        cfg = self.cfg
        values = _array_values
        # after alpha, in the kernel's order: bias, C and beta, the extras, scale_out and amax, workspace
        ws = values(bias[0]) if cfg.bias else ()
        if cfg.with_c:
            ws += values(c[0]) + (beta,)
        for (kind, _), x in zip(cfg.extras, extras):
            ws += (float(x),) if kind == "scalar" else values(x[0])
        if cfg.out in FP8_OUTS:
            ws += (scale_out,) + (array_arg_values(amax[0].ptr, (1,), (4,), 4) if cfg.amax else ())
        if cfg.uses_workspace:
            ws += (work or self.workspace(stream_handle))[2]
        if self.batch is not None:
            ws += (self.batch[0],)
        if c_map:
            self.launcher(stream_handle, ta, tb, *tail, c_map, m, n, k, alpha, *ws)
        else:
            ci = self.c_info  # (its shape and strides: out's, or out^T's)
            self.launcher(stream_handle, ta, tb, *tail, *array_arg_values(io.ptr, ci.shape, ci.strides, io.itemsize),
                          m, n, k, alpha, *ws)

    def workspace(self, stream_handle):
        """Split-K or stream-K scratch of this plan on one stream (launches on a stream run in
        order, so they can share it): (partials, counters, their launch parameter values)."""
        captured = not _SIM and call_captured()  # (a graph's own scratch: nbwgmma.capture)
        w = None if captured else self.workspaces.get(stream_key(stream_handle))
        if w is None:
            cfg = self.cfg
            m, n, _ = self.mnk
            tiles = math.ceil(m / cfg.bm) * math.ceil(n / cfg.bn)
            parts = 2 * self.launch_shape(None, None)[0] if cfg.stream_k else tiles * cfg.split  # (2 per CTA)
            w = stream_scratch(parts * cfg.bm * cfg.bn, tiles, stream_handle if captured else None)
            if not captured:
                self.workspaces[stream_key(stream_handle)] = w
        return w

    def again(self, a, pa, b, pb, out, io, stream_handle, alpha=1.0, bias=None):
        """A repeat of the plan's first call with new pointers, operands of the same shapes and
        strides (``bias`` as :meth:`__call__` takes it); an operand read through a copy is staged again."""
        calling(stream_handle)
        if self.swap:
            a, pa, b, pb, io = b, pb, a, pa, transposed(io)
        if self.a_path[1] is not None:
            ta = self._map(0, a, pa, self.a_path[1], self.tdt[0], self.boxes[0])
        else:
            ta = self.maps(a, self._operands[0]._replace(ptr=pa), False, stream_handle)
        if self.b_path[1] is not None:
            tb = self._map(1, b, pb, self.b_path[1], self.tdt[1], self.boxes[1])
        else:
            tb = self.maps(b, self._operands[1]._replace(ptr=pb), True, stream_handle)
        c_map = self.c_map(out, io) if self.cfg.epilogue == "tma" else 0
        tail = self.tail_maps(a, pa, b, pb)
        self._launch(stream_handle, ta.address, tb.address, c_map, io, alpha, bias, tail=tail)

    def work_units(self) -> int:
        """:func:`work_units` of the kernel's product (one of a batch) in the plan's tiles."""
        cfg = self.cfg
        return work_units(*self.mnk, cfg.bm, cfg.bn, cfg.bk, cfg.cluster, cfg.split, cfg.stream_k,
                          "N" if cfg.multicast == "A" else "M")

    def launch_shape(self, kernel, args):
        """(grid, cluster shape or None, dynamic shared memory bytes): one CTA per SM, in
        whole clusters (each takes ``cluster`` adjacent tiles at a time, or with
        ``cluster_k`` one tile, each of its two CTAs half the k-blocks).
        ``kernel`` and ``args`` as :func:`nbwgmma.launch.max_active_clusters` takes them."""
        from ..launch import device_limits, max_active_clusters

        cfg = self.cfg
        cl = cfg.cta_cluster
        smem = cfg.smem_bytes + 1023
        slots = device_limits()["multiprocessors"] // cl
        if cl > 1 and not _SIM:  # clusters sit whole in a GPC: maybe fewer fit
            slots = max_active_clusters(kernel, args, cfg.threads, (cl, 1, 1), smem=smem)
        if slots < 1:  # (the launch would have no CTA to run: say why, not that a grid of 0 is refused)
            raise MatmulError(f"matmul: config {self.config}: no cluster of {cl} CTAs of this kernel fits the GPU "
                              f"at once ({device_limits()['multiprocessors']} SMs); use a smaller cluster")
        units = self.work_units()
        if self.batch is not None:
            units *= self.batch[0]
        grid = cl * min(slots, units)
        return grid, ((cl, 1, 1) if cl > 1 else None), smem

    def _prepare(self, args):
        """The GEMM kernel for this plan (from the disk cache or compiled), ready to launch
        (``args``: the first call's; their Numba types are :meth:`signature`'s)."""
        from ..cache import cached_kernel
        from ..kernels.gemm import gemm_kernel
        from ..launch import PreparedLaunch

        cfg = self.cfg
        disp = gemm_kernel(cfg)
        sig = self.signature()
        typed = tuple(disp.typeof_pyval(x) for x in args)
        if sig != typed:  # (a layout rule of Numba's that signature() missed: the kernel must fit the arrays)
            sig = typed
        if cfg.user is None:
            kern, _ = cached_kernel(disp, sig, ("gemm", cfg.key()), cuda.get_current_device().compute_capability)
        else:  # a user function's kernel is compiled in each process (its globals may differ between them)
            kern = disp.compile(tuple(sig))._codelibrary.get_cufunc().kernel
        grid, cluster, smem = self.launch_shape(kern, None)
        xs = tuple(t for kind, _ in cfg.extras for t in (("f32",) if kind == "scalar" else _BIAS_ARGS))
        fp8 = (("f32",) + (_BIAS_ARGS if cfg.amax else ())) if cfg.out in FP8_OUTS else ()  # scale_out, amax
        c_args = (array_arg_types(3) + ("f32",) if self.batch else _C_ARGS) if cfg.with_c else ()  # (batched: 3-D C)
        ws = (_BIAS_ARGS if cfg.bias else ()) + c_args + xs + fp8 \
            + (_WS_ARGS if cfg.uses_workspace else ())
        direct = _TMA_ARGS[:2] + array_arg_types(len(self.c_info.shape)) + _TMA_ARGS[3:]  # (C a 2-D or 3-D array)
        arg_types = (_TMA_ARGS if cfg.epilogue == "tma" else direct) + ws + (("i32",) if self.batch else ())
        tails = int(cfg.b_tail) + int(cfg.a_tail)  # (the last tile column's and row's maps after B's)
        arg_types = arg_types[:2] + ("u64",) * tails + arg_types[2:]
        # pdl: the kernel may start while the previous kernel of the stream ends (it waits for
        # it with griddep_wait before touching memory)
        return PreparedLaunch(kern, grid, cfg.threads, arg_types, smem=smem, cluster=cluster, pdl=True)

    def is_built(self) -> bool:
        """Whether the kernel is ready without a compile: compiled in this process, or in the kernel
        cache or among the shipped kernels (a user function's kernel never is: it is compiled in
        each process)."""
        from ..cache import holds
        from ..kernels.gemm import gemm_kernel

        cfg = self.cfg
        if cfg.user is not None:
            return False
        sig = self.signature()
        return tuple(sig) in gemm_kernel(cfg).overloads or holds(
            ("gemm", cfg.key()), sig, cuda.get_current_device().compute_capability)

    def signature(self) -> tuple:
        """The Numba types of the kernel's arguments as :meth:`__call__` passes them, which the
        kernel is compiled for and cached under (:mod:`nbwgmma.cache`): the tensor maps' addresses
        (Python ints), C's map or C itself as an array typed as Numba types a device array of its
        shape and strides, M, N, K, alpha, and split-K's or stream-K's workspaces. Known from the
        plan alone, so kernels can be built without a GPU (``precompile --arch``)."""
        from numba import types
        from numba.cuda.np.numpy_support import from_dtype

        def array_type(io):  # the type of a Numba device array of io's shape and strides
            dt = np.dtype(NP_OF.get(io.dtype, None) or numpy_dtype(io.dtype))
            return types.Array(from_dtype(dt), len(io.shape), numba_layout(io.shape, io.strides, dt.itemsize))

        scalars = (types.int32,) * 3 + (types.float32,)
        c = types.int64 if self.cfg.epilogue == "tma" else array_type(self.c_info)
        ws = (types.Array(types.float32, 1, "C"), types.Array(types.int32, 1, "C"))
        vec = (types.Array(from_dtype(np.dtype(NP_OF[self.cfg.bias_type])), 1, "C"),) if self.cfg.bias else ()
        cb = (array_type(self.beta_c), types.float32) if self.cfg.with_c else ()
        xs = tuple(types.float32 if kind == "scalar" else types.Array(from_dtype(np.dtype(NP_OF[t])), 1, "C")
                   for kind, t in self.cfg.extras)
        fp8 = ((types.float32,) + ((types.Array(types.float32, 1, "C"),) if self.cfg.amax else ())) \
            if self.cfg.out in FP8_OUTS else ()
        maps = (types.int64,) * (2 + int(self.cfg.b_tail) + int(self.cfg.a_tail))  # A, B, the tail maps
        return maps + (c,) + scalars + vec + cb + xs + fp8 + (ws if self.cfg.uses_workspace else ()) \
            + ((types.int32,) if self.batch else ())

    def check_expect_tx(self, ta, tb):
        """The kernel arms each stage with ``stage_bytes`` (``expect_tx``); the boxes its
        producer loads must add up to exactly that, or the consumers would wait forever."""
        cfg = self.cfg
        # (the shared operand's K-major box is a share: the peers' shares arrive too)
        got = cfg.loads[0][1] * ta.box_bytes + cfg.loads[1][1] * tb.box_bytes
        if got != cfg.stage_bytes:
            raise RuntimeError(f"matmul: a stage loads {got} bytes but expect_tx announces {cfg.stage_bytes}")


def work_units(m, n, k, bm, bn, bk, cluster=1, split=1, stream_k=False, along="M") -> int:
    """The units of work the library GEMM's persistent grid shares out for an M x N x K product
    in bm x bn x bk tiles: its :class:`~nbwgmma.kit.TileScheduler`'s (tiles, of a cluster
    ``cluster`` adjacent ones along ``along``, times K slices); with stream-K every tile's
    k-blocks (each CTA takes at least one)."""
    if stream_k:
        return math.ceil(m / bm) * math.ceil(n / bn) * math.ceil(k / bk)
    from ..kit.scheduler import TileScheduler

    return TileScheduler(bm, bn, bk, cluster=cluster, split=split, along=along).units(m, n, k)


def _operand_path(info: ArrayInfo, is_b, transposable):
    """("K" | "MN", TMA view or None for a staging copy) of A ([M, K]) or B ([K, N])."""
    (rows, k), (s_rows, s_k) = info.shape, info.strides
    if is_b:
        (k, rows), (s_k, s_rows) = info.shape, info.strides
    v = tma_view(info, rows, k, s_rows, s_k)
    if v is not None:
        return "K", v
    if transposable:
        v = tma_view(info, k, rows, s_k, s_rows)
        if v is not None:
            return "MN", v
    return "K", None


def _operand_paths(ia: ArrayInfo, ib: ArrayInfo, transposable, m, n, batch=None) -> list:
    """[A's path, B's path] (:func:`_operand_path`), where operands whose rows TMA reads slowly are
    staged instead where the copies pay (:func:`~.views.staged_for_speed`; the other dimension of
    A is N, of B M; a ``batch`` as :class:`Plan` takes it counts each operand's matrices, one where
    it is broadcast)."""
    paths = [_operand_path(ia, False, transposable), _operand_path(ib, True, transposable)]
    counts = (1, 1) if batch is None else tuple(1 if st == 0 else batch[0] for st in batch[1:3])
    for i in staged_for_speed([(p[1], info.itemsize, other, count)
                               for p, info, other, count in zip(paths, (ia, ib), (n, m), counts)]):
        paths[i] = ("K", None)
    return paths


_TMA_ARGS = ("u64", "u64", "u64", "i32", "i32", "i32", "f32")  # maps of A, B, C; m, n, k; alpha
_WS_ARGS = array_arg_types(1) * 2  # split-K: partials, counters
_BIAS_ARGS = array_arg_types(1)  # a fused bias: the vector
_C_ARGS = array_arg_types(2) + ("f32",)  # beta * C: C, beta


def _array_values(info: ArrayInfo) -> tuple:
    """An array argument's launch values (:func:`nbwgmma.launch.array_arg_values`) from its description."""
    return array_arg_values(info.ptr, info.shape, info.strides, info.itemsize)


