"""A run folder as data: `pcnlab.analysis.results` is how metrics, reports, plots and notebooks read results.

    from pcnlab.analysis.results import load_run, load_results
    run = load_run("results/pcn-paper/latest/mode=pcn,rep=1")
    run.queue          # the switch queue logs (every switch), with host-clock times and host names
    run.iterations     # every worker's and PS's iteration records, one row each (a job that logs
                       # none: its ranks' bursts, `source` "network": analysis/network_iterations.py)
    run.events         # the controller's event log
    run.flows          # the background flows' throughput intervals
    run.iteration_table  # iterations.csv: the DDL iterations measured at the bottleneck
    run.config, run.metrics, run.status, run.network
    load_results("results/pcn-paper")   # every run of its latest sweep, and a table of their metrics

Every time is on one clock, the host's monotonic clock in ns, which every Mininet host, workload log,
the controller and the collector share. Switch times (µs since that switch started) are mapped onto it
per switch: a telemetry clone reaches the collector right after its packet left, so the lower envelope
of host_ns - egress_us x 1000 is the switch's offset (`SwitchClock`); rows keep their switch times too.
Reading never changes a run folder and never re-runs anything.

JSON-lines logs follow one schema (pcnlab/jsonlines.py: `type` and `host_ns` on every line, an anchor
first). A folder written before it, or a file damaged for its kind, is refused in one line (UsageError).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from pcnlab.errors import UsageError
from pcnlab.analysis.traffic_stats import theil_sen
from pcnlab.jsonlines import ITERATION, ITERATION_FIELDS, Iteration, read_json_lines
from pcnlab.status import STATUS_FILE, is_run_folder, read_status

IDENTITY = ("job", "role", "rank", "host")   # who logged an iteration (its log's anchor)
DERIVED = ("metrics.json", "fidelity.json", "iterations.csv")   # analysis writes them: --recompute again
QUEUE_LOG_NEEDS = ("host_ns", "switch", "seq", "port", "ingress_us", "egress_us")   # what reading them uses
CLOCK_WINDOW_US = 1_000_000   # the lower envelope is taken per second of switch time


@dataclass(frozen=True)
class SwitchClock:
    """host_ns = offset_ns + drift x (switch_us x 1000) + switch_us x 1000, fitted on the lower envelope
    of the collector's stamps. `error_us`: how far 90 % of the envelope's points lie from the line."""

    switch: str
    offset_ns: float
    drift: float = 0.0
    error_us: float = 0.0
    points: int = 0

    def to_host_ns(self, switch_us):
        t = np.asarray(switch_us, dtype=np.float64) * 1000.0
        return self.offset_ns + t * (1.0 + self.drift)

    def to_switch_us(self, host_ns):
        return (np.asarray(host_ns, dtype=np.float64) - self.offset_ns) / (1.0 + self.drift) / 1000.0

    @classmethod
    def fit(cls, switch: str, host_ns: np.ndarray, egress_us: np.ndarray) -> "SwitchClock":
        host_ns = np.asarray(host_ns, dtype=np.float64)
        egress_us = np.asarray(egress_us, dtype=np.float64)
        delay = host_ns - egress_us * 1000.0
        if len(delay) == 0:
            return cls(switch, 0.0)
        windows = (egress_us // CLOCK_WINDOW_US).astype(np.int64)
        frame = pd.DataFrame({"w": windows, "d": delay, "t": egress_us * 1000.0})
        low = frame.loc[frame.groupby("w")["d"].idxmin()]
        if len(low) < 3:
            return cls(switch, float(delay.min()), 0.0, 0.0, len(low))
        # Theil-Sen, not least squares: a second in which the collector was held up (a busy machine)
        # lifts that second's minimum, and one such outlier tilted a least-squares line by 2e-5 and
        # moved the map by milliseconds. A minimum cannot be too low (a clone never arrives before its
        # packet left), so the line is then shifted down onto the lowest point.
        slope, intercept = theil_sen(low["d"].to_numpy(), low["t"].to_numpy())
        residual = low["d"] - (intercept + slope * low["t"])
        intercept += residual.min()
        residual = residual - residual.min()
        return cls(switch, float(intercept), float(slope), float(np.percentile(residual, 90) / 1000.0), len(low))


def on_port(frame: pd.DataFrame, switch: str, port: int) -> pd.Series:
    """The rows of a table with switch and port columns (the queue log, events, windows) at one port."""
    return (frame["switch"] == switch) & (frame["port"] == port)


def _host_names(network: dict) -> dict[int, str]:
    """Host number (the low 16 bits of its IPv4 address, as the telemetry record carries it) -> name."""
    octets = {name: [int(x) for x in info["ip"].split(".")] for name, info in (network.get("hosts") or {}).items()}
    return {(o[2] << 8) | o[3]: name for name, o in octets.items()}


@dataclass
class RunData:
    """One run folder, read lazily: each table is loaded the first time it is asked for."""

    path: Path

    # --- small files ---------------------------------------------------------------------------

    def _damaged(self, path: Path, problem: str) -> UsageError:
        """The one line for a file of this run that cannot be read as its kind (a copy cut short, an
        edit): which file, what is wrong, and what to do."""
        todo = (f"`pcnlab report --recompute {self.path}` writes it again" if path.name in DERIVED else
                "this run's own record is damaged: run it again, or leave its folder out")
        return UsageError(f"{path}: {problem}; {todo}")

    @staticmethod
    def _text(path: Path) -> str:
        try:
            return path.read_text()
        except OSError as exc:  # not damaged: not ours to read (its owner, its permissions)
            raise UsageError(f"{path}: cannot be read ({exc.strerror})") from None

    def _json(self, name: str, default):
        p = self.path / name
        if not p.exists():
            return default
        try:
            data = json.loads(self._text(p))
        except ValueError as exc:
            raise self._damaged(p, f"not readable as JSON ({exc})") from None
        if not isinstance(data, type(default)):
            raise self._damaged(p, f"a JSON {type(data).__name__}, not the {type(default).__name__} it should be")
        return data

    @cached_property
    def config(self) -> dict:
        p = self.path / "config.yaml"
        if not p.exists():
            return {}
        try:
            data = yaml.safe_load(self._text(p)) or {}
        except (ValueError, yaml.YAMLError) as exc:
            raise self._damaged(p, f"not readable as YAML ({str(exc).splitlines()[0]})") from None
        if not isinstance(data, dict):
            raise self._damaged(p, "not a mapping of the run's settings")
        return data

    @cached_property
    def status(self) -> dict:
        return read_status(self.path)

    @cached_property
    def metrics(self) -> dict:
        return self._json("metrics.json", {})

    @cached_property
    def network(self) -> dict:
        return self._json("network.json", {})

    @cached_property
    def fidelity(self) -> dict:
        return self._json("fidelity.json", {})

    @cached_property
    def node(self) -> str | None:      # the cluster machine that ran it (versions.json: experiments/cluster.py)
        return (self._json("versions.json", {}).get("node") or {}).get("host")

    @cached_property
    def calibration(self) -> dict:
        """calibration.json: the machine's calibration the runner judged the run by ({}: none recorded)."""
        return self._json("calibration.json", {})

    @cached_property
    def counters(self) -> dict[str, list | None]:
        """counters.json: each switch's counter rows at the end of the run (`port`, `class`, `counter`,
        `packets`, `bytes`); None for a switch that could not be read; {} without the file."""
        return {name: rows if isinstance(rows, list) else None
                for name, rows in self._json("counters.json", {}).items()}

    @cached_property
    def monitor_ports(self) -> set[tuple[str, int]]:
        """(switch, port) of every port towards a monitor host (network.json's roles): telemetry, not traffic."""
        monitors = set(self.network.get("roles", {}).get("monitor", []))
        return {(switch, int(port)) for switch, info in self.network.get("switches", {}).items()
                for port, peer in info.get("ports", {}).items() if peer in monitors}

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def mode(self) -> str:
        return (self.config.get("mode") or {}).get("kind", "?")

    @property
    def time_scale(self) -> float:
        """config.yaml's time_scale (1 before it existed): the run's rates were divided and its times multiplied by it."""
        ts = self.config.get("time_scale", 1)
        if type(ts) in (int, float) and 1 <= ts < np.inf:
            return float(ts)
        raise self._damaged(self.path / "config.yaml", f"time_scale {ts!r} is not a number of at least 1")

    @property
    def point(self) -> str:
        """The run's sweep point: its name without the repetition (`mode=pcn,rep=2` -> `mode=pcn`;
        `run` when nothing is swept)."""
        name = str(self.config.get("run") or self.name)
        rep = self.config.get("repetition")
        if rep is not None:
            if name == f"rep={rep}":
                return "run"
            name = name.removesuffix(f",rep={rep}")
        return name

    @cached_property
    def iteration_table(self) -> pd.DataFrame:
        """iterations.csv: one row per (job, iteration) at the bottleneck port (analysis/metrics.py);
        empty when the run has none."""
        p = self.path / "iterations.csv"
        if not p.exists() or p.stat().st_size == 0:
            return pd.DataFrame()
        return self._csv(p, ("job", "iteration"))

    def _csv(self, path: Path, needs: tuple[str, ...]) -> pd.DataFrame:
        try:
            frame = pd.read_csv(path)
        except OSError as exc:
            raise UsageError(f"{path}: cannot be read ({exc.strerror})") from None
        except ValueError as exc:   # pandas' ParserError and UnicodeDecodeError are ValueErrors
            raise self._damaged(path, f"not readable as CSV ({str(exc).splitlines()[0]})") from None
        missing = [c for c in needs if c not in frame.columns]
        if missing:
            raise self._damaged(path, f"no column {', '.join(missing)}")
        return frame

    @cached_property
    def port_rates(self) -> dict[tuple[str, int], int]:
        """(switch, port) -> its queue's configured drain rate, packets/s."""
        return {(ep["name"], q["port"]): q["rate_pps"] for ep in self._json("endpoints.json", [])
                for q in ep["queues"] if q.get("rate_pps")}

    @cached_property
    def jobs(self) -> dict[int, dict]:
        """Data-plane job id -> the job's resolved configuration."""
        return {int(j["id"]): j for j in self.config.get("jobs") or []}

    # --- the queue log ---------------------------------------------------------------------------

    @cached_property
    def clocks(self) -> dict[str, SwitchClock]:
        raw = self._raw_queue
        if raw.empty:
            return {}
        return {sw: SwitchClock.fit(sw, rows["host_ns"].to_numpy(), rows["egress_us"].to_numpy())
                for sw, rows in raw.groupby("switch")}

    @cached_property
    def _raw_queue(self) -> pd.DataFrame:
        frames = [self._csv(p, QUEUE_LOG_NEEDS) for p in sorted(self.path.glob("queue-s*.csv")) if p.stat().st_size]
        parts = [frame for frame in frames if not frame.empty]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()

    @cached_property
    def queue(self) -> pd.DataFrame:
        """Every telemetry record of every switch, with `ingress_ns`/`egress_ns` (host clock), `src` and
        `dst` (host names) and `data` (an L4 payload, neither a pure ACK nor a PCN-START), sorted by
        ingress time."""
        raw = self._raw_queue
        if raw.empty:
            return raw
        out = raw.copy()
        out["ingress_ns"] = np.zeros(len(out))
        out["egress_ns"] = np.zeros(len(out))
        for sw, clock in self.clocks.items():
            rows = out["switch"] == sw
            out.loc[rows, "ingress_ns"] = clock.to_host_ns(out.loc[rows, "ingress_us"])
            out.loc[rows, "egress_ns"] = clock.to_host_ns(out.loc[rows, "egress_us"])
        names = _host_names(self.network)
        if "src_host" in out:
            out["src"] = out["src_host"].map(names)
            out["dst"] = out["dst_host"].map(names)
            out["data"] = out["payload_bytes"] > 0
            if "announce" in out:  # a PCN-START is a datagram, but no part of a burst
                out["data"] &= out["announce"] == 0
        else:  # a queue log from before records carried hosts and payloads
            out["src"] = out["dst"] = None
            out["data"] = True
        return out.sort_values(["ingress_ns", "seq"], kind="stable").reset_index(drop=True)

    @cached_property
    def telemetry_every(self) -> int:
        return int((self.config.get("telemetry") or {}).get("every") or 1)

    # --- workload logs ---------------------------------------------------------------------------

    @cached_property
    def iterations(self) -> pd.DataFrame:
        """One row per iteration record of every process of every job: job, role (worker | ps), rank,
        host, iter, and the record's own fields (comm_start_ns, comm_end_ns, bytes_sent, loss, ...), read
        as `jsonlines.Iteration.from_line`: a line without one of its required fields is a UsageError
        naming the file and the field."""
        rows = []
        for log in sorted(self.path.glob("jobs/*/*.jsonl")):
            anchor, records = read_json_lines(log)
            who = {"job": anchor.get("job", log.parent.name), "role": anchor.get("role"),
                   "rank": anchor.get("rank"), "host": anchor.get("host")}
            rows += [{**who, **_iteration_fields(log, rec)} for rec in records if rec.get("type") == ITERATION]
        frame = pd.DataFrame(rows)
        # Every field of the record is a column (None where a process does not count it: jsonlines.Iteration);
        # no logs, no frame (an empty one with object columns would not merge with the network's rows).
        if not frame.empty:
            frame = frame.reindex(columns=[*IDENTITY, *ITERATION_FIELDS,
                                           *[c for c in frame.columns if c not in (*IDENTITY, *ITERATION_FIELDS)]])
        logged = set(frame["job"].dropna()) if not frame.empty else set()
        # A job that logs nothing (a user's program without the hook): its iterations from the network.
        from pcnlab.analysis.network_iterations import network_iterations

        found = [network_iterations(self.queue, self.network, jid, job) for jid, job in self.jobs.items()
                 if job.get("kind") == "torchrun" and job["name"] not in logged]
        found = [f for f in found if not f.empty]
        return pd.concat([frame, *found], ignore_index=True) if found else frame

    @cached_property
    def events(self) -> pd.DataFrame:
        """The controller's events (events.jsonl), every line of it from the anchor on: `type`, `host_ns`
        and each event's fields."""
        p = self.path / "events.jsonl"
        if not p.exists():
            return pd.DataFrame()
        anchor, records = read_json_lines(p)
        return pd.DataFrame(([anchor] if anchor else []) + records)

    @cached_property
    def flows(self) -> pd.DataFrame:
        """Background flows' receiver intervals: flow, start_ns, end_ns, bytes, mbps."""
        rows = []
        for log in sorted(self.path.glob("flows/*.receiver.jsonl")):
            flow = log.name[: -len(".receiver.jsonl")]
            rows += [{"flow": flow, **r} for r in read_json_lines(log)[1] if r.get("type") == "interval"]
        frame = pd.DataFrame(rows)
        return frame.drop(columns=["type"]) if not frame.empty else frame


