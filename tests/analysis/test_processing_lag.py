"""The processing lag check on hand-made queue logs and CPU figures whose answers are known by
construction: the lag of packets that met an empty queue, its limit from the calibration, and the
finding that names the machine when the run measured it as the cause."""

from __future__ import annotations

import pandas as pd
import pytest

from pcnlab.analysis.fidelity_limits import FidelityConfig
from pcnlab.analysis.processing_lag import UNSATURATED, lag_checks, processing_lag_us, the_machines_doing
from pcnlab.controller.telemetry import COLUMNS

T0_NS = 10**12


def _packets(count: int, lag_us: int, enq: int = 0, start_us: int = 0, switch: str = "s1") -> list[dict]:
    """`count` packets 1 ms apart, each `lag_us` in the switch outside the queue."""
    rows = []
    for i in range(count):
        t_us = start_us + i * 1000
        rows.append({"host_ns": T0_NS + t_us * 1000, "switch": switch, "seq": i, "port": 2, "class": "background",
                     "job": 0, "ingress_us": t_us - 100 - lag_us, "egress_us": t_us, "enq_qdepth": enq,
                     "deq_qdepth": 0, "queue_delay_us": 100, "packet_length": 1514, "payload_bytes": 1448,
                     "src_host": 1, "dst_host": 2, "marked": 0, "dropped": 0, "burst_start": 0, "in_window": 0,
                     "ect": 1})
    return rows


def _log(fast: int, slow: int, slow_us: int = 900, switch: str = "s1") -> pd.DataFrame:
    """`fast` packets of 30 µs and `slow` of `slow_us` through `switch`."""
    return pd.DataFrame(_packets(fast, 30, switch=switch) + _packets(slow, slow_us, start_us=10**7, switch=switch),
                        columns=list(COLUMNS))


def _cpu(top: float, wake: float | None) -> dict:
    """cpu_figures' entry of one switch: its busiest thread's share and its wait per wake (p95)."""
    return {"p95": 0.3, "top_thread": {"p95": top, "n": 20},
            "wake_us": None if wake is None else {"p50": wake / 3, "p95": wake, "n": 20}}


CALIBRATION = {"path": "/calibration.json", "idle_lag_us": {"p50": 40.0, "p95": 50.0}}


def _note(switch: str) -> str:
    return f": note on {switch}"


def test_processing_lag_is_time_outside_the_queue_of_packets_that_met_an_empty_queue():
    empty = _packets(100, lag_us=30)
    queued = _packets(100, lag_us=5000, enq=7, start_us=200_000)
    lag = processing_lag_us(pd.DataFrame(empty + queued, columns=list(COLUMNS)))
    assert lag.size == 100 and set(lag) == {30.0}


def test_a_lag_within_the_limit_is_no_finding():
    reasons: list[str] = []
    lags, source = lag_checks(_log(100, 0), {"bmv2": {"s1": _cpu(0.1, 500)}}, FidelityConfig(), CALIBRATION,
                              reasons, _note)
    assert lags["s1"]["ok"] and lags["s1"]["limit_us"] == 250.0 and "machine" not in lags["s1"] and reasons == []
    assert source == {"value": 50.0, "source": "/calibration.json"}


def test_a_slow_switch_that_was_idle_but_waited_for_a_cpu_names_the_machine():
    reasons: list[str] = []
    lags, _ = lag_checks(_log(90, 10), {"bmv2": {"s1": _cpu(0.1, 120)}}, FidelityConfig(), CALIBRATION,
                         reasons, _note)
    assert not lags["s1"]["ok"] and lags["s1"]["machine"] is True
    assert reasons == ["s1 took 900 µs to process a packet (p95, packets that met an empty queue), 18 x its idle "
                       "50 µs (at most 5 x): note on s1; the machine's doing: its busiest thread ran 10 % of the time "
                       "(p95), too little to queue its own packets, while its threads waited 120 µs for a CPU per "
                       "wake (p95 over 20 intervals), more than an idle packet's whole lag (40 µs)"]


@pytest.mark.parametrize("cpu", [
    _cpu(0.95, 120),               # its busiest thread near a whole core: its own packets queue it
    _cpu(UNSATURATED + 0.01, 120),
    _cpu(0.1, 40),                 # it waited per wake no longer than an idle packet's lag
    _cpu(0.1, None),               # no wait per wake (cpu.csv from before wake_us)
    None,                          # no CPU figures for this switch
])
def test_a_slow_switch_is_its_own_finding_unless_both_measurements_say_machine(cpu):
    reasons: list[str] = []
    lags, _ = lag_checks(_log(90, 10), {"bmv2": {"s1": cpu} if cpu else {}}, FidelityConfig(), CALIBRATION,
                         reasons, _note)
    assert lags["s1"]["machine"] is False and reasons[0].endswith("(at most 5 x): note on s1")


def test_without_the_calibrations_p50_the_machine_is_not_named():
    assert the_machines_doing(_cpu(0.1, 120), None) == ""
    assert the_machines_doing(_cpu(0.1, 120), 40.0).startswith("; the machine's doing")


def test_without_a_calibration_the_default_idle_lag_judges():
    lags, source = lag_checks(_log(100, 0), None, FidelityConfig(), None, [], _note)
    assert lags["s1"]["ok"] and source == {"value": 100.0, "source": "default (not calibrated)"}
