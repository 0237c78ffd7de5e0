"""The simulator against the GPU, bit for bit: run the examples, the library GEMM (bf16, f32 and
fp8 outputs, fp8 with rounding ties), a deliberately wrong descriptor on small-integer inputs and
plain CUDA kernels (shared atomics, warp votes in a partial warp and after lanes returned, a view
of a shared array) and save every output; then compare.

    NUMBA_ENABLE_CUDASIM=1 python tests/sim_vs_gpu.py sim.npz   # in the simulator
    python tests/sim_vs_gpu.py gpu.npz                          # on an H100
    python tests/sim_vs_gpu.py --compare sim.npz gpu.npz
"""

import pathlib
import sys

import numpy as np
from numba import cuda

from nbwgmma.layout.wgmma_model import encode_elements
from nbwgmma.kernels.gemm import GemmConfig, gemm_kernel
from nbwgmma.kit import TileScheduler
from nbwgmma.launch import launch
from nbwgmma.tma import TensorMap

ROOT = pathlib.Path(__file__).parent.parent
if __package__ in (None, ""):  # run as a script: the repository's root on the path, for tests.scripts
    sys.path.insert(0, str(ROOT))
from tests.scripts import load_script  # noqa: E402

EXAMPLES = ROOT / "examples"


def load_example(name):
    """The module ``examples/<name>.py``, loaded from its file (the examples are scripts)."""
    return load_script("examples", name)


def bf16_bits(x):
    return encode_elements(x, "bf16").view(np.uint16).reshape(x.shape)


