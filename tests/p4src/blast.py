"""Sends a burst of identical UDP frames as fast as a raw socket can, from inside a Mininet host.

    python blast.py IFACE DST_MAC SRC_IP DST_IP --count N [--ecn E] [--dscp D] [--dport P] [--size B]
                    [--announce-at I --announce-dscp D2]

With --announce-at, frame I of the N is sent with DSCP D2 instead (a PCN-START inside a burst).
"""

import argparse
import socket

from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("iface")
    ap.add_argument("dst_mac")
    ap.add_argument("src_ip")
    ap.add_argument("dst_ip")
    ap.add_argument("--count", type=int, default=1)
    ap.add_argument("--ecn", type=int, default=0)
    ap.add_argument("--dscp", type=int, default=0)
    ap.add_argument("--sport", type=int, default=40000)
    ap.add_argument("--dport", type=int, default=9000)
    ap.add_argument("--size", type=int, default=1000, help="IP packet size in bytes")
    ap.add_argument("--announce-at", type=int, default=-1)
    ap.add_argument("--announce-dscp", type=int, default=0)
    args = ap.parse_args()
    with open(f"/sys/class/net/{args.iface}/address") as f:
        src_mac = f.read().strip()
    payload = b"x" * max(0, args.size - 28)

    def frame(dscp: int) -> bytes:
        ip = IP(src=args.src_ip, dst=args.dst_ip, tos=(dscp << 2) | args.ecn)
        return bytes(Ether(src=src_mac, dst=args.dst_mac) / ip / UDP(sport=args.sport, dport=args.dport) / payload)

    data, announcement = frame(args.dscp), frame(args.announce_dscp)
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    sock.bind((args.iface, 0))
    for i in range(args.count):
        sock.send(announcement if i == args.announce_at else data)
    print(f"sent {args.count}")


if __name__ == "__main__":
    main()
