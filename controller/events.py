"""The controller's event log (events.jsonl): one line per event, in the schema of every run log
(pcnlab/jsonlines.py: "type", "host_ns" on the host's monotonic clock, the anchor first).

Event types: report, prediction, arm, disarm, skip, would_arm, would_disarm, window_error, actual,
clock, clock_error, switch_clock_reset, switch_ready, switch_down, switch_backup (another client became
primary), scheduler_stopped, and with `mode.interleave` interleave_plan, shift, interleave_probe,
interleave_skip, interleave_ended (controller/scheduler.py); mode, background_started, job_started (the
runner); switch_restarted, collector_ended, flow_ended (experiments/watch.py).
"""

from __future__ import annotations

from pcnlab.jsonlines import JsonLines


class EventLog(JsonLines):
    """`write(type, **fields)` from any thread; the line's host_ns is when it was written."""
