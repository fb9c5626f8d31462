"""`pcnlab run`: an experiment file becomes runs; each run gets its folder, its network, its controller,
its workloads, and leaves its logs, metrics and plots behind, whether it finishes, fails or is stopped.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml

from pcnlab.controller.dataplane import read_port_counters
from pcnlab.controller.events import EventLog
from pcnlab.calibration import load_calibration
from pcnlab.errors import AnalysisFailed, PcnLabError, UsageError
from pcnlab.files import write_json
from pcnlab.experiments.config.runs import Experiment, RunConfig
from pcnlab.experiments.run_controller import shift_targets, start_controller
from pcnlab.experiments.provenance import versions
from pcnlab.experiments.rundir import RunFolder, timestamp
from pcnlab.experiments.sampler import CpuSampler
from pcnlab.experiments.schedule_runner import ScheduleRunner
from pcnlab.experiments.watch import RunWatch
from pcnlab.topologies.network import NetworkOptions, PcnNetwork, check_supported
from pcnlab.workloads.containers import ContainerSpec
from pcnlab.workloads.images import prepare


@dataclass
class RunOutcome:
    name: str
    path: Path
    status: str                 # finished | failed | aborted
    error: str = ""
    metrics: dict = field(default_factory=dict)
    fidelity: dict = field(default_factory=dict)


class Progress:
    """One line per run that redraws itself: a bar over the run's duration and what is going on."""

    def __init__(self, total_s: float, stream=sys.stdout):
        self.total_s = max(total_s, 1e-6)
        self.stream = stream
        self.started = time.monotonic()
        self.tty = stream.isatty()
        self._last = ""

    def update(self, note: str) -> None:
        elapsed = time.monotonic() - self.started
        done = min(1.0, elapsed / self.total_s)
        bar = "#" * int(done * 24) + "-" * (24 - int(done * 24))
        line = f"      [{bar}] {elapsed:5.1f}/{self.total_s:.0f} s  {note}"
        if self.tty:
            self.stream.write("\r" + line.ljust(len(self._last)))
            self.stream.flush()
        elif line.split("s  ")[-1] != self._last.split("s  ")[-1]:
            self.stream.write(line + "\n")  # not a terminal: a line when the note changes
        self._last = line

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")


