"""The simulator's registry of intrinsic implementations: ``impl`` registers a Python function
under the name an intrinsic is declared with; ``declare`` makes the function a kernel calls in
the simulator (its arguments bound and checked like the compiled intrinsic's, the kernel's line
recorded while it runs); ``located`` records the line for a fragment helper."""

from __future__ import annotations

import inspect
import sys

from ..backend import typing_error
from .core import SimThread
from .sched import current

IMPLS: dict = {}


def impl(*names):
    def deco(f):
        for n in names:
            IMPLS[n] = f
        return f
    return deco


def _validated(name, params, imms, arguments, validate, kinds):
    """Apply the intrinsic's ``validate(imms, argtypes)`` (its typing rules across arguments: an
    accumulator's type and N for the kind, transposes only for 16-bit inputs, ...) to the
    values of a simulated call, typed as Numba types them; its error names the kernel line.
    ``kinds``: (name, is an immediate) of each parameter."""
    from numba import typeof

    key = [name]
    for pname, imm in kinds:
        v = arguments[pname]
        key.append((len(v), type(tuple.__getitem__(v, 0)) if v else None) if isinstance(v, tuple)
                   else v if imm else type(v))
    key = tuple(key)
    if key in _VALID:
        return
    values = {p.name: arguments[p.name] for p in imms}
    argtypes = {}
    for p in params:
        v = arguments[p.name]
        if isinstance(v, tuple):  # (a fragment: its values, not read through a hazard check)
            v = tuple(tuple.__iter__(v))
            if getattr(p, "count", 0) is None:
                values[f"len_{p.name}"] = len(v)
        try:
            argtypes[p.name] = typeof(v)
        except ValueError:  # a value Numba has no type for: leave the rules to the implementation
            return
    from ..intrinsics.errors import NbwgmmaTypingError

    try:
        validate(values, argtypes)
    except NbwgmmaTypingError as e:
        raise typing_error(e.message) from None
    except Exception:  # values the rules cannot read (a tuple of mixed types): left to the implementation
        return
    if len(_VALID) >= 4096:
        _VALID.clear()
    _VALID.add(key)


_VALID: set = set()  # the argument kinds of simulated intrinsic calls _validated has passed


def declare(name, params, imms, doc, validate=None):
    """A Python function for intrinsic ``name`` (operand spec ``params``, the compile-time
    ones among them ``imms``): binds the arguments like the compiled intrinsic (defaults,
    literal checks of immediates, its ``validate`` rules), then runs ``IMPLS[name]``."""
    sig = inspect.Signature([
        inspect.Parameter(p.name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                          default=getattr(p, "default", inspect.Parameter.empty))
        for p in params])
    names = [p.name for p in params]
    kinds = tuple((p.name, p in imms) for p in params)
    defaults = [getattr(p, "default", inspect.Parameter.empty) for p in params]
    required = next((i for i, d in enumerate(defaults) if d is not inspect.Parameter.empty), len(names))
    if any(d is inspect.Parameter.empty for d in defaults[required:]):
        required = -1  # a required parameter after a default one: always bind by the signature

    def bind(args, kwargs):
        if not kwargs and required <= len(args) <= len(names):  # positional: no Signature.bind
            arguments = dict(zip(names, args))
            for i in range(len(args), len(names)):
                arguments[names[i]] = defaults[i]
            return arguments
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:  # as the compiled intrinsic reports it (intrinsics.errors.checked_intrinsic)
            given = ", ".join([repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()])
            raise typing_error(f"{name}: {e}: its signature is {name}{sig}; got {name}({given})") from None
        bound.apply_defaults()
        return bound.arguments

    def fn(*args, **kwargs):
        arguments = bind(args, kwargs)
        if imms:
            try:
                for p in imms:
                    p.check(arguments[p.name], name)
            except Exception as e:
                from ..intrinsics.errors import NbwgmmaTypingError  # (here: the intrinsics import after the simulator)

                if isinstance(e, NbwgmmaTypingError):
                    raise typing_error(e.message) from None
                raise
        if validate is not None:
            _validated(name, params, imms, arguments, validate, kinds)
        f = IMPLS.get(name)
        if f is None:
            raise NotImplementedError(f"{name} has no simulator implementation")
        th = current()
        if isinstance(th, SimThread):
            saved = th.enter(sys._getframe(), name)
            try:
                return f(**arguments)
            finally:
                th.leave(saved)
        return f(**arguments)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    fn.params = params
    return fn


def located(f):
    """Run ``f`` (a fragment helper of the simulator) with the kernel line recorded."""
    def wrapper(*args, **kwargs):
        th = current()
        if not isinstance(th, SimThread):
            return f(*args, **kwargs)
        saved = th.enter(sys._getframe(), f.__name__)
        try:
            return f(*args, **kwargs)
        finally:
            th.leave(saved)

    wrapper.__name__ = wrapper.__qualname__ = f.__name__
    wrapper.__doc__ = f.__doc__
    return wrapper
