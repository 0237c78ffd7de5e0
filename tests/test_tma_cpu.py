"""CPU tests of TMA: tensor-map validation rules, the box-copy model, and the PTX/SASS of
every copy form."""

import numpy as np
import pytest
from numba import cuda, types

from nbwgmma.intrinsics import *  # noqa: F401,F403
from nbwgmma.intrinsics.errors import NbwgmmaTypingError
from nbwgmma.report import compile_report
from nbwgmma.layout import box_copy_model
from nbwgmma.tma import TensorMap, TensorMapError, TensorMapTypeError


class FakeCudaArray:
    """Just enough __cuda_array_interface__ to describe memory without a GPU."""

    def __init__(self, shape, dtype, ptr=0x7F0000000000, strides=None):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": np.dtype(dtype).str, "data": (ptr, False),
            "strides": strides, "version": 3,
        }


def tmap(shape=(256, 128), dtype=np.uint16, box=(64, 64), **kw):
    arr = FakeCudaArray(shape, dtype, ptr=kw.pop("ptr", 0x7F0000000000), strides=kw.pop("astrides", None))
    kw.setdefault("dtype", "bf16" if np.dtype(dtype) == np.uint16 else None)
    return TensorMap(arr, box, encode=False, **kw)


RULES = [
    (dict(ptr=0x7F0000000008), "16-byte aligned"),
    (dict(shape=(4, 4, 4, 4, 4, 4), box=(1, 1, 1, 1, 1, 8)), "rank must be in [1, 5]"),
    (dict(shape=(2**33, 8), box=(1, 8)), "must be in [1, 2^32]"),
    (dict(astrides=(250, 2)), "the stride of dimension 0 (from one index of it to the next, in bytes) must be a "
                              "multiple of 16"),
    (dict(astrides=(2**41, 2)), "< 2^40"),
    # a reversed view (rows read backwards): the driver's encode failed with a bare OverflowError
    (dict(astrides=(-256, 2), ptr=0x7F0000000000 + 255 * 256), "the stride of dimension 0 (in bytes) must not be "
                                                               "negative (TMA reads an array forwards: copy a reversed "
                                                               "view first); got -256 bytes"),
    (dict(astrides=(256, 4)), "innermost dimension must be contiguous"),
    (dict(box=(300, 64)), "box[0] must be in [1, 256]"),
    (dict(box=(64, 0)), "box[1] must be in [1, 256]"),
    (dict(box=(64, 4), swizzle="none"), "multiple of 16"),
    (dict(box=(64, 128), swizzle="128B"), "at most 128 bytes"),
    (dict(box=(64, 64), swizzle="64B"), "at most 64 bytes"),
    (dict(box=(64, 32), swizzle="32B"), "at most 32 bytes"),
    (dict(element_strides=(1, 9)), "element_strides[1] must be in [1, 8]"),
    (dict(element_strides=(1,)), "element_strides must have one entry per dimension (2)"),
    (dict(dtype=np.int32, box=(8, 4), oob_fill="nan"), "floating-point"),
    (dict(swizzle="256B"), "swizzle must be one of"),
    (dict(box=(64,)), "one entry per dimension"),
]


@pytest.mark.parametrize("kw, message", RULES, ids=[m for _, m in RULES])
def test_each_rule_rejects_its_bad_input(kw, message):
    with pytest.raises(TensorMapError) as exc:
        tmap(**kw)
    assert message in str(exc.value)
    assert "got" in str(exc.value)


def test_a_view_s_shape_and_strides_are_checked_against_each_other():
    """A rank-3 shape over a 2-D array without strides= gave the driver one stride for three
    dimensions; a shape of floats was truncated; a non-sequence or an unhashable type name
    raised Python's own errors."""
    arr = FakeCudaArray((64, 64), np.uint16, ptr=0x7F0000000000, strides=None)
    for kw, message in ((dict(shape=(2, 8, 8)), r"shape and strides need one entry per dimension; got shape \(2, 8, "
                                                 r"8\) and the array's strides \(128, 2\) \(give strides="),
                        (dict(shape=(16, 16), strides=(16,)), r"got shape \(16, 16\) and strides \(16,\)"),
                        (dict(shape=64), "shape must be a sequence of integers"),
                        (dict(shape=(64.7, 64.2)), "shape must hold integers"),
                        (dict(shape=(), strides=()), "one entry per dimension"),
                        (dict(dtype=["bf16"]), "element type must be one of"),
                        (dict(swizzle=["128B"]), "swizzle must be one of")):
        box = (2, 8, 8) if kw.get("shape") == (2, 8, 8) else (8, 8)
        with pytest.raises(TensorMapError, match=message):
            TensorMap(arr, box, encode=False, **{"dtype": "bf16", **kw})


