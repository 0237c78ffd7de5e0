"""Checks of a kit block's device arguments at typing: identities in the compiled code that refuse,
at the kernel's line, what the block would otherwise read wrong (a fragment of another length, a
vector of another element type, a mapped function's result that is not one number).

Each ``*_check`` returns a function of one argument that gives it back unchanged: a Numba
intrinsic that raises :class:`~nbwgmma.intrinsics.errors.NbwgmmaTypingError` while the kernel is
typed, or, in a simulator (:mod:`nbwgmma.backend`), a Python function that raises the same error
when called (on the value, which has no Numba type). :func:`wgmma_n` is the builders' host-side
check of a fragment's width.
"""

from __future__ import annotations

import numbers

import numpy as np
from numba import types
from numba.core.extending import intrinsic

from .. import backend
from ..errors import KitError, is_int
from ..intrinsics.errors import NbwgmmaTypingError

__all__ = ["wgmma_n", "fragment_check", "count_check", "vector_check", "number_check", "integer_check", "index_check", "address_check",
           "f32_array_check", "store_vector_check",
           "VECTOR_ELEMENTS"]

#: the array element types each vtype reads (NumPy's names, which Numba's types print as too). f32
#: and f16 read values, converted to the accumulator's type (exactly, for an s32 accumulator's
#: integer vectors too): any float, integer or boolean array but 16-bit integers, which are most
#: likely bf16 bits; bf16 reads those bits
_VALUES = ("float16", "float32", "float64", "int8", "uint8", "int32", "uint32", "int64", "uint64", "bool")
VECTOR_ELEMENTS = {"f32": _VALUES, "f16": _VALUES, "bf16": ("uint16", "int16")}
#: what an s32 accumulator's vectors may hold: integers and booleans
_INTEGERS = tuple(t for t in _VALUES if not t.startswith("float")) + ("int16", "uint16")
#: what an element type given for another vtype most likely holds
_ELEMENT_HINTS = {"uint16": "bf16 bits need vtype='bf16'", "int16": "bf16 bits need vtype='bf16'"}
_ELEMENT_HINTS.update({t: f"{t} values need vtype='f32'" for t in _VALUES})


def wgmma_n(owner: str, name: str, n, hint: str = "") -> int:
    """``n`` as an int where it is a wgmma N, a fragment's columns (a multiple of 8 in [8, 256]),
    else a :class:`~nbwgmma.errors.KitError` naming the builder ``owner`` and its parameter."""
    if not is_int(n) or n % 8 or not 8 <= n <= 256:
        raise KitError(f"{owner}: {name} must be a wgmma N{hint} (a multiple of 8 in [8, 256]); got {n!r}")
    return int(n)


def _check(typed, valued):
    """The identity that raises ``typed(numba_type)`` (compiled: at typing) or ``valued(value)``
    (simulated: when called) where that is a message, not None."""
    if backend.active():  # the simulator runs the generated code as Python
        def check(x):
            text = valued(x)
            if text:
                raise backend.typing_error(text)
            return x
        return check

    @intrinsic
    def check(typingctx, x):
        text = typed(x)
        if text:
            raise NbwgmmaTypingError(text)

        def codegen(context, builder, sig, args):
            return args[0]

        return types.unliteral(x)(x), codegen

    return check


def _tuple_length(x, tuple_type):
    """``x``'s length if it is a tuple (``tuple_type``), else None."""
    return len(x) if isinstance(x, tuple_type) else None


_KIND_OF_TYPE: dict = {}  # a value's type -> the name of its NumPy type (Python ints aside: by value)


def _kind(v) -> str:
    return np.asarray(v).dtype.name if isinstance(v, (numbers.Number, np.number, np.bool_)) else type(v).__name__


