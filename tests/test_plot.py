"""Layout drawings: the pictures come from the same models the kernels are tested against."""

import numpy as np
import pytest

pytest.importorskip("matplotlib", reason="matplotlib is the optional 'plot' extra")

from nbwgmma.plot import plot_acc_layout, plot_swizzle  # noqa: E402


def test_acc_layout_png(tmp_path):
    owner, value = plot_acc_layout(tmp_path / "acc.png", "f32.bf16.bf16", 16)
    assert (tmp_path / "acc.png").stat().st_size > 1000
    # Row 0 belongs to warp 0 lanes 0..3, two adjacent columns per thread, value 0 and 1.
    assert owner[0, :8].tolist() == [0, 0, 1, 1, 2, 2, 3, 3] and value[0, :2].tolist() == [0, 1]
    assert owner[8, 0] == 0 and value[8, 0] == 2 and owner[16, 0] == 32


def test_swizzle_png(tmp_path):
    phys = plot_swizzle(tmp_path / "sw.png", "128B")
    assert (tmp_path / "sw.png").stat().st_size > 1000
    assert np.unique(phys).size == phys.size and phys[1, 0] == 128 + 16  # row 1: chunks 0 and 1 swap
