"""What a PyTorch worker can sense about the network from its own TCP connections.

gloo owns the sockets of a process group (a full mesh of TCP connections made when the group starts,
plus one to the rendezvous store); Python never sees them. But they are this process's file
descriptors: GlooSockets finds the TCP sockets in /proc/self/fd connected to the job's other ranks
(not the store's, on the job's port), and reads struct tcp_info on a duplicate of each descriptor
(getsockopt TCP_INFO; a duplicate shares the socket, reading it changes nothing).

Per socket (Linux's struct tcp_info, include/uapi/linux/tcp.h; every field here is in kernels >= 5.4):
srtt and min_rtt (µs), cwnd, total_retrans (segments retransmitted), bytes_sent (including
retransmissions), bytes_retrans, bytes_acked, bytes_received, delivered and delivered_ce (packets
delivered, and those the receiver echoed as CE-marked: ECN echoes), delivery_rate (bytes/s, the
kernel's latest sample) and whether that sample was application-limited, and whether ECN was
negotiated. `sense` turns two snapshots into an iteration's figures: counters summed over the
sockets, RTTs from the connections that carried data.

The host's own counters (HostTcpCounters): /proc/net/netstat and /proc/net/snmp are per network
namespace, and a rank in a Mininet host has its namespace to itself, so their increase over an iteration
is what that iteration cost this host's TCP: retransmission timeouts (TcpExt TCPTimeouts), tail-loss
probes (TCPLossProbes, and TCPLossProbeRecovery: the probes that repaired a loss), spurious timeouts
undone (TCPSpuriousRTOs) and segments retransmitted (Tcp RetransSegs).

Not reachable this way: the queue at the switch (the data plane's telemetry goes to the collector,
not to the hosts), CE marks on the packets this rank receives (the kernel echoes them to the sender,
where delivered_ce counts them), and other jobs' traffic.
"""

from __future__ import annotations

import os
import socket
import struct

from pcnlab.workloads.netutil import TCP_INFO, TCPI_OPT_ECN

TCP_INFO_BYTES = 232   # up to tcpi_snd_wnd (Linux 5.4+)
# struct tcp_info: 8 x u8 (state ... options, wscales, delivery_rate_app_limited:1 in byte 7), 24 x u32
# (rto ... total_retrans), u64 pacing_rate, max_pacing_rate, bytes_acked, bytes_received, u32 segs_out,
# segs_in, notsent_bytes, min_rtt, data_segs_in, data_segs_out, u64 delivery_rate, busy_time,
# rwnd_limited, sndbuf_limited, u32 delivered, delivered_ce, u64 bytes_sent, bytes_retrans, u32
# dsack_dups, reord_seen, rcv_ooopack, snd_wnd. No padding: every u64 falls on an 8-byte boundary.
_LAYOUT = struct.Struct("=8B24I4Q6I4Q2I2Q4I")
_COUNTERS = ("bytes_sent", "bytes_retrans", "bytes_acked", "bytes_received", "total_retrans", "delivered",
             "delivered_ce")


