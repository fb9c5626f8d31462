"""A run's folder under results/<experiment>/<timestamp>/<run>/, its ledger, and `latest`."""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from pcnlab.errors import UsageError
from pcnlab.files import give_back
from pcnlab.ledger import RunLedger
from pcnlab.status import write_status
from pcnlab.toolchain import require_root
from pcnlab.topologies.cleanup import close_ledger


def timestamp() -> str:
    return time.strftime("%Y-%m-%dT%H-%M-%S")


def point_latest(sweep: Path) -> list[Path]:
    """Point the experiment's `latest` link at this sweep (unless a folder of that name is there); the
    link, when it was made here, as a list of what the caller made."""
    latest = sweep.parent / "latest"
    if latest.is_symlink() or not latest.exists():
        latest.unlink(missing_ok=True)
        latest.symlink_to(sweep.name)
        return [latest]
    return []


@dataclass
class RunFolder:
    path: Path
    ledger: RunLedger
    owned: tuple[Path, ...] = ()     # what create() made: the topmost new folder, the `latest` link

    @classmethod
    def create(cls, results_root: Path, experiment: str, run: str, stamp: str | None = None) -> "RunFolder":
        """Opens a fresh run folder with its ledger (the network cleans up after dead runs)."""
        require_root()
        stamp = stamp or timestamp()
        path = (Path(results_root) / experiment / stamp / run).resolve()
        made = [p for p in (path, *path.parents) if not p.exists()]
        try:
            path.mkdir(parents=True, exist_ok=False)
        except FileExistsError:
            raise UsageError(f"the run folder {path} already exists (another run started in the same second?); "
                             "start it again") from None
        except OSError as exc:
            raise UsageError(f"cannot make the run folder {path} ({exc.strerror}); give --results a folder "
                             "you can write") from None
        owned = [made[-1], *point_latest(path.parent)]
        write_status(path, "running", {"started": time.time(), "host": platform.node(), "kernel": platform.release()})
        return cls(path, RunLedger(f"{experiment}-{stamp}-{run}-{os.getpid()}", path), tuple(owned))

    def finish(self, summary: dict) -> None:
        self._status("finished", summary)

    def _status(self, status: str, extra: dict | None = None) -> None:
        write_status(self.path, status, {"ended": time.time(), **(extra or {})})

    def __enter__(self) -> "RunFolder":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            reason = "aborted" if exc_type is KeyboardInterrupt else "failed"
            extra = {"error": str(exc) or exc_type.__name__}
            if getattr(exc_type, "run_complete", False):
                extra["analysis_failed"] = True   # the run itself completed: `report --recompute` retries
            self._status(reason, extra)
        close_ledger(self.ledger)
        give_back(*self.owned)    # finished, failed or stopped: the whole run folder is the user's
