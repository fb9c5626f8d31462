"""First served (p4src/ingress.p4's first_served, egress.p4's k_behind) on real BMv2 with real packets:
two DDL jobs send to h3 through one slow port; while the burst of the job that started first is under
way, the other job's packets are marked at k_behind instead of K."""

from __future__ import annotations

import time

import pytest

from conftest import needs_bmv2
from pcnlab.controller.dataplane import PortMode

pytestmark = [needs_bmv2, pytest.mark.slow]

K, K_BEHIND = 30, 0
G_US = 4_000_000   # a job's burst is under way until 4 s after its last packet: the blasts' start-up fits


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    from dataplane_rig import DataPlaneRig

    rig = DataPlaneRig(tmp_path_factory.mktemp("first_served"), burst_gap_us=G_US, jobs={"h2": 1, "h1": 2})
    yield rig
    rig.close()


def _two_bursts(rig, first: str, second: str) -> tuple[list, list]:
    """`first` sends 40 packets (its last ten meet K or more), then, once the queue has drained and well
    within G, `second` 60 (a queue from 0 up): each job's records at the port, in the order sent."""
    with rig.queue_log() as (records, summary):
        rig.blast(first, 40)
        rig.drain(40)
        rig.blast(second, 60)
        rig.drain(60)
    assert summary["lost"] == 0
    mine = [r for r in records if r["port"] == rig.port and r["class"] == "ddl"]
    by_host = {h: sorted((r for r in mine if r["src_host"] == int(rig.net.host(h).IP().split(".")[3])),
                          key=lambda r: r["ingress_us"])
               for h in (first, second)}
    a, b = by_host[first], by_host[second]
    assert len(a) == 40 and len(b) == 60
    assert b[0]["ingress_us"] - a[-1]["ingress_us"] < G_US   # the second came while the first was under way
    return a, b


def _quiet(rig) -> None:
    """Long enough that neither job's burst is under way any more."""
    time.sleep(G_US / 1e6 + 0.5)


def test_the_job_that_started_second_is_marked_at_k_behind_while_the_first_sends(rig):
    rig.set_mode(PortMode("ecn", k=K, k_behind=K_BEHIND))
    _quiet(rig)
    first, second = _two_bursts(rig, "h2", "h1")
    assert all(r["behind"] and r["marked"] for r in second)            # every one, at any depth
    assert any(r["enq_qdepth"] < K for r in second)
    assert not any(r["behind"] for r in first)
    assert all(r["marked"] == (r["enq_qdepth"] >= K) for r in first) and any(r["marked"] for r in first)  # keeps K


def test_first_is_whoever_started_first_not_a_job_number(rig):
    rig.set_mode(PortMode("ecn", k=K, k_behind=K_BEHIND))
    _quiet(rig)
    first, second = _two_bursts(rig, "h1", "h2")                       # job 2 first this time
    assert all(r["behind"] and r["marked"] for r in second)
    assert not any(r["behind"] for r in first)


def test_without_k_behind_both_jobs_are_marked_at_k(rig):
    rig.set_mode(PortMode("ecn", k=K))
    _quiet(rig)
    first, second = _two_bursts(rig, "h2", "h1")
    for r in first + second:
        assert not r["behind"] and r["marked"] == (r["enq_qdepth"] >= K)
    assert any(r["enq_qdepth"] < K for r in second)


def test_pcn_serves_first_too_and_keeps_k_pre_for_background_only(rig):
    rig.set_mode(PortMode("pcn", k=K, k_pre=8, k_behind=K_BEHIND))
    _quiet(rig)
    first, second = _two_bursts(rig, "h1", "h2")
    assert all(r["behind"] and r["marked"] for r in second) and any(r["enq_qdepth"] < K for r in second)
    assert all(r["marked"] == (r["enq_qdepth"] >= K) for r in first) and not any(r["in_window"] for r in first)