def read_tcp_info(sock: socket.socket) -> dict | None:
    """The fields above from one socket's struct tcp_info (None when the kernel's is shorter)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, TCP_INFO_BYTES)
    if len(raw) < TCP_INFO_BYTES:
        return None
    v = _LAYOUT.unpack_from(raw)
    u8, u32 = v[0:8], v[8:32]
    _pacing, _max_pacing, bytes_acked, bytes_received = v[32:36]
    min_rtt = v[36 + 3]
    delivery_rate = v[42]
    delivered, delivered_ce = v[46:48]
    bytes_sent, bytes_retrans = v[48:50]
    return {"srtt_us": u32[15], "rttvar_us": u32[16], "cwnd": u32[18], "total_retrans": u32[23],
            "min_rtt_us": min_rtt, "bytes_acked": bytes_acked, "bytes_received": bytes_received,
            "delivery_rate_Bps": delivery_rate, "app_limited": bool(u8[7] & 1), "delivered": delivered,
            "delivered_ce": delivered_ce, "bytes_sent": bytes_sent, "bytes_retrans": bytes_retrans,
            "ecn": bool(u8[5] & TCPI_OPT_ECN)}


def sense(before: list[dict | None], after: list[dict | None]) -> dict:
    """What a rank's connections did between two snapshots (GlooSockets.snapshot, same sockets):
    the counters' increase summed over them, and -- over the connections that carried data meanwhile
    -- the largest smoothed RTT, the lowest minimum RTT, the smallest cwnd, the largest delivery-rate
    sample and whether all those samples were application-limited. `ecn`: negotiated on any of them."""
    out = {name: 0 for name in _COUNTERS}
    busy = []
    for old, new in zip(before, after):
        if old is None or new is None:
            continue
        moved = {name: new[name] - old[name] for name in _COUNTERS}
        for name in _COUNTERS:
            out[name] += moved[name]
        if moved["bytes_acked"] or moved["bytes_received"]:
            busy.append(new)
    rtts = [i["min_rtt_us"] for i in busy if i["min_rtt_us"] and i["min_rtt_us"] != 0xFFFFFFFF]
    out.update(connections=len(busy), srtt_us=max((i["srtt_us"] for i in busy), default=None),
               min_rtt_us=min(rtts, default=None), cwnd=min((i["cwnd"] for i in busy), default=None),
               delivery_rate_Bps=max((i["delivery_rate_Bps"] for i in busy), default=None),
               app_limited=all(i["app_limited"] for i in busy),
               ecn=any(i["ecn"] for i in after if i is not None))
    return out


class GlooSockets:
    """This process's TCP connections to the job's other ranks (gloo's), found once the process group
    is up: to `peers` (addresses; None: to any address -- a rank's process holds no other TCP
    connections, and on loopback gloo connects over 127.0.0.1 whatever the ranks' addresses).
    `skip_port`: the rendezvous store's port (its connections carry no gradients)."""

    def __init__(self, peers: list[str] | None, skip_port: int):
        self.peers = set(peers) if peers is not None else None
        self.skip_port = skip_port
        self.sockets: list[socket.socket] = []
        self.refresh()

    def refresh(self) -> None:
        for s in self.sockets:
            s.close()
        self.sockets = []
        found: dict[str, int] = {}   # socket inode -> one descriptor of it (listed before any dup is made)
        for name in os.listdir("/proc/self/fd"):
            try:
                link = os.readlink(f"/proc/self/fd/{name}")
            except OSError:
                continue
            if link.startswith("socket:"):
                found.setdefault(link, int(name))
        for fd in found.values():
            try:
                s = socket.socket(fileno=os.dup(fd))
            except OSError:
                continue
            try:
                keep = (s.family == socket.AF_INET and s.type == socket.SOCK_STREAM
                        and (self.peers is None or s.getpeername()[0] in self.peers)
                        and self.skip_port not in (s.getpeername()[1], s.getsockname()[1]))
            except OSError:
                keep = False   # a listening socket, or not connected
            if keep:
                self.sockets.append(s)
            else:
                s.close()

    def snapshot(self) -> list[dict | None]:
        """Each socket's tcp_info now (None for one that can no longer be read), in a fixed order."""
        out = []
        for s in self.sockets:
            try:
                out.append(read_tcp_info(s))
            except OSError:
                out.append(None)
        return out

    def close(self) -> None:
        for s in self.sockets:
            s.close()
        self.sockets = []


# TcpExt (/proc/net/netstat) and Tcp (/proc/net/snmp) counters, as an iteration's record names them.
HOST_COUNTERS = {("TcpExt", "TCPTimeouts"): "tcp_timeouts", ("TcpExt", "TCPLossProbes"): "tcp_loss_probes",
                 ("TcpExt", "TCPLossProbeRecovery"): "tcp_loss_probe_recoveries",
                 ("TcpExt", "TCPSpuriousRTOs"): "tcp_spurious_rtos", ("Tcp", "RetransSegs"): "tcp_retrans_segs"}


def parse_proc_counters(text: str) -> dict[tuple[str, str], int]:
    """/proc/net/netstat or /proc/net/snmp: (group, name) -> value, from each header line and the value
    line after it."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    out = {}
    for head, values in zip(lines[::2], lines[1::2]):
        group = head[0].rstrip(":")
        out.update({(group, name): int(v) for name, v in zip(head[1:], values[1:]) if v.lstrip("-").isdigit()})
    return out


class HostTcpCounters:
    """The TCP counters of this process's network namespace (HOST_COUNTERS); `delta()` is their increase
    since the previous call (or since it was made). A counter the kernel lacks counts 0."""

    def __init__(self, paths: tuple[str, ...] = ("/proc/net/netstat", "/proc/net/snmp")):
        self.paths = paths
        self.last = self.read()

    def read(self) -> dict[str, int]:
        found: dict[tuple[str, str], int] = {}
        for path in self.paths:
            with open(path) as f:
                found.update(parse_proc_counters(f.read()))
        return {name: found.get(key, 0) for key, name in HOST_COUNTERS.items()}

    def delta(self) -> dict[str, int]:
        now = self.read()
        moved = {name: now[name] - self.last[name] for name in now}
        self.last = now
        return moved

