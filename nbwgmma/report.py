"""Compile report that needs no GPU: PTX -> ptxas -> cubin -> nvdisasm -> SASS.

``compile_report(kernel, sig)`` compiles a ``@cuda.jit`` kernel for ``sm_90a``
with Numba's NVVM, assembles it with the ``ptxas`` that matches NVVM's PTX
version (the ``nvidia-cuda-nvcc`` wheel, found through ``cuda.pathfinder``),
disassembles it, and returns registers, stack, spills, shared memory, a
histogram of SASS opcodes and the assembler's warnings. ``compile_reports`` does the same
for several kernels at once, with one ``ptxas`` and one ``nvdisasm`` run for all of them
(``nvdisasm`` alone spends about 0.3 s of set-up on every run, whatever the cubin's size).

Warnings that matter for Hopper kernels:

* C7510, C7511, C7515: ptxas serialized ``wgmma`` (inserted waits), usually
  because accumulator registers were touched between ``wgmma`` and its wait;
* C7508: ``setmaxnreg`` ignored, usually because the kernel has no register cap
  at entry (launch bounds with a minimum number of blocks).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import tempfile
from collections import Counter
from dataclasses import asdict, dataclass, field

from cuda import pathfinder

from .errors import ReportError, ToolchainError, is_int  # defined with nbwgmma's other errors; importable from here

__all__ = ["CompileReport", "compile_cubin", "compile_report", "compile_reports", "report_from_ptx", "reports_from_ptx", "find_tool",
           "ToolchainError", "ReportError"]

#: ptxas warning codes that mean wgmma was serialized.
WGMMA_SERIALIZATION_CODES = ("C7510", "C7511", "C7515")
#: ptxas warning code for an ignored setmaxnreg.
SETMAXNREG_IGNORED_CODE = "C7508"


def find_tool(name: str) -> str:
    """Path of ``ptxas`` or ``nvdisasm``: the CUDA wheels first, then CUDA_HOME and PATH."""
    path = pathfinder.find_nvidia_binary_utility(name)
    if path is None:
        raise ToolchainError(
            f"{name} not found. Install the CUDA 13 wheels that provide it: "
            f"pip install 'cuda-toolkit[nvcc,nvdisasm]==13.*'"
        )
    return path


@dataclass
class CompileReport:
    """What ptxas and nvdisasm say about one kernel."""

    name: str
    arch: str
    registers: int
    stack_frame: int
    spill_stores: int
    spill_loads: int
    static_smem: int
    barriers: int
    sass: Counter = field(default_factory=Counter)
    sass_full: Counter = field(default_factory=Counter)
    warnings: list = field(default_factory=list)
    #: the constant ``setmaxnreg`` counts in the PTX, ``[("dec", 40), ("inc", 232)]``
    setmaxnreg: list = field(default_factory=list)
    #: the launch bounds in the PTX: ``.maxntid`` threads and ``.minnctapersm`` (0 without)
    max_threads: int = 0
    min_blocks: int = 0
    ptx: str = field(default="", repr=False)
    sass_text: str = field(default="", repr=False)

    @property
    def spill_bytes(self) -> int:
        return self.spill_stores + self.spill_loads

    @property
    def local_memory_ops(self) -> int:
        return self.sass.get("LDL", 0) + self.sass.get("STL", 0)

    @property
    def warning_codes(self) -> set:
        """The codes (``"C7510"``, ...) of ptxas's coded diagnostics in ``warnings``."""
        return {m for w in self.warnings for m in re.findall(r"C\d{4}", w)}

    @property
    def float64_ops(self) -> Counter:
        """The SASS instructions that compute or convert float64 values (``DADD``, ``DSETP``,
        ``F2F.F64.F32``, ...): in an f32 kernel the sign of a float literal or of int64 index
        math mixed into the arithmetic (the guide's "Numba pitfalls")."""
        return Counter({op: n for op, n in self.sass_full.items()
                        if op.split(".")[0] in FLOAT64_OPCODES or ".F64" in op})

    @property
    def runtime_calls(self) -> Counter:
        """Calls of the CUDA runtime's slow-path routines in the SASS, by name
        (``__cuda_sm20_div_s64``: a 64-bit integer division, which Numba makes of a signed ``//``
        or ``%``, the persistent ``range(first, n, step)`` included; the guide's "Numba pitfalls")."""
        return Counter(re.findall(r"CALL\.\S+\s+`\(\$__internal_\d+_\$(\w+)\)", self.sass_text))

    @property
    def wgmma_serialized(self) -> bool:
        return bool(self.warning_codes & set(WGMMA_SERIALIZATION_CODES))

    @property
    def setmaxnreg_ignored(self) -> bool:
        return SETMAXNREG_IGNORED_CODE in self.warning_codes

    @property
    def register_split(self) -> tuple | None:
        """``(need, have)`` registers per thread of a warpgroup, summed over the warpgroups, of a
        kernel whose warpgroups re-split their registers with ``setmaxnreg`` (None otherwise):
        one warpgroup at the smallest decrease (a producer's), every other at the largest
        increase, against what the CTA holds at launch, ``registers`` x ``max_threads``. Over
        it, a ``setmaxnreg_inc`` waits for registers that are never freed: the kernel hangs
        (the simulator stops such a launch with the counts)."""
        dec = [c for op, c in self.setmaxnreg if op == "dec"]
        inc = [c for op, c in self.setmaxnreg if op == "inc"]
        if not inc or not self.max_threads or not self.registers:
            return None
        groups = -(-self.max_threads // 128)
        low = min(dec) if dec else self.registers
        return low + (groups - 1) * max(inc), groups * self.registers

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("ptx")
        d.pop("sass_text")
        d["sass"] = dict(sorted(self.sass.items()))
        d["sass_full"] = dict(sorted(self.sass_full.items()))
        d["spill_bytes"] = self.spill_bytes
        d["float64_ops"] = dict(sorted(self.float64_ops.items()))
        d["runtime_calls"] = dict(sorted(self.runtime_calls.items()))
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        lines = [
            f"kernel        {self.name}",
            f"arch          {self.arch}",
            f"registers     {self.registers}",
            f"stack frame   {self.stack_frame} B",
            f"spills        {self.spill_stores} B stores, {self.spill_loads} B loads",
            f"static smem   {self.static_smem} B",
            f"barriers      {self.barriers}",
            "SASS opcodes  " + ", ".join(f"{k}={v}" for k, v in self.sass.most_common()),
        ]
        split = self.register_split
        if split is not None:
            need, have = split
            counts = ", ".join(f"{op} {c}" for op, c in self.setmaxnreg)
            verdict = ("fits" if need <= have else
                       "OVER: the increase waits forever for registers no warpgroup frees (a hang)")
            lines.append(f"setmaxnreg    {counts}: {need} of {have} registers per warpgroup thread "
                         f"({have // self.registers} warpgroups at {self.registers} at launch), {verdict}")
        f64 = self.float64_ops
        if f64:
            lines.append("float64 ops   " + ", ".join(f"{k}={v}" for k, v in f64.most_common())
                         + " (a float literal or int64 math in f32 code? see the guide's Numba pitfalls)")
        calls = self.runtime_calls
        if calls:
            lines.append("runtime calls " + ", ".join(f"{k}={v}" for k, v in calls.most_common())
                         + (" (div_s64/rem_s64: a signed 64-bit // or % in a loop costs a call each time; a "
                            "`range` with a run-time step, as in a persistent tile walk, calls it once, at the "
                            "loop's start; see the guide's Numba pitfalls)"
                            if any("_s64" in k or "_u64" in k for k in calls) else ""))
        if self.warnings:
            lines.append("ptxas warnings:")
            lines.extend("  " + w for w in self.warnings)
        else:
            lines.append("ptxas warnings: none")
        return "\n".join(lines)


#: SASS opcodes (base names) of float64 arithmetic and compares.
FLOAT64_OPCODES = frozenset({"DADD", "DMUL", "DFMA", "DSETP", "DSET", "DMNMX", "DMMA"})

_INT = r"(\d+)"
#: A ptxas diagnostic with a code, "warning" or "info" alike: ptxas prints wgmma serialization
#: (C7511, "insufficient register resources") as an info line.
_CODED = re.compile(r"\(C\d{4}\)")


def _parse_ptxas(text: str) -> dict:
    info = dict(registers=0, stack_frame=0, spill_stores=0, spill_loads=0, static_smem=0, barriers=0)
    m = re.search(r"Used " + _INT + r" registers", text)
    if m:
        info["registers"] = int(m.group(1))
    m = re.search(_INT + r" bytes stack frame, " + _INT + r" bytes spill stores, " + _INT + r" bytes spill loads", text)
    if m:
        info["stack_frame"], info["spill_stores"], info["spill_loads"] = map(int, m.groups())
    m = re.search(_INT + r" bytes smem", text)
    if m:
        info["static_smem"] = int(m.group(1))
    m = re.search(r"used " + _INT + r" barriers", text)
    if m:
        info["barriers"] = int(m.group(1))
    info["warnings"] = [ln.strip() for ln in text.splitlines() if "warning" in ln.lower() or _CODED.search(ln)]
    return info


_SASS_LINE = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Za-z0-9_]+)*)")


