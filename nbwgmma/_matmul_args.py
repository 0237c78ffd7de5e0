"""The arguments of :func:`nbwgmma.matmul`: checks, element types, output allocation,
streams. Each check raises :class:`MatmulError` (or ``TypeError`` for an unsupported
type) with one line that says what was expected and what was given, the same on the
GPU and in Numba's CUDA simulator."""

from __future__ import annotations

import numpy as np
from numba import cuda

from ._arrays import ArrayInfo

__all__ = ["MatmulError", "FP8", "NP_OF", "CONFIG_KEYS", "check_call", "check_out", "lib_of", "empty_like_lib",
           "torch_dtype", "stream_of"]


class MatmulError(ValueError):
    """Bad input to :func:`nbwgmma.matmul`."""


FP8 = ("e4m3", "e5m2")
_OUT_TYPES = {"bf16", "f16", "f32"}
_IN_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "e4m3": 1, "e5m2": 1}
#: numpy element type of each nbwgmma type in Numba and CuPy arrays (bf16 and fp8 as raw bits)
NP_OF = {"bf16": np.uint16, "f16": np.float16, "f32": np.float32, "e4m3": np.uint8, "e5m2": np.uint8}
CONFIG_KEYS = {"bm", "bn", "stages", "group_m", "producer_regs", "consumer_regs", "epilogue", "c_parts",
               "cluster", "split"}


def _kind(ta: str, tb: str) -> str:
    if ta in FP8 and tb in FP8:
        return f"f32.{ta}.{tb}"
    if ta != tb:
        raise TypeError(f"matmul: A and B must have the same type (or both fp8); got {ta} and {tb}")
    if ta in ("bf16", "f16"):
        return f"f32.{ta}.{ta}"
    if ta == "f32":
        return "f32.tf32.tf32"
    raise TypeError(f"matmul: unsupported input type {ta}; expected bf16, f16, f32 (tf32) or fp8 e4m3/e5m2 "
                    f"(raw uint16/uint8 arrays with in_dtype=)")


def _typed(info: ArrayInfo, name: str, t) -> ArrayInfo:
    """``info`` with element type ``t`` (``in_dtype``): the array's own type, or raw
    integers of the same size (NumPy, hence Numba and CuPy, has no bf16 or fp8 type)."""
    if t is None or t == info.dtype:
        return info
    if t not in _IN_BYTES:
        raise MatmulError(f"matmul: in_dtype must be among {sorted(_IN_BYTES)} (or a pair of them); got {t!r}")
    if info.dtype[0] not in "us" or info.itemsize != _IN_BYTES[t]:
        raise MatmulError(f"matmul: in_dtype={t} reads raw {_IN_BYTES[t]}-byte integers; {name} holds {info.dtype}")
    return info._replace(dtype=t)


def _check_device(info, name, device):
    if device is not None and info.device is not None and info.device != device:
        raise MatmulError(f"matmul: {name} is on device {info.device}, A on device {device}")


