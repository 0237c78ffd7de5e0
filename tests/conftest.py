import functools
import os
import subprocess
import sys

import pytest

# Kernels the tests compile go to a cache of their own, not the user's (nbwgmma.cache).
os.environ.setdefault("NBWGMMA_CACHE_DIR", os.path.join(
    os.environ.get("TMPDIR", "/tmp"), f"nbwgmma-test-cache-{os.getuid()}"))

#: Set in the child process of an isolated test (see ``pytest_runtest_call``).
CHILD_ENV = "NBWGMMA_ISOLATED_CHILD"


@functools.lru_cache(maxsize=None)
def gpu_skip_reason():
    """None when an sm_90 GPU is usable, else why the GPU tests are skipped. (Reads the device's
    attributes without creating a context: the xdist controller asks too, see below.)"""
    try:
        from numba import cuda

        if not cuda.is_available():
            return "no CUDA GPU available"
        try:
            cc = tuple(cuda.gpus[0].compute_capability)  # the device's attributes, no context
        except Exception:  # noqa: BLE001  (another numba-cuda: ask through a context, as before)
            cc = cuda.get_current_device().compute_capability
        if cc < (9, 0):
            return f"needs compute capability 9.0 (sm_90a); device has {cc}"
    except Exception as exc:  # a broken driver install is a skip, not an error
        return f"CUDA unusable: {exc}"
    return None


#: The xdist controller's answer to ``gpu_skip_reason``, handed to every worker: workers that
#: each asked for themselves could disagree (one that failed to reach a GPU busy with other
#: runs skipped its share of the GPU tests, or, with the "gpu" group, collected other node ids
#: than the rest and stopped the run). A worker that cannot use the GPU the controller found
#: fails its GPU tests instead of skipping them.
GPU_SKIP_KEY = "nbwgmma_gpu_skip_reason"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput[GPU_SKIP_KEY] = gpu_skip_reason() or ""


def run_skip_reason(config):
    """``gpu_skip_reason`` for this run: the controller's in an xdist worker, else this process's."""
    given = getattr(config, "workerinput", {}).get(GPU_SKIP_KEY)
    return gpu_skip_reason() if given is None else (given or None)


#: Single tests scheduled first, so that under pytest-xdist (``-n auto`` in pyproject.toml) the
#: workers share out the short rest at the end and finish together: the modules whose tests
#: run child processes for tens of seconds. (xdist's loadgroup hands out its groups, the
#: batches of compiles (``BATCHED``), before any single test, largest first.) The examples' GPU
#: runs, a child process each, ran last in the GPU suite and made its tail (2026-12-06).
SLOW_FIRST = ("test_sim.py", "test_sim_frontend.py", "test_debug_wait.py", "test_examples.py",
              "test_config_fuzz_gpu.py")


def _schedule_rank(item) -> int:
    name = item.nodeid.rpartition("/")[2]
    for rank, slow in enumerate(SLOW_FIRST):
        if name == slow or name.startswith(slow + "::") or name.endswith("::" + slow):
            return rank
    return len(SLOW_FIRST)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """A pytest started by a test (an isolated test's child, the simulator's child run) runs its
    tests in that one process: the parent run already spreads the work over the CPUs."""
    if (os.environ.get(CHILD_ENV) or os.environ.get("NUMBA_ENABLE_CUDASIM") == "1") \
            and getattr(config.option, "numprocesses", None):
        config.option.numprocesses = 0
        config.option.dist = "no"


