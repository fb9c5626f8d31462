"""The house's rules, read from the code's own imports (`ast`: every Import and ImportFrom of a pcnlab
module, at the top of a file or inside a function) over the folders pyproject.toml maps into pcnlab
(package-dir). tests/test_house.py holds the real tree to them; tests/analysis/test_reading_side.py
shares the graph. Imports of other libraries are not arrows (a heavy one imported inside a function
is fine)."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The layers, bottom up (../shared/ARCHITECTURE.md): an import points down, or sideways within a layer
# (then no folder loop), never up. The ground floor every package may use; the P4 program's facts; the
# running side's parts; the reading side, which the runner uses to judge a run; the runner; the roof
# (the command line, doctor, `pcnlab controller`), which may import anything and nothing imports.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("pcnlab",),
    ("p4src",),
    ("controller", "topologies", "workloads"),
    ("analysis",),
    ("experiments",),
    ("app",),
)
# The reading side imports nothing of the running side: the ground floor, and of the controller only its
# pure foundations (the iteration gap and the mode families, free of finsy).
READING_SIDE = "analysis"
READING_MAY_USE = frozenset({"pcnlab.controller", "pcnlab.controller.segments", "pcnlab.controller.modes"})


def package_dirs(root: Path = ROOT) -> dict[str, str]:
    """pcnlab's package -> its folder, as pyproject.toml maps them."""
    return tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every pcnlab module (a package: its __init__.py) and its file."""
    out = {}
    for package, folder in package_dirs(root).items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = [package, *path.relative_to(root / folder).with_suffix("").parts]
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, known: Mapping[str, Path]) -> set[str]:
    """The pcnlab modules `name` imports anywhere in its file (at the top or inside a function)."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        found |= {t for t in targets if t in known and t != name}
    return found


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    known = modules(root)
    return {name: imports(name, path, known) for name, path in known.items()}


def folder_of(module: str, root: Path = ROOT) -> str:
    """The top-level folder a module lives in ("pcnlab" for the ground floor)."""
    dirs = package_dirs(root)
    owner = max((p for p in dirs if module == p or module.startswith(p + ".")), key=len)
    return dirs[owner].split("/")[0]


def layer_problems(graph: Mapping[str, set[str]], root: Path = ROOT,
                   layers: tuple[tuple[str, ...], ...] = LAYERS) -> list[str]:
    """Every arrow that points up, and every folder that is in no layer."""
    rank = {folder: i for i, layer in enumerate(layers) for folder in layer}
    out = [f"{folder}/ is in no layer (tests/house.py LAYERS)" for folder in
           sorted({d.split("/")[0] for d in package_dirs(root).values()} - set(rank))]
    for name in sorted(graph):
        for target in sorted(graph[name]):
            a, b = folder_of(name, root), folder_of(target, root)
            if a in rank and b in rank and rank[b] > rank[a]:
                out.append(f"{name} -> {target}: {a}/ imports {b}/, a layer above it")
    return out


def reading_problems(graph: Mapping[str, set[str]], root: Path = ROOT, reading: str = READING_SIDE,
                     may_use: Iterable[str] = READING_MAY_USE) -> list[str]:
    """Every arrow from the reading side into the running side (anything but the ground floor and `may_use`)."""
    allowed = set(may_use)
    return [f"{name} -> {target}: the reading side imports the running side"
            for name in sorted(graph) if folder_of(name, root) == reading
            for target in sorted(graph[name])
            if folder_of(target, root) not in (reading, "pcnlab") and target not in allowed]


def folder_loops(graph: Mapping[str, set[str]], root: Path = ROOT) -> list[tuple[str, ...]]:
    """Folders (packages, sub-packages too) that import each other round a loop: each loop's folders, sorted."""
    known = modules(root)

    def package(name: str) -> str:
        return name if known[name].stem == "__init__" else name.rpartition(".")[0]

    edges: dict[str, set[str]] = {}
    for name, targets in graph.items():
        edges.setdefault(package(name), set()).update(package(t) for t in targets if package(t) != package(name))
    return _strongly_connected(edges)


def _strongly_connected(edges: Mapping[str, set[str]]) -> list[tuple[str, ...]]:
    """Tarjan's components of more than one node, each sorted, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[tuple[str, ...]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(tuple(sorted(component)))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def shared_basenames(root: Path = ROOT) -> dict[str, list[str]]:
    """A module's file name (without .py; __init__ aside) that stands twice in the package folders, or
    names the folder it is in (controller/controller.py): the files (and that folder) that share it."""
    seen: dict[str, list[str]] = {}
    for path in modules(root).values():
        if path.stem != "__init__":
            seen.setdefault(path.stem, []).append(str(path.relative_to(root)))
            if path.stem == path.parent.name:
                seen[path.stem].append(str(path.parent.relative_to(root)) + "/")
    return {stem: sorted(paths) for stem, paths in sorted(seen.items()) if len(paths) > 1}
