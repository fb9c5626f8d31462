"""The queue telemetry record of p4src/headers.p4 (telemetry_h), decoded with `struct` for speed
(telemetry_layer.py has scapy's view of it, for crafting and looking at packets)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pcnlab.p4src.facts import program_facts

FACTS = program_facts()   # generated from p4src/ by `make p4` (p4src/facts.py)
ETHERTYPE_PCN_TELEMETRY = FACTS["ETHERTYPE_PCN_TELEMETRY"]
# One struct code per field of telemetry_h in its order; a 48-bit timestamp is two (hi16, lo32).
_CODES = {8: "B", 16: "H", 32: "I", 48: "HI"}
RECORD = struct.Struct("!" + "".join(_CODES[f.bits] for f in FACTS.telemetry))
FIELDS = tuple(f.name for f in FACTS.telemetry)
ETH_HEADER = 14
_ETHERTYPE_BYTES = ETHERTYPE_PCN_TELEMETRY.to_bytes(2, "big")

FLAG_MARKED, FLAG_DROPPED, FLAG_BURST_START = FACTS["TEL_MARKED"], FACTS["TEL_DROPPED"], FACTS["TEL_BURST_START"]
FLAG_IN_WINDOW, FLAG_ECT, FLAG_ANNOUNCE = FACTS["TEL_IN_WINDOW"], FACTS["TEL_ECT"], FACTS["TEL_ANNOUNCE"]
FLAG_BEHIND = FACTS["TEL_BEHIND"]
CLASS_BACKGROUND, CLASS_DDL = FACTS["CLASS_BACKGROUND"], FACTS["CLASS_DDL"]
CLASS_NAMES = {value: name.lower() for name, value in FACTS.prefixed("CLASS_").items()}   # the queue log's words

COLUMNS = ("host_ns", "switch", "seq", "port", "class", "job", "ingress_us", "egress_us", "enq_qdepth",
           "deq_qdepth", "queue_delay_us", "packet_length", "payload_bytes", "src_host", "dst_host", "marked",
           "dropped", "burst_start", "in_window", "ect", "announce", "behind")


@dataclass(frozen=True)
class TelemetryRecord:
    seq: int
    switch_id: int
    port: int
    traffic_class: int
    job: int
    flags: int
    ingress_us: int
    egress_us: int
    enq_qdepth: int
    deq_qdepth: int
    queue_delay_us: int
    packet_length: int
    payload_bytes: int = 0    # L4 payload: 0 for a pure ACK
    src_host: int = 0         # low 16 bits of the IPv4 source: N for host hN (topologies/topos.py)
    dst_host: int = 0

    @property
    def class_name(self) -> str:
        """The record's traffic class as the queue log names it (ddl, background)."""
        return CLASS_NAMES.get(self.traffic_class, CLASS_NAMES[CLASS_BACKGROUND])

    @property
    def marked(self) -> bool:
        return bool(self.flags & FLAG_MARKED)

    @property
    def dropped(self) -> bool:
        return bool(self.flags & FLAG_DROPPED)

    @property
    def burst_start(self) -> bool:
        return bool(self.flags & FLAG_BURST_START)

    @property
    def in_window(self) -> bool:
        return bool(self.flags & FLAG_IN_WINDOW)

    @property
    def ect(self) -> bool:
        return bool(self.flags & FLAG_ECT)

    @property
    def announce(self) -> bool:
        return bool(self.flags & FLAG_ANNOUNCE)

    @property
    def behind(self) -> bool:
        """A DDL packet behind another job's burst that started first, marked at the mode's k_behind."""
        return bool(self.flags & FLAG_BEHIND)

    def row(self, host_ns: int, switch: str) -> tuple:
        return (host_ns, switch, self.seq, self.port, self.class_name,
                self.job, self.ingress_us, self.egress_us, self.enq_qdepth, self.deq_qdepth,
                self.queue_delay_us, self.packet_length, self.payload_bytes, self.src_host, self.dst_host,
                int(self.marked), int(self.dropped),
                int(self.burst_start), int(self.in_window), int(self.ect), int(self.announce), int(self.behind))


# decode_frame unpacks by position, for speed: a record laid out otherwise stops here, not in a collector.
_DECODED = ("seq", "switch_id", "egress_port", "traffic_class", "job", "flags", "reserved", "ingress_ts",
            "egress_ts", "enq_qdepth", "deq_qdepth", "queue_delay", "packet_length", "payload_length",
            "src_host", "dst_host")
if FIELDS != _DECODED:
    raise ImportError(f"p4src's telemetry_h is now {FIELDS}; controller/telemetry.py decodes {_DECODED}: update it")


def decode_frame(frame: bytes) -> TelemetryRecord | None:
    """The record in an Ethernet frame, or None if the frame is not one."""
    if len(frame) < ETH_HEADER + RECORD.size or frame[12:14] != _ETHERTYPE_BYTES:
        return None
    (seq, switch_id, port, cls, job, flags, _, in_hi, in_lo, eg_hi, eg_lo, enq, deq, delay, length,
     payload, src, dst) = RECORD.unpack_from(frame, ETH_HEADER)
    return TelemetryRecord(seq, switch_id, port, cls, job, flags, (in_hi << 32) | in_lo,
                           (eg_hi << 32) | eg_lo, enq, deq, delay, length, payload, src, dst)
