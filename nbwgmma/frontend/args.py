"""The arguments of :func:`nbwgmma.matmul`: checks, element types, output allocation,
streams. Each check raises :class:`~nbwgmma.errors.MatmulError` (its subclass
:class:`~nbwgmma.errors.MatmulTypeError` for a wrong array kind, element type or argument
type) with one line that says what was expected and what was given, the same on the GPU
and in Numba's CUDA simulator."""

from __future__ import annotations

import threading

import numpy as np
from numba import cuda

from .. import sim
from ..capture import hold, refuse_host_read, relaxed
from ..errors import ConfigError, MatmulError, MatmulTypeError, is_int
from ..fastlaunch import array_arg_values
from .arrays import ArrayInfo, array_info

__all__ = ["MatmulError", "MatmulTypeError", "FP8", "NP_OF", "CONFIG_KEYS", "check_call", "check_config",
           "check_out", "check_apart", "check_reads_apart", "arrays_among", "whole_strides", "check_c_apart", "array_error", "described", "config_error", "scale_product", "lib_of", "empty_like_lib", "empty_rows16",
           "torch_dtype", "stream_of", "stream_key", "PER_THREAD_STREAM", "is_real", "real_arg", "F32_MAX", "output",
           "stand_in", "stream_scratch", "typed", "type_name", "holds", "raw_f16"]


FP8 = ("e4m3", "e5m2")
_OUT_TYPES = {"bf16", "f16", "f32", "e4m3", "e5m2"}  # fp8 outputs: codes (scale_out, amax)
_IN_BYTES = {"bf16": 2, "f16": 2, "f32": 4, "e4m3": 1, "e5m2": 1}
#: numpy element type of each nbwgmma type in Numba and CuPy arrays (bf16 and fp8 as raw bits)
NP_OF = {"bf16": np.uint16, "f16": np.float16, "f32": np.float32, "e4m3": np.uint8, "e5m2": np.uint8}
CONFIG_KEYS = {"bm", "bn", "stages", "group_m", "producer_regs", "consumer_regs", "epilogue", "c_parts",
               "c_slots", "cluster", "split", "swap", "stream_k", "cluster_k", "consumers", "multicast"}
#: config keys whose value is a string; the others are integers
_STR_KEYS = {"epilogue", "multicast"}


def _kind(ta: str, tb: str) -> str:
    if ta in FP8 and tb in FP8:
        return f"f32.{ta}.{tb}"
    if ta != tb:
        raise MatmulTypeError(f"matmul: A and B must have the same type (or both fp8); got {ta} and {tb}")
    if ta in ("bf16", "f16"):
        return f"f32.{ta}.{ta}"
    if ta == "f32":
        return "f32.tf32.tf32"
    raise MatmulTypeError(f"matmul: unsupported input type {ta}; expected bf16, f16, f32 (tf32) or fp8 e4m3/e5m2 "
                    f"(raw uint16/uint8 arrays with in_dtype=)")


_TYPE_NAMES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "float8_e4m3fn": "e4m3",
               "float8_e5m2": "e5m2"}


def type_name(t):
    """nbwgmma's name of element type ``t`` (a PyTorch dtype or its name: "bfloat16" -> "bf16", ...);
    other values as they are."""
    if isinstance(t, type) and issubclass(t, np.generic):  # a NumPy scalar type: np.float32, ...
        t = np.dtype(t).name
    return _TYPE_NAMES.get(str(t).replace("torch.", ""), t)


def holds(dtype: str, odt: str) -> bool:
    """Whether an output array of element type ``dtype`` holds ``odt`` values: its own type, or
    raw integers for the types NumPy lacks (uint16 for bf16 bits, uint8 for fp8 codes)."""
    return dtype == odt or (odt == "bf16" and dtype == "u16") or (odt in FP8 and dtype == "u8")


