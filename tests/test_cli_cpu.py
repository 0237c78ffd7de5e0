"""The command line without a GPU, each run in a child process as a user would start it:
clean help for every command, and every user mistake ends with one line on stderr and a
non-zero status, no traceback. Nothing here compiles a GEMM or touches a device."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).parent.parent

# A kernel module for ``inspect`` targets (no SIG: --sig must be given).
KMOD = """\
from numba import cuda


@cuda.jit
def k(x):
    x[0] = 1
"""


def _run(args, *, code=None, cwd=None):
    """(exit status, stdout, stderr) of ``python -m nbwgmma ARGS`` (or of ``python -c CODE ARGS``)."""
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)  # these runs are about the parser and the checks, not the simulator
    cmd = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "nbwgmma", *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=cwd or ROOT)
    return r.returncode, r.stdout, r.stderr


@pytest.fixture(scope="module")
def kmod(tmp_path_factory):
    d = tmp_path_factory.mktemp("targets")
    (d / "kmod.py").write_text(KMOD)
    (d / "broken.py").write_text("raise RuntimeError('broken on import')\n")
    (d / "badmap.py").write_text("from nbwgmma.kit import acc_map\n\n\ndef f(v, row, col):\n    return v\n\n\n"
                                 "M = acc_map(f, 64, rows=1)\n")
    return d


def test_help_lists_every_command_in_plain_text():
    rc, out, err = _run(["--help"])
    assert rc == 0 and not err
    assert out.startswith("usage: python -m nbwgmma ")
    for cmd in ("bench", "demo", "inspect", "layout", "precompile"):
        assert f"    {cmd} " in out or f"    {cmd}\n" in out, out
    assert "``" not in out and ":mod:" not in out  # no reStructuredText


def test_every_command_and_option_has_help():
    import argparse

    from nbwgmma.__main__ import build_parser

    parser = build_parser("nbwgmma")
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in subs._choices_actions}
    assert set(helps) == {"bench", "demo", "inspect", "layout", "precompile"} and all(helps.values()), helps
    for cmd, sub in subs.choices.items():
        assert sub.description and "``" not in sub.description, cmd
        for action in sub._actions:
            assert action.help and action.help.strip(), f"{cmd}: {action.option_strings or action.dest} has no help"


@pytest.mark.parametrize("cmd", ["bench", "demo", "inspect", "layout", "precompile"])
def test_command_help_is_plain_text(cmd):
    rc, out, err = _run([cmd, "--help"])
    assert rc == 0 and not err and out.startswith(f"usage: python -m nbwgmma {cmd} ")
    assert "``" not in out and ":mod:" not in out and ":func:" not in out


def test_console_script_names_itself():
    code = ("import sys; sys.argv[0] = '/usr/local/bin/nbwgmma'; from nbwgmma.__main__ import main; "
            "sys.exit(main())")
    rc, out, err = _run(["--help"], code=code)
    assert rc == 0 and out.startswith("usage: nbwgmma ") and "python -m" not in out
    rc, out, err = _run(["bench", "--dtype", "f64"], code=code)
    assert rc == 2 and err.startswith("nbwgmma bench: argument --dtype"), err


# (arguments, exit status, what the one line on stderr says); "{d}" is a folder holding
# kmod.py (a kernel k, no SIG), broken.py (raises on import) and badmap.py (a kit block refuses its
# function at line 8).
MISTAKES = {
    "no-command": (["frob"], 2, "invalid choice: 'frob'"),
    "bench-dtype": (["bench", "--dtype", "f64"], 2, "argument --dtype: invalid choice: 'f64'"),
    "default-bench-dtype": (["--dtype", "f64"], 2, "bench: argument --dtype: invalid choice"),
    "bench-size": (["bench", "--m", "-3"], 2, "argument --m: expected a positive integer; got -3"),
    "bench-size-text": (["bench", "--k", "big"], 2, "argument --k: expected a positive integer; got 'big'"),
    "bench-warmup": (["bench", "--warmup", "-1"], 2, "argument --warmup: expected an integer, 0 or more"),
    "bench-config-json": (["bench", "--config", "{bn: 192}"], 2, "argument --config: expected a JSON object"),
    "bench-config-list": (["bench", "--config", "[1]"], 2, "argument --config: expected a JSON object"),
    "bench-config-key": (["bench", "--config", '{"tile": 1}'], 2, "unknown config keys ['tile']"),
    "bench-config-value-type": (["bench", "--config", '{"bm": "128"}'], 2, "config['bm'] must be an integer"),
    "bench-config-and-autotune": (["bench", "--config", "{}", "--autotune"], 2, "not allowed with argument"),
    "bench-first-call-fp8": (["bench", "--first-call", "--dtype", "e4m3"], 1, "--first-call times bf16 or f16"),
    "bench-overhead-fp8": (["bench", "--overhead", "--dtype", "e5m2"], 1, "--overhead compares with torch.matmul"),
    "bench-two-runs": (["bench", "--overhead", "--first-call"], 1, "separate runs"),
    "inspect-no-target": (["inspect"], 2, "the following arguments are required: TARGET"),
    "inspect-target-form": (["inspect", "kmod"], 1, "inspect: TARGET must be 'tile'"),
    "inspect-missing-kernel": (["inspect", "{d}/kmod.py:missing"], 1, "kmod.py has no kernel 'missing'"),
    "inspect-missing-file": (["inspect", "{d}/nonexistent.py:k"], 1, "inspect: no such file:"),
    "inspect-missing-module": (["inspect", "no_such_module.sub:k"], 1, "no module named 'no_such_module.sub'"),
    "inspect-broken-module": (["inspect", "{d}/broken.py:k"], 1, "broken.py:1: RuntimeError: broken on import"),
    "inspect-kit-refusal": (["inspect", "{d}/badmap.py:k"], 1, "badmap.py:8: KitError: acc_map: fn f(v, row, col) must "
                            "take 4 arguments"),
    "inspect-no-sig": (["inspect", "{d}/kmod.py:k"], 1, "defines no SIG: give --sig"),
    "inspect-bad-sig": (["inspect", "{d}/kmod.py:k", "--sig", "(float32[:]"], 1, "is not a Numba signature"),
    "inspect-sig-count": (["inspect", "{d}/kmod.py:k", "--sig", "(float32[:], int32)"], 1,
                          "takes 1 parameter (x); the signature gives 2 types: array(float32, 1d, A), int32"),
    "layout-what": (["layout", "grid", "out.png"], 2, "argument what: invalid choice: 'grid'"),
    "layout-kind": (["layout", "acc", "out.png", "--kind", "f32.x.y"], 1,
                    "layout: --kind f32.x.y --n 16: wgmma: unknown type combination 'f32.x.y'"),
    "layout-n": (["layout", "acc", "out.png", "--n", "12"], 1, "f32.bf16.bf16 allows N in"),
    "layout-swizzle": (["layout", "swizzle", "out.png", "--swizzle", "16B"], 2, "argument --swizzle: invalid choice"),
    "precompile-dtype": (["precompile", "--dtypes", "bf16,f64"], 1, "dtype must be among bf16, f16, e4m3"),
    "precompile-layout": (["precompile", "--layouts", "KK,NN"], 1, "layout must be among KK, KN, MK, MN; got 'NN'"),
    "precompile-jobs": (["precompile", "--jobs", "0"], 2, "argument --jobs: expected a positive integer; got 0"),
    "precompile-arch": (["precompile", "--arch", "sm_80"], 2, "argument --arch: invalid choice: 'sm_80'"),
    "precompile-prebuilt": (["precompile", "--prebuilt"], 1, "--prebuilt kernels are built without a GPU: give --arch"),
}


# All the mistakes in one child process (one interpreter start instead of one each), each a
# call of the console script's main(): an exception escaping it would show as a traceback.
_DRIVER = """\
import contextlib, io, json, sys, traceback
from nbwgmma.__main__ import main
results = {}
for name, args in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(args)
        except SystemExit as e:
            rc = e.code if isinstance(e.code, int) else 1
        except BaseException:
            rc = None
            traceback.print_exc()
    results[name] = [rc, err.getvalue()]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def mistakes(kmod):
    import json

    cases = {name: [a.replace("{d}", str(kmod)) for a in args] for name, (args, _, _) in MISTAKES.items()}
    rc, out, err = _run([json.dumps(cases)], code=_DRIVER)
    assert rc == 0, err
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("name", list(MISTAKES))
def test_a_mistake_is_one_line_and_a_nonzero_status(name, mistakes):
    args, status, says = MISTAKES[name]
    rc, err = mistakes[name]
    out = ""
    assert rc == status, (rc, out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert says in err, err


def test_layout_without_matplotlib_says_so_in_one_line(tmp_path):
    """matplotlib hidden (an installed one too): the same one line as where it is missing."""
    code = ("import sys; sys.modules['matplotlib'] = None; sys.argv[0] = 'nbwgmma'; "
            "from nbwgmma.__main__ import main; sys.exit(main())")
    rc, out, err = _run(["layout", "swizzle", str(tmp_path / "sw.png")], code=code)
    assert rc == 1 and "Traceback" not in err, err
    assert err.strip() == "layout: needs matplotlib: pip install 'nbwgmma[plot]'"


def test_a_bad_signature_for_a_kernel_is_one_line(kmod):
    """Numba's typing error (many lines, coloured) comes out as its first informative line."""
    rc, out, err = _run(["inspect", f"{kmod}/kmod.py:k", "--sig", "(float32,)"])
    assert rc == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert err.startswith("inspect: compiling ") and "TypingError: No implementation of function" in err, err
    assert "\x1b[" not in err
