"""`pcnlab view` of a real BMv2 run, loaded in headless Chromium (Debian's package) over the DevTools
pipe: no console error, every CE mark and every pcn window of the run drawn, the jump box moving every
linked time axis to the iteration asked for, the port picker switching ports; a sweep's runs side by
side; an untrusted run saying so at the top of its page."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from conftest import require_trusted_sweep
from pcnlab.chromium import Page, chromium_binary
from pcnlab.analysis.results import load_run

pytestmark = [pytest.mark.slow, pytest.mark.skipif(chromium_binary() is None,
                                                   reason="chromium not found: make deps installs it")]

READY = "window.Bokeh !== undefined && Bokeh.documents.length > 0 && Bokeh.documents[0].roots().length > 0"
COUNT = "[...Bokeh.documents[0].all_models].filter(m => m.name === '{}').reduce((n, m) => n + m.get_length(), 0)"
RANGES = "[...Bokeh.documents[0].all_models].filter(m => m.name === 'time').map(r => [r.start, r.end])"


def _view(run: Path, out: Path) -> Path:
    proc = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "view", str(run), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out.exists() and "view: " in proc.stdout
    return out


def _raw_counts(run: Path) -> tuple[int, int]:
    """CE marks in the raw queue logs and windows the controller wrote (arm events), read without pcnlab."""
    marks = sum(int(pd.read_csv(p)["marked"].sum()) for p in run.glob("queue-s*.csv") if p.stat().st_size)
    arms = sum(1 for line in (run / "events.jsonl").read_text().splitlines() if json.loads(line)["type"] == "arm")
    return marks, arms


def test_the_view_of_a_real_run_draws_every_mark_and_window_and_jumps(viewed_sweep, tmp_path):
    run = viewed_sweep / "latest" / "mode=pcn"
    page_file = _view(run, tmp_path / "view.html")
    assert b"cdn.bokeh.org" not in page_file.read_bytes()          # self-contained: opens offline
    marks, arms = _raw_counts(run)
    assert marks > 0 and arms > 0, "the pcn run should have marked packets and armed windows"
    data = load_run(run)
    t0 = min(data.queue["ingress_ns"].min(), data.iterations["comm_start_ns"].min())
    n = 5
    it = data.iterations[(data.iterations["job"] == "gen") & (data.iterations["iter"] == n)]
    expected = ((it["comm_start_ns"].min() - t0) / 1e9 - 0.01, (it["comm_end_ns"].max() - t0) / 1e9 + 0.01)
    with Page() as page:
        page.open(page_file)
        page.wait_for(READY)
        assert page.evaluate(COUNT.format("marked")) == marks
        assert page.evaluate(COUNT.format("windows")) == arms
        assert page.evaluate(COUNT.format("dropped")) == int(data.queue["dropped"].sum())
        before = page.evaluate(RANGES)
        assert len(before) == 1 and before[0][0] == 0
        page.evaluate(f"Bokeh.documents[0].get_model_by_name('jump').value = '{n}'")
        after = page.wait_for(f"(() => {{ const r = {RANGES}; return r[0][0] > 0 ? r : null; }})()", timeout_s=10)
        assert after[0] == pytest.approx(expected, abs=1e-6)
        # Every plot of the run follows the same axis: the queue, the iterations, the throughput.
        linked = page.evaluate("[...Bokeh.documents[0].all_models].filter(m => m.type === 'Figure')"
                               ".map(f => f.x_range.name)")
        assert len(linked) == 3 and set(linked) == {"time"}
        # The picker shows one port at a time: the bottleneck's first, then another's.
        visible = ("[...Bokeh.documents[0].all_models].filter(m => m.type === 'GlyphRenderer' && m.visible && m.tags.length)"
                   ".map(r => r.tags[0])")
        assert set(page.evaluate(visible)) == {"s1 port 4"}
        page.evaluate("Bokeh.documents[0].get_model_by_name('port').value = 's2 port 1'")
        assert page.wait_for(f"(() => {{ const v = new Set({visible}); return v.size === 1 && v.has('s2 port 1'); }})()",
                             timeout_s=10)
        shot = page.screenshot(tmp_path / "view.png")
        assert page.errors == [], page.errors
    assert shot.stat().st_size > 20_000


def test_a_sweep_is_viewed_side_by_side(viewed_sweep, tmp_path):
    page_file = _view(viewed_sweep, tmp_path / "sweep.html")
    runs = sorted(p for p in (viewed_sweep / "latest").iterdir() if p.is_dir())
    with Page() as page:
        page.open(page_file)
        page.wait_for(READY)
        assert len(page.evaluate(RANGES)) == len(runs) == 2
        assert page.evaluate(COUNT.format("marked")) == sum(_raw_counts(r)[0] for r in runs)
        page.evaluate("Bokeh.documents[0].get_model_by_name('jump').value = '3'")
        moved = page.wait_for(f"(() => {{ const r = {RANGES}; return r.every(x => x[0] > 0) ? r : null; }})()",
                              timeout_s=10)
        assert all(end - start < 1.0 for start, end in moved)   # each run at its own iteration 3
        assert page.errors == [], page.errors


def test_an_untrusted_run_says_so_at_the_top(viewed_sweep, tmp_path):
    require_trusted_sweep(viewed_sweep)        # its ecn run is the trusted one it is held against
    run = tmp_path / "mode=ecn"
    shutil.copytree(viewed_sweep / "latest" / "mode=ecn", run)
    reason = "s1 port 4 achieved 71 % of its 10 Mbit/s while backlogged: BMv2 s1 at 98 % of a core"
    (run / "fidelity.json").write_text(json.dumps({"trusted": False, "reasons": [reason]}))
    page_file = _view(run, tmp_path / "untrusted.html")
    with Page() as page:
        page.open(page_file)
        page.wait_for(READY)
        first = page.evaluate("document.body.firstElementChild.firstElementChild.innerText")
        assert first.startswith("UNTRUSTED run") and reason in first
        assert page.errors == [], page.errors
    trusted = _view(viewed_sweep / "latest" / "mode=ecn", tmp_path / "trusted.html").read_text()
    assert "UNTRUSTED" not in trusted


def test_a_view_that_cannot_be_written_is_one_line(viewed_sweep):
    proc = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "view", str(viewed_sweep / "latest" / "mode=ecn"),
                           "--out", "/proc/view.html"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == ["pcnlab: cannot write /proc/view.html (No such file or directory); "
                                        "give --out a file in a folder you can write"]