def typed(info: ArrayInfo, name: str, t, who: str = "matmul") -> ArrayInfo:
    """``info`` with element type ``t`` (``in_dtype``): the array's own type, or raw
    integers of the same size (NumPy, hence Numba and CuPy, has no bf16 or fp8 type); anything
    else a :class:`MatmulTypeError` of ``who``'s naming the argument."""
    if t is None or t == info.dtype:
        return info
    if not isinstance(t, str) or t not in _IN_BYTES:
        pair = " (or a pair of them)" if who == "matmul" else ""
        raise MatmulTypeError(f"{who}: in_dtype must be among {sorted(_IN_BYTES)}{pair}; got {t!r}")
    if info.dtype[0] not in "us" or info.itemsize != _IN_BYTES[t]:
        raise MatmulTypeError(f"{who}: in_dtype={t} reads raw {_IN_BYTES[t]}-byte integers; {name} holds {info.dtype}")
    return info._replace(dtype=t)


def raw_f16(given, typed_as) -> bool:
    """Whether an operand among ``given`` (their descriptions) is uint16 read as f16 (``typed_as``,
    after ``in_dtype``): a uint16 out or C of such a call might hold f16 bits as well as bf16's."""
    return any(g.dtype == "u16" and t.dtype == "f16" for g, t in zip(given, typed_as))


def _check_device(info, name, device):
    if device is not None and info.device is not None and info.device != device:
        raise MatmulError(f"matmul: {name} is on device {info.device}, A on device {device}")


def check_call(ia, ib, io, *, in_dtype, out_dtype, scale_a, scale_b, config, autotune_default):
    """Check a call's operands and options before any allocation. Returns
    ``(ia, ib, kind, fp8, auto, opts, odt, raw16)``: the operands with their element types, the
    wgmma kind, whether they are fp8, whether to autotune, the config dict, the output type, and
    whether an operand is f16 given as uint16 bits (:func:`raw_f16`: a uint16 C is then refused)."""
    if len(ia.shape) != 2 or len(ib.shape) != 2:
        raise MatmulError(f"matmul: A and B must be 2-D; got shapes {ia.shape} and {ib.shape}")
    if ia.shape[1] != ib.shape[0]:
        hint = ""
        if ia.shape[1] == ib.shape[1]:  # B given as (N, K), a weight as nn.Linear keeps it
            hint = "; B must be (K, N): for a weight stored (N, K), as nn.Linear keeps it, pass its transpose (w.T)"
        raise MatmulError(f"matmul: inner dimensions differ: A is {ia.shape}, B is {ib.shape}{hint}")
    _check_device(ib, "B", ia.device)
    if isinstance(in_dtype, (tuple, list)):
        if len(in_dtype) != 2:
            raise MatmulTypeError(f"matmul: in_dtype must be a type name or a pair of them (A's, B's); "
                                  f"got {in_dtype!r}")
        ta, tb = in_dtype
    else:
        ta = tb = in_dtype
    given, (ia, ib) = (ia, ib), (typed(ia, "A", ta), typed(ib, "B", tb))
    raw = raw_f16(given, (ia, ib))
    kind = _kind(ia.dtype, ib.dtype)
    fp8 = ia.dtype in FP8
    auto = config == "auto" or (config is None and autotune_default)
    opts = {} if auto or config is None else check_config(config)
    if (scale_a is not None or scale_b is not None) and not fp8:
        raise MatmulError("matmul: scale_a/scale_b apply to fp8 inputs only")
    if out_dtype is None and io is not None:  # like torch's out=: the array says the type
        if io.dtype == "u16" and raw:  # (uint16 is bf16's bits; with f16 operands as bits it might be f16's)
            raise MatmulTypeError("matmul: out is uint16, which nbwgmma reads as bf16 bits, and A or B holds f16 "
                                  "bits (in_dtype='f16'): give out as float16 for an f16 result (f16 bits as "
                                  ".view(np.float16)), or say out_dtype='bf16' for a bf16 one")
        out_dtype = {"u16": "bf16"}.get(io.dtype, io.dtype)
    odt = type_name(out_dtype or ("bf16" if fp8 else ia.dtype))
    if odt not in _OUT_TYPES:
        raise MatmulTypeError(f"matmul: out_dtype (or the type of out) must be bf16, f16, f32, e4m3 or e5m2; got "
                              f"{out_dtype}")
    if ia.dtype == "f32" and odt != "f32":
        raise MatmulTypeError(f"matmul: f32 (tf32) inputs give f32 outputs; got out_dtype={odt}")
    return ia, ib, kind, fp8, auto, opts, odt, raw


