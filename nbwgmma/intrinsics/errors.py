"""Typing errors of the intrinsics, reported at the line of the kernel that made them.

An intrinsic that is called with arguments PTX does not allow raises
:class:`NbwgmmaTypingError` while Numba types the kernel. Left to Numba, that
message would reach the user buried in a "No implementation of function ...
There are 2 candidate implementations" report: Numba tries every intrinsic twice
(``prefer_literal``: once with the literal argument types, once without), lists
both failures - the second one a misleading "must be a compile-time constant"
even when a literal was given - and names only this package's source files,
never the kernel's line. (numba-cuda types kernels with its own error classes,
so the ``numba.core`` error that the intrinsic machinery raises escapes type
inference without the "typing of call at" location Numba adds to its own.)

:func:`install` wraps the one place where Numba types a call and knows the
call's source location, ``CallConstraint.resolve`` of numba-cuda's type
inference. Every :class:`NbwgmmaTypingError` made while a call is typed is
noted; when the call then fails, the first one noted (the literal attempt's,
which Numba makes first) is raised again as a short error that leads with the
kernel's file and line::

    kernel.py:12: setmaxnreg_inc: argument 'count' must be a multiple of 8 in [24, 256]; got 100
        setmaxnreg_inc(100)
    (while typing 'kernel'; NBWGMMA_FULL_TYPING_ERRORS=1 adds Numba's full report)

With ``NBWGMMA_FULL_TYPING_ERRORS=1`` in the environment (read when the error
is raised), Numba's own report follows. Calls that fail without an nbwgmma
error (a misuse of Numba's own functions) keep Numba's error unchanged.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import os
import threading

from numba.core.errors import NumbaTypeError, RequireLiteralValue, TypingError

from ..errors import NbwgmmaError, bad_call_message, own_source

__all__ = ["shortened", "NbwgmmaTypingError", "NbwgmmaLiteralError", "FULL_ERRORS_ENV", "install", "checked_intrinsic",
           "array_shape_message"]

#: Environment variable that appends Numba's full typing report to nbwgmma's errors.
FULL_ERRORS_ENV = "NBWGMMA_FULL_TYPING_ERRORS"

# One list per call being typed, innermost last: typing a call can type a device
# function, whose calls are typed (and may fail) inside the outer one. Per thread,
# as Numba compiles on whichever thread calls it.
_state = threading.local()


def _open_calls() -> list:
    stack = getattr(_state, "stack", None)
    if stack is None:
        stack = _state.stack = []
    return stack


class NbwgmmaTypingError(NumbaTypeError, NbwgmmaError):
    """An intrinsic was called with arguments PTX does not allow.

    This is the error a kernel's compilation raises for such a call (from
    ``cuda.compile_ptx``, ``@cuda.jit`` on first launch, or
    :func:`nbwgmma.report.compile_report`). It is a Numba typing error
    (``numba.core.errors.NumbaTypeError``, hence a
    ``numba.core.errors.TypingError``), so code that catches Numba's typing
    errors catches it too. ``str(err)`` leads with ``<file>:<line>:`` of the
    offending call in the kernel, then nbwgmma's message, then the call's source
    line. Attributes: ``message`` (nbwgmma's message alone); ``filename``,
    ``line`` and ``function`` (the call and the Python function it is in; None
    until the error has been located; where that call is in nbwgmma's own code, a
    kit block, the message leads with the first of ``callers`` in yours); ``callers`` (``(filename, line,
    function)`` of the calls that led there, innermost first, when the call is in
    a device function); ``numba_report`` (Numba's full text, which the message
    includes only when the environment variable ``NBWGMMA_FULL_TYPING_ERRORS`` is
    set to 1); ``final`` (made with ``final=(position, name)`` of the argument at fault: the
    call fails with it even where Numba's second typing, without literal argument types,
    succeeds, if that argument is a constant of the kernel).
    """

    def __init__(self, msg, loc=None, highlighting=True, final=False):
        super().__init__(msg, loc=loc, highlighting=highlighting)
        self.message = msg
        # A literal argument that breaks a rule (an mbarrier count of 0): Numba retypes the call
        # with the literal's plain type, which then passes, so the call fails even so, where
        # the argument is a constant (not a variable seen as its first literal value).
        self.final = final
        self.filename = None
        self.line = None
        self.function = None
        self.callers = []
        self.numba_report = None
        # Noted for the call being typed, if any (none outside kernel typing,
        # e.g. in the CUDA simulator or in host-side helpers).
        stack = _open_calls()
        if stack:
            stack[-1].append(self)


class NbwgmmaLiteralError(NbwgmmaTypingError, RequireLiteralValue):
    """A compile-time constant (a literal) was required and a run-time value was given.

    Also a ``numba.core.errors.RequireLiteralValue``, the class Numba uses for
    this case.
    """


def _shown(ty) -> str:
    """An argument's Numba type as a message shows it: a literal (or an omitted default) as its value."""
    for attr in ("literal_value", "value"):  # types.Literal, types.Omitted
        if hasattr(ty, attr):
            return repr(getattr(ty, attr))
    return str(ty)


def checked_intrinsic(definition=None, *, name: str | None = None, prefer_literal: bool = False):
    """``numba.core.extending.intrinsic`` of ``definition`` (a typing function ``(typingctx,
    *args)``) whose call with arguments its signature cannot bind (too many, too few, an unknown
    keyword) is an :class:`NbwgmmaTypingError` naming the intrinsic (``name``, else the
    definition's) and its signature, at the kernel's line: Python's own ``TypeError`` escaped
    Numba's typing with neither. Use it as ``@checked_intrinsic`` or
    ``@checked_intrinsic(prefer_literal=True, name=...)``."""
    from numba.core.extending import intrinsic

    if definition is None:
        return functools.partial(checked_intrinsic, name=name, prefer_literal=prefer_literal)
    sig = inspect.signature(definition)
    shown_sig = sig.replace(parameters=list(sig.parameters.values())[1:])  # without typingctx
    called = name or definition.__name__

    @functools.wraps(definition)
    def checked(typingctx, *args, **kwargs):
        try:
            sig.bind(typingctx, *args, **kwargs)
        except TypeError as e:
            given = ", ".join([_shown(a) for a in args] + [f"{k}={_shown(v)}" for k, v in kwargs.items()])
            raise NbwgmmaTypingError(f"{called}: {e}: its signature is {called}{shown_sig}; "
                                     f"got {called}({given})") from None
        return definition(typingctx, *args, **kwargs)

    return intrinsic(prefer_literal=prefer_literal)(checked)


def _full_errors_wanted() -> bool:
    return os.environ.get(FULL_ERRORS_ENV, "0").strip().lower() not in ("", "0", "false", "no", "off")


def _render(err: NbwgmmaTypingError) -> str:
    # lead with the innermost line of the user's code: a kit block's (or a generated
    # function's) own line says less than the kernel line that called it
    chain = [(err.filename, err.line)] + [(f, ln) for f, ln, _ in err.callers]
    filename, line = next((c for c in chain if not own_source(c[0])), chain[0])
    lines = [f"{filename}:{line}: {err.message}"]
    source = linecache.getline(filename, line).strip()
    if source:
        lines.append(f"    {source}")
    where = f"while typing '{err.function}'" + (f" at {err.filename}:{err.line}" if filename != err.filename else "")
    for filename, line, function in err.callers:
        where += f", called at {filename}:{line} in '{function}'"
    full = _full_errors_wanted()
    if not full:
        where += f"; {FULL_ERRORS_ENV}=1 adds Numba's full report"
    lines.append(f"({where})")
    if full:
        lines += ["", "Numba's report:", err.numba_report]
    return "\n".join(lines)


def _located(first: NbwgmmaTypingError, loc, function: str, numba_error) -> NbwgmmaTypingError:
    """``first`` as raised by the call at ``loc`` (a Numba ``Loc``) in ``function`` (Numba's
    error, or None where Numba's typing of the call succeeded)."""
    err = type(first)(first.message, highlighting=False)
    err.filename, err.line, err.function = loc.filename, loc.line, function
    err.numba_report = str(numba_error) if numba_error is not None else first.message
    err.args = (_render(err),)
    return err


def _array_shape_hint(constraint, typevars, fnty):
    """The message for a ``cuda.shared.array`` / ``cuda.local.array`` whose shape is not a
    compile-time constant (Numba's own lists candidate signatures and names no line), or None
    for another failed call."""
    from numba import cuda, types

    key = getattr(fnty, "typing_key", None)
    stubs = {cuda.shared.array: "cuda.shared.array", cuda.local.array: "cuda.local.array"}
    if key not in stubs or not constraint.args:
        return None
    try:
        shape = typevars[constraint.args[0].name].getone()
    except Exception:  # noqa: BLE001 - not typed yet: leave it to Numba
        return None
    parts = shape.types if isinstance(shape, types.BaseTuple) else (shape,)
    if all(isinstance(t, types.IntegerLiteral) for t in parts):
        return None
    return array_shape_message(stubs[key], shape)


def array_shape_message(call: str, got) -> str:
    """The message for ``call`` (``cuda.shared.array``, ``cuda.local.array``) given the shape
    ``got`` that is not a compile-time constant: the compiled kernel's typing error, and the
    simulator's alike (:mod:`nbwgmma.sim`)."""
    return (f"{call}: the shape must be a compile-time constant: an integer literal, a global name bound to "
            f"an int, or a tuple of them; got {got} (an expression such as pipe.barrier_words or 2 * STAGES is "
            f"computed at run time: bind it to a module-level name, NBARS = pipe.barrier_words, and pass NBARS)")


def _device_function_bind_hint(constraint, typevars, fnty):
    """The message for a call of one of nbwgmma's device functions (the kit's blocks) with
    arguments its signature cannot bind (too many, too few, an unknown keyword; Numba's own
    "Cannot bind ..." names neither the function nor its parameters plainly), or None for
    another failed call."""
    py_func = getattr(getattr(fnty, "dispatcher", None), "py_func", None)
    if py_func is None:
        return None
    try:
        if not own_source(py_func.__code__.co_filename):  # (a file of the package, or code a kit builder made)
            return None
        sig = inspect.signature(py_func)
        args = [typevars[a.name].getone() for a in constraint.args]
        kws = {k: typevars[v.name].getone() for k, v in constraint.kws}
    except Exception:  # noqa: BLE001 - not typed yet, or no source: leave it to Numba
        return None
    try:
        sig.bind(*args, **kws)
    except TypeError as e:
        given = ", ".join([_shown(a) for a in args] + [f"{k}={_shown(v)}" for k, v in kws.items()])
        return bad_call_message(py_func, e, given, len(args))
    return None


def _constant_argument(constraint, typeinfer, final) -> bool:
    """Whether the call's argument ``final`` = (position, name) is a constant of the kernel: a
    variable of one definition, a literal or a global. A variable assigned in a loop (``k = 0``,
    then ``k += 1``) is typed as its first literal in an early round of Numba's inference, and
    as a plain integer in the end: its literal breaking a rule is no error."""
    from numba.cuda.core.ir_utils import get_definition, guard

    position, name = final
    kws = dict(constraint.kws)
    var = kws.get(name) if name in kws else (constraint.args[position] if position < len(constraint.args) else None)
    if var is None:
        return False
    defn = guard(get_definition, typeinfer.func_ir, var)
    return type(defn).__name__ in ("Const", "Global", "FreeVar")


def _inlining_site(constraint, typeinfer, kernel_file: str):
    """(file, line) of the user's call that Numba inlined the code of ``constraint`` from, or None.
    Numba copies an inlined function's IR (``inline=True``: the kit's blocks) into the kernel
    with the function's own lines; the kernel's block that made the call jumps into the copy,
    so the user's line is the last one of the kernel's file before the constraint, walking
    back through the blocks that lead to it."""
    from numba.cuda.core.analysis import compute_cfg_from_blocks

    blocks = typeinfer.func_ir.blocks
    target = getattr(constraint, "target", None)
    start = next(((label, k) for label, b in blocks.items() for k, inst in enumerate(b.body)
                  if getattr(getattr(inst, "target", None), "name", None) == target), None)
    if start is None:
        return None
    cfg = compute_cfg_from_blocks(blocks)
    seen, todo = set(), [start]
    while todo:
        label, end = todo.pop(0)
        if label in seen:
            continue
        seen.add(label)
        for inst in reversed(blocks[label].body[:end]):
            loc = getattr(inst, "loc", None)
            if loc is not None and loc.filename == kernel_file:
                return loc.filename, loc.line
        todo += [(p, len(blocks[p].body)) for p, _ in cfg.predecessors(label)]
    return None


def _at_user_line(err: NbwgmmaTypingError, constraint, typeinfer, function: str) -> NbwgmmaTypingError:
    """``err`` with the user's call of the inlined kit block it lies in added as its caller, where
    none of its lines is the user's (see :func:`_inlining_site`)."""
    chain = [(err.filename, err.line)] + [(f, ln) for f, ln, _ in err.callers]
    kernel = getattr(typeinfer.func_id, "func", None)
    try:
        kernel_file = inspect.getsourcefile(kernel) if kernel is not None else None
    except TypeError:
        kernel_file = None
    if not kernel_file or own_source(kernel_file) or any(f and not own_source(f) for f, _ in chain):
        return err
    site = _inlining_site(constraint, typeinfer, kernel_file)
    if site is not None:
        err.callers.append((*site, function))
        err.args = (_render(err),)
    return err


def _wrap_resolve(resolve, typing_errors):
    def resolve_with_location(self, typeinfer, typevars, fnty):
        noted: list = []
        stack = _open_calls()
        stack.append(noted)
        try:
            result = resolve(self, typeinfer, typevars, fnty)
        except typing_errors as e:
            if not noted:
                hint = _array_shape_hint(self, typevars, fnty) or _device_function_bind_hint(self, typevars, fnty)
                if hint is None:
                    raise
                NbwgmmaTypingError(hint)  # noted in ``noted`` by its constructor
            error = e
        else:
            # typed, but the literal arguments' attempt broke a rule the plain types' cannot see
            noted = [n for n in noted if n.final and n.line is None and _constant_argument(self, typeinfer, n.final)]
            if not noted:
                return result
            error = None
        finally:
            stack.pop()
        function = getattr(typeinfer.func_id, "func_qualname", "?")
        # An error already located at an inner call (in a device function this call
        # typed) is the precise one: pass it on, naming this call as its caller.
        inner = [n for n in noted if n.line is not None]
        if inner:
            err = inner[0]
            err.callers.append((self.loc.filename, self.loc.line, function))
            err.args = (_render(err),)
            raise _at_user_line(err, self, typeinfer, function) from None
        # Otherwise the first noted error is the literal attempt's (Numba tries the
        # literal argument types first), the one that saw the arguments as written.
        # Made after the pop, so an enclosing call (typing the device function this
        # call is in) notes it as its own error.
        raise _at_user_line(_located(noted[0], self.loc, function, error), self, typeinfer, function) from None

    resolve_with_location.wrapped_resolve = resolve
    return resolve_with_location


def _wrap_inline_function(inline_function, callee_args, typing_errors, guard_exception):
    """``InlineWorker.inline_function`` that leaves a call of one of nbwgmma's ``inline=True``
    device functions (the kit's blocks) uninlined where its arguments do not bind to the
    function's signature: Numba's inlining pass, which runs before type inference, would raise
    its raw "Cannot bind ..." error naming neither the block nor the kernel's line; left as a
    call, the call's typing fails in :func:`_wrap_resolve`, which reports it as
    :func:`_device_function_bind_hint` words it, at the kernel's line. Calls that bind are
    inlined as before (the generated code is the same)."""
    def inline_unless_unbound(self, caller_ir, block, i, function, arg_typs=None):
        made = getattr(getattr(function, "__code__", None), "co_filename", None)
        if arg_typs is None and made is not None and own_source(made):
            instr = block.body[i]
            try:
                callee_args(instr.value, function, instr.loc, caller_ir)  # (binds as the inlining would)
            except typing_errors:
                raise guard_exception() from None  # (the inlining pass's guard: the call stays a call)
        return inline_function(self, caller_ir, block, i, function, arg_typs=arg_typs)

    inline_unless_unbound.wrapped_inline_function = inline_function
    return inline_unless_unbound


def shortened(error: NbwgmmaTypingError) -> NbwgmmaTypingError:
    """``error`` without the frames of Numba's compiler it passed through (a hundred lines and
    more before its one line of message), for the entry points that compile a user's kernel
    (``launch``, ``prepare``, ``compile_report``) to raise again: its traceback then ends at
    that call. With ``NBWGMMA_FULL_TYPING_ERRORS=1`` it keeps them."""
    if os.environ.get(FULL_ERRORS_ENV) == "1":
        return error
    return error.with_traceback(None)


def install() -> None:
    """Wrap numba-cuda's ``CallConstraint.resolve`` (once) so nbwgmma's typing errors
    are reported at the kernel's call, and its inliner's ``InlineWorker.inline_function`` so
    that a kit block's call with arguments that do not bind reaches the typing of the call
    (:func:`_wrap_inline_function`). Without numba-cuda's type inference (the CUDA simulator
    runs kernels as Python) there is nothing to wrap."""
    from numba import config

    if config.ENABLE_CUDASIM:
        return
    from numba.cuda.core import errors as cuda_errors
    from numba.cuda.core import inline_closurecall
    from numba.cuda.core.ir_utils import GuardException
    from numba.cuda.core.typeinfer import CallConstraint

    # numba.core's TypingError (raised by the intrinsic machinery) and numba-cuda's
    # own; never ForceLiteralArg, with which Numba asks to retype with literals.
    typing_errors = (TypingError, cuda_errors.TypingError)
    if not hasattr(CallConstraint.resolve, "wrapped_resolve"):
        CallConstraint.resolve = _wrap_resolve(CallConstraint.resolve, typing_errors)
    worker = inline_closurecall.InlineWorker
    if not hasattr(worker.inline_function, "wrapped_inline_function"):
        worker.inline_function = _wrap_inline_function(worker.inline_function, inline_closurecall._get_callee_args,
                                                       typing_errors, GuardException)