class RunExecution:
    """Everything one run starts, in order, and stops in reverse."""

    def __init__(self, run: RunConfig, folder: RunFolder, say=print):
        self.run = run
        self.folder = folder
        self.say = say
        self.schedule: ScheduleRunner | None = None
        self.watch: RunWatch | None = None   # during a run: what may end in its middle (experiments/watch.py)

    def execute(self) -> None:
        from pcnlab.workloads import FlowSpec, JobSpec, Workloads

        run, path, ledger = self.run, self.folder.path, self.folder.ledger
        bmv2 = run.switch.kind == "bmv2"
        telemetry = bmv2 and bool(run.telemetry.every)
        topo = run.topology.build(monitors=telemetry)
        options = NetworkOptions(switch=run.switch.kind, packet_log=run.switch.packet_log, pcap=run.switch.pcap,
                                 pace_hosts=run.switch.pace_hosts, host_queue=run.switch.host_queue,
                                 realtime=run.switch.realtime)
        check_supported(topo, options)
        with PcnNetwork(topo, path, ledger, options) as net:
            sampler = CpuSampler(ledger, path / "cpu.csv").start()
            controller_thread = scheduler = None
            collectors = []
            flows = None
            jobs = []
            events = EventLog(path / "events.jsonl")
            watch = self.watch = RunWatch(events, net if bmv2 else None)
            workloads = Workloads(path, net=net, ledger=ledger)
            try:
                if bmv2:
                    controller_thread, scheduler = start_controller(run, topo, net.endpoints(), events)
                if telemetry:
                    collectors = self._start_collectors(net, topo)
                    watch.collectors = dict(zip(topo.switches(), collectors))
                progress = Progress(run.duration_s)
                schedule = self.schedule = ScheduleRunner(  # changes during the run (experiments/schedule_runner.py)
                    run.schedule, endpoints=net.endpoints() if bmv2 else (), controller=controller_thread,
                    flows={f.name: f for f in run.background}, workloads=workloads, events=events,
                    duration_s=run.duration_s)
                if run.background:
                    plain = [FlowSpec(**f.flow_spec_kwargs(run.duration_s)) for f in run.background
                             if f.name not in schedule.own_flows()]
                    flows = watch.flows = workloads.start_flows(plain) if plain else None
                    schedule.start_background()
                    events.write("background_started", flows=len(run.background))
                    self._wait(progress, run.warmup_s, "background warming up")
                for job in run.jobs:
                    jobs.append(workloads.start_job(JobSpec(**job.job_spec_kwargs(run.seed))))
                    if scheduler is not None and scheduler.channel is not None:
                        scheduler.channel.add_job(job.id, shift_targets(jobs[-1], workloads.hosts))
                    events.write("job_started", job=job.name, id=job.id)
                schedule.begin()
                self._run_until_done(progress, jobs)
                progress.close()
            finally:
                sampler.stop()
                for handle in jobs:
                    handle.stop()
                scheduled = self.schedule.close() if self.schedule is not None else {}
                if flows is not None or scheduled:
                    if flows is not None:
                        flows.stop()
                    (path / "background.json").write_text(json.dumps(
                        {**(flows.throughput() if flows is not None else {}), **scheduled}, indent=1))
                if controller_thread is not None:
                    counters = {}
                    for name, switch in controller_thread.controller.switches.items():
                        try:
                            raw = controller_thread.call(read_port_counters(switch), 10)
                            counters[name] = [{"port": p, "class": c, "counter": k, "packets": v[0], "bytes": v[1]}
                                              for (p, c, k), v in sorted(raw.items())]
                        except Exception as exc:  # keep going: the rest of the run's files matter more
                            counters[name] = {"error": str(exc)}
                    (path / "counters.json").write_text(json.dumps(counters, indent=1))
                    controller_thread.stop()
                for proc in collectors:
                    proc.terminate()
                    proc.wait(10)
                events.close()

    def _wait(self, progress: Progress, seconds: float, note: str) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            progress.update(note)
            self._watch_tick(progress)
            time.sleep(0.2)

    def _watch_tick(self, progress: Progress) -> None:
        for note in self.watch.tick() if self.watch is not None else []:
            progress.update(note)

    def _run_until_done(self, progress: Progress, jobs) -> None:
        end = progress.started + self.run.duration_s
        while time.monotonic() < end:
            running = [j for j in jobs if not j.check()]  # check() raises when a process failed
            if jobs and not running:
                progress.update("jobs finished")
                return
            changed = self.schedule.tick() if self.schedule is not None else []
            self._watch_tick(progress)
            progress.update(f"{len(running)} job(s) running" if jobs else "background only")
            if changed:
                progress.update("schedule: " + "; ".join(changed))
            time.sleep(0.05 if self.schedule is not None and self.schedule.pending else 0.2)
        if jobs and any(not j.check() for j in jobs):
            progress.update("duration reached: jobs stopped")

    def _start_collectors(self, net, topo) -> list:
        procs = []
        for sw in topo.switches():
            mon = f"m{sw[1:]}"
            out = self.folder.path / f"queue-{sw}.csv"
            # Started in the run folder: run from a source checkout, `-m` would find the checkout's pcnlab/
            # folder before the installed package.
            proc = net.host(mon).popen([sys.executable, "-m", "pcnlab.controller.collector", "--interface",
                                        f"{mon}-eth0", "--switch", sw, "--out", str(out)], text=True,
                                       cwd=str(self.folder.path))
            self.folder.ledger.add_process(proc.pid, f"collector for {sw}")
            line = proc.stdout.readline()
            if "collector ready" not in line:
                raise PcnLabError(f"the queue log collector for {sw} did not start: {line.strip() or 'no output'}")
            procs.append(proc)
        return procs


def prepare_images(runs, say) -> dict:
    """The containers the runs' jobs ask for, built (the default image) and probed: workloads/images.py."""
    wanted: dict = {}
    for run in runs:
        for job in run.jobs:
            if job.image is not None:
                wanted.setdefault(ContainerSpec(job.image, job.cpus, job.memory), set()).add(job.kind)
    return prepare(wanted, say) if wanted else {}


