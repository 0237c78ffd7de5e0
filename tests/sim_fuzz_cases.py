"""Seeded random ``nbwgmma.matmul`` calls in Numba's CUDA simulator (run by tests/test_sim.py in a
child process with NUMBA_ENABLE_CUDASIM=1; also by hand: NUMBA_ENABLE_CUDASIM=1 python -m pytest
tests/sim_fuzz_cases.py).

Each case draws from its own seed: input types (mixed fp8 included), operand layouts, views with a
padded leading dimension and an element offset, a batch (A or B per product or one for all), an output
type and array (new, given, every other column of a wider one, padded rows), a ``config`` of random
keys (tiles, stages, clusters, multicast, split-K, stream-K, K halves, swaps, epilogue kinds, C in
parts, consumers), and an epilogue: ``alpha``, ``beta * c`` (``c`` may be ``out``), a bias per
row or column, any activation, a user function with or without an extra vector, fp8 outputs with
``scale_out`` and ``amax``, fp8 scales as numbers, per row and column or per 1 x 128 and 128 x 128
block (the block-scaled kernel); in the simulator also a GPU of a few SMs (persistent CTAs walking
several tiles) and either order of the clusters; and an out that shares A's buffer, its columns
beside A's (it must run, A untouched) or over A's last column (it must be refused). ``grouped_matmul``'s cases draw its three forms (groups of rows,
the masked layout, the K-grouped weight gradients), groups of any size (empty ones included),
ends past A's rows, trailing rows no group covers, both layouts of B, a bias per group or for
all, any activation, block-scaled fp8 groups, and either schedule; the 2:4 sparse cases both forms
(``w24 @ y``, ``x @ w24.t()``), bf16, f16 and e4m3 weights, either layout of the dense operand and
the sparse config keys (``bn``, ``stages``, ``group_m``, ``out_blocks``, ``cluster``).

A case passes when the call is refused with a :class:`nbwgmma.MatmulError` (a config or
combination not built says so; a refusal of the default path's own kernel, a config error with no
``config`` given, fails) or its output matches a float64 reference: exactly (small
integers, power-of-two scales) where nothing rounds but the output type, within the activation's
tolerance where one is drawn; ``amax`` likewise; rows no group computes keep their poison. Any
other exception, a simulator report (a hazard, a hang) or a wrong value fails.

``NBWGMMA_SIM_FUZZ_CASES`` (default 12) cases from ``NBWGMMA_SIM_FUZZ_SEED``; a failure names its
seed: ``NBWGMMA_SIM_FUZZ_SEED=<seed> NBWGMMA_SIM_FUZZ_CASES=1`` replays it.
"""

import contextlib
import math
import os

import numpy as np
from numba import config, cuda
from numba.core.errors import NumbaError

from nbwgmma import MatmulError, matmul
from nbwgmma.layout.wgmma_model import decode_elements, encode_elements


CASES = int(os.environ.get("NBWGMMA_SIM_FUZZ_CASES", "12"))
SEED = int(os.environ.get("NBWGMMA_SIM_FUZZ_SEED", "20261205"))

RAW = {"bf16": np.uint16, "f16": np.float16, "f32": np.float32, "e4m3": np.uint8, "e5m2": np.uint8}
POISON = {np.uint16: 0x7FC0, np.uint8: 0x7F}  # NaN as bf16, e4m3 and e5m2
FP8 = ("e4m3", "e5m2")
TILES = [(64, 8), (64, 40), (64, 64), (64, 128), (64, 256), (128, 64), (128, 72), (128, 96), (128, 128), (128, 144),
         (128, 160), (128, 176), (128, 192), (128, 208), (128, 256), (192, 128), (192, 144), (256, 128), (256, 136),
         (256, 160)]
#: config keys drawn: (key, probability, values)
KEYS = [("stages", .15, [2, 3, 4, 6]), ("group_m", .1, [1, 2, 8]), ("cluster", .15, [2, 4]), ("multicast", .08, ["A", "B"]),
        ("split", .1, [2, 3, 4]), ("swap", .12, [0, 1]), ("stream_k", .08, [1]), ("cluster_k", .05, [2]),
        ("epilogue", .15, ["direct", "tma", "rows"]), ("c_parts", .06, [2, 4]), ("c_slots", .04, [2]),
        ("consumers", .05, [1, 2, 3])]
