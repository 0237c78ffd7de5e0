"""benchmarks/configs.py --build without a GPU: the kernels a list's calls load, compiled ahead into a directory
of shipped kernels, where a plan of the same call looks them up."""

from tests.scripts import load_script


def test_build_puts_each_calls_kernel_where_its_plan_looks(tmp_path, monkeypatch, capsys):
    """One problem's default path (64 x 136 tiles in four K slices, pick_k_slices_64) and a forced config build
    one kernel (the same), a config the kernel refuses is reported with its error; the cubin is found under the
    key the call's plan (tail maps included) gives."""
    from nbwgmma import cache, launch
    from nbwgmma.precompile import ARCHS, cpu_plan

    configs = load_script("benchmarks", "configs")
    # (build sets the shipped kernels' directory and a 132-SM GPU's limits in this process: restored after)
    monkeypatch.setattr(cache, "PREBUILT", cache.PREBUILT)
    monkeypatch.setattr(launch, "device_limits", launch.device_limits)
    problem = ("bf16", "KK", 1893, 136, 8192)
    configs.build([(problem, [{"bm": 64, "bn": 136, "split": 4}]), (("bf16", "KK", 100, 100, 100), [{"bm": 7}])],
                  str(tmp_path), 1)
    out = capsys.readouterr().out
    assert "config['bm'] must be 64, 128, 192 or 256; got 7" in out
    assert "4 kernels: 2 built, 1 found" in out, out  # (the default path of 100^3 builds its own)
    assert len(list(tmp_path.glob("*.cubin"))) == 2
    plan = cpu_plan("bf16", "KK", {}, 1893, 136, 8192, tails=True)
    assert (plan.cfg.bm, plan.cfg.bn, plan.cfg.split) == (64, 136, 4)
    assert cache.lookup(("gemm", plan.cfg.key()), plan.signature(), ARCHS["sm_90a"][1], prebuilt=True) is not None