def test_a_view_must_lie_inside_its_array():
    """shape=/strides= reaching past the array were taken: the simulated TMA read host memory
    past it, a GPU another allocation's bytes."""
    arr = FakeCudaArray((64, 64), np.uint16, ptr=0x7F0000000000, strides=None)
    for shape, strides in (((4096, 4096), (4096, 1)), ((33, 64), (128, 1)), ((64, 65), (64, 1))):
        with pytest.raises(TensorMapError, match=rf"shape \({shape[0]}, {shape[1]}\) with strides .* the array "
                                                 rf"\(shape \(64, 64\), strides \(128, 2\) bytes\) holds 8192"):
            TensorMap(arr, (8, 8), dtype="bf16", shape=shape, strides=strides, encode=False)
    # views inside it: every other row, the first 32 rows, the whole array as (32, 128)
    for shape, strides in (((32, 64), (128, 1)), ((32, 64), (64, 1)), ((32, 128), (128, 1))):
        TensorMap(arr, (8, 8), dtype="bf16", shape=shape, strides=strides, encode=False)


def test_an_error_describes_the_map_in_the_arrays_order():
    with pytest.raises(TensorMapError) as exc:
        tmap(shape=(200, 128), box=(300, 64), swizzle="none")
    assert str(exc.value).startswith("tensor map (a 200x128 bf16 array, box (300, 64)): box[0] must be in [1, 256]; "
                                     "got 300"), str(exc.value)
    with pytest.raises(TensorMapError) as exc:  # rows of 130 bf16 values: 260 bytes apart
        tmap(shape=(200, 130), box=(64, 64), swizzle="none")
    assert str(exc.value) == ("tensor map (a 200x130 bf16 array, box (64, 64)): the stride of dimension 0 (from one "
                              "index of it to the next, in bytes) must be a multiple of 16 bytes (rows TMA cannot "
                              "address: load them another way, and store a GEMM's C from the registers, "
                              "kit.store_rows_part); got 260 bytes")


def test_wrong_element_size_and_host_arrays():
    with pytest.raises(TensorMapError, match="2-byte elements"):
        TensorMap(FakeCudaArray((64, 64), np.float32), (8, 8), dtype="bf16", encode=False)
    with pytest.raises(TensorMapTypeError, match="^tensor map: expected a CUDA array .* got a host numpy array"):
        TensorMap(np.zeros((64, 64), np.float32), (8, 8), encode=False)
    assert issubclass(TensorMapTypeError, TypeError) and issubclass(TensorMapTypeError, TensorMapError)


def test_decode_round_trip():
    t = tmap(shape=(300, 200), box=(64, 64), swizzle="128B", l2_promotion="128B")
    d = t.decode()
    assert d["shape"] == (300, 200) and d["box"] == (64, 64) and d["strides_bytes"] == (400, 2)
    assert d["swizzle"] == "128B" and t.box_bytes == 64 * 64 * 2
    assert t.params.dims == (200, 300)  # the driver's order: innermost first
    t = tmap(shape=(300, 200), box=(64, 64), element_strides=(2, 1))  # array order, like the box
    assert t.params.element_strides == (1, 2) and t.decode()["element_strides"] == (2, 1)


def test_box_model_fills_raw_float_bits_with_a_nan():
    """The simulator reads a map's memory as unsigned integers of the element's size: a NaN fill
    writes a NaN of that size (all ones but the sign), not a failed float conversion."""
    x = np.arange(4 * 8, dtype=np.float32).reshape(4, 8)
    for raw_type, float_type in ((np.uint32, np.float32), (np.uint16, np.float16)):
        bits = x.astype(float_type).view(raw_type)
        got = box_copy_model(bits, (4, 8), (2, 3), oob_fill="nan").view(float_type).reshape(4, 8)
        np.testing.assert_array_equal(got[:2, :5], x[2:, 3:].astype(float_type))
        assert np.isnan(got[2:]).all() and np.isnan(got[:, 5:]).all()


def test_box_model_fills_and_swizzles():
    x = np.arange(16 * 64, dtype=np.uint16).reshape(16, 64)
    raw = box_copy_model(x, (8, 64), (12, 0), swizzle="none")
    vals = raw.view(np.uint16).reshape(8, 64)
    np.testing.assert_array_equal(vals[:4], x[12:16])
    assert (vals[4:] == 0).all()
    sw = box_copy_model(x, (8, 64), (0, 0), swizzle="128B").view(np.uint16).reshape(8, 64)
    np.testing.assert_array_equal(sw[0], x[0])  # row 0 is not permuted
    # Row 1: 16-byte chunk j holds logical chunk j ^ 1.
    np.testing.assert_array_equal(sw[1, 0:8], x[1, 8:16])


def stmt_kernel(stmt):
    """(kernel, signature, launch bounds) of a kernel running ``stmt`` with a barrier ``b``, a
    buffer ``d`` and a map ``tm``."""
    src = ("def k(t, out):\n    bar = cuda.shared.array(1, np.uint64)\n    buf = cuda.shared.array(1024, np.uint8)\n"
           f"    b = smem_addr(bar)\n    d = smem_addr(buf)\n    tm = t[0]\n    {stmt}\n"
           "    bulk_commit_group()\n    bulk_wait_group(0)\n")
    ns = dict(globals())
    exec(src, ns)
    return ns["k"], (types.uint64[:], types.float32[:]), None


def form_stmt(form, rank):
    return form.format(r=rank, c=", ".join(str(i) for i in range(rank)))


