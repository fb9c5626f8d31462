"""Scapy's view of the telemetry record (p4src/headers.p4 telemetry_h): for tests and for looking at
captures. The collector decodes with `struct` (telemetry.py) because scapy is too slow per packet."""

from __future__ import annotations

from scapy.fields import BitField, ByteField, IntField, ShortField, XByteField
from scapy.layers.l2 import Ether
from scapy.packet import Packet, bind_layers

from pcnlab.controller.telemetry import ETHERTYPE_PCN_TELEMETRY


class PcnTelemetry(Packet):
    """Scapy's view of the same record."""

    name = "PCN telemetry"
    fields_desc = [
        IntField("seq", 0), ShortField("switch_id", 0), ShortField("egress_port", 0),
        ByteField("traffic_class", 0), ByteField("job", 0), XByteField("flags", 0), ByteField("reserved", 0),
        BitField("ingress_ts", 0, 48), BitField("egress_ts", 0, 48), IntField("enq_qdepth", 0),
        IntField("deq_qdepth", 0), IntField("queue_delay", 0), ShortField("packet_length", 0),
        ShortField("payload_length", 0), ShortField("src_host", 0), ShortField("dst_host", 0),
    ]


bind_layers(Ether, PcnTelemetry, type=ETHERTYPE_PCN_TELEMETRY)
