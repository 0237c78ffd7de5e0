"""``nbwgmma.matmul(a, b)``: the library GEMM behind a NumPy-like call.

Which path runs:

* A must reach the kernel K-major ([M, K] with unit stride along K) and B as
  [N, K] K-major (``b.T`` row-major), each with a 16-byte aligned base and row
  pitch (TMA's rules). Operands that are already so are used in place; any other
  layout, or a view that breaks the 16-byte rules (odd K, offset views), is
  first copied into a fresh K-major buffer whose rows are padded to 16 bytes
  with zeros. The answer is the same; the copy costs one pass over the operand.
* ``out`` may have any strides: the kernel stores element by element.
"""

from __future__ import annotations

import collections
import math

import numpy as np

from ._arrays import ArrayInfo, array_info

__all__ = ["matmul", "MatmulError"]


class MatmulError(ValueError):
    """Bad input to :func:`matmul`."""


_FP8 = ("e4m3", "e5m2")
_OUT_TYPES = {"bf16", "f16", "f32"}
_ESIZE = {"bf16": 2, "f16": 2, "f32": 4, "e4m3": 1, "e5m2": 1}


def _kind(ta: str, tb: str) -> str:
    if ta in _FP8 and tb in _FP8:
        return f"f32.{ta}.{tb}"
    if ta != tb:
        raise TypeError(f"matmul: A and B must have the same type (or both fp8); got {ta} and {tb}")
    if ta in ("bf16", "f16"):
        return f"f32.{ta}.{ta}"
    if ta == "f32":
        return "f32.tf32.tf32"
    raise TypeError(f"matmul: unsupported input type {ta}; expected bf16, f16, f32 (tf32) or fp8 e4m3/e5m2")


def _lib(a):
    mod = type(a).__module__
    if mod.startswith("torch"):
        return "torch"
    if mod.startswith("cupy"):
        return "cupy"
    return "numba"


_NP_OF = {"bf16": np.uint16, "f16": np.float16, "f32": np.float32, "e4m3": np.uint8, "e5m2": np.uint8}


def _numba_view(info: ArrayInfo, owner, dtype=None):
    """A Numba device array over ``info``'s memory (bf16 and fp8 as raw integers)."""
    from numba import cuda

    dt = np.dtype(dtype or _NP_OF.get(info.dtype, None) or info.dtype)
    desc = {"shape": info.shape, "strides": info.strides, "typestr": dt.str,
            "data": (info.ptr, False), "version": 3}
    return cuda.from_cuda_array_interface(desc, owner=owner, sync=False)


def _empty_like_lib(lib, ref, shape, t):
    if lib == "torch":
        import torch

        tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
               "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[t]
        return torch.empty(shape, dtype=tdt, device=ref.device)
    if lib == "cupy":
        import cupy

        with cupy.cuda.Device(ref.device.id):
            return cupy.empty(shape, dtype=_NP_OF[t])
    from numba import cuda

    return cuda.device_array(shape, dtype=_NP_OF[t])


def _stream_of(lib, stream):
    if stream is not None:
        for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        return stream
    if lib == "torch":
        import torch

        return torch.cuda.current_stream().cuda_stream
    if lib == "cupy":
        import cupy

        return cupy.cuda.get_current_stream().ptr
    return 0


def _tma_ready(info: ArrayInfo) -> bool:
    """[rows, K] with unit K stride, 16-byte aligned base and row pitch."""
    return (info.strides[1] == info.itemsize and info.ptr % 16 == 0 and info.strides[0] % 16 == 0
            and info.strides[0] >= info.shape[1] * info.itemsize)


