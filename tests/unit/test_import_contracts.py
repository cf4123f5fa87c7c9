"""Import contracts of the package, read from the source (every import: module level,
function level and ``TYPE_CHECKING`` blocks alike, so no cycle hides in a function).

- the local development stack (``kappaplus.local``) is imported only by the command-line
  entry points, never by production modules (nor by the example jobs);
- the audit (row counts the run records, ``kappa reconcile``'s comparison) imports no
  runtime, which records through it;
- connectors are one package per system; a connector imports no other connector (except the
  hybrid source, which composes the lake and Kafka ones), and within a connector the reading
  modules and the sink never import each other;
- the lake formats (Hive, Iceberg, Delta) each import the shared lake layer
  (``kappaplus.connectors.lake``) and never another format; the lake layer imports no format;
- connectors import neither the runtime, the job configuration nor the session;
- the slicing core (``kappaplus.slicing``: planner, sizing, pacing, offsets, manifests, the
  file-statistics model) knows no lake format: it imports only itself and the shared layers,
  never a connector, the runtime, the job configuration or Spark;
- the shared layers import none of sources, sinks, connectors, runtime, job config or local;
- module-level imports between kappaplus modules form no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__import__("kappaplus").__file__).parent

ENTRY_POINTS = ("kappaplus.cli",)
"""Command-line entry points (the package ``kappaplus.cli``): they compose the local stack
with production code."""

SHARED = ("kappaplus.core", "kappaplus.codecs")
"""Layers every other module may use; they use none of the layers above them."""

ABOVE_SHARED = (
    "kappaplus.connectors",
    "kappaplus.runtime",
    "kappaplus.local",
    "kappaplus.config",
    "kappaplus.jobs",
    "kappaplus.session",
    "kappaplus.archive",
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _in(name: str, prefixes: tuple[str, ...] | set[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """``(imported module, line, at module level at run time)`` for each kappaplus import."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend(
                    (a.name, child.lineno, top) for a in child.names if _in(a.name, ("kappaplus",))
                )
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                if _in(child.module, ("kappaplus",)):
                    found.append((child.module, child.lineno, top))
                    # ``from kappaplus.core.table import commit_log`` imports a submodule
                    for alias in child.names:
                        sub = f"{child.module}.{alias.name}"
                        if (PACKAGE.parent / sub.replace(".", "/")).with_suffix(".py").exists():
                            found.append((sub, child.lineno, top))
            elif isinstance(child, ast.If) and _is_type_checking(child):
                visit(child, False)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, False if not isinstance(child, ast.ClassDef) else top)
            else:
                visit(child, top)

    visit(tree, True)
    return found


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def violations(rule) -> list[str]:  # type: ignore[no-untyped-def]
    out = []
    for name, path in MODULES.items():
        for target, line, _ in imports(path):
            reason = rule(name, target)
            if reason:
                out.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line}: {name} -> {target}: {reason}"
                )
    return out


def test_contract_checker_sees_imports() -> None:
    # the checker itself must see function-level and TYPE_CHECKING imports
    targets = {t for t, _, _ in imports(PACKAGE / "runtime" / "runner.py")}
    assert "kappaplus.config" in targets and "kappaplus.runtime.binding.inputs" in targets
    assert len(MODULES) > 40


def test_local_stack_only_in_entry_points() -> None:
    def rule(name: str, target: str) -> str | None:
        if _in(target, ("kappaplus.local",)) and not (
            _in(name, ("kappaplus.local",)) or _in(name, ENTRY_POINTS)
        ):
            return "production code must not import the local development stack"
        return None

    assert violations(rule) == []


def test_audit_imports_no_runtime() -> None:
    # the run records its counts through the audit (kappaplus.audit.counts, .table), so
    # the audit sits below the run: what needs a run's checkpoint or identity (the
    # reconcile target) lives in the runtime
    def rule(name: str, target: str) -> str | None:
        if _in(name, ("kappaplus.audit",)) and _in(target, ("kappaplus.runtime",)):
            return "the audit imports the runtime, which records through it"
        return None

    assert violations(rule) == []


LAKE = "kappaplus.connectors.lake"
"""The lake layer: the listed-files source, slice delivery, the reader choice, options."""
LAKE_FORMATS = (
    "kappaplus.connectors.hive",
    "kappaplus.connectors.iceberg",
    "kappaplus.connectors.delta",
)
CONNECTORS = (
    *LAKE_FORMATS,
    LAKE,
    "kappaplus.connectors.kafka",
    "kappaplus.connectors.hybrid",
)
COMPOSES = {
    "kappaplus.connectors.hybrid": (*LAKE_FORMATS, LAKE, "kappaplus.connectors.kafka"),
    # each lake format is its lister, its file reader and its reasons the JVM reader cannot
    # read a table, over the lake layer (offsets, manifests, markers, the delivery filter,
    # dead letters, the reader choice)
    **{lake_format: (LAKE,) for lake_format in LAKE_FORMATS},
}
READING = (
    "source",
    "reader",
    "file_reader",
    "delivery",
    "offsets",
    "planner",
    "files",
    "layout",
    "manifest",
    "sizing",
)


