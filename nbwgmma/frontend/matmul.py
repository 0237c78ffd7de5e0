"""``nbwgmma.matmul(a, b)``: the library GEMM behind a NumPy-like call.

A call's arguments are checked (:mod:`~nbwgmma.frontend.args`, over the arrays'
descriptions: :mod:`~nbwgmma.frontend.arrays`); the :class:`~nbwgmma.frontend.plan.Plan`
for its kind of call (types, shapes, strides, alignment, config) is made once and kept
(which path runs: :mod:`nbwgmma.frontend.plan`), with the tile of the tile model
(:mod:`~nbwgmma.frontend.tiles`) or of autotuning (:mod:`~nbwgmma.frontend.autotune`). A plain
``matmul(a, b)`` of arrays like ones seen before skips the checks they passed.

In Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) nothing is timed, so ``config="auto"``
takes the tile model's pick.
"""

from __future__ import annotations

from numba.core.errors import NumbaError

from .. import sim
from ..capture import call_captured, calling, relaxed
from ..errors import MatmulError
from .args import (
    array_error, check_c_apart, check_call, check_reads_apart, described, empty_like_lib, empty_rows16, is_real,
    lib_of, output, real_arg, F32_MAX, scale_product, stream_of, torch_dtype, whole_strides, zero_operands,
)
from .arrays import ArrayInfo, array_info
from .batched import batch_of, batched_matmul, check_batch_options, fold, forget_batched_plans, unfold
from .fused import (
    FP8_OUTS, bias_operand, check_c, check_epilogue, check_fp8_out, epilogue_error, user_epilogue,
)
from .plan import Plan
from .views import nb_stream, zero_fill
from .scaled import QUICK as SCALED_QUICK
from .scaled import is_tensor_scale, quick_key, scaled_matmul
from .sparse import SPARSE_TYPES, sparse_matmul

__all__ = ["matmul", "last_plan", "forget_plans"]

_SIM = sim.enabled()  # Numba's CUDA simulator (chosen once, when Numba is imported)
_PLANS: dict = {}
_LAST = [None]  # the plan of the last call that took the full path


def last_plan():
    """The :class:`~nbwgmma.frontend.plan.Plan` of the last call that took the full path (not
    the fast path of a repeated plain call), or None: benchmarks report its config."""
    return _LAST[0]


def forget_plans():
    """Drop every plan this process made (the full path's and the fast path's), so that the
    next call of each class plans again and takes its kernel from the disk cache: tests of
    the cache and of first calls start from it."""
    _PLANS.clear()
    forget_batched_plans()
    _QUICK.clear()
    SCALED_QUICK.clear()
    _LAST[0] = None


def _autotune_enabled():
    from .autotune import enabled

    return enabled()


def _tuned_config(kind, odt, ia, ib, io, fp8, st, run):
    """``config="auto"``: the configuration tuned for this problem class (timed now with
    ``run(config)`` on the call's arrays if no choice is known; see :mod:`nbwgmma.frontend.autotune`)."""
    from . import autotune

    if _SIM:  # nothing to time: the tile model's pick
        return {}
    probe = Plan(kind, odt, ia, ib, io, {"swap": 0}, fp8)  # paths and epilogue (no compile), unswapped
    m, n, k = probe.mnk
    # the class's epilogue: the one its plan takes (TMA where out allows it; an f32 out's only
    # from more tiles than SMs)
    epilogue = probe.cfg.epilogue
    key = autotune.problem_key(kind, odt, probe.a_path, probe.b_path, epilogue, m, n, k)

    def built(config):
        """Whether ``config``'s kernel for these arrays runs without a compile."""
        try:
            plan = Plan(kind, odt, ia, ib, io, dict(config), fp8)
        except Exception:  # noqa: BLE001 - a config this problem refuses: run() fails at once, no compile
            return True
        try:
            return plan.is_built()
        except Exception:  # noqa: BLE001 - unknown: count it as a compile
            return False

    def configs():
        swapped = Plan(kind, odt, ia, ib, io, {}, fp8).swap  # (the default path's plan: no compile)
        return autotune.candidates(kind, m, n, k, epilogue, probe.config, probe.cfg.b_major, probe.a_path[0], swapped)

    return autotune.choose(key, configs, run, nb_stream(st), built)


