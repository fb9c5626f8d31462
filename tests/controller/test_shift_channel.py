"""The controller's channel to a job (controller/shift_channel.py) into a real network namespace: a
process there listening on the job's port (workloads/announce.py, as every worker does) takes the
shift and its loop applies it once, to a communication decided from the moment the shift holds (one
moment for every job of a plan); a namespace where nothing listens refuses it, which the channel
reports, so the job is named and left where it is; a probe, sent before any plan, finds which is which
and is absorbed."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from types import SimpleNamespace

from conftest import ROOT, needs_root
from test_turns import feed
from pcnlab.controller.events import EventLog
from pcnlab.controller.scheduler import PcnScheduler
from pcnlab.controller.shift_channel import SETTLE_S, ShiftChannel, Target
from pcnlab.controller.windows import PlannerConfig
from pcnlab.jsonlines import read_json_lines

pytestmark = needs_root

PORT = 5911
LISTENER = f"""
import json, sys, time
from pcnlab.workloads.announce import Shifts, start_listener
from pcnlab.workloads.joblog import JsonLog
log = JsonLog(sys.argv[1], job="j", host="hx", role="worker", rank=0)
shifts = Shifts()
assert start_listener(log, "10.9.9.9", {PORT}, shifts)
print("listening", flush=True)
deadline = time.monotonic() + 10
while time.monotonic() < deadline:
    taken = shifts.take(log, 3, time.monotonic_ns())      # a communication decided now
    if taken:
        print("taken", taken, shifts.take(), flush=True)
        break
    time.sleep(0.01)
log.close()
"""


def _in_new_netns(argv: list[str]) -> subprocess.Popen:
    """`argv` in a network namespace of its own with lo up holding 10.9.9.9 too."""
    setup = "ip link set lo up && ip addr add 10.9.9.9/32 dev lo"
    return subprocess.Popen(["unshare", "--net", "sh", "-c", f'{setup} && exec "$@"', "sh", *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def test_a_listening_process_takes_its_shift_once_and_a_silent_namespace_refuses(tmp_path):
    log = tmp_path / "worker.jsonl"
    listener = _in_new_netns([sys.executable, "-c", LISTENER, str(log)])
    silent = _in_new_netns(["sleep", "10"])
    channel = ShiftChannel()
    try:
        assert listener.stdout.readline().strip() == "listening", listener.stderr.read()
        time.sleep(0.2)   # the silent one's namespace is set up
        channel.add_job(1, [Target("hx", listener.pid, "10.9.9.9", PORT)])
        channel.add_job(2, [Target("hy", silent.pid, "10.9.9.9", PORT)])
        assert channel.probe(1) == {"hx": "sent"} and channel.probe(2) == {"hy": "refused"}   # before any plan
        at_ns = time.monotonic_ns() + int(SETTLE_S * 1e9)
        assert channel.send(1, 1234.4, plan=1, at_ns=at_ns) == {"hx": "sent"}
        assert channel.send(2, 500, plan=1) == {"hy": "refused"}
        out, err = listener.communicate(timeout=15)
        assert out.split() == ["taken", "1234.0", "0.0"], err      # µs, whole; once: none left after
        assert '"announce"' not in log.read_text()                     # the probe was absorbed, not logged
        lines = [line for line in log.read_text().splitlines() if '"shift"' in line]
        assert '"direction":"received","shift_us":1234,"plan":1' in lines[0]
        received = json.loads(lines[0])
        assert received["at_ns"] == at_ns                               # the plan's moment, as sent
        assert json.loads(lines[1])["host_ns"] >= received["at_ns"]     # and was taken no sooner
        assert '"direction":"applied","iter":3,"shift_us":1234' in lines[1]
    finally:
        channel.close()
        for proc in (listener, silent):
            proc.kill()
            proc.wait()


def test_no_such_namespace_is_an_error_for_that_host_not_a_crash():
    channel = ShiftChannel()
    channel.add_job(1, [Target("gone", 2 ** 22 + 7, "10.9.9.9", PORT)])
    assert channel.send(1, 100, plan=1) == {"gone": f"[Errno 2] No such file or directory: '/proc/{2 ** 22 + 7}/ns/net'"}
    assert channel.send(3, 100, plan=1) == {}          # a job never added: no host to send to


def test_a_job_none_of_whose_hosts_listens_is_fixed_by_its_probe_before_any_plan(tmp_path):
    # The scheduler asks each job once, as its iterations are first told apart; job 2's namespace refuses,
    # so the port's first plan is made around it (before, it was found at that plan, after the plan had
    # sent job 1 a slot); job 3, not registered yet, is asked again at its next start.
    listener = _in_new_netns([sys.executable, "-c", LISTENER, str(tmp_path / "worker.jsonl")])
    silent = _in_new_netns(["sleep", "10"])
    channel = ShiftChannel()
    controller = SimpleNamespace(endpoints={}, on_burst=[], on_ready=[], on_down=[], on_backup=[], on_stop=[],
                                 on_start=[])
    events = EventLog(tmp_path / "events.jsonl")
    try:
        assert listener.stdout.readline().strip() == "listening", listener.stderr.read()
        time.sleep(0.2)
        channel.add_job(1, [Target("hx", listener.pid, "10.9.9.9", PORT)])
        channel.add_job(2, [Target("hy", silent.pid, "10.9.9.9", PORT)])
        scheduler = PcnScheduler(controller, events, PlannerConfig(), channel=channel)

        async def probe_all():
            for job in (1, 2, 3):
                scheduler._probed.add(job)
                await scheduler._probe(job)
        asyncio.run(probe_all())
        events.close()
        logged = [e for e in read_json_lines(tmp_path / "events.jsonl")[1] if e["type"].startswith("interleave")]
        assert [(e["type"], e["job"]) for e in logged] == [("interleave_probe", 1), ("interleave_probe", 2),
                                                           ("interleave_skip", 2)], logged
        assert logged[0]["hosts"] == {"hx": "sent"} and logged[1]["hosts"] == {"hy": "refused"}
        assert 3 not in scheduler._probed and scheduler._answered == {1, 2}   # 3 is not planned before its answer
        plans = feed(scheduler.turns, {1: (1000, 400, 100), 2: (1000, 400, 0)}, 6)   # colliding
        assert plans[0].reason == "first plan" and plans[0].fixed == (2,), plans[0]
        assert [o.job for o in plans[0].orders] == [1] and plans[0].margin_us == 0
    finally:
        channel.close()
        for proc in (listener, silent):
            proc.kill()
            proc.wait()