def parse_sass(text: str) -> tuple[Counter, Counter]:
    """Histogram of SASS opcodes: by base name (``HGMMA``) and by full name."""
    base, full = Counter(), Counter()
    for m in _SASS_LINE.finditer(text):
        op = m.group(1)
        full[op] += 1
        base[op.split(".")[0]] += 1
    return base, full


def _entry_name(ptx: str) -> str:
    m = re.search(r"\.entry\s+(\S+?)\s*\(", ptx)
    return m.group(1) if m else "<module>"


def _assemble(tmp: str, ptx: str, arch: str, stem: str):
    """``ptxas -v`` on ``ptx``: (cubin path, or None when ptxas failed; ptxas's output)."""
    src, cubin = os.path.join(tmp, stem + ".ptx"), os.path.join(tmp, stem + ".cubin")
    with open(src, "w") as f:
        f.write(ptx)
    r = subprocess.run([find_tool("ptxas"), f"-arch={arch}", "-v", "-o", cubin, src], capture_output=True, text=True)
    return (cubin if r.returncode == 0 else None), r.stderr + r.stdout


def _disassemble(cubin: str) -> str:
    # -ndf: no data-flow annotations (a third of nvdisasm's time; the report reads opcodes only)
    d = subprocess.run([find_tool("nvdisasm"), "-c", "-ndf", cubin], capture_output=True, text=True)
    if d.returncode != 0:
        raise ToolchainError(f"nvdisasm failed:\n{d.stderr}")
    return d.stdout


