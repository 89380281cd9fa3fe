"""The house rules of the layout (docs/architecture.md), checked on the source itself.

- no import cycle among bigkernel's modules, counting imports inside functions;
- no module-level ``__getattr__`` and no import wrapped in ``try`` (ways to dodge a cycle);
- no private name imported from another package;
- no module over 800 lines;
- numerics/ and kernels/ never import dask (array math only); graph/ never computes.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "bigkernel"
MAX_LINES = 800


def _modules() -> dict[str, pathlib.Path]:
    mods = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _package(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def _imports(name: str) -> list[tuple[str, list[str], ast.AST]]:
    """(module imported, names imported, node) for every bigkernel import in ``name``."""
    out = []
    for node in ast.walk(TREES[name]):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node) for a in node.names if a.name.split(".")[0] == "bigkernel"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package(name).split(".")[: len(_package(name).split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod.split(".")[0] == "bigkernel":
                out.append((mod, [a.name for a in node.names], node))
    return out


def _imported(node: ast.AST) -> list[str]:
    """Modules an import statement names (empty for other nodes)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        return [node.module or ""]
    return []


def _resolve(target: str) -> str | None:
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _graph() -> dict[str, set[str]]:
    graph = {}
    for name in MODULES:
        edges = set()
        for mod, names, _ in _imports(name):
            for n in names:  # "from bigkernel.pkg import module"
                if f"{mod}.{n}" in MODULES:
                    edges.add(f"{mod}.{n}")
            target = _resolve(mod)
            if target:
                edges.add(target)
        edges.discard(name)
        graph[name] = edges
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_the_checker_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle():
    # the package __init__ re-exports everything: edges into it are excluded, not edges out
    graph = {k: {t for t in v if t != "bigkernel"} for k, v in _graph().items()}
    assert _cycles(graph) == []


def test_no_module_level_getattr_and_no_import_in_try():
    for name, tree in TREES.items():
        assert not any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body), name
        for node in ast.walk(tree):
            if isinstance(node, ast.Try):
                for stmt in node.body:  # optional third-party imports may be tried; ours may not
                    assert not any(m.startswith("bigkernel") for m in _imported(stmt)), (
                        f"{name}: bigkernel import inside try"
                    )


def _private_imports() -> list[tuple[str, str, list[str], bool]]:
    """(importer, module, private names, same package) for every import of a private name."""
    out = []
    for name in MODULES:
        pkg = _package(name)
        for mod, names, _ in _imports(name):
            target = _resolve(mod)
            if target is None or target == "bigkernel":
                continue
            private = [n for n in names if n.startswith("_") and not n.endswith("__") and f"{mod}.{n}" not in MODULES]
            if private:
                out.append((name, mod, private, _package(target) == pkg))
    return out


def test_the_checkers_see_the_code():
    """The rules above would pass vacuously on a walker that found nothing: it must see known
    edges, a private name imported inside its own package, and long functions."""
    graph = _graph()
    assert "bigkernel.models._base" in graph["bigkernel.models.exact"]
    assert "bigkernel.io.model_store" in graph["bigkernel.models._base"]
    assert ("bigkernel.jobs.runner", "bigkernel.jobs.inputs", ["_chunk_rows"], True) in _private_imports()
    longest = max(_code_lines(n) for t in TREES.values() for n in ast.walk(t) if isinstance(n, ast.FunctionDef))
    assert longest > 80


def test_no_private_name_imported_across_packages():
    across = [(name, mod, private) for name, mod, private, same in _private_imports() if not same]
    assert across == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_size(name):
    assert len(MODULES[name].read_text().splitlines()) <= MAX_LINES


def test_array_math_layers_do_not_import_dask():
    for name, tree in TREES.items():
        if not name.startswith(("bigkernel.numerics", "bigkernel.kernels")):
            continue
        for node in ast.walk(tree):
            assert not any(m.split(".")[0] in ("dask", "distributed") for m in _imported(node)), name


def test_graph_builders_never_compute():
    for name, tree in TREES.items():
        if not name.startswith("bigkernel.graph"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("compute", "persist"):
                raise AssertionError(f"{name} calls .{node.attr} (line {node.lineno})")
            if isinstance(node, ast.Name) and node.id == "compute":
                raise AssertionError(f"{name} uses compute (line {node.lineno})")


def _code_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines of a function from its signature to its end, its docstring left out."""
    doc = ast.get_docstring(node, clean=False)
    skip = 0
    if doc is not None:
        first = node.body[0]
        skip = first.end_lineno - first.lineno + 1
    return node.end_lineno - node.lineno + 1 - skip


def test_a_long_function_says_why_it_is_one():
    for name, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _code_lines(node) > 80:
                doc = ast.get_docstring(node) or ""
                assert "One function on purpose" in doc, f"{name}.{node.name} ({node.lineno}): say why it is one"
