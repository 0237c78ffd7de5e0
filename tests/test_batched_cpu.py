"""The library GEMM's batched kernels (``GemmConfig(batched=True)``: 3-D maps of A, B and C, the
kit's batch walk) on the CPU: PTX and SASS after ptxas for sm_90a, and the configurations a
batch refuses. Simulator runs: tests/sim_batched_cases.py; GPU: tests/test_batched_gpu.py."""

import pytest
from numba import cuda, types

from nbwgmma.errors import ConfigError
from nbwgmma.kernels.gemm import GemmConfig, gemm_kernel

SIG = (types.uint64, types.uint64, types.uint64, types.int32, types.int32, types.int32, types.float32)
BF16_VEC = types.Array(types.uint16, 1, "C")

JOBS = {  # name: (config, arguments after alpha before the batch's size)
    "bf16-128x256": (dict(kind="f32.bf16.bf16"), ()),
    "f16-MN-256x128": (dict(kind="f32.f16.f16", out="f16", a_major="MN", b_major="MN", bm=256, bn=128), ()),
    "e4m3-f32-out": (dict(kind="f32.e4m3.e4m3", scaled=True, out="f32"), ()),
    # (the erf gelu spills 72 bytes at 128 x 256, batched or not; gelu_tanh is clean)
    "bf16-bias-gelu_tanh": (dict(kind="f32.bf16.bf16", bias="col", act="gelu_tanh", bias_type="bf16"), (BF16_VEC,)),
    "bf16-cluster2": (dict(kind="f32.bf16.bf16", cluster=2), ()),
    # beta * C, C a 3-D array of any strides (torch.baddbmm's; a stride of 0 for one C of every product); at
    # 128 x 256 C's loads spill 104 bytes, batched or not (116 for a 2-D C)
    "f16-beta-c": (dict(kind="f32.f16.f16", out="f16", with_c=True, bn=128),
                   (types.Array(types.float32, 3, "A"), types.float32)),
    # your epilogue function (value, row, col, w[col], s): rows and columns inside the product
    "bf16-user-fn": (dict(kind="f32.bf16.bf16", bn=128, extras=(("col", "f32"), ("scalar", "f32"))),
                     (types.Array(types.float32, 1, "C"), types.float32)),
    # an out TMA cannot write (rows not 16 bytes apart): the register stores into each tile's matrix
    "bf16-direct": (dict(kind="f32.bf16.bf16", epilogue="direct"), ()),
    # torch.matmul's broadcast: one A (or B, shared over a cluster) for every product
    "f16-one-A": (dict(kind="f32.f16.f16", out="f16", broadcast="A"), ()),
    "bf16-one-B-cluster2": (dict(kind="f32.bf16.bf16", broadcast="B", cluster=2, b_major="MN"), ()),
    "e4m3-f32-direct-amax": (dict(kind="f32.e4m3.e4m3", scaled=True, out="e4m3", amax=True, epilogue="direct",
                                  bn=128), (types.float32, types.Array(types.float32, 1, "C"))),
}


@cuda.jit(device=True, inline=True)
def _scaled_shift(v, row, col, w, s):
    return v * w + s * row - col


def config(name):
    user = {"user": _scaled_shift} if "extras" in JOBS[name][0] else {}
    return GemmConfig(batched=True, **{"epilogue": "tma", **user, **JOBS[name][0]})


def job(name):
    cfg, extra = config(name), JOBS[name][1]
    out = types.Array({"bf16": types.uint16, "f16": types.float16, "f32": types.float32, "e4m3": types.uint8}[cfg.out],
                      3, "A")
    sig = SIG if cfg.epilogue == "tma" else SIG[:2] + (out,) + SIG[3:]
    return gemm_kernel(cfg), sig + extra + (types.int32,), None


@pytest.mark.parametrize("name", sorted(JOBS))
def test_batched_kernels_compile_clean(name, report_batch):
    rep = report_batch(job)
    cfg = config(name)
    op = "QGMMA" if cfg.esize == 1 else "HGMMA"
    assert rep.sass.get(op, 0) == 4 * cfg.blocks, rep.sass
    assert rep.ptx.count("cp.async.bulk.tensor.3d.shared::cluster.global") >= 2  # A's and B's loads
    if cfg.epilogue == "tma":
        assert "cp.async.bulk.tensor.3d.global.shared::cta" in rep.ptx  # C's stores
    else:
        assert "tensor.3d.global.shared::cta" not in rep.ptx and rep.sass.get("ST", 0) >= 64  # the register stores
    assert "cp.async.bulk.tensor.2d" not in rep.ptx
    assert rep.spill_bytes == 0 and rep.local_memory_ops == 0, rep
    assert not rep.wgmma_serialized and not rep.setmaxnreg_ignored


def test_broadcast_needs_a_batch_and_names_operands():
    for kw in (dict(broadcast="A"), dict(batched=True, broadcast="C")):
        with pytest.raises(ConfigError, match="broadcast names the operands") as e:
            GemmConfig("f32.bf16.bf16", **kw)
        assert e.value.key == "broadcast"
    assert GemmConfig("f32.bf16.bf16", batched=True, broadcast="A").key() != GemmConfig("f32.bf16.bf16",
                                                                                      batched=True).key()


@pytest.mark.parametrize("kw, says", [
    (dict(epilogue="tma", split=2), "without split"),
    (dict(epilogue="direct", cluster_k=2, bn=128), "cluster_k"),
    (dict(epilogue="tma", stream_k=1, bn=128), "stream_k"),
])
def test_batched_configs_refused(kw, says):
    with pytest.raises(ConfigError, match=says) as e:
        GemmConfig("f32.bf16.bf16", batched=True, **kw)
    assert e.value.key == "batched"


def test_batched_key_leaves_plain_keys_alone():
    """The plain kernels' cache keys are those of before batches existed (shipped kernels stay valid)."""
    plain, batched = GemmConfig(epilogue="tma"), GemmConfig(epilogue="tma", batched=True)
    assert len(batched.key()) == len(plain.key()) + 1 and batched.key()[:-1] == plain.key()
    assert GemmConfig(*batched.key()).batched and not GemmConfig(*plain.key()).batched
