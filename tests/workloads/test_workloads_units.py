"""The workloads' pure parts: layer tables, configs, plans, and the one-line errors of bad specs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pcnlab.errors import UsageError
from pcnlab.workloads import PCN_START_DSCP, FlowSpec, JobSpec, Workloads
from pcnlab.workloads.process_config import BurstConfig, TrainConfig, parse_config, to_argv
from pcnlab.workloads.netutil import PCN_START_TOS, allowed_cc, available_cc, check_cc
from pcnlab.workloads.profiles import profile, scaled, total_params
from pcnlab.workloads.ps import shard_of_params
from pcnlab.workloads.ring import buckets


def test_profiles_match_the_published_parameter_counts():
    assert total_params(profile("resnet50")) == 25_557_032
    assert total_params(profile("vgg16")) == 138_357_544
    assert total_params(profile("bert-base")) == 109_482_240
    assert len(profile("resnet50")) == 161 and profile("resnet50")[-2] == ("fc.weight", 2_048_000)
    small = scaled("vgg16", 0.01)
    assert [n for n, _ in small] == [n for n, _ in profile("vgg16")]
    assert abs(total_params(small) - 1_383_575) < 100
    with pytest.raises(UsageError, match="unknown gradient profile 'resnet5'.*did you mean 'resnet50'"):
        profile("resnet5")


def test_configs_round_trip_through_the_command_line():
    cfg = TrainConfig(kind="ring", rank=3, world=4, model="profile:bert-base", profile_scale=0.002, lr=0.5,
                      iface="h4-eth0", dump_dir="")
    assert parse_config(TrainConfig, to_argv(cfg)) == cfg
    burst = BurstConfig(role="ps", pcn_start=True, cc="bbr", jitter_ms=2.5)
    assert parse_config(BurstConfig, to_argv(burst)) == burst


def test_shards_and_buckets_cover_every_tensor_once():
    sizes = [100, 5, 300, 7, 50, 50, 1]
    shards = shard_of_params(sizes, 3)
    assert sorted(i for s in shards for i in s) == list(range(len(sizes)))
    assert max(sum(sizes[i] for i in s) for s in shards) == 300
    plan = buckets(sizes, bucket_mb=4 * 120 / 1e6)  # 120 floats per bucket
    assert [i for b in plan for i in b] == list(reversed(range(len(sizes))))  # backward order
    assert all(sum(sizes[i] for i in b) <= 120 or len(b) == 1 for b in plan)
    assert buckets(sizes, 0) == [[i] for i in reversed(range(len(sizes)))]


def test_pcn_start_code_point():
    assert PCN_START_DSCP == 43 and PCN_START_TOS == 0xAC


def test_bad_job_specs_are_one_line_usage_errors(tmp_path):
    cases = [
        (dict(name="a", kind="allreduce", workers=("h1",)), "unknown kind 'allreduce'"),
        (dict(name="a", kind="ps", workers=("h2",)), "needs at least one PS host"),
        (dict(name="a", kind="ring", workers=("h2",)), "at least two workers"),
        (dict(name="a", kind="ps", servers=("h1",), workers=("h2",), model="resnet"), "unknown model 'resnet'"),
        (dict(name="a", kind="burst", pattern="tree", workers=("h2", "h3")), "unknown pattern 'tree'"),
        (dict(name="a b", kind="ring", workers=("h2", "h3")), "job name 'a b'"),
    ]
    for kwargs, message in cases:
        with pytest.raises(UsageError, match=message) as info:
            JobSpec(**kwargs)
        assert "\n" not in str(info.value)


def test_missing_congestion_control_is_a_one_line_error(tmp_path):
    missing = next(cc for cc in ("dctcp", "vegas", "nonesuch") if cc not in available_cc())
    for cc in (available_cc() if os.geteuid() == 0 else allowed_cc()):
        check_cc(cc)
    with pytest.raises(UsageError, match=f"TCP congestion control '{missing}' is not available") as info:
        Workloads(tmp_path).start_flows([FlowSpec("h1", "h2", cc=missing)])
    assert "\n" not in str(info.value) and not (tmp_path / "flows").exists()
    # The processes say the same when started by hand.
    proc = subprocess.run([sys.executable, "-m", "pcnlab.workloads.flows", "--cc", missing, "--log",
                           str(tmp_path / "f.jsonl")], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and f"'{missing}' is not available" in proc.stderr.strip().splitlines()[-1]


def test_host_level_settings_are_refused_on_loopback(tmp_path):
    with pytest.raises(UsageError, match="ECN is set per host network namespace"):
        Workloads(tmp_path).start_flows([FlowSpec("h1", "h2", ecn=True)])
    with pytest.raises(UsageError, match="congestion control is set per host"):
        Workloads(tmp_path).start_job(JobSpec(name="r", kind="ring", workers=("h1", "h2"), cc="cubic"))


def test_a_reply_of_none_is_the_burst_size_and_one_number_crosses_into_the_process():
    """reply_bytes has one 'same as the burst' spelling, None (the YAML's null), resolved by the spec;
    the generator's process gets a number (no -1 sentinel)."""
    same = JobSpec(name="g", kind="burst", servers=("h1",), workers=("h2",), burst_bytes=30_000)
    assert same.reply_bytes is None and same.reply_size == 30_000
    assert JobSpec(name="g", kind="burst", servers=("h1",), workers=("h2",), burst_bytes=30_000,
                   reply_bytes=0).reply_size == 0
    assert parse_config(BurstConfig, to_argv(BurstConfig(reply_bytes=same.reply_size))).reply_bytes == 30_000


def test_error_feedback_crosses_from_the_spec_into_the_process(tmp_path):
    """A job's error_feedback reaches its ranks' TrainConfig (the launcher) and their command line."""
    for on in (True, False):
        spec = JobSpec(name="j", kind="ps", servers=("h1",), workers=("h2",), model="digits-cnn",
                       compression="topk", compression_ratio=0.001, error_feedback=on)
        cfg = Workloads(tmp_path)._process_config(spec, "worker0", 1, "h2", 29500, tmp_path / "w.jsonl",
                                                  tmp_path, "")
        assert cfg.error_feedback is on
        assert parse_config(TrainConfig, to_argv(cfg)).error_feedback is on
