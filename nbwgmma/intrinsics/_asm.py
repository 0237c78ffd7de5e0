"""One helper that turns a PTX template plus an operand spec into a Numba intrinsic.

Every intrinsic of nbwgmma is declared with :func:`ptx_intrinsic`::

    mbarrier_init = ptx_intrinsic(
        "mbarrier_init",
        "mbarrier.init.shared::cta.b64 [$bar], $count;",
        params=[Reg("bar", u32), Reg("count", u32)],
    )

The template names its operands ``$name``. Each parameter is one of

* :class:`Reg` - a run-time value in a register, cast to the declared type
  (constraint chosen from :data:`CONSTRAINTS` by the type, never by branches);
  an integer register refuses a float, which the cast would truncate;
* :class:`Imm` - a compile-time literal that PTX needs as an immediate; a
  non-literal or out-of-range value is a typing error saying what was expected
  and what was given. Its text is pasted into the template;
* :class:`Pred` - a run-time truth value turned into a PTX predicate;
* :class:`Frag` - a ``UniTuple`` of registers written as ``{r0, r1, ...}``;
* :class:`ArrayPtr` - an array whose data pointer (a 64-bit generic address)
  becomes the operand.

Outputs (:class:`Out`) are returned: one as a value, several as a tuple. An
output ``tied`` to a parameter is an in/out operand (the accumulator of
``wgmma``): LLVM ties the input to the output register, so the fragment never
leaves registers. The template, the output list and the fragment lengths may be
functions of the immediates, so one declaration covers a whole instruction
family.

Typing errors are :class:`NbwgmmaTypingError` (:mod:`.errors`), reported at the
kernel's call.

LLVM inline-asm operand numbering: outputs first (``$0..$n-1``), then inputs in
order; tied inputs use the output's index as their constraint.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from llvmlite import ir
from numba import types

from .. import backend
from . import errors, lowering
from .errors import NbwgmmaLiteralError, NbwgmmaTypingError, checked_intrinsic

__all__ = [
    "ArrayPtr",
    "Frag",
    "Imm",
    "Out",
    "Pred",
    "Reg",
    "ptx_intrinsic",
    "special_register",
    "ranged",
    "CONSTRAINTS",
    "NbwgmmaTypingError",
    "NbwgmmaLiteralError",
]

# Typing errors of every intrinsic (declared here, or by hand with errors.checked_intrinsic) are
# reported at the kernel's call: see errors.py.
errors.install()
# Lowering a fragment unrolled into one large block in linear time: see lowering.py.
lowering.install()

i32 = types.int32
u32 = types.uint32
i64 = types.int64
u64 = types.uint64
f32 = types.float32
f64 = types.float64

#: Inline-asm constraint letter and LLVM type for each register type.
CONSTRAINTS = {
    types.int16: ("h", ir.IntType(16)),
    types.uint16: ("h", ir.IntType(16)),
    types.int32: ("r", ir.IntType(32)),
    types.uint32: ("r", ir.IntType(32)),
    types.int64: ("l", ir.IntType(64)),
    types.uint64: ("l", ir.IntType(64)),
    types.float32: ("f", ir.FloatType()),
    types.float64: ("d", ir.DoubleType()),
}


_NO_DEFAULT = inspect.Parameter.empty


@dataclass(frozen=True)
class Reg:
    """A run-time operand held in one register of type ``ty``.

    Any scalar converts to it, except a float to an integer register: that is a
    typing error (a descriptor, address or count given as a float is a mistake).
    ``rule`` is a predicate the value must meet (PTX's range of the operand,
    described by ``expect`` in error messages), checked at typing where the
    argument is a compile-time literal; a run-time value stays unchecked (the
    simulator checks those).
    """

    name: str
    ty: types.Type
    default: Any = _NO_DEFAULT
    rule: Callable[[int], bool] | None = None
    expect: str | None = None


def ranged(name: str, ty: types.Type, lo: int, hi: int, step: int = 1, source: str = "") -> Reg:
    """A :class:`Reg` whose literal must be a multiple of ``step`` in [``lo``, ``hi``], the rule
    that the PTX ISA section ``source`` states."""
    what = f"a multiple of {step}" if step > 1 else "an integer"
    return Reg(name, ty, rule=lambda v: lo <= v <= hi and v % step == 0,
               expect=f"{what} in [{lo}, {hi}]{f' (PTX ISA: {source})' if source else ''}")


@dataclass(frozen=True)
class Pred:
    """A run-time truth value (bool or integer, nonzero is true) used as a PTX predicate."""

    name: str
    default: Any = _NO_DEFAULT


@dataclass(frozen=True)
class ArrayPtr:
    """An array argument; the operand is its data pointer as a 64-bit generic address."""

    name: str


@dataclass(frozen=True)
class Frag:
    """A tuple of ``count`` registers of type ``ty``, written ``{$0, $1, ...}``.

    ``count`` may be a function of the immediates (keyword arguments), or
    ``None`` to take the length of the tuple passed; the length is then known
    to the other callables as the immediate ``len_<name>``.
    """

    name: str
    ty: types.Type | None
    count: int | Callable[..., int] | None = None


@dataclass(frozen=True)
class Imm:
    """A compile-time literal pasted into the template.

    ``choices`` lists the legal values; ``rule`` is a predicate for larger
    ranges, described by ``expect`` in error messages. ``text`` turns the value
    into template text (default ``str``).
    """

    name: str
    choices: Sequence[Any] | None = None
    rule: Callable[[Any], bool] | None = None
    expect: str | None = None
    default: Any = _NO_DEFAULT
    text: Callable[[Any], str] = str

    def describe(self) -> str:
        if self.expect:
            return self.expect
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        return "a compile-time constant"

    def check(self, value, where: str):
        ok = True
        if self.choices is not None and value not in self.choices:
            ok = False
        if self.rule is not None and not self.rule(value):
            ok = False
        if not ok:
            raise NbwgmmaTypingError(
                f"{where}: argument '{self.name}' must be {self.describe()}; got {value!r}"
            )


@dataclass(frozen=True)
class Out:
    """An output register (``count`` > 0: a tuple of them) of type ``ty``.

    ``tied`` names a :class:`Frag` or :class:`Reg` parameter whose value is the
    input of this operand (a read-write operand). ``pred`` marks a predicate
    result, returned as a boolean.
    """

    name: str
    ty: types.Type = u32
    count: int | Callable[..., int] = 0
    tied: str | None = None
    pred: bool = False


@dataclass
class _Resolved:
    """An intrinsic call with every immediate known: ready for code generation."""

    template: str
    params: list
    outs: list
    counts: dict = field(default_factory=dict)
    imms: dict = field(default_factory=dict)


def _literal(ty):
    if isinstance(ty, types.Omitted):
        return True, ty.value
    if isinstance(ty, types.Literal):
        return True, ty.literal_value
    return False, None


def _count(c, imms):
    return c(**imms) if callable(c) else c


_PLACEHOLDER = re.compile(r"\$([A-Za-z_]\w*)")


def _is_scalar(ty):
    return isinstance(ty, (types.Integer, types.Float, types.Boolean))


def _reject_float(name, argname, given, regty, what, shown):
    """A float where an integer register is wanted is an error, not a conversion: the
    value would be truncated (a descriptor of 1.5 becomes 1), which is never what a
    register operand (an address, a count, a descriptor) means."""
    if isinstance(given, types.Float) and isinstance(regty, types.Integer):
        raise NbwgmmaTypingError(
            f"{name}: argument '{argname}' must be {what}; got {shown} "
            f"(no implicit float conversion: convert it explicitly if that is meant)"
        )


def _check_literal_rule(name, p: Reg, given, position: int):
    """A literal argument ``given`` for register ``p`` (the call's argument ``position``) that
    breaks ``p.rule`` is an error that the call's retyping with the plain type cannot clear
    (``final``), where that argument is a constant of the kernel (see errors.py)."""
    if p.rule is None or not isinstance(given, types.IntegerLiteral):
        return
    value = given.literal_value
    if not p.rule(value):
        raise NbwgmmaTypingError(f"{name}: argument '{p.name}' must be {p.expect}; got {value!r}",
                                 final=(position, p.name))


def _lower_operand_value(context, builder, val, fromty, toty):
    if isinstance(fromty, types.Omitted):
        return context.get_constant(toty, fromty.value)
    if isinstance(fromty, types.Literal):
        fromty = fromty.literal_type
    return context.cast(builder, val, fromty, toty)


def _emit(context, builder, sig, args, res: _Resolved, name: str, side_effect: bool, memory: bool):
    """Build the inline-asm call for one resolved intrinsic call."""
    out_cons, out_tys, out_slots = [], [], []  # slots: (out, index range)
    subst = {}
    pre, post = [], []

    for out in res.outs:
        n = res.counts.get(out.name, 0)
        first = len(out_cons)
        if out.pred:
            preg = f"%nbp_{out.name}"
            pre.append(f".reg .pred {preg};")
            subst[out.name] = preg
            post.append(f"selp.u32 ${first}, 1, 0, {preg};")
            out_cons.append("=r")
            out_tys.append(ir.IntType(32))
        else:
            letter, llty = CONSTRAINTS[out.ty]
            k = max(n, 1)
            out_cons.extend(["=" + letter] * k)
            out_tys.extend([llty] * k)
            regs = [f"${first + i}" for i in range(k)]
            subst[out.name] = "{" + ", ".join(regs) + "}" if n else regs[0]
        out_slots.append((out, first, len(out_cons)))

    in_cons, in_tys, in_vals = [], [], []
    tied_of = {o.tied: (first, last) for o, first, last in out_slots if o.tied}
    nout = len(out_cons)

    for p, val, ty in zip(res.params, args, sig.args):
        if isinstance(p, Imm):
            if p.name not in subst:
                subst[p.name] = p.text(res.imms[p.name])
            continue
        if isinstance(p, Frag):
            n = res.counts[p.name]
            regty = p.ty if p.ty is not None else ty.dtype
            letter, llty = CONSTRAINTS[regty]
            elems = [builder.extract_value(val, i) for i in range(n)]
            elems = [_lower_operand_value(context, builder, e, ty.dtype, regty) for e in elems]
            if p.name in tied_of:
                first, _ = tied_of[p.name]
                cons = [str(first + i) for i in range(n)]
            else:
                cons = [letter] * n
                regs = [f"${nout + len(in_cons) + i}" for i in range(n)]
                subst[p.name] = "{" + ", ".join(regs) + "}"
            in_cons.extend(cons)
            in_tys.extend([llty] * n)
            in_vals.extend(elems)
            continue
        idx = nout + len(in_cons)
        if isinstance(p, Pred):
            v = _lower_operand_value(context, builder, val, ty, types.uint32)
            preg = f"%nbp_{p.name}"
            pre.append(f".reg .pred {preg};")
            pre.append(f"setp.ne.b32 {preg}, ${idx}, 0;")
            subst[p.name] = preg
            in_cons.append("r")
            in_tys.append(ir.IntType(32))
            in_vals.append(v)
        elif isinstance(p, ArrayPtr):
            ary = context.make_array(ty)(context, builder, val)
            v = builder.ptrtoint(ary.data, ir.IntType(64))
            subst[p.name] = f"${idx}"
            in_cons.append("l")
            in_tys.append(ir.IntType(64))
            in_vals.append(v)
        else:  # Reg
            letter, llty = CONSTRAINTS[p.ty]
            v = _lower_operand_value(context, builder, val, ty, p.ty)
            if p.name in tied_of:
                first, _ = tied_of[p.name]
                in_cons.append(str(first))
            else:
                subst[p.name] = f"${idx}"
                in_cons.append(letter)
            in_tys.append(llty)
            in_vals.append(v)

    def repl(m):
        key = m.group(1)
        if key not in subst:
            raise NbwgmmaTypingError(f"{name}: template names unknown operand ${key}")
        return subst[key]

    body = _PLACEHOLDER.sub(repl, res.template)
    if pre or post:
        body = "{\n" + "\n".join(pre + [body] + post) + "\n}"

    constraints = out_cons + in_cons
    if memory:
        constraints.append("~{memory}")
    if len(out_tys) == 0:
        retty = ir.VoidType()
    elif len(out_tys) == 1:
        retty = out_tys[0]
    else:
        retty = ir.LiteralStructType(out_tys)
    fnty = ir.FunctionType(retty, in_tys)
    asm = ir.InlineAsm(fnty, body, ",".join(constraints), side_effect=side_effect)
    raw = builder.call(asm, in_vals)

    if not out_tys:
        return context.get_dummy_value()

    def raw_elem(i):
        return raw if len(out_tys) == 1 else builder.extract_value(raw, i)

    results = []
    for out, first, last in out_slots:
        if out.pred:
            results.append(builder.icmp_unsigned("!=", raw_elem(first), ir.Constant(ir.IntType(32), 0)))
        elif res.counts.get(out.name, 0):
            tupty = types.UniTuple(out.ty, last - first)
            results.append(context.make_tuple(builder, tupty, [raw_elem(i) for i in range(first, last)]))
        else:
            results.append(raw_elem(first))
    if len(results) == 1:
        return results[0]
    return context.make_tuple(builder, sig.return_type, results)


def _out_type(out: Out, counts):
    if out.pred:
        return types.boolean
    n = counts.get(out.name, 0)
    return types.UniTuple(out.ty, n) if n else out.ty


def ptx_intrinsic(
    name: str,
    template: str | Callable[..., str],
    *,
    params: Sequence = (),
    outs: Sequence[Out] | Callable[..., Sequence[Out]] = (),
    side_effect: bool = True,
    memory: bool = True,
    validate: Callable[..., None] | None = None,
    doc: str | None = None,
):
    """Declare an inline-PTX intrinsic.

    ``template`` and ``outs`` may be functions of the immediates (passed as
    keyword arguments). ``validate(imms, argtypes)`` may raise
    :class:`NbwgmmaTypingError` for rules that span several arguments.
    ``memory`` adds a memory clobber so that the compiler does not move loads and
    stores across the instruction.
    """
    params = list(params)
    imm_params = [p for p in params if isinstance(p, Imm)]
    user_sig = inspect.Signature([inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                    default=getattr(p, "default", _NO_DEFAULT)) for p in params])
    if doc and f"{name}(" not in doc.split(". ")[0]:  # the call form first: help() shows no signature
        doc = f"``{name}{user_sig}``: {doc}"
    simulated = backend.python_intrinsic(name, params, imm_params, doc, validate)
    if simulated is not None:  # Numba's CUDA simulator: a Python function with the same semantics
        with contextlib.suppress(AttributeError, TypeError):
            simulated.__signature__ = user_sig
        return simulated

    def resolve(argtypes: dict):
        imms = {}
        for p in imm_params:
            ty = argtypes[p.name]
            is_lit, value = _literal(ty)
            if not is_lit:
                raise NbwgmmaLiteralError(
                    f"{name}: argument '{p.name}' must be a compile-time constant "
                    f"({p.describe()}); got a run-time value of type {ty}"
                )
            p.check(value, name)
            imms[p.name] = value
        counts = {}
        for p in params:
            ty = argtypes[p.name]
            if isinstance(p, Frag):
                if p.count is None:
                    if not isinstance(ty, types.UniTuple):
                        raise NbwgmmaTypingError(
                            f"{name}: argument '{p.name}' must be a tuple of {p.ty} registers; got {ty}"
                        )
                    imms[f"len_{p.name}"] = ty.count
                n = _count(p.count, imms) if p.count is not None else ty.count
                counts[p.name] = n
                if not (isinstance(ty, types.UniTuple) and ty.count == n and _is_scalar(ty.dtype)):
                    raise NbwgmmaTypingError(
                        f"{name}: argument '{p.name}' must be a tuple of {n} {p.ty or 'scalar'} "
                        f"registers; got {ty}"
                    )
                _reject_float(name, p.name, ty.dtype, p.ty, f"a tuple of {n} integer ({p.ty}) registers", ty)
            elif isinstance(p, ArrayPtr):
                if not isinstance(ty, types.Array):
                    raise NbwgmmaTypingError(f"{name}: argument '{p.name}' must be an array; got {ty}")
            elif isinstance(p, (Reg, Pred)):
                base = ty.literal_type if isinstance(ty, types.Literal) and not isinstance(ty, types.Omitted) else ty
                if isinstance(ty, types.Omitted):
                    continue
                if not _is_scalar(base):
                    want = "an integer or boolean" if isinstance(p, Pred) else f"a scalar convertible to {p.ty}"
                    raise NbwgmmaTypingError(f"{name}: argument '{p.name}' must be {want}; got {ty}")
                if isinstance(p, Pred):
                    _reject_float(name, p.name, base, types.uint32, "an integer or boolean", ty)
                else:
                    _reject_float(name, p.name, base, p.ty, f"an integer (a {p.ty} register)", ty)
                    _check_literal_rule(name, p, ty, params.index(p))
        if validate is not None:
            validate(imms, argtypes)
        out_list = list(outs(**imms) if callable(outs) else outs)
        for o in out_list:
            if o.count:
                counts[o.name] = _count(o.count, imms)
        tmpl = template(**imms) if callable(template) else template
        return _Resolved(tmpl, params, out_list, counts, imms)

    pysig = user_sig.replace(parameters=[inspect.Parameter("typingctx", inspect.Parameter.POSITIONAL_OR_KEYWORD),
                                         *user_sig.parameters.values()])

    def definition(typingctx, *args, **kwargs):
        bound = pysig.bind(typingctx, *args, **kwargs)  # (checked_intrinsic: bound before this runs)
        argtypes = {}
        for p in params:
            if p.name in bound.arguments:
                argtypes[p.name] = bound.arguments[p.name]
            else:
                argtypes[p.name] = types.Omitted(p.default)
        res = resolve(argtypes)
        out_tys = [_out_type(o, res.counts) for o in res.outs]
        if not out_tys:
            ret = types.void
        elif len(out_tys) == 1:
            ret = out_tys[0]
        else:
            ret = types.Tuple(out_tys)
        sig = ret(*[argtypes[p.name] for p in params])

        def codegen(context, builder, signature, llargs):
            return _emit(context, builder, signature, llargs, res, name, side_effect, memory)

        return sig, codegen

    definition.__signature__ = pysig
    definition.__name__ = name
    definition.__qualname__ = name
    definition.__doc__ = doc
    fn = checked_intrinsic(definition, prefer_literal=True)
    fn.__doc__ = doc
    fn.__signature__ = user_sig  # inspect.signature: the kernel's arguments, not Numba's typingctx
    fn.ptx_template = template
    fn.params = params
    return fn


def special_register(name: str, reg: str, ty=u32, doc: str | None = None, volatile: bool = False):
    """An intrinsic ``name()`` reading the PTX special register ``reg`` (PTX ISA: Special Registers)
    as ``ty`` (``u32`` or ``u64``: ``mov.u32`` / ``mov.u64``). ``volatile``: each call reads it anew
    where it is written (a side effect and a memory clobber: timers); otherwise the compiler may merge
    or move reads (ids that do not change while the kernel runs)."""
    return ptx_intrinsic(name, f"mov.u{ty.bitwidth} $value, {reg};", outs=[Out("value", ty)],
                         memory=volatile, side_effect=volatile, doc=doc)
