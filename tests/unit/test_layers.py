"""The architecture as tests: who may import whom (docs/architecture.md draws it).

- the engine (specsweep/) never imports Prefect; tasks/ adapts it, flows/ composes
  tasks, deployments/ schedules flows, and no layer imports one above it;
- analysis/ and report/ never load the code that runs on GPU hosts (targets/, the
  load generator, the pipeline): an answer needs only Parquet;
- the simulator imports nothing of the engine: it stands in for sglang; it may read the
  bundled prompt set (specsweep.workloads' data modules), as a real model sees the text;
- no import cycles, one exception hierarchy (specsweep/errors.py), and tasks/ holds
  Prefect tasks only;
- the folders flows/, tasks/ and deployments/ install as specsweep.flows,
  specsweep.tasks and specsweep.deployments (pyproject.toml, hatch_build.py): no code
  imports them by a top-level name, which would be a user's package of that name.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import specsweep

ROOT = Path(__file__).resolve().parents[2]
# The repository's folder of each layer, and the package it installs as.
LAYERS = {
    "specsweep": "specsweep",
    "tasks": "specsweep.tasks",
    "flows": "specsweep.flows",
    "deployments": "specsweep.deployments",
}
PREFECT_LAYERS = ("specsweep.tasks", "specsweep.flows", "specsweep.deployments")


def _under(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def modules(package: str) -> list[str]:
    """The modules of ``package``; of `specsweep`, the engine's alone (the Prefect layers
    install beside it: a wheel holds them in specsweep/, the checkout keeps them apart)."""
    pkg = importlib.import_module(package)
    names = [package] + [m.name for m in pkgutil.walk_packages(pkg.__path__, package + ".")]
    if package == "specsweep":
        names = [m for m in names if not _under(m, PREFECT_LAYERS)]
    return [m for m in names if not m.endswith("__main__")]


def _loaded_after_importing(names: list[str], prefixes: tuple[str, ...]) -> list[str]:
    """Import ``names`` in a fresh interpreter; the loaded modules under ``prefixes``."""
    code = (
        "import importlib, sys\n"
        f"for name in {names!r}: importlib.import_module(name)\n"
        f"print('\\n'.join(sorted(m for m in sys.modules if m.startswith({prefixes!r}))))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return [m for m in proc.stdout.split() if m]


def test_no_engine_module_imports_prefect():
    names = modules("specsweep")
    assert "specsweep.pipeline" in names and "specsweep.sim.launch_server" in names
    leaked = _loaded_after_importing(names, ("prefect",))
    assert leaked == [], f"the engine imported Prefect: {leaked[:5]}"


def test_the_answer_needs_no_code_that_runs_on_gpu_hosts():
    # the search decides from stored results too: it never needs a GPU host's code
    names = (
        modules("specsweep.analysis") + modules("specsweep.report") + modules("specsweep.search")
    )
    loaded = _loaded_after_importing(
        names, ("specsweep.targets", "specsweep.loadgen", "specsweep.pipeline", "specsweep.sim")
    )
    assert loaded == [], f"analysis/report loaded {loaded}"


def _module_files() -> Iterator[tuple[str, Path]]:
    for folder, package in LAYERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            yield ".".join((package, *parts)), path


def _imports(path: Path, known: set[str]) -> Iterator[str]:
    """Every module of ours a file imports, at any depth (function-level and TYPE_CHECKING
    too): `from pkg import mod` is an import of pkg.mod, `from pkg import name` of pkg."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield full if full in known else node.module


def _graph() -> dict[str, set[str]]:
    files = dict(_module_files())
    known = set(files)
    return {
        name: {imp for imp in _imports(path, known) if imp in known and imp != name}
        for name, path in files.items()
    }


# What the simulator may read of specsweep: the prompt set and its token estimate (data,
# standard library only), to give a bundled prompt its category's acceptance.
_WORKLOAD_DATA = {
    "specsweep.workloads",
    "specsweep.workloads.bundled",
    "specsweep.workloads.categories",
    "specsweep.workloads.records",
    "specsweep.workloads.tokens",
    "specsweep.workloads.vocab",
}


def test_the_simulator_imports_nothing_of_the_engine():
    graph = _graph()
    for name, deps in graph.items():
        if name.startswith("specsweep.sim"):
            engine = sorted(
                d for d in deps if not d.startswith("specsweep.sim") and d not in _WORKLOAD_DATA
            )
            assert engine in ([], ["specsweep"]), f"{name} imports {engine}"
    for name in _WORKLOAD_DATA - {"specsweep.workloads"}:  # the data stays data
        assert {d for d in graph[name] if d != "specsweep"} <= _WORKLOAD_DATA, name


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("specsweep", PREFECT_LAYERS),
        ("specsweep.tasks", ("specsweep.flows", "specsweep.deployments")),
        ("specsweep.flows", ("specsweep.deployments",)),
    ],
)
def test_no_layer_imports_a_layer_above_it(layer, forbidden):
    """specsweep/cli/ is exempt: the command line sits on top of every layer (it runs
    flows and registers deployments, importing them inside its commands)."""
    graph = _graph()
    assert any(_under(name, PREFECT_LAYERS) for name in graph)
    for name, deps in graph.items():
        if name.startswith("specsweep.cli"):
            continue
        if layer == "specsweep" and _under(name, PREFECT_LAYERS):
            continue  # the engine is specsweep/ less the layers installed beside it
        if _under(name, (layer,)):
            above = sorted(d for d in deps if _under(d, forbidden))
            assert above == [], f"{name} imports {above}"


_TOP_LEVEL_NAMES = ("flows", "tasks", "deployments")
_DOTTED = re.compile(r"^(flows|tasks|deployments)\.[a-z_]")


def test_nothing_imports_the_layers_by_a_top_level_name():
    """`flows`, `tasks` and `deployments` are a user's packages: ours are specsweep.*.
    Imports, and strings that name a module (import_module, monkeypatch targets)."""
    stray = []
    for folder in (*LAYERS, "tests", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and not node.level:
                    names = [node.module or ""]
                elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                    names = [node.value] if _DOTTED.match(node.value) else []
                else:
                    continue
                for name in names:
                    if name.split(".")[0] in _TOP_LEVEL_NAMES:
                        stray.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
    assert stray == []


def test_no_import_cycles():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    assert cycles == []


def test_one_exception_hierarchy():
    """Every exception class lives in specsweep/errors.py (the simulator keeps its own)."""
    stray = []
    for name, path in _module_files():
        if name in ("specsweep.errors",) or name.startswith("specsweep.sim"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                if any(b.endswith(("Error", "Exception")) or "Error" in b for b in bases):
                    stray.append(f"{name}.{node.name}({', '.join(bases)})")
    assert stray == []


def test_tasks_holds_prefect_tasks_only():
    from prefect import Task

    for name in modules("specsweep.tasks"):
        module = __import__(name, fromlist=["_"])
        public = {
            key: value
            for key, value in vars(module).items()
            if not key.startswith("_")
            and getattr(value, "__module__", None) == name
            and callable(value)
        }
        not_tasks = sorted(key for key, value in public.items() if not isinstance(value, Task))
        assert not_tasks == [], f"{name} defines non-tasks: {not_tasks}"


def test_the_package_root_holds_only_the_shared_modules():
    """specsweep/ shows the architecture at a glance: packages, and three modules."""
    top = sorted(p.name for p in Path(specsweep.__file__).parent.glob("*.py"))
    assert top == ["__init__.py", "errors.py", "pipeline.py", "progress.py"]
