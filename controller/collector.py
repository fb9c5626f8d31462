"""The queue log collector: reads telemetry clones from a switch's collector port and writes the
switch queue log (CSV, one row per record, with the switch's and the host's time).

Runs as a process in the monitor host on that port: a raw socket and `struct`, because scapy's
sniffing is too slow for a record per packet. Sequence numbers show what was lost on the way, and
the summary says so.

    python -m pcnlab.controller.collector --interface m1-eth0 --switch s1 --out queue-s1.csv
"""

from __future__ import annotations

import argparse
import csv
import json
import signal
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pcnlab.controller.telemetry import COLUMNS, ETHERTYPE_PCN_TELEMETRY, decode_frame


MAX_MISSING = 100_000  # sequence numbers remembered as missing, so a late record is not counted lost


@dataclass
class CollectorSummary:
    switch: str
    records: int = 0
    lost: int = 0            # sequence numbers never seen (a record that arrived late is not lost)
    first_seq: int | None = None
    last_seq: int | None = None
    out_of_order: int = 0    # records that arrived after a later one (counted in records too)
    _missing: set = field(default_factory=set, repr=False)

    def note(self, seq: int) -> None:
        if self.last_seq is None:
            self.first_seq = seq
        elif seq > self.last_seq + 1:
            self.lost += seq - self.last_seq - 1
            if len(self._missing) + seq - self.last_seq - 1 <= MAX_MISSING:
                self._missing.update(range(self.last_seq + 1, seq))
        elif seq <= self.last_seq:
            self.out_of_order += 1
            if seq in self._missing:
                self._missing.discard(seq)
                self.lost -= 1
                self.records += 1
            return
        self.records += 1
        self.last_seq = seq

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if not k.startswith("_")}


class QueueLogCollector:
    def __init__(self, interface: str, switch: str, out: Path, summary: Path | None = None):
        self.interface = interface
        self.switch = switch
        self.out = Path(out)
        self.summary_path = Path(summary) if summary else self.out.with_suffix(".summary.json")
        self.summary = CollectorSummary(switch)
        self._stop = False

    def stop(self, *_args) -> None:
        self._stop = True

    def run(self, duration: float | None = None) -> CollectorSummary:
        sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETHERTYPE_PCN_TELEMETRY))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
        sock.bind((self.interface, 0))
        sock.settimeout(0.2)
        deadline = time.monotonic() + duration if duration else None
        with open(self.out, "w", newline="", buffering=1 << 20) as handle:
            writer = csv.writer(handle)
            writer.writerow(COLUMNS)
            print("collector ready", flush=True)  # the runner waits for this line
            while not self._stop and (deadline is None or time.monotonic() < deadline):
                try:
                    frame = sock.recv(256)
                except socket.timeout:
                    continue
                except InterruptedError:
                    continue
                record = decode_frame(frame)
                if record is None:
                    continue
                self.summary.note(record.seq)
                writer.writerow(record.row(time.monotonic_ns(), self.switch))
        sock.close()
        self.summary_path.write_text(json.dumps(self.summary.to_dict(), indent=1))
        if self.summary.lost:
            print(f"{self.switch}: {self.summary.lost} telemetry records lost of "
                  f"{self.summary.records + self.summary.lost}", file=sys.stderr)
        return self.summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interface", required=True)
    parser.add_argument("--switch", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--summary", type=Path)
    parser.add_argument("--duration", type=float)
    args = parser.parse_args(argv)
    collector = QueueLogCollector(args.interface, args.switch, args.out, args.summary)
    signal.signal(signal.SIGTERM, collector.stop)
    signal.signal(signal.SIGINT, collector.stop)
    collector.run(args.duration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
