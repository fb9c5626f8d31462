"""What the experiment-file tests share: a file written into a test's folder, and the smallest experiment."""

from __future__ import annotations

from pathlib import Path

MINIMAL = """\
topology: star
jobs:
  - kind: generator
    ps: h1
    workers: 2
"""


def write_file(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path
