"""Command line: ``nbwgmma {bench,demo,inspect,layout}`` (or ``python -m nbwgmma ...``).

* ``bench`` (the default): the GEMM against cuBLAS, bf16 8192^3 unless told
  otherwise (see :mod:`nbwgmma.bench`); without a GPU, its compile report; in
  Numba's CUDA simulator, one small untimed problem checked against float64.
* ``demo``: a 64x256 bf16 wgmma tile with the 128-byte swizzle,
  checked against the layout model on an sm_90 GPU or in the CUDA simulator;
  without either, the kernel's compile report.
* ``inspect TARGET``: the compile report (registers, spills, SASS opcodes, ptxas
  warnings) of a kernel, with no GPU needed (but not in the CUDA simulator, which
  has no compiler). TARGET is ``tile`` (the demo kernel) or ``path/to/file.py:kernel``
  / ``package.module:kernel`` with ``--sig`` (a Numba signature; defaults to the
  module's ``SIG``).
* ``layout``: draw an accumulator layout or a swizzle (needs matplotlib).
* ``precompile``: build every kernel ``matmul``'s default path can pick into the disk
  cache, in parallel (:mod:`nbwgmma.precompile`), so first calls load instead of compiling.

A bad argument, or a command that cannot run here, ends with one line on stderr and
a non-zero status (2 for arguments the parser rejects, 1 otherwise), no traceback:
the commands raise :class:`nbwgmma.errors.NbwgmmaError` for what the user can fix,
and :func:`main` prints it.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import re
import sys

from .errors import NbwgmmaError, own_source

#: what ``--help`` prints above the commands (the module docstring is reStructuredText)
_DESCRIPTION = """\
Hopper wgmma/TMA GEMM for Numba-CUDA: benchmark it, run a demo tile, read a kernel's
compile report, draw layouts, build matmul's kernels ahead of time. Without a command,
runs bench.

A bad argument, or a command that cannot run here, ends with one line on stderr and a
non-zero exit status. Run "{prog} COMMAND --help" for a command's options."""

_BENCH = """\
The library GEMM (nbwgmma.matmul) against cuBLAS (through PyTorch) on the same random
operands, median time per call over batches of ten. Without an sm_90 GPU: the compile
report of the kernel matmul would run. In Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1):
one small untimed product checked against float64."""

_INSPECT = """\
The compile report of a kernel (registers, spills, shared memory, SASS opcodes, ptxas
warnings), with no GPU needed (not in the CUDA simulator, which has no compiler).

TARGET is "tile" (the demo kernel), path/to/file.py:kernel or package.module:kernel;
--sig gives the kernel's Numba signature, or the module defines SIG."""

_LAYOUT = """\
Draw to a PNG which thread and register hold each element of a wgmma accumulator
("acc"), or where a swizzle puts each 16-byte chunk of a tile ("swizzle"). Needs
matplotlib (pip install 'nbwgmma[plot]')."""

_DEMO = """\
A 64x256 bf16 wgmma tile with the 128-byte swizzle, checked against the layout model
on an sm_90 GPU or in the CUDA simulator; without either, the kernel's compile report."""

_PRECOMPILE = """\
Build every kernel matmul's default path can pick for plain products (each input type and
operand layout, each tile of the tile model, each small-M split) into the disk kernel
cache, in worker processes on the current GPU, so that a new process's first call of a
class loads its kernel instead of compiling it. Run once per machine and nbwgmma version.
With --arch sm_90a no GPU is needed (a build machine filling a container image or a
shared cache directory: NBWGMMA_CACHE_DIR); the compilers there must be the ones the GPU
machines run, as nbwgmma's version must. With --arch sm_90a --prebuilt the kernels go into
the package itself (nbwgmma/prebuilt), shipped in a wheel built after it: looked up after
the user's cache, whichever compilers the machine has. With --tails also the kernels with tail
maps that one-wave products whose last tile row or column is mostly padding run."""

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _one_line(e) -> str:
    """The first informative line of an error's text (Numba's errors open with the
    pipeline stage that failed and colour the rest)."""
    lines = [ln.strip() for ln in _ANSI.sub("", str(e)).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("Failed in ")] or lines
    if not lines:
        return type(e).__name__
    if lines[0].endswith(":") and len(lines) > 1:  # "... found for signature:" and the signature
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def _cannot(cmd, why):
    """A command that cannot run here: one line on stderr, status 1."""
    print(f"{cmd}: {_one_line(why)}", file=sys.stderr)
    return 1


