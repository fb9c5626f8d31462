"""The house's third pass (issue 48), held: every import points down the layers (tests/house.py LAYERS:
pcnlab/ at the bottom, then p4src/; controller/, topologies/, workloads/; analysis/; experiments/; app/,
the roof nothing imports), imports inside functions included; no folders import each other round a
loop; no two modules share a file name. And the checker itself finds each of these in a tiny tree."""

from __future__ import annotations

from pathlib import Path

from house import (folder_loops, import_graph, layer_problems, modules, reading_problems, shared_basenames)

# Folders that still import each other, each with why, until they are taken apart (none now: the two LTP
# jobs stand beside ps.py and burst.py, and workloads/ltp/ owns Early Close's defaults and imports nothing
# of workloads/ above it).
KNOWN_LOOPS: list[tuple[str, ...]] = []


def test_every_import_points_down_the_layers():
    problems = layer_problems(import_graph())
    assert not problems, "\n".join(problems)


def test_the_reading_side_imports_nothing_of_the_running_side():
    problems = reading_problems(import_graph())
    assert not problems, "\n".join(problems)


def test_no_folders_import_each_other_round_a_loop():
    assert folder_loops(import_graph()) == KNOWN_LOOPS, "a new loop between folders, or a known one gone (then " \
                                                        "remove it from KNOWN_LOOPS)"


def test_no_module_file_name_stands_twice():
    shared = shared_basenames()
    assert not shared, "rename so the name says which is which: " + "; ".join(
        f"{stem}: {', '.join(paths)}" for stem, paths in shared.items())


def test_the_roof_is_imported_by_nothing_but_itself():
    graph = import_graph()
    assert "pcnlab.app.cli" in graph
    importers = sorted(n for n, targets in graph.items() for t in targets
                       if t.startswith("pcnlab.app") and not n.startswith("pcnlab.app"))
    assert not importers, importers


# --- the checker on a tiny tree ------------------------------------------------------------------------

FOLDERS = {"pcnlab": "pcnlab", "pcnlab.controller": "controller", "pcnlab.topologies": "topologies",
           "pcnlab.analysis": "analysis", "pcnlab.app": "app"}
PYPROJECT = "[tool.setuptools]\npackage-dir = { " + ", ".join(f'"{p}" = "{f}"' for p, f in FOLDERS.items()) + " }\n"


def _tree(root: Path, files: dict[str, str]) -> Path:
    (root / "pyproject.toml").write_text(PYPROJECT)
    for folder in FOLDERS.values():
        (root / folder).mkdir()
        (root / folder / "__init__.py").write_text("")
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_checker_finds_an_arrow_up_even_inside_a_function(tmp_path):
    root = _tree(tmp_path, {
        "pcnlab/ledger.py": "def clean():\n    from pcnlab.topologies.ports import remove\n",
        "topologies/ports.py": "from pcnlab import ledger\n\ndef remove():\n    pass\n",
        "app/cli.py": "import pcnlab.topologies.ports\nfrom pcnlab import ledger\n",
    })
    problems = layer_problems(import_graph(root), root)
    assert problems == ["pcnlab.ledger -> pcnlab.topologies.ports: pcnlab/ imports topologies/, a layer above it"]
    assert folder_loops(import_graph(root), root) == [("pcnlab", "pcnlab.topologies")]


def test_the_checker_finds_the_roof_imported_and_a_folder_in_no_layer(tmp_path):
    root = _tree(tmp_path, {"controller/core.py": "from ..app import cli\n", "app/cli.py": ""})
    assert layer_problems(import_graph(root), root) == [
        "pcnlab.controller.core -> pcnlab.app.cli: controller/ imports app/, a layer above it"]
    (tmp_path / "pyproject.toml").write_text(PYPROJECT.replace('"pcnlab.app" = "app"', '"pcnlab.app" = "app", '
                                                                                      '"pcnlab.extra" = "extra"'))
    (tmp_path / "extra").mkdir()
    assert "extra/ is in no layer (tests/house.py LAYERS)" in layer_problems(import_graph(root), root)


def test_the_checker_finds_a_sideways_loop_and_the_reading_side_reaching_the_running_side(tmp_path):
    root = _tree(tmp_path, {
        "controller/endpoints.py": "from pcnlab.topologies import routing\n",
        "topologies/routing.py": "from pcnlab.controller.endpoints import x\n",
        "controller/modes.py": "",
        "analysis/metrics.py": "from pcnlab.controller import modes\nfrom pcnlab.controller.endpoints import x\n",
    })
    graph = import_graph(root)
    assert layer_problems(graph, root) == []                       # sideways within a layer, and down
    assert folder_loops(graph, root) == [("pcnlab.controller", "pcnlab.topologies")]
    assert reading_problems(graph, root, may_use={"pcnlab.controller.modes"}) == [
        "pcnlab.analysis.metrics -> pcnlab.controller.endpoints: the reading side imports the running side"]


def test_the_checker_finds_a_file_name_twice_and_a_module_named_as_a_folder(tmp_path):
    root = _tree(tmp_path, {"topologies/burst.py": "", "analysis/burst.py": "", "controller/controller.py": ""})
    assert set(modules(root)) >= {"pcnlab.topologies.burst", "pcnlab.analysis.burst"}
    assert shared_basenames(root) == {"burst": ["analysis/burst.py", "topologies/burst.py"],
                                      "controller": ["controller/", "controller/controller.py"]}
