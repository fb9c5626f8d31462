"""The submitter's side of a sweep on a Ray cluster (`pcnlab run FILE --cluster ADDRESS`).

Every run of the sweep becomes a task of `cluster.run_on_node` that needs `pcnlab: 1`, all submitted at
once: Ray starts each when a machine is free. One thread per run reads its task's stream: the node it
started on (a progress line), its outcome, then its folder, unpacked into results/<experiment>/<time>/
as a local sweep lays it out. A run whose node is lost (the task fails with Ray's node or worker
error) is recorded as lost, naming the node, and done again once on another live node. A node on
other code refuses in one line, and the sweep stops. Ctrl-C or SIGTERM cancels every task: a queued
one never starts, a running one gets Ctrl-C on its node and tears its run down there. cluster.json in
the sweep folder says where each run ran and what was lost; then the report is written as for a local
sweep.
"""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from pcnlab.errors import UsageError
from pcnlab.experiments.cluster import RESOURCE, alive_nodes, connect, node_facts, run_on_node, unpack
from pcnlab.experiments.config.runs import Experiment, RunConfig
from pcnlab.experiments.rundir import timestamp
from pcnlab.experiments.runner import RunOutcome
from pcnlab.files import give_back

CANCEL_WAIT_S = 120.0          # Ctrl-C: how long the nodes get to tear their runs down and say so


class NodeRefused(UsageError):
    """A node runs other code than the submitter, or cannot run networks: the sweep cannot go on."""


@dataclass
class Placement:
    """Where one run ran: each attempt's node and how it ended."""

    run: str
    attempts: list[dict] = field(default_factory=list)