def _value_kinds(x: tuple) -> set:
    """The names of the NumPy types of the values of ``x`` (as ``np.asarray(v).dtype.name``; the
    type's name for a value that is no number), looked up once per type: a simulated kernel
    checks every fragment it hands a kit helper, and asking NumPy per value took a tenth of the
    simulator's time."""
    out = set()
    for t in set(map(type, x)):
        if t is int:  # int64, or object past its range
            out.update(_kind(v) for v in x if type(v) is int)
            continue
        k = _KIND_OF_TYPE.get(t)
        if k is None:
            k = _KIND_OF_TYPE[t] = _kind(next(v for v in x if type(v) is t))
        out.add(k)
    return out


def fragment_check(what: str, count: int, noun: str = "the fragment",
                   why: str = "one thread's share of the accumulator", element: str | None = None):
    """A check refusing a fragment (or what ``noun`` names) that is not a tuple of ``count`` values
    (of ``element``, "f32" or "number", where given: an s32 accumulator reduced as f32 lost the
    integers past 2^24 with no error)."""
    def message(length, got, kinds):
        if length != count:
            return f"{what}: {noun} must be a tuple of {count} values ({why}); got {got}"
        if element == "f32" and kinds != {"float32"}:
            return (f"{what}: {noun} must hold f32 values ({why}); got {', '.join(sorted(kinds))} (an s32 "
                    f"accumulator: map it to f32 first, acc_map(..., dtype='f32'))")
        if element == "number" and not kinds <= _NUMBERS:
            return f"{what}: {noun} must hold numbers ({why}); got {', '.join(sorted(kinds))}"
        return None

    def typed(x):
        length = _tuple_length(x, types.BaseTuple)
        kinds = {str(t) for t in x.types} if length else set()
        return message(length, str(x) if length is None else f"a tuple of {length}", kinds)

    def valued(x):
        length = _tuple_length(x, tuple)
        kinds = _value_kinds(x) if length else set()
        if element == "f32":  # (a Python float computed in simulated f32 code stands for an f32)
            kinds = {"float32" if k == "float64" else k for k in kinds}
        return message(length, type(x).__name__ if length is None else f"a tuple of {length}", kinds)  # (as typed)

    return _check(typed, valued)


#: element types a tuple of "number" values may hold
_NUMBERS = {"float16", "float32", "float64", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
            "bool", "int", "float"}


def count_check(what: str, cols: int, rows: int, nextra: int, *, pairs: int | None = None,
                head: str = "(acc, tid, row0, col0)"):
    """A check refusing a kit function's ``*args`` (after its leading ``head``) of another length
    than its ``cols`` + ``rows`` vectors, ``pairs`` row pairs (None: the function takes none) and
    ``nextra`` extras (a reduction takes no vectors: give ``cols`` and ``rows`` None)."""
    kinds = [(c, name, noun) for c, name, noun in
             ((cols, "cols", "per-column vector(s)"), (rows, "rows", "per-row vector(s)"),
              (pairs, "pairs", "row pair(s)"), (nextra, "nextra", "extra argument(s)")) if c is not None]
    want = sum(c for c, _, _ in kinds)
    takes = ", ".join(f"{c} {noun}" for c, _, noun in kinds[:-1]) + f"{' and ' if len(kinds) > 1 else ''}" \
        f"{kinds[-1][0]} {kinds[-1][2]}"
    given = ", ".join(f"{name}={c}" for c, name, _ in kinds)

    def message(length, got):
        return None if length == want else f"{what}: after {head} it takes {takes} ({given}): {want} in all; got {got}"

    def typed(x):
        length = _tuple_length(x, types.BaseTuple)
        return message(length, str(x) if length is None else length)

    def valued(x):
        return message(len(x), len(x))

    return _check(typed, valued)