def matmul(a, b, *, bias=None, activation=None, epilogue=None, epilogue_args=(), c=None, alpha=1.0, beta=None,
           out=None, out_dtype=None, scale_a=None, scale_b=None, stream=None, config=None, in_dtype=None,
           scale_out=None, amax=None):
    """``a @ b`` for 2-D CUDA arrays (CuPy, PyTorch, Numba), computed by the nbwgmma GEMM; or for
    batches of matrices, ``(batch..., M, K) @ (batch..., K, N)`` as ``torch.bmm`` and ``torch.matmul``
    take them (one launch), and ``(batch..., M, K) @ (K, N)`` (one product of all the rows):
    :mod:`nbwgmma.frontend.batched` says what a batch takes.

    With ``bias`` and/or ``activation`` the epilogue computes ``activation(a @ b + bias)``
    before C is written (:mod:`nbwgmma.frontend.fused`): ``bias`` of shape (N,) or (1, N)
    adds one value per column, (M, 1) one per row; ``activation`` is one of ``relu``,
    ``gelu``, ``gelu_tanh``, ``silu``, ``sigmoid`` (``gelu_tanh`` into a 16-bit or fp8 output
    runs on ``tanh.approx``, as cuBLASLt's fused GELU does: within 6e-6 of the exact function
    before the output's rounding; into f32, within 5e-6 relative). ``epilogue`` is your own function
    ``(value, row, col, *epilogue_args) -> value`` applied last (extras: vectors of one
    value per column, shape (N,) or (1, N), or per row, shape (M, 1), as for ``bias``; or
    numbers). ``c`` (shape (M, N), any strides, may be ``out``
    itself) is added as ``beta * c`` (``beta`` 1 by default where ``c`` is given), and the
    product is scaled by ``alpha``: ``out = epilogue(activation(alpha * a @ b + beta * c +
    bias))``. All of it runs in the library GEMM's own epilogue: every type, layout, output type and
    ``config`` a plain call takes. With ``out_dtype``
    ``"e4m3"``/``"e5m2"`` (or an fp8 ``out``; a ``uint8`` ``out`` holds the codes) each result is
    multiplied by ``scale_out`` (a number, default 1) and rounded to fp8 (nearest even,
    saturated to the largest finite value); ``amax``, a one-element f32 array, receives the
    largest |result| before the scale (an atomic max into its current value: zero it first),
    the recipe of fp8 training (next ``scale_out = fp8 max / amax``) in the same pass.

    bf16/f16 inputs accumulate in f32; f32 inputs run as tf32; fp8 (e4m3/e5m2,
    PyTorch float8 tensors or raw bytes with ``in_dtype``) take per-tensor ``scale_a``/``scale_b``, or f32
    arrays of scales per row (A), per column (B), per 1 x 128 block (A) or 128 x 128 block (B), as
    ``torch._scaled_mm`` takes them (:mod:`nbwgmma.frontend.scaled` lists the layouts). The result
    has ``out_dtype`` (default: the type of ``out`` when given, else the input type,
    bf16 for fp8) and the array kind of ``a``; it is computed on ``stream`` or the caller's current stream.

    ``config`` overrides the kernel's tile parameters (a dict with keys among ``bm``,
    ``bn``, ``stages``, ``group_m``, ``producer_regs``, ``consumer_regs``, ``epilogue``,
    ``c_parts``, ``c_slots``, ``cluster``, ``multicast`` ("A": clusters along N sharing A), ``split``,
    ``stream_k``, ``cluster_k``, ``consumers``; see
    :class:`nbwgmma.kernels.gemm.GemmConfig`;
    and ``swap``: 1 computes C^T = B^T A^T, A's rows the tile's narrow side, as the default does for at most 64
    rows of 16-bit inputs (32 of fp8) with a row-major A; 0 never swaps),
    or is ``"auto"``: the configuration tuned for this problem class, timed on the first
    such call and kept on disk (:mod:`nbwgmma.frontend.autotune`; ``NBWGMMA_AUTOTUNE=1`` makes
    ``"auto"`` the default; calls with scale arrays and 2:4 sparse calls, which have no tuned
    classes, take their default path). The operand layouts and the output type are always taken
    from the arrays.

    ``in_dtype`` names the element type of A and B (or a pair, A's and B's) where their
    arrays hold raw bits: NumPy, hence Numba and CuPy, has no bf16 or fp8 type, so a
    ``uint16`` array of bf16 bits is ``in_dtype="bf16"``, ``uint8`` fp8 bytes ``"e4m3"`` or
    ``"e5m2"``. A ``uint16`` ``out`` or ``c`` holds bf16 bits; f16 has NumPy's ``float16`` (where
    A or B is f16 given as ``uint16`` bits, a ``uint16`` out or C is refused as ambiguous:
    give it as ``float16``, or say ``out_dtype="bf16"``). In Numba's CUDA simulator
    (``NUMBA_ENABLE_CUDASIM=1``) A, B and ``out`` are the simulator's arrays and the kernel runs
    thread by thread (slow: keep problems to a few tiles), with the same checks as on the GPU.
    """
    if type(a) in SPARSE_TYPES or type(b) in SPARSE_TYPES:  # a 2:4-sparse weight: nbwgmma.frontend.sparse
        kw = dict(locals())  # (a copy: a tracer reading the frame's locals adds to the live dict)
        with relaxed(not _SIM and _capturing(b if type(a) in SPARSE_TYPES else a, stream)):  # (nbwgmma.capture)
            return sparse_matmul(**kw)
    # A plain product: no output array but a PyTorch tensor, no stream, config (but "auto") or epilogue
    # but an activation and a PyTorch bias; fp8 scales as plain numbers.
    quick = (out is None or type(out) is _TORCH_TENSOR) and stream is None \
        and (config is None or config == "auto") and in_dtype is None \
        and (bias is None or type(bias) in _TORCH_BIASES) and (activation is None or type(activation) is str) \
        and epilogue is None and not epilogue_args and c is None and beta is None \
        and is_real(alpha) and alpha == 1.0 \
        and scale_out is None and amax is None and type(scale_a) in _PLAIN_SCALES and type(scale_b) in _PLAIN_SCALES \
        and (out_dtype is None or type(out_dtype) in _OUT_DTYPES)
    if quick:
        # the call's kind beyond its arrays: the output type asked for, which scales are given, the
        # activation and the bias's type, shape, strides and device
        variant = (out_dtype, scale_a is None, scale_b is None, config is None, activation,
                   None if bias is None else (bias.dtype, bias.shape, bias.stride(), bias.get_device()),
                   None if out is None else (out.dtype, out.shape, out.stride(), out.data_ptr() & 15, out.get_device()))
        try:
            scale = float((1.0 if scale_a is None else scale_a) * (1.0 if scale_b is None else scale_b))
            quick = abs(scale) <= F32_MAX  # (NaN, inf or past the f32 range: the full path says so)
        except OverflowError:  # (an int past the floats: the full path's checks say so)
            quick = False
    if quick and type(a) is _TORCH_TENSOR and type(b) is _TORCH_TENSOR:
        # The plain ``matmul(a, b)`` of tensors like ones seen before: skip the checks they passed.
        pa, pb = a.data_ptr(), b.data_ptr()
        q = _QUICK.get((a.dtype, a.shape, a.stride(), pa & 15, a.get_device(),
                        b.dtype, b.shape, b.stride(), pb & 15, b.get_device(), variant))
        if q is not None:
            c = q(a, pa, b, pb, scale, bias, out)
            if c is not None:
                return c
    skey = None
    if type(a) is _TORCH_TENSOR and type(b) is _TORCH_TENSOR and type(scale_a) is _TORCH_TENSOR \
            and type(scale_b) is _TORCH_TENSOR and out is None and stream is None and config is None \
            and in_dtype is None and epilogue is None and not epilogue_args and c is None and beta is None \
            and alpha == 1.0 and scale_out is None and amax is None \
            and (out_dtype is None or type(out_dtype) in _OUT_DTYPES) \
            and (bias is None or type(bias) in _TORCH_BIASES) and (activation is None or type(activation) is str):
        # block-scaled tensors like ones seen before: skip the checks they passed (frontend.scaled)
        skey = quick_key(a, b, scale_a, scale_b, out_dtype, bias, activation)
        q = SCALED_QUICK.get(skey)
        if q is not None:
            r = q(a, b, scale_a, scale_b, bias)
            if r is not None:
                return r
    # the full path: a call captured into a CUDA graph may compile, load and allocate (nbwgmma.capture)
    captured = not _SIM and _capturing(a, stream)
    with relaxed(captured):
        return _full(a, b, bias, activation, epilogue, epilogue_args, c, alpha, beta, out, out_dtype, scale_a,
                     scale_b, stream, config, in_dtype, scale_out, amax, quick, variant if quick else None,
                     scale if quick else None, skey, captured)