def check_config(config) -> dict:
    """A ``config`` dict's keys and the Python types of its values (``GemmConfig`` checks
    the values when the plan is built: :func:`config_error`). Returns a copy, integers as
    ``int`` (a NumPy integer would give the kernel cache another key for the same kernel)."""
    if isinstance(config, str):
        raise MatmulError(f"matmul: config must be a dict or 'auto'; got {config!r}")
    if not isinstance(config, dict):
        raise MatmulTypeError(f"matmul: config must be a dict or 'auto'; got {type(config).__name__}")
    bad = set(config) - CONFIG_KEYS
    if bad:
        raise MatmulError(f"matmul: unknown config keys {sorted(bad, key=str)}; expected among {sorted(CONFIG_KEYS)}")
    opts = {}
    for key, v in config.items():
        if key in _STR_KEYS:
            if not isinstance(v, str):
                raise MatmulTypeError(f"matmul: config[{key!r}] must be a string; got {v!r}")
        elif key in ("stream_k", "swap") and isinstance(v, (bool, np.bool_)):
            v = int(v)  # (flags: GemmConfig takes True and False for them too)
        elif not is_int(v):
            raise MatmulTypeError(f"matmul: config[{key!r}] must be an integer; got {v!r}")
        else:
            v = int(v)
        if key == "swap" and v not in (0, 1):
            raise MatmulError(f"matmul: config['swap'] must be 0 (never swap) or 1 (swap); got {v}")
        opts[key] = v
    return opts


def config_error(e: ConfigError, given: dict) -> MatmulError:
    """``GemmConfig``'s objection to a call's ``config`` (``given``), naming the entry at fault
    (or the whole config when the parameter at fault took its default)."""
    msg = str(e)
    if e.key in given:
        where = f"config[{e.key!r}]"
        if msg.startswith(e.key + " "):  # "bm must be ...": "config['bm'] must be ..."
            return MatmulError(f"matmul: {where}{msg[len(e.key):]}")
    else:
        where = f"config {given}"
    return MatmulError(f"matmul: {where}: {msg}")


def array_error(named, err: TypeError) -> MatmulTypeError:
    """The error for ``array_info``'s ``err`` about one of ``named`` ((name, array) pairs):
    the message names the argument (the first of them that ``array_info`` rejects)."""
    for name, x in named:
        try:
            array_info(x)
        except TypeError as e:
            return MatmulTypeError(f"matmul: {name}: {e}")
    return MatmulTypeError(f"matmul: {err}")


F32_MAX = float(np.finfo(np.float32).max)  # (a kernel's alpha, beta and scalar extras are f32)


def is_real(x) -> bool:
    """Whether ``x`` is a real number (Python's or NumPy's; a bool is not)."""
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, bool)


def real_arg(x, name: str) -> float:
    """``x`` as a float, or the :class:`MatmulTypeError` naming the argument ``name`` (not a real
    number), or the :class:`MatmulError` (NaN, infinite or past the f32 range: the kernel takes it
    as an f32, where it would be inf and give inf or NaN where the product is finite)."""
    if not is_real(x):
        raise MatmulTypeError(f"matmul: {name} must be a real number; got {type(x).__name__}")
    try:
        v = float(x)
    except OverflowError:  # (a Python int past the floats)
        raise MatmulError(f"matmul: {name} must be a finite f32 number; got an integer of {int(x).bit_length()} "
                          f"bits") from None
    if not abs(v) <= F32_MAX:  # (NaN fails this too)
        raise MatmulError(f"matmul: {name} must be a finite f32 number (at most {F32_MAX:.7g} in magnitude); got "
                          f"{x!r}")
    return v


