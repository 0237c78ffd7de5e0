"""``matmul`` with a 2:4-sparse weight (:class:`~nbwgmma.frontend.sparse24.Sparse24`): the
sparse GEMM (:mod:`nbwgmma.kernels.sparse`).

The weight sits on either side as ``F.linear`` uses it:

* ``matmul(w24, y)``: ``W @ y``, y [K, N] (N or K contiguous), out [M, N];
* ``matmul(x, w24.t())``: ``x @ W^T``, x [T, K] (K or T contiguous), out [T, M]. The kernel
  computes ``out^T = W @ x^T`` (the sparse operand of ``wgmma.mma_async.sp`` is always A) and
  stores the accumulator transposed: through shared memory and TMA stores where out is
  row-major with 16-byte aligned rows (``config["out_blocks"]``: 1 by default, 2, or 0 for
  element-wise stores), else element by element.

The dense operand has the weight's type (bf16, f16, e4m3 or e5m2); it is read in place where
K or its other dimension is contiguous (K only for fp8) with 16-byte aligned rows (TMA), else a
PyTorch or CuPy operand is copied K-major first; the output has the weight's type (bf16 for
fp8), any strides. ``out``, ``out_dtype``, ``stream``, ``in_dtype`` (raw bits of the dense
operand) and ``config`` (``bn``, ``stages``, ``group_m``, ``out_blocks``, ``cluster``) apply; the rest of ``matmul``'s
options are refused. Where ``bn`` is not given the tile is 64, 128 or 256 columns wide (the
narrowest that holds N), and with a ``cluster`` and an N-major dense operand at least 64 per CTA
of the cluster (each loads whole 64-column boxes of B's tile). Every check raises a :class:`~nbwgmma.errors.MatmulError` before launch.
"""

from __future__ import annotations

import numpy as np

from .. import sim
from ..capture import call_captured, hold
from ..errors import MatmulError, MatmulTypeError
from ..kernels.sparse import THREADS, SparseConfig, sparse_kernel
from .args import NP_OF, check_apart, described, empty_like_lib, lib_of, stream_of
from .arrays import ArrayInfo
from .views import numba_view, tensor_map, tma_view, transposed
from .sparse24 import SPARSE_TYPES, Sparse24

__all__ = ["sparse_matmul", "Sparse24", "SPARSE_TYPES"]

_SIM = sim.enabled()
#: ``matmul``'s options a sparse call leaves at their defaults.
_DEFAULTS = {"bias": None, "activation": None, "epilogue": None, "epilogue_args": (), "c": None, "alpha": 1.0,
             "beta": None, "scale_a": None, "scale_b": None, "scale_out": None, "amax": None}
_CONFIG_KEYS = ("bn", "stages", "group_m", "out_blocks", "cluster")
_CONFIGS: dict = {}
_CLUSTER_CTAS: dict = {}  # (config key, device) -> CTAs of the clusters that fit at once
_RAW_OK = {"bf16": "u16", "e4m3": "u8", "e5m2": "u8"}
#: transposed output blocks per consumer of the x @ w24.t() form (kernels.sparse.SparseConfig.out_blocks)
OUT_BLOCKS = 1
#: CTAs per cluster sharing B's tile (kernels.sparse.SparseConfig.cluster)
CLUSTER = 1
_FP8 = ("e4m3", "e5m2")


def _options(config, **given):
    for name, v in given.items():
        default = _DEFAULTS[name]
        # (an array is compared by identity: its == is elementwise)
        same = v is default or (type(v) in (int, float, tuple) and type(default) in (float, tuple) and v == default)
        if not same:
            shown = repr(v) if type(v) in (int, float, tuple, str, bool) else f"a {type(v).__name__}"
            raise MatmulError(f"matmul: with a Sparse24 operand, {name} is not taken so far (out, out_dtype, "
                              f"stream, in_dtype, config are); got {name}={shown}")
    if config is None or (isinstance(config, str) and config == "auto"):  # (no tuned classes: the default)
        return {}
    if not isinstance(config, dict) or set(config) - set(_CONFIG_KEYS):
        raise MatmulError(f"matmul: with a Sparse24 operand, config is a dict with keys among {list(_CONFIG_KEYS)}; "
                          f"got {config!r}")
    return dict(config)


