"""The authoring kit on CPU: what the pipeline, the scheduler and acc_map compile to for
sm_90a (PTX, SASS after ptxas), and their typing errors. Small kernels: seconds each."""

import math
import re

import numpy as np
import pytest
from numba import cuda, types

from nbwgmma.intrinsics import acc_load, acc_store, acc_zeros, smem_addr
from nbwgmma.intrinsics.errors import NbwgmmaTypingError
from nbwgmma.errors import KitError
from nbwgmma.kit import (TileScheduler, TmaPipeline, acc_absmax, acc_col_reduce, acc_map, acc_row_reduce, col_values,
                         pair_atomic, pair_store, store_rows_part, tma_store_part, warpgroup_sync)
from nbwgmma.report import compile_report

PIPE = TmaPipeline(4, consumers=2)
NBARS = PIPE.barrier_words
SCHED = TileScheduler(128, 256, 64, group_m=8)


@cuda.jit
def _ring(out, n):
    bars = cuda.shared.array(NBARS, np.uint64)
    ring = smem_addr(bars)
    if cuda.threadIdx.x == 0:
        PIPE.init(ring)
    cuda.syncthreads()
    s, ph = 0, 0
    for i in range(n):
        if cuda.threadIdx.x == 0:
            out[i] = PIPE.producer_acquire(ring, s, ph, 49152)
        PIPE.consumer_wait(ring, s, ph)
        if cuda.threadIdx.x % 128 == 0:
            PIPE.consumer_release(ring, s)
        s, ph = PIPE.advance(s, ph)
    s, ph = PIPE.advance_by(s, ph, n)
    out[n] = s + 8 * ph


def test_the_pipeline_is_mbarrier_waits_and_arrivals_in_registers():
    rep = compile_report(_ring, (types.uint64[::1], types.int32))
    ptx = rep.ptx
    assert ptx.count("mbarrier.init.shared::cta.b64") == 2 * 4  # full[s] and empty[s]
    assert "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64" in ptx and "49152" in ptx
    assert ptx.count("mbarrier.try_wait.parity.acquire.cta.shared::cta.b64") >= 2  # producer (empty), consumer (full)
    assert "mbarrier.arrive.release.cta.shared::cta.b64" in ptx  # the release
    assert rep.sass_full.get("SYNCS.ARRIVE.TRANS64", 0) + rep.sass_full.get("SYNCS.ARRIVE.TRANS64.A1T0", 0) >= 1
    assert rep.local_memory_ops == 0 and rep.spill_bytes == 0


@cuda.jit
def _walk(out, m, n, k):
    tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = SCHED.shape(m, n, k)
    j = 0
    for u in range(SCHED.first(), nunits, SCHED.step()):
        tm, tn = SCHED.tile(u, tiles_mc, tiles_n, 0)
        out[j] = tm * 65536 + tn
        j += 1


def test_the_scheduler_compiles_to_integer_code_without_local_memory():
    rep = compile_report(_walk, (types.int32[::1], types.int32, types.int32, types.int32))
    assert "%ctaid.x" in rep.ptx and "%nctaid.x" in rep.ptx  # first() and step()
    # integer arithmetic only (the I2F/MUFU.RCP/F2I of integer division aside): no float
    # compare or arithmetic from mixed signedness
    assert not {"FADD", "FMUL", "FFMA", "FSETP", "DADD", "DMUL", "DFMA", "DSETP"} & set(rep.sass), rep.sass
    assert rep.local_memory_ops == 0


@cuda.jit(device=True, inline=True)
def _add_bias(v, row, col, b):
    return v + b


_BIASED = acc_map(_add_bias, 64, cols=1)


@cuda.jit
def _bias_kernel(out, bias, n):
    t = cuda.threadIdx.x
    acc = _BIASED(acc_zeros("f32.bf16.bf16", 64), t, 0, 0, bias[0:n])
    acc_store(acc, "f32.bf16.bf16", out, t, 0, 0)


def test_acc_map_loads_a_column_vector_once_per_column_pair():
    rep = compile_report(_bias_kernel, (types.float32[:, ::1], types.float32[::1], types.int32))
    # 64 columns: a thread's 16 columns, once where the vector covers the tile and once
    # with a compare where it may not (the two paths of the generated code)
    assert rep.sass.get("LDG") == 2 * 16, rep.sass
    assert rep.local_memory_ops == 0 and rep.spill_bytes == 0


@cuda.jit
def _short_fragment(out, bias, n):
    t = cuda.threadIdx.x
    acc = _BIASED(acc_zeros("f32.bf16.bf16", 32), t, 0, 0, bias[0:n])  # 16 values, not 32
    acc_store(acc, "f32.bf16.bf16", out, t, 0, 0)


@cuda.jit
def _no_vector(out, bias, n):
    t = cuda.threadIdx.x
    acc = _BIASED(acc_zeros("f32.bf16.bf16", 64), t, 0, 0)  # the per-column vector left out
    acc_store(acc, "f32.bf16.bf16", out, t, 0, 0)


def test_a_mapped_function_given_the_wrong_vectors_is_a_typing_error_at_the_call():
    """acc_map's function counts what follows (acc, tid, row0, col0) at typing: a vector left
    out names what it takes, at the kernel's line (Numba said "Cannot bind" with no line)."""
    import inspect

    with pytest.raises(NbwgmmaTypingError, match=r"acc_map\(_add_bias, n=64\): after \(acc, tid, row0, col0\) it takes 1 "
                                                 r"per-column vector\(s\), 0 per-row vector\(s\) and 0 extra "
                                                 r"argument\(s\) .*1 in all; got 0") as exc:
        compile_report(_no_vector, (types.float32[:, ::1], types.float32[::1], types.int32))
    src, first = inspect.getsourcelines(_no_vector.py_func)
    line = first + next(i for i, s in enumerate(src) if "_BIASED(" in s)
    assert str(exc.value).startswith(f"{__file__}:{line}: acc_map(_add_bias, n=64)"), str(exc.value)


def test_a_fragment_of_the_wrong_length_is_a_typing_error_naming_acc_map():
    """The error leads with the kernel's line that called acc_map (not the generated function's)."""
    import inspect

    with pytest.raises(NbwgmmaTypingError, match=r"acc_map\(_add_bias, n=64\): the fragment must be a tuple of 32 "
                                                 r"values .*got a tuple of 16") as exc:
        compile_report(_short_fragment, (types.float32[:, ::1], types.float32[::1], types.int32))
    src, first = inspect.getsourcelines(_short_fragment.py_func)
    line = first + next(i for i, s in enumerate(src) if "_BIASED(" in s)
    head, source = str(exc.value).splitlines()[:2]
    assert head.startswith(f"{__file__}:{line}: acc_map(_add_bias, n=64)"), str(exc.value)
    assert "_BIASED(" in source


@cuda.jit
def _bias_2d(out, bias, n):
    t = cuda.threadIdx.x
    acc = _BIASED(acc_zeros("f32.bf16.bf16", 64), t, 0, 0, bias[0:1, 0:n])  # a (1, n) slice, not a vector
    acc_store(acc, "f32.bf16.bf16", out, t, 0, 0)


def test_a_vector_that_is_not_1d_is_a_typing_error_at_the_call():
    import inspect

    with pytest.raises(NbwgmmaTypingError, match=r"acc_map\(_add_bias, n=64\): vector 0 \(per column\) must be a "
                                                 r"1-D array .*got array\(float32, 2d, A\)") as exc:
        compile_report(_bias_2d, (types.float32[:, ::1], types.float32[:, ::1], types.int32))
    src, first = inspect.getsourcelines(_bias_2d.py_func)
    line = first + next(i for i, s in enumerate(src) if "_BIASED(" in s)
    assert str(exc.value).startswith(f"{__file__}:{line}: acc_map(_add_bias, n=64)"), str(exc.value)


def _line_of(kernel, marker):
    """The file line of ``kernel``'s source line holding ``marker``."""
    import inspect

    src, first = inspect.getsourcelines(kernel.py_func)
    return first + next(i for i, s in enumerate(src) if marker in s)


_BIASED_BF16 = acc_map(_add_bias, 64, cols=1, vtype="bf16")
_VALUES_F16 = col_values(64, vtype="f16")


@cuda.jit
def _bias_bits_as_f32(out, bias, n):
    t = cuda.threadIdx.x
    acc = _BIASED(acc_zeros("f32.bf16.bf16", 64), t, 0, 0, bias[0:n])  # uint16 bf16 bits, read as f32
    acc_store(acc, "f32.bf16.bf16", out, t, 0, 0)


@cuda.jit
def _bias_f32_as_bits(out, bias, n):
    t = cuda.threadIdx.x
    acc = _BIASED_BF16(acc_zeros("f32.bf16.bf16", 64), t, 0, 0, bias[0:n])  # f32 values, read as bf16 bits
    acc_store(acc, "f32.bf16.bf16", out, t, 0, 0)


@cuda.jit
def _values_bits_as_f16(out, bias, n):
    vals = _VALUES_F16(bias[0:n], cuda.threadIdx.x)  # uint16 bf16 bits, read as f16
    out[0, 0] = vals[0]


