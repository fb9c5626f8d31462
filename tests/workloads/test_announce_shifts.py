"""The controller's time shifts as a process holds them (workloads/announce.py Shifts): a shift holds
for the communication decided at or after its moment, once; two processes of a job handed the same
shift between their decisions of one iteration both take it for the next; a shift that names its slot
asks only what is left to wait for it."""

from __future__ import annotations

from pcnlab.workloads.announce import Shifts


def test_a_shift_holds_from_its_moment_once():
    shifts = Shifts()
    shifts.add(300.0, at_ns=1_000)
    assert shifts.take(decided_ns=999) == 0.0              # decided before the shift holds: not yet
    assert shifts.take(decided_ns=1_000) == 300.0          # the first at or after it: delayed
    assert shifts.take(decided_ns=5_000) == 0.0            # once
    shifts.add(100.0, at_ns=2_000)
    shifts.add(50.0, at_ns=3_000)
    assert shifts.take(decided_ns=2_500) == 100.0 and shifts.take() == 50.0   # None: every one pending


def test_two_workers_of_one_job_delay_the_same_iteration():
    # Worker 0 decided iteration 7 at t = 10_000, worker 1 at 10_004; the shift came in between, to
    # hold from 10_020: both delay iteration 8 (decided at 20_000 and 20_003), neither iteration 7.
    w0, w1 = Shifts(), Shifts()
    assert w0.take(decided_ns=10_000) == 0.0
    for w in (w0, w1):
        w.add(250.0, at_ns=10_020)
    assert w1.take(decided_ns=10_004) == 0.0
    assert w0.take(decided_ns=20_000) == 250.0 and w1.take(decided_ns=20_003) == 250.0


def test_a_shift_that_names_its_slot_waits_what_is_left_to_it():
    shifts = Shifts()
    shifts.add(300.0, at_ns=1_000, start_ns=900_000)
    assert shifts.take(decided_ns=2_000, planned_ns=500_000) == 400.0     # planned 400 µs before its slot
    shifts.add(300.0, at_ns=1_000, start_ns=900_000)
    assert shifts.take(decided_ns=2_000, planned_ns=950_000) == 0.0       # already past it: at once
    shifts.add(300.0, at_ns=1_000, start_ns=900_000)
    assert shifts.take(decided_ns=2_000) == 300.0                         # the plan unknown: the shift


def test_a_slot_a_round_later_waits_for_the_next_decision():
    # A process deciding every 545 ms; a slot with no shift 545 ms after the communication it plans now
    # (the controller took that one as decided already) is the next one's: taken then, with no wait.
    ms = 1_000_000
    shifts = Shifts()
    assert shifts.take(decided_ns=1_000 * ms, planned_ns=1_200 * ms) == 0.0
    shifts.add(0.0, at_ns=1_500 * ms, start_ns=1_745 * ms + 545 * ms)
    assert shifts.take(decided_ns=1_545 * ms, planned_ns=1_745 * ms) == 0.0       # kept
    assert shifts.take(decided_ns=2_090 * ms, planned_ns=2_290 * ms) == 0.0       # taken: at its slot
    assert shifts.take(decided_ns=2_635 * ms, planned_ns=2_835 * ms) == 0.0 and not shifts._pending
    # A slot within the round (its shift, and less than 0.75 of a period of margin) is this one's.
    shifts.add(300_000.0, at_ns=2_700 * ms, start_ns=3_380 * ms + 300 * ms + 200 * ms)
    assert shifts.take(decided_ns=3_180 * ms, planned_ns=3_380 * ms) == 500_000.0
    # The first decision has no period yet: a slot is taken as named.
    fresh = Shifts()
    fresh.add(0.0, at_ns=0, start_ns=2_000 * ms)
    assert fresh.take(decided_ns=1 * ms, planned_ns=200 * ms) == 1_800_000.0


def test_the_listener_takes_a_slot_only_where_it_is_a_time_after_its_moment(tmp_path):
    import json
    import socket
    import time

    from pcnlab.workloads.announce import start_listener
    from pcnlab.workloads.joblog import JsonLog

    log = JsonLog(str(tmp_path / "w.jsonl"), job="j", host="h", role="worker", rank=0)
    shifts = Shifts()
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    assert start_listener(log, "127.0.0.1", port, shifts)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for bad in ("soon", -5, 10 ** 13, True):                     # not a time, before its moment, 10,000 s on
        sender.sendto(json.dumps({"shift_us": 100, "plan": 1, "at_ns": 1_000, "start_ns": bad}).encode(), ("127.0.0.1", port))
    sender.sendto(json.dumps({"shift_us": 100, "plan": 2, "at_ns": 1_000, "start_ns": 501_000}).encode(), ("127.0.0.1", port))
    deadline = time.monotonic() + 5
    while not shifts._pending and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)                                               # the bad ones, had they been taken, too
    sender.close()
    log.close()
    assert shifts._pending == [(1_000, 100.0, 501_000)]
    assert shifts.take(decided_ns=2_000, planned_ns=301_000) == 200.0


def test_a_later_plans_slot_replaces_one_not_yet_taken():
    shifts = Shifts()
    shifts.add(300.0, at_ns=1_000, start_ns=900_000)
    shifts.add(100.0, at_ns=2_000, start_ns=700_000)
    assert shifts.take(decided_ns=3_000, planned_ns=500_000) == 200.0
