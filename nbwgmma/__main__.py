"""Command line: ``python -m nbwgmma {bench,demo,inspect,layout}``.

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

A command that cannot run here says why in one line and exits with status 1.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys


def _load_target(target: str, sig: str | None):
    from numba import types  # noqa: F401  (signature strings are evaluated against numba.types)

    if target == "tile":
        from .kernels.wgmma_tile import tile_kernel

        s = (types.uint8[:], types.uint64[:], types.uint64[:], types.uint32[:, :, :], types.float32[:, :])
        return tile_kernel("f32.bf16.bf16", 256, 4), s
    if ":" not in target:
        raise SystemExit(f"inspect: TARGET must be 'tile' or 'module:kernel'; got {target!r}")
    mod_name, attr = target.rsplit(":", 1)
    if mod_name.endswith(".py"):
        spec = importlib.util.spec_from_file_location("_nbwgmma_target", mod_name)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    else:
        mod = importlib.import_module(mod_name)
    kern = getattr(mod, attr)
    if sig is None:
        if not hasattr(mod, "SIG"):
            raise SystemExit("inspect: give --sig, e.g. --sig '(float32[:], uint64[:])'")
        return kern, mod.SIG
    ns = {n: getattr(types, n) for n in dir(types) if not n.startswith("_")}
    return kern, eval(sig, ns)  # noqa: S307 - a signature typed by the user on their own machine


def cmd_inspect(args):
    from .report import ToolchainError, compile_report

    kern, sig = _load_target(args.target, args.sig)
    try:
        rep = compile_report(kern, sig)
    except ToolchainError as e:  # no ptxas, or the CUDA simulator: nothing to compile with
        return _cannot("inspect", e)
    print(rep.to_json() if args.json else rep)
    return 0


def _cannot(cmd, why):
    """A command that cannot run here: one line on stderr (its first), status 1."""
    print(f"{cmd}: {str(why).strip().splitlines()[0]}", file=sys.stderr)
    return 1


def cmd_demo(args):
    import numpy as np

    from ._examples import gpu_available, simulated
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


def cmd_layout(args):
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return _cannot("layout", "needs matplotlib: pip install 'nbwgmma[plot]'")
    from .plot import plot_acc_layout, plot_swizzle

    if args.what == "acc":
        plot_acc_layout(args.path, args.kind, args.n)
    else:
        plot_swizzle(args.path, args.swizzle)
    print(f"wrote {args.path}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m nbwgmma", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd")
    p_b = sub.add_parser("bench", help="nbwgmma GEMM vs cuBLAS (the default command)")
    p_b.add_argument("--m", type=int, default=8192)
    p_b.add_argument("--n", type=int, default=8192)
    p_b.add_argument("--k", type=int, default=8192)
    p_b.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "tf32", "e4m3", "e5m2"])
    p_b.add_argument("--layout", default="KK", choices=["KK", "KN", "MK", "MN"],
                     help="storage of A and B: K = K-major (default KK: A row-major, B = b_nk.T)")
    p_b.add_argument("--repeats", type=int, default=20)
    p_b.add_argument("--warmup", type=int, default=5)
    p_b.add_argument("--sweep", action="store_true", help="run the shape sweep")
    p_b.add_argument("--plot", default=None, help="write a TFLOP/s bar chart (PNG)")
    p_b.add_argument("--json", action="store_true")
    p_b.add_argument("--config", type=json.loads, default=None,
                     help='kernel parameters as JSON, e.g. \'{"cluster": 2, "bn": 192}\' (see matmul)')
    p_b.add_argument("--autotune", action="store_true",
                     help='run matmul with config="auto": the tuned configuration (tuned now if unknown)')
    p_b.add_argument("--overhead", action="store_true",
                     help="host time per call at 256^3 (nbwgmma.matmul vs torch.matmul) instead")
    p_b.add_argument("--first-call", action="store_true",
                     help="time a new process's first matmul: with an empty kernel cache, then with it filled")
    p_b.set_defaults(func=cmd_bench)
    p_l = sub.add_parser("layout", help="draw an accumulator layout or a swizzle to a PNG (needs matplotlib)")
    p_l.add_argument("what", choices=["acc", "swizzle"])
    p_l.add_argument("path")
    p_l.add_argument("--kind", default="f32.bf16.bf16")
    p_l.add_argument("--n", type=int, default=16)
    p_l.add_argument("--swizzle", default="128B", choices=["none", "32B", "64B", "128B"])
    p_l.set_defaults(func=cmd_layout)
    p_demo = sub.add_parser("demo", help="run the wgmma demo tile (compile report without a GPU)")
    p_demo.add_argument("--json", action="store_true")
    p_demo.set_defaults(func=cmd_demo)
    p_ins = sub.add_parser("inspect", help="compile report of a kernel, no GPU needed")
    p_ins.add_argument("target")
    p_ins.add_argument("--sig", default=None)
    p_ins.add_argument("--json", action="store_true")
    p_ins.set_defaults(func=cmd_inspect)
    args = parser.parse_args(argv)
    if args.cmd is None:
        args = parser.parse_args(["bench"] + list(argv or sys.argv[1:]))
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