_SETMAXNREG = re.compile(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)\s*;")


def _parse_bounds(ptx: str) -> dict:
    """The PTX's constant ``setmaxnreg`` counts and its launch bounds."""
    m = re.search(r"\.maxntid\s+(\d+)(?:\s*,\s*(\d+))?(?:\s*,\s*(\d+))?", ptx)
    threads = 0
    if m:
        threads = 1
        for g in m.groups():
            threads *= int(g) if g else 1
    b = re.search(r"\.minnctapersm\s+(\d+)", ptx)
    split = sorted(set((op, int(c)) for op, c in _SETMAXNREG.findall(ptx)), key=lambda oc: (oc[0] != "dec", oc[1]))
    return dict(setmaxnreg=split, max_threads=threads, min_blocks=int(b.group(1)) if b else 0)


def _report(name, arch, ptx, ptxas_text, sass_text) -> CompileReport:
    base, full = parse_sass(sass_text)
    return CompileReport(name=name, arch=arch, sass=base, sass_full=full, ptx=ptx, sass_text=sass_text,
                         **_parse_ptxas(ptxas_text), **_parse_bounds(ptx))


def report_from_ptx(ptx: str, arch: str = "sm_90a", name: str | None = None) -> CompileReport:
    """Assemble PTX with ptxas for ``arch`` and disassemble it."""
    with tempfile.TemporaryDirectory(prefix="nbwgmma-") as tmp:
        cubin, text = _assembled(tmp, ptx, arch)
        sass = _disassemble(cubin)
    return _report(name or _entry_name(ptx), arch, ptx, text, sass)


def _assembled(tmp: str, ptx: str, arch: str):
    """:func:`_assemble` of one module, a :class:`ToolchainError` where ptxas failed."""
    cubin, text = _assemble(tmp, ptx, arch, "k")
    if cubin is None:
        raise ToolchainError(f"ptxas failed for {arch}:\n{text}")
    return cubin, text


def _arch_name(cc) -> str:
    """ptxas's name of a compute capability: (9, 0, "a") -> "sm_90a"."""
    return "sm_" + "".join(str(c) for c in cc)


_HEADER = re.compile(r"^[ \t]*\.(version|target|address_size)\b.*$", re.M)
_SECTION = re.compile(r"^\s*\.section\s+\.text\.(\S+?),", re.M)


def _sections(sass: str) -> dict:
    """nvdisasm's output of a cubin, by function: name -> that function's text section."""
    starts = [(m.start(), m.group(1)) for m in _SECTION.finditer(sass)]
    return {name: sass[a:b] for (a, name), (b, _) in zip(starts, starts[1:] + [(len(sass), None)])}