def described(x, name: str, who: str = "matmul") -> ArrayInfo:
    """``array_info(x)``; what it rejects is a :class:`MatmulTypeError` naming the argument
    (and the function ``who`` it was given to); strides that are not whole elements (a view of
    another type's bytes) a :class:`MatmulError`."""
    try:
        info = array_info(x)
    except TypeError as e:
        raise MatmulTypeError(f"{who}: {name}: {e}") from None
    return whole_strides(info, name, who)


def whole_strides(info: ArrayInfo, name: str, who: str = "matmul") -> ArrayInfo:
    """``info``, or the :class:`MatmulError` for strides that are not whole elements (a view of
    another type's bytes: misaligned loads and stores on the GPU)."""
    if any(st % info.itemsize for st, d in zip(info.strides, info.shape) if d > 1):
        raise MatmulError(f"{who}: {name} has strides {info.strides} bytes, not multiples of its element size "
                          f"({info.itemsize} bytes)")
    return info


def scale_product(scale_a, scale_b) -> float:
    """``alpha``: the product of the fp8 scales (None: 1)."""
    def value(x, name):
        if x is None:
            return 1.0
        if isinstance(x, (str, bytes, bool, np.bool_)):  # (float() would take "2" and True)
            raise MatmulTypeError(f"matmul: scale_a and scale_b must be numbers (or one-element tensors); got "
                                  f"{name}={x!r}")
        if not isinstance(x, (int, float, np.integer, np.floating)) and not sim.enabled():
            refuse_host_read(name)  # (a device array's value, read here)
        if hasattr(x, "copy_to_host") and int(np.prod(getattr(x, "shape", ()))) == 1:
            return float(np.asarray(x.copy_to_host()).reshape(-1)[0])  # a Numba array of one element
        return float(x)

    try:
        sa, sb = value(scale_a, "scale_a"), value(scale_b, "scale_b")
    except MatmulError:  # (refuse_host_read's, as it is)
        raise
    except OverflowError:
        raise MatmulError(f"matmul: scale_a and scale_b must be finite f32 numbers; got a number past the "
                          f"floats ({str(scale_a)[:20]}, {str(scale_b)[:20]})") from None
    except (TypeError, ValueError):
        bad = scale_a if not _is_number(scale_a) else scale_b
        raise MatmulTypeError(f"matmul: scale_a and scale_b must be numbers (or one-element tensors); "
                              f"got {bad!r}") from None
    return float(sa * sb)


def _is_number(x) -> bool:
    try:
        float(x)
    except (TypeError, ValueError):
        return x is None
    return True


def output(lib, a, out, io, ia, ib, odt):
    """``(out, io)``: the given output checked (:func:`check_out`), or a new one of ``odt``
    and ``a``'s array kind."""
    fresh = out is None
    if fresh:
        (m, _), n = ia.shape, ib.shape[1]
        out = empty_like_lib(lib, a, (m, n), odt)
        io = array_info(out)
    check_out(io, ia, ib, odt, fresh)
    return out, io


def check_out(io, ia, ib, odt, fresh):
    """The output's shape, type and device, and (for a given ``out``) that it overlaps
    neither operand."""
    (m, k), n = ia.shape, ib.shape[1]
    if io.shape != (m, n):
        raise MatmulError(f"matmul: out must have shape {(m, n)}; got {io.shape}")
    if not holds(io.dtype, odt):
        raise MatmulTypeError(f"matmul: out must have type {odt}; got {io.dtype}")
    _check_device(io, "out", ia.device)
    if not fresh:  # (with K = 0 the operands are not read, but out is still written)
        check_apart(io, (("A", ia), ("B", ib)) if m and n and k else ())