def vector_check(what: str, name: str, vtype: str, integer: bool = False):
    """A check refusing a vector (``name`` says which) that is not a 1-D array of an element type
    ``vtype`` reads (:data:`VECTOR_ELEMENTS`; a uint16 array of bf16 bits read as f32 would add
    16256.0 for 1.0): element ``k`` of it belongs to the tile's ``k``-th column (row), as
    ``bias[col0:n]`` gives. For an ``integer`` (s32) accumulator the vector must hold integers
    (of any width, or booleans), whatever ``vtype``: its values stay integers, so a float's
    fraction would be cut (a scale of 0.5 was 0)."""
    accepted = _INTEGERS if integer else VECTOR_ELEMENTS[vtype]

    def message(ndim, element, got):
        if ndim != 1:
            return f"{what}: {name} must be a 1-D array (element 0 at the tile's first column or row); got {got}"
        if integer and element not in accepted:
            return (f"{what}: {name} must hold integers for an s32 accumulator (dtype='s32': values and results "
                    f"stay integers, so a float would be cut to one); got {got}. To map an s32 accumulator's values "
                    f"as f32 (dequantizing), give dtype='f32'")
        if element not in accepted:
            hint = _ELEMENT_HINTS.get(element)
            return (f"{what}: {name} is read as vtype {vtype!r} (an array of {', '.join(accepted)})"
                    f"; got {got}{f' ({hint})' if hint else ''}")
        return None

    def typed(x):
        array = isinstance(x, types.Array)
        return message(x.ndim if array else None, str(x.dtype) if array else None, str(x))

    def valued(x):
        ndim, dtype = getattr(x, "ndim", None), getattr(x, "dtype", None)
        element = np.dtype(dtype).name if dtype is not None else None
        return message(ndim, element, f"array({element}, {ndim}d)" if ndim is not None else type(x).__name__)

    return _check(typed, valued)


def number_check(what: str, fn_name: str = "fn", integer: bool = False):
    """A check refusing what a mapped function returned unless it is one number (a boolean
    converts too): a function that returns nothing, or a tuple, gave NaN in the simulator and a
    Numba error with no line compiled. For an ``integer`` (s32) accumulator the number must be
    an integer: a float result was cut to one (0.5 became 0)."""
    def message(got):
        return f"{what}: {fn_name} must return one number; got {got}"

    def fraction(got):
        return (f"{what}: {fn_name} returns {got}, but dtype='s32' keeps the results integers (its fraction would "
                f"be cut); to map an s32 accumulator's values as f32 (dequantizing), give dtype='f32'")

    def typed(x):
        if integer and isinstance(x, (types.Float, types.Complex)):
            return fraction(str(x))
        if isinstance(x, (types.Integer, types.Float, types.Boolean)):
            return None
        return message("none" if isinstance(x, types.NoneType) else str(x))

    def valued(x):
        if integer and isinstance(x, (float, complex, np.floating, np.complexfloating)):
            return fraction(f"{type(x).__name__} {x!r}"[:80])
        if isinstance(x, (numbers.Real, np.integer, np.floating, np.bool_)):
            return None
        return message("none" if x is None else f"{type(x).__name__} {x!r}"[:80])

    return _check(typed, valued)


def integer_check(what: str, name: str, why: str):
    """A check refusing a ``name`` that is not one integer (``why`` says what it is for): a float
    would be cut, or refused deep inside the block with Numba's report and no line."""
    def message(got):
        return f"{what}: {name} must be an integer ({why}); got {got}"

    def typed(x):
        return None if isinstance(x, types.Integer) else message(str(x))

    def valued(x):
        return None if isinstance(x, (int, np.integer)) and not isinstance(x, bool) else \
            message(f"{type(x).__name__} {x!r}"[:80])

    return _check(typed, valued)


