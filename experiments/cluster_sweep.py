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

import itertools
import json
import random
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

from pcnlab.analysis.fidelity import verdict_line
from pcnlab.analysis.report import summarise_sweep
from pcnlab.errors import UsageError
from pcnlab.experiments.cluster import RESOURCE, alive_nodes, connect, lost_errors, node_facts, run_on_node, unpack
from pcnlab.experiments.config.runs import Experiment, RunConfig
from pcnlab.experiments.rundir import point_latest, timestamp
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
        self._lock = threading.Lock()              # progress lines
        self._submit = threading.Lock()            # a task's submission against a cancel
        self._files = threading.Lock()             # `latest` and ownership, as folders come home
        self._made: list[Path] = []                # the topmost folder the sweep made (given back as it ends)
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
        ray = connect(self.address)
        # Ray's classes (Ray is imported only now): a lost node's errors, a task's own error, a placement
        self._lost, self._task_error, self._affinity = lost_errors()
        runs = self.experiment.runs()
        missing = [p for p in (self.sweep_dir, *self.sweep_dir.parents) if not p.exists()]
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        self._made = missing[-1:]
        pool = ThreadPoolExecutor(max_workers=len(runs))
        outcomes: dict[int, RunOutcome] = {}
        try:
            nodes = alive_nodes(ray)
            self._first = {n["NodeID"] for n in nodes}
            self._say(f"cluster {self.address}: {len(nodes)} machine(s) offer {RESOURCE} "
                      f"({', '.join(sorted(n['NodeManagerHostname'] for n in nodes))}); {len(runs)} run(s), one per "
                      "machine at a time")
            self.task = ray.remote(run_on_node)
            self.mine = node_facts()
            futures = {pool.submit(self._one, ray, index, run, len(runs)): index for index, run in enumerate(runs)}
            try:
                pending = set(futures)
                while pending:
                    done, pending = wait(pending, timeout=0.5)
                    for future in done:
                        outcomes[futures[future]] = future.result()
            except BaseException:           # Ctrl-C, SIGTERM, a refusing node, a defect: every task cancelled
                self._cancel(ray)
                done, _ = wait(futures, timeout=CANCEL_WAIT_S)
                for future in done:
                    if future.exception() is None:
                        outcomes[futures[future]] = future.result()
                outcomes.update({i: RunOutcome(runs[i].name, self.sweep_dir / runs[i].name, "aborted",
                                               "stopped by Ctrl-C") for i in range(len(runs)) if i not in outcomes})
                refused = next((f.exception() for f in done if isinstance(f.exception(), NodeRefused)), None)
                if refused is not None:
                    raise refused
                if not isinstance(sys.exc_info()[1], KeyboardInterrupt):
                    raise
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
            self._write_record()
            ray.shutdown()
        ordered = [outcomes[i] for i in sorted(outcomes)]
        if any(o.path.exists() for o in ordered):
            summarise_sweep(self.sweep_dir, self.say, baseline=self.experiment.baseline)
        return ordered

    def _one(self, ray, index: int, run: RunConfig, total: int) -> RunOutcome:
        """One run, done again once elsewhere if its node is lost."""
        placement = self.placements.setdefault(index, Placement(run.name))
        avoid: set[str] = set()
        for attempt in (1, 2):
            options = {}
            if avoid:
                others = [n for n in alive_nodes(ray) if n["NodeID"] not in avoid]
                if not others:
                    placement.attempts.append({"node": None, "status": "not run: no other machine is left"})
                    self._say(f"      {run.name}: no other machine is left to run it again; recorded as lost")
                    return RunOutcome(run.name, self.sweep_dir / run.name, "failed", "lost with its node")
                # a machine up since the sweep began, likelier to stay than one that just joined; soft: when it
                # is gone too before the run starts, Ray places the run on any other
                steady = [n for n in others if n["NodeID"] in self._first] or others
                options["scheduling_strategy"] = self._affinity(random.choice(steady)["NodeID"], soft=True)
            with self._submit:        # a cancel between the check and the submission would miss this task
                if self._cancelled.is_set():
                    return RunOutcome(run.name, self.sweep_dir / run.name, "aborted", "stopped by Ctrl-C")
                stream = self.task.options(num_returns="streaming", max_retries=0, num_cpus=0,
                                           resources={RESOURCE: 1}, **options).remote(
                    self.text, self.file_name, self.overrides, index, self.stamp, self.mine)
                self._live[index] = stream
            host, node_id, outcome = None, None, None
            try:
                items = (ray.get(ref) for ref in stream)
                for item in items:
                    if isinstance(item, bytes):       # the folder, piece by piece, written as it comes
                        path = unpack(itertools.chain([item], items), self.sweep_dir)
                        break
                    if "refused" in item:
                        raise NodeRefused(item["refused"])
                    if "started" in item:
                        host, node_id = item["started"]["host"], item["started"]["node_id"]
                        self._say(f"[{index + 1}/{total}] {run.name} on {host}" + (f" (again, attempt {attempt})"
                                                                                     if attempt > 1 else ""))
                    else:
                        outcome = item["outcome"]
                else:
                    raise RuntimeError("the node's stream ended without the run's folder")
            except NodeRefused:
                raise
            except self._task_error as exc:     # the node's own error (a bad image, a failed calibration): not a loss
                if self._cancelled.is_set():      # or our cancel, as Ray reports it
                    placement.attempts.append({"node": host, "status": "aborted"})
                    return RunOutcome(run.name, self.sweep_dir / run.name, "aborted", "stopped by Ctrl-C")
                why = str(getattr(exc, "cause", None) or exc).strip().splitlines()[-1][:300]
                placement.attempts.append({"node": host, "status": "failed", "error": why})
                self._say(f"      {run.name} failed on {host or '?'}: {why}")
                return RunOutcome(run.name, self.sweep_dir / run.name, "failed", why)
            except self._lost as exc:
                if self._cancelled.is_set():
                    placement.attempts.append({"node": host, "status": "aborted"})
                    return RunOutcome(run.name, self.sweep_dir / run.name, "aborted", "stopped by Ctrl-C")
                why = type(exc).__name__
                placement.attempts.append({"node": host, "status": "lost", "error": why})
                self._say(f"      {run.name}: lost on node {host or '?'} ({why})"
                          + ("; running it again on another machine" if attempt == 1 else ""))
                avoid.add(node_id or "")
                continue
            finally:
                self._live.pop(index, None)
            return self._home(run, outcome, path, host, placement)
        return RunOutcome(run.name, self.sweep_dir / run.name, "failed", "lost twice with its nodes")

    def _home(self, run: RunConfig, outcome: dict, path: Path, host: str, placement: Placement) -> RunOutcome:
        """A run's folder, unpacked: `latest`, ownership, its outcome and the progress lines."""
        with self._files:
            owned = [path, *self._made, *point_latest(self.sweep_dir)]
            self._made = []
            give_back(*owned)
        placement.attempts.append({"node": host, "status": outcome["status"]})
        status, error = outcome["status"], outcome["error"]
        fidelity = _read(path / "fidelity.json")
        result = RunOutcome(run.name, path, status, error, _read(path / "metrics.json"), fidelity)
        if status == "finished":
            self._say(f"      done: {path} (on {host})")
            self._say(f"      fidelity: {verdict_line(fidelity)}")
        else:
            self._say(f"      {status} on {host}: {error}; logs kept in {path}")
        return result

    def _cancel(self, ray) -> None:
        self._say(f"stopping: cancelling every run; running ones are torn down on their machines "
                  f"(at most {CANCEL_WAIT_S:.0f} s)")
        with self._submit:
            self._cancelled.set()
            for stream in list(self._live.values()):
                try:
                    ray.cancel(stream)
                except Exception:  # noqa: BLE001 -- already ended
                    pass

    def _write_record(self) -> None:
        if not self.placements:
            return
        mine = getattr(self, "mine", {})
        record = {"address": self.address, "submitted_from": mine.get("host"), "commit": mine.get("commit"),
                  "runs": [{"run": p.run, "attempts": p.attempts} for _, p in sorted(self.placements.items())]}
        path = self.sweep_dir / "cluster.json"
        path.write_text(json.dumps(record, indent=1))
        give_back(path, *self._made)


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}

