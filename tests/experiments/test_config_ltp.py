"""Experiment-file keys of LTP (issue 14): `transport` (tcp, ltp, tcp-<cc>), the LTP settings, what they
become for the launcher, and their one-line errors; a congestion control the kernel lacks is refused
when the file is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from pcnlab.errors import UsageError
from pcnlab.experiments.config import load_experiment
from pcnlab.workloads import JobSpec
from pcnlab.workloads.netutil import kernel_has_cc

EXPERIMENTS = Path(__file__).resolve().parents[2] / "experiments"

FILE = """\
name: t
topology: {{kind: star, hosts: 4}}
jobs:
  - name: train
    kind: {kind}
    {placement}
{extra}
"""


def _load(tmp_path, extra="", kind="ps", placement="ps: h1\n    workers: [h2, h3]", overrides=()):
    path = tmp_path / "t.yaml"
    path.write_text(FILE.format(kind=kind, placement=placement, extra=extra))
    return load_experiment(path, overrides)


def _error(tmp_path, **kw) -> str:
    with pytest.raises(UsageError) as exc:
        _load(tmp_path, **kw)
    message = str(exc.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_transport_defaults_to_tcp_and_ltp_reaches_the_launcher(tmp_path):
    job = _load(tmp_path).runs()[0].jobs[0]
    assert job.transport == "tcp" and "transport" not in job.job_spec_kwargs()
    exp = _load(tmp_path, extra="    transport: ltp\n    ltp_deadline_ms: 250\n    ltp_theta_min: 0.9")
    job = exp.runs()[0].jobs[0]
    kwargs = job.job_spec_kwargs(seed=3)
    assert (kwargs["transport"], kwargs["ltp_deadline_ms"], kwargs["ltp_theta_min"]) == ("ltp", 250, 0.9)
    spec = JobSpec(**kwargs)
    assert spec.transport == "ltp" and spec.ltp_deadline_ms == 250
    assert exp.runs()[0].to_dict()["jobs"][0]["transport"] == "ltp"


def test_an_automatic_deadline_flows_unchanged_from_the_file_to_the_processes(tmp_path):
    from pcnlab.workloads.ltp.earlyclose import hard_deadline_s
    from pcnlab.workloads.process_config import BurstConfig, TrainConfig, parse_config, to_argv

    job = _load(tmp_path, extra="    transport: ltp\n    ltp_deadline_ms: auto").runs()[0].jobs[0]
    spec = JobSpec(**job.job_spec_kwargs())
    assert job.ltp_deadline_ms == spec.ltp_deadline_ms == "auto"
    for cls in (TrainConfig, BurstConfig):
        for value, seconds in (("auto", None), (250.0, 0.25)):
            back = parse_config(cls, to_argv(cls(ltp_deadline_ms=value))).ltp_deadline_ms
            assert back == value and hard_deadline_s(back) == seconds
    # swept against a number, and a word that is not auto refused in one line
    runs = _load(tmp_path, extra="    transport: ltp\nsweep:\n  jobs.0.ltp_deadline_ms: [auto, 300]").runs()
    assert [r.jobs[0].ltp_deadline_ms for r in runs] == ["auto", 300]
    assert ("ltp_deadline_ms: expected auto or a number of milliseconds, got 'soon'" in
            _error(tmp_path, extra="    transport: ltp\n    ltp_deadline_ms: soon"))
    with pytest.raises(UsageError, match="ltp_deadline_ms must be positive or auto"):
        JobSpec(**{**job.job_spec_kwargs(), "ltp_deadline_ms": "soon"})
    # a deadline that never comes is refused, in words (the schema's type name was printed before)
    assert ("ltp_deadline_ms: expected auto or a number of milliseconds, got inf" in
            _error(tmp_path, extra="    transport: ltp\n    ltp_deadline_ms: .inf"))


def test_one_swept_key_runs_ltp_against_each_tcp_variant(tmp_path):
    exp = _load(tmp_path, extra="sweep:\n  jobs.0.transport: [ltp, tcp-cubic, tcp-reno, tcp-bbr]")
    runs = exp.runs()
    assert [r.name for r in runs] == ["transport=ltp", "transport=tcp-cubic", "transport=tcp-reno",
                                      "transport=tcp-bbr"]
    assert [(r.jobs[0].transport, r.jobs[0].cc) for r in runs] == [
        ("ltp", "cubic"), ("tcp", "cubic"), ("tcp", "reno"), ("tcp", "bbr")]
    # A sweep's tcp-<cc> wins over the file's cc (which serves the ltp run's parameter return).
    exp = _load(tmp_path, extra="    cc: reno\nsweep:\n  jobs.0.transport: [ltp, tcp-bbr]")
    assert [(r.jobs[0].transport, r.jobs[0].cc) for r in exp.runs()] == [("ltp", "reno"), ("tcp", "bbr")]


def test_generator_over_ltp(tmp_path):
    job = _load(tmp_path, kind="generator", placement="ps: h1\n    workers: [h2, h3]",
                extra="    transport: ltp").runs()[0].jobs[0]
    spec = JobSpec(**job.job_spec_kwargs())
    assert spec.kind == "burst" and spec.transport == "ltp"


def test_bad_transport_values_are_one_line_errors(tmp_path):
    assert "unknown transport 'udp'; choose one of tcp, ltp" in _error(tmp_path, extra="    transport: udp")
    assert ("jobs.0.cc: cc reno disagrees with transport tcp-bbr" in
            _error(tmp_path, extra="    transport: tcp-bbr\n    cc: reno"))
    assert "a ring pattern has no PS" in _error(tmp_path, kind="generator", placement="pattern: ring\n    "
                                                "workers: [h2, h3]", extra="    transport: ltp")
    assert ("jobs.0.transport: applies to ps and generator jobs, not to a ring job" in
            _error(tmp_path, kind="ring", placement="workers: [h2, h3]", extra="    transport: ltp"))
    assert "use compression: none with ltp" in _error(tmp_path, extra="    transport: ltp\n    compression: int8")
    assert "ltp_deadline_ms: must be above 0 ms" in _error(tmp_path, extra="    ltp_deadline_ms: 0")
    assert "ltp_theta_min: must be at most 1" in _error(tmp_path, extra="    ltp_theta_min: 1.2")


@pytest.mark.skipif(kernel_has_cc("dctcp"), reason="this kernel has dctcp: nothing to refuse")
def test_a_congestion_control_the_kernel_lacks_is_refused_when_the_file_is_read(tmp_path):
    for extra in ("    transport: tcp-dctcp", "    cc: dctcp"):
        message = _error(tmp_path, extra=extra)
        assert "congestion control dctcp is not in this machine's kernel (it has" in message
        assert "or transport: ltp" in message
    swept = _error(tmp_path, extra="sweep:\n  jobs.0.transport: [ltp, tcp-dctcp]")
    assert "dctcp is not in this machine's kernel" in swept
    flow = _error(tmp_path, extra="background:\n  - {src: h4, dst: h1, cc: dctcp}")
    assert "background.0.cc: congestion control dctcp is not in this machine's kernel" in flow


def test_shipped_ltp_experiments_are_valid():
    for name in ("ltp-incast.yaml", "ltp-incast-unconstrained.yaml", "ltp-fairness.yaml"):
        exp = load_experiment(EXPERIMENTS / name)
        assert exp.runs(), name
    transports = {(r.jobs[0].transport, r.jobs[0].cc) for r in load_experiment(EXPERIMENTS / "ltp-incast.yaml").runs()}
    assert transports == {("ltp", "cubic"), ("tcp", "cubic"), ("tcp", "reno"), ("tcp", "bbr")}
