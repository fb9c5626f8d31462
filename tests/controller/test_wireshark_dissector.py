"""docs/wireshark/pcn_telemetry.lua, run by a real tshark, reads every field of the telemetry record
exactly as controller/telemetry.py's struct decoding does: on frames built with scapy's PcnTelemetry
layer over each field's whole range (real BMv2 captures: tests/experiments/test_run_outputs_bmv2.py)."""

from __future__ import annotations

import random

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from scapy.utils import wrpcap

from dissector import needs_tshark, struct_fields, tshark_fields
from pcnlab.controller.telemetry_layer import PcnTelemetry

pytestmark = needs_tshark

WIDTHS = {"seq": 32, "switch_id": 16, "egress_port": 16, "traffic_class": 8, "job": 8, "flags": 8,
          "ingress_ts": 48, "egress_ts": 48, "enq_qdepth": 32, "deq_qdepth": 32, "queue_delay": 32,
          "packet_length": 16, "payload_length": 16, "src_host": 16, "dst_host": 16}


def _frame(**fields) -> Ether:
    return Ether(src="00:00:00:00:00:01", dst="00:00:00:00:fe:01") / PcnTelemetry(**fields)


def test_every_field_over_its_whole_range(tmp_path):
    rng = random.Random(7)
    frames = [_frame(**{k: 0 for k in WIDTHS}), _frame(**{k: (1 << w) - 1 for k, w in WIDTHS.items()})]
    frames += [_frame(**{k: 1 << (w - 1) for k, w in WIDTHS.items()})]      # each field's top bit alone
    frames += [_frame(**{k: rng.getrandbits(w) for k, w in WIDTHS.items()}) for _ in range(200)]
    frames += [_frame(flags=1 << bit, seq=bit) for bit in range(8)]         # each flag alone
    pcap = tmp_path / "crafted.pcap"
    wrpcap(str(pcap), frames)
    dissected = tshark_fields(pcap)
    assert dissected == [struct_fields(bytes(f)) for f in frames]
    assert dissected[1][6] == (1 << 48) - 1 and dissected[1][0] == (1 << 32) - 1   # 48- and 32-bit maxima


def test_only_telemetry_frames_are_dissected(tmp_path):
    other = Ether() / IP(dst="10.0.0.2") / UDP(dport=5000) / b"x" * 64
    short = Ether(type=0x88B5) / b"\x00" * 20                                  # shorter than a record
    good = _frame(seq=5, switch_id=2, egress_port=3, enq_qdepth=17)
    pcap = tmp_path / "mixed.pcap"
    wrpcap(str(pcap), [other, short, good, other])
    assert tshark_fields(pcap) == [struct_fields(bytes(good))]
