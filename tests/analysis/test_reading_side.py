"""The reading side (analysis/) imports nothing of the side that runs a network: a finished run folder is
read with pandas, matplotlib and bokeh alone, on a machine without Mininet, BMv2's clients or PyTorch.
And no pcnlab module imports itself back through another (no import circles), so each can be read and
changed from its own imports down."""

from __future__ import annotations

import json
import subprocess
import sys

from house import READING_MAY_USE as ALLOWED, ROOT, import_graph, modules

# Of the running side, the reading side may use only pure foundations (tests/house.py READING_MAY_USE): the
# controller's iteration gap (segments) and its mode families (modes), both free of finsy.
RUNNING = ("pcnlab.experiments", "pcnlab.topologies", "pcnlab.workloads", "pcnlab.controller")
THIRD_PARTY = ("mininet", "finsy", "grpc", "torch", "scapy")


def test_reading_modules_load_without_the_running_side():
    reading = sorted(name for name in modules() if name.startswith("pcnlab.analysis."))
    assert "pcnlab.analysis.results" in reading and "pcnlab.analysis.report" in reading
    code = ("import json, sys\n" + "".join(f"import {name}\n" for name in reading) +
            "print(json.dumps(sorted(sys.modules)))")
    loaded = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                       cwd=ROOT).stdout)
    running = [m for m in loaded if m.startswith(RUNNING) and m not in ALLOWED]
    third = [m for m in loaded if m.split(".")[0] in THIRD_PARTY]
    assert not running and not third, (running, third)


def test_no_import_circles():
    graph = import_graph()
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
