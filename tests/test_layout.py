"""The house rules of the layout (docs/architecture.md), checked on the source itself.

- no import cycle among bigkernel's modules, counting imports inside functions;
- no module-level ``__getattr__`` and no import wrapped in ``try`` (ways to dodge a cycle);
- no private name imported from another package;
- no module over 800 lines, no function over 60 code lines unless its docstring says "One
  function on purpose" and why;
- numerics/ and kernels/ never import dask (array math only); graph/ never computes;
- the layer rule (issue 20): outside models/ and kernels/ no ``obj._private`` use on another
  object (only ``self._x`` / ``cls._x`` / ``super()._x``; the exceptions are listed with their
  reason in :data:`PRIVATE_ACCESS_ALLOWED`), no ``isinstance``/``issubclass`` over a class
  defined in models/ outside models/ (the layers above ask public facts: ``replicate_plan``,
  ``get_model_state``...), and solvers/ never imports models/, bands/ or jobs/ (solvers sit
  below the estimators and above graph/, numerics/, io/, runtime and data/).

Each rule has a test that its checker finds a planted violation, so none passes vacuously.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "bigkernel"
MAX_LINES = 800
MAX_FUNCTION_LINES = 60

#: Private attributes that code outside models/ and kernels/ may use on another object, and why.
PRIVATE_ACCESS_ALLOWED = {
    "_parameter_constraints": "scikit-learn's parameter table of an estimator class: the job "
    "config checks and builds the model section from it (one declaration of every parameter)",
}

#: Packages whose code may use the private attributes of the objects they define (and of each
#: other's: an estimator sets its inner estimator's state, a kernel combines kernels).
PRIVATE_ACCESS_PACKAGES = ("bigkernel.models", "bigkernel.kernels")

#: What solvers/ must never import: the layers above it.
SOLVERS_MAY_NOT_IMPORT = ("bigkernel.models", "bigkernel.bands", "bigkernel.jobs")


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
    assert longest > MAX_FUNCTION_LINES
    assert {"KernelRidge", "ExactKernelRidge", "RandomFeatureRidge"} <= ESTIMATOR_CLASSES
    assert "bigkernel.solvers.base" in graph and "bigkernel.solvers.replicates" in graph


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


def _unexplained_long_functions(tree: ast.AST, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int]]:
    """(name, line) of every function over ``limit`` code lines whose docstring does not say
    "One function on purpose" (and why)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _code_lines(node) > limit:
            if "One function on purpose" not in (ast.get_docstring(node) or ""):
                out.append((node.name, node.lineno))
    return out


def test_the_checker_finds_a_long_function():
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    long = f'def f():\n    """Doc."""\n{body}\n'
    why = f'def g():\n    """One function on purpose: a reason."""\n{body}\n'
    short = 'def h():\n    """Doc."""\n' + "\n".join(body.splitlines()[:-1]) + "\n"
    assert _unexplained_long_functions(ast.parse(long + why + short)) == [("f", 1)]


def test_a_long_function_says_why_it_is_one():
    found = [f"{name}.{fn} ({line})" for name, tree in TREES.items() for fn, line in _unexplained_long_functions(tree)]
    assert found == [], f"over {MAX_FUNCTION_LINES} code lines: split, or say why it is one"


# --------------------------------------------------------------------------------------------
# The layer rule: the layers above the estimators use public names only
# --------------------------------------------------------------------------------------------
def _classes_defined_in(prefix: str) -> set[str]:
    return {
        node.name
        for name, tree in TREES.items()
        if name.startswith(prefix)
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }


#: Names of the classes defined in models/ (the estimators and their helpers).
ESTIMATOR_CLASSES = _classes_defined_in("bigkernel.models")


def _private_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, expression) of every ``obj._private`` whose ``obj`` is not ``self``, ``cls`` or
    ``super()``, dunders and :data:`PRIVATE_ACCESS_ALLOWED` left out."""
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        attr = node.attr
        if not attr.startswith("_") or attr.endswith("__") or attr in PRIVATE_ACCESS_ALLOWED:
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "super":
            continue
        out.append((node.lineno, ast.unparse(node)))
    return out


def _estimator_type_checks(tree: ast.AST, classes: set[str]) -> list[tuple[int, list[str]]]:
    """(line, class names) of every ``isinstance``/``issubclass`` naming one of ``classes``
    (as a name or an attribute, alone or in a tuple)."""
    out = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 2):
            continue
        if node.func.id not in ("isinstance", "issubclass"):
            continue
        named = [n.id if isinstance(n, ast.Name) else n.attr for n in ast.walk(node.args[1])
                 if isinstance(n, (ast.Name, ast.Attribute))]  # fmt: skip
        hits = sorted({n for n in named if n in classes})
        if hits:
            out.append((node.lineno, hits))
    return out


def _upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(module, imported) for every solvers/ module importing a layer above it."""
    return sorted(
        (name, target)
        for name, targets in graph.items()
        if name.startswith("bigkernel.solvers")
        for target in targets
        if target.startswith(SOLVERS_MAY_NOT_IMPORT)
    )


def test_the_checker_finds_a_private_use_on_another_object():
    code = (
        "class A:\n"
        "    def f(self, est):\n"
        "        self._ok, super()._ok()\n"
        "        est._solve()\n"
        "        owner._parameter_constraints\n"
        "        est.__class__, est.public\n"
        "    @classmethod\n"
        "    def g(cls, h):\n"
        "        return cls._ok, h._mark\n"
    )
    assert _private_uses(ast.parse(code)) == [(4, "est._solve"), (9, "h._mark")]


def test_no_private_use_on_another_object_outside_models_and_kernels():
    found = [
        f"{name}:{line} {text}"
        for name, tree in TREES.items()
        if not name.startswith(PRIVATE_ACCESS_PACKAGES)
        for line, text in _private_uses(tree)
    ]
    assert found == [], "use a public name (or list the exception in PRIVATE_ACCESS_ALLOWED, with its reason)"


def test_the_checker_finds_an_isinstance_over_estimators():
    code = (
        "isinstance(est, KernelRidge)\n"
        "isinstance(est, (int, models.ExactKernelRidge))\n"
        "issubclass(cls, KernelRidge)\n"
        "isinstance(est, dict)\n"
    )
    found = _estimator_type_checks(ast.parse(code), {"KernelRidge", "ExactKernelRidge"})
    assert found == [(1, ["KernelRidge"]), (2, ["ExactKernelRidge"]), (3, ["KernelRidge"])]


def test_no_isinstance_over_estimator_classes_outside_models():
    found = [
        f"{name}:{line} {hits}"
        for name, tree in TREES.items()
        if not name.startswith("bigkernel.models")
        for line, hits in _estimator_type_checks(tree, ESTIMATOR_CLASSES)
    ]
    assert found == [], "ask the estimator a public fact (a method or attribute), not its class"


def test_the_checker_finds_an_upward_import_of_solvers():
    graph = {
        "bigkernel.solvers.x": {"bigkernel.numerics.cg", "bigkernel.models.exact"},
        "bigkernel.solvers.y": {"bigkernel.jobs.runner", "bigkernel.io.band_store"},
        "bigkernel.models.exact": {"bigkernel.solvers.x"},
    }
    assert _upward_imports(graph) == [
        ("bigkernel.solvers.x", "bigkernel.models.exact"),
        ("bigkernel.solvers.y", "bigkernel.jobs.runner"),
    ]


def test_solvers_never_import_models_bands_or_jobs():
    assert _upward_imports(_graph()) == []
