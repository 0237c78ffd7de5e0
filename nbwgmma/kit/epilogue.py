"""Epilogues on accumulator fragments, unrolled at compile time.

A thread of a warpgroup holds ``N / 2`` values of a 64 x N f32 (or s32) accumulator; value
``i`` of thread ``t`` sits at row ``16 * (t // 32) + (t % 32) // 4 + 8 * ((i // 2) % 2)`` and
column ``8 * (i // 4) + 2 * (t % 4) + i % 2`` (PTX ISA, "Asynchronous Warpgroup Level Matrix
Accumulator Fragment", the D layout of m64nNk*). :func:`acc_map` turns a scalar function
``fn(value, row, col, *extra) -> value`` into a device function over the whole fragment:
its generated source indexes the tuple with constants only and computes each coordinate as
a base plus a constant, so the fragment stays in registers (no local memory) and the row
and column cost one add each::

    @inlined
    def bias_gelu(v, row, col, b):       # b: the bias of this value's column
        return gelu_tanh(v + b)

    epilogue = acc_map(bias_gelu, 256, cols=1, pack="bf16")
    ...
    # inside the kernel, after wgmma_wait_group: bias[col0:n] is the tile's part of the bias
    regs = epilogue(acc, tid, row0, col0, bias[col0:n])

Per-column and per-row vectors (``cols=``, ``rows=``) are loaded once per thread and column
(row), with no compare where the vector covers the tile; other extra arguments
(``nextra=``) reach ``fn`` as they are. Row and column are signed integers: compare them
with the kernel's int32 sizes as they are. With ``pack="bf16"`` the results come out as
packed bf16 pairs, ready for ``stmatrix``. :func:`acc_map4` hands a function the four values
of each 2 x 2 group a thread holds at once (one random draw of four numbers for them).
The activations are device functions of one value.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from .. import backend
from ..errors import KitError, is_int
from ..intrinsics import (
    acc_stmatrix_swizzled, acc_to_bf16x2, acc_to_f16x2, bulk_commit_group, bulk_wait_group_read, ex2_approx,
    fence_proxy_async_shared, ld_shared_b32, rcp_approx, st_global_b16, st_global_b16x2, tanh_approx, tma_store_2d,
    tma_store_3d,
)
from .device import device_function, inlined
from .typecheck import count_check, fragment_check, number_check, vector_check, wgmma_n
from .warpgroup import warpgroup_sync

__all__ = ["acc_map", "acc_map4", "col_values", "VECTOR_TYPES", "tma_store_part", "tma_store_block", "store_rows_part",
           "tma_store_part_3d",
           "tma_store_block_3d", "activation", "ACTIVATIONS", "relu", "gelu", "gelu_tanh",
           "gelu_tanh_approx", "silu", "sigmoid", "value_coords"]


@inlined
def relu(v):
    return max(v, np.float32(0.0))


#: erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), for z >= 0: P's coefficients (t^0 first), a
#: least-squares fit of degree 9 at 400 Chebyshev nodes of t in [0, 1] to log(erfc(z) / t) + z^2,
#: computed in 40-digit arithmetic (mpmath); erfc's relative error at most 1.02e-7 over z in [0, 12]
#: in exact arithmetic, about one f32 ulp.
_ERFC_P = tuple(np.float32(c) for c in (
    -1.2655122251416056, 1.0000236801577764, 0.3740919597188544, 0.09678418948879314, -0.18628806166036538,
    0.2788680844437318, -1.1352040003268582, 1.4885158891878907, -0.8221522343895589, 0.17087277767024925))
_P0, _P1, _P2, _P3, _P4, _P5, _P6, _P7, _P8, _P9 = _ERFC_P


@inlined
def gelu(v):
    """x * Phi(x), with the error function (PyTorch's ``gelu``, approximate='none'), as x / 2 *
    erfc(-x / sqrt(2)) with :data:`_ERFC_P`'s erfc, its exponential by ``ex2`` and the reciprocal by
    ``rcp``: within a few f32 ulps for x > -1, 2e-6 relative down to -5 (the exponent's rounding),
    and accurate far into the negative tail, where ``1 + erf`` in f32 cancels to nothing (0 below
    about -13, where ``ex2`` flushes). libdevice's erff here made the fused epilogues of 128 x 192
    and wider tiles spill 40-164 bytes with a bias (a CPU audit with ptxas, 2026-12-06)."""
    x = v * np.float32(0.7071067811865476)
    z = abs(x)
    t = rcp_approx(np.float32(1.0) + np.float32(0.5) * z)
    p = ((((((((_P9 * t + _P8) * t + _P7) * t + _P6) * t + _P5) * t + _P4) * t + _P3) * t + _P2) * t + _P1) * t + _P0
    r = t * ex2_approx((p - v * v * np.float32(0.5)) * np.float32(1.4426950408889634))  # (z^2 in one rounding)
    return np.float32(0.5) * v * (r if x < np.float32(0.0) else np.float32(2.0) - r)


_LOG2E = 1.4426950408889634
# gelu_tanh(v) = v * sigmoid(2u), u = sqrt(2/pi) (v + 0.044715 v^3), as v / (1 + 2**(v * (G1 + G2 v^2)))
_G1 = np.float32(-2 * 0.7978845608028654 * _LOG2E)
_G2 = np.float32(-2 * 0.7978845608028654 * 0.044715 * _LOG2E)
_NLOG2E = np.float32(-_LOG2E)


@inlined
def gelu_tanh(v):
    """The tanh approximation (PyTorch's ``gelu(approximate='tanh')``), written as
    ``x * sigmoid(2u)`` with ``u = sqrt(2/pi) (x + 0.044715 x^3)``: the same function
    (``0.5 (1 + tanh u) = sigmoid(2u)``), accurate in relative terms on both sides (no
    ``1 + tanh`` cancellation for negative x), in two multiplies, a fused multiply-add, an
    ``ex2``, an add, an ``rcp`` and a multiply (:mod:`nbwgmma.intrinsics.fastmath`: a few
    ulp of f32, far below the bf16 or f16 the result is usually stored in)."""
    return v * rcp_approx(np.float32(1.0) + ex2_approx(v * (_G1 + _G2 * (v * v))))


_T0 = np.float32(0.7978845608028654)  # u = x (T0 + T1 x^2)
_T1 = np.float32(0.7978845608028654 * 0.044715)


@inlined
def gelu_tanh_approx(v):
    """gelu_tanh as ``0.5 x (1 + tanh(u))`` with ``tanh.approx`` (one MUFU, seven instructions with
    a bias add where :func:`gelu_tanh` takes two and eight; cuBLASLt's fused GELU is this form):
    absolute error at most 6e-6 (measured on an H100), relative 5e-6 for x > 0, but up to 1e-2
    for x in [-4, -2) and more below, where ``1 + tanh`` cancels (results under 2e-3 in
    magnitude). Below a 16-bit output's rounding except for those small results; the library
    GEMM takes it for 16-bit and fp8 outputs (2-3% faster fused products on an H100)."""
    h = np.float32(0.5) * v
    return h + h * tanh_approx(v * (_T0 + _T1 * (v * v)))


@inlined
def sigmoid(v):
    """``1 / (1 + exp(-x))`` with ``ex2`` and ``rcp`` (a few ulp of f32)."""
    return rcp_approx(np.float32(1.0) + ex2_approx(v * _NLOG2E))


@inlined
def silu(v):
    """``x * sigmoid(x)`` with ``ex2`` and ``rcp`` (a few ulp of f32)."""
    return v * rcp_approx(np.float32(1.0) + ex2_approx(v * _NLOG2E))


ACTIVATIONS = {"relu": relu, "gelu": gelu, "gelu_tanh": gelu_tanh, "silu": silu, "sigmoid": sigmoid}
#: the output types :func:`activation` is chosen for (None: not said, as f32)
ACTIVATION_OUTPUTS = (None, "f32", "bf16", "f16", "e4m3", "e5m2")


def activation(name: str, out: str | None = None):
    """The device function of activation ``name`` (one of :data:`ACTIVATIONS`). Given the
    output's type ``out``, a 16-bit or fp8 one (anything but ``"f32"``) takes gelu_tanh as
    :func:`gelu_tanh_approx` (one MUFU a value; its error lies under the output's rounding but
    for results under 2e-3), as the library's GEMMs do."""
    try:
        f = ACTIVATIONS[name]
    except (KeyError, TypeError):
        raise KitError(f"activation must be one of {sorted(ACTIVATIONS)}; got {name!r}") from None
    if out not in ACTIVATION_OUTPUTS:
        raise KitError(f"activation: out (the output's type) must be one of {ACTIVATION_OUTPUTS}; got {out!r}")
    return gelu_tanh_approx if f is gelu_tanh and out not in (None, "f32") else f


@inlined
def value_coords(tid, i):
    """(row, col) of accumulator value ``i`` held by warpgroup thread ``tid`` (``i`` a constant
    where the fragment is indexed, so both fold to a base plus a constant)."""
    w = tid // 32
    lane = tid % 32
    return 16 * w + lane // 4 + 8 * ((i // 2) % 2), 8 * (i // 4) + 2 * (lane % 4) + i % 2


@inlined
def tma_store_part(regs, buf, ct, cw, tmap_c, col, row):
    """Store one 64 x 64 part of C: warpgroup ``cw``'s packed 16-bit registers ``regs`` (thread
    ``ct``, as ``acc_map(..., 64, pack=...)`` gives them) go through the 128B-swizzled shared
    block ``buf`` (8 KiB) to a TMA store at (``col``, ``row``) of ``tmap_c`` (a 2-D map: box 64 x
    64, the 128B swizzle, ``TensorMap``'s default; a 3-D map of a batch of outputs takes
    :func:`tma_store_part_3d`). Meant for two blocks used in turn: before the store
    is issued, thread 0 waits until the previous call's store has read its block, so the next
    call may write that one. The warpgroup meets on named barrier ``1 + cw``
    (:func:`~nbwgmma.kit.warpgroup_sync`; ``cw`` the consumer's index among the consumers): give
    named barriers of your own ids from 7 up. ``regs``
    of another length than 16 (a 64 x 128 part's 32) is a typing error: the block holds 64
    columns, the rest would be written past it and never stored."""
    _part_regs(regs)
    acc_stmatrix_swizzled(regs, buf, ct, 128, "128B")
    tma_store_block(buf, ct, cw, tmap_c, col, row)


@inlined
def tma_store_block(buf, ct, cw, tmap_c, col, row):
    """The TMA store of a shared block ``buf`` that warpgroup ``cw``'s threads have just written
    (with ``stmatrix``, ``acc_store_fp8_swizzled``, ...) at (``col``, ``row``) of ``tmap_c``: the
    proxy fence, thread 0's wait until the previous store has read its block, the warpgroup's
    barrier, then thread 0 issues and commits the store (as :func:`tma_store_part`)."""
    fence_proxy_async_shared()  # generic writes -> the TMA unit
    if ct == 0:
        bulk_wait_group_read(0)  # the previous part's store has read the other block
    warpgroup_sync(cw)
    if ct == 0:
        tma_store_2d(buf, tmap_c, col, row)
        bulk_commit_group()


@inlined
def store_rows_part(regs, buf, ct, cw, out, row, col):
    """Store one 64 x 64 part of C (``regs``: warpgroup ``cw``'s packed 16-bit registers, thread
    ``ct``, as :func:`tma_store_part` takes them) into the 2-D 16-bit
    array ``out`` at [``row`` + r, ``col`` + c], clipped to ``out``'s shape, where TMA cannot
    write it: rows not 16 bytes apart (an odd number of columns), a start off 16 bytes. ``out``'s
    columns must be contiguous (its rows any stride). The part goes through the 128B-swizzled
    shared block ``buf`` (8 KiB, 1 KiB aligned; the warpgroup meets before writing it, so one
    block serves part after part); then each warp stores a row at a time, lane ``l`` its columns
    ``2l, 2l + 1`` (``st_global_b16x2``: 4 bytes where the row's pair is 4-byte aligned, else two
    2-byte stores), so a warp's stores are one contiguous run of the row. Storing the
    fragment from the registers instead puts each warp's store across 8 rows in 4-byte pieces,
    2-byte ones where the rows' addresses are odd multiples of 2 (an odd N), each behind its own
    bounds test (BENCHMARKS.md, 2026-12-04). The warpgroup meets on named barrier ``1 + cw``."""
    _rows_regs(regs)
    warpgroup_sync(cw)  # (every thread has read the block's part before)
    acc_stmatrix_swizzled(regs, buf, ct, 128, "128B")
    warpgroup_sync(cw)
    m, n = out.shape
    w = ct >> 5
    lane = ct & 31
    c = col + 2 * lane
    if c < n:
        # all 16 rows' pairs read before any is stored (one shared-memory latency, not 16); row
        # 4i + w's pair sits at the swizzled chunk (lane / 4) ^ (w + 4 (i & 1)) of its 128 bytes
        chunk = (lane & 3) << 2
        even = buf + w * 128 + ((((lane >> 2) ^ w) << 4) | chunk)
        odd = buf + (w + 4) * 128 + ((((lane >> 2) ^ (w + 4)) << 4) | chunk)
        vals = cuda.local.array(16, np.uint32)
        for j in range(8):
            vals[2 * j] = ld_shared_b32(even + j * 1024)
            vals[2 * j + 1] = ld_shared_b32(odd + j * 1024)
        step = out.strides[0]
        off = (row + w) * step + c * 2
        left = m - row - w  # (rows of this warp's from here: row 4i + w is stored where 4i < left)
        if c + 1 < n:
            for i in range(16):
                if 4 * i < left:
                    st_global_b16x2(out, off, vals[i])
                off += 4 * step
        else:
            for i in range(16):
                if 4 * i < left:
                    st_global_b16(out, off, vals[i])
                off += 4 * step


@inlined
def tma_store_part_3d(regs, buf, ct, cw, tmap_c, col, row, batch):
    """:func:`tma_store_part` into matrix ``batch`` of a 3-D map of a batch of outputs
    (``(batch, rows, columns)``, box (1, 64, 64), the 128B swizzle): rows past the matrix's end
    are not written (the next matrix's are never touched)."""
    _part_regs(regs)
    acc_stmatrix_swizzled(regs, buf, ct, 128, "128B")
    tma_store_block_3d(buf, ct, cw, tmap_c, col, row, batch)


@inlined
def tma_store_block_3d(buf, ct, cw, tmap_c, col, row, batch):
    """:func:`tma_store_block` into matrix ``batch`` of a 3-D map."""
    fence_proxy_async_shared()
    if ct == 0:
        bulk_wait_group_read(0)
    warpgroup_sync(cw)
    if ct == 0:
        tma_store_3d(buf, tmap_c, col, row, batch)
        bulk_commit_group()


_DTYPES = {"f32": np.float32, "s32": np.int32}
#: element types of acc_map's vectors: f32, f16 (read as Numba's float16), bf16 (their bits, uint16)
VECTOR_TYPES = ("f32", "f16", "bf16")


def _bf16_value():
    """``bf16(bits) -> f32``: a bf16 value, given as its 16 bits, widened to f32 (exact)."""
    if backend.active():  # the simulator: numpy
        def widen(bits):
            return np.array(np.uint32(bits) << np.uint32(16), np.uint32).view(np.float32)[()]
        return widen
    from numba.cuda import libdevice

    @inlined
    def widen(bits):
        return libdevice.int_as_float(np.int32(np.int32(bits) << np.int32(16)))

    return widen
_PACKS = {None: None, "bf16": acc_to_bf16x2, "f16": acc_to_f16x2}


_part_regs = fragment_check("tma_store_part", 16, "regs", "a 64 x 64 part's packed 16-bit pairs, as "
                             "acc_map(..., 64, pack=...) gives them; a wider part is stored 64 columns a call")
_rows_regs = fragment_check("store_rows_part", 16, "regs", "a 64 x 64 part's packed 16-bit pairs, as "
                             "acc_map(..., 64, pack=...) gives them; a wider part is stored 64 columns a call")


def _col_loads(n: int, load: str, vec: str, name: str) -> list:
    """Generated lines setting ``name.format(k)`` for ``k < n / 4`` to the per-column vector
    ``vec``'s element at column ``lc + 8 * (k // 2) + k % 2`` of a 64 x ``n`` fragment (``load``
    formats an element as the value), zero past the vector's end: without compares where the
    vector covers the fragment, with one per element where it may not."""
    cols = [k // 2 * 8 + k % 2 for k in range(n // 4)]
    lines = [f"    if len({vec}) >= {n}:"]
    lines += [f"        {name.format(k)} = {load.format(f'{vec}[lc + {c}]')}" for k, c in enumerate(cols)]
    lines.append("    else:")
    lines += [f"        {name.format(k)} = {load.format(f'{vec}[lc + {c}]')} if lc + {c} < len({vec}) else T(0)"
              for k, c in enumerate(cols)]
    return lines


def acc_map(fn, n: int, *, cols: int = 0, rows: int = 0, pairs: int = 0, nextra: int = 0, dtype: str = "f32",
            pack: str | None = None, vtype: str = "f32", loaded: bool = False):
    """A device function ``(acc, tid, row0, col0, *vectors, *pairs, *extra) -> fragment`` applying the
    device function ``fn(value, row, col, *vector_values, *pair_values, *extra)`` (a plain Python function is
    made one, as ``matmul``'s ``epilogue=`` does) to every value of a 64 x
    ``n`` accumulator fragment of thread ``tid`` (0-127 in its warpgroup) whose tile starts at
    (``row0``, ``col0``).

    ``cols`` per-column vectors, then ``rows`` per-row vectors, come first among the extra
    arguments: each is a 1-D array whose element 0 belongs to the tile's first column (row),
    such as ``bias[col0:n]``. ``fn`` receives the *value* at its column (row), converted to
    the accumulator's type, or zero past the vector's end (outside C): each is loaded once
    per thread and column (the two values of a column pair share a load), not once per
    value, and a tile that the vector covers loads without compares. ``pairs`` row pairs come
    next: per-row values in registers, ``(lo, hi)`` for the thread's rows ``lr`` and ``lr + 8`` as
    :func:`~nbwgmma.kit.acc_row_reduce` returns them (a softmax's row maximum and sum); ``fn``
    receives the value of the element's row. ``nextra`` further
    arguments (arrays, scalars) are passed through to ``fn`` as they are. ``vtype`` is the
    vectors' element type, or a tuple of one per vector (``cols`` first): "f32" or "f16" (values:
    any float, integer or boolean array but 16-bit integers, converted exactly; 16-bit integers
    too for an s32 accumulator), or "bf16" given as raw bits (a ``uint16`` or ``int16`` array:
    NumPy and Numba have no bf16), widened exactly. An array of another element type is a typing
    error at the call (bf16 bits read as f32 would be numbers in the ten thousands).

    ``dtype`` is the type the values are mapped in, and each result is converted to it: "f32"
    for an f32 accumulator, or for an s32 one whose values ``fn`` should get as f32 (an int8
    GEMM's dequantization: ``fn(v, row, col, scale) -> v * scale``, results f32, packed as
    below and stored as an f32 fragment); "s32" keeps everything integers: the vectors must hold
    integers and ``fn`` must return one (a float vector or result is a typing error: its
    fraction would be cut). With ``pack`` "bf16" or "f16" (``dtype`` "f32") adjacent results are packed into 32-bit registers as they are
    made (the ``acc_to_bf16x2`` layout, ready for ``acc_stmatrix_swizzled``), so the f32
    results never need registers of their own: the epilogue keeps at most the fragment live.

    With ``loaded=True`` each per-column argument is instead the tuple of the thread's ``n / 4``
    values that :func:`col_values` loaded (already of the accumulator's type, ``vtype`` then
    unused for them): a kernel loads a tile's vector values once, while its last wgmmas run
    (between ``Cooperative.tile_open`` and ``drain``), and maps the tile's parts with static
    slices of the tuple (part ``p`` of ``w`` columns: ``values[p * w // 4:(p + 1) * w // 4]``);
    a tuple of another length than ``n / 4`` is a typing error."""
    n = wgmma_n("acc_map", "n", n)
    if dtype not in _DTYPES:
        raise KitError(f"acc_map: dtype must be one of {sorted(_DTYPES)}; got {dtype!r}")
    if pack not in _PACKS:
        raise KitError(f"acc_map: pack must be None, 'bf16' or 'f16'; got {pack!r}")
    if pack and dtype != "f32":
        raise KitError(f"acc_map: pack={pack!r} packs f32 results and needs dtype='f32'; got dtype={dtype!r} (an s32 "
                       f"accumulator's values mapped with dtype='f32' reach fn as f32)")
    for name, count in (("cols", cols), ("rows", rows), ("pairs", pairs), ("nextra", nextra)):
        if not is_int(count) or not 0 <= count <= 8:
            raise KitError(f"acc_map: {name} must be an integer in [0, 8]; got {count!r}")
    cols, rows, pairs, nextra = int(cols), int(rows), int(pairs), int(nextra)
    vtypes = (vtype,) * (cols + rows) if isinstance(vtype, str) else tuple(vtype)
    if (isinstance(vtype, str) and vtype not in VECTOR_TYPES) or len(vtypes) != cols + rows \
            or any(v not in VECTOR_TYPES for v in vtypes):
        raise KitError(f"acc_map: vtype must be one of {VECTOR_TYPES}, or a tuple of them, one per vector "
                         f"({cols + rows}); got {vtype!r}")
    if dtype == "s32" and pairs:
        raise KitError(f"acc_map: row pairs are f32 (acc_row_reduce's results), which dtype='s32' would cut to "
                       f"integers; give dtype='f32'; got pairs={pairs!r}")
    if dtype == "s32" and "bf16" in vtypes:
        raise KitError(f"acc_map: vtype 'bf16' reads bf16 bits as floats, which dtype='s32' would cut to integers; "
                       f"give dtype='f32' (an s32 accumulator's values then reach fn as f32); got vtype={vtype!r}")
    # (a plain def or lambda, as matmul's epilogue= takes, is made a device function)
    fn = device_function("acc_map", fn, 3 + cols + rows + pairs + nextra, f"(value, row, col{', a column value' * cols}"
                         f"{', a row value' * rows}{', a row pair value' * pairs}{', an extra' * nextra}) for "
                         f"cols={cols}, rows={rows}{f', pairs={pairs}' if pairs else ''}, nextra={nextra}")
    vecs = [f"v{j}" for j in range(cols + rows)]
    extra = [f"e{j}" for j in range(nextra)]
    # The vectors and extras come as *args, counted at typing (a wrong count is a typing error
    # naming what the function takes, at your line; Numba's own said "Cannot bind" with none).
    # The thread's place from bit operations on tid: LLVM then knows every local index is
    # non-negative and drops the negative-index wrap of each vector load.
    lines = ["def mapped(acc, tid, row0, col0, *args):",
             "    check(acc)",
             "    count(args)"]
    lines += [f"    {x} = args[{i}]" for i, x in enumerate(vecs)]
    for j in range(pairs):  # a row pair: the thread's rows lr and lr + 8
        lines += [f"    p{j} = pair(args[{cols + rows + j}])", f"    p{j}_0 = T(p{j}[0])", f"    p{j}_1 = T(p{j}[1])"]
    lines += [f"    {x} = args[{cols + rows + pairs + i}]" for i, x in enumerate(extra)]
    lines += ["    lr = ((tid >> 5) << 4) + ((tid >> 2) & 7)",
              "    lc = (tid & 3) << 1",
              "    r = row0 + lr",
              "    c = col0 + lc"]
    loads = ["T(W({}))" if v == "bf16" else "T({})" for v in vtypes]  # an element, as the accumulator's type
    lines += [f"    vec{j}(v{j})" for j in range(cols if loaded else 0, cols + rows)]
    for j in range(cols if loaded else 0):  # values col_values loaded
        lines.append(f"    vcheck(v{j})")
        lines += [f"    v{j}_{k} = v{j}[{k}]" for k in range(n // 4)]
    for j in range(0 if loaded else cols):  # value pair i, i+1 sits in columns lc + 8 * (i // 4) + {0, 1}
        lines += _col_loads(n, loads[j], f"v{j}", f"v{j}_{{}}")
    for j in range(cols, cols + rows):  # rows lr and lr + 8
        lines += [f"    v{j}_{k} = {loads[j].format(f'v{j}[lr + {8 * k}]')} if lr + {8 * k} < len(v{j}) else T(0)"
                  for k in (0, 1)]
    lines.append("    return (")

    def value(i):
        dr, dc = 8 * ((i // 2) % 2), 8 * (i // 4) + i % 2
        args = [f"v{j}_{i // 4 * 2 + i % 2}" for j in range(cols)]
        args += [f"v{j}_{(i // 2) % 2}" for j in range(cols, cols + rows)]
        args += [f"p{j}_{(i // 2) % 2}" for j in range(pairs)]
        return f"T(one(fn(T(acc[{i}]), r + {dr}, c + {dc}{''.join(', ' + a for a in args + extra)})))"

    for i in range(0, n // 2, 2):
        if pack:
            lines.append(f"        P(({value(i)}, {value(i + 1)}))[0],")
        else:
            lines.append(f"        {value(i)}, {value(i + 1)},")
    lines.append("    )")
    name = f"acc_map({getattr(fn, '__name__', 'fn')}, n={n}{', loaded' if loaded else ''})"
    ns = {"fn": fn, "T": _DTYPES[dtype], "P": _PACKS[pack], "check": fragment_check(name, n // 2),
          "vcheck": fragment_check(name, n // 4, "a loaded vector", "col_values' values of these columns")
          if loaded else None,
          "W": _bf16_value() if "bf16" in vtypes else None,
          "count": count_check(name, cols, rows, nextra, pairs=pairs or None),
          "pair": fragment_check(name, 2, "a row pair", "(lo, hi) as acc_row_reduce returns it", element="number")
          if pairs else None,
          "one": number_check(name, integer=dtype == "s32")}
    for j in range(cols if loaded else 0, cols + rows):
        ns[f"vec{j}"] = vector_check(name, f"vector {j} (per {'column' if j < cols else 'row'})", vtypes[j],
                                     dtype == "s32")
    exec(compile("\n".join(lines), f"<nbwgmma.kit.{name}>", "exec"), ns)
    return inlined(ns["mapped"])


def acc_map4(fn, n: int, *, nextra: int = 0, dtype: str = "f32", pack: str | None = None):
    """A device function ``(acc, tid, row0, col0, *extra) -> fragment`` applying
    ``fn(v00, v01, v10, v11, row, col, *extra) -> (w00, w01, w10, w11)`` to each 2 x 2 group
    of a 64 x ``n`` fragment that thread ``tid`` (0-127 in its warpgroup) holds: the values at
    ``(row, col)``, ``(row, col + 1)``, ``(row + 8, col)``, ``(row + 8, col + 1)``, four
    consecutive registers (``row`` is ``row0 + 16 * (tid // 32) + (tid % 32) // 4``, ``col``
    ``col0 + 8 * j + 2 * (tid % 4)`` for group ``j``: with ``row0`` a multiple of 16 and ``col0``
    even, ``row % 16 < 8`` and ``col`` even, so ``row * ld + col`` numbers the groups apart).

    What :func:`acc_map` cannot: one computation for four values, such as a draw of four
    random numbers (:func:`~nbwgmma.kit.rand4x`: a quarter of the work of a draw a value) or a
    2 x 2 pattern. ``nextra`` arguments pass through to ``fn``; ``dtype`` and ``pack`` as in
    :func:`acc_map` (each result converted to ``dtype``; ``pack`` packs ``(w00, w01)`` and
    ``(w10, w11)``, the ``acc_to_bf16x2`` layout). ``fn`` must return a tuple of four numbers
    (a typing error at the kernel's line otherwise)."""
    n = wgmma_n("acc_map4", "n", n)
    if dtype not in _DTYPES:
        raise KitError(f"acc_map4: dtype must be one of {sorted(_DTYPES)}; got {dtype!r}")
    if pack not in _PACKS or (pack and dtype != "f32"):
        raise KitError(f"acc_map4: pack must be None, or 'bf16' or 'f16' with dtype='f32'; got pack={pack!r}, "
                       f"dtype={dtype!r}")
    if not is_int(nextra) or not 0 <= nextra <= 8:
        raise KitError(f"acc_map4: nextra must be an integer in [0, 8]; got {nextra!r}")
    nextra = int(nextra)
    fn = device_function("acc_map4", fn, 6 + nextra, f"(v00, v01, v10, v11, row, col{', an extra' * nextra}) for "
                         f"nextra={nextra}")
    extra = "".join(f", args[{j}]" for j in range(nextra))
    lines = ["def mapped(acc, tid, row0, col0, *args):", "    check(acc)", "    count(args)",
             "    r = row0 + ((tid >> 5) << 4) + ((tid >> 2) & 7)",
             "    c = col0 + ((tid & 3) << 1)"]
    for g in range(n // 8):
        lines.append(f"    g{g} = four(fn(T(acc[{4 * g}]), T(acc[{4 * g + 1}]), T(acc[{4 * g + 2}]), "
                     f"T(acc[{4 * g + 3}]), r, c + {8 * g}{extra}))")
    lines.append("    return (")
    for g in range(n // 8):
        w = [f"T(one(g{g}[{k}]))" for k in range(4)]
        lines.append(f"        P(({w[0]}, {w[1]}))[0], P(({w[2]}, {w[3]}))[0]," if pack else
                     f"        {', '.join(w)},")
    lines.append("    )")
    name = f"acc_map4({getattr(fn, '__name__', 'fn')}, n={n})"
    ns = {"fn": fn, "T": _DTYPES[dtype], "P": _PACKS[pack], "check": fragment_check(name, n // 2),
          "count": count_check(name, 0, 0, nextra),
          "four": fragment_check(name, 4, "fn's result", "the four values of its 2 x 2 group", element="number"),
          "one": number_check(name, integer=dtype == "s32")}
    exec(compile("\n".join(lines), f"<nbwgmma.kit.{name}>", "exec"), ns)
    return inlined(ns["mapped"])


def col_values(n: int, *, vtype: str = "f32", dtype: str = "f32"):
    """A device function ``(vector, tid) -> tuple`` of the ``n / 4`` values of a per-column
    vector that thread ``tid`` (0-127 in its warpgroup) needs for a 64 x ``n`` fragment whose
    first column is the vector's element 0 (``bias[col0:n]``): the elements of columns ``lc +
    8 * (k // 2) + k % 2`` (``lc = 2 * (tid % 4)``) in order, each converted to ``dtype`` (the
    type :func:`acc_map` maps in; "s32" takes integer vectors only), zero past the vector's end (no compares where it covers the
    fragment). ``vtype`` as in :func:`acc_map`. The tuple feeds ``acc_map(..., loaded=True)``:
    issued under a tile's last wgmmas, the loads complete there instead of stalling each part of
    the epilogue with the tensor cores idle (``n / 4`` registers stay live until the parts are
    mapped; issued before the main loop they spilled the library GEMM's 256 x 160 tiles)."""
    n = wgmma_n("col_values", "n", n)
    if dtype not in _DTYPES:
        raise KitError(f"col_values: dtype must be one of {sorted(_DTYPES)}; got {dtype!r}")
    if vtype not in VECTOR_TYPES:
        raise KitError(f"col_values: vtype must be one of {VECTOR_TYPES}; got {vtype!r}")
    if dtype == "s32" and vtype == "bf16":
        raise KitError("col_values: vtype 'bf16' reads bf16 bits as floats, which dtype='s32' would cut to integers; "
                       "give dtype='f32' (for acc_map(..., dtype='f32'))")
    # (each value a name of its own: a tuple display of more than 30 conditional expressions
    # becomes a list turned into a tuple, which Numba cannot type)
    lines = ["def values(v, tid):", "    vec(v)", "    lc = (tid & 3) << 1"]
    lines += _col_loads(n, "T(W({}))" if vtype == "bf16" else "T({})", "v", "x{}")
    lines.append("    return (" + "".join(f"x{k}, " for k in range(n // 4)) + ")")
    ns = {"T": _DTYPES[dtype], "W": _bf16_value() if vtype == "bf16" else None,
          "vec": vector_check(f"col_values(n={n})", "the vector", vtype, dtype == "s32")}
    exec(compile("\n".join(lines), f"<nbwgmma.kit.col_values(n={n})>", "exec"), ns)
    return inlined(ns["values"])
