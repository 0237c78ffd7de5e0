"""help() and inspect.signature of the intrinsics show what a kernel passes."""

import inspect

import nbwgmma.intrinsics as intrinsics

PUBLIC = [n for n in intrinsics.__all__ if callable(getattr(intrinsics, n))]


def test_signatures_name_the_kernels_arguments():
    sigs = {n: inspect.signature(getattr(intrinsics, n)) for n in PUBLIC}
    assert not [n for n, s in sigs.items() if "typingctx" in s.parameters]
    assert str(sigs["tma_load_2d"]) == "(dst, tmap, bar, c0, c1)"
    assert str(sigs["tma_load_multicast_2d"]) == "(dst, tmap, bar, mask, c0, c1)"
    assert str(sigs["acc_scale"]) == "(acc, other)"


def test_inline_ptx_docs_open_with_the_call():
    fns = [getattr(intrinsics, n) for n in PUBLIC if hasattr(getattr(intrinsics, n), "ptx_template")]
    assert len(fns) > 60
    no_call = [f for f in fns if f"{f.__name__}(" not in f.__doc__.split(". ")[0]]
    assert not no_call, [f.__name__ for f in no_call]
    assert intrinsics.tma_load_2d.__doc__.startswith("``tma_load_2d(dst, tmap, bar, c0, c1)``: ")
    assert "innermost first" in intrinsics.tma_store_2d.__doc__


def test_every_intrinsics_doc_names_its_call():
    """help() on a hand-written intrinsic shows Numba's class and its docstring, not a signature
    (a newcomer's trial found acc_to_bf16x2's doc without one): each doc names the call."""
    fns = {n: getattr(intrinsics, n) for n in PUBLIC if not isinstance(getattr(intrinsics, n), type)}
    no_call = [n for n, f in fns.items() if f"{n}(" not in (f.__doc__ or "").split(". ")[0]]
    assert not no_call, no_call