def _b_view(ib: ArrayInfo, rows_axis: int, es: int, fp8: bool):
    """(b_major, (shape, strides in elements)) of the dense operand seen as B [n, k] K-major, or
    as [k, n] N-major; MatmulError where TMA cannot read it in place."""
    n, k = ib.shape[rows_axis], ib.shape[1 - rows_axis]
    sn, sk = ib.strides[rows_axis], ib.strides[1 - rows_axis]
    if ib.ptr % 16 == 0:  # (a dimension of one row is never stepped: its map stride is the row's own length;
        # a negative stride cannot be a map's: such a view is copied, or refused)
        if (sk == es or k == 1) and (sn % 16 == 0 and sn > 0 or n == 1) and (k * es) % 16 == 0:
            return "K", ((n, k), (max(sn // es, k) if n > 1 else k, 1))
        if not fp8 and (sn == es or n == 1) and (sk % 16 == 0 and sk > 0 or k == 1) and (n * es) % 16 == 0:
            return "MN", ((k, n), (max(sk // es, n) if k > 1 else n, 1))
    need = "K contiguous (the fp8 sparse wgmma has no transpose)" if fp8 else "K or the other dimension contiguous"
    raise MatmulError(f"matmul: the dense operand of a sparse product must have {need}, 16-byte aligned rows and "
                      f"address; got shape {ib.shape}, strides {ib.strides} bytes at {ib.ptr:#x}")


def _staged(x, ix: ArrayInfo, lib: str, left: bool):
    """``(copy, its info)``: the dense operand copied with K contiguous (rows padded to 16 bytes)
    for TMA, by its own library (PyTorch or CuPy); ``(None, None)`` for other arrays."""
    if lib not in ("torch", "cupy"):
        return None, None
    xt = x.T if left else x  # [n, k]
    n, k = xt.shape
    pad = -(-k * ix.itemsize // 16) * 16 // ix.itemsize
    if lib == "torch":
        buf = xt.new_zeros((n, pad))
    else:
        import cupy

        with cupy.cuda.Device(ix.device):
            buf = cupy.zeros((n, pad), dtype=xt.dtype)
    buf[:, :k] = xt
    cp = buf[:, :k]
    cp = cp.T if left else cp
    return cp, described(cp, "A")._replace(dtype=ix.dtype)


def _config(dtype, b_major, n, opts, paired, tma_out):
    bn = opts.get("bn", 64 if n <= 64 else 128 if n <= 128 else 256)
    if "bn" not in opts and b_major == "MN":  # (a cluster splits an MN-major B tile into 64-column boxes, whole per CTA)
        bn = max(bn, 64 * opts.get("cluster", CLUSTER))
    blocks = opts.get("out_blocks", OUT_BLOCKS if tma_out else 0)
    if blocks and not tma_out:
        raise MatmulError(f"matmul: config {opts}: out_blocks needs the x @ w24.t() form with a row-major out "
                          f"whose rows are 16-byte aligned")
    if blocks == 2 and bn % 128 and "out_blocks" not in opts:
        blocks = 1  # (the default's two blocks take turns over an even number of 64-column blocks)
    key = (dtype, b_major, bn, opts.get("stages"), opts.get("group_m", 8), paired, blocks, opts.get("cluster", CLUSTER))
    cfg = _CONFIGS.get(key)
    if cfg is None:
        try:
            cfg = SparseConfig(dtype, bn, b_major, key[4], key[3], paired, blocks, key[7])
        except ValueError as e:
            raise MatmulError(f"matmul: config {opts}: {e}") from None
        _CONFIGS[key] = cfg
    return cfg


def _d_view(io: ArrayInfo, out, transpose: bool, odt: str):
    """The kernel's D [M, N]: ``out`` itself, or its transpose (a view with swapped strides)."""
    return numba_view(transposed(io) if transpose else io, out, np.dtype(NP_OF[odt]))


def sparse_matmul(a, b, *, out=None, out_dtype=None, stream=None, config=None, in_dtype=None, **rest):
    """``matmul(a, b, ...)`` where ``a`` or ``b`` is a :class:`Sparse24` (see the module)."""
    opts = _options(config, **rest)
    left = type(a) in SPARSE_TYPES
    if left and type(b) in SPARSE_TYPES:
        raise MatmulError("matmul: one operand may be a Sparse24, the other a dense CUDA array; got two Sparse24")
    w, x = (a, b) if left else (b, a)
    if w.transposed == left:
        raise MatmulError(f"matmul: a Sparse24 goes on the left as is (w24 @ y) or on the right transposed, as "
                          f"F.linear uses a weight (x @ w24.t()); got {w!r} on the {'left' if left else 'right'}")
    name = "B" if left else "A"
    ix = described(x, name)
    if in_dtype is not None:
        if in_dtype != w.dtype or ix.dtype not in (in_dtype, _RAW_OK.get(in_dtype)):  # (its own type: a no-op)
            raise MatmulTypeError(f"matmul: in_dtype names the raw bits of the dense operand of a {w.dtype} Sparse24 "
                                  f"(uint16 for bf16, uint8 for fp8), so it is in_dtype={w.dtype!r} or left out; got "
                                  f"in_dtype={in_dtype!r} with {ix.dtype}")
        ix = ix._replace(dtype=in_dtype)
    fp8 = w.dtype in _FP8
    if ix.dtype != w.dtype:
        raise MatmulTypeError(f"matmul: the dense operand must have the Sparse24's type {w.dtype}; got {name} of "
                              f"{ix.dtype}")
    if len(ix.shape) != 2:
        raise MatmulError(f"matmul: {name} must be 2-D; got shape {ix.shape}")
    if w.device is not None and ix.device != w.device:
        raise MatmulError(f"matmul: {name} is on device {ix.device}, the Sparse24 on device {w.device}")
    inner = ix.shape[0] if left else ix.shape[1]
    if inner != w.k:
        sa, sb = (w.shape, ix.shape) if left else (ix.shape, w.shape)
        raise MatmulError(f"matmul: inner dimensions differ: A is {sa}, B is {sb}")
    m, k = w.rows, w.k
    n = ix.shape[1] if left else ix.shape[0]
    odt = "bf16" if fp8 else w.dtype
    lib = lib_of(x)
    fresh_out = out is None
    if out_dtype is not None and str(out_dtype).replace("torch.", "") not in (odt, {"bf16": "bfloat16",
                                                                                    "f16": "float16"}[odt]):
        raise MatmulTypeError(f"matmul: a {w.dtype} Sparse24 product is {odt}; got out_dtype={out_dtype!r}")
    if out is None:
        out = empty_like_lib(lib, x, (m, n) if left else (n, m), odt)
    dense = ix  # (as given: a staged copy below never overlaps out)
    io = described(out, "out")
    if io.shape != ((m, n) if left else (n, m)):
        raise MatmulError(f"matmul: out must have shape {(m, n) if left else (n, m)}; got {io.shape}")
    if io.dtype != odt and not (odt == "bf16" and io.dtype == "u16"):
        raise MatmulTypeError(f"matmul: out must have type {odt}; got {io.dtype}")
    if io.device != ix.device:
        raise MatmulError(f"matmul: out is on device {io.device}, {name} on device {ix.device}")
    if m == 0 or n == 0:  # (nothing to read: an empty operand's strides may be anything, zeros included)
        return out
    es = ix.itemsize
    staged = False
    try:
        b_major, view = _b_view(ix, 1 if left else 0, es, fp8)
    except MatmulError:
        x, ix = _staged(x, ix, lib, left)  # a K-major copy, where the library can make one
        if x is None:
            raise
        staged = True
        if not _SIM and call_captured():  # (matmul recorded the call's stream)
            hold(x)  # (a graph reads the copy at every replay: nbwgmma.capture)
        b_major, view = _b_view(ix, 1 if left else 0, es, fp8)
    if not fresh_out and k:
        check_apart(io, ((name, dense),))
    from ..launch import device_limits, launch, max_active_clusters

    # x @ w24.t(): D is out^T; a row-major out with 16-byte aligned rows gets D's tile transposed
    # in shared memory and stored by TMA (else each value is stored from the registers).
    c_view = None if left else tma_view(io, n, m, io.strides[0], io.strides[1])
    cfg = _config(w.dtype, b_major, n, opts, w.meta_regs == 1 or fp8, c_view is not None)
    box = (cfg.b_rows, cfg.bk) if b_major == "K" else (cfg.bk, 64)
    tb = tensor_map(x, ix.ptr, ix.dtype, box, view, keep=staged)  # (a copy lives while the launch reads it)
    ta, tm = w.maps()
    d = tensor_map(out, io.ptr, odt, (64, 64), c_view, keep=False).address if cfg.out_blocks else \
        _d_view(io, out, not left, odt)
    args = (ta.address, tb.address, tm.address, d, np.int32(m), np.int32(n), np.int32(k), np.int32(w.mblocks))
    kern, cl = sparse_kernel(cfg), cfg.cluster
    ctas = cl if _SIM else device_limits()["multiprocessors"]
    if cl > 1 and not _SIM:  # clusters sit whole in a GPC: maybe fewer CTAs fit at once
        key = (cfg.key(), ix.device)
        if key not in _CLUSTER_CTAS:
            _CLUSTER_CTAS[key] = cl * max_active_clusters(kern, args, THREADS, (cl, 1, 1), smem=cfg.smem)
        ctas = _CLUSTER_CTAS[key]
        if ctas == 0:
            raise MatmulError(f"matmul: config {opts}: no cluster of {cl} CTAs of the sparse kernel fits this GPU "
                              f"at once; use a smaller cluster")
    launch(kern, cfg.grid(m, n, k, ctas), THREADS, args, stream=stream_of(lib, stream), smem=cfg.smem,
           cluster=(cl, 1, 1) if cl > 1 else None, pdl=True)
    return out

