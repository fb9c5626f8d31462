"""analysis/results.py: a run folder's file that cannot be read as its kind (a copy cut short, an edit) is
one UsageError naming the file, what is wrong and what to do; never a traceback from deep in the reading
side. Derived files point at `pcnlab report --recompute`; the run's own record at running it again."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pcnlab.analysis.results import RunData
from pcnlab.errors import UsageError

QUEUE_HEADER = "host_ns,switch,seq,port,class,job,ingress_us,egress_us,enq_qdepth\n"


def _run(tmp_path, name: str, text: str):
    run = tmp_path / "run"
    run.mkdir()
    (run / "status.json").write_text(json.dumps({"status": "finished"}))
    (run / name).write_text(text)
    return run


@pytest.mark.parametrize("name, text, read, problem, todo", [
    ("metrics.json", "{", "metrics", "not readable as JSON", "pcnlab report --recompute"),
    ("fidelity.json", "[1, 2]", "fidelity", "a JSON list, not the dict", "pcnlab report --recompute"),
    ("network.json", "[]", "network", "a JSON list, not the dict", "run it again"),
    ("counters.json", "nul", "counters", "not readable as JSON", "run it again"),
    ("config.yaml", ": : :", "config", "not readable as YAML", "run it again"),
    ("config.yaml", "- a list\n", "config", "not a mapping", "run it again"),
    ("iterations.csv", "x\n\x00\x01", "iteration_table", "no column job, iteration", "pcnlab report --recompute"),
    ("queue-s1.csv", "garbage,,,\n1,2\n", "queue", "no column host_ns", "run it again"),
    ("queue-s1.csv", QUEUE_HEADER + '1,"s1\n', "queue", "not readable as CSV", "run it again"),
])
def test_a_damaged_file_is_one_line_naming_it(tmp_path, name, text, read, problem, todo):
    run = _run(tmp_path, name, text)
    with pytest.raises(UsageError) as exc:
        getattr(RunData(run), read)
    message = str(exc.value)
    assert "\n" not in message and message.startswith(f"{run / name}: {problem}") and todo in message, message


def test_a_file_that_cannot_be_read_says_so_not_that_it_is_damaged(tmp_path):
    run = _run(tmp_path, "status.json", json.dumps({"status": "finished"}))
    (run / "metrics.json").mkdir()             # read_text: IsADirectoryError, as root reads everything else
    with pytest.raises(UsageError, match=r"metrics.json: cannot be read \(Is a directory\)$"):
        RunData(run).metrics


def test_whole_files_are_read_as_before(tmp_path):
    run = _run(tmp_path, "queue-s1.csv", QUEUE_HEADER + "1000,s1,0,1,ddl,1,10,20,0\n")
    (run / "network.json").write_text(json.dumps({"roles": {}, "switches": {}}))
    (run / "config.yaml").write_text("run: mode=ecn\n")
    data = RunData(run)
    assert len(data.queue) == 1 and data.config == {"run": "mode=ecn"} and data.metrics == {}
    assert data.iteration_table.empty and data.monitor_ports == set()


def test_pcnlab_export_of_a_damaged_run_is_one_line_and_writes_nothing(tmp_path):
    run = _run(tmp_path, "queue-s1.csv", "garbage,,,\n1,2\n")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "export", str(run), "--parquet", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [f"pcnlab: {run / 'queue-s1.csv'}: no column host_ns, switch, seq, port, "
                                        "ingress_us, egress_us; this run's own record is damaged: run it again, "
                                        "or leave its folder out"]
    assert not list(out.glob("*.parquet"))