def pytest_addoption(parser):
    parser.addoption("--run-sanitizer", action="store_true",
                     help="run the tests marked 'sanitizer' (kernels under compute-sanitizer; slow)")
    parser.addoption("--gpu-parallel", action="store_true",
                     help="spread the GPU tests over the xdist workers (each its own CUDA context on the one "
                          "GPU) instead of running them in one worker, in order")


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    items.sort(key=_schedule_rank)  # stable: the rest keep their order
    _batch_items(items)
    if not config.getoption("--run-sanitizer"):
        skip_san = pytest.mark.skip(reason="compute-sanitizer runs need --run-sanitizer")
        for item in items:
            if "sanitizer" in item.keywords:
                item.add_marker(skip_san)
    reason = run_skip_reason(config)
    if reason is None:
        # One GPU: its tests run one after another in one worker (--dist loadgroup), as in a
        # serial run, so that no two processes time or fill the GPU at once. --gpu-parallel
        # spreads them instead: most of their time is compiling, on the CPU (no test asserts a
        # time but test_debug_wait's generous 15 s; an H200 ran 442 of them spread over 16
        # workers in 440 s, where one worker got through 119 in 555 s).
        if config.getoption("--gpu-parallel"):
            return
        for item in items:
            if "gpu" in item.keywords or "sanitizer" in item.keywords:
                item.add_marker(pytest.mark.xdist_group("gpu"))
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


#: pytest plugins the tests do not use (as in pyproject.toml's addopts), for child runs that
#: replace the addopts: each costs start-up time where it is installed.
UNUSED_PLUGINS = ("-p", "no:hypothesispytest", "-p", "no:benchmark")