@pytest.mark.parametrize("kernel, vec, message", [
    (_bias_bits_as_f32, types.uint16, r"acc_map\(_add_bias, n=64\): vector 0 \(per column\) is read as vtype 'f32' "
                                      r"\(an array of float16, float32, .*\); got array\(uint16, 1d, C\) \(bf16 bits need "
                                      r"vtype='bf16'\)"),
    (_bias_f32_as_bits, types.float32, r"acc_map\(_add_bias, n=64\): vector 0 \(per column\) is read as vtype "
                                       r"'bf16' \(an array of uint16, int16\); got array\(float32, 1d, C\) "
                                       r"\(float32 values need vtype='f32'\)"),
    (_values_bits_as_f16, types.uint16, r"col_values\(n=64\): the vector is read as vtype 'f16' \(an array of "
                                        r"float16, .*\); got array\(uint16, 1d, C\) \(bf16 bits need vtype='bf16'\)"),
])
def test_a_vector_of_another_element_type_than_its_vtype_is_a_typing_error_at_the_call(kernel, vec, message):
    """A uint16 array of bf16 bits read as the default vtype f32 added 16256.0 for 1.0, an f32
    array read as bf16 bits 9e-41: the element type is checked against the vtype."""
    with pytest.raises(NbwgmmaTypingError, match=message) as exc:
        compile_report(kernel, (types.float32[:, ::1], vec[::1], types.int32))
    line = _line_of(kernel, "bias[0:n]")
    assert str(exc.value).startswith(f"{__file__}:{line}: "), str(exc.value)


def test_16_bit_integer_vectors_are_values_for_an_s32_accumulator():
    """int16 zero-points of an int8 GEMM: no vtype took them (16-bit integers read as f32 are most
    likely bf16 bits, but an s32 accumulator's vectors are integers)."""
    mapped = acc_map(_add_bias, 64, cols=1, dtype="s32")

    @cuda.jit
    def kernel(out, bias, n):
        t = cuda.threadIdx.x
        acc_store(mapped(acc_zeros("s32.s8.s8", 64), t, 0, 0, bias[0:n]), "s32.s8.s8", out, t, 0, 0)

    for element in (types.int16, types.uint16, types.int8):
        compile_report(kernel, (types.int32[:, ::1], element[::1], types.int32))


@cuda.jit(device=True)
def _scaled(v, row, col, s):
    return v * s


@cuda.jit(device=True)
def _half(v, row, col):
    return v * 0.5


def test_an_s32_map_refuses_float_vectors_and_results():
    """From a newcomer's W8A8 trial: acc_map(dtype="s32") with an f32 scale vector gave 0.5 as 0
    and cut the f32 product back to an integer, no error. Floats are refused there now (the
    dequantizing route is dtype="f32": tests/sim_kit_cases.py), and so is a float result."""
    mapped = acc_map(_scaled, 64, cols=1, dtype="s32")

    @cuda.jit
    def kernel(out, scale, n):
        t = cuda.threadIdx.x
        acc_store(mapped(acc_zeros("s32.s8.s8", 64), t, 0, 0, scale[0:n]), "s32.s8.s8", out, t, 0, 0)

    with pytest.raises(NbwgmmaTypingError, match=r"vector 0 \(per column\) must hold integers for an s32 accumulator"
                                                 r".*got array\(float32, 1d, C\)\. To map an s32 accumulator's values as "
                                                 r"f32 \(dequantizing\), give dtype='f32'") as exc:
        compile_report(kernel, (types.int32[:, ::1], types.float32[::1], types.int32))
    assert str(exc.value).startswith(f"{__file__}:{_line_of(kernel, 'scale[0:n]')}: "), str(exc.value)
    compile_report(kernel, (types.int32[:, ::1], types.int32[::1], types.int32))  # integer scales: integers

    halved = acc_map(_half, 64, dtype="s32")

    @cuda.jit
    def float_result(out):
        t = cuda.threadIdx.x
        acc_store(halved(acc_zeros("s32.s8.s8", 64), t, 0, 0), "s32.s8.s8", out, t, 0, 0)

    with pytest.raises(NbwgmmaTypingError, match=r"fn returns float64, but dtype='s32' keeps the results integers"):
        compile_report(float_result, (types.int32[:, ::1],))
    with pytest.raises(KitError, match=r"pack='bf16' packs f32 results and needs dtype='f32'; got dtype='s32'"):
        acc_map(_scaled, 64, cols=1, dtype="s32", pack="bf16")
    with pytest.raises(KitError, match=r"vtype 'bf16' reads bf16 bits as floats, which dtype='s32' would cut"):
        acc_map(_scaled, 64, cols=1, dtype="s32", vtype="bf16")


def test_a_plain_python_function_given_to_acc_map_is_made_a_device_function():
    """Compiled, a plain function failed deep in the kernel's typing ("Untyped global name 'fn'"),
    where the simulator ran it and matmul's epilogue= takes one: acc_map makes it a device
    function too."""
    doubled = acc_map(lambda v, row, col: 2 * v, 64)

    @cuda.jit
    def kernel(out):
        t = cuda.threadIdx.x
        acc_store(doubled(acc_zeros("f32.bf16.bf16", 64), t, 0, 0), "f32.bf16.bf16", out, t, 0, 0)

    compile_report(kernel, (types.float32[:, ::1],))


def test_amax_flush_takes_an_f32_amax_only():
    """From a newcomer's fp8 trial: an int32 amax compiled (F2I and an integer atomic: 38.4 became
    38), float64 and float16 too, though the docstring says f32."""
    from nbwgmma.kit import amax_flush

    @cuda.jit
    def kernel(amax, biggest_out):
        biggest = cuda.shared.array(4, np.float32)
        amax_flush(amax, biggest, cuda.threadIdx.x)

    for bad in (types.int32, types.float64, types.float16):
        with pytest.raises(NbwgmmaTypingError, match=rf"amax_flush: amax must be a 1-D float32 array .*got "
                                                     rf"array\({bad}, 1d, C\)") as exc:
            compile_report(kernel, (bad[::1], types.float32[::1]))
        assert str(exc.value).startswith(f"{__file__}:{_line_of(kernel, 'amax_flush(amax')}: "), str(exc.value)
    compile_report(kernel, (types.float32[::1], types.float32[::1]))


def test_kit_blocks_take_numpy_integers():
    """As TmaPipeline and TileScheduler do: a Cooperative of NumPy sizes gave np.int64 stage bytes,
    which tile_producer, acc_absmax, acc_map, col_values, StreamFixup and ClusterSplitK refused."""
    from nbwgmma.kit import ClusterSplitK, Cooperative, StreamFixup, tile_producer

    bm, bn = np.array([128, 128])
    pipe = TmaPipeline(np.int64(4), consumers=np.int32(2))
    coop = Cooperative("f32.bf16.bf16", pipe, bm, bn)
    assert type(coop.stage_bytes) is int
    tile_producer(pipe, TileScheduler(bm, bn, np.int64(64)), coop.stage_bytes, lambda *a: None)
    acc_absmax(np.int64(64)), acc_map(_add_bias, np.int64(64), cols=np.int64(1)), col_values(np.int32(128))
    StreamFixup("f32.bf16.bf16", np.int64(128)), ClusterSplitK(np.int64(128))


def test_the_element_types_each_vtype_reads_compile():
    """bf16 bits as uint16 or int16; f32 and f16 values of any float, integer or boolean array but
    16-bit integers (a float16 bias with the default vtype, int8 offsets: converted exactly)."""
    for vtype, element in (("bf16", types.int16), ("f16", types.float16), ("f32", types.float64),
                           ("f32", types.float16), ("f16", types.float32), ("f32", types.int8), ("f32", types.uint8),
                           ("f32", types.boolean)):
        mapped = acc_map(_add_bias, 64, cols=1, vtype=vtype)

        @cuda.jit
        def kernel(out, bias, n):
            t = cuda.threadIdx.x
            acc_store(mapped(acc_zeros("f32.bf16.bf16", 64), t, 0, 0, bias[0:n]), "f32.bf16.bf16", out, t, 0, 0)

        compile_report(kernel, (types.float32[:, ::1], element[::1], types.int32))


@cuda.jit(device=True, inline=True)
def _same(v, row, col):
    return v


_PACKED128 = acc_map(_same, 128, pack="bf16")


@cuda.jit
def _store_wide_part(tmap, buf):
    t = cuda.threadIdx.x
    regs = _PACKED128(acc_zeros("f32.bf16.bf16", 128), t, 0, 0)
    tma_store_part(regs, buf, t, 0, tmap, 0, 0)  # a 64 x 128 part's 32 registers into a 64 x 64 block


def test_tma_store_part_of_a_wider_part_is_a_typing_error_naming_the_count():
    """A 64 x 128 part's 32 packed registers went through the 64 x 64 block: stmatrix wrote past
    it and half of C was never stored."""
    with pytest.raises(NbwgmmaTypingError, match=r"tma_store_part: regs must be a tuple of 16 values \(a 64 x 64 "
                                                 r"part's packed 16-bit pairs.*got a tuple of 32") as exc:
        compile_report(_store_wide_part, (types.uint64, types.uint32))
    line = _line_of(_store_wide_part, "tma_store_part(")
    assert str(exc.value).startswith(f"{__file__}:{line}: "), str(exc.value)