def _untuned_in_capture(captured) -> bool:
    """Whether ``config="auto"`` just took the default because the call is being captured."""
    if not captured:
        return False
    from . import autotune

    return (autotune.last or {}).get("source") == "captured"


def _capturing(a, stream) -> bool:
    """Whether the call's stream is capturing into a CUDA graph (False where it cannot be told:
    the call's checks name the argument)."""
    try:
        calling(stream_of(lib_of(a), stream))
        return call_captured()
    except Exception:  # noqa: BLE001 - a stream or array the full path refuses
        return False


def _full(a, b, bias, activation, epilogue, epilogue_args, c, alpha, beta, out, out_dtype, scale_a, scale_b, stream,
          config, in_dtype, scale_out, amax, quick, variant, scale, skey, captured):
    """:func:`matmul` past its quick paths (``quick``: a plain call, its ``variant`` and ``scale``
    as :func:`matmul` computed them; ``skey``: a block-scaled call's quick key or None;
    ``captured``: the call is being captured into a CUDA graph)."""
    try:
        ia, ib = array_info(a), array_info(b)
    except TypeError as e:  # a host array, an unknown object, an element type nothing here reads
        raise array_error((("A", a), ("B", b)), e) from None
    if quick:
        qkey = (ia.dtype, ia.shape, ia.strides, ia.ptr & 15, ia.device, ia.kind,
                ib.dtype, ib.shape, ib.strides, ib.ptr & 15, ib.device, variant)
        q = _QUICK.get(qkey)
        if q is not None:
            c = q(a, ia.ptr, b, ib.ptr, scale, bias, out)
            if c is not None:
                return c
    if len(ia.shape) != 2 or len(ib.shape) != 2:  # a batch of products: nbwgmma.frontend.batched
        bt = batch_of(ia, ib)
        check_batch_options(bt, c=c, beta=beta, epilogue=epilogue, epilogue_args=epilogue_args, bias=bias,
                            scale_a=scale_a, scale_b=scale_b, config=config)
        kw = dict(out_dtype=out_dtype, in_dtype=in_dtype, scale_a=scale_a, scale_b=scale_b, alpha=alpha, bias=bias,
                  activation=activation, scale_out=scale_out, amax=amax, stream=stream, config=config, beta=beta,
                  epilogue=epilogue, epilogue_args=epilogue_args)
        folds = bt.folds
        if folds:  # (a C or out whose matrices do not continue one another's rows: the batched kernel)
            ic = described(c, "c") if c is not None else None
            io = described(out, "out") if out is not None else None
            folds = bt.count == 1 or ((ic is None or bt.folds_out(ic)) and (io is None or bt.folds_out(io)))
        if not folds:
            out, plan, io, vec = batched_matmul(a, ia, b, ib, bt, out=out, c=c, **kw)
            if plan is not None:
                _LAST[0] = plan
            if quick and plan is not None:
                _keep_quick(plan, lib_of(a), io, vec, bias, a, b, ia, ib, qkey, variant, bt.lead + plan.out_shape,
                            None if variant[-1] is None else described(out, "out"))
            return out
        # a batch of one, or A's matrices one after the other times a 2-D B: one product of all their rows
        rows, (k, n) = bt.count * bt.a.shape[0], bt.b.shape
        a2, b2 = fold(a, ia, rows), b if bt.sb is None else fold(b, ib, k)
        if c is not None:  # (of the output's shape, its matrices one after the other; or one matrix)
            if not (bt.folds_out(ic) or (bt.count == 1 and ic.shape == (bt.a.shape[0], n))):
                raise MatmulError(f"matmul: c of this batch must have shape {bt.lead + (bt.a.shape[0], n)}, its "
                                  f"matrices one after the other; got shape {ic.shape}, strides {ic.strides} bytes")
            kw["c"] = fold(c, ic, rows)
        if out is None:
            return unfold(matmul(a2, b2, **kw), bt.lead + (bt.a.shape[0], n))
        if not bt.folds_out(io):
            raise MatmulError(f"matmul: out of this batch must have shape {bt.lead + (bt.a.shape[0], n)}, its "
                              f"matrices one after the other (rows of one product); got shape {io.shape}, strides "
                              f"{io.strides} bytes")
        matmul(a2, b2, out=fold(out, io, rows), **kw)
        return out
    try:
        io = array_info(out) if out is not None else None
    except TypeError as e:
        raise array_error((("out", out),), e) from None
    if io is not None:
        whole_strides(io, "out")
    ia, ib, kind, fp8, auto, opts, odt, raw16 = check_call(
        ia, ib, io, in_dtype=in_dtype, out_dtype=out_dtype, scale_a=scale_a, scale_b=scale_b, config=config,
        autotune_default=config is None and _autotune_enabled())
    if is_tensor_scale(scale_a) or is_tensor_scale(scale_b):  # per row, column or block: nbwgmma.frontend.scaled
        with_epilogue = any(x is not None for x in (epilogue, c, beta)) or bool(epilogue_args)
        if odt in ("e4m3", "e5m2") or scale_out is not None or amax is not None:
            raise MatmulError(f"matmul: fp8 outputs (out_dtype e4m3/e5m2, scale_out, amax) take per-tensor scales "
                              f"so far; with scale arrays per row, column or block the output is bf16, f16 or "
                              f"f32 (got out_dtype {odt}{', scale_out' if scale_out is not None else ''}"
                              f"{', amax' if amax is not None else ''})")
        if _TORCH_TENSOR is None and type(a) is type(b) and lib_of(a) == "torch":  # (the next call may be quick)
            _seen_torch(type(a))
        k0 = ia.shape[1] == 0 and (bias is not None or activation is not None)  # (a bias over a zero product)
        out = scaled_matmul(a, ia, b, ib, out, io, kind=kind, odt=odt, scale_a=scale_a, scale_b=scale_b,
                            alpha=alpha, stream=stream, config=None if config == "auto" else config,
                            fused=with_epilogue,
                            bias=None if k0 else bias, activation=None if k0 else activation,
                            quick=None if k0 else skey)
        if not k0:
            return out
        za, zb = zero_operands(lib_of(a), a, ia.shape, (), ib.shape[1], ia.dtype, ib.dtype)
        return matmul(za, zb, bias=bias, activation=activation, out=out, out_dtype=odt, stream=stream,
                      in_dtype=(ia.dtype, ib.dtype) if in_dtype is not None else None)
    (m, k), n = ia.shape, ib.shape[1]
    lib = lib_of(a)
    if lib == "torch" and _TORCH_TENSOR is None and type(a) is type(b):  # (a first call with a bias: the next
        _seen_torch(type(a))                                                # one may take the quick path)
    given = out is not None
    out, io = output(lib, a, out, io, ia, ib, odt)
    st = stream_of(lib, stream)
    alpha = real_arg(alpha, "alpha")
    # A bias, an activation and beta * C fused into the library GEMM's epilogue: its bias vector, C
    epi, vec, cb, beta_c, extras, ufn, fp8_out = {}, None, None, 0.0, (), None, (1.0, None)
    if bias is not None or activation is not None or epilogue is not None or epilogue_args or c is not None \
            or beta is not None or alpha != 1.0 or odt in FP8_OUTS or scale_out is not None or amax is not None:
        if k > 0:
            scale, iamax = check_fp8_out(odt, scale_out, amax, ia.device)
            bi = described(bias, "bias") if bias is not None else None
            where = check_epilogue(activation, bi, m, n, ia.device)
            ic, beta_c = check_c(c, beta, m, n, ia.device, raw_f16=raw16)
            ufn, kinds, infos = user_epilogue(epilogue, epilogue_args, m, n, ia.device)
            if given:  # (vectors the epilogue reads: another tile may already have written them)
                check_reads_apart(io, (("bias", bi), ("amax", iamax),
                                       *((f"epilogue_args[{i}]", info) for i, info in enumerate(infos))))
            own = st if stream is not None else None  # (a strided vector is converted on the call's stream)
            vec = bias_operand(bias, bi, own) if bi is not None else None
            # a user function's vectors read as the bias is (numbers: f32 arguments)
            extras = tuple(float(x) if info is None else bias_operand(x, info, own)
                           for x, info in zip(epilogue_args, infos))
            epi = {key: v for key, v in (("bias", where), ("act", activation), ("user", ufn)) if v is not None}
            if vec is not None:
                epi["bias_type"] = vec[0].dtype
            if kinds:
                epi["extras"] = tuple((kd, "f32" if kd == "scalar" else x[0].dtype) for kd, x in zip(kinds, extras))
            if ic is not None:
                if given:
                    check_c_apart(ic, io)
                cb = (ic, c)
            if iamax is not None:
                epi["amax"] = True
            fp8_out = (scale, None if iamax is None else (iamax, amax))
        elif bias is None and activation is None and epilogue is None and not epilogue_args \
                and (c is None and beta is None
                     or c is not None and check_c(c, beta, m, n, ia.device, raw_f16=raw16)[0] is None) \
                or m == 0 or n == 0:  # K = 0 and only an fp8 output, alpha or a C that beta = 0 leaves unread:
            if m == 0 or n == 0:  # an empty output: nothing runs, but the options are checked as in any call
                check_epilogue(activation, described(bias, "bias") if bias is not None else None, m, n, ia.device)
                check_c(c, beta, m, n, ia.device, raw_f16=raw16)
                user_epilogue(epilogue, epilogue_args, m, n, ia.device)
            check_fp8_out(odt, scale_out, amax, ia.device)  # zeros (amax stays as it is); an empty output: nothing
        else:  # a bias, an activation, C or your function over a zero product: the epilogue over zeros of K = 16
            za, zb = zero_operands(lib, a, ia.shape, (), n, ia.dtype, ib.dtype)
            return matmul(za, zb, bias=bias, activation=activation, epilogue=epilogue, epilogue_args=epilogue_args,
                          c=c, alpha=alpha, beta=beta, out=out, out_dtype=odt, scale_a=scale_a, scale_b=scale_b,
                          stream=stream, in_dtype=(ia.dtype, ib.dtype) if in_dtype is not None else None,
                          scale_out=scale_out, amax=amax)
    if m == 0 or n == 0:
        return out
    if k == 0:
        zero_fill(io, out, st)
        return out

    if scale_a is not None or scale_b is not None:  # (folded into alpha, an f32 in the kernel)
        alpha = real_arg(float(alpha) * scale_product(scale_a, scale_b), "alpha * scale_a * scale_b")
    scaled = fp8 or alpha != 1.0
    key = (kind, odt, ia.shape, ia.strides, ia.ptr % 16, ib.shape, ib.strides, ib.ptr % 16, io.strides, io.ptr % 16,
           ia.device, "auto" if auto else tuple(sorted(opts.items())) if opts else (), tuple(sorted(epi.items())),
           scaled, None if cb is None else (cb[0].dtype, cb[0].strides))
    plan = _PLANS.get(key)
    untuned = False  # ("auto" untuned inside a capture: the plan is not kept, so that an eager call tunes)
    if plan is None:
        if auto and cb is None:  # (tuning runs into out, which may be C itself: with C the tile model picks)
            opts = _tuned_config(kind, odt, ia, ib, io, fp8, st,
                                 lambda cfg: matmul(a, b, out=out, scale_a=scale_a, scale_b=scale_b, stream=st,
                                                    config=cfg))
            untuned = _untuned_in_capture(captured)
        plan = Plan(kind, odt, ia, ib, io, {**opts, **epi}, scaled, None if cb is None else cb[0])
        if len(_PLANS) >= 256:
            _PLANS.clear()
        if not untuned:
            _PLANS[key] = plan
    _LAST[0] = plan
    if ufn is None:
        plan(a, ia, b, ib, out, io, alpha, st, vec, cb, beta_c, (), *fp8_out)
    else:
        try:
            plan(a, ia, b, ib, out, io, alpha, st, vec, cb, beta_c, extras, *fp8_out)
        except NumbaError as e:  # the user's function does not compile: nothing was launched
            raise epilogue_error(ufn, kinds, e) from e
    if quick and not untuned:
        _keep_quick(plan, lib, io, vec, bias, a, b, ia, ib, qkey, variant, given=None if variant[-1] is None else io)
    return out


