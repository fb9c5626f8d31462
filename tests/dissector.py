"""The shipped Wireshark dissector (docs/wireshark/pcn_telemetry.lua) run by tshark, next to
controller/telemetry.py's struct decoding of the same frames: both as tuples of the record's fields."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pcnlab.controller.telemetry import decode_frame

DISSECTOR = Path(__file__).resolve().parents[1] / "docs" / "wireshark" / "pcn_telemetry.lua"
FIELDS = ("pcn.seq", "pcn.switch_id", "pcn.port", "pcn.class", "pcn.job", "pcn.flags", "pcn.ingress_us",
          "pcn.egress_us", "pcn.enq_qdepth", "pcn.deq_qdepth", "pcn.queue_delay_us", "pcn.packet_length",
          "pcn.payload_bytes", "pcn.src_host", "pcn.dst_host")
needs_tshark = pytest.mark.skipif(shutil.which("tshark") is None,
                                  reason="tshark not installed (apt-get install tshark)")


def tshark_fields(pcap: Path) -> list[tuple[int, ...]]:
    """Every telemetry frame of a pcap as the Lua dissector reads it."""
    cmd = ["tshark", "-X", f"lua_script:{DISSECTOR}", "-r", str(pcap), "-Y", "pcn", "-T", "fields",
           "-E", "separator=,"]
    for name in FIELDS:
        cmd += ["-e", name]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Lua" not in proc.stderr, proc.stderr
    return [tuple(int(v, 0) for v in line.split(",")) for line in proc.stdout.splitlines()]


def struct_fields(frame: bytes) -> tuple[int, ...]:
    """The same fields as controller/telemetry.py decodes them."""
    r = decode_frame(frame)
    return (r.seq, r.switch_id, r.port, r.traffic_class, r.job, r.flags, r.ingress_us, r.egress_us, r.enq_qdepth,
            r.deq_qdepth, r.queue_delay_us, r.packet_length, r.payload_bytes, r.src_host, r.dst_host)
