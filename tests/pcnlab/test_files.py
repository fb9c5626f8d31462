"""Result files written atomically (pcnlab/files.py): a writer killed at any moment leaves a file that
parses, the old version or the new, and no temporary file that a reader would take for a result."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time

from pcnlab.files import writable, write_atomic, write_json

# Most of the writer's time goes into writing (about 5 MB each time), so kills land mid-write: the same
# loop with Path.write_text left a cut file in 3 of 12 kills.
WRITER = """
import json, sys
from pcnlab.files import write_atomic
path, n = sys.argv[1], 0
body = json.dumps({"n": 12345, "rows": [{"i": i, "x": "y" * 40} for i in range(100000)]}).replace("12345", "%d", 1)
while True:
    n += 1
    write_atomic(path, body % n)
"""


def test_write_json_replaces_the_file_whole(tmp_path):
    target = tmp_path / "status.json"
    write_json(target, {"status": "running"})
    write_json(target, {"status": "finished"}, allow_nan=False)
    assert json.loads(target.read_text()) == {"status": "finished"} and target.read_text().endswith("\n")
    write_atomic(target, "x")
    assert target.read_text() == "x" and [p.name for p in tmp_path.iterdir()] == ["status.json"]


def test_a_writer_killed_at_any_moment_leaves_a_whole_file(tmp_path):
    target = tmp_path / "metrics.json"
    write_json(target, {"n": 0})
    rng = random.Random(7)
    seen = set()
    for _ in range(12):
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(target)])
        time.sleep(rng.uniform(0.2, 0.6))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        seen.add(json.loads(target.read_text())["n"])          # always parses
    assert len(seen) > 1                                        # the writers did get through
    for leftover in tmp_path.glob(".metrics.json.*.tmp"):       # a killed writer's temporary file
        leftover.unlink()                                       # is never read as a result: not *.json


def test_writable_says_why_a_path_could_not_be_written_before_any_work(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    assert writable(tmp_path / "new" / "deeper" / "out.json") is None   # its folders would be made
    assert not (tmp_path / "new").exists()                               # ... but not by asking
    assert writable(blocker) is None                                      # replaced whole
    assert writable(tmp_path) == "it is a folder"
    assert writable(blocker / "out.json") == f"{blocker} is a file"
    assert writable("/proc/out.json").startswith("/proc: ")                # root or not: not a real folder
