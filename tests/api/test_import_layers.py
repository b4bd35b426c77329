"""The import graph of `python/mosaic_rt`: no cycle, and interpret/'s layers
one-way (context <- rewrites <- native_compute <- evaluation <- launch).

Read from the source with `ast` (nothing is imported). Every import counts,
also one inside a function: a lazy import that dodges a cycle is still a
cycle. `from mosaic_rt import x` is an edge to `mosaic_rt.x` when x is a
module (`_native` too, a compiled one), else to the package `mosaic_rt`.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "mosaic_rt"

# interpret/'s rooms, lowest first: a module may import its own room and the
# ones before it, never a later one.
LAYERS = (
    ("base", ("mosaic_rt.interpret", "mosaic_rt.interpret.context", "mosaic_rt.interpret.params")),
    ("rewrites", ("mosaic_rt.interpret.rewrites",)),
    ("native_compute", ("mosaic_rt.interpret.native_compute",)),
    ("evaluation", ("mosaic_rt.interpret.evaluation",)),
    ("launch", ("mosaic_rt.interpret.launch",)),
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    """Every module of the package: its .py files and compiled extensions."""
    found = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    for stub in PACKAGE.rglob("*.pyi"):  # a compiled module (`_native`)
        found.setdefault(_module_name(stub), stub)
    return found


def _resolve(name: str, modules) -> str | None:
    """The module `name` (a dotted name inside the package) imports."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name: str, path: Path, modules) -> set[str]:
    is_package = path.name == "__init__.py"
    here = name if is_package else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "mosaic_rt":
                    out.add(_resolve(alias.name, modules))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.rsplit(".", node.level - 1)[0] if node.level > 1 else here
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            if base.split(".")[0] != "mosaic_rt":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in modules else _resolve(base, modules))
    out.discard(None)
    out.discard(name)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: (_imports(name, path, modules) if path.suffix == ".py" else set()) for name, path in modules.items()}


def _find_cycle(graph) -> list[str] | None:
    """One cycle of `graph` as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start)
            if found:
                return found
    return None


def _layer(module: str) -> int | None:
    for rank, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or (prefix != "mosaic_rt.interpret" and module.startswith(prefix + ".")):
                return rank
    return None


def test_graph_sees_known_edges():
    """The graph reader itself: a few edges that exist."""
    graph = _graph()
    assert "mosaic_rt._native" in graph
    assert "mosaic_rt._native" in graph["mosaic_rt.ffi.ops"]
    assert "mosaic_rt.interpret.launch.kernel" in graph["mosaic_rt.interpret.launch.seam"]
    assert "mosaic_rt.interpret.evaluation.jaxpr_eval" in (graph["mosaic_rt.interpret.launch.grid_loop"])


def test_no_import_cycle():
    cycle = _find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_every_interpret_module_has_a_layer():
    stray = [m for m in _graph() if m.startswith("mosaic_rt.interpret") and _layer(m) is None]
    assert not stray, f"interpret/ modules outside the layers {LAYERS}: {stray}"


def test_interpret_layers_are_one_way():
    graph = _graph()
    wrong = []
    for module, targets in graph.items():
        rank = _layer(module)
        if rank is None:
            continue
        for target in targets:
            target_rank = _layer(target)
            if target_rank is not None and target_rank > rank:
                wrong.append(f"{module} ({LAYERS[rank][0]}) imports {target} ({LAYERS[target_rank][0]})")
    assert not wrong, "\n".join(sorted(wrong))


def test_the_tpu_api_stands_beside_the_interpreter():
    """`mosaic_rt.tpu` (pltpu's API with early checks) imports nothing of the
    interpreter, not even through another module: what both need (the
    device-id forms) lives below both."""
    graph = _graph()
    seen, todo = set(), [m for m in graph if m == "mosaic_rt.tpu" or m.startswith("mosaic_rt.tpu.")]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += graph.get(module, ())
    reached = sorted(m for m in seen if m == "mosaic_rt.interpret" or m.startswith("mosaic_rt.interpret."))
    assert not reached, f"mosaic_rt.tpu reaches the interpreter: {reached}"


def test_the_tpu_compile_check_enters_at_the_seam():
    """The TPU compile check wraps the interpreter where a kernel enters it
    (`launch/seam.py`), not from inside it."""
    importers = sorted(m for m, targets in _graph().items() if "mosaic_rt.tpu_check.check" in targets)
    inside = [m for m in importers if m.startswith("mosaic_rt.interpret.")]
    assert inside == ["mosaic_rt.interpret.launch.seam"], importers
