"""Writing a result file so that a reader never sees half of it: the text goes to a temporary file
beside the target, is flushed to disk, and replaces the target in one rename (atomic on one file
system). A run killed while writing status.json, metrics.json, fidelity.json or summary.json leaves
the previous version or the new one, never a cut file that `pcnlab report` chokes on. What a run or a
report writes under sudo is handed back to the user behind it (`give_back`)."""

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


def writable(path: str | Path) -> str | None:
    """Why `path` could not be written later (its folders made as needed), or None: asked before long
    work, so that what it measures is not lost at the end. Probes the nearest folder that exists with a
    temporary file (root passes every permission check, but not a read-only or virtual file system)."""
    path = Path(path)
    try:
        if path.is_dir():
            return "it is a folder"
        folder = next(p for p in path.parents if p.exists())
    except OSError as exc:   # a folder on the way that may not be searched
        return f"{exc.filename or path}: {exc.strerror}"
    if not folder.is_dir():
        return f"{folder} is a file"
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:   # no permission, a read-only or virtual file system
        return f"{folder}: {exc.strerror}"
    return None


def write_json(path: str | Path, data: Any, **dumps: Any) -> None:
    """`json.dumps(data, **dumps)` (indent 1 unless given), written atomically, with a final newline."""
    write_atomic(path, json.dumps(data, **{"indent": 1, **dumps}) + "\n")


def invoking_user() -> tuple[int, int] | None:
    """(uid, gid) of the user who ran us through sudo (SUDO_UID, SUDO_GID) while we are root; else None."""
    if os.geteuid() != 0:
        return None
    try:
        uid, gid = int(os.environ["SUDO_UID"]), int(os.environ["SUDO_GID"])
    except (KeyError, ValueError):
        return None
    return None if uid == 0 else (uid, gid)


def give_back(*paths: Path) -> None:
    """Hand results to the user behind `sudo`, so they read and re-plot them without root: each path,
    and for a folder everything in it (a symlink itself, never what it points at). Nothing without sudo."""
    user = invoking_user()
    if user is None:
        return
    for path in map(Path, paths):
        inside = os.walk(path) if path.is_dir() and not path.is_symlink() else ()
        for item in [path, *(Path(top) / name for top, dirs, files in inside for name in dirs + files)]:
            try:
                os.lchown(item, *user)
            except FileNotFoundError:
                pass