def _shared(ptxs: list, arch: str, tmp: str):
    """One cubin of every module in ``ptxs``, disassembled: ``[(ptxas text, SASS text)]`` per
    module, or None where that would not give what each module's own run gives: modules with
    different headers, clashing symbols (ptxas refuses the merged module), functions other
    than their entries, or warnings and coded diagnostics (they could not be told apart by
    kernel)."""
    names = [_entry_name(p) for p in ptxs]
    headers = {tuple(m.group(0).strip() for m in _HEADER.finditer(p)) for p in ptxs}
    if len(headers) != 1 or len(set(names)) != len(names) or "<module>" in names:
        return None
    merged = ptxs[0] + "".join(_HEADER.sub("", p) for p in ptxs[1:])
    cubin, text = _assemble(tmp, merged, arch, "all")
    if cubin is None or "warning" in text.lower() or _CODED.search(text):
        return None  # (a coded diagnostic comes before its function's block: it cannot be attributed)
    blocks = re.split(r"(?=^ptxas info\s*: Compiling entry function ')", text, flags=re.M)
    by_name = {}
    for b in blocks[1:]:
        m = re.match(r"ptxas info\s*: Compiling entry function '([^']+)'", b)
        by_name[m.group(1)] = b
    if sorted(by_name) != sorted(names) or "Compiling function" in text or \
            any(b.count("Used ") != 1 or b.count("Function properties for") != 1 for b in by_name.values()):
        return None
    sections = _sections(_disassemble(cubin))
    if sorted(sections) != sorted(names):
        return None
    return [(by_name[n], sections[n]) for n in names]


def reports_from_ptx(ptxs: list, arch: str = "sm_90a") -> list:
    """:func:`report_from_ptx` of each of ``ptxs``, with one ptxas and one nvdisasm run for all
    of them where their modules can share one cubin (same result: ptxas compiles each entry on
    its own; where they cannot, each is assembled and disassembled alone)."""
    ptxs = list(ptxs)
    if len(ptxs) < 2:
        return [report_from_ptx(p, arch) for p in ptxs]
    with tempfile.TemporaryDirectory(prefix="nbwgmma-") as tmp:
        shared = _shared(ptxs, arch, tmp)
    if shared is None:
        return [report_from_ptx(p, arch) for p in ptxs]
    return [_report(_entry_name(p), arch, p, text, sass) for p, (text, sass) in zip(ptxs, shared)]


def compile_cubin(kernel, sig, cc=(9, 0, "a")) -> tuple:
    """``(entry name, cubin bytes)`` of ``kernel`` (a ``@cuda.jit`` dispatcher) compiled for the
    argument types ``sig`` and ``cc`` with no GPU: Numba's PTX (its launch bounds included)
    assembled by ``ptxas``, the step Numba's linker takes on a GPU machine."""
    _check_cc(cc)
    ptx, _ = _ptx(kernel, sig, None, cc)
    with tempfile.TemporaryDirectory(prefix="nbwgmma-") as tmp:
        cubin, _ = _assembled(tmp, ptx, _arch_name(cc))
        with open(cubin, "rb") as f:
            return _entry_name(ptx), f.read()


def _pyfunc_and_options(kernel):
    py_func = getattr(kernel, "py_func", kernel)
    opts = getattr(kernel, "targetoptions", {}) or {}
    return py_func, opts


def _ptx(kernel, sig, launch_bounds, cc):
    from numba import config, cuda
    from numba.core.errors import NumbaError

    from .intrinsics.errors import NbwgmmaTypingError, shortened

    if config.ENABLE_CUDASIM:  # the simulator replaces the compiler (cuda.compile_ptx is None)
        raise ToolchainError("compile reports need Numba's CUDA compiler, which NUMBA_ENABLE_CUDASIM=1 replaces "
                             "with the simulator: run without NUMBA_ENABLE_CUDASIM")
    py_func, opts = _pyfunc_and_options(kernel)
    if not callable(py_func):
        raise ReportError(f"compile_report: kernel must be a @cuda.jit kernel or a Python function; got {kernel!r}")
    name = getattr(py_func, "__qualname__", None)
    if launch_bounds is None:
        launch_bounds = opts.get("launch_bounds")
    launch_bounds = _checked_launch_bounds(name, launch_bounds)
    with _device_functions_for(cc):
        try:
            ptx, _ = cuda.compile_ptx(py_func, sig, cc=cc, launch_bounds=launch_bounds)
        except NbwgmmaTypingError as e:  # (its traceback from here: the compiler's frames left out)
            raise shortened(e) from None
        except TypeError as e:  # Numba's checks of the signature and the return type (not typing errors)
            if isinstance(e, NumbaError) or not str(e).startswith(_NUMBA_SIG_ERRORS):
                raise
            raise ReportError(f"compile_report({name}, sig={sig!r}): {e} (sig: a tuple of Numba types, one per "
                              f"kernel argument, or a signature string such as 'void(float32[:], int32)'; the "
                              f"kernel returns nothing)") from None
    return ptx, name