@cuda.jit
def _store_rows_wide(out, buf):
    t = cuda.threadIdx.x
    regs = _PACKED128(acc_zeros("f32.bf16.bf16", 128), t, 0, 0)
    store_rows_part(regs, buf, t, 0, out, 0, 0)  # a 64 x 128 part's 32 registers into a 64 x 64 block


@cuda.jit
def _store_rows(out, buf):
    t = cuda.threadIdx.x
    regs = _PACKED64(acc_zeros("f32.bf16.bf16", 64), t, 0, 0)
    store_rows_part(regs, buf, t, 0, out, 64, 128)


_PACKED64 = acc_map(_same, 64, pack="bf16")


def test_store_rows_part_compiles_to_row_stores_and_refuses_a_wider_part():
    """store_rows_part: 4 stmatrix into the block, then 16 rows a warp, each a 4-byte shared load
    and a 4-byte global store where the row's pair is aligned (two 2-byte ones otherwise, a 2-byte
    one at a row's last odd column); no local memory. A 64 x 128 part is a typing error at the
    user's line naming the count."""
    rep = compile_report(_store_rows, (types.uint16[:, :], types.uint32), launch_bounds=128)
    assert rep.sass["STSM"] == 4 and rep.sass_full.get("LDS", 0) == 16 and rep.local_memory_ops == 0
    assert rep.sass_full.get("STG.E", 0) == 16 and rep.sass_full.get("STG.E.U16", 0) == 48
    assert rep.sass.get("BAR", 0) == 2
    with pytest.raises(NbwgmmaTypingError, match=r"store_rows_part: regs must be a tuple of 16 values.*got a tuple "
                                                 r"of 32") as exc:
        compile_report(_store_rows_wide, (types.uint16[:, :], types.uint32))
    assert str(exc.value).startswith(f"{__file__}:{_line_of(_store_rows_wide, 'store_rows_part(')}: ")


@pytest.mark.parametrize("width", [0, 12, 264, 64.0, True])
def test_acc_absmax_of_a_width_that_is_not_a_wgmma_n_is_a_kit_error(width):
    with pytest.raises(KitError, match=rf"acc_absmax: width must be a wgmma N.*got {width!r}"):
        acc_absmax(width)


_LARGEST64 = acc_absmax(64)


@cuda.jit
def _absmax_wide(out, n):
    out[0] = _LARGEST64(acc_zeros("f32.bf16.bf16", 128), cuda.threadIdx.x, 0, 0, n, n)  # 64 values, not 32


@cuda.jit
def _absmax_short(out, n):
    out[0] = _LARGEST64(acc_zeros("f32.bf16.bf16", 32), cuda.threadIdx.x, 0, 0, n, n)  # 16 values, not 32


@pytest.mark.parametrize("kernel, got", [(_absmax_wide, 64), (_absmax_short, 16)])
def test_acc_absmax_of_a_fragment_of_another_width_is_a_typing_error_at_the_call(kernel, got):
    """A 128-column fragment silently gave its first half's maximum; a short one a raw "tuple index
    out of range"."""
    with pytest.raises(NbwgmmaTypingError, match=rf"acc_absmax\(64\): v must be a tuple of 32 values .*got a tuple "
                                                 rf"of {got}") as exc:
        compile_report(kernel, (types.float32[::1], types.int32))
    assert str(exc.value).startswith(f"{__file__}:{_line_of(kernel, '_LARGEST64(')}: "), str(exc.value)


@cuda.jit(device=True, inline=True)
def _returns_nothing(v, row, col):
    v + np.float32(1.0)


@cuda.jit(device=True, inline=True)
def _returns_pair(v, row, col):
    return v, v


_NOTHING = acc_map(_returns_nothing, 64)
_PAIR = acc_map(_returns_pair, 64)


@cuda.jit
def _map_nothing(out):
    t = cuda.threadIdx.x
    acc_store(_NOTHING(acc_zeros("f32.bf16.bf16", 64), t, 0, 0), "f32.bf16.bf16", out, t, 0, 0)


@cuda.jit
def _map_pair(out):
    t = cuda.threadIdx.x
    acc_store(_PAIR(acc_zeros("f32.bf16.bf16", 64), t, 0, 0), "f32.bf16.bf16", out, t, 0, 0)


@pytest.mark.parametrize("kernel, name, got", [(_map_nothing, "_returns_nothing", "none"),
                                               (_map_pair, "_returns_pair", r"UniTuple\(float32 x 2\)")])
def test_a_mapped_function_that_returns_no_number_is_a_typing_error_at_the_call(kernel, name, got):
    """Numba's error named no line (and the simulator gave NaN everywhere)."""
    with pytest.raises(NbwgmmaTypingError, match=rf"acc_map\({name}, n=64\): fn must return one number; got {got}") \
            as exc:
        compile_report(kernel, (types.float32[:, ::1],))
    assert str(exc.value).startswith(f"{__file__}:{_line_of(kernel, 'acc_store(')}: "), str(exc.value)


