"""Scripts of the repository (benchmarks, examples) loaded as modules, for tests that call their functions."""

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).parent.parent


def load_script(folder, name):
    """The module ``<folder>/<name>.py`` of the repository, loaded from its file (the scripts are not a
    package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
