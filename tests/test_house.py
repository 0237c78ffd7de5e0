"""The house rules, checked on the sources (AST only: nothing is imported, so this runs in
well under a second):

* no import cycle among nbwgmma's modules (every ``import`` counts, also one inside a
  function: a lazy import hides a cycle from the interpreter, not from the reader);
* no underscored name (``_x``, not ``__x__``) defined in one nbwgmma module and used in
  another (imported, or read as an attribute of the module), and no underscored module
  imported from outside its package; the examples and benchmarks are held to the same rule;
* the intrinsics import neither the simulator nor the host-side layout models' users, and
  the layout models import no intrinsics.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PKG = ROOT / "nbwgmma"


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict:
    """Module name -> (path, AST) of every nbwgmma module."""
    return {_module_name(p): (p, ast.parse(p.read_text(), str(p))) for p in sorted(PKG.rglob("*.py"))}


MODULES = _modules()


def _package_of(name: str, path: pathlib.Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _type_checking_nodes(tree) -> set:
    """Nodes under ``if TYPE_CHECKING:`` (imports for annotations only)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            for sub in node.body:
                skip.update(ast.walk(sub))
    return skip


def _imports(name: str):
    """(node, imported module, names taken from it) for every import in module ``name``; the
    module is absolute, and a name that is itself a module is given as its own import."""
    path, tree = MODULES[name]
    pkg = _package_of(name, path)
    skip = _type_checking_nodes(tree)
    for node in ast.walk(tree):
        if node in skip:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                yield node, a.name, ()
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module
            names = [a.name for a in node.names]
            yield node, mod, names
            for n in names:
                if f"{mod}.{n}" in MODULES:
                    yield node, f"{mod}.{n}", ()


def _graph() -> dict:
    """Module -> the nbwgmma modules it imports. An import of one of its own packages (``from
    .. import sim`` names the package ``nbwgmma``) is no edge: a package is always imported
    before its modules."""
    graph = {}
    for name in MODULES:
        graph[name] = {mod for _, mod, _ in _imports(name)
                       if mod in MODULES and mod != name and not name.startswith(mod + ".")}
    return graph


def _cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles among nbwgmma's modules: " + "; ".join(" <-> ".join(c) for c in cycles)


def _private(n: str) -> bool:
    return n.startswith("_") and not (n.startswith("__") and n.endswith("__"))


def _defined(tree) -> set:
    """Names a module defines at its top level."""
    out = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                out.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return out


def _private_module(mod: str, pkg: str | None) -> str | None:
    """The first underscored module on the way to ``mod`` that code in package ``pkg`` (None:
    outside nbwgmma) may not import: one whose package is neither ``pkg`` nor inside it."""
    parts = mod.split(".")
    for i in range(1, len(parts)):
        if _private(parts[i]):
            owner = ".".join(parts[:i])
            if pkg is None or not (pkg == owner or pkg.startswith(owner + ".")) or \
                    (pkg != owner and not pkg.startswith(".".join(parts[:i + 1]))):
                return ".".join(parts[:i + 1])
    return None


def _private_uses(path: pathlib.Path, tree, name: str | None, pkg: str | None) -> list:
    """'file:line: text' for each use in ``tree`` of another nbwgmma module's underscored name."""
    found = []
    where = path.relative_to(ROOT)
    aliases = {}  # local name -> nbwgmma module it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != "nbwgmma":
                    continue
                bad = _private_module(a.name, pkg)
                if bad:
                    found.append(f"{where}:{node.lineno}: underscored module {bad}")
                if a.name in MODULES:
                    aliases[a.asname or "nbwgmma"] = a.name if a.asname else "nbwgmma"
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                mod = ".".join(base[:len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod not in MODULES:
                continue
            for a in node.names:
                sub = f"{mod}.{a.name}"
                bad = _private_module(sub if sub in MODULES else mod, pkg)
                if bad:
                    found.append(f"{where}:{node.lineno}: underscored module {bad}")
                if sub in MODULES:
                    aliases[a.asname or a.name] = sub
                elif _private(a.name) and mod != name:
                    found.append(f"{where}:{node.lineno}: {a.name} from {mod}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain, v = [node.attr], node.value
            while isinstance(v, ast.Attribute):
                chain.append(v.attr)
                v = v.value
            if not isinstance(v, ast.Name) or v.id not in aliases:
                continue
            mod = aliases[v.id]
            for part in reversed(chain[1:]):
                mod = f"{mod}.{part}"
            if mod in MODULES and mod != name and f"{mod}.{node.attr}" not in MODULES:
                found.append(f"{where}:{node.lineno}: {mod}.{node.attr}")
    return found


def test_no_underscored_name_crosses_modules():
    found = []
    for name, (path, tree) in MODULES.items():
        found += _private_uses(path, tree, name, _package_of(name, path))
    assert not found, "underscored names used outside their module:\n" + "\n".join(sorted(set(found)))


@pytest.mark.parametrize("folder", ["examples", "benchmarks"])
def test_examples_use_public_names(folder):
    found = []
    for path in sorted((ROOT / folder).glob("*.py")):
        found += _private_uses(path, ast.parse(path.read_text(), str(path)), None, None)
    assert not found, f"{folder} use nbwgmma's underscored names:\n" + "\n".join(sorted(set(found)))


def test_layers():
    """The intrinsics import no simulator, kit, kernels or front end; the layout models
    import no intrinsics; the simulator imports no kit, kernels or front end; the kit no
    simulator, kernels or front end; the kernels no simulator or front end."""
    graph = _graph()

    def reaches(a, prefixes):
        return sorted(m for m in graph[a] if any(m == p or m.startswith(p + ".") for p in prefixes))

    bad = []
    for name in MODULES:
        if name.startswith("nbwgmma.intrinsics"):
            bad += [(name, m) for m in reaches(name, ["nbwgmma.sim", "nbwgmma.kit", "nbwgmma.kernels",
                                                       "nbwgmma.frontend", "nbwgmma.launch"])]
        if name.startswith("nbwgmma.layout"):
            bad += [(name, m) for m in reaches(name, ["nbwgmma.intrinsics", "nbwgmma.sim", "nbwgmma.kit",
                                                       "nbwgmma.kernels", "nbwgmma.frontend"])]
        if name.startswith("nbwgmma.sim"):
            bad += [(name, m) for m in reaches(name, ["nbwgmma.kit", "nbwgmma.kernels", "nbwgmma.frontend"])]
        if name.startswith("nbwgmma.kit"):
            bad += [(name, m) for m in reaches(name, ["nbwgmma.sim", "nbwgmma.kernels", "nbwgmma.frontend"])]
        if name.startswith("nbwgmma.kernels"):
            bad += [(name, m) for m in reaches(name, ["nbwgmma.sim", "nbwgmma.frontend"])]
    assert not bad, "imports across layers: " + "; ".join(f"{a} -> {b}" for a, b in bad)


def test_modules_stay_small():
    big = [f"{p.relative_to(ROOT)}: {n} lines" for p, _ in MODULES.values()
           if (n := len(p.read_text().splitlines())) > 650]
    assert not big, "modules over about 600 lines: " + ", ".join(big)