@pytest.mark.parametrize("nunits, ctas", [(1, 1), (7, 2), (264, 132), (300, 132), (1000, 132), (17, 4)])
def test_wave_order_is_a_bijection_running_neighbours_together(nunits, ctas):
    from nbwgmma.kit import wave_order

    order = wave_order.py_func
    tiles = [order(u, nunits, ctas) for u in range(nunits)]
    assert sorted(tiles) == list(range(nunits))
    for p in range(ctas):  # every consumer's tiles and every CTA's pairs increase
        for cw in (0, 1):
            mine = [order(u, nunits, ctas) for u in range(2 * p + cw, nunits, 2 * ctas)]
            assert mine == sorted(mine)
        pairs = [order(u, nunits, ctas) for q in range(p, (nunits + 1) // 2, ctas)
                 for u in range(2 * q, min(2 * q + 2, nunits))]
        assert pairs == sorted(pairs)
    first = sorted(order(u, nunits, ctas) for u in range(0, min(nunits, 2 * ctas), 2))
    assert first == list(range(len(first)))  # the first consumers of the first wave: tiles 0, 1, 2 ...


def _grouped_order(t, tiles_m, tiles_n, group_m):
    """The walk tile_order gave before a group took at most tiles_m rows (Python integers)."""
    g = t // (group_m * tiles_n)
    rows = min(tiles_m - g * group_m, group_m)
    r = t - g * group_m * tiles_n
    return g * group_m + r % rows, r // rows


def test_tile_order_of_a_group_past_m_walks_as_one_group_of_m_rows():
    """A group's tiles, group_m * tiles_n, are held at 2^32 - 1: the same walk as before for every
    group_m, and a group_m whose product with tiles_n passes 32 bits (it wrapped: a division by
    zero at 2^32) walks as one group of tiles_m rows, every tile once."""
    from nbwgmma.kit import tile_order

    order = tile_order.py_func
    for tiles_m in range(1, 10):
        for tiles_n in range(1, 6):
            n = tiles_m * tiles_n
            for group_m in range(1, 13):
                assert [order(t, tiles_m, tiles_n, group_m) for t in range(n)] == \
                    [_grouped_order(t, tiles_m, tiles_n, group_m) for t in range(n)], (tiles_m, tiles_n, group_m)
            one = [order(t, tiles_m, tiles_n, tiles_m) for t in range(n)]
            assert sorted(one) == sorted((i, j) for i in range(tiles_m) for j in range(tiles_n))
            for group_m in (2 ** 30, 2 ** 31 - 1):  # (group_m * tiles_n wrapped in 32 bits)
                assert [order(t, tiles_m, tiles_n, group_m) for t in range(n)] == one
    # a group_m past int64 compiles (the kernel's constant is clamped to 2^31 - 1, past any tiles_m)
    sched = TileScheduler(128, 128, 64, group_m=10 ** 30)

    @cuda.jit
    def walk(out, u):
        out[0], out[1] = sched.tile(u[0], u[1], u[2], 0)

    rep = compile_report(walk, (types.int32[::1], types.int32[::1]))
    assert rep.local_memory_ops == 0 and sched.group_m == 10 ** 30


def test_pipeline_counts_its_arrivals():
    """``producers`` and ``consumers`` are the arrivals a fill and a release take (threads that
    copy into a slot themselves, threads that read it themselves); out of range is refused."""
    from nbwgmma.kit import TmaPipeline

    pipe = TmaPipeline(6, consumers=256, producers=33)
    assert (pipe.stages, pipe.consumers, pipe.producers) == (6, 256, 33) and "producers=33" in repr(pipe)
    assert "producers" not in repr(TmaPipeline(4, consumers=2))
    for kw, name in ((dict(producers=0), "producers"), (dict(producers=2000), "producers"),
                     (dict(consumers=0), "consumers"), (dict(consumers=True), "consumers")):
        args = dict(consumers=2)
        args.update(kw)
        with pytest.raises(ValueError, match=f"{name} must be an integer in"):
            TmaPipeline(4, **args)


def test_tile_producer_checks_its_blocks():
    from nbwgmma.kit import TileScheduler, TmaPipeline, tile_producer

    pipe, sched = TmaPipeline(4, consumers=2), TileScheduler(128, 256, 64)

    def load(slot, full, kb, tm, tn, args):
        pass

    assert callable(tile_producer(pipe, sched, 48 * 1024, load, pairs=True))
    with pytest.raises(ValueError, match="stage_bytes must be a positive multiple of 1024"):
        tile_producer(pipe, sched, 1000, load)
    with pytest.raises(ValueError, match="pipe must be a TmaPipeline"):
        tile_producer(sched, pipe, 49152, load)
    # load's arity is checked at the call, not in the kernel's typing
    with pytest.raises(KitError, match=r"tile_producer: load load\(slot, full, kb, tm, tn, args\) must take 7 "
                                       r"arguments \(slot, full, kb, tm, tn, args, batch\)"):
        tile_producer(pipe, sched, 49152, load, batched=True)
    with pytest.raises(KitError, match=r"tile_producer: load <lambda>\(slot, full\) must take 6 arguments"):
        tile_producer(pipe, sched, 49152, lambda slot, full: None)
    # the consumers' Cooperative in place of stage_bytes: its stage, and its k-block checked against the walk's
    from nbwgmma.kit import Cooperative
    coop = Cooperative("f32.bf16.bf16", pipe, 128, 128)
    assert callable(tile_producer(pipe, TileScheduler(128, 128, coop.bk), coop, load))
    with pytest.raises(KitError, match=r"tile_producer: the scheduler's k-block \(128\) must be the consumers' \(64: "
                                       r"Cooperative\.bk\).*TileScheduler\(128x128x128"):
        tile_producer(pipe, TileScheduler(128, 128, 128), coop, load)


def test_short_boxes_take_the_rows_m_has():
    """box_rows: M rounded up to a swizzle atom of 8 rows below a tile's rows, the tile's rows
    from there; tile_producer's stage_tx must be a device function, and a batched walk takes
    none; a producer arming each stage with run-time bytes and consumers clearing the rows past
    the box compile to 16-byte shared stores, the async-proxy fence and no local memory."""
    from nbwgmma.intrinsics import tma_load_2d
    from nbwgmma.kit import box_rows, box_rows_device, clear_rows, tile_producer

    assert [box_rows(m, 128) for m in (1, 8, 9, 16, 64, 100, 127, 128, 5000)] == [8, 8, 16, 16, 64, 104, 128, 128, 128]
    assert box_rows(200, 256) == 200 and box_rows(256, 256) == 256
    pipe, sched = TmaPipeline(4, consumers=1), TileScheduler(128, 128, 128)
    STAGE, STAGES = 32 * 1024, 4

    @cuda.jit(device=True, inline=True)
    def load(slot, full, kb, tm, tn, args):
        tma_load_2d(slot, args[0], full, kb * 128, tm * 128)
        tma_load_2d(slot + 16384, args[1], full, kb * 128, tn * 128)

    @cuda.jit(device=True, inline=True)
    def stage_tx(args):
        return args[2]

    with pytest.raises(ValueError, match="stage_tx must be a device function"):
        tile_producer(pipe, sched, STAGE, load, stage_tx=3)
    with pytest.raises(ValueError, match="a batched walk takes none"):
        tile_producer(pipe, sched, STAGE, load, batched=True, stage_tx=stage_tx)
    produce = tile_producer(pipe, sched, STAGE, load, stage_tx=stage_tx)

    @cuda.jit
    def kernel(tmap_a, tmap_b, m, n, k):
        base, ring = pipe.setup()
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        ar = box_rows_device(m, 128)
        if ar < 128:
            clear_rows(base, STAGE, STAGES, 128, ar, 128, cuda.threadIdx.x, 256)
            cuda.syncthreads()
        if cuda.threadIdx.x == 0:
            produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, (tmap_a, tmap_b, STAGE - (128 - ar) * 128))

    rep = compile_report(kernel, (types.uint64, types.uint64, types.int32, types.int32, types.int32))
    assert "STS.128" in rep.sass_text and "FENCE.VIEW.ASYNC.S" in rep.sass_text, rep.sass
    assert rep.local_memory_ops == 0, rep


def test_epilogue_warps_check_their_arguments():
    from nbwgmma.kit import EpilogueWarps, activation

    relu = activation("relu")
    ew = EpilogueWarps(relu, 128, 256, "f16")
    assert ew.tile_bytes == 64 * 1024 and hasattr(ew, "drain_to")
    for args, kw, what in [((relu, 128, 256, "f32"), {}, "dtype must be"), ((relu, 96, 256), {}, "bm must be"),
                           ((relu, 128, 320), {}, "bn must be"), ((relu, 128, 256), {"consumers": 1}, "consumers"),
                           ((3, 128, 256), {}, "fn must be")]:
        with pytest.raises(ValueError, match=what):
            EpilogueWarps(*args, **kw)
    # sizes that are not integers: a string gave Python's "not all arguments converted", a float
    # was taken (a tile of 32768.0 bytes, 2.0 consumers)
    for args, kw, what in [((relu, "128", 256), {}, r"bm must be 64, 128, 192 or 256 .*got '128'"),
                           ((relu, 128.0, 256), {}, r"bm must be .*got 128\.0"),
                           ((relu, 128, 256.0), {}, r"bn must be a multiple of 64 up to 256; got 256\.0"),
                           ((relu, 128, 256), {"consumers": 2.0}, r"consumers must be bm / 64 = 2 .*got 2\.0")]:
        with pytest.raises(KitError, match=what):
            EpilogueWarps(*args, **kw)
    ew = EpilogueWarps(None, np.int64(128), np.int64(128), consumers=np.int32(2))
    assert type(ew.bm) is int and type(ew.tile_bytes) is int and type(ew.consumers) is int


_WG = 7


@cuda.jit
def _sync_a_fifth_warpgroup(out, buf):
    warpgroup_sync(4)


@cuda.jit
def _sync_a_global_past_3(out, buf):
    warpgroup_sync(g=_WG)


@cuda.jit
def _sync_in_range_and_at_run_time(out, buf):
    h = 9  # typed first as the constant 9, then as a value known at run time: no error
    for i in range(3):
        h = i
    warpgroup_sync(h)
    warpgroup_sync(3)
    warpgroup_sync(np.int32(buf[0]))


def test_warpgroup_sync_of_a_constant_past_3_is_a_typing_error_at_the_call():
    """It synced warpgroup 3's barrier (named barrier 4) for any other value."""
    for kernel, got in ((_sync_a_fifth_warpgroup, 4), (_sync_a_global_past_3, 7)):
        with pytest.raises(NbwgmmaTypingError, match=rf"kit\.warpgroup_sync: g must be an integer in \[0, 3\] "
                                                     rf"\(the warpgroup whose named barrier 1 \+ g it syncs\); got {got}"
                           ) as exc:
            compile_report(kernel, (types.float32[::1], types.uint16[::1]))
        assert str(exc.value).startswith(f"{__file__}:{_line_of(kernel, 'warpgroup_sync(')}: "), str(exc.value)
    rep = compile_report(_sync_in_range_and_at_run_time, (types.float32[::1], types.uint16[::1]))
    assert rep.sass.get("BAR", 0) >= 3


def test_cooperative_blocks_and_stream_fixup_rows_apart_are_integers():
    """``Cooperative(blocks=1.0)`` was taken; ``StreamFixup(rows_apart=...)`` was never checked
    (it guards the rows of the second fragment that are parked and gathered)."""
    from nbwgmma.kit import Cooperative, StreamFixup

    for blocks in (1.0, "1", True):
        with pytest.raises(KitError, match=rf"Cooperative: blocks .* must be 1, or 2 .*got blocks={blocks!r}"):
            Cooperative("f32.bf16.bf16", TmaPipeline(3, 2), 128, 128, blocks=blocks)
    assert Cooperative("f32.bf16.bf16", TmaPipeline(3, 1), 128, 128, blocks=np.int64(2)).blocks == 2
    for apart in (-5, 0, 100, "x", 128.0, None):
        with pytest.raises(KitError, match=rf"StreamFixup: rows_apart .* must be a positive multiple of 64 .*; got "
                                           rf"{re.escape(repr(apart))}$"):
            StreamFixup("f32.bf16.bf16", 128, fragments=2, rows_apart=apart)
    for apart in (64, 128, np.int64(192)):
        assert StreamFixup("f32.bf16.bf16", 128, fragments=2, rows_apart=apart).rows_apart == apart