def check_apart(io, operands, who="matmul"):
    """A given output ``io`` must not overlap itself (its elements written in any order: a race,
    a wrong answer) nor the ``operands`` (:func:`check_reads_apart`)."""
    if 0 not in io.shape and any(st == 0 and d > 1 for st, d in zip(io.strides, io.shape)):
        raise MatmulError(f"{who}: out's elements overlap one another (a zero stride); got strides {io.strides}")
    if _overlaps_itself(io):
        raise MatmulError(f"{who}: out's elements overlap one another: shape {io.shape} with strides {io.strides} "
                          f"bytes puts elements of {io.itemsize} bytes on shared bytes")
    check_reads_apart(io, operands, who)


def check_reads_apart(io, operands, who="matmul"):
    """A given output ``io`` must not overlap the ``operands`` ((name, ArrayInfo or None), ...: the
    matrices, and the vectors an epilogue reads, such as a bias or scales): other tiles would
    read them after one wrote there."""
    for name, iv in operands:
        if iv is not None and _may_overlap(iv, io):  # (column blocks of one buffer interleave their bytes, yet
            raise MatmulError(f"{who}: out overlaps {name}")  # share no element)


def arrays_among(named, who="matmul") -> tuple:
    """``(name, ArrayInfo)`` of each ``(name, value)`` whose value is an array (numbers, None and
    what is neither are left out: their own checks report them), for :func:`check_apart`."""
    found = []
    for name, x in named:
        if x is None or isinstance(x, (int, float, complex, str, bytes, np.number, np.bool_)):
            continue
        try:
            found.append((name, array_info(x)))
        except (TypeError, ValueError):
            continue
    return tuple(found)


