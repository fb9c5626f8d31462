"""The reading side (analysis/) imports nothing of the side that runs a network: a finished run folder is
read with pandas, matplotlib and bokeh alone, on a machine without Mininet, BMv2's clients or PyTorch.
And no pcnlab module imports itself back through another (no import circles), so each can be read and
changed from its own imports down."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Of the running side, the reading side may use only pure foundations: the controller's iteration gap
# (segments) and its mode families (modes), both free of finsy.
ALLOWED = {"pcnlab.controller", "pcnlab.controller.segments", "pcnlab.controller.modes"}
RUNNING = ("pcnlab.experiments", "pcnlab.topologies", "pcnlab.workloads", "pcnlab.controller")
THIRD_PARTY = ("mininet", "finsy", "grpc", "torch", "scapy")


def _modules() -> dict[str, Path]:
    """Every pcnlab module and its file, as pyproject.toml maps the folders."""
    dirs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    out = {}
    for package, folder in dirs.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [package, *path.relative_to(ROOT / folder).with_suffix("").parts]
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def test_reading_modules_load_without_the_running_side():
    reading = sorted(name for name in _modules() if name.startswith("pcnlab.analysis."))
    assert "pcnlab.analysis.results" in reading and "pcnlab.analysis.report" in reading
    code = ("import json, sys\n" + "".join(f"import {name}\n" for name in reading) +
            "print(json.dumps(sorted(sys.modules)))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                       cwd=ROOT).stdout)
    running = [m for m in loaded if m.startswith(RUNNING) and m not in ALLOWED]
    third = [m for m in loaded if m.split(".")[0] in THIRD_PARTY]
    assert not running and not third, (running, third)


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
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
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        found |= {t for t in targets if t in modules and t != name}
    return found


def test_no_import_circles():
    modules = _modules()
    graph = {name: _imports(name, path, modules) for name, path in modules.items()}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("import circle: " + " -> ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, path + [name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