def _failed_at(e) -> str:
    """" at FILE:LINE" of the last line of the user's code an exception passed through (where a
    check of nbwgmma's refused the user's call), or "" where none did."""
    if isinstance(e, SyntaxError) and e.filename and e.lineno:
        return f" at {e.filename}:{e.lineno}"
    tb, site = e.__traceback__, ""
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if not own_source(name) and not name.startswith("<") and "importlib" not in name:
            site = f" at {name}:{tb.tb_lineno}"
        tb = tb.tb_next
    return site


def _import_target(mod_name: str):
    """The module of an ``inspect`` target: a file path or an importable name."""
    if mod_name.endswith(".py"):
        if not os.path.isfile(mod_name):
            raise NbwgmmaError(f"no such file: {mod_name}")
        spec = importlib.util.spec_from_file_location("_nbwgmma_target", mod_name)
        mod = importlib.util.module_from_spec(spec)
        run = spec.loader.exec_module
        arg = mod
    else:
        run, arg = importlib.import_module, mod_name
    try:
        got = run(arg)
    except ModuleNotFoundError as e:
        if e.name and (mod_name + ".").startswith(e.name + "."):  # the target or a package above it
            raise NbwgmmaError(f"no module named {mod_name!r} (give a path ending in .py, or an importable name)")
        raise NbwgmmaError(f"importing {mod_name} failed{_failed_at(e)}: {type(e).__name__}: {_one_line(e)}") from None
    except Exception as e:  # noqa: BLE001 - the user's module failed: say how, in one line
        raise NbwgmmaError(f"importing {mod_name} failed{_failed_at(e)}: {type(e).__name__}: {_one_line(e)}") from None
    return mod if mod_name.endswith(".py") else got


def _load_target(target: str, sig: str | None):
    from numba import types  # noqa: F401  (signature strings are evaluated against numba.types)

    if target == "tile":
        from .kernels.wgmma_tile import tile_kernel

        s = (types.uint8[:], types.uint64[:], types.uint64[:], types.uint32[:, :, :], types.float32[:, :])
        return tile_kernel("f32.bf16.bf16", 256, 4), s
    if ":" not in target:
        raise NbwgmmaError(f"TARGET must be 'tile', path/to/file.py:kernel or package.module:kernel; got {target!r}")
    mod_name, attr = target.rsplit(":", 1)
    mod = _import_target(mod_name)
    if not hasattr(mod, attr):
        raise NbwgmmaError(f"{mod_name} has no kernel {attr!r}")
    kern = getattr(mod, attr)
    if sig is None:
        if not hasattr(mod, "SIG"):
            raise NbwgmmaError(f"{mod_name} defines no SIG: give --sig, e.g. --sig '(float32[:], uint64[:])'")
        return kern, mod.SIG
    ns = {n: getattr(types, n) for n in dir(types) if not n.startswith("_")}
    try:
        return kern, eval(sig, ns)  # noqa: S307 - a signature typed by the user on their own machine
    except Exception as e:  # noqa: BLE001 - a typo in --sig: one line, not a traceback
        raise NbwgmmaError(f"--sig {sig!r} is not a Numba signature: {type(e).__name__}: {_one_line(e)}") from None


def _parameters(kern):
    """The names of a kernel's parameters, or None where they cannot be read."""
    import inspect

    try:
        return list(inspect.signature(getattr(kern, "py_func", kern)).parameters)
    except (TypeError, ValueError):
        return None


def cmd_inspect(args):
    from .report import compile_report

    kern, sig = _load_target(args.target, args.sig)
    params = _parameters(kern)
    given = sig.args if hasattr(sig, "args") else tuple(sig) if isinstance(sig, (tuple, list)) else None
    if params is not None and given is not None and len(given) != len(params):
        raise NbwgmmaError(f"{args.target} takes {len(params)} parameter{'' if len(params) == 1 else 's'} "
                           f"({', '.join(params)}); the signature gives "
                           f"{len(given)} types: {', '.join(str(t) for t in given)}")
    try:
        rep = compile_report(kern, sig)
    except NbwgmmaError:  # no ptxas, or the CUDA simulator: nothing to compile with
        raise
    except Exception as e:  # noqa: BLE001 - Numba's typing or lowering error for the user's kernel and --sig
        raise NbwgmmaError(f"compiling {args.target} failed: {type(e).__name__}: {_one_line(e)}") from None
    print(rep.to_json() if args.json else rep)
    return 0


def cmd_demo(args):
    import numpy as np

    from .demo import gpu_available, simulated
    from .kernels.wgmma_tile import TileProblem, run_tile

    if not gpu_available() and not simulated():
        print("No sm_90 GPU (H100/H200) found: printing the compile report of the demo kernel instead.\n")
        args.target, args.sig = "tile", None
        return cmd_inspect(args)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64))
    b = rng.standard_normal((256, 64))
    p = TileProblem("f32.bf16.bf16", 256, 4, a, b, swizzle="128B")
    got = run_tile(p).astype(np.float64)
    want = p.reference()
    rel = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    where = " (CUDA simulator)" if simulated() else ""
    print(f"64x256x64 bf16 wgmma tile, 128B swizzle{where}: relative error {rel:.2e} vs the float64 model")
    return 0 if rel < 1e-5 else 1