def run_library_gemm(a, b, cluster=1, epilogue="tma", bm=128, bn=256, multicast="B", timeline=None, grid=None,
                     tails=False):
    """C = A B^T through the library's persistent kernel (bf16 in; bf16 out for the TMA
    epilogue, f32 for the direct one), as the simulator or the GPU computes it; clusters share
    ``multicast``'s tile, one CTA per cluster tile (``grid``: that many CTAs, each taking tiles in turn).
    ``timeline``: a :class:`nbwgmma.timeline.Timeline` the kernel records into (``trace=True``);
    ``tails``: B's last tile column and A's last tile row through maps of their rows (b_tail, a_tail;
    True or ``"ab"`` both, ``"b"`` or ``"a"`` one)."""
    m, k = a.shape
    n = b.shape[0]
    cfg = GemmConfig("f32.bf16.bf16", bm=bm, bn=bn, cluster=cluster, epilogue=epilogue,
                     out="bf16" if epilogue == "tma" else "f32", multicast=multicast,
                     trace=timeline is not None, b_tail=tails is True or "b" in (tails or ""),
                     a_tail=tails is True or "a" in (tails or ""))
    share_a = multicast == "A"
    da, db = cuda.to_device(bf16_bits(a)), cuda.to_device(bf16_bits(b))
    ta = TensorMap(da, (cfg.bm // (cluster if share_a else 1), cfg.bk), dtype="bf16")
    tb = TensorMap(db, (cfg.bn // (1 if share_a else cluster), cfg.bk), dtype="bf16")
    maps = (ta, tb)
    from nbwgmma.frontend.tails import tail_rows

    if cfg.b_tail:
        maps += (TensorMap(db, (tail_rows(n, cfg.bn), cfg.bk), dtype="bf16"),)
    if cfg.a_tail:
        maps += (TensorMap(da, (tail_rows(m, cfg.bm), cfg.bk), dtype="bf16"),)
    if epilogue == "tma":
        c = cuda.to_device(np.full((m, n), 0x7FC0, np.uint16))  # bf16 NaN
        carg = TensorMap(c, (64, 64), dtype="bf16").address
    else:
        c = cuda.to_device(np.full((m, n), np.nan, np.float32))
        carg = c
    tiles = TileScheduler(cfg.bm, cfg.bn, cfg.bk, cluster=cluster, along="N" if share_a else "M").units(m, n, k)
    launch(gemm_kernel(cfg), grid or cluster * tiles, cfg.threads,
           tuple(t.address for t in maps) + (carg, np.int32(m), np.int32(n), np.int32(k), np.float32(1))
           + ((timeline.array,) if timeline is not None else ()),
           smem=cfg.smem_bytes + 1023, cluster=(cluster, 1, 1) if cluster > 1 else None)
    out = c.copy_to_host()
    return (out.astype(np.uint32) << 16).view(np.float32) if epilogue == "tma" else out


def run_ws_example(mod, k, seed=0):
    """(C, float64 reference) of ``examples/gemm_3_warp_specialized.py``'s kernel (or a
    variant ``mod`` of it) on one 128x256 tile of small integers with K = ``k``."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-3, 4, (128, k)).astype(np.float64)
    b = rng.integers(-3, 4, (256, k)).astype(np.float64)
    ta = TensorMap(cuda.to_device(bf16_bits(a)), (mod.BM, mod.BK), dtype="bf16", swizzle="128B")
    tb = TensorMap(cuda.to_device(bf16_bits(b)), (mod.BN, mod.BK), dtype="bf16", swizzle="128B")
    c = cuda.to_device(np.full((128, 256), np.nan, np.float32))
    launch(mod.gemm_ws, (1, 1), 384, (ta.address, tb.address, c, np.int32(k)), smem=mod.STAGES * mod.STAGE + 1023)
    return c.copy_to_host(), a @ b.T


def fp8_out_with_ties(fmt, n):
    """fp8 codes of ``matmul`` (small integers, ``scale_out`` 1/16) with many results halfway
    between two codes (x.125 between 2 and 4 in e4m3: ties, rounded to the even code) and
    zeros; the codes beside the float64 results times 1/16."""
    from nbwgmma import matmul

    rng = np.random.default_rng(11)
    a = rng.integers(-3, 4, (200, 64)).astype(np.float64)
    b = rng.integers(-3, 4, (n, 64)).astype(np.float64)
    out = cuda.to_device(np.full((200, n), 0xAA, np.uint8))
    matmul(cuda.to_device(bf16_bits(a)), cuda.to_device(bf16_bits(b)).T, out=out, out_dtype=fmt, in_dtype="bf16",
           scale_out=1 / 16)
    return out.copy_to_host()


@cuda.jit
def _shared_atomics(out):
    s = cuda.shared.array(4, np.int32)
    f = cuda.shared.array(2, np.float32)
    t = cuda.threadIdx.x
    if t == 0:
        s[0] = 0
        s[1] = -1
        s[2] = 100
        s[3] = 0
        f[0] = 0.0
        f[1] = -1.0
    cuda.syncthreads()
    cuda.atomic.add(s, 0, t)
    cuda.atomic.max(s, 1, t % 37)
    cuda.atomic.add(s, 2, -1)
    cuda.atomic.or_(s, 3, 1 << (t % 31))
    cuda.atomic.add(f, 0, 0.5)
    cuda.atomic.max(f, 1, np.float32(t) * 0.25)
    cuda.syncthreads()
    if t < 4:
        out[t] = s[t]
    if t < 2:
        out[4 + t] = np.int32(f[t] * 4)


@cuda.jit
def _warp_votes(x, out, n):
    t = cuda.threadIdx.x
    if t >= n:
        return  # lanes that return: the full-mask functions go on without them
    v = x[t]
    out[t, 0] = v + cuda.shfl_xor_sync(0xFFFFFFFF, v, 1)
    b = cuda.ballot_sync(0xFFFFFFFF, v % 3 == 0)
    out[t, 1] = b & 0xFFFFFFFF  # (the mask's 32 bits: a negative int32 on the GPU where lane 31 votes)
    out[t, 2] = cuda.popc(b)
    out[t, 3] = cuda.match_any_sync(0xFFFFFFFF, v % 4) & 0xFFFFFFFF
    m, same = cuda.match_all_sync(0xFFFFFFFF, v // 1024)
    out[t, 4] = m & 0xFFFFFFFF
    out[t, 5] = same


@cuda.jit
def _partial_warp_activemask(out):
    out[cuda.threadIdx.x] = cuda.activemask()


@cuda.jit
def _row_view_transpose(inp, out):
    tile = cuda.shared.array((8, 8), np.float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    tile[ty][tx] = inp[ty, tx]
    cuda.syncthreads()
    out[ty, tx] = tile[tx, ty]


def plain_cuda_cases(got):
    """Plain Numba-CUDA kernels the simulator once rejected or got wrong: shared atomics, warp
    functions in a partial warp and with lanes that returned, a view of a shared array."""
    out = cuda.to_device(np.full(6, -7, np.int32))
    launch(_shared_atomics, 1, 96, (out,))
    got["shared_atomics"] = out.copy_to_host()
    x = (np.arange(48) * 7 % 11).astype(np.int32)
    out = cuda.to_device(np.full((48, 6), -7, np.int64))
    launch(_warp_votes, 1, 48, (cuda.to_device(x), out, 40))
    got["warp_votes_partial_exited"] = out.copy_to_host()
    out = cuda.to_device(np.zeros(48, np.uint32))
    launch(_partial_warp_activemask, 1, 48, (out,))
    got["activemask_partial_warp"] = out.copy_to_host()
    x = np.arange(64, dtype=np.float32).reshape(8, 8)
    out = cuda.to_device(np.full((8, 8), np.nan, np.float32))
    launch(_row_view_transpose, 1, (8, 8, 1), (cuda.to_device(x), out))
    got["row_view_transpose"] = out.copy_to_host()


def outputs():
    """{case: output array} of every case, on whatever runs the kernels (GPU or simulator)."""
    from nbwgmma.kernels.wgmma_tile import TileProblem, run_tile

    got = {}

    def capture(mod, attr, name):
        orig = getattr(mod, attr)

        def wrapper(*a, **kw):
            got[name] = out = orig(*a, **kw)
            return out
        setattr(mod, attr, wrapper)

    for name, attr in (("wgmma_m64n8k16", "run_tile"), ("wgmma_m64n8k32_swizzle64", "run_tile"),
                       ("wgmma_m64n256k16_swizzle128", "run_tile"), ("wgmma_rs_ldmatrix", "run")):
        mod = load_example(name)
        capture(mod, attr, name)
        mod.main()
    tma = load_example("tma_wgmma_tile")
    rng = np.random.default_rng(0)
    got["tma_wgmma_tile"] = tma.run(rng.integers(-4, 5, (64, 64)), rng.integers(-4, 5, (64, 64)))[0]
    for cluster, epi in ((1, "direct"), (1, "tma"), (2, "tma")):
        rng = np.random.default_rng(cluster)
        a = rng.integers(-3, 4, (256, 128)).astype(np.float64)
        b = rng.integers(-3, 4, (256, 128)).astype(np.float64)
        got[f"gemm_cluster{cluster}_{epi}"] = run_library_gemm(a, b, cluster, epi)
    for fmt, n in (("e4m3", 80), ("e5m2", 72)):  # codes through TMA (80-byte rows) and plain stores (72)
        got[f"matmul_{fmt}_out_ties"] = fp8_out_with_ties(fmt, n)
    ws = load_example("gemm_3_warp_specialized")
    for k in (1024, 4096):
        got[f"gemm_3_warp_specialized_k{k}"] = run_ws_example(ws, k)[0]
    rng = np.random.default_rng(4)
    p = TileProblem("f32.bf16.bf16", 8, 1, rng.integers(-4, 5, (64, 16)), rng.integers(-4, 5, (8, 16)), swizzle="none")
    p.desc_a = p.desc_a - np.uint64(8 << 32)  # SBO 256 -> 128 bytes: a wrong descriptor
    got["wrong_sbo"] = run_tile(p)
    plain_cuda_cases(got)
    return got


def main(argv):
    if argv[0] == "--compare":
        a, b = np.load(argv[1]), np.load(argv[2])
        assert sorted(a.files) == sorted(b.files), (a.files, b.files)
        bad = 0
        for k in sorted(a.files):
            same = a[k].tobytes() == b[k].tobytes()
            bad += not same
            print(f"{k:32s} {a[k].shape} {'bit-identical' if same else 'DIFFERENT'}")
        print(f"{len(a.files) - bad} of {len(a.files)} outputs bit-identical")
        return 1 if bad else 0
    np.savez(argv[0], **outputs())
    print(f"wrote {argv[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
