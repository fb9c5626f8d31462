"""Metrics from a queue log, on logs whose answers are known by construction."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pcnlab.analysis.iterations import ideal_bct_us
from pcnlab.analysis.traffic_stats import (bursts_from_queue_log, burstiness, marks_and_drops, max_backlog, mean_ci95,
                                        peak_to_mean)


def _log(rows):
    cols = ["port", "class", "job", "ingress_us", "egress_us", "enq_qdepth", "packet_length", "marked",
            "dropped", "queue_delay_us"]
    return pd.DataFrame(rows, columns=cols)


def _burst(port, job, t0, n, q0, spacing=10, drain=100):
    return [(port, "ddl", job, t0 + i * spacing, t0 + (q0 + i + 1) * drain, q0 + i, 1000, 0, 0, (q0 + i) * drain)
            for i in range(n)]


def test_bursts_are_split_at_silences_and_measured():
    rows = _burst(2, 1, 0, 10, q0=35) + _burst(2, 1, 100_000, 10, q0=5) + [
        (2, "background", 0, 50, 60, 3, 1500, 1, 0, 10)]
    bursts = bursts_from_queue_log(_log(rows), gap_us=2000)
    assert [(b.start_queue, b.max_queue, b.packets, b.bytes) for b in bursts] == [(35, 44, 10, 10_000), (5, 14, 10, 10_000)]
    assert bursts[0].bct_us == (35 + 10) * 100 and bursts[1].start_us == 100_000


def test_jobs_on_one_port_are_separate_bursts():
    rows = _burst(2, 1, 0, 5, q0=0) + _burst(2, 2, 20, 5, q0=0)
    assert sorted(b.job for b in bursts_from_queue_log(_log(rows), gap_us=2000)) == [1, 2]


def test_ideal_bct_counts_full_frames_at_the_port_rate():
    assert ideal_bct_us(15140, rate_pps=1000) == pytest.approx(10_000)


def test_marks():
    rows = [(1, "background", 0, i * 1000, i * 1000 + 10, 0, 1250, i % 2, 0, 5) for i in range(11)]
    log = _log(rows)
    assert marks_and_drops(log)["background"] == {"packets": 11, "marked": 5, "dropped": 0}
    ddl = _log([(1, "ddl", 1, i * 1000, i * 1000 + 10, 0, 1250, 1, 0, 5) for i in range(4)]).assign(behind=[1, 1, 0, 0])
    assert marks_and_drops(ddl)["ddl"] == {"packets": 4, "marked": 4, "dropped": 0, "behind": 2}
    assert "behind" not in marks_and_drops(_log(rows[:2] + [(1, "ddl", 1, 0, 10, 0, 1250, 0, 0, 5)]))["ddl"]


def test_peak_to_mean_and_backlog():
    # Smooth: one 1000-byte packet every ms. Bursty: 10 packets back to back every 10 ms.
    smooth_t = np.arange(0, 100_000, 1000)
    bursty_t = np.concatenate([np.arange(10) + k * 10_000 for k in range(10)])
    sizes = np.full(100, 1000)
    assert peak_to_mean(smooth_t, sizes, 1) == pytest.approx(1.0)
    assert peak_to_mean(bursty_t, sizes, 1) == pytest.approx(10 / (100 / 91))  # 91 one-ms bins span the trace
    assert peak_to_mean(bursty_t, sizes, 10) == pytest.approx(1.0)
    # At 8 Mbit/s (1000 bytes a ms) the smooth flow never queues more than a packet; the bursts do.
    assert max_backlog(smooth_t, sizes, 8) == pytest.approx(1000)
    assert max_backlog(bursty_t, sizes, 8) > 9000
    assert set(burstiness(_log(_burst(1, 1, 0, 50, 0)))["peak_to_mean"]) == {"1ms", "5ms", "10ms", "50ms", "100ms"}


def test_mean_ci95():
    mean, half = mean_ci95([1.0, 2.0, 3.0])
    assert mean == 2.0 and half == pytest.approx(4.302653 * 1.0 / np.sqrt(3))  # t(0.975; 2) = 4.302653
    assert mean_ci95([5.0])[0] == 5.0



def test_iteration_metrics_give_the_link_share_used_during_each_iteration():
    from pcnlab.analysis.metrics import iteration_metrics
    table = pd.DataFrame({"start_queue": [5, 7], "max_queue": [30, 40], "bct_ms": [100.0, 200.0],
                          "ideal_ms": [50.0, 50.0], "ddl_mbps": [8.0, 4.0], "background_mbps": [10.0, 14.0]})
    out = iteration_metrics(table, rate_mbps=20.0)
    assert out["bct_over_ideal"]["mean"] == pytest.approx(3.0)
    assert out["ddl_utilisation"]["mean"] == pytest.approx(0.3)     # 8 and 4 of 20 Mbit/s
    assert out["link_utilisation"]["mean"] == pytest.approx(0.9)    # 18 of 20 both times
    assert "link_utilisation" not in iteration_metrics(table)       # no rate known: not guessed


def test_counters_are_read_once_and_what_each_reader_takes_from_them(tmp_path):
    """counters.json through RunData.counters: the random loss per port and class, the drops at a full
    queue (handed to the queue - sent - dropped by the program), and the DDL bytes switches sent on
    their traffic ports; a switch that could not be read leaves the byte total unknown."""
    import json

    from pcnlab.analysis.compression_report import switch_ddl_bytes
    from pcnlab.analysis.metrics import full_queue_drops, random_loss
    from pcnlab.analysis.results import RunData

    def row(port, cls, counter, packets, nbytes=0):
        return {"port": port, "class": cls, "counter": counter, "packets": packets, "bytes": nbytes}

    s1 = [row(1, "ddl", "to_queue", 100), row(1, "ddl", "tx", 90, 90_000), row(1, "ddl", "dropped", 4),
          row(1, "ddl", "lost", 7), row(1, "background", "to_queue", 10), row(1, "background", "tx", 10, 15_000),
          row(3, "ddl", "tx", 5, 700)]
    (tmp_path / "counters.json").write_text(json.dumps({"s1": s1}))
    (tmp_path / "network.json").write_text(json.dumps({"roles": {"hosts": ["h1"], "monitor": ["m1"]},
                                                       "switches": {"s1": {"ports": {"1": "h1", "3": "m1"}}}}))
    run = RunData(tmp_path)
    assert random_loss(run) == [{"switch": "s1", "port": 1, "class": "ddl", "packets": 7}]
    assert full_queue_drops(run, ("s1", 1)) == {"ddl": 6, "background": 0}
    assert full_queue_drops(run, None) == {} and full_queue_drops(run, ("s9", 1)) == {}
    assert run.monitor_ports == {("s1", 3)} and RunData(tmp_path / "nothing").monitor_ports == set()
    assert switch_ddl_bytes(run) == 90_000                      # the monitor port m1 left out
    (tmp_path / "counters.json").write_text(json.dumps({"s1": s1, "s2": {"error": "thrift timed out"}}))
    run = RunData(tmp_path)
    assert run.counters["s2"] is None and switch_ddl_bytes(run) is None
    assert random_loss(run) == [{"switch": "s1", "port": 1, "class": "ddl", "packets": 7}]
    assert RunData(tmp_path / "nothing").counters == {}
