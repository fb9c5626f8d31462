"""A run folder's status.json, its one writer and reader: running -> finished | failed | aborted |
killed, with when and why. The runner (experiments/rundir.py), the ledger's cleaner (a dead run is
marked killed), `pcnlab analyse` and the readers (pcnlab.analysis.results, the report) all go through here.
"""

from __future__ import annotations

import json
from pathlib import Path

from pcnlab.files import write_json

STATUS_FILE = "status.json"


def is_run_folder(path: Path | str) -> bool:
    return (Path(path) / STATUS_FILE).exists()


def read_status(run_dir: Path | str) -> dict:
    """The run's status record; {} when it has none or it cannot be read."""
    try:
        data = json.loads((Path(run_dir) / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def status_of(run_dir: Path | str) -> str | None:
    return read_status(run_dir).get("status")


def write_status(run_dir: Path | str, status: str, extra: dict | None = None) -> None:
    """Set the status (and `extra` fields); the fields already there are kept. Written atomically."""
    record = read_status(run_dir)
    record.update({"status": status, **(extra or {})})
    write_json(Path(run_dir) / STATUS_FILE, record)