def run_isolated(nodeid: str, timeout: float, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run one test in a fresh Python process; a hang becomes a failure after ``timeout`` s."""
    if "@" in nodeid and "]" not in nodeid.rpartition("@")[2]:  # pytest-xdist's "@group" suffix
        nodeid = nodeid.rpartition("@")[0]
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "--no-header", "-p", "no:cacheprovider", "-p", "no:warnings",
           *UNUSED_PLUGINS, "--tb=short", nodeid]
    child_env = dict(os.environ, **(env or {}), **{CHILD_ENV: "1"})
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=child_env)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"")[-3000:]
        pytest.fail(f"{nodeid} hung: no result after {timeout:g} s (killed). Output so far:\n{out}")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item):
    """Tests marked ``isolated(timeout=...)`` run in a child process with a deadline, so a
    kernel that never finishes fails that test instead of stalling the suite."""
    mark = item.get_closest_marker("isolated")
    if mark is None or os.environ.get(CHILD_ENV):
        return None
    timeout = mark.kwargs.get("timeout", 300)
    res = run_isolated(item.nodeid, timeout)
    if res.returncode != 0:
        pytest.fail(f"isolated run failed (exit {res.returncode}):\n{(res.stdout + res.stderr)[-6000:]}",
                    pytrace=False)
    item.runtest = lambda: None  # the child ran it
    return None


_REPORTS = {}


@pytest.fixture(scope="session")
def report_once():
    """``compile_report`` that compiles each (kernel, signature) once per test process.

    ``gemm_kernel(cfg)`` returns one dispatcher per configuration, so tests (and the examples
    and CLI commands they run, through ``monkeypatch.setattr(nbwgmma.report, "compile_report",
    report_once)``) that check the same GEMM configuration share its compile. Tests that
    share a kernel this way also share an ``xdist_group``, so that they run in one worker.
    """
    from nbwgmma.report import compile_report

    def report(kernel, sig, *, launch_bounds=None, cc=(9, 0, "a")):
        key = (kernel, tuple(sig), launch_bounds, tuple(cc))
        if key not in _REPORTS:
            _REPORTS[key] = compile_report(kernel, sig, launch_bounds=launch_bounds, cc=cc)
        return _REPORTS[key]

    return report


#: Parametrized tests whose kernels are compiled in batches: test function -> number of batches.
#: Each batch is one ``xdist_group`` (one worker compiles it; see ``report_batch``), and its
#: kernels share one ``ptxas`` and one ``nvdisasm`` run (nbwgmma.report.compile_reports).
BATCHED = {
    "tests/test_matmul_cpu.py::test_gemm_kernel_sass": 5,
    "tests/test_matmul_cpu.py::test_split_k_kernels_compile_clean": 2,
    "tests/test_matmul_cpu.py::test_every_automatic_tile_compiles_clean": 1,
    "tests/test_autotune.py::test_deeper_pipelines_compile_clean": 1,
    "tests/test_autotune.py::test_narrow_tiles_compile_clean": 1,
    "tests/test_autotune.py::test_one_wave_tiles_compile_clean": 1,
    "tests/intrinsics/test_wgmma_cpu.py::test_every_legal_form_assembles": 6,
    "tests/intrinsics/test_wgmma_sp_cpu.py::test_sparse_forms_assemble": 2,
    "tests/intrinsics/test_sync_cpu.py::test_ptx_and_sass": 3,
    "tests/test_tma_cpu.py::test_tma_forms_assemble": 3,
    "tests/test_tma_cpu.py::test_bulk_forms_assemble": 1,
    "tests/intrinsics/test_matrix_cpu.py::test_ldmatrix_stmatrix_forms": 1,
    "tests/intrinsics/test_matrix_cpu.py::test_acc_store_swizzled_compiles": 1,
    "tests/intrinsics/test_matrix_cpu.py::test_acc_stmatrix_swizzled_compiles": 1,
    "tests/intrinsics/test_matrix_cpu.py::test_acc_stmatrix_transposed_compiles": 1,
}
_MEMBERS: dict = {}  # batch -> the parameters of its tests
_BATCHES: dict = {}  # batch -> {parameters: report}, in this process


def _batch_items(items):
    """Spread each ``BATCHED`` test's cases over its batches, round-robin (a case already in
    an ``xdist_group`` stays in it)."""
    seen: dict = {}
    for item in items:
        func = item.nodeid.partition("[")[0]
        n = BATCHED.get(func)
        if n is None or not hasattr(item, "callspec") or item.get_closest_marker("xdist_group"):
            continue
        i = seen[func] = seen.get(func, -1) + 1
        group = f"{func.rpartition('::')[2]}-batch{i % n}"
        item.add_marker(pytest.mark.xdist_group(group))
        _MEMBERS.setdefault(group, []).append(dict(item.callspec.params))


@pytest.fixture
def report_batch(request):
    """``report_batch(job)``: the compile report of this test's kernel, ``job(**params)`` =
    ``(kernel, sig, launch_bounds)`` for the test's parameters.

    The first test of a batch (``BATCHED``) in a test process compiles the kernels of every
    test of the batch with :func:`nbwgmma.report.compile_reports`: one ``ptxas`` and one
    ``nvdisasm`` run for all (``nvdisasm`` alone spends about 0.3 s of set-up on every run);
    the others read their reports. Where a kernel of the batch does not compile, each test
    compiles its own, and that test alone fails.
    """
    from nbwgmma.report import compile_report, compile_reports

    params = dict(request.node.callspec.params)
    mark = request.node.get_closest_marker("xdist_group")
    group = mark.args[0] if mark else None

    def get(job):
        key = tuple(sorted(params.items(), key=str))
        batch = _BATCHES.get(group) if group in _MEMBERS else {}
        if batch is None:
            members = _MEMBERS[group]
            try:
                reports = compile_reports([job(**p) for p in members])
                batch = {tuple(sorted(p.items(), key=str)): r for p, r in zip(members, reports)}
            except Exception:  # noqa: BLE001 - reported by the test of the kernel at fault, below
                batch = {}
            _BATCHES[group] = batch
        if key not in batch:
            kernel, sig, bounds = job(**params)
            batch[key] = compile_report(kernel, sig, launch_bounds=bounds)
        return batch[key]

    return get


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng(1234)


@pytest.fixture
def sms_132(monkeypatch):
    """The device limits plans read, as an H100's 132 SMs (tile picks on a machine without a GPU)."""
    monkeypatch.setattr(sys.modules["nbwgmma.launch"], "device_limits", lambda device=None: {"multiprocessors": 132})