#: config keys a batch refuses (drawn for single products only)
BATCH_REFUSES = ("split", "stream_k", "cluster_k", "swap")
ACTIVATIONS = {
    "relu": lambda x: np.maximum(x, 0),
    "gelu": lambda x: 0.5 * x * (1 + np.vectorize(math.erf, otypes=[float])(x / math.sqrt(2))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
    "silu": lambda x: x / (1 + np.exp(-np.maximum(x, -700))),
    "sigmoid": lambda x: 1 / (1 + np.exp(-np.maximum(x, -700))),
}


def user_fn(v, row, col):
    return v * 2.0 + row - col


def user_fn_x(v, row, col, x):
    return v - x


def draw(seed):
    r = np.random.default_rng(seed)
    t = str(r.choice(["bf16", "f16", "f32", "e4m3", "e5m2"], p=[.35, .25, .1, .2, .1]))
    tb = str(r.choice(FP8)) if t in FP8 and r.random() < .3 else t
    batch = int(r.choice([0, 0, 0, 2, 3]))

    def size(hi):
        return int(r.integers(1, 17) if r.random() < .2 else r.integers(1, hi))

    m, n, k = size(200 if batch else 400), size(200 if batch else 400), size(300)
    c = dict(seed=seed, t=t, tb=tb, m=m, n=n, k=k, batch=batch, b_shared=bool(batch and r.random() < .3),
             a_k=bool(r.random() < .6), b_k=bool(r.random() < .6),
             pad_a=int(r.choice([0, 0, 8, r.integers(1, 9)])), pad_b=int(r.choice([0, 0, 8, r.integers(1, 9)])),
             off_a=int(r.choice([0, 0, 0, r.integers(1, 5)])), off_b=int(r.choice([0, 0, 0, r.integers(1, 5)])))
    outs = ["bf16", "f16", "f32", "e4m3", "e5m2"] if t in FP8 else ["f32"] if t == "f32" else [t, t, "f32", "e4m3"]
    c["odt"] = str(r.choice(outs))
    c["out"] = str(r.choice(["new", "given", "given", "strided", "padded"]))
    cfg = {}
    if r.random() < .6:
        bm, bn = TILES[r.integers(len(TILES))]
        cfg.update(bm=int(bm), bn=int(bn))
    for key, p, values in KEYS:
        if r.random() < p and not (batch and key in BATCH_REFUSES):
            v = values[r.integers(len(values))]
            cfg[key] = v if isinstance(v, str) else int(v)
    c["config"] = cfg or None
    c["activation"] = str(r.choice(list(ACTIVATIONS))) if r.random() < .3 else None
    c["bias"] = str(r.choice(["col", "row"])) if r.random() < .3 else None
    c["bias_type"] = str(r.choice(["f32", "f16"]))
    c["alpha"] = float(r.choice([0.5, 2.0, -1.0])) if r.random() < .2 else None
    c["c"] = str(r.choice(["f32", "out type", "out"])) if r.random() < .2 else None
    c["beta"] = float(r.choice([1.0, 0.5, -2.0]))
    c["user"] = int(r.choice([1, 2])) if r.random() < .15 else 0
    fp8_out = c["odt"] in FP8
    c["scale_out"] = float(r.choice([0.5, 1.0, 4.0])) if fp8_out and r.random() < .6 else None
    c["amax"] = bool(fp8_out and r.random() < .5)
    c["scales"] = str(r.choice(["numbers", "none"] + ([] if batch else ["tensors"] * 2))) if t in FP8 else "none"
    if c["scales"] == "tensors":  # A's scale per row or 1 x 128 block, B's per column or 128 x 128 block (in
        # b's order, or a weight's (NB, KB) seen transposed); the kernel reads K-major operands, K 16-byte aligned
        c["scale_a"], c["scale_b"] = str(r.choice(["row", "block"])), str(r.choice(["col", "block", "weight block"]))
        if r.random() < .8:  # (rows 16-byte aligned: padded by 16 elements or none, no offset)
            c.update(a_k=True, b_k=True, k=-(-k // 16) * 16, pad_a=int(r.choice([0, 16])), pad_b=int(r.choice([0, 16])),
                     off_a=0, off_b=0)
        if r.random() < .9:  # (what tensor scales refuse so far: a config, fp8 outputs, C, a user function)
            c.update(config=None, c=None, user=0, scale_out=None, amax=False,
                     odt=c["odt"] if c["odt"] not in FP8 else "bf16")
    # in the simulator, a GPU of a few SMs (persistent CTAs walking several tiles) and the clusters'
    # order (NBWGMMA_SIM_ORDER): a shared tile's parts summed in either order
    c["sms"], c["order"] = int(r.choice([132, 132, 1, 2, 3, 5])), str(r.choice(["forward", "reverse"]))
    c["a_shared"] = bool(batch and not c["b_shared"] and r.random() < .25)  # (M, K) @ (batch, K, N)
    if c["config"] is None and r.random() < .1:
        c["config"] = "auto"  # (nothing to time in the simulator: the tile model's pick)
    # out beside A in one buffer (its columns after A's: apart, so it runs) or over A's last column
    # (refused); 16-bit and f32 products into their own type
    shared = not batch and c["a_k"] and t in ("bf16", "f16", "f32") and c["odt"] == t and c["scales"] == "none"
    c["alias"] = str(r.choice(["beside", "over"])) if shared and r.random() < .15 else None
    return c


def bits(x, t):
    x = np.ascontiguousarray(x)
    if t in ("f16", "f32"):
        return x.astype(RAW[t])
    return encode_elements(x, t).view(RAW[t]).reshape(x.shape)


def strided(buf, off, shape, strides):
    """The view of 1-D device array ``buf`` from its element ``off``, of ``shape`` and ``strides``
    (in elements), no copy: in the simulator or on a GPU (whose arrays take no ``...`` in an
    index, and whose ``.T`` is a transposed copy)."""
    st = tuple(int(x) * buf.dtype.itemsize for x in strides)
    if config.ENABLE_CUDASIM:
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(np.lib.stride_tricks.as_strided(buf._ary[off:], tuple(shape), st))
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    return DeviceNDArray(tuple(shape), st, buf.dtype, gpu_data=buf[off:].gpu_data)


def swap_last(d):
    """Device array ``d`` (G, R, C), contiguous, seen as (G, C, R), no copy."""
    g, r, c = d.shape
    return strided(d.reshape(-1), 0, (g, c, r), (r * c, 1, c))


class Buffer:
    """A poisoned 1-D buffer of ``size`` elements of ``dtype`` on the device, values placed in it
    at strided places first (``place``), then views of it (``view``); ``stray()`` tells whether
    anything outside the views handed out as outputs changed."""

    def __init__(self, size, dtype):
        self.host = np.full(size, POISON.get(np.dtype(dtype).type, np.nan), dtype)
        self.dev, self.outs = None, []

    def _at(self, arr, off, shape, strides):
        st = tuple(int(x) * arr.dtype.itemsize for x in strides)
        return np.lib.stride_tricks.as_strided(arr[off:], tuple(shape), st)

    def place(self, values, off, strides):
        self._at(self.host, off, values.shape, strides)[...] = values

    def view(self, off, shape, strides, out=False):
        if self.dev is None:
            self.dev = cuda.to_device(self.host)
        if out:
            self.outs.append((off, shape, strides))
        return strided(self.dev, off, shape, strides)

    def stray(self) -> int:
        """How many elements outside the output views differ from what was placed."""
        written = np.zeros(self.host.size, bool)
        for off, shape, strides in self.outs:
            self._at(written, off, shape, strides)[...] = True
        now = self.dev.copy_to_host()
        same = now.view(f"u{now.dtype.itemsize}") == self.host.view(f"u{now.dtype.itemsize}")
        return int((~same & ~written).sum())


@contextlib.contextmanager
def gpu_of(sms, order):
    """In the simulator: what runs inside sees a GPU of ``sms`` SMs and runs the clusters in
    ``order`` (NBWGMMA_SIM_ORDER); on a GPU, nothing changes."""
    if not config.ENABLE_CUDASIM:
        yield
        return
    import nbwgmma.launch
    from nbwgmma.frontend.matmul import forget_plans

    real, before = nbwgmma.launch.device_limits, os.environ.get("NBWGMMA_SIM_ORDER")
    nbwgmma.launch.device_limits = lambda device=None: {**real(device), "multiprocessors": sms}
    os.environ["NBWGMMA_SIM_ORDER"] = order
    forget_plans()  # (plans are kept per problem class, not per SM count: their grids and workspaces differ)
    try:
        yield
    finally:
        forget_plans()
        nbwgmma.launch.device_limits = real
        if before is None:
            os.environ.pop("NBWGMMA_SIM_ORDER")
        else:
            os.environ["NBWGMMA_SIM_ORDER"] = before


def ulp(x, t):
    """The spacing of type ``t``'s values at ``x`` (its subnormals' below the smallest normal)."""
    mant, emin = {"f32": (23, -126), "bf16": (7, -126), "f16": (10, -14), "e4m3": (3, -6), "e5m2": (2, -14)}[t]
    e = np.floor(np.log2(np.maximum(np.abs(x), 2.0 ** emin)))
    return 2.0 ** (e - mant)


def rounded(x, t):
    """float64 ``x`` as type ``t`` rounds it (nearest even; fp8 saturated)."""
    if t in ("f16", "f32"):
        return x.astype(RAW[t]).astype(np.float64)
    return decode_elements(encode_elements(x.astype(np.float32).astype(np.float64), t), t).reshape(x.shape)


def values(got, odt, shape):
    """The float64 values of the device output ``got`` of type ``odt`` (bf16 and fp8 from their bits)."""
    h = got.copy_to_host()
    if odt == "bf16" or odt in FP8:
        h = decode_elements(np.ascontiguousarray(h).reshape(-1).view(np.uint8), odt)
    return np.asarray(h, np.float64).reshape(shape)


def check_values(h, want, odt, slack=None, where=None):
    """Fail unless ``h`` equals float64 ``want`` rounded to ``odt`` (fp8 saturated), or, given the
    ``slack`` of an activation's f32 error, lies within an ulp of it plus ``slack``; only ``where``
    (a mask) where given."""
    want = rounded(want, odt)
    bad = h != want if slack is None else ~(np.abs(h - want) <= ulp(want, odt) + slack)
    if where is not None:
        bad &= where
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{int(bad.sum())} of {h.size} wrong; first at {i}: got {h[i]}, want {want[i]}")


def operand(x, t, k_major, is_b, pad, off):
    """``x`` ([..., rows, cols]) as a device view, K contiguous or not, inside a poisoned buffer
    whose rows are ``pad`` elements longer, starting ``off`` elements in."""
    h = bits(x, t)
    *lead, rows, cols = h.shape
    last = k_major != is_b  # (A K-major and B N-major have their last dimension contiguous)
    ld = (cols if last else rows) + pad
    mat = ld * (rows if last else cols)
    strides = tuple(mat * int(np.prod(lead[i + 1:], dtype=np.int64)) for i in range(len(lead))) \
        + ((ld, 1) if last else (1, ld))
    buf = Buffer(int(np.prod(lead, dtype=np.int64)) * mat + off, h.dtype)
    buf.place(h, off, strides)
    return buf.view(off, h.shape, strides)


def run_case(c):
    """Run case ``c``: True where it ran and matched, False where refused; raises where wrong."""
    r = np.random.default_rng(c["seed"] + 1)
    m, n, k, odt = c["m"], c["n"], c["k"], c["odt"]
    lead = (c["batch"],) if c["batch"] else ()
    a = r.integers(-3, 4, ((m, k) if c["a_shared"] else lead + (m, k))).astype(np.float64)
    b = r.integers(-3, 4, ((k, n) if c["b_shared"] else lead + (k, n))).astype(np.float64)
    want = a @ b
    kw = {}
    if c["scales"] == "numbers":
        kw.update(scale_a=0.5, scale_b=4.0)
        want = want * 2.0
    elif c["scales"] == "tensors":
        kb, nb = -(-k // 128), -(-n // 128)
        sa = 2.0 ** r.integers(-1, 2, (m, 1) if c["scale_a"] == "row" else (m, kb))
        sb = 2.0 ** r.integers(-1, 2, (1, n) if c["scale_b"] == "col" else (kb, nb))
        per_a = np.repeat(sa, 128, axis=1)[:, :k] if c["scale_a"] == "block" else sa  # (M, K) or (M, 1)
        per_b = np.repeat(np.repeat(sb, 128, axis=0)[:k], 128, axis=1)[:, :n] if c["scale_b"] != "col" else sb
        want = (a * per_a) @ (b * per_b)
        sb_dev = cuda.to_device(sb.astype(np.float32))
        if c["scale_b"] == "weight block":  # (NB, KB) row-major, passed as its transpose
            sb_dev = strided(cuda.to_device(np.ascontiguousarray(sb.T).astype(np.float32).reshape(-1)), 0, sb.shape,
                             (1, sb.shape[0]))
        kw.update(scale_a=cuda.to_device(sa.astype(np.float32)), scale_b=sb_dev)
    if c["alpha"] is not None:
        kw["alpha"] = c["alpha"]
        want = want * c["alpha"]
    fp8_out = odt in FP8
    store = np.uint8 if fp8_out else RAW[odt]
    cv = r.integers(-4, 5, want.shape).astype(np.float64) if c["c"] else None
    c_is_out = c["c"] == "out" and c["out"] != "new" and not fp8_out  # (C in out's own elements)
    out = buf = None
    a_dev = operand(a, c["t"], c["a_k"], False, c["pad_a"], c["off_a"])
    if c["alias"]:  # A [M, K] and out [M, N] columns of one row-major buffer [M, K + N]
        buf = Buffer(m * (k + n), store)
        buf.place(bits(a, odt), 0, (k + n, 1))
        at = k - (c["alias"] == "over")
        if c_is_out:
            buf.place(bits(cv, odt), at, (k + n, 1))
        a_dev, out = buf.view(0, (m, k), (k + n, 1)), buf.view(at, (m, n), (k + n, 1), out=True)
    elif c["out"] != "new":  # out [..., M, N] as is, every other column of a wider one, or rows padded by 3
        width = {"given": n, "strided": 2 * n + 1, "padded": n + 3}[c["out"]]
        lead_n = int(np.prod(want.shape[:-2], dtype=np.int64))
        strides = ((m * width,) if want.ndim == 3 else ()) + (width, 2 if c["out"] == "strided" else 1)
        at = 1 if c["out"] == "strided" else 0
        buf = Buffer(lead_n * m * width, store)
        if c_is_out:
            buf.place(bits(cv, odt), at, strides)
        out = buf.view(at, want.shape, strides, out=True)
    if out is not None:
        kw["out"] = out
    if out is None or store in (np.uint8, np.uint16):
        kw["out_dtype"] = odt
    if c["c"]:
        kw["c"] = out if c_is_out else cuda.to_device(bits(cv, "f32" if c["c"] == "f32" or fp8_out else odt))
        kw["beta"] = c["beta"]
        want = want + c["beta"] * cv
    if c["bias"]:
        bv = r.integers(-4, 5, (n,) if c["bias"] == "col" else (m, 1)).astype(np.float64)
        kw["bias"] = cuda.to_device(bv.astype(RAW[c["bias_type"]]))
        want = want + bv
    exact = c["activation"] in (None, "relu")
    pre = want  # (the activation's input: its f32 error grows with it)
    after = (2.0 if c["user"] == 1 else 1.0) * (c["scale_out"] or 1.0)  # (what multiplies the activation's value)
    if c["activation"]:
        kw["activation"] = c["activation"]
        want = ACTIVATIONS[c["activation"]](want)
    if c["user"] == 1:
        kw["epilogue"] = user_fn
        want = want * 2.0 + np.arange(m)[:, None] - np.arange(n)[None, :]
    elif c["user"] == 2:
        xv = r.integers(-4, 5, (n,)).astype(np.float64)
        kw.update(epilogue=user_fn_x, epilogue_args=(cuda.to_device(xv.astype(np.float32)),))
        want = want - xv
    amax = float(np.abs(want).max()) if want.size else 0.0
    if fp8_out:
        if c["scale_out"] is not None:
            kw["scale_out"] = c["scale_out"]
            want = want * c["scale_out"]
        if c["amax"]:
            kw["amax"] = cuda.to_device(np.zeros(1, np.float32))
    raw = c["t"] in ("bf16",) + FP8
    # ("auto" on a GPU would time and keep its choice on disk: a replay could run another kernel)
    given = None if c["config"] == "auto" and not config.ENABLE_CUDASIM else c["config"]
    try:
        with gpu_of(c["sms"], c["order"]):
            got = matmul(a_dev, operand(b, c["tb"], c["b_k"], True, c["pad_b"], c["off_b"]),
                         in_dtype=(c["t"], c["tb"]) if raw else None, config=given, **kw)
    except MatmulError as e:
        if c["alias"] == "beside" and "overlap" in str(e):
            raise AssertionError(f"an out beside A (no shared element) was refused: {e}") from None
        if c["user"] and isinstance(e.__cause__, NumbaError):  # (user_fn compiles: the kernel around it did not)
            raise AssertionError(f"a valid epilogue function was refused: {e}") from None
        return refused(e, given)
    assert c["alias"] != "over", "an out over A's last column was not refused"
    assert out is None or got is out
    if buf is not None:  # nothing outside out's elements written: A beside it, the columns between, the padding
        assert buf.stray() == 0, f"{buf.stray()} elements outside out were written"
    # (not exact: the f32 activation's error, scaled by what follows it)
    check_values(values(got, odt, want.shape), want, odt, None if exact else 1e-5 * after * (1 + np.abs(pre)))
    if c["amax"]:
        got_amax = float(kw["amax"].copy_to_host()[0])
        assert abs(got_amax - amax) <= (0 if exact else 1e-3 * amax + 1e-3), f"amax {got_amax}, want {amax}"
    return True


def refused(error, given):
    """False (the case did not run) for a refusal; raises where the default path (no ``config``)
    refused its own choice of kernel."""
    if given in (None, "auto") and "config" in str(error):
        raise AssertionError(f"the default path refused its own kernel: {error}") from None
    return False


def check_cases(draw_case, run, cases, seed, label):
    """Run ``run(draw_case(s))`` for ``cases`` seeds from ``seed``; fail naming every failing seed, or
    where fewer than a third of the cases ran (the rest refused: the draw then needs mending)."""
    failures, ran = [], 0
    for s in range(seed, seed + cases):
        c = draw_case(s)
        try:
            ran += run(c)
        except Exception as e:  # noqa: BLE001 - collected, each naming its seed
            failures.append(f"seed {s}: {type(e).__name__}: {str(e)[:1500]}\n  case {c}")
    print(f"{label} fuzz: {cases} cases from seed {seed}, {ran} ran, {len(failures)} failed")
    assert not failures, "replay with NBWGMMA_SIM_FUZZ_SEED=<seed> NBWGMMA_SIM_FUZZ_CASES=1:\n" + "\n".join(failures)
    assert ran >= cases // 3, f"only {ran} of {cases} cases ran (the rest refused): the draw needs mending"


def test_random_calls_are_refused_or_right():
    check_cases(draw, run_case, CASES, SEED, "matmul")

def draw_grouped(seed):
    r = np.random.default_rng(seed)
    form = str(r.choice(["rows", "masked", "wgrad"], p=[.55, .25, .2]))
    t = str(r.choice(["bf16", "f16", "e4m3"], p=[.45, .3, .25])) if form != "wgrad" else str(r.choice(["bf16", "f16"]))
    groups = int(r.integers(1, 5))
    sizes = [int(r.choice([0, r.integers(1, 17), r.integers(1, 260)], p=[.15, .25, .6])) for _ in range(groups)]
    step = 16 if t == "e4m3" else 8  # (16-byte rows, which the grouped GEMM needs of B and A, mostly)

    def aligned(hi):
        v = int(r.integers(1, hi))
        return v if r.random() < .1 else -(-v // step) * step

    c = dict(seed=seed, form=form, t=t, groups=groups, sizes=sizes, k=aligned(300), n=aligned(300),
             m=aligned(200),
             b_nk=bool(r.random() < .6), a_m=bool(r.random() < .7), b_n=bool(r.random() < .7),
             tail=int(r.choice([0, 0, r.integers(1, 20)])), over=bool(r.random() < .15),
             odt=str(r.choice([t if t != "e4m3" else "bf16"] * (4 if form == "wgrad" else 1) + ["f32"])),
             out_given=bool(r.random() < .6),
             bias=str(r.choice(["group", "all"])) if form != "wgrad" and r.random() < .35 else None,
             activation=str(r.choice(list(ACTIVATIONS))) if form != "wgrad" and r.random() < .3 else None,
             cooperative_rows=int(r.choice([0, 128, 10 ** 9])))
    return c


def _pow2(r, shape):
    return np.exp2(r.integers(-2, 3, shape)).astype(np.float64)


def _block_scaled(a, w, sa, sw):
    """float64 ``sum_kb (a_kb @ w_kb^T) * sa[:, kb] * sw[nb, kb]``: one group, w [N, K]."""
    out = np.zeros((a.shape[0], w.shape[0]))
    for kb in range(-(-a.shape[1] // 128)):
        blk = slice(128 * kb, 128 * kb + 128)
        out += (a[:, blk] @ w[:, blk].T) * sa[:, kb][:, None] * np.repeat(sw[:, kb], 128)[:w.shape[0]][None, :]
    return out


def run_grouped_case(c):
    """Run grouped case ``c``: True where it ran and matched, False where refused; raises where wrong."""
    from nbwgmma import grouped_matmul
    import nbwgmma.frontend.grouped as grouped

    r = np.random.default_rng(c["seed"] + 1)
    g_n, n, k, t, odt = c["groups"], c["n"], c["k"], c["t"], c["odt"]
    kw = dict(in_dtype=t if t != "f16" else None, out_dtype=odt)
    if c["form"] == "wgrad":
        ends = np.cumsum(c["sizes"])
        total = int(ends[-1]) + c["tail"]
        a = r.integers(-3, 4, (c["m"], total)).astype(np.float64)
        b = r.integers(-3, 4, (total, n)).astype(np.float64)
        args = (operand(a, t, not c["a_m"], False, 0, 0), operand(b, t, not c["b_n"], True, 0, 0))
        want = np.stack([a[:, s:e] @ b[s:e] for s, e in zip(np.r_[0, ends[:-1]], ends)])
        live = np.ones(want.shape, bool)
    else:
        if c["form"] == "masked":
            tt = max(c["sizes"] + [1])  # (T: each group's rows)
            rows = g_n * tt
            offs = np.array([s + (5 if c["over"] else 0) for s in c["sizes"]], np.int64)  # counts; past T: clamped
        else:
            ends = np.cumsum(c["sizes"])
            rows = int(ends[-1]) + c["tail"]
            offs = ends.copy()
            if c["over"]:  # an end past A's rows: clamped
                offs[-1] = rows + 7
        starts = (np.r_[0:g_n] * max(c["sizes"] + [1])) if c["form"] == "masked" else np.r_[0, ends[:-1]]
        a = r.integers(-3, 4, (rows, k)).astype(np.float64)
        w = r.integers(-3, 4, (g_n, n, k)).astype(np.float64)  # each group's weight [N, K]
        live = np.zeros(rows, bool)
        want = np.zeros((rows, n))
        if t == "e4m3":
            sa, sw = _pow2(r, (rows, -(-k // 128))), _pow2(r, (g_n, -(-n // 128), -(-k // 128)))
            kw.update(scale_a=cuda.to_device(sa.astype(np.float32)), scale_b=cuda.to_device(sw.astype(np.float32)))
        for g in range(g_n):
            s, e = int(starts[g]), int(min(starts[g] + (min(offs[g], tt) if c["form"] == "masked" else ends[g] - starts[g]),
                                           rows))
            if c["form"] == "rows" and g == g_n - 1 and c["over"]:
                e = rows
            live[s:e] = True
            want[s:e] = _block_scaled(a[s:e], w[g], sa[s:e], sw[g]) if t == "e4m3" else a[s:e] @ w[g].T
        if c["bias"]:
            bv = r.integers(-4, 5, (g_n, n) if c["bias"] == "group" else (n,)).astype(np.float64)
            kw["bias"] = cuda.to_device(bv.astype(np.float32))
            group_of = np.zeros(rows, int)
            for g in range(g_n):
                group_of[int(starts[g]):] = g
            want = want + (bv[group_of] if c["bias"] == "group" else bv)
        pre = want
        if c["activation"]:
            kw["activation"] = c["activation"]
            want = ACTIVATIONS[c["activation"]](want)
        b_arr = bits(w, t)  # (G, N, K): B is its transpose (K contiguous), or a (G, K, N) copy
        if c["b_nk"] or t == "e4m3":
            b_dev = swap_last(cuda.to_device(b_arr))
        else:
            b_dev = cuda.to_device(np.ascontiguousarray(b_arr.transpose(0, 2, 1)))
        a_dev = cuda.to_device(bits(a, t))
        if c["form"] == "masked":
            a_dev = a_dev.reshape(g_n, rows // g_n, k)
        args = (a_dev, b_dev)
        offs_dev = offs
    if c["form"] == "wgrad":
        offs_dev = ends
    exact = c["activation"] in (None, "relu")
    store = RAW[odt]
    out_shape = want.shape if c["form"] != "masked" else (g_n, rows // g_n, n)
    if c["out_given"]:
        kw["out"] = cuda.to_device(np.full(out_shape, POISON.get(store, np.nan), store))
    if kw["in_dtype"] is None:
        kw.pop("in_dtype")
    saved = grouped.COOPERATIVE_ROWS
    grouped.COOPERATIVE_ROWS = c["cooperative_rows"]
    try:
        got = grouped_matmul(*args, cuda.to_device(np.asarray(offs_dev, np.int32)), **kw)
    except MatmulError as e:
        return refused(e, None)
    finally:
        grouped.COOPERATIVE_ROWS = saved
    h = values(got, odt, want.shape)
    live = np.broadcast_to(live if live.ndim == h.ndim else live[:, None], h.shape)
    if c["out_given"]:  # rows no group computes keep the poison
        dead = ~live & ~np.isnan(h)
        assert not dead.any(), f"{int(dead.sum())} values written outside the groups' rows"
    check_values(h, want, odt, None if exact else 1e-5 * (1 + np.abs(pre)), where=live)
    return True



def draw_sparse(seed):
    r = np.random.default_rng(seed)
    t = str(r.choice(["bf16", "f16", "e4m3"], p=[.45, .3, .25]))
    left = bool(r.random() < .4)
    cfg = {}
    for key, p, values in [("bn", .4, [64, 128, 256]), ("stages", .15, [2, 3, 4]), ("group_m", .1, [1, 4]),
                           ("out_blocks", .25, [0, 1, 2]), ("cluster", .15, [2, 4])]:
        if r.random() < p and not (key == "out_blocks" and left):  # (out_blocks: the x @ w24.t() form's)
            cfg[key] = int(values[r.integers(len(values))])
    step = 16 if t == "e4m3" else 8  # (the dense operand's rows 16-byte aligned, mostly)

    def aligned(v, p):
        return -(-v // step) * step if r.random() < p else v

    return dict(seed=seed, t=t, left=left, m=int(r.integers(1, 300)),
                k=aligned(4 * int(r.integers(1, 80)), .85), n=aligned(int(r.integers(1, 17) if r.random() < .3
                                                                         else r.integers(1, 200)), .7),
                x_k=bool(r.random() < (.9 if t == "e4m3" else .6)),
                pad=int(r.choice([0, 16, r.integers(1, 9)], p=[.6, .3, .1])),
                off=int(r.choice([0, 16, r.integers(1, 5)], p=[.8, .1, .1])), out_given=bool(r.random() < .6),
                config=cfg or None)


def run_sparse_case(c):
    """Run 2:4 sparse case ``c`` (``w24 @ y`` or ``x @ w24.t()``, the weight [M, K]): True where it
    ran and matched, False where refused; raises where wrong."""
    from nbwgmma import Sparse24
    from nbwgmma.layout import prune_24

    r = np.random.default_rng(c["seed"] + 1)
    t, m, k, n = c["t"], c["m"], c["k"], c["n"]
    w = prune_24(r.integers(-3, 4, (m, k)).astype(np.float64))
    raw = t != "f16"
    w24 = Sparse24.from_dense(cuda.to_device(bits(w, t)), dtype=t if raw else None)
    x = r.integers(-3, 4, (n, k)).astype(np.float64)  # the dense operand's values, [N, K]
    odt = "bf16" if t == "e4m3" else t
    kw = dict(in_dtype=t if raw else None, config=c["config"])
    if c["left"]:  # w24 @ y, y [K, N]: K contiguous (x.T's view) or N contiguous
        dense, want = operand(x.T, t, c["x_k"], True, c["pad"], c["off"]), w @ x.T
    else:  # x @ w24.t(), x [N, K]
        dense, want = operand(x, t, c["x_k"], False, c["pad"], c["off"]), x @ w.T
    if c["out_given"]:
        kw["out"] = out = cuda.to_device(np.full(want.shape, POISON[np.uint16] if odt == "bf16" else np.nan, RAW[odt]))
    try:
        got = matmul(w24, dense, **kw) if c["left"] else matmul(dense, w24.t(), **kw)
    except MatmulError as e:
        return refused(e, c["config"])
    assert not c["out_given"] or got is out
    check_values(values(got, odt, want.shape), want, odt)
    return True


def test_random_sparse_calls_are_refused_or_right():
    check_cases(draw_sparse, run_sparse_case, CASES, SEED, "2:4 sparse matmul")

def test_random_grouped_calls_are_refused_or_right():
    check_cases(draw_grouped, run_grouped_case, CASES, SEED, "grouped_matmul")
