"""Link rates in Mbit/s and BMv2 queue rates in packets/s, one in terms of the other: BMv2 drains its
queues in packets per second, counted as full-size frames. The topology (queue settings per link), the
YAML schema and the reading side (metrics, fidelity) all convert through here."""

from __future__ import annotations

FRAME_BYTES = 1514  # a full-size IPv4 packet on the wire (MTU 1500 + Ethernet header)


def rate_pps(mbps: float, frame_bytes: int = FRAME_BYTES) -> int:
    """BMv2 drains its queues in packets per second: the link rate in full-size frames."""
    return max(1, round(mbps * 1e6 / (8 * frame_bytes)))


def rate_mbps(pps: float, frame_bytes: int = FRAME_BYTES) -> float:
    """The link rate a BMv2 queue rate stands for (the inverse of rate_pps)."""
    return pps * 8 * frame_bytes / 1e6
