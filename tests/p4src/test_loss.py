"""p4src/loss.p4 on real BMv2: the share of DDL data packets towards a port that the controller sets is
lost at random before the queue and counted; DDL packets below burst_min_payload (pure ACKs) and
background traffic pass. Judged from the switch's own counters (packets and bytes): tcpdump on a
host misses packets under a full suite's load (test_dataplane.py)."""

from __future__ import annotations

import pytest

from conftest import needs_bmv2
from pcnlab.controller.dataplane import PortMode

pytestmark = [needs_bmv2, pytest.mark.slow]


@pytest.fixture(scope="module")
def rig(tmp_path_factory):
    from dataplane_rig import DataPlaneRig

    rig = DataPlaneRig(tmp_path_factory.mktemp("loss"))
    rig.set_mode(PortMode("droptail"))
    yield rig
    rig.close()


def _delta(before: dict, after: dict, rig, cls: str, counter: str) -> tuple[int, int]:
    """(packets, bytes) a counter of the bottleneck port gained."""
    key = (rig.port, cls, counter)
    old = before.get(key, (0, 0))
    new = after.get(key, (0, 0))
    return new[0] - old[0], new[1] - old[1]


def _sent_at(rig, fraction: float, *blasts: tuple) -> tuple[dict, dict]:
    """The counters before and after `blasts` ((src, count, blast's keywords)) sent at loss `fraction`
    and drained; the loss is 0 again afterwards."""
    rig.set_loss(fraction)
    try:
        before = rig.counters()
        for src, count, kwargs in blasts:
            rig.blast(src, count, **kwargs)
        rig.drain(sum(count for _, count, _ in blasts))
        return before, rig.counters()
    finally:
        rig.set_loss(0.0)


def test_a_loss_rate_loses_that_share_of_ddl_data_packets_and_counts_them(rig):
    before, after = _sent_at(rig, 0.5,
                             ("h2", 200, {}),             # DDL data: 972 bytes of payload
                             ("h2", 40, {"size": 60}),    # DDL, 32 bytes of payload: below burst_min_payload (64)
                             ("h1", 40, {}))              # background
    lost, lost_bytes = _delta(before, after, rig, "ddl", "lost")
    queued, queued_bytes = _delta(before, after, rig, "ddl", "to_queue")
    bg, bg_bytes = _delta(before, after, rig, "background", "tx")
    big = bg_bytes // bg                      # the switch's byte count of one 1000-byte IP packet
    assert bg == 40 and _delta(before, after, rig, "background", "lost") == (0, 0)
    # Binomial(200, 0.5): 100 +- 7 (one sigma); 5 sigma either side.
    assert 65 <= lost <= 135, lost
    assert lost_bytes == lost * big           # only the large ones were lost ...
    assert queued == 200 - lost + 40          # ... every small one was queued, and so was every other packet
    small = (queued_bytes - (200 - lost) * big) // 40
    assert small == big - 940, (small, big)
    # A lost packet never reached the queue: what was handed to it left it (nothing dropped there).
    assert _delta(before, after, rig, "ddl", "tx") == (queued, queued_bytes)


def _entries(rig) -> list:
    import finsy as fy

    async def read():
        return [e async for e in rig.controller.switches["s1"].read(fy.P4TableEntry("gradient_loss"))]

    return rig.thread.call(read(), 10)


def test_announcements_are_never_lost(rig):
    """A pcn-host announcement (the PCN-START code point) is a control message, whatever its size."""
    from dataplane_rig import PCN_START_DSCP

    before, after = _sent_at(rig, 1.0, ("h2", 20, {"dscp": PCN_START_DSCP}),   # 972 bytes of payload each
                             ("h2", 20, {}))
    assert _delta(before, after, rig, "ddl", "lost")[0] == 20
    assert _delta(before, after, rig, "ddl", "tx")[0] == 20


def test_a_loss_rate_set_back_to_zero_loses_nothing_and_leaves_no_entry(rig):
    rig.set_loss(1.0)
    assert [(e.match["port"], e.action.args["rate_per_million"]) for e in _entries(rig)] == [(rig.port, 1_000_000)]
    rig.set_loss(0.0)
    assert _entries(rig) == [] and rig.controller.losses["s1"] == {}
    rig.set_loss(0.0)                      # nothing to remove: nothing written
    before = rig.counters()
    rig.blast("h2", 100)
    rig.drain(100)
    after = rig.counters()
    assert _delta(before, after, rig, "ddl", "tx")[0] == 100
    assert _delta(before, after, rig, "ddl", "lost") == (0, 0)


def test_every_packet_is_lost_at_rate_1(rig):
    before, after = _sent_at(rig, 1.0, ("h2", 50, {}))
    assert _delta(before, after, rig, "ddl", "lost")[0] == 50
    assert _delta(before, after, rig, "ddl", "to_queue") == (0, 0)


def test_a_loss_rate_outside_0_to_1_is_refused_before_the_switch(rig):
    from pcnlab.errors import UsageError

    rig.set_loss(0.1)
    try:
        with pytest.raises(UsageError, match="between 0 and 1"):
            rig.set_loss(1.5)
        assert rig.controller.losses["s1"] == {rig.port: 0.1}
        assert [e.action.args["rate_per_million"] for e in _entries(rig)] == [100_000]
    finally:
        rig.set_loss(0.0)


def test_a_loss_rate_survives_a_switch_restart(rig):
    """Kept by the controller like the port's mode: a switch that restarts gets it back. Last in this
    module: the switch restarts."""
    rig.set_loss(0.25)
    switch = rig.net.bmv2_switches[0]
    old = switch.process.pid
    switch.restart()
    assert switch.process.pid != old
    rig.thread.call(rig.controller.wait_configured(times=2, timeout=30), 40)
    found = _entries(rig)
    assert [(e.match["port"], e.action.args["rate_per_million"]) for e in found] == [(rig.port, 250_000)]
