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
from pcnlab.jsonlines import ITERATION, ITERATION_FIELDS, ITERATION_REQUIRED, Iteration, read_json_lines
from pcnlab.analysis.results import load_run
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
    proc = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "export", str(run), "--parquet", str(tmp_path / "out")],
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


def test_extra_fields_may_not_shadow_the_record_nor_the_line():
    for name in (*ITERATION_FIELDS, "type", "host_ns"):
        with pytest.raises(ValueError, match=f"may not be named {name}$"):
            Iteration(0, 1, 2, 3, 4, extra={name: 1, "srtt_us": 5})
    with pytest.raises(ValueError, match="may not be named host_ns, iter$"):
        Iteration(0, 1, 2, 3, 4, extra={"iter": 1, "host_ns": 2})


def test_a_record_written_and_read_back_is_the_same_record(tmp_path):
    records = [Iteration(0, 10, 20, 20, 35, bytes_sent=100, bytes_recv=50, loss=0.5,
                         extra={"params_sha": "ab", "first_byte_ns": {"1": 21}, "tcp": {}, "ecn": False}),
               Iteration(1, 40, 50, 50, 60, bytes_sent=100),
               Iteration(2, 70, 70, 75, 90)]
    with JsonLog(tmp_path / "w.jsonl", job="j") as log:
        for record in records:
            log.iteration(record)
    lines = [r for r in read_json_lines(tmp_path / "w.jsonl")[1] if r["type"] == ITERATION]
    assert [Iteration.from_line(line) for line in lines] == records
    for line in lines:       # and the record gives back exactly the line's fields
        own = {k: v for k, v in line.items() if k not in ("type", "host_ns")}
        assert Iteration.from_line(line).line_fields() == own


def test_the_record_writes_the_line_the_keyword_form_wrote(tmp_path):
    """The same field names and values as `log.iteration(**fields)` wrote before the record (the burst
    generator's PS: no loss, its own fields after the record's), so old and new run folders read alike."""
    fields = dict(iter=3, compute_start_ns=10, compute_end_ns=20, comm_start_ns=5, comm_end_ns=30, recv_end_ns=10,
                  send_start_ns=20, first_byte_ns={"1": 5, "2": 7}, bytes_recv=400, bytes_sent=200, loss=None)
    with JsonLog(tmp_path / "w.jsonl", job="j") as log:
        log.write(ITERATION, host_ns=1, **fields)                   # what the keyword form wrote
        log.iteration(Iteration(iter=3, compute_start_ns=10, compute_end_ns=20, comm_start_ns=5, comm_end_ns=30,
                                bytes_sent=200, bytes_recv=400,
                                extra=dict(recv_end_ns=10, send_start_ns=20, first_byte_ns={"1": 5, "2": 7})))
    before, after = (r for r in read_json_lines(tmp_path / "w.jsonl")[1] if r["type"] == ITERATION)
    assert {**before, "host_ns": 0} == {**after, "host_ns": 0}


def test_from_line_fills_the_optional_fields_and_names_a_missing_one():
    line = {"type": "iteration", "host_ns": 9, "iter": 0, "compute_start_ns": 1, "compute_end_ns": 2,
            "comm_start_ns": 2, "comm_end_ns": 3, "srtt_us": 800}
    assert Iteration.from_line(line) == Iteration(0, 1, 2, 2, 3, extra={"srtt_us": 800})   # no bytes, no loss
    for name in ITERATION_REQUIRED:
        with pytest.raises(ValueError, match=f"an iteration line without {name} "):
            Iteration.from_line({k: v for k, v in line.items() if k != name})
    with pytest.raises(ValueError, match="without compute_end_ns, comm_end_ns "):
        Iteration.from_line({"iter": 0, "compute_start_ns": 1, "comm_start_ns": 2})
    with pytest.raises(ValueError, match="'interval' line is not an iteration"):
        Iteration.from_line({**line, "type": "interval"})


def test_the_iterations_table_always_has_every_field_of_the_record(tmp_path):
    run = tmp_path / "run"
    (run / "jobs" / "j").mkdir(parents=True)
    (run / "status.json").write_text('{"status": "finished"}')
    with JsonLog(run / "jobs" / "j" / "ps-h1.jsonl", job="j", role="ps", rank=0, host="h1") as log:
        log.iteration(Iteration(0, 10, 20, 20, 35, bytes_sent=100))
    table = load_run(run).iterations
    assert set(ITERATION_FIELDS) <= set(table.columns) and table["bytes_recv"].isna().all()
    assert (table["job"].tolist(), table["role"].tolist()) == (["j"], ["ps"])


def _run_with_lines(tmp_path, lines):
    run = tmp_path / "run"
    (run / "jobs" / "j").mkdir(parents=True)
    (run / "status.json").write_text('{"status": "finished"}')
    anchor = {"type": "anchor", "host_ns": 0, "wall_time": 1.7e9, "job": "j", "role": "worker", "rank": 1, "host": "h2"}
    log = run / "jobs" / "j" / "worker0-h2.jsonl"
    log.write_text("".join(json.dumps(x) + "\n" for x in [anchor, *lines]))
    return run, log


def test_the_iterations_table_reads_a_line_without_optional_fields(tmp_path):
    run, _ = _run_with_lines(tmp_path, [{"type": "iteration", "host_ns": 40, "iter": 0, "compute_start_ns": 1,
                                         "compute_end_ns": 2, "comm_start_ns": 2, "comm_end_ns": 3, "ecn": True}])
    table = load_run(run).iterations
    assert list(table.columns[:12]) == ["job", "role", "rank", "host", *ITERATION_FIELDS]
    row = table.iloc[0]
    assert (row["host_ns"], row["iter"], row["ecn"]) == (40, 0, True)
    assert table[["bytes_sent", "bytes_recv", "loss"]].isna().all().all()


def test_an_iteration_line_without_a_required_field_is_one_line_naming_the_file_and_field(tmp_path):
    good = {"type": "iteration", "host_ns": 40, "iter": 0, "compute_start_ns": 1, "compute_end_ns": 2,
            "comm_start_ns": 2, "comm_end_ns": 3, "loss": None}
    bad = {k: v for k, v in {**good, "iter": 1}.items() if k != "comm_end_ns"}
    run, log = _run_with_lines(tmp_path, [good, bad])
    with pytest.raises(UsageError) as info:
        load_run(run).iterations
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{log}: iter 1: ") and "without comm_end_ns" in message
    proc = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "export", str(run), "--parquet", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and str(log) in lines[0] and "comm_end_ns" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
