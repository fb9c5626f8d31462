"""examples/inspect-run.ipynb, executed (nbclient, a fresh ipykernel) on a short real BMv2 sweep, so what
it shows stays true: every cell runs, it finds the iteration it plots and compares both modes."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import require_trusted_sweep

nbformat = pytest.importorskip("nbformat", reason="nbformat not installed: make deps (the dev extras)")
nbclient = pytest.importorskip("nbclient", reason="nbclient not installed: make deps (the dev extras)")
pytest.importorskip("ipykernel", reason="ipykernel not installed: make deps (the dev extras)")

pytestmark = pytest.mark.slow
NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "inspect-run.ipynb"


def test_the_notebook_runs_on_a_real_sweep(viewed_sweep, monkeypatch):
    require_trusted_sweep(viewed_sweep)        # the notebook reads the kept (trusted) runs
    monkeypatch.setenv("PCNLAB_RUNS", str(viewed_sweep))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit the notebook without outputs"
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", ""))
                     for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "mode=pcn: s1 port 4, iteration" in text           # the bottleneck, and an iteration found there
    assert "ecn" in text and "pcn" in text and "Error" not in text
    figures = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(figures) == 2                                   # the queue around the iteration; the modes