FORMS = [
    ("tma_load_{r}d(d, tm, b, {c})", "cp.async.bulk.tensor.{r}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes", "UTMALDG"),
    ("tma_load_multicast_{r}d(d, tm, b, 3, {c})", ".multicast::cluster", "UTMALDG"),
    ("tma_store_{r}d(d, tm, {c})", "cp.async.bulk.tensor.{r}d.global.shared::cta.tile.bulk_group", "UTMASTG"),
    ("tma_reduce_{r}d(d, tm, {c}, 'add')", "cp.reduce.async.bulk.tensor.{r}d.global.shared::cta.add.tile", "UTMAREDG"),
    ("tma_reduce_{r}d(d, tm, {c}, 'max')", ".max.tile.bulk_group", "UTMAREDG"),
    ("tma_prefetch_{r}d(tm, {c})", "cp.async.bulk.prefetch.tensor.{r}d.L2.global.tile", "UTMAPF"),
]


@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("form, ptx, sass", FORMS, ids=[f[2] + f[0][:12] for f in FORMS])
def test_tma_forms_assemble(form, ptx, sass, rank, report_batch):
    rep = report_batch(lambda form, ptx, sass, rank: stmt_kernel(form_stmt(form, rank)))  # with its batch
    assert ptx.format(r=rank) in rep.ptx
    assert rep.sass.get(sass, 0) >= 1, dict(rep.sass)


@pytest.mark.parametrize("stmt, ptx, sass", [
    ("bulk_copy_g2s(d, tm, 256, b)", "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes", "UBLKCP"),
    ("bulk_copy_g2s_array(d, out, 16, 64, b)", "cvta.to.global.u64", "UBLKCP"),
    ("bulk_copy_s2g(tm, d, 256)", "cp.async.bulk.global.shared::cta.bulk_group", "UBLKCP"),
    ("prefetch_tensormap(tm)", "prefetch.tensormap", "CCTL"),
    ("bulk_wait_group_read(1)", "cp.async.bulk.wait_group.read 1", "DEPBAR"),
])
def test_bulk_forms_assemble(stmt, ptx, sass, report_batch):
    rep = report_batch(lambda stmt, ptx, sass: stmt_kernel(stmt))  # with its batch (tests/conftest.py)
    assert ptx in rep.ptx and rep.sass.get(sass, 0) >= 1, dict(rep.sass)


def test_reduce_op_is_checked():
    src = ("def k(t, out):\n    buf = cuda.shared.array(1024, np.uint8)\n"
           "    tma_reduce_2d(smem_addr(buf), t[0], 0, 0, 'mul')\n")
    ns = dict(globals())
    exec(src, ns)
    with pytest.raises(Exception, match="one of 'add'"):
        compile_report(ns["k"], (types.uint64[:], types.float32[:]))


def test_a_literal_multicast_mask_of_zero_is_a_typing_error():
    """A mask naming no CTA copies nowhere and its CTAs' waits never end (a hang on the GPU)."""
    k, sig, _ = stmt_kernel("tma_load_multicast_2d(d, tm, b, 0, 0, 0)")
    with pytest.raises(NbwgmmaTypingError, match=r"tma_load_multicast_2d: argument 'mask' must be an integer in "
                                                 r"\[1, 65535\] \(PTX ISA: cp.async.bulk.tensor, ctaMask"):
        compile_report(k, sig)


def test_driver_arguments_have_the_bindings_types():
    """The bindings reject plain ints for cuuint32_t/cuuint64_t; without a driver the call
    fails later, at loading libcuda, and never with a TypeError."""
    from cuda.bindings import driver as drv

    from nbwgmma.tma import encode_args

    args = encode_args(tmap(shape=(256, 128), box=(64, 64)).params)
    try:
        drv.cuTensorMapEncodeTiled(*args)
    except TypeError as exc:  # pragma: no cover - the failure this test guards against
        pytest.fail(f"argument types rejected: {exc}")
    except Exception:
        pass


def test_tma_wgmma_example_compiles(capsys, monkeypatch):
    from tests.sim_vs_gpu import load_example

    mod = load_example("tma_wgmma_tile")
    monkeypatch.setattr(mod, "gpu_available", lambda: False)
    assert mod.main() == 0.0
    out = capsys.readouterr().out
    assert "UTMALDG=2" in out and "UTMASTG=2" in out and "HGMMA" in out


@pytest.mark.parametrize("box, message", [
    (64, "box must be a sequence of integers, one per dimension; got 64"),
    ((64.0, 64.0), "box must hold integers; got (64.0, 64.0)"),
    ((True, 8), "box must hold integers; got (True, 8)"),
])
def test_a_box_of_the_wrong_type_is_refused(box, message):
    from nbwgmma.errors import NbwgmmaError

    with pytest.raises(TensorMapError, match=message.replace("(", r"\(").replace(")", r"\)")) as exc:
        TensorMap(FakeCudaArray((64, 64), np.uint16), box, dtype="bf16", encode=False)
    assert isinstance(exc.value, (NbwgmmaError, ValueError)) and "\n" not in str(exc.value)
