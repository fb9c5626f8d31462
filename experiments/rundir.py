"""A run's folder under results/<experiment>/<timestamp>/<run>/, its ledger, and `latest`."""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from pcnlab.ledger import RunLedger
from pcnlab.toolchain import require_root


def timestamp() -> str:
    return time.strftime("%Y-%m-%dT%H-%M-%S")


@dataclass
class RunFolder:
    path: Path
    ledger: RunLedger

    @classmethod
    def create(cls, results_root: Path, experiment: str, run: str, stamp: str | None = None) -> "RunFolder":
        """Opens a fresh run folder with its ledger (the network cleans up after dead runs)."""
        require_root()
        stamp = stamp or timestamp()
        path = (Path(results_root) / experiment / stamp / run).resolve()
        path.mkdir(parents=True, exist_ok=False)
        latest = path.parent.parent / "latest"
        if latest.is_symlink() or not latest.exists():
            latest.unlink(missing_ok=True)
            latest.symlink_to(stamp)
        (path / "status.json").write_text(json.dumps({"status": "running", "started": time.time(),
                                                       "host": platform.node(), "kernel": platform.release()}))
        return cls(path, RunLedger(f"{experiment}-{stamp}-{run}-{os.getpid()}", path))

    def finish(self, summary: dict) -> None:
        self._status("finished", summary)

    def _status(self, status: str, extra: dict | None = None) -> None:
        previous = json.loads((self.path / "status.json").read_text())
        previous.update({"status": status, "ended": time.time(), **(extra or {})})
        (self.path / "status.json").write_text(json.dumps(previous, indent=1))

    def __enter__(self) -> "RunFolder":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            reason = "aborted" if exc_type is KeyboardInterrupt else "failed"
            self._status(reason, {"error": str(exc) or exc_type.__name__})
        self.ledger.close()
