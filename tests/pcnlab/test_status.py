"""status.json has one writer and reader (pcnlab/status.py)."""

from __future__ import annotations

from pcnlab.status import STATUS_FILE, is_run_folder, read_status, status_of, write_status


def test_status_moves_on_keeping_what_was_there(tmp_path):
    assert not is_run_folder(tmp_path) and read_status(tmp_path) == {} and status_of(tmp_path) is None
    write_status(tmp_path, "running", {"started": 1.0})
    write_status(tmp_path, "finished", {"ended": 2.0})
    assert is_run_folder(tmp_path)
    assert read_status(tmp_path) == {"status": "finished", "started": 1.0, "ended": 2.0}


def test_a_torn_or_foreign_status_reads_as_none_and_is_replaced(tmp_path):
    (tmp_path / STATUS_FILE).write_text('{"status": "runn')       # a writer killed mid-write (before files.py)
    assert status_of(tmp_path) is None
    (tmp_path / STATUS_FILE).write_text('["not", "a", "record"]')
    assert read_status(tmp_path) == {}
    write_status(tmp_path, "killed")
    assert status_of(tmp_path) == "killed"
