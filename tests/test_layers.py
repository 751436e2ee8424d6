"""The package's import graph: no cycle between modules, and no import from a lower layer up to a higher one
(every import counts, those inside functions and under TYPE_CHECKING too)."""

import ast

from fedbench.config import CONF_DIR

PACKAGE = CONF_DIR.parent
#: layer -> the packages / modules it must never import (everything above it)
ABOVE = {
    "participation": {"training", "algorithms", "engine", "config", "data", "models", "cli", "runs", "report"},
    "data": {"training", "algorithms", "engine", "config", "cli", "runs", "report"},
    "models": {"training", "algorithms", "engine", "config", "cli", "runs", "report"},
    "training": {"algorithms", "engine", "config", "cli", "runs", "report"},
    "algorithms": {"engine", "config", "cli", "runs", "report"},
    "config": {"engine", "cli", "runs", "report"},
    "logging": {"training", "algorithms", "engine", "config", "cli", "runs", "report"},
    "engine": {"cli", "runs", "report"},
}


def _module(path):
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph():
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        name, targets = _module(path), set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fedbench"):
                targets.add(node.module)
                targets.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                targets.update(a.name for a in node.names if a.name.startswith("fedbench"))
        graph[name] = targets
    return {m: {t for t in ts if t in graph and t != m} for m, ts in graph.items()}


def test_no_import_runs_up_the_layers():
    for module, targets in _graph().items():
        layer = module.split(".")[1] if "." in module else ""
        for target in targets:
            top = target.split(".")[1] if "." in target else ""
            assert top not in ABOVE.get(layer, ()), f"{module} imports {target}, a layer above it"


def test_the_module_graph_has_no_cycle():
    graph = _graph()
    # a package's __init__ importing its own submodules is how it hands names on, not a cycle of the design
    edges = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph.items()}
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in edges[node]:
            if state.get(nxt) == "open":
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [node])


def test_the_two_engine_layers_are_separate_packages():
    assert (PACKAGE / "training" / "trainer.py").is_file() and (PACKAGE / "engine" / "simulation.py").is_file()
    assert not any(t.startswith("fedbench.algorithms") for m, ts in _graph().items()
                   if m.startswith("fedbench.training") for t in ts)