def _iteration_fields(log: Path, line: dict) -> dict:
    """An iteration line's columns: its host_ns and its record's fields (jsonlines.Iteration). A line
    without one of the record's required fields is a UsageError naming the file and the field."""
    try:
        record = Iteration.from_line(line)
    except ValueError as e:
        at = f" iter {line['iter']}:" if "iter" in line else ""
        raise UsageError(f"{log}:{at} {e}") from None
    return {**({"host_ns": line["host_ns"]} if "host_ns" in line else {}), **record.line_fields()}


def rate_timeline(events: pd.DataFrame, configured: dict[tuple[str, int], int]) -> dict[tuple[str, int], list]:
    """Per (switch, port): [(from host_ns or None for the start, rate_pps), ...] in time order: the
    configured rate, then every scheduled change (the `schedule` rate events)."""
    out = {key: [(None, rate)] for key, rate in configured.items()}
    if events.empty or "action" not in events:
        return out
    changes = events[(events["type"] == "schedule") & (events["action"] == "rate")].sort_values("host_ns")
    for _, row in changes.iterrows():
        out.setdefault((row["switch"], int(row["port"])), [(None, None)]).append((int(row["host_ns"]),
                                                                                  int(row["rate_pps"])))
    return out


def run_folders(path: Path | str) -> list[Path]:
    """The run folders under `path`: a run folder, a sweep folder, or an experiment folder (its latest)."""
    path = Path(path)
    if not path.exists():
        raise UsageError(f"{path} does not exist; give a results folder, e.g. results/smoke/latest")
    if is_run_folder(path):
        return [path]
    if (path / "latest").exists():
        path = path / "latest"
    found = sorted(p.parent for p in path.glob(f"*/{STATUS_FILE}"))
    if not found:
        raise UsageError(f"no runs under {path}; give results/<experiment>/latest or a run folder")
    return found


def load_run(path: Path | str) -> RunData:
    path = Path(path)
    if not is_run_folder(path):
        raise UsageError(f"{path} is not a run folder (no status.json); give results/<experiment>/latest/<run>")
    return RunData(path)


def load_results(path: Path | str) -> tuple[list[RunData], pd.DataFrame]:
    """Every run under `path`, and one row per run of its status, sweep values and flattened metrics
    (dotted keys, e.g. `iterations.start_queue_pkts.mean`)."""
    runs = [RunData(p) for p in run_folders(path)]
    rows = []
    for run in runs:
        row = {"run": run.name, "status": run.status.get("status"), "mode": run.mode,
               "trusted": run.fidelity.get("trusted")}
        row.update({f"sweep.{k}": v for k, v in (run.config.get("sweep") or {}).items()})
        row.update(pd.json_normalize(run.metrics, sep=".").iloc[0].to_dict() if run.metrics else {})
        rows.append(row)
    return runs, pd.DataFrame(rows)