def _connector(name: str) -> str | None:
    return next((c for c in CONNECTORS if _in(name, (c,))), None)


def test_connectors_keep_to_their_system() -> None:
    def rule(name: str, target: str) -> str | None:
        mine, theirs = _connector(name), _connector(target)
        if mine and theirs and mine != theirs and theirs not in COMPOSES.get(mine, ()):
            return "a connector imports another system's connector"
        if mine and mine == theirs:
            leaf, target_leaf = name.rsplit(".", 1)[-1], target.rsplit(".", 1)[-1]
            if leaf in READING and target_leaf == "sink":
                return "a reading module imports its connector's sink"
            if leaf == "sink" and target_leaf in READING:
                return "a sink imports its connector's reading modules"
        return None

    assert violations(rule) == []


def test_lake_formats_share_the_lake_layer_and_import_no_other_format() -> None:
    def rule(name: str, target: str) -> str | None:
        mine, theirs = _connector(name), _connector(target)
        if mine in LAKE_FORMATS and theirs in LAKE_FORMATS and mine != theirs:
            return "a lake format imports another format (share it through the lake layer)"
        if mine == LAKE and theirs in LAKE_FORMATS:
            return "the lake layer imports a format"
        return None

    assert violations(rule) == []
    for lake_format in LAKE_FORMATS:
        used = {
            target
            for name, path in MODULES.items()
            if _connector(name) == lake_format
            for target, _, _ in imports(path)
        }
        assert any(_in(t, (LAKE,)) for t in used), f"{lake_format} does not use the lake layer"


def test_connectors_import_no_runtime_or_job_config() -> None:
    def rule(name: str, target: str) -> str | None:
        if _in(name, ("kappaplus.connectors",)) and _in(
            target,
            (
                "kappaplus.runtime",
                "kappaplus.session",
                "kappaplus.jobs",
                "kappaplus.local",
                "kappaplus.config",
            ),
        ):
            return "a connector imports the runtime, the session or the local stack"
        return None

    assert violations(rule) == []


def test_shared_layers_import_no_upper_layer() -> None:
    def rule(name: str, target: str) -> str | None:
        if _in(name, SHARED) and _in(target, ABOVE_SHARED):
            return "a shared layer imports a layer above it"
        return None

    assert violations(rule) == []


SLICING = "kappaplus.slicing"


def test_slicing_core_knows_no_lake_format() -> None:
    def rule(name: str, target: str) -> str | None:
        if _in(name, (SLICING,)) and not _in(target, (SLICING, *SHARED)):
            return "the slicing core imports something other than itself and the shared layers"
        return None

    assert violations(rule) == []
    assert any(_in(n, (SLICING,)) for n in MODULES)


def test_slicing_core_imports_no_spark() -> None:
    offenders = []
    for name, path in MODULES.items():
        if not _in(name, (SLICING,)):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            mods = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            offenders += [f"{name} -> {m}" for m in mods if _in(m, ("pyspark",))]
    assert offenders == []


def test_job_config_imports_no_connector() -> None:
    def rule(name: str, target: str) -> str | None:
        if name == "kappaplus.config" and _in(
            target,
            ("kappaplus.connectors", "kappaplus.runtime"),
        ):
            return "the job configuration imports a connector or the runtime"
        return None

    assert violations(rule) == []


def test_no_module_level_cycles() -> None:
    graph = {
        name: {t for t, _, top in imports(path) if top and t in MODULES and t != name}
        for name, path in MODULES.items()
    }
    # importing ``a.b.c`` runs ``a/__init__`` and ``a/b/__init__`` first
    for name, targets in graph.items():
        for target in list(targets):
            parts = target.split(".")
            for i in range(2, len(parts)):
                parent = ".".join(parts[:i])
                if parent in MODULES and parent != name and not _in(name, (parent,)):
                    targets.add(parent)
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    assert cycles == []


def test_every_kappaplus_import_resolves() -> None:
    # function-level imports run only when their function does: a module or name moved away
    # (``kappaplus.decode`` -> ``kappaplus.codecs``) must fail here, not in the middle of a run
    import importlib

    missing = []
    for path in MODULES.values():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [(a.name, None) for a in node.names if _in(a.name, ("kappaplus",))]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if not _in(node.module, ("kappaplus",)):
                    continue
                targets = [(node.module, a.name) for a in node.names]
            else:
                continue
            for module, attr in targets:
                where = f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
                try:
                    imported = importlib.import_module(module)
                except ImportError as exc:
                    missing.append(f"{where}: {module}: {exc}")
                    continue
                if attr is not None and attr != "*" and not hasattr(imported, attr):
                    try:
                        importlib.import_module(f"{module}.{attr}")
                    except ImportError:
                        missing.append(f"{where}: {module} has no {attr}")
    assert missing == []
