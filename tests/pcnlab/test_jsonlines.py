"""One JSON-lines schema for the controller's events and the workloads' logs (pcnlab/jsonlines.py): both
writers produce it, every reader reads it, and a log from before it is one line naming the file."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from pcnlab.controller.events import EventLog
from pcnlab.errors import UsageError
from pcnlab.jsonlines import ITERATION_FIELDS, Iteration, read_json_lines
from pcnlab.results import load_run
from pcnlab.workloads.joblog import JsonLog


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_both_writers_write_one_schema(tmp_path):
    before_ns, before_wall = time.monotonic_ns(), time.time()
    events = EventLog(tmp_path / "events.jsonl")
    events.write("report", switch="s1", port=4, job=1, t_us=5000)
    events.close()
    with JsonLog(tmp_path / "worker0-h2.jsonl", job="j1", host="h2", role="worker", rank=1) as log:
        log.iteration(Iteration(iter=0, compute_start_ns=before_ns, compute_end_ns=before_ns, comm_start_ns=before_ns + 1,
                                comm_end_ns=before_ns + 2))
        log.write("announce", host_ns=before_ns + 7, direction="sent", iter=0)
    after_ns, after_wall = time.monotonic_ns(), time.time()
    for path, types in ((tmp_path / "events.jsonl", ["anchor", "report"]),
                        (tmp_path / "worker0-h2.jsonl", ["anchor", "iteration", "announce", "end"])):
        lines = _lines(path)
        assert [r["type"] for r in lines] == types
        anchor = lines[0]
        assert before_ns <= anchor["host_ns"] <= after_ns and before_wall <= anchor["wall_time"] <= after_wall
        assert all(isinstance(r["host_ns"], int) for r in lines)
        assert not {"event", "wall", "monotonic_ns"} & {k for r in lines for k in r}
        assert read_json_lines(path) == (anchor, lines[1:])
    log_lines = _lines(tmp_path / "worker0-h2.jsonl")
    assert log_lines[0]["host"] == "h2" and log_lines[0]["rank"] == 1
    assert log_lines[2]["host_ns"] == before_ns + 7        # the moment it records, when given
    assert log_lines[1]["host_ns"] >= log_lines[0]["host_ns"] and log_lines[3]["status"] == "ok"


def test_lines_from_several_threads_stay_whole(tmp_path):
    events = EventLog(tmp_path / "events.jsonl")
    threads = [threading.Thread(target=lambda n=n: [events.write("clock", switch=f"s{n}", i=i, pad="x" * 500)
                                                    for i in range(300)]) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    events.close()
    events.write("late")  # after close: dropped, not an error
    anchor, records = read_json_lines(tmp_path / "events.jsonl")
    assert anchor["type"] == "anchor" and len(records) == 1200
    assert sorted((r["switch"], r["i"]) for r in records) == sorted((f"s{n}", i) for n in range(4) for i in range(300))


def test_a_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "f.jsonl"
    log = JsonLog(path, job="j")
    log.iteration(Iteration(0, 1, 2, 3, 4))
    log.close()
    path.write_text(path.read_text() + '{"type": "iteration", "host_')
    anchor, records = read_json_lines(path)
    assert [r["type"] for r in records] == ["iteration", "end"]
    (tmp_path / "empty.jsonl").write_text("")
    assert read_json_lines(tmp_path / "empty.jsonl") == ({}, [])


OLD_EVENTS = [{"event": "anchor", "host_ns": 10, "wall": 1.7e9}, {"event": "report", "host_ns": 20, "switch": "s1"}]
OLD_JOB_LOG = [{"type": "anchor", "wall_time": 1.7e9, "monotonic_ns": 10, "job": "j", "role": "worker"},
               {"type": "iteration", "iter": 0, "comm_start_ns": 20}]


def _old_run(tmp_path, events=True, job_log=True):
    run = tmp_path / "run"
    run.mkdir()
    (run / "status.json").write_text('{"status": "finished"}')
    if events:
        (run / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in OLD_EVENTS))
    if job_log:
        (run / "jobs" / "j").mkdir(parents=True)
        (run / "jobs" / "j" / "worker0-h2.jsonl").write_text("".join(json.dumps(e) + "\n" for e in OLD_JOB_LOG))
    return run


def test_results_refuse_an_old_format_log_in_one_line(tmp_path):
    run = _old_run(tmp_path)
    for table, name in (("events", "events.jsonl"), ("iterations", "worker0-h2.jsonl")):
        with pytest.raises(UsageError) as info:
            getattr(load_run(run), table)
        message = str(info.value)
        assert "\n" not in message and name in message and "run the experiment again" in message, message


def test_pcnlab_export_of_an_old_run_is_exit_2_naming_the_file(tmp_path):
    run = _old_run(tmp_path, job_log=False)
    proc = subprocess.run([sys.executable, "-m", "pcnlab.cli", "export", str(run), "--parquet", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(run / "events.jsonl") in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_an_iteration_record_writes_its_fields_and_what_its_workload_adds(tmp_path):
    with JsonLog(tmp_path / "w.jsonl", job="j", role="worker", rank=0, host="h2") as log:
        log.iteration(Iteration(0, 10, 20, 20, 35, bytes_sent=100, bytes_recv=50, loss=0.5,
                                extra={"params_sha": "ab", "srtt_us": 900}))
        log.iteration(Iteration(1, 40, 50, 50, 60, bytes_sent=100))    # a process that counts one way
    _, records = read_json_lines(tmp_path / "w.jsonl")
    first, second = records[0], records[1]
    assert {k: first[k] for k in (*ITERATION_FIELDS, "params_sha", "srtt_us")} == {
        "iter": 0, "compute_start_ns": 10, "compute_end_ns": 20, "comm_start_ns": 20, "comm_end_ns": 35,
        "bytes_sent": 100, "bytes_recv": 50, "loss": 0.5, "params_sha": "ab", "srtt_us": 900}
    assert "bytes_recv" not in second and second["loss"] is None
    with pytest.raises(ValueError, match="may not be named bytes_sent"):
        Iteration(0, 1, 2, 3, 4, extra={"bytes_sent": 5})


def test_the_iterations_table_always_has_every_field_of_the_record(tmp_path):
    run = tmp_path / "run"
    (run / "jobs" / "j").mkdir(parents=True)
    (run / "status.json").write_text('{"status": "finished"}')
    with JsonLog(run / "jobs" / "j" / "ps-h1.jsonl", job="j", role="ps", rank=0, host="h1") as log:
        log.iteration(Iteration(0, 10, 20, 20, 35, bytes_sent=100))
    table = load_run(run).iterations
    assert set(ITERATION_FIELDS) <= set(table.columns) and table["bytes_recv"].isna().all()
    assert (table["job"].tolist(), table["role"].tolist()) == (["j"], ["ps"])