def _kmajor_copy(x, info: ArrayInfo, transpose: bool, stream):
    """A fresh [rows, Kpad] K-major copy (zero-padded to 16-byte rows) of ``x`` or ``x.T``."""
    from numba import cuda

    from .kernels.copy import pad_transpose_kernel

    rows, cols = (info.shape[1], info.shape[0]) if transpose else info.shape
    es = info.itemsize
    kpad = -(-cols * es // 16) * 16 // es
    src = _numba_view(info, x, dtype=np.dtype(f"u{es}"))
    dst = cuda.device_array((rows, kpad), dtype=np.dtype(f"u{es}"), stream=stream)
    threads = 256
    blocks = min(65535, -(-rows * kpad // threads))
    pad_transpose_kernel[blocks, threads, stream](src, dst, transpose)
    return dst


_TMAP_CACHE: collections.OrderedDict = collections.OrderedDict()


def _tensor_map(arr, dtype, box):
    from .tma import TensorMap

    info = array_info(arr)
    key = (info.ptr, info.shape, info.strides, dtype, box)
    tm = _TMAP_CACHE.get(key)
    if tm is None:
        # The map keeps `arr` alive: staging copies must outlive the asynchronous launch.
        tm = TensorMap(arr, box, dtype=dtype, swizzle="128B")
        _TMAP_CACHE[key] = tm
        while len(_TMAP_CACHE) > 16:
            _TMAP_CACHE.popitem(last=False)
    return tm


def _check_device(info, name, device):
    if device is not None and info.device is not None and info.device != device:
        raise MatmulError(f"matmul: {name} is on device {info.device}, A on device {device}")


def matmul(a, b, *, out=None, out_dtype=None, scale_a=None, scale_b=None, stream=None, config=None):
    """``a @ b`` for 2-D CUDA arrays (CuPy, PyTorch, Numba), computed by the nbwgmma GEMM.

    bf16/f16 inputs accumulate in f32; f32 inputs run as tf32; fp8 (e4m3/e5m2,
    PyTorch float8 tensors) take per-tensor ``scale_a``/``scale_b``. The result
    has ``out_dtype`` (default: the input type, bf16 for fp8) and the array kind
    of ``a``; it is computed on ``stream`` or the caller's current stream.
    """
    from numba import cuda

    from .kernels.gemm import GemmConfig, gemm_kernel
    from .launch import launch

    ia, ib = array_info(a), array_info(b)
    if len(ia.shape) != 2 or len(ib.shape) != 2:
        raise MatmulError(f"matmul: A and B must be 2-D; got shapes {ia.shape} and {ib.shape}")
    (m, k), (k2, n) = ia.shape, ib.shape
    if k != k2:
        raise MatmulError(f"matmul: inner dimensions differ: A is {ia.shape}, B is {ib.shape}")
    _check_device(ib, "B", ia.device)
    kind = _kind(ia.dtype, ib.dtype)
    fp8 = ia.dtype in _FP8
    if (scale_a is not None or scale_b is not None) and not fp8:
        raise MatmulError("matmul: scale_a/scale_b apply to fp8 inputs only")
    odt = out_dtype or ("bf16" if fp8 else ia.dtype)
    odt = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}.get(str(odt).replace("torch.", ""), odt)
    if odt not in _OUT_TYPES:
        raise MatmulError(f"matmul: out_dtype must be bf16, f16 or f32; got {out_dtype}")
    if ia.dtype == "f32" and odt != "f32":
        raise MatmulError(f"matmul: f32 (tf32) inputs give f32 outputs; got out_dtype={odt}")
    lib = _lib(a)
    if out is None:
        out = _empty_like_lib(lib, a, (m, n), odt)
    io = array_info(out)
    if io.shape != (m, n):
        raise MatmulError(f"matmul: out must have shape {(m, n)}; got {io.shape}")
    if io.dtype != odt and not (odt == "bf16" and io.dtype == "u16"):
        raise MatmulError(f"matmul: out must have type {odt}; got {io.dtype}")
    _check_device(io, "out", ia.device)
    olo, ohi = io.byte_range()
    for name, iv in (("A", ia), ("B", ib)):
        lo, hi = iv.byte_range()
        if m and n and k and lo < ohi and olo < hi:
            raise MatmulError(f"matmul: out overlaps {name}")
    if m == 0 or n == 0:
        return out
    st = _stream_of(lib, stream)
    nb_stream = cuda.external_stream(st) if isinstance(st, int) and st else (st if st else 0)
    c_view = _numba_view(io, out)
    if k == 0:
        from .kernels.copy import fill_zero_kernel

        fill_zero_kernel[max(1, min(65535, -(-m * n // 256))), 256, nb_stream](c_view)
        return out

    # A as [M, K] K-major; B as [N, K] K-major (b.T).
    a_k = a if _tma_ready(ia) else _kmajor_copy(a, ia, False, nb_stream)
    bt_info = ArrayInfo(ib.ptr, (n, k), (ib.strides[1], ib.strides[0]), ib.itemsize, ib.dtype, ib.device, ib.kind)
    b_k = b.T if (lib in ("torch", "cupy") and _tma_ready(bt_info)) else None
    if b_k is None:
        b_k = _kmajor_copy(b, ib, True, nb_stream)
    cfg = config or GemmConfig(kind, scaled=fp8)
    # f32 operands are read by the tensor cores as tf32.
    ta = _tensor_map(a_k, "tf32" if ia.dtype == "f32" else ia.dtype, (cfg.bm, cfg.bk))
    tb = _tensor_map(b_k, "tf32" if ib.dtype == "f32" else ib.dtype, (cfg.bn, cfg.bk))
    alpha = float((1.0 if scale_a is None else float(scale_a)) * (1.0 if scale_b is None else float(scale_b)))
    kern = gemm_kernel(cfg)
    from .launch import device_limits

    sms = device_limits()["multiprocessors"]
    tiles = math.ceil(m / cfg.bm) * math.ceil(n / cfg.bn)
    launch(kern, min(sms, tiles), cfg.threads,
           (ta.address, tb.address, c_view, np.int32(m), np.int32(n), np.int32(k), np.float32(alpha)),
           stream=nb_stream, smem=cfg.smem_bytes + 1023)
    # The tensor maps must outlive the launch: keep the staging copies alive with them.
    return out