def _keep_quick(plan, lib, io, vec, bias, a, b, ia, ib, qkey, variant, batch_shape=None, given=None):
    """After a plain call's full path: its :class:`_Quick` for the next calls like it (operands TMA
    cannot read staged by the plan at each call), where the plan reads its bias in place (``io``: the
    output's description, of one matrix of a batch whose output has ``batch_shape``; ``given``: the
    whole of an ``out`` given)."""
    if not (plan.launcher is not None and io.ptr % 16 == 0
            and (vec is None or vec[1] is bias)):  # (a bias read in place)
        return
    if len(_QUICK) >= 256:
        _QUICK.clear()
    # a given out's bytes and the operands', from their first elements: a next out must overlap neither
    apart = None if given is None else tuple(x - info.ptr for info in (ia, ib, given) for x in info.byte_range())
    q = _Quick(plan, lib, plan.odt, io, None if vec is None else vec[0], batch_shape, apart)
    _QUICK[qkey] = q
    if lib == "torch":
        if type(a) is type(b):
            _seen_torch(type(a))
        _QUICK[(a.dtype, a.shape, a.stride(), ia.ptr & 15, a.get_device(),
                b.dtype, b.shape, b.stride(), ib.ptr & 15, b.get_device(), variant)] = q


_QUICK: dict = {}
_PLAIN_SCALES = (type(None), float, int)  # fp8 scales the quick path takes (tensors of scales: the full path)
_TORCH_TENSOR = None  # torch.Tensor once a tensor went through matmul (no torch import here)
_TORCH_BIASES = ()  # the bias types the quick path takes: torch.Tensor and nn.Parameter (a Linear's bias)
_OUT_DTYPES = (str, type)  # out_dtype's types the quick path takes: names, NumPy scalar types (np.float32), torch.dtype