def _overlaps_itself(x, limit=4096) -> bool:
    """Whether two elements of ``x`` share a byte (no stride is 0): none where each stride, smallest
    first, steps past what the smaller ones span (every usual layout); otherwise whether some index
    step ``t != 0`` (|t_i| < shape_i) moves by less than an element (past ``limit`` candidates, a yes)."""
    if 0 in x.shape:
        return False
    dims = sorted((abs(s), d) for s, d in zip(x.strides, x.shape) if d > 1)
    if dims and dims[0][0] == 0:
        return True
    span = x.itemsize
    for s, d in dims:
        if s < span:
            break
        span += (d - 1) * s
    else:
        return False
    e, budget = x.itemsize, [limit]
    reach = [e]
    for s, d in dims[:-1]:
        reach.append(reach[-1] + (d - 1) * s)

    def search(k, r, lead):  # t_k .. t_0, the first nonzero one positive, with |r + sum t_i s_i| < e
        s, d = dims[k]
        lo = 0 if lead else 1 - d
        t_lo, t_hi = max(lo, -((r + reach[k] - 1) // s)), min(d - 1, (reach[k] - 1 - r) // s)
        for t in range(t_lo, t_hi + 1):
            budget[0] -= 1
            if budget[0] < 0:
                return True
            nr = r + t * s
            if k == 0:
                if abs(nr) < e and not (lead and t == 0):
                    return True
            elif search(k - 1, nr, lead and t == 0):
                return True
        return False

    return search(len(dims) - 1, 0, True)


def check_c_apart(ic, io, who="matmul"):
    """C of ``beta * C`` (``ic``) is the output itself (``io``: the same elements, read and written
    in place) or lies apart from it: a C that partly shares out's memory would be read where another
    tile has already written (a wrong answer)."""
    if ic.ptr == io.ptr and ic.shape == io.shape and ic.itemsize == io.itemsize \
            and all(a == b or d == 1 for a, b, d in zip(ic.strides, io.strides, io.shape)):
        return
    if _may_overlap(ic, io):
        raise MatmulError(f"{who}: c overlaps out without being out itself (got c at byte offset "
                          f"{ic.ptr - io.ptr} from out, shape {ic.shape}, strides {ic.strides} bytes; out has "
                          f"shape {io.shape}, strides {io.strides}): pass out itself as c, or a copy")


def _may_overlap(x, y, limit=4096) -> bool:
    """Whether arrays ``x`` and ``y`` share a byte. Exact where both step the same positive strides
    with the same element size (slices of one buffer), searching the index offsets dimension by
    dimension from the largest stride, each bounded by what the smaller ones can still reach (a
    few candidates each for arrays whose rows do not overlap themselves; past ``limit`` of them,
    a yes); otherwise whether their byte ranges meet."""
    lo, hi = x.byte_range()
    ylo, yhi = y.byte_range()
    if 0 in x.shape or 0 in y.shape or not (lo < yhi and ylo < hi):
        return False
    if x.itemsize != y.itemsize or len(x.shape) != len(y.shape):
        return True
    both = [(sx, sy, dx, dy) for sx, sy, dx, dy in zip(x.strides, y.strides, x.shape, y.shape) if dx > 1 or dy > 1]
    if not both or any(sx != sy or sx <= 0 for sx, sy, _, _ in both):
        return True
    dims = sorted((s, dx, dy) for s, _, dx, dy in both)
    # x's element (i..) against y's (j..): they share a byte where |d - sum(t * s)| < itemsize, t = j - i
    # in (-dx, dy) per dimension; reach[k]: itemsize plus the most the dimensions below k can add
    e = x.itemsize
    reach = [e]
    for s, dx, dy in dims[:-1]:
        reach.append(reach[-1] + (max(dx, dy) - 1) * s)
    budget = [limit]

    def search(k, r):  # t_k .. t_0 with |r - sum t_i s_i| < itemsize
        s, dx, dy = dims[k]
        t_lo, t_hi = max(1 - dx, -((reach[k] - 1 - r) // s)), min(dy - 1, (r + reach[k] - 1) // s)
        if k == 0:
            return t_lo <= t_hi
        for t in range(t_lo, t_hi + 1):
            budget[0] -= 1
            if budget[0] < 0 or search(k - 1, r - t * s):
                return True
        return False

    return search(len(dims) - 1, x.ptr - y.ptr)


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


def zero_operands(lib, ref, a_shape, b_lead, n, ta, tb):
    """Zero operands in ``ref``'s library standing in for a K = 0 product whose epilogue still
    writes something (a bias, an activation, C, a user function): A of ``a_shape`` with its last
    dimension made 16 and B of ``b_lead + (16, n)``, K-major (each matrix the transpose of a
    row-major n x 16 one). A product of K = 16 over zeros is exactly zero, so the epilogue sees
    the values of the K = 0 product."""
    a_shape, b_shape = (*a_shape[:-1], 16), (*b_lead, n, 16)
    if lib == "torch":
        return ref.new_zeros(a_shape, dtype=torch_dtype(ta)), \
            ref.new_zeros(b_shape, dtype=torch_dtype(tb)).transpose(-1, -2)
    if lib == "cupy":
        import cupy

        with cupy.cuda.Device(ref.device.id):
            return cupy.zeros(a_shape, dtype=NP_OF[ta]), cupy.zeros(b_shape, dtype=NP_OF[tb]).swapaxes(-1, -2)
    za, zb = cuda.to_device(np.zeros(a_shape, dtype=NP_OF[ta])), cuda.to_device(np.zeros(b_shape, dtype=NP_OF[tb]))
    if not b_lead:
        return za, zb.T
    if sim.enabled():  # (Numba transposes 2-D arrays only: the view is built from its strides)
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return za, FakeCUDAArray(np.zeros(b_shape, dtype=NP_OF[tb]).swapaxes(-1, -2))
    st = zb.strides
    return za, cuda.devicearray.DeviceNDArray((*b_lead, 16, n), (*st[:-2], st[-1], st[-2]), zb.dtype,
                                              gpu_data=zb.gpu_data)


def empty_rows16(lib, ref, shape, t):
    """:func:`empty_like_lib` with the last dimension's rows 16 bytes apart, as TMA stores need
    (``torch._grouped_mm`` pads its outputs so too): a view of the first ``shape[-1]`` columns."""
    n, es = shape[-1], np.dtype(NP_OF[t]).itemsize
    pad = -(-n * es // 16) * 16 // es
    out = empty_like_lib(lib, ref, tuple(shape[:-1]) + (pad,), t)
    return out[(slice(None),) * (len(shape) - 1) + (slice(0, n),)] if pad != n else out  # (Numba: no ``...``)


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


#: The raw handle of the per-thread default stream (``CU_STREAM_PER_THREAD``): one handle, a
#: different stream in each host thread.
PER_THREAD_STREAM = 2


def stream_key(handle: int):
    """What tells the streams a raw ``handle`` may name apart, for scratch that the launches of one
    stream share (they run in order): the handle, or for the per-thread default stream the
    handle and the calling thread (two threads' launches on it may run at once)."""
    return (handle, threading.get_ident()) if handle == PER_THREAD_STREAM else handle


_STAND_INS: dict = {}  # device -> stand_in's array


def stand_in(device):
    """A 1 x 1 f32 array of ones on ``device``, made once: the argument in place of a 2-D array
    a kernel built without it does not read (an absent bias, a side without a scale array, C
    where TMA stores it)."""
    d = _STAND_INS.get(device)
    if d is None:  # (made on a stream of its own, maybe while a capture is under way: nbwgmma.capture)
        with relaxed():
            s = cuda.stream()
            d = _STAND_INS[device] = cuda.to_device(np.ones((1, 1), np.float32), stream=s)
            s.synchronize()
    return d


def stream_scratch(floats: int, tiles: int, captured=None) -> tuple:
    """Scratch for the launches of one stream (split-K's and stream-K's): ``floats`` f32 values of
    partial tiles, ``tiles`` int32 counters at zero (each launch leaves them so), and the two
    arrays' launch parameter values (none in the simulator, which launches with the arrays).
    ``captured``: the raw handle of a stream capturing into a CUDA graph, for the graph's own
    scratch (held for the life of the process), its counters zeroed by a memset the graph
    replays (:mod:`nbwgmma.capture`)."""
    if captured is not None:
        from numba.cuda.cudadrv.driver import device_memset

        with relaxed():
            ws, counters = cuda.device_array(floats, np.float32), cuda.device_array(tiles, np.int32)
        hold(ws, counters)
        device_memset(counters, 0, counters.nbytes, stream=cuda.external_stream(captured))
    else:
        ws, counters = cuda.device_array(floats, np.float32), cuda.to_device(np.zeros(tiles, np.int32))
    values = () if sim.enabled() else tuple(v for x in (ws, counters) for v in array_arg_values(
        x.__cuda_array_interface__["data"][0], x.shape, x.strides, x.dtype.itemsize))
    return ws, counters, values


def stream_of(lib, stream, who: str = "matmul") -> int:
    """The raw ``CUstream`` handle of ``stream`` (None: the current stream of ``lib``); a
    :class:`MatmulTypeError` naming the function ``who`` it was given to for one that is none."""
    if stream is not None:
        if isinstance(stream, int):
            if isinstance(stream, bool) or not 0 <= stream < 1 << 64:
                raise MatmulTypeError(f"{who}: stream must be a CUDA stream object or a raw handle (an integer in "
                                      f"[0, 2^64)); got {stream!r}")
            return stream
        handle = None
        try:
            for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
                if hasattr(stream, attr):
                    handle = int(getattr(stream, attr))
                    break
            else:
                if hasattr(stream, "__cuda_stream__"):  # Numba and cuda.core streams
                    handle = int(stream.__cuda_stream__()[1])
                elif hasattr(stream, "handle"):
                    handle = int(getattr(stream.handle, "value", stream.handle) or 0)
        except (TypeError, ValueError, IndexError):
            handle = None
        if handle is None or not 0 <= handle < 1 << 64:
            raise MatmulTypeError(f"{who}: stream must be a CUDA stream object or a raw handle; got "
                                  f"{type(stream).__name__}" + ("" if handle is None else f" with handle {handle}"))
        return handle
    if lib == "torch":
        return _torch_stream()
    if lib == "cupy":
        import cupy

        return cupy.cuda.get_current_stream().ptr
    return 0