class ClusterSweep:
    """The runs of an experiment, spread over a Ray cluster's machines."""

    def __init__(self, experiment: Experiment, spec: Path, overrides: list[str], address: str,
                 results_root: Path = Path("results"), say=print):
        self.experiment = experiment
        self.text = Path(spec).read_text()
        self.file_name = Path(spec).name
        self.overrides = list(overrides or [])
        self.address = address
        self.results_root = Path(results_root)
        self.say = say
        self.stamp = timestamp()
        self._lock = threading.Lock()
        self._live: dict[int, object] = {}         # run index -> its task's stream, while it runs
        self._cancelled = threading.Event()
        self.placements: dict[int, Placement] = {}

    @property
    def sweep_dir(self) -> Path:
        return (self.results_root / self.experiment.name / self.stamp).resolve()

    def _say(self, line: str) -> None:
        with self._lock:
            self.say(line)

    def run_all(self) -> list[RunOutcome]:
        from pcnlab.analysis.report import summarise_sweep

        ray = connect(self.address)
        try:
            runs = self.experiment.runs()
            nodes = alive_nodes(ray)
            self._say(f"cluster {self.address}: {len(nodes)} machine(s) offer {RESOURCE} "
                      f"({', '.join(sorted(n['NodeManagerHostname'] for n in nodes))}); {len(runs)} run(s), one per "
                      "machine at a time")
            self.task = ray.remote(run_on_node)
            self.mine = node_facts()
            outcomes: dict[int, RunOutcome] = {}
            with ThreadPoolExecutor(max_workers=len(runs)) as pool:
                futures = {pool.submit(self._one, ray, index, run, len(runs)): index
                           for index, run in enumerate(runs)}
                try:
                    pending = set(futures)
                    while pending:
                        done, pending = wait(pending, timeout=0.5)
                        for future in done:
                            outcomes[futures[future]] = future.result()
                except (KeyboardInterrupt, NodeRefused):
                    self._cancel(ray)
                    done, _ = wait(futures, timeout=CANCEL_WAIT_S)
                    for future in done:
                        if future.exception() is None:
                            outcomes[futures[future]] = future.result()
                    refused = next((f.exception() for f in done if isinstance(f.exception(), NodeRefused)), None)
                    if refused is not None:
                        raise refused
                    outcomes.update({i: RunOutcome(runs[i].name, self.sweep_dir / runs[i].name, "aborted",
                                                   "stopped by Ctrl-C") for i in range(len(runs)) if i not in outcomes})
            ordered = [outcomes[i] for i in sorted(outcomes)]
            self._write_record(runs)
            if any(o.path.exists() for o in ordered):
                summarise_sweep(self.sweep_dir, self.say, baseline=self.experiment.baseline)
            return ordered
        finally:
            ray.shutdown()

    def _one(self, ray, index: int, run: RunConfig, total: int) -> RunOutcome:
        """One run, done again once elsewhere if its node is lost."""
        placement = self.placements.setdefault(index, Placement(run.name))
        avoid: set[str] = set()
        for attempt in (1, 2):
            if self._cancelled.is_set():
                return RunOutcome(run.name, self.sweep_dir / run.name, "aborted", "stopped by Ctrl-C")
            options = {}
            if avoid:
                others = [n for n in alive_nodes(ray) if n["NodeID"] not in avoid]
                if not others:
                    placement.attempts.append({"node": None, "status": "not run: no other machine is left"})
                    self._say(f"      {run.name}: no other machine is left to run it again; recorded as lost")
                    return RunOutcome(run.name, self.sweep_dir / run.name, "failed", "lost with its node")
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(others[0]["NodeID"], soft=False)
            host, node_id = None, None
            try:
                stream = self.task.options(num_returns="streaming", max_retries=0, num_cpus=0, resources={RESOURCE: 1},
                                           **options).remote(self.text, self.file_name, self.overrides, index,
                                                             self.stamp, self.mine)
                self._live[index] = stream
                outcome, pieces = None, []
                for ref in stream:
                    item = ray.get(ref)
                    if isinstance(item, bytes):
                        pieces.append(item)
                    elif "refused" in item:
                        raise NodeRefused(item["refused"])
                    elif "started" in item:
                        host, node_id = item["started"]["host"], item["started"]["node_id"]
                        self._say(f"[{index + 1}/{total}] {run.name} on {host}" + (f" (again, attempt {attempt})"
                                                                                     if attempt > 1 else ""))
                    else:
                        outcome = item["outcome"]
                return self._home(run, outcome, pieces, host, placement)
            except NodeRefused:
                raise
            except Exception as exc:  # noqa: BLE001 -- Ray's errors for a lost node or worker, or a cancel
                if self._cancelled.is_set():
                    placement.attempts.append({"node": host, "status": "aborted"})
                    return RunOutcome(run.name, self.sweep_dir / run.name, "aborted", "stopped by Ctrl-C")
                why = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}" if str(exc) else type(exc).__name__
                placement.attempts.append({"node": host, "status": "lost", "error": why})
                self._say(f"      {run.name}: lost on node {host or '?'} ({why})"
                          + ("; running it again on another machine" if attempt == 1 else ""))
                avoid.add(node_id or "")
            finally:
                self._live.pop(index, None)
        return RunOutcome(run.name, self.sweep_dir / run.name, "failed", "lost twice with its nodes")

    def _home(self, run: RunConfig, outcome: dict, pieces: list[bytes], host: str, placement: Placement) -> RunOutcome:
        latest = self.sweep_dir.parent / "latest"
        made = [p for p in (self.sweep_dir, self.sweep_dir.parent) if not p.exists()]
        path = unpack(pieces, self.sweep_dir)
        owned = [*made[-1:], path]
        if latest.is_symlink() or not latest.exists():
            latest.unlink(missing_ok=True)
            latest.symlink_to(self.stamp)
            owned.append(latest)
        give_back(*owned)
        placement.attempts.append({"node": host, "status": outcome["status"]})
        status, error = outcome["status"], outcome["error"]
        fidelity = _read(path / "fidelity.json")
        result = RunOutcome(run.name, path, status, error, _read(path / "metrics.json"), fidelity)
        if status == "finished":
            from pcnlab.analysis.fidelity import verdict_line

            self._say(f"      done: {path} (on {host})")
            self._say(f"      fidelity: {verdict_line(fidelity)}")
        else:
            self._say(f"      {status} on {host}: {error}; logs kept in {path}")
        return result

    def _cancel(self, ray) -> None:
        self._cancelled.set()
        self._say(f"stopping: cancelling every run; running ones are torn down on their machines "
                  f"(at most {CANCEL_WAIT_S:.0f} s)")
        for stream in list(self._live.values()):
            try:
                ray.cancel(stream)
            except Exception:  # noqa: BLE001 -- already ended
                pass

    def _write_record(self, runs: list[RunConfig]) -> None:
        if not self.placements:
            return
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        record = {"address": self.address, "submitted_from": self.mine.get("host"), "commit": self.mine.get("commit"),
                  "runs": [{"run": p.run, "attempts": p.attempts} for _, p in sorted(self.placements.items())]}
        path = self.sweep_dir / "cluster.json"
        path.write_text(json.dumps(record, indent=1))
        give_back(path)


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}