def cmd_bench(args):
    from .bench import run_cli

    return run_cli(args)


def cmd_precompile(args):
    from . import precompile
    from .demo import gpu_available, simulated

    dtypes, layouts = args.dtypes.split(","), args.layouts.split(",")
    try:
        precompile.kernel_list(dtypes, layouts, args.autotune)  # the arguments first
        precompile.check_target(args.arch, args.prebuilt)
    except ValueError as e:
        raise NbwgmmaError(str(e).removeprefix("precompile: ")) from None
    if simulated():
        raise NbwgmmaError("nothing to build in Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1)")
    if args.arch is None and not gpu_available():
        raise NbwgmmaError("needs the sm_90 GPU (H100/H200) the kernels are built for; none found "
                           "(--arch sm_90a builds them without one)")
    try:
        summary = precompile.run(dtypes, layouts, args.jobs, args.autotune, arch=args.arch, prebuilt=args.prebuilt,
                                 tails=args.tails)
    except RuntimeError as e:
        raise NbwgmmaError(str(e).removeprefix("precompile: ")) from None
    return 1 if summary["failed"] else 0


def cmd_layout(args):
    from .layout.fragment import acc_coords

    if args.what == "acc":  # the arguments first: a mistake is worth hearing about without matplotlib too
        try:
            acc_coords(args.kind, args.n)
        except Exception as e:  # noqa: BLE001 - ValueError for N, Numba's typing error for the kind
            raise NbwgmmaError(f"--kind {args.kind} --n {args.n}: {_one_line(e)}") from None
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise NbwgmmaError("needs matplotlib: pip install 'nbwgmma[plot]'") from None
    from .plot import plot_acc_layout, plot_swizzle

    try:
        if args.what == "acc":
            plot_acc_layout(args.path, args.kind, args.n)
        else:
            plot_swizzle(args.path, args.swizzle)
    except OSError as e:
        raise NbwgmmaError(f"cannot write {args.path}: {e.strerror or e}") from None
    print(f"wrote {args.path}")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors in one line (usage is one ``--help`` away)."""

    def error(self, message):
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(2)


def _positive(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer; got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer; got {v}")
    return v


def _count(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, 0 or more; got {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected an integer, 0 or more; got {v}")
    return v


def _config(text):
    """``--config``: a JSON object of matmul config entries (keys and value types checked here;
    the values themselves by matmul, which names the entry at fault)."""
    from .frontend.args import check_config

    try:
        d = json.loads(text)
    except ValueError:
        d = None
    if not isinstance(d, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object such as '{{\"bn\": 192}}'; got {text!r}")
    try:
        return check_config(d)
    except NbwgmmaError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("matmul: ")) from None


COMMANDS = ("bench", "demo", "inspect", "layout", "precompile")


def _prog() -> str:
    """How the user started us: the console script's name, else ``python -m nbwgmma``."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return "python -m nbwgmma" if name in ("", "-c", "__main__.py") else name


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser (every command and option with its help)."""
    from . import __version__

    prog = prog or _prog()
    parser = _Parser(prog=prog, description=_DESCRIPTION.format(prog=prog),
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"nbwgmma {__version__}")
    sub = parser.add_subparsers(dest="cmd", title="commands", metavar="COMMAND")
    raw = argparse.RawDescriptionHelpFormatter

    p_b = sub.add_parser("bench", help="the library GEMM against cuBLAS (the default command)", description=_BENCH,
                         formatter_class=raw)
    for dim in "mnk":
        p_b.add_argument(f"--{dim}", type=_positive, default=8192, metavar=dim.upper(),
                         help=f"problem size {dim.upper()} of C[M, N] = A[M, K] @ B[K, N] (default 8192)")
    p_b.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "tf32", "e4m3", "e5m2"],
                     help="input type (default bf16; tf32 reads f32 inputs; fp8 gives bf16 out)")
    p_b.add_argument("--layout", default="KK", choices=["KK", "KN", "MK", "MN"],
                     help="storage of A and B: K = K-major, so the default KK is A row-major and B = b_nk.T; "
                          "KN: B row-major [K, N]; MK: A column-major; MN: both")
    p_b.add_argument("--repeats", type=_positive, default=20, help="timed rounds of ten calls (default 20)")
    p_b.add_argument("--warmup", type=_count, default=5, help="untimed calls before timing (default 5)")
    p_b.add_argument("--sweep", action="store_true", help="run the shape sweep instead of one shape")
    p_b.add_argument("--plot", default=None, metavar="PNG", help="write a TFLOP/s bar chart (needs matplotlib)")
    p_b.add_argument("--json", action="store_true", help="print the results as JSON")
    how = p_b.add_mutually_exclusive_group()
    how.add_argument("--config", type=_config, default=None, metavar="JSON",
                     help='kernel parameters as a JSON object, e.g. \'{"cluster": 2, "bn": 192}\' (the config '
                          'of nbwgmma.matmul)')
    how.add_argument("--autotune", action="store_true",
                     help='run matmul with config="auto": the tuned configuration (tuned now if unknown)')
    p_b.add_argument("--overhead", action="store_true",
                     help="instead: host time per call at 256^3 (nbwgmma.matmul vs torch.matmul)")
    p_b.add_argument("--first-call", action="store_true",
                     help="instead: time a new process's first matmul, with an empty kernel cache, then a filled one")
    p_b.set_defaults(func=cmd_bench)

    p_demo = sub.add_parser("demo", help="run the wgmma demo tile (its compile report without a GPU)",
                            description=_DEMO, formatter_class=raw)
    p_demo.add_argument("--json", action="store_true", help="without a GPU: print the compile report as JSON")
    p_demo.set_defaults(func=cmd_demo)

    p_ins = sub.add_parser("inspect", help="compile report of a kernel, no GPU needed", description=_INSPECT,
                           formatter_class=raw)
    p_ins.add_argument("target", metavar="TARGET",
                       help="tile, path/to/file.py:kernel or package.module:kernel")
    p_ins.add_argument("--sig", default=None,
                       help="the kernel's Numba signature, e.g. '(float32[:], uint64[:])' (default: the module's SIG)")
    p_ins.add_argument("--json", action="store_true", help="print the report as JSON")
    p_ins.set_defaults(func=cmd_inspect)

    p_l = sub.add_parser("layout", help="draw an accumulator layout or a swizzle to a PNG (needs matplotlib)",
                         description=_LAYOUT, formatter_class=raw)
    p_l.add_argument("what", choices=["acc", "swizzle"],
                     help="acc: a wgmma accumulator; swizzle: a shared memory swizzle")
    p_l.add_argument("path", metavar="PNG", help="the file to write")
    p_l.add_argument("--kind", default="f32.bf16.bf16",
                     help="acc: the wgmma type combination D.A.B (default f32.bf16.bf16)")
    p_l.add_argument("--n", type=_positive, default=16, help="acc: the tile's N (default 16)")
    p_l.add_argument("--swizzle", default="128B", choices=["none", "32B", "64B", "128B"],
                     help="swizzle: the mode (default 128B)")
    p_l.set_defaults(func=cmd_layout)

    p_p = sub.add_parser("precompile", help="build matmul's kernels into the disk cache ahead of first calls",
                         description=_PRECOMPILE, formatter_class=raw)
    p_p.add_argument("--dtypes", default="bf16,f16,e4m3,tf32",
                     help="input types, comma-separated, among bf16, f16, e4m3, e5m2, tf32 "
                          "(default bf16,f16,e4m3,tf32)")
    p_p.add_argument("--layouts", default="KK,KN,MK,MN",
                     help="operand layouts, as bench's --layout, comma-separated (default all four)")
    p_p.add_argument("--jobs", type=_positive, default=None,
                     help="worker processes (default: one per CPU core, at most 16)")
    p_p.add_argument("--autotune", action="store_true",
                     help='also every challenger config="auto" may time, so that tuning costs its timing only')
    p_p.add_argument("--arch", choices=["sm_90a"], default=None,
                     help="build for this target without a GPU (Numba's PTX through ptxas; tiles chosen "
                          "as on a 132-SM H100)")
    p_p.add_argument("--prebuilt", action="store_true",
                     help="with --arch: into the package's shipped kernels (nbwgmma/prebuilt) instead of "
                          "the cache, before building a wheel")
    p_p.add_argument("--tails", action="store_true",
                     help="also the kernels with tail maps that one-wave products whose last tile row or column is "
                          "mostly padding run (three more per kernel that is not swapped)")
    p_p.set_defaults(func=cmd_precompile)
    return parser


def main(argv=None):
    """Run the command line on ``argv`` (default ``sys.argv[1:]``); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        argv = ["bench"] + argv  # bench is the default command, options and all
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except NbwgmmaError as e:  # what the user can fix, or what cannot run here: one line
        return _cannot(args.cmd, e)
    except KeyboardInterrupt:
        print(f"{args.cmd}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
