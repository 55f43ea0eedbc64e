"""The package layering: each package imports only what its docstring allows, and no cycles.

Imports inside functions count: a lazy import hides a cycle from Python, not from a reader.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "evalsuite"
ALLOWED = re.compile(r"May import:\s*([^.]*)\.")


def packages() -> list[str]:
    return sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file())


def allowed(pkg: str) -> set[str]:
    doc = ast.get_docstring(ast.parse((ROOT / pkg / "__init__.py").read_text())) or ""
    m = ALLOWED.search(doc)
    assert m, f"evalsuite/{pkg}/__init__.py: the docstring must end with 'May import: ...'"
    names = {n.strip() for n in m.group(1).split(",")}
    return set() if names == {"nothing of evalsuite"} else names


def imported_packages(path: Path, pkgs: set[str]) -> set[str]:
    """evalsuite packages a module imports, at top level or inside functions."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "evalsuite" else [f"evalsuite.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "evalsuite" and len(parts) > 1 and parts[1] in pkgs:
                out.add(parts[1])
    return out


def import_graph() -> dict[str, dict[str, list[str]]]:
    """package -> imported package -> modules that import it."""
    pkgs = set(packages())
    graph: dict[str, dict[str, list[str]]] = {p: {} for p in pkgs}
    for pkg in pkgs:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for dep in imported_packages(path, pkgs) - {pkg}:
                graph[pkg].setdefault(dep, []).append(str(path.relative_to(ROOT.parent)))
    return graph


def find_cycle(graph: dict[str, dict[str, list[str]]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_every_module_lives_in_a_package():
    loose = sorted(p.name for p in ROOT.glob("*.py") if p.name not in {"__init__.py", "__main__.py"})
    assert not loose, f"modules outside a package: {loose}"


def test_imports_follow_the_docstrings():
    graph = import_graph()
    bad = [f"{pkg} -> {dep} ({', '.join(where)})"
           for pkg, deps in graph.items() for dep, where in sorted(deps.items()) if dep not in allowed(pkg)]
    assert not bad, "imports a package's docstring does not allow:\n" + "\n".join(bad)


def test_no_cycle_between_packages():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


MAX_DOCSTRING_LINES = 15


def test_module_docstrings_are_short():
    """A module's docstring says what it is for and why; details and measurements live in docs/."""
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text()), clean=False)
        lines = len(doc.strip("\n").splitlines()) if doc else 0
        if lines > MAX_DOCSTRING_LINES:
            long.append(f"{path.relative_to(ROOT.parent)}: {lines} lines")
    assert not long, f"module docstrings over {MAX_DOCSTRING_LINES} lines:\n" + "\n".join(long)


def test_the_checker_sees_lazy_imports(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("def f():\n    from evalsuite.report.compare import compare\n    import evalsuite.run.runner\n"
                   "from evalsuite import stats\n")
    assert imported_packages(mod, {"report", "run", "stats"}) == {"report", "run", "stats"}
    assert find_cycle({"a": {"b": []}, "b": {"c": []}, "c": {"a": []}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b": []}, "b": {}}) is None


def module_graph() -> dict[str, dict[str, list[str]]]:
    """module -> evalsuite modules it imports (a package's __init__ stands for the package)."""
    files = {".".join(p.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__"): p
             for p in ROOT.rglob("*.py")}
    graph: dict[str, dict[str, list[str]]] = {m: {} for m in files}
    for mod, path in files.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                while name and name not in files:
                    name = name.rpartition(".")[0]
                if name and name != mod and name.startswith("evalsuite."):
                    graph[mod].setdefault(name, []).append(mod)
    return graph


def test_no_cycle_between_modules():
    cycle = find_cycle(module_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_benches_and_scripts_import_what_exists():
    """bench/ and scripts/ import evalsuite lazily, inside the functions a GPU run reaches; a module
    renamed in the package would otherwise surface only on the device."""
    import importlib.util

    missing = []
    for path in sorted([*ROOT.parent.glob("bench/*.py"), *ROOT.parent.glob("scripts/**/*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.ImportFrom) and (node.module or "").startswith("evalsuite")):
                continue
            try:
                module = importlib.import_module(node.module)
            except ModuleNotFoundError:
                missing.append(f"{path.name}:{node.lineno} {node.module}")
                continue
            missing += [f"{path.name}:{node.lineno} {node.module}.{a.name}" for a in node.names
                        if not hasattr(module, a.name) and importlib.util.find_spec(f"{node.module}.{a.name}") is None]
    assert not missing, missing