#: The starts of the TypeErrors ``cuda.compile_ptx`` raises for a signature or a return type.
_NUMBA_SIG_ERRORS = ("Signature mismatch", "invalid type in signature", "invalid signature", "CUDA kernel must have "
                     "void return type")


def _checked_launch_bounds(name, lb):
    """Numba's launch bounds, as Python ints: an int (the most threads per block) or a sequence of
    1-3 positive ints (most threads, fewest resident blocks, most CTAs per cluster)."""
    parts = (lb,) if is_int(lb) else tuple(lb) if hasattr(lb, "__iter__") and not isinstance(lb, (str, bytes)) else None
    ok = lb is None or (parts is not None and 1 <= len(parts) <= 3 and all(is_int(v) and v > 0 for v in parts)
                        and parts[0] <= 1024)
    if not ok:
        raise ReportError(f"compile_report({name}): launch_bounds must be an int or a tuple of 1-3 positive ints "
                          f"(threads per block at most 1024, fewest blocks per SM, most CTAs per cluster); got {lb!r}")
    return lb if lb is None else int(lb) if is_int(lb) else tuple(int(v) for v in parts)


def _check_cc(cc) -> None:
    if not (isinstance(cc, tuple) and len(cc) in (2, 3) and all(isinstance(v, int) for v in cc[:2])
            and (len(cc) == 2 or cc[2] in ("a", "f", ""))):
        raise ReportError(f"compile_report: cc must be a tuple (major, minor) or (major, minor, 'a'), e.g. (9, 0, 'a') "
                          f"for sm_90a; got {cc!r}")


@contextlib.contextmanager
def _device_functions_for(cc):
    """Numba compiles a device function that is called (not inlined into its caller's Numba IR,
    e.g. ``nbwgmma.kit.inlined``) for the current device, which it asks the driver for: a
    report compiles them for ``cc`` instead, with or without a GPU. (Numba's dispatcher module
    keeps that query as a module attribute; numba-cuda's version is pinned in pyproject.toml.)"""
    from numba.cuda import dispatcher

    class Target:
        compute_capability = tuple(cc[:2])

    saved = dispatcher.get_current_device
    dispatcher.get_current_device = lambda: Target
    try:
        yield
    finally:
        dispatcher.get_current_device = saved


def compile_report(kernel, sig, *, launch_bounds=None, cc=(9, 0, "a")) -> CompileReport:
    """Compile ``kernel`` (a ``@cuda.jit`` dispatcher or plain function) for ``sig``.

    ``launch_bounds`` defaults to the dispatcher's own. Needs no GPU, but Numba's CUDA
    target: in its simulator (``NUMBA_ENABLE_CUDASIM=1``) this raises :class:`ToolchainError`.
    """
    return compile_reports([(kernel, sig, launch_bounds)], cc=cc)[0]


def compile_reports(jobs, *, cc=(9, 0, "a")) -> list:
    """:func:`compile_report` of each ``(kernel, sig)`` or ``(kernel, sig, launch_bounds)`` in
    ``jobs``, assembled and disassembled together (:func:`reports_from_ptx`)."""
    _check_cc(cc)
    for i, job in enumerate(jobs):
        if not isinstance(job, (tuple, list)) or len(job) not in (2, 3):
            raise ReportError(f"compile_reports: jobs[{i}] must be (kernel, sig) or (kernel, sig, launch_bounds); "
                              f"got {job!r}")
    compiled = [_ptx(job[0], job[1], job[2] if len(job) > 2 else None, cc) for job in jobs]
    reports = reports_from_ptx([ptx for ptx, _ in compiled], arch=_arch_name(cc))
    for rep, (_, name) in zip(reports, compiled):
        rep.name = name or rep.name
    return reports
