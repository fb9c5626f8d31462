"""Writing a result file so that a reader never sees half of it: the text goes to a temporary file
beside the target, is flushed to disk, and replaces the target in one rename (atomic on one file
system). A run killed while writing status.json, metrics.json, fidelity.json or summary.json leaves
the previous version or the new one, never a cut file that `pcnlab report` chokes on."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: str | Path, data: Any, **dumps: Any) -> None:
    """`json.dumps(data, **dumps)` (indent 1 unless given), written atomically, with a final newline."""
    write_atomic(path, json.dumps(data, **{"indent": 1, **dumps}) + "\n")