def index_check(fn, what: str, name: str, count: int, why: str):
    """Make the :func:`~nbwgmma.kit.inlined` kit function ``fn`` (named ``what`` in messages)
    refuse an argument ``name`` that is a constant outside ``0 .. count - 1`` (``why`` says what
    it picks), which the function would take for another value (a barrier of another
    warpgroup), with an :class:`~nbwgmma.intrinsics.errors.NbwgmmaTypingError` at the kernel's
    line. Compiled: when the call is typed (a constant reaches ``fn``'s dispatcher as its
    literal type; a value known only at run time is not checked). Simulated: when it is called,
    by the check this returns, which ``fn``'s body calls on the argument (through a module-level
    name; compiled, an identity that generates nothing)."""
    import inspect

    def message(v):
        return f"{what}: {name} must be an integer in [0, {count - 1}] ({why}); got {v!r}"

    def valued(x):
        return message(x) if is_int(x) and not 0 <= x < count else None

    check = _check(lambda x: None, valued)
    if backend.active():
        return check
    position = list(inspect.signature(fn.py_func).parameters).index(name)
    resolve = fn.get_call_template

    def get_call_template(args, kws):
        kws = dict(kws)
        ty = kws.get(name) if name in kws else (args[position] if position < len(args) else None)
        if isinstance(ty, types.IntegerLiteral) and not 0 <= ty.literal_value < count:
            # Noted for the call (not raised): the call fails with it where the argument is a
            # constant of the kernel, not a variable whose first value Numba's typing sees first
            # (``final``: intrinsics.errors); typed meanwhile as a value known at run time.
            NbwgmmaTypingError(message(ty.literal_value), final=(position, name))
            if name in kws:
                kws[name] = types.unliteral(ty)
            else:
                args = tuple(args[:position]) + (types.unliteral(ty),) + tuple(args[position + 1:])
        return resolve(args, kws)

    fn.get_call_template = get_call_template  # (the typing of a call: the literal's value is seen here)
    return check


def f32_array_check(what: str, name: str, why: str):
    """A check refusing a ``name`` that is not a 1-D float32 array (``why`` says what it holds):
    an int32 amax took the maximum cut to an integer, a float64 one an atomic of another width."""
    def message(ndim, element, got):
        return None if ndim == 1 and element == "float32" else f"{what}: {name} must be a 1-D float32 array ({why}); got {got}"

    def typed(x):
        array = isinstance(x, types.Array)
        return message(x.ndim if array else None, str(x.dtype) if array else None, str(x))

    def valued(x):
        ndim, dtype = getattr(x, "ndim", None), getattr(x, "dtype", None)
        element = np.dtype(dtype).name if dtype is not None else None
        return message(ndim, element, f"array({element}, {ndim}d)" if ndim is not None else type(x).__name__)

    return _check(typed, valued)


def address_check(what: str, name: str, hint: str):
    """A check refusing a ``name`` that is not an integer (a shared-memory address; ``hint`` says
    how to make one): an array given for it failed later with a message about float64 arrays."""
    def message(got):
        return f"{what}: {name} must be an integer shared-memory address ({hint}); got {got}"

    def typed(x):
        return None if isinstance(x, types.Integer) else message(str(x))

    def valued(x):
        return None if is_int(x) else message(f"{type(x).__name__}")

    return _check(typed, valued)


def store_vector_check(what: str):
    """A check of ``(pair, vec)`` refusing a ``vec`` that is not a 1-D array of the pair's kind of
    number (float values into a float array, integers into an integer one): a 2-D array took each
    value across a whole row, an int32 one cut 0.5 to 0, both with no error."""
    def message(ndim, element, got, floats):
        if ndim != 1:
            return (f"{what}: vec must be a 1-D array (element 0 at the fragment's first row, as out[row0:m] or "
                    f"out[tn, row0:m] gives it); got {got}")
        if floats and not element.startswith("float"):
            return f"{what}: vec must hold floats for a pair of floats (they would be cut to integers); got {got}"
        return None

    def typed(x):
        pair, vec = x.types
        array = isinstance(vec, types.Array)
        floats = any(isinstance(t, types.Float) for t in getattr(pair, "types", ()))
        return message(vec.ndim if array else None, str(vec.dtype) if array else "", str(vec), floats)

    def valued(x):
        pair, vec = x
        ndim, dtype = getattr(vec, "ndim", None), getattr(vec, "dtype", None)
        element = np.dtype(dtype).name if dtype is not None else ""
        floats = any(isinstance(v, (float, np.floating)) for v in pair) if isinstance(pair, tuple) else False
        return message(ndim, element, f"array({element}, {ndim}d)" if ndim is not None else type(vec).__name__,
                       floats)

    return _check(typed, valued)
