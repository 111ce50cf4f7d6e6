"""The house keeps its layout: imports run down the stages, never up, never in a circle, and
the flows only wire. Read from the source with `ast`, so a new module is checked as it lands."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

# The stages in the order data flows, lowest first (docs: DESIGN "Layout", README "Layout").
# A module may import its own stage and the stages below it; siblings of one rank are apart.
STAGE_RANKS = {
    "pipeline.contract": 0,
    "pipeline.probing": 0,
    "pipeline.processes": 0,
    "pipeline.settings": 1,
    "pipeline.store": 2,
    "pipeline.catalogue": 3,
    "pipeline.judging": 3,
    "pipeline.release": 4,
    "pipeline.operations": 5,
    "flows": 6,
    "pipeline.cli": 7,
}
FLAT_MODULES = {"__init__", "contract", "processes", "settings", "cli"}


def module_name(root: Path, path: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def stage_of(module: str) -> str | None:
    """The stage a module belongs to: the longest stage name it starts with."""
    matches = [s for s in STAGE_RANKS if module == s or module.startswith(s + ".")]
    return max(matches, key=len) if matches else None


def imports_of(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Every module under `packages` with the project modules it imports (anywhere in it)."""
    modules = {
        module_name(root, path): path
        for package in packages
        for path in sorted((root / package).rglob("*.py"))
    }
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from pipeline.release import publish` imports the module publish
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            found.update(t for t in targets if t in modules)
        graph[name] = found - {name}
    return graph


def layering_problems(graph: dict[str, set[str]]) -> list[str]:
    """Imports that go up the stages or sideways between two stages of one rank."""
    problems = []
    for importer, imported in sorted(graph.items()):
        here = stage_of(importer)
        if here is None and imported:  # a package's own empty __init__ is in none
            problems.append(f"{importer}: in no stage")
            continue
        for target in sorted(imported if here else ()):
            there = stage_of(target)
            if there is None or there == here:
                continue
            if STAGE_RANKS[there] >= STAGE_RANKS[here]:
                problems.append(f"{importer} ({here}) imports {target} ({there})")
    return problems


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of the import graph (one per strongly connected group, Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                cycles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def wiring_problems(root: Path) -> list[str]:
    """Flow files hold only Prefect flows and tasks at their top level."""
    problems = []
    for path in sorted((root / "flows").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                problems.append(f"{path.name}: class {node.name} belongs in pipeline/")
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            decorators = {
                ast.unparse(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list
            }
            if not decorators & {"flow", "task"}:
                problems.append(f"{path.name}: {node.name} is neither a flow nor a task")
    return problems


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return imports_of(REPO, ("pipeline", "flows"))


def test_imports_run_down_the_stages(graph: dict[str, set[str]]) -> None:
    assert len(graph) > 30  # the checker sees the package
    assert layering_problems(graph) == []


def test_no_import_circle(graph: dict[str, set[str]]) -> None:
    assert import_cycles(graph) == []


def test_flows_only_wire(graph: dict[str, set[str]]) -> None:
    assert wiring_problems(REPO) == []
    # only the command that runs them imports the flows
    importers = {m for m, targets in graph.items() if any(t.startswith("flows") for t in targets)}
    assert {m for m in importers if not m.startswith("flows")} == {"pipeline.cli"}


def test_pipeline_has_no_flat_stage_modules() -> None:
    flat = {p.stem for p in (REPO / "pipeline").glob("*.py")}
    assert flat <= FLAT_MODULES, f"modules outside a stage folder: {sorted(flat - FLAT_MODULES)}"


def test_the_checks_catch_an_upward_import_a_circle_and_a_helper_in_a_flow(
    tmp_path: Path,
) -> None:
    """The checker itself fails on each thing it guards against."""
    for folder in ("pipeline/store", "pipeline/release", "flows"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "pipeline/__init__.py").write_text("")
    (tmp_path / "pipeline/store/tables.py").write_text(
        "from pipeline.release.publish import publish_release\n")
    (tmp_path / "pipeline/release/publish.py").write_text(
        "def publish_release():\n    from pipeline.store import tables\n")
    (tmp_path / "flows/nightly.py").write_text(
        "from prefect import flow\n\ndef helper():\n    pass\n\n@flow\nasync def nightly():\n"
        "    pass\n")
    graph = imports_of(tmp_path, ("pipeline", "flows"))
    assert layering_problems(graph) == [
        "pipeline.store.tables (pipeline.store) imports pipeline.release.publish "
        "(pipeline.release)"
    ]
    assert import_cycles(graph) == [["pipeline.release.publish", "pipeline.store.tables"]]
    assert wiring_problems(tmp_path) == ["nightly.py: helper is neither a flow nor a task"]
