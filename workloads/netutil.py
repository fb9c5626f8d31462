"""TCP helpers the generator and background flows share, and the PCN-START code point.

PCN-START (the PCN paper's host announcement, for the data plane's `pcn-host` mode): one RTT before a
burst, the worker sends one small UDP datagram to the burst's destination (the PS, or its ring successor)
on the job's data port number, with the IP DSCP field set to PCN_START_DSCP (TOS byte
PCN_START_DSCP << 2, ECN bits 00). It takes the burst's path, so the switch port the burst will
queue on sees it first. Its payload is JSON: {"job", "rank", "iter", "bytes", "lead_us"}.
"""

from __future__ import annotations

import errno
import socket
import struct
from pathlib import Path

from pcnlab.errors import UsageError

# DSCP 43 (0b101011): in DSCP pool 2 (xxxx11), which RFC 2474 leaves for experimental and local use,
# so no standard code point (EF 46, AFxy, CSx, VOICE-ADMIT 44) collides with it.
PCN_START_DSCP = 43
PCN_START_TOS = PCN_START_DSCP << 2

TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)
TCP_INFO = getattr(socket, "TCP_INFO", 11)
TCPI_OPT_ECN = 8  # tcpi_options: ECN was negotiated on this connection


def available_cc() -> list[str]:
    try:
        return Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split()
    except OSError:
        return []


def allowed_cc() -> list[str]:
    try:
        return Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text().split()
    except OSError:
        return []


def kernel_has_cc(cc: str) -> bool:
    """Whether this kernel has congestion control `cc` at all (loaded, or loadable as a module), whether
    or not this process may use it: the experiment file's check, which runs before any root privilege."""
    if cc in available_cc():
        return True
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, cc.encode())
        except OSError as exc:
            return exc.errno == errno.EPERM   # there, but not allowed to this user
    return True


def _cc_error(cc: str, exc: OSError) -> UsageError:
    if exc.errno == errno.EPERM:
        return UsageError(f"TCP congestion control {cc!r} is only for root here (unprivileged processes may use "
                          f"{', '.join(allowed_cc()) or 'none'}); run as root or choose one of those")
    return UsageError(f"TCP congestion control {cc!r} is not available in this kernel "
                      f"(available: {', '.join(available_cc()) or 'unknown'}); choose one of those")


def check_cc(cc: str) -> None:
    """A one-line UsageError unless this kernel can give a socket congestion control `cc`.

    Setting it on a throwaway socket is the real test (as root, the kernel loads a module on demand).
    """
    if not cc:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, cc.encode())
        except OSError as exc:
            raise _cc_error(cc, exc) from None


def set_cc(sock: socket.socket, cc: str) -> None:
    if cc:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, cc.encode())
        except OSError as exc:
            raise _cc_error(cc, exc) from None


def get_cc(sock: socket.socket) -> str:
    return sock.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, 16).split(b"\0")[0].decode()


def tcp_info(sock: socket.socket) -> dict:
    """srtt (us), rttvar, cwnd (segments), total retransmits, and whether ECN was negotiated, from
    struct tcp_info."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 104)
    if len(raw) < 104:
        return {}
    # u8 x8, then u32: rto ato snd_mss rcv_mss unacked sacked lost retrans fackets last_data_sent
    # last_ack_sent last_data_recv last_ack_recv pmtu rcv_ssthresh rtt rttvar snd_ssthresh snd_cwnd
    # advmss reordering rcv_rtt rcv_space total_retrans
    u32 = struct.unpack_from("=24I", raw, 8)
    return {"srtt_us": u32[15], "rttvar_us": u32[16], "cwnd": u32[18], "total_retrans": u32[23],
            "ecn": bool(raw[5] & TCPI_OPT_ECN)}


def recv_exact(sock: socket.socket, view: memoryview) -> int:
    """Fill `view` from the socket; returns the monotonic time (ns) of the first byte's arrival."""
    import time

    got, first = 0, 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("the peer closed the connection")
        if not first:
            first = time.monotonic_ns()
        got += n
    return first


def connect_retry(addr: str, port: int, timeout_s: float, cc: str = "") -> socket.socket:
    """Connect, retrying while the listener is not up yet (processes start in any order)."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        set_cc(s, cc)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            s.connect((addr, port))
            return s
        except OSError as exc:
            s.close()
            if time.monotonic() > deadline:
                raise ConnectionError(f"cannot connect to {addr}:{port} within {timeout_s:.0f} s: {exc}") from None
            time.sleep(0.05)


def listen(addr: str, port: int, backlog: int = 64) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(backlog)
    return s
