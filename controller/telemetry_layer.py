"""Scapy's view of the telemetry record (p4src/headers.p4 telemetry_h): for tests and for looking at
captures. The collector decodes with `struct` (telemetry.py) because scapy is too slow per packet."""

from __future__ import annotations

from scapy.fields import BitField
from scapy.layers.l2 import Ether
from scapy.packet import Packet, bind_layers

from pcnlab.controller.telemetry import ETHERTYPE_PCN_TELEMETRY, FACTS


class PcnTelemetry(Packet):
    """Scapy's view of the same record."""

    name = "PCN telemetry"
    fields_desc = [BitField(f.name, 0, f.bits) for f in FACTS.telemetry]   # telemetry_h, generated


bind_layers(Ether, PcnTelemetry, type=ETHERTYPE_PCN_TELEMETRY)
