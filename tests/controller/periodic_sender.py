"""Sends a burst of UDP frames every period, from inside a Mininet host: a stand-in for one DDL job's
iterations (the PCN paper's DDLgen, reduced to what the scheduler tests need).

    python periodic_sender.py IFACE DST_MAC SRC_IP DST_IP --period-ms P --burst N --iterations K
"""

import argparse
import socket
import time

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("iface", "dst_mac", "src_ip", "dst_ip"):
        ap.add_argument(name)
    ap.add_argument("--period-ms", type=float, default=200)
    ap.add_argument("--burst", type=int, default=30)
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--size", type=int, default=1000)
    args = ap.parse_args()
    with open(f"/sys/class/net/{args.iface}/address") as f:
        src_mac = f.read().strip()
    frame = bytes(Ether(src=src_mac, dst=args.dst_mac) / IP(src=args.src_ip, dst=args.dst_ip, tos=1)
                  / UDP(sport=41000, dport=9100) / (b"g" * (args.size - 28)))
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.bind((args.iface, 0))
    print("ready", flush=True)
    start = time.monotonic() + 0.1
    for i in range(args.iterations):
        time.sleep(max(0.0, start + i * args.period_ms / 1000 - time.monotonic()))
        for _ in range(args.burst):
            sock.send(frame)
    print("done", flush=True)


if __name__ == "__main__":
    main()