def _seen_torch(tensor_type):
    """Remember PyTorch's tensor type (and ``nn.Parameter``) for the quick path's type checks."""
    import sys

    global _TORCH_TENSOR, _TORCH_BIASES, _OUT_DTYPES
    _TORCH_TENSOR = tensor_type
    _TORCH_BIASES = (tensor_type, sys.modules["torch"].nn.Parameter)
    _OUT_DTYPES = (str, type, sys.modules["torch"].dtype)


class _Quick:
    """A plain ``matmul(a, b)`` (fp8: with numbers for scales and an output type; with an activation
    and a PyTorch bias) whose operands' types, shapes, strides, alignment and device were checked
    once: allocate the output, launch the plan on the current stream with the scales' product as
    alpha (``bias_info``: the bias's description, its pointer taken anew at each call)."""

    def __init__(self, plan, lib, odt, io, bias_info=None, batch_shape=None, apart=None):
        self.plan, self.lib, self.io_rest, self.bias_info = plan, lib, tuple(io)[1:], bias_info
        self.apart = apart
        self.shape = plan.out_shape
        if batch_shape is not None:  # a batch's output: rows 16 bytes apart (frontend.batched)
            self.make = lambda a: empty_rows16(lib, a, batch_shape, odt)  # noqa: E731
            self.ptr = lambda c: array_info(c).ptr
        elif lib == "torch":
            tdt = torch_dtype(odt)
            self.make = lambda a: a.new_empty(self.shape, dtype=tdt)
            self.ptr = lambda c: c.data_ptr()
        else:
            self.make = lambda a: empty_like_lib(lib, a, self.shape, odt)  # noqa: E731
            self.ptr = lambda c: c.__cuda_array_interface__["data"][0]

    def __call__(self, a, pa, b, pb, alpha, bias=None, out=None):
        """The result in ``out`` (a tensor like the first call's ``out``) or a new array, or None (for
        the full path) if the new array is not 16-byte aligned or ``out`` overlaps an operand."""
        if out is None:
            out = self.make(a)
            p = self.ptr(out)
            if p & 15:  # allocators give 256-byte alignment: not expected
                return None
        else:
            p = out.data_ptr()
            alo, ahi, blo, bhi, olo, ohi = self.apart
            if (pa + alo < p + ohi and p + olo < pa + ahi) or (pb + blo < p + ohi and p + olo < pb + bhi):
                return None  # (the full path says which)
        io = ArrayInfo(p, *self.io_rest)  # a fresh array: same shape, strides, type as the first
        vb = None if self.bias_info is None else (self.bias_info._replace(ptr=bias.data_ptr()), bias)
        self.plan.again(a, pa, b, pb, out, io, stream_of(self.lib, None), alpha, vb)
        return out
