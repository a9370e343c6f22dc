"""The layering of ``src/sparkstate``, checked on its import graph (read with ``ast``, so nothing
is imported): imports flow one way, api <- engine <- runtime <- metrics <- cli, only
``runtime`` imports pyspark, and no sparkstate modules import each other in a cycle.

The graph holds module-level and function-level imports (a lazy import is still a
dependency) and resolves ``from x import y`` to module ``x.y`` when that is a module and to
``x`` otherwise. The layering and pyspark checks leave out imports under ``if TYPE_CHECKING:``
(never run, so they load nothing); the cycle check counts them: a type-only import still ties
the two modules together (mypy reads them as one, and neither can move without the other),
and hiding one edge of a cycle behind ``TYPE_CHECKING`` is how a cycle is usually kept from
failing at import time. See docs/design/layers.md.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "sparkstate"
SPARK = ("pyspark", "py4j")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    tree: ast.Module, module: str, is_package: bool, modules: set[str], type_checking: bool = False
) -> set[tuple[str, int]]:
    """``(imported module, line)`` for every import statement that runs, at any depth (and,
    with ``type_checking``, those under ``if TYPE_CHECKING:`` too)."""
    found: set[tuple[str, int]] = set()

    def visit(node: ast.AST) -> None:
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from the module's package, one level up per extra dot
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                found.add((sub if sub in modules else source, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def build_graph(type_checking: bool = False) -> dict[str, set[tuple[str, int]]]:
    """Each sparkstate module -> the modules it imports (sparkstate's own and others), with
    lines; with ``type_checking``, also what it imports for the type checker only."""
    files = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}
    return {
        name: _imports(
            ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py", set(files), type_checking
        )
        for name, path in files.items()
    }


GRAPH = build_graph()
#: the graph the cycle check reads: GRAPH plus the imports under ``if TYPE_CHECKING:``
TYPED_GRAPH = build_graph(type_checking=True)


def layer(module: str) -> str:
    """The floor a module lives on: ``api``, ``engine``, ..., ``job``, ``cli``, ``errors``, or
    ``sparkstate`` for the package itself (its ``__init__``, the public names)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "sparkstate"


#: the other floors each floor may import, and why (docs/design/layers.md)
MAY_IMPORT = {
    # what users write and declare: the same classes in the harness and on Spark
    "errors": set(),
    # the test fault points the crash tests kill a run at (tests/e2e/crash.py); off in a real run
    "fault_points": set(),
    # the optional packages (pyproject's extras) and the error naming the one to install
    "extras": {"errors"},
    "api": {"errors"},
    # engine-neutral execution, shared by the harness and Spark
    "engine": {"api", "errors"},
    # source and sink specs: plain dataclasses (and the database protocol)
    "connectors": {"api", "errors", "extras", "fault_points"},
    # savepoints: the portable format, written and read without Spark (taking and restoring
    # one is runtime's)
    "savepoint": {"api", "engine", "errors"},
    # the harness runs the engine in-process, without Spark, and writes and starts from
    # savepoints in the format Spark runs use
    "testing": {"api", "engine", "errors", "savepoint"},
    # the adapter onto Spark: runs the engine on the specs
    "runtime": {"api", "engine", "connectors", "errors", "fault_points", "savepoint"},
    # reporting: reads what runtime hands it
    "metrics": {"api", "engine", "connectors", "errors", "extras", "runtime", "savepoint"},
    # Job = description + run() (runtime, and the metrics endpoint it serves) + harness()
    # (testing); a bare streaming DataFrame given to .source() becomes a connectors DataFrameSource
    "job": {"api", "engine", "connectors", "errors", "runtime", "metrics", "savepoint", "testing"},
    # the seed jobs: descriptions built with the public classes
    "jobs": {"api", "connectors", "errors", "job"},
    "cli": {"api", "engine", "connectors", "errors", "extras", "runtime", "savepoint", "testing", "metrics", "job", "jobs",
            "sparkstate"},
    # the public names; importing sparkstate must not start (or import) Spark (the savepoint
    # reader and writer are plain Python)
    "sparkstate": {"api", "connectors", "errors", "job", "savepoint", "testing"},
}


def _edges(modules_of_layer: str):
    for module, imports in sorted(GRAPH.items()):
        if layer(module) == modules_of_layer:
            for target, line in sorted(imports):
                yield module, target, line


def _where(module: str, line: int) -> str:
    return f"{module.replace('.', '/')}{'/__init__' if module in _PACKAGES else ''}.py:{line}"


_PACKAGES = {_module_name(p) for p in PACKAGE.rglob("__init__.py")}


def test_the_graph_sees_lazy_imports_and_skips_type_checking_ones():
    job = {t for t, _ in GRAPH["sparkstate.job"]}
    assert "sparkstate.runtime.run.job" in job  # inside Job.run
    assert "sparkstate.runtime.run.result" not in job  # under `if TYPE_CHECKING:` only
    assert "sparkstate.errors" in {t for t, _ in GRAPH["sparkstate.api.time"]}
    assert "sparkstate" not in {t for t, _ in GRAPH["sparkstate.api.time"]}


def test_the_cycle_graph_counts_type_checking_imports():
    job = {t for t, _ in TYPED_GRAPH["sparkstate.job"]}
    assert {"sparkstate.runtime.run.job", "sparkstate.runtime.run.result"} <= job


def test_every_module_is_on_a_known_floor():
    assert {layer(m) for m in GRAPH} <= set(MAY_IMPORT), sorted({layer(m) for m in GRAPH} - set(MAY_IMPORT))


@pytest.mark.parametrize("floor", sorted(MAY_IMPORT))
def test_imports_flow_one_way(floor):
    wrong = [
        f"{_where(module, line)}: {module} imports {target} ({floor} may import only {sorted(MAY_IMPORT[floor]) or 'itself'})"
        for module, target, line in _edges(floor)
        if target.split(".")[0] == "sparkstate" and layer(target) != floor and layer(target) not in MAY_IMPORT[floor]
    ]
    assert not wrong, "imports against the layering:\n" + "\n".join(wrong)


def _spark_imports(floor: str) -> list[str]:
    return [
        f"{_where(module, line)}: {module} imports {target}"
        for module, target, line in _edges(floor)
        if target.split(".")[0] in SPARK
    ]


def test_runtime_is_where_pyspark_is_imported():
    assert _spark_imports("runtime"), "runtime imports no pyspark: has the Spark adapter moved?"


@pytest.mark.parametrize("floor", sorted(set(MAY_IMPORT) - {"runtime"}))
def test_only_runtime_imports_pyspark(floor):
    wrong = _spark_imports(floor)
    assert not wrong, "only sparkstate/runtime may import pyspark or py4j:\n" + "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _loop(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest import loop from the component's first module back to it."""
    start = component[0]
    paths = {start: [start]}
    queue = [start]
    for node in queue:
        for child in sorted(graph[node]):
            if child == start:
                return paths[node] + [start]
            if child in component and child not in paths:
                paths[child] = paths[node] + [child]
                queue.append(child)
    return component


def test_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _loop(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    """No cycle, counting lazy imports and those made for the type checker only."""
    internal = {m: {t for t, _ in imports if t in TYPED_GRAPH and t != m} for m, imports in TYPED_GRAPH.items()}
    cycles = _cycles(internal)
    assert not cycles, "sparkstate modules that import each other in a cycle:\n" + "\n".join(
        f"{' -> '.join(_loop(internal, c))} (the cycle's modules: {', '.join(c)})" for c in cycles
    )


def test_building_and_harnessing_jobs_does_not_import_spark():
    """Importing sparkstate, building jobs and running them in the harness stay free of
    pyspark and py4j (a fresh interpreter, so nothing imported by other tests counts)."""
    script = textwrap.dedent(
        """
        import sys

        import sparkstate
        from sparkstate import Job, ListSource, MemorySink, TumblingEventTimeWindows, WatermarkStrategy, agg
        from sparkstate.jobs import JOBS

        seed = JOBS["running-sum"].job(events=100, merchants=5)
        h = seed.harness()
        assert len(h.process_batch(seed.source_spec.events_as_dicts())) == 100

        batch = [{"ts": 1_000, "k": "a", "v": 1.0}, {"ts": 61_000, "k": "a", "v": 2.0}]
        windows = (
            Job("per-minute")
            .source(ListSource([batch], "ts bigint, k string, v double"),
                    watermark=WatermarkStrategy.for_monotonous_timestamps().with_timestamp_column("ts"))
            .key_by("k")
            .window(TumblingEventTimeWindows.of(60_000))
            .aggregate(agg.count("n"), agg.sum("v", "total"))
            .sink(MemorySink())
        )
        h = windows.harness()
        h.process_batch(batch)
        h.finish()
        assert [r["n"] for r in h.output] == [1, 1], h.output
        spark = sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j"))
        assert not spark, f"imported without running on Spark: {spark[:10]}"
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