def check_call(ia, ib, io, *, in_dtype, out_dtype, scale_a, scale_b, config, autotune_default):
    """Check a call's operands and options before any allocation. Returns
    ``(ia, ib, kind, fp8, auto, opts, odt)``: the operands with their element types, the
    wgmma kind, whether they are fp8, whether to autotune, the config dict, the output type."""
    if len(ia.shape) != 2 or len(ib.shape) != 2:
        raise MatmulError(f"matmul: A and B must be 2-D; got shapes {ia.shape} and {ib.shape}")
    if ia.shape[1] != ib.shape[0]:
        raise MatmulError(f"matmul: inner dimensions differ: A is {ia.shape}, B is {ib.shape}")
    _check_device(ib, "B", ia.device)
    ta, tb = in_dtype if isinstance(in_dtype, (tuple, list)) else (in_dtype, in_dtype)
    ia, ib = _typed(ia, "A", ta), _typed(ib, "B", tb)
    kind = _kind(ia.dtype, ib.dtype)
    fp8 = ia.dtype in FP8
    auto = config == "auto" or (config is None and autotune_default)
    if isinstance(config, str) and not auto:
        raise MatmulError(f"matmul: config must be a dict or 'auto'; got {config!r}")
    opts = dict(config) if config and not auto else {}
    bad = set(opts) - CONFIG_KEYS
    if bad:
        raise MatmulError(f"matmul: unknown config keys {sorted(bad)}")
    if (scale_a is not None or scale_b is not None) and not fp8:
        raise MatmulError("matmul: scale_a/scale_b apply to fp8 inputs only")
    if out_dtype is None and io is not None:  # like torch's out=: the array says the type
        out_dtype = {"u16": "bf16"}.get(io.dtype, io.dtype)
    odt = out_dtype or ("bf16" if fp8 else ia.dtype)
    odt = {"bfloat16": "bf16", "float16": "f16", "float32": "f32"}.get(str(odt).replace("torch.", ""), odt)
    if odt not in _OUT_TYPES:
        raise MatmulError(f"matmul: out_dtype (or the type of out) must be bf16, f16 or f32; got {out_dtype}")
    if ia.dtype == "f32" and odt != "f32":
        raise MatmulError(f"matmul: f32 (tf32) inputs give f32 outputs; got out_dtype={odt}")
    return ia, ib, kind, fp8, auto, opts, odt


def check_out(io, ia, ib, odt, fresh):
    """The output's shape, type and device, and (for a given ``out``) that it overlaps
    neither operand."""
    (m, k), n = ia.shape, ib.shape[1]
    if io.shape != (m, n):
        raise MatmulError(f"matmul: out must have shape {(m, n)}; got {io.shape}")
    if io.dtype != odt and not (odt == "bf16" and io.dtype == "u16"):
        raise MatmulError(f"matmul: out must have type {odt}; got {io.dtype}")
    _check_device(io, "out", ia.device)
    if not fresh:
        olo, ohi = io.byte_range()
        for name, iv in (("A", ia), ("B", ib)):
            lo, hi = iv.byte_range()
            if m and n and k and lo < ohi and olo < hi:
                raise MatmulError(f"matmul: out overlaps {name}")


def lib_of(a):
    mod = type(a).__module__
    if mod.startswith("torch"):
        return "torch"
    if mod.startswith("cupy"):
        return "cupy"
    return "numba"


def torch_dtype(t):
    import torch

    return {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32,
            "e4m3": torch.float8_e4m3fn, "e5m2": torch.float8_e5m2}[t]


def empty_like_lib(lib, ref, shape, t):
    if lib == "torch":
        return ref.new_empty(shape, dtype=torch_dtype(t))  # ref's device, without building a torch.device
    if lib == "cupy":
        import cupy

        with cupy.cuda.Device(ref.device.id):
            return cupy.empty(shape, dtype=NP_OF[t])
    return cuda.device_array(shape, dtype=NP_OF[t])


def _torch_stream() -> int:
    """PyTorch's current stream handle (the getter is looked up once)."""
    import torch

    raw, dev = getattr(torch._C, "_cuda_getCurrentRawStream", None), torch._C._cuda_getDevice
    if raw is None:  # public API (builds a Stream object)
        def get():
            return torch.cuda.current_stream().cuda_stream
    else:  # the handle alone
        def get():
            return raw(dev())
    globals()["_torch_stream"] = get
    return get()


def stream_of(lib, stream) -> int:
    """The raw ``CUstream`` handle of ``stream`` (None: the current stream of ``lib``)."""
    if stream is not None:
        if isinstance(stream, int):
            return stream
        for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        if hasattr(stream, "__cuda_stream__"):  # Numba and cuda.core streams
            return int(stream.__cuda_stream__()[1])
        if hasattr(stream, "handle"):
            return int(getattr(stream.handle, "value", stream.handle) or 0)
        raise MatmulError(f"matmul: stream must be a CUDA stream object or a raw handle; got {type(stream).__name__}")
    if lib == "torch":
        return _torch_stream()
    if lib == "cupy":
        import cupy

        return cupy.cuda.get_current_stream().ptr
    return 0