def test_stream_k_shares_store_every_tile_once_with_its_parts_in_k_order():
    """A model of the GEMM's stream-K walk and reduction over many (tiles, k-blocks, CTAs), with
    the kit's own share and owner functions: every tile is stored exactly once, from its whole
    k-range or from the parts of the CTAs sharing it (K order, each part once), and no
    workspace slot (2 per CTA: the share's first tile, its last) is written twice."""
    from nbwgmma.kit import stream_owner, stream_range, stream_segment

    share, owner, segment = stream_range.py_func, stream_owner.py_func, stream_segment.py_func
    for tiles in range(1, 13):
        for kblocks in range(1, 9):
            total = tiles * kblocks
            for ctas in range(1, total + 1):
                stored, slots, parts = {}, {}, {}
                for c in range(ctas):
                    g0, g1 = share(c, ctas, total)
                    assert g1 > g0  # every CTA has work (the host keeps ctas <= total)
                    g = g0
                    while g < g1:
                        t, kb0, kb1 = segment(g, g1, kblocks)
                        if kb0 == 0 and kb1 == kblocks:
                            assert t not in stored
                            stored[t] = [(0, kblocks)]
                        else:
                            slot = 2 * c + (0 if g == g0 else 1)
                            assert slot not in slots
                            slots[slot] = (t, kb0, kb1)
                            parts.setdefault(t, 0)
                            parts[t] += 1
                        g += kb1 - kb0
                for t, n in parts.items():  # the last to count sums every sharer's slot in K order
                    c0, c1 = owner(t * kblocks, ctas, total), owner((t + 1) * kblocks - 1, ctas, total)
                    assert n == c1 - c0 + 1 and t not in stored
                    ranges = [slots[2 * o + (0 if share(o, ctas, total)[0] // kblocks == t else 1)] for o in
                              range(c0, c1 + 1)]
                    assert all(r[0] == t for r in ranges)
                    assert [r[1] for r in ranges] == [0] + [r[2] for r in ranges[:-1]] and ranges[-1][2] == kblocks
                    stored[t] = [r[1:] for r in ranges]
                assert sorted(stored) == list(range(tiles))


_LOADED = acc_map(_add_bias, 64, cols=1, loaded=True)
_VALUES128 = col_values(128)


@cuda.jit
def _whole_tile_values(out, bias, n):
    t = cuda.threadIdx.x
    vals = _VALUES128(bias[0:n], t)  # a 128-column tile's 32 values, given whole to a 64-column part
    acc = _LOADED(acc_zeros("f32.bf16.bf16", 64), t, 0, 0, vals)
    acc_store(acc, "f32.bf16.bf16", out, t, 0, 0)


def test_loaded_values_of_the_wrong_length_are_a_typing_error():
    """acc_map(loaded=True) takes exactly the part's n / 4 values: a whole tile's tuple where a
    slice belongs is refused at typing, naming acc_map."""
    with pytest.raises(NbwgmmaTypingError, match=r"acc_map\(_add_bias, n=64, loaded\): a loaded vector must be a "
                                                 r"tuple of 16 values .*got a tuple of 32"):
        compile_report(_whole_tile_values, (types.float32[:, ::1], types.float32[::1], types.int32))


MC_PIPE = TmaPipeline(4, consumers=2, cluster=2)


def _mc_kernel(coop):
    @cuda.jit
    def kernel(tmap_a, tmap_b, out):
        base, ring = MC_PIPE.setup()
        if cuda.threadIdx.x == 0:
            full = MC_PIPE.producer_acquire(ring, 0, 0, coop.stage_bytes)
            coop.load_tile(base, full, tmap_a, tmap_b, 3, 5, 7)
        MC_PIPE.consumer_wait(ring, 0, 0)
        out[0] = 1
        MC_PIPE.teardown()
    return kernel


@pytest.mark.parametrize("multicast", ["A", "B"])
def test_a_cluster_multicasts_one_operand_share_and_loads_the_other_whole(multicast):
    """``Cooperative(..., multicast=)``: each CTA of a cluster of two loads half of the shared
    operand's rows (``box_a`` / ``box_b``) and multicasts them, and the other operand whole."""
    from nbwgmma.kit import Cooperative

    coop = Cooperative("f32.bf16.bf16", MC_PIPE, 256, 128, blocks=2, multicast=multicast)
    half_a = multicast == "A"
    assert coop.box_a == ((128 if half_a else 256), 64) and coop.box_b == ((128 if half_a else 64), 64)
    assert (coop.a_share_bytes, coop.b_share_bytes) == ((16384, 16384) if half_a else (32768, 8192))
    rep = compile_report(_mc_kernel(coop), (types.uint64, types.uint64, types.int32[::1]))
    ptx = rep.ptx
    assert ptx.count(".multicast::cluster") == 1 and ptx.count("cp.async.bulk.tensor.2d") == 2
    assert "%cluster_ctarank" in ptx and "barrier.cluster.arrive" in ptx  # the share's rank; teardown
    assert rep.local_memory_ops == 0 and rep.spill_bytes == 0


@pytest.mark.parametrize("cluster, multicast", [(1, "B"), (2, "B"), (2, "A"), (4, "A")])
@pytest.mark.parametrize("a_major, b_major", [("K", "K"), ("MN", "K"), ("K", "MN"), ("MN", "MN")])
def test_operand_loads_are_the_cooperative_boxes_and_add_up_to_the_stage(cluster, multicast, a_major, b_major):
    """``kit.operand_loads`` (what a host plan builds its tensor maps and checks ``expect_tx`` with)
    gives ``Cooperative``'s boxes, and its box counts add up to the stage's bytes."""
    from nbwgmma.kit import Cooperative, operand_loads

    bm, bn = (256, 128) if multicast == "A" else (128, 256)
    coop = Cooperative("f32.bf16.bf16", TmaPipeline(4, consumers=2, cluster=cluster), bm, bn,
                       a_major=a_major, b_major=b_major, blocks=2 if bm == 256 else 1, multicast=multicast)
    (box_a, n_a), (box_b, n_b) = operand_loads(bm, bn, 64, a_major, b_major, cluster, multicast)
    assert (box_a, box_b) == (coop.box_a, coop.box_b)
    assert 2 * (n_a * box_a[0] * box_a[1] + n_b * box_b[0] * box_b[1]) == coop.stage_bytes


def test_cooperative_and_the_scheduler_check_the_cluster_direction():
    from nbwgmma.kit import Cooperative

    with pytest.raises(ValueError, match="multicast .* must be 'A' or 'B'; got 'C'"):
        Cooperative("f32.bf16.bf16", MC_PIPE, 256, 128, blocks=2, multicast="C")
    with pytest.raises(KitError, match="broadcast .* must be '', 'A', 'B' or 'AB'; got 'C'"):
        Cooperative("f32.bf16.bf16", MC_PIPE, 256, 128, blocks=2, broadcast="C")
    assert "broadcast='A'" in repr(Cooperative("f32.bf16.bf16", MC_PIPE, 256, 128, blocks=2, broadcast="A"))
    with pytest.raises(ValueError, match="splits A's 64 rows into whole swizzle atoms .* got bm=64"):
        Cooperative("f32.bf16.bf16", TmaPipeline(4, consumers=1, cluster=3), 64, 128, multicast="A")
    with pytest.raises(ValueError, match="along .* must be 'M' or 'N'; got 'K'"):
        TileScheduler(256, 128, 64, cluster=2, along="K")
    for bad in (dict(last_row=1), dict(last_row=True, cluster=2), dict(last_row=True, split=2)):
        with pytest.raises(KitError, match="last_row must be a bool, and True only without clusters or K slices"):
            TileScheduler(256, 128, 64, **bad)
    sched = TileScheduler(256, 128, 64, cluster=2, along="N")
    assert "along='N'" in repr(sched) and "along" not in repr(SCHED)
    # 16 tile rows, 112 tile columns in 56 pairs; 3 columns take 2 pairs (the last CTA's past N)
    assert sched.units(4096, 14336, 4096) == 16 * 56 and sched.units(256, 384, 64) == 2
    assert TileScheduler(256, 128, 64, cluster=2).units(4096, 14336, 4096) == 8 * 112
    assert sched.grid(4096, 14336, 4096, 132) == 132 and sched.grid(256, 384, 64, 132) == 4


def test_activation_takes_the_one_mufu_gelu_tanh_for_narrow_outputs():
    from nbwgmma.kit.epilogue import activation, gelu_tanh, gelu_tanh_approx, silu

    assert activation("gelu_tanh") is gelu_tanh and activation("gelu_tanh", "f32") is gelu_tanh
    assert all(activation("gelu_tanh", t) is gelu_tanh_approx for t in ("bf16", "f16", "e4m3", "e5m2"))
    assert activation("silu", "bf16") is silu
    with pytest.raises(ValueError, match="activation must be one of"):
        activation("tanh", "bf16")


def test_beside_checks_its_steps():
    """``Cooperative.beside(hook, steps)``: a tile_open with a hook after each of its first
    ``steps`` stages (any ``blocks``); ``steps`` must be a positive int."""
    from numba import cuda

    from nbwgmma.kit import Cooperative

    @cuda.jit(device=True)
    def hook(j, carry):
        pass

    for blocks, bm in ((1, 128), (2, 256)):
        coop = Cooperative("f32.bf16.bf16", TmaPipeline(4, consumers=2), bm, 128, blocks=blocks)
        assert callable(coop.beside(hook, 2))
        for bad in (0, -1, 2.0, None):
            with pytest.raises(ValueError, match="steps must be a positive int"):
                coop.beside(hook, bad)


def test_a_block_that_cannot_be_built_is_a_kit_error_naming_it():
    """Parameters a kit block cannot take are nbwgmma errors (and ValueErrors), with the block's
    name and the parameter; an unknown kind is a KindError."""
    from nbwgmma.errors import KindError, KitError, NbwgmmaError
    from nbwgmma.kit import Cooperative, TmaPipeline, acc_map, activation

    with pytest.raises(KitError, match=r"^TmaPipeline: stages must be an integer in \[1, 32\]; got 0"):
        TmaPipeline(0, 2)
    with pytest.raises(KitError, match=r"^Cooperative: bn must be a multiple of 8 in \[8, 256\] with K-major B; got 132"):
        Cooperative("f32.bf16.bf16", TmaPipeline(3, 2), 128, 132)
    with pytest.raises(KindError, match=r"unknown type combination 'f32.bf16.f16'"):
        Cooperative("f32.bf16.f16", TmaPipeline(3, 2), 128, 128)
    from nbwgmma.kit import BlockScaled, PingPong, SparseConsumers

    for block in (lambda p: Cooperative("f32.bf16.bf16", p(2), 128, 128), lambda p: PingPong("f32.bf16.bf16", p(1)),
                  lambda p: BlockScaled("f32.e4m3.e4m3", p(2), a_block=True, b_block=True),
                  lambda p: SparseConsumers("f32.f16.f16", p(2))):
        # a ring of one stage: the consumers would wait for a fill of the slot they hold (a hang)
        with pytest.raises(KitError, match=r"^\w+: pipe must have at least 2 stages"):
            block(lambda consumers: TmaPipeline(1, consumers))
        block(lambda consumers: TmaPipeline(2, consumers))
    with pytest.raises(KitError, match=r"^acc_map: fn .* must take 4 arguments"):
        acc_map(activation("relu"), 64, cols=1)
    assert issubclass(KitError, ValueError) and issubclass(KitError, NbwgmmaError)
    assert issubclass(KindError, ValueError) and issubclass(KindError, NbwgmmaError)


def test_acc_map_of_something_not_a_function_is_a_kit_error_at_the_call():
    """It built a dispatcher and failed only when a kernel compiled."""
    from nbwgmma.errors import KitError
    from nbwgmma.kit import acc_map

    with pytest.raises(KitError, match=r"^acc_map: fn must be a device function .* got int 5"):
        acc_map(5, 64)


@pytest.mark.parametrize("args, message", [
    ((128, 128, 64, "K", "K", 3, "B"), "a cluster of 3 splits B's 128 rows into whole swizzle atoms"),  # 42-row boxes
    ((128, 100, 64, "K", "MN", 1, "B"), r"bn must be a multiple of 64 in \[64, 256\] with MN-major B; got 100"),
    ((128, 100, 64, "K", "K", 1, "B"), r"bn must be a multiple of 8 in \[8, 256\] with K-major B; got 100"),
    ((96, 128, 64, "K", "K", 1, "B"), "bm must be 64, 128, 192 or 256; got 96"),
    ((128, 128, 64, "K", "K", 16, "B"), r"cluster must be an integer in \[1, 8\]"),
    ((128, 128, 48, "K", "K", 1, "B"), "bk must be 128 bytes of K in elements"),
    ((128, 128, 64, "K", "K", 2, "C"), "multicast .* must be 'A' or 'B'; got 'C'"),
])
def test_operand_loads_refuse_shares_that_do_not_tile_the_stage(args, message):
    """A cluster of 3 gave 42-row boxes (126 of 128 rows); 100 MN-major columns dropped 36."""
    from nbwgmma.kit import operand_loads

    with pytest.raises(KitError, match=r"operand_loads: " + message):
        operand_loads(*args)


def test_kit_blocks_take_numpy_integers_and_refuse_clusters_past_8():
    assert TmaPipeline(np.int64(4), np.int32(2)).stages == 4
    assert TileScheduler(np.int32(128), 128, np.int64(64)).bm == 128
    with pytest.raises(KitError, match=r"TmaPipeline: cluster must be an integer in \[1, 8\]; got 16"):
        TmaPipeline(4, 2, cluster=16)
    with pytest.raises(KitError, match="TileScheduler: cluster must be at most 8 CTAs"):
        TileScheduler(128, 128, 64, cluster=16)


@pytest.mark.parametrize("args, message", [
    ((128, 128, 64, 0), "ctas must be an integer of at least 1; got 0"),
    ((-5, 128, 64, 132), "m must be an integer of at least 0; got -5"),
])
def test_scheduler_grid_checks_its_sizes(args, message):
    with pytest.raises(KitError, match=r"TileScheduler.grid: " + message):
        TileScheduler(128, 128, 64).grid(*args)
    # fewer CTAs than a cluster: one cluster (the simulator's one-SM grids)
    assert TileScheduler(128, 128, 64, cluster=2).grid(1024, 1024, 64, 1) == 2


def test_activation_checks_the_output_type():
    from nbwgmma.kit import activation

    with pytest.raises(KitError, match=r"activation: out \(the output's type\) must be one of .*got 'f64'"):
        activation("relu", "f64")


@cuda.jit
def _init_with_the_array(out):
    bars = cuda.shared.array(NBARS, np.uint64)
    if cuda.threadIdx.x == 0:
        PIPE.init(bars)  # the array, not smem_addr(bars)


def test_pipeline_init_given_the_barrier_array_names_smem_addr():
    """The message was about an array of float64 (``ring + 8 * s`` of a uint64 array)."""
    with pytest.raises(NbwgmmaTypingError, match=r"TmaPipeline.init: ring must be an integer shared-memory address "
                                                 r"\(smem_addr\(bars\).*got array\(uint64, 1d, C\)") as exc:
        compile_report(_init_with_the_array, (types.uint64[::1],))
    assert str(exc.value).startswith(f"{__file__}:{_line_of(_init_with_the_array, 'PIPE.init(')}: "), str(exc.value)


def _inlined_blocks():
    from nbwgmma.kit import Cooperative

    pipe = TmaPipeline(4, consumers=2)
    coop = Cooperative("f32.bf16.bf16", pipe, 128, 128)

    @cuda.jit
    def ring_is_an_array(out, tmap):
        bars = cuda.shared.array(12, np.uint64)
        acc, s, ph = coop.tile(bars, np.uint32(0), 0, 0, 0, 4, 0, 0)  # the array, not smem_addr(bars)
        acc_store(acc, "f32.bf16.bf16", out, 0, 0, 0)

    @cuda.jit
    def cw_is_a_float(out, tmap):
        base, ring = pipe.setup()
        acc, s, ph = coop.tile(ring, base, 0, 0, 0, 4, 0.5, 0)  # a float for the consumer index
        acc_store(acc, "f32.bf16.bf16", out, 0, 0, 0)

    @cuda.jit
    def tmap_is_an_array(out, tmap):
        base, ring = pipe.setup()
        full = pipe.producer_acquire(ring, 0, 0, coop.stage_bytes)
        coop.load_tile(base, full, out, tmap, 0, 0, 0)  # an array for A's tensor map

    return ((ring_is_an_array, "coop.tile(", "mbarrier_wait_parity: argument 'bar'"),
            (cw_is_a_float, "coop.tile(", "make_desc: argument 'addr' must be an integer"),
            (tmap_is_an_array, "coop.load_tile(", "tma_load_2d: argument 'tmap'"))


def test_a_mistake_in_an_inlined_kit_block_is_reported_at_the_users_call():
    """Numba inlines Cooperative's blocks into the kernel with the kit's own lines: the error led
    with nbwgmma/kit/cooperative.py, the user's line nowhere. It leads with the user's call now,
    the kit's line after it."""
    for kernel, call, message in _inlined_blocks():
        with pytest.raises(NbwgmmaTypingError) as exc:
            compile_report(kernel, (types.float32[:, ::1], types.uint64))
        first = str(exc.value).splitlines()[0]
        assert first.startswith(f"{__file__}:{_line_of(kernel, call)}: {message}"), str(exc.value)
        assert "nbwgmma/kit/" in str(exc.value)  # the block's own line, in the "while typing" part


@cuda.jit
def _store_part_missing_args(out, buf):
    tma_store_part(out[0], buf, 1, 2)


@cuda.jit
def _consumer_wait_unknown_keyword(out, buf):
    PIPE.consumer_wait(np.uint32(0), 1, ph=0, parity=1)


@cuda.jit
def _row_reduce_without_ncols(out, buf):
    t = cuda.threadIdx.x
    mx = _ROW_MAX(acc_zeros("f32.bf16.bf16", 256), t, 0, 0)
    out[t] = mx[0]


_ADD_ROWS = pair_atomic("add")


@cuda.jit
def _pair_atomic_without_tid(out, buf):
    _ADD_ROWS((np.float32(1), np.float32(2)), out)


def _inline_true_blocks():
    """Kernels calling the kit's ``inline=True`` blocks with arguments that do not bind: Numba's
    inlining pass, which runs before typing, raised its raw "Cannot bind" TypingError for them."""
    from nbwgmma.kit import Cooperative, EpilogueWarps, PingPong, tile_producer

    pipe, pipe1 = TmaPipeline(4, consumers=2), TmaPipeline(4, consumers=1)
    coop = Cooperative("f32.bf16.bf16", pipe, 128, 128)
    pp = PingPong("f32.bf16.bf16", pipe1)
    ew = EpilogueWarps(None, 128, 128)

    @cuda.jit(device=True)
    def load(slot, full, kb, tm, tn, args):
        pass

    produce = tile_producer(pipe, TileScheduler(128, 128, 64), coop.stage_bytes, load)

    @cuda.jit
    def coop_tile(out, buf):
        acc, s, ph = coop.tile(np.uint32(buf[0]), 0, 0, 0)
        out[0] = s

    @cuda.jit
    def coop_drain(out, buf):
        coop.drain(np.uint32(buf[0]))

    @cuda.jit
    def coop_load_tile(out, buf):
        coop.load_tile(np.uint32(buf[0]), np.uint32(buf[1]), np.uint64(0), np.uint64(0), 0, 0, 0, 9)

    @cuda.jit
    def pp_tile(out, buf):
        acc, s, ph = pp.tile(np.uint32(buf[0]), np.uint32(buf[1]), 0, 0)
        out[0] = s

    @cuda.jit
    def pipe_setup(out, buf):
        base, ring = pipe.setup(5)
        out[0] = base

    @cuda.jit
    def ew_setup(out, buf):
        ew.setup(1)

    @cuda.jit
    def produce_short(out, buf):
        produce(np.uint32(buf[0]), np.uint32(buf[1]), 4)

    return [(coop_tile, "coop.tile(", r"kit\.Cooperative\.tile: missing a required argument: 'kb0' \(4 arguments given "
             r"where it takes 8: the one left out may be any of them\): its signature is "
             r"tile\(ring, base, s, ph, kb0, kb1, cw, ct\); got tile\(uint32, 0, 0, 0\)"),
            (coop_drain, "coop.drain(", r"kit\.Cooperative\.drain: missing a required argument: 'ct'"),
            (coop_load_tile, "coop.load_tile(", r"kit\.Cooperative\.load_tile: too many positional arguments"),
            (pp_tile, "pp.tile(", r"kit\.PingPong\.tile: missing a required argument: 'kblocks'"),
            (pipe_setup, "pipe.setup(", r"kit\.TmaPipeline\.setup: too many positional arguments: its signature is "
             r"setup\(\); got setup\(5\)"),
            (ew_setup, "ew.setup(", r"kit\.EpilogueWarps\.setup: too many positional arguments"),
            (produce_short, "produce(", r"kit\.produce: missing a required argument: 'kblocks' \(.*\): its signature is "
             r"produce\(ring, base, nunits, kblocks, tiles_mc, tiles_n, args\)")]


def test_an_inline_kit_block_given_arguments_it_cannot_bind_names_itself_at_the_users_line():
    """Blocks declared ``cuda.jit(device=True, inline=True)`` (Cooperative's, PingPong's, the
    pipeline's and epilogue warps' setup, tile_producer's function): their calls are left to the
    typing of the call, whose error names the block, its signature and the user's line."""
    for kernel, call, message in _inline_true_blocks():
        with pytest.raises(NbwgmmaTypingError, match=message) as exc:
            compile_report(kernel, (types.float32[::1], types.uint16[::1]))
        assert str(exc.value).startswith(f"{__file__}:{_line_of(kernel, call)}: "), str(exc.value)
        assert "\x1b[" not in str(exc.value)


@pytest.mark.parametrize("kernel, call, message", [
    (_row_reduce_without_ncols, "_ROW_MAX(", r"kit\.acc_row_reduce\('max', 256\): missing a required argument: "
     r"'ncols' \(4 arguments given where it takes 5: the one left out may be any of them\): it takes \(acc, tid, row0, col0, ncols, \*args\); got \(UniTuple\(float32 x 128\), "),
    (_pair_atomic_without_tid, "_ADD_ROWS(", r"kit\.pair_atomic\('add'\): missing a required argument: 'tid' \(.*\): it "
     r"takes \(pair, vec, tid\); got \(UniTuple\(float32 x 2\), array\(float32"),
    (_store_part_missing_args, "tma_store_part(", r"kit\.tma_store_part: missing a required argument: 'tmap_c' \(4 "
     r"arguments given where it takes 7: the one left out may be any of them\): its "
     r"signature is tma_store_part\(regs, buf, ct, cw, tmap_c, col, row\); got tma_store_part\(float32, array\(uint16"),
    (_consumer_wait_unknown_keyword, "PIPE.consumer_wait(", r"kit\.TmaPipeline\.consumer_wait: got an unexpected "
     r"keyword argument 'parity': its signature is consumer_wait\(ring, s, ph\)"),
])
def test_a_kit_block_given_arguments_it_cannot_bind_names_itself_at_the_users_line(kernel, call, message):
    """Numba's "Cannot bind 'args=(...)' to signature" was the whole report (a Numba TypingError);
    now nbwgmma's typing error at the user's line, naming the block and its signature (a
    function a kit builder made, such as a reduction, by the call that made it)."""
    with pytest.raises(NbwgmmaTypingError, match=message) as exc:
        compile_report(kernel, (types.float32[::1], types.uint16[::1]))
    assert str(exc.value).startswith(f"{__file__}:{_line_of(kernel, call)}: "), str(exc.value)


def test_scheduler_cluster_k_and_pingpong_bk_and_staged_scales_stages():
    """From a newcomer's trial: cluster_k refused NumPy integers; PingPong.BK was 64 for fp8 (whose
    stage holds 128 K: a kernel stepping K by it summed blocks twice); staged block scales with
    two stages passed (a scale warp's parity wait then matched a phase a round old)."""
    from nbwgmma.kit import BlockScaled, PingPong

    assert TileScheduler(128, 128, 64, cluster_k=np.int64(2)).cluster_k == 2
    assert PingPong("f32.e4m3.e4m3", TmaPipeline(4, consumers=1)).BK == 128
    assert PingPong("f32.bf16.bf16", TmaPipeline(4, consumers=1)).bk == 64

    staged = dict(a_block=True, b_block=True, a_columns=True)
    with pytest.raises(KitError, match="staged scales taken in turn by 3 scale warps need at least 3 stages"):
        BlockScaled("f32.e4m3.e4m3", TmaPipeline(2, consumers=256, producers=33), **staged)
    BlockScaled("f32.e4m3.e4m3", TmaPipeline(3, consumers=256, producers=33), **staged)


def test_pingpong_operand_majors_and_ragged_tiles():
    """PingPong reads A M-contiguous as B N-contiguous (16-bit kinds: wgmma transposes no fp8);
    its ragged tiles (K-grouped products) exist only with both operands MN-major, and asking for
    them otherwise is a KitError that names what is needed."""
    from nbwgmma.kit import PingPong

    pp = PingPong("f32.bf16.bf16", TmaPipeline(6, consumers=1), a_major="MN", b_major="MN")
    assert callable(pp.ragged) and "a_major='MN'" in repr(pp)
    assert (pp.box_a, pp.box_b) == ((64, 64), (64, 64))  # two 64 x 64 boxes of each a stage
    fp8 = PingPong("f32.e4m3.e4m3", TmaPipeline(4, consumers=1))
    assert (fp8.box_a, fp8.box_b, fp8.bk) == ((128, 128), (128, 128), 128)  # 128 rows x 128 bytes of K
    with pytest.raises(KitError, match="f32.e4m3.e4m3 has no transpose: A must be K-major"):
        PingPong("f32.e4m3.e4m3", TmaPipeline(4, consumers=1), a_major="MN")
    with pytest.raises(KitError, match="a_major must be 'K' or 'MN'; got 'M'"):
        PingPong("f32.bf16.bf16", TmaPipeline(4, consumers=1), a_major="M")
    with pytest.raises(KitError, match="A and B must both be MN-major .* a_major='K', b_major='MN'"):
        PingPong("f32.bf16.bf16", TmaPipeline(4, consumers=1), b_major="MN").ragged


_ROW_MAX = acc_row_reduce("max", 256)
_ROW_SUMEXP = acc_row_reduce("sum", 256, fn=lambda v, r, c, mx: math.exp(v - mx), pairs=1)
_COL_SUM = acc_col_reduce("sum", 64)
_RAMP256 = acc_map(lambda v, r, c, x: v + x * np.float32(r) + np.float32(c), 256, nextra=1)
_RAMP64 = acc_map(lambda v, r, c, x: v + x * np.float32(r) + np.float32(c), 64, nextra=1)


@cuda.jit
def _row_stats(out, x, n):
    t = cuda.threadIdx.x
    acc = _RAMP256(acc_zeros("f32.bf16.bf16", 256), t, 0, 0, x)
    mx = _ROW_MAX(acc, t, 0, 0, n)
    se = _ROW_SUMEXP(acc, t, 0, 0, n, mx)
    out[t, 0] = mx[0] + math.log(se[0])
    out[t, 1] = mx[1] + math.log(se[1])


@cuda.jit
def _col_sums(out, x, m):
    t = cuda.threadIdx.x
    s = _COL_SUM(_RAMP64(acc_zeros("f32.bf16.bf16", 64), t, 0, 0, x), t, 0, 0, m)
    for k in range(16):
        out[t, k] = s[k]


def test_reductions_are_shuffles_in_registers():
    """A 64 x 256 fragment's row log-sum-exp (max, then a sum of exp(v - max) with the max as a
    row pair): two shuffles a row and reduction (eight); a path for a fragment inside C and one
    masking columns by selects (each reduction's 128 values twice), no local memory; a 64 x 64
    fragment's column sums: three shuffles a column (48)."""
    rep = compile_report(_row_stats, (types.float32[:, ::1], types.float32, types.int32))
    assert rep.sass.get("SHFL") == 8 and "DADD" not in rep.sass, rep.sass
    assert rep.sass.get("FSEL") >= 256 and rep.sass.get("MUFU") == 256, rep.sass  # two paths: masked or not
    assert rep.local_memory_ops == 0 and rep.spill_bytes == 0
    rep = compile_report(_col_sums, (types.float32[:, ::1], types.float32, types.int32))
    assert rep.sass.get("SHFL") == 48 and rep.sass.get("BRA") == 1, rep.sass
    assert rep.local_memory_ops == 0 and rep.spill_bytes == 0


@cuda.jit
def _pair_left_out(out, src, n):
    t = cuda.threadIdx.x
    acc = acc_load("f32.bf16.bf16", 256, src, t, 0, 0)
    se = _ROW_SUMEXP(acc, t, 0, 0, n)  # the row max's pair left out
    out[t, 0] = se[0]


@cuda.jit
def _narrow_fragment(out, src, n):
    t = cuda.threadIdx.x
    mx = _ROW_MAX(acc_load("f32.bf16.bf16", 64, src, t, 0, 0), t, 0, 0, n)  # 32 values, not 128
    out[t, 0] = mx[0]


@pytest.mark.parametrize("kernel, message", [
    (_pair_left_out, r"acc_row_reduce\('sum', 256\): after \(acc, tid, row0, col0, ncols\) it takes 1 row pair\(s\) "
                     r"and 0 extra argument\(s\) \(pairs=1, nextra=0\): 1 in all; got 0"),
    (_narrow_fragment, r"acc_row_reduce\('max', 256\): the fragment must be a tuple of 128 values .*got a tuple of 32"),
])
def test_a_reduction_given_the_wrong_arguments_is_a_typing_error_at_the_call(kernel, message):
    import inspect

    with pytest.raises(NbwgmmaTypingError, match=message) as exc:
        compile_report(kernel, (types.float32[:, ::1], types.float32[:, ::1], types.int32))
    src, first = inspect.getsourcelines(kernel.py_func)
    line = first + next(i for i, s in enumerate(src) if "_ROW_" in s)
    assert str(exc.value).startswith(f"{__file__}:{line}: acc_row_reduce("), str(exc.value)


@cuda.jit
def _s32_row_max(out, src, n):
    t = cuda.threadIdx.x
    mx = _ROW_MAX(acc_load("s32.s8.s8", 256, src, t, 0, 0), t, 0, 0, n)  # an int8 GEMM's s32 sums
    out[t, 0] = mx[0]


@cuda.jit
def _pair_into_2d(out, x, n):
    t = cuda.threadIdx.x
    mx = _ROW_MAX(_RAMP256(acc_zeros("f32.bf16.bf16", 256), t, 0, 0, x), t, 0, 0, n)
    pair_store(mx, out[0:n], t)  # out[tn, 0:n] meant: a 2-D slice


@cuda.jit
def _pair_into_ints(out, x, n):
    t = cuda.threadIdx.x
    mx = _ROW_MAX(_RAMP256(acc_zeros("f32.bf16.bf16", 256), t, 0, 0, x), t, 0, 0, n)
    pair_store(mx, out[0, 0:n], t)


@pytest.mark.parametrize("kernel, args, message", [
    (_s32_row_max, (types.float32[:, ::1], types.int32[:, ::1], types.int32),
     r"acc_row_reduce\('max', 256\): the fragment must hold f32 values .*got int32 \(an s32 accumulator: map it "
     r"to f32 first"),
    (_pair_into_2d, (types.float32[:, ::1], types.float32, types.int32),
     r"pair_store: vec must be a 1-D array .*got array\(float32, 2d"),
    (_pair_into_ints, (types.int32[:, ::1], types.float32, types.int32),
     r"pair_store: vec must hold floats for a pair of floats"),
])
def test_reductions_refuse_what_they_would_get_wrong(kernel, args, message):
    """From a review: an s32 accumulator reduced as f32 lost the integers past 2^24, a pair stored
    into a 2-D slice filled whole rows, into an int32 vector was cut: now typing errors."""
    with pytest.raises(NbwgmmaTypingError, match=message):
        compile_report(kernel, args)


def test_reduction_and_producer_builders_refuse_bad_parameters():
    from nbwgmma.kit import fill_stages

    with pytest.raises(KitError, match=r"row pairs are f32 .*dtype='s32' would cut"):
        acc_map(lambda v, r, c, p: v + p, 64, pairs=1, dtype="s32")
    with pytest.raises(KitError, match=r"acc_col_reduce\('sum', 64\): nextra=1 counts arguments for fn"):
        acc_col_reduce("sum", 64, nextra=1)
    with pytest.raises(KitError, match=r"masked must be True or False; got 'no'"):
        acc_row_reduce("max", 64, masked="no")
    with pytest.raises(KitError, match=r"fill_stages: load must be a device function"):
        fill_stages(PIPE, 1024, None)


def test_a_plain_def_load_compiles_in_a_kernel():
    """tile_producer's ``load`` given as a plain ``def`` (no decorator) is made a device function: the
    kernel compiles (before, Numba's typing stopped at "Untyped global name 'load'", which named no
    line of the user's) with its wgmmas and no local memory."""
    from nbwgmma.intrinsics import setmaxnreg_dec, setmaxnreg_inc
    from nbwgmma.kit import Cooperative, tile_producer, warpgroup_index

    coop = Cooperative("f32.bf16.bf16", PIPE, 128, 128)
    sched = TileScheduler(128, 128, coop.bk)

    def load(slot, full, kb, tm, tn, args):
        coop.load_tile(slot, full, args[0], args[1], kb, tm, tn)

    produce = tile_producer(PIPE, sched, coop.stage_bytes, load)

    @cuda.jit(launch_bounds=(384, 1))
    def kernel(tmap_a, tmap_b, out, m, n, k):
        base, ring = PIPE.setup()
        tid = cuda.threadIdx.x
        tiles_m, tiles_mc, tiles_n, kblocks, nsplit, nunits = sched.shape(m, n, k)
        if tid < 128:
            setmaxnreg_dec(40)
            if tid == 0:
                produce(ring, base, nunits, kblocks, tiles_mc, tiles_n, (tmap_a, tmap_b))
        else:
            setmaxnreg_inc(232)
            cw, ct = warpgroup_index() - 1, tid % 128
            s, ph = 0, 0
            for u in range(sched.first(), nunits, sched.step()):
                acc, s, ph = coop.tile(ring, base, s, ph, 0, kblocks, cw, ct)
                out[u, cw * 128 + ct] = acc[0] + acc[63]
        PIPE.teardown()

    r = compile_report(kernel, (types.uint64, types.uint64, types.float32[:, :], types.int32, types.int32,
                                types.int32))
    assert r.sass.get("HGMMA", 0) > 0 and r.sass.get("UTMALDG", 0) >= 2
    assert r.spill_bytes == 0 and r.local_memory_ops == 0


def test_a_batched_kernel_on_3d_maps_compiles_without_local_memory():
    """The kit's batched blocks (tile_producer(batched=True), load_tile_3d, tma_store_part_3d,
    batch_unit) in a whole kernel: 3-D TMA loads and stores, no spills, the batch's division
    inline (the only CALLs are the two loops' run-time step: a range's trip count)."""
    from numba import types as nt

    from .sim_kit_cases import _batched_gemm

    kernel, *_ = _batched_gemm(1)
    r = compile_report(kernel, (nt.uint64, nt.uint64, nt.uint64, nt.int32, nt.int32, nt.int32, nt.int32))
    assert r.spill_bytes == 0 and r.local_memory_ops == 0 and r.sass.get("HGMMA", 0) > 0
    assert r.sass.get("CALL", 0) <= 2
    assert ".3d." in r.ptx and "cp.async.bulk.tensor.3d.global.shared::cta" in r.ptx


@pytest.mark.parametrize("op", ["add", "max"])
def test_pair_atomic_compiles_to_global_atomics_without_local_memory(op):
    from nbwgmma.kit import pair_atomic

    combine = pair_atomic(op)

    @cuda.jit
    def kernel(vec, a, b):
        combine((a, b), vec, cuda.threadIdx.x)

    r = compile_report(kernel, "(float32[:], float32, float32)")
    assert r.local_memory_ops == 0 and any(o.startswith(("RED", "ATOM")) for o in r.sass), r.sass


def test_pair_atomic_refuses_an_unknown_operation():
    from nbwgmma.kit import pair_atomic

    with pytest.raises(KitError, match=r"pair_atomic: op must be one of \('add', 'max', 'min'\); got 'mul'"):
        pair_atomic("mul")