class ExperimentRunner:
    """The runs of an experiment, one after another. `calibration`: the machine's calibration every run
    is judged by (copied into each run folder as calibration.json; default: this machine's file)."""

    def __init__(self, experiment: Experiment, results_root: Path = Path("results"), say=print,
                 calibration: dict | None = None, stamp: str | None = None, pilot: str = "never",
                 plots: bool = True):
        self.experiment = experiment
        self.pilot = pilot                    # auto | always | never: experiments/pilot.py
        self.plots = plots                    # each run's queue plot and view, the sweep's plots
        self.results_root = Path(results_root)
        self.say = say
        self.stamp = stamp or timestamp()     # a cluster's node: the submitter's, so its folder lands in the sweep
        self.calibration = calibration if calibration is not None else load_calibration()

    @property
    def sweep_dir(self) -> Path:
        return (self.results_root / self.experiment.name / self.stamp).resolve()

    def run_all(self) -> list[RunOutcome]:
        from pcnlab.experiments import pilot

        runs = self.experiment.runs()
        first = None
        if self.pilot != "never":            # experiments/pilot.py: the heaviest run first, judged
            first = pilot.chosen(runs, self.calibration, asked=self.pilot == "always")
            no = pilot.refused(first, self.calibration)
            if no:
                raise UsageError(no)
            runs = pilot.order(runs, first)
        images = prepare_images(runs, self.say)   # before any network: an image that cannot serve is one line
        outcomes: list[RunOutcome] = []
        started = time.monotonic()
        try:
            for index, run in enumerate(runs, 1):
                note = "; the pilot: if it is untrusted here the sweep stops" if run is first else ""
                self.say(f"[{index}/{len(runs)}] {run.name}  (sweep {time.monotonic() - started:.0f} s so far{note})")
                outcome = self.run_one(run, images)
                outcomes.append(outcome)
                if outcome.status == "aborted":
                    break
                if run is first:
                    pilot.judge(run, outcome, self.calibration, lambda slower: self._pilots().run_one(slower, images),
                                self.say)
        except BaseException:
            self._summarise(outcomes, ending=True)
            raise
        self._summarise(outcomes)
        return outcomes

    def _summarise(self, outcomes: list[RunOutcome], ending: bool = False) -> None:
        """The report of what ran (nothing ran: none). `ending`: the sweep's own error (the pilot's refusal,
        Ctrl-C) is what ends it, so a report that fails is said in one line, not raised over it."""
        from pcnlab.analysis.report import summarise_sweep

        if not outcomes:
            return
        try:
            summarise_sweep(self.sweep_dir, self.say, baseline=self.experiment.baseline, plots=self.plots)
        except Exception as exc:  # noqa: BLE001
            if not ending:
                raise
            self.say(f"report: not written ({type(exc).__name__}: {exc})")

    def _pilots(self) -> "ExperimentRunner":
        """Where a pilot's rehearsal (experiments/pilot.py) runs: results/<experiment>-pilot/, quiet, no plots."""
        return ExperimentRunner(replace(self.experiment, name=f"{self.experiment.name}-pilot"),
                                self.results_root, say=lambda line: None, calibration=self.calibration, plots=False)

    def run_one(self, run: RunConfig, images: dict, node: dict | None = None) -> RunOutcome:
        """One run of the sweep in its folder, analysed and judged; a failure or Ctrl-C is its outcome
        (the folder says which). `images`: what prepare_images found; `node`: the cluster node that
        runs it (experiments/cluster.py), recorded in versions.json."""
        from pcnlab.analysis.metrics import analyse_run
        from pcnlab.analysis.fidelity import check_run, verdict_line

        folder = RunFolder.create(self.results_root, self.experiment.name, run.name, self.stamp)
        outcome = RunOutcome(run.name, folder.path, "finished")
        try:
            with folder:
                (folder.path / "config.yaml").write_text(yaml.safe_dump(run.to_dict(), sort_keys=False))
                used = {j.image for j in run.jobs if j.image is not None}
                (folder.path / "versions.json").write_text(json.dumps(
                    {**versions(), **({"images": {i: images[i].to_dict() for i in sorted(used)}} if used else {}),
                     **({"node": node} if node else {})}, indent=1))
                if self.calibration:
                    write_json(folder.path / "calibration.json", self.calibration)
                RunExecution(run, folder, self.say).execute()
                try:
                    outcome.metrics = analyse_run(folder.path, plots=self.plots)
                    outcome.fidelity = check_run(folder.path)
                except Exception as exc:  # noqa: BLE001 -- a defect in reading one run loses neither it nor the sweep
                    raise AnalysisFailed(
                        f"analysing its files failed ({type(exc).__name__}: {exc}); please report it. "
                        f"The files are kept: pcnlab report {folder.path.parent} --recompute reads them "
                        "again") from exc
                folder.finish({"metrics": "metrics.json"})
        except KeyboardInterrupt:
            outcome.status, outcome.error = "aborted", "stopped by Ctrl-C"
            self.say(f"      aborted; what it started was removed; its logs are in {folder.path}")
            return outcome
        except PcnLabError as exc:
            outcome.status, outcome.error = "failed", str(exc)
            self.say(f"      failed: {exc}; logs kept in {folder.path}")
            return outcome
        self.say(f"      done: {folder.path}")
        self.say(f"      fidelity: {verdict_line(outcome.fidelity)}")
        return outcome
