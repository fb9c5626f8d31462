"""The DDL burst generator (like the PCN paper's DDLgen, without PyTorch):
`python -m pcnlab.workloads.burst --role ps|worker --pattern ps|ring ...`.

PS pattern: each worker connects and says its rank (8 bytes); once all are connected the PS answers
each with 8 bytes, and iteration 0 starts. Every iteration each worker sends burst_bytes to the PS over its TCP connection; once the PS
has every worker's burst it answers each with reply_bytes (all answers at once); the worker waits for its
answer, then for the compute gap (or the next period) before the next burst. Ring pattern: 2 (N-1) steps
per iteration, each sending burst_bytes / N to the successor while receiving as much from the
predecessor, the traffic of a ring all-reduce of burst_bytes.

Times in the logs: a worker's comm_start_ns is its first send, comm_end_ns the arrival of its answer's
last byte; the PS's comm_start_ns is the first byte of any burst, recv_end_ns the last, and comm_end_ns
when the answers were handed to TCP (not yet delivered: take the workers' comm_end_ns for that).

Each message is a 16-byte header (iteration, payload length; network order) and its payload of zeros.
Burst start times: max(answer + compute_ms, t0 + k * period_ms) + U(-jitter_ms, +jitter_ms), never
before the answer. With --pcn-start the worker announces each burst one RTT (the connection's smoothed
RTT, or --pcn-lead-us) ahead; see netutil.PCN_START_DSCP.
"""

from __future__ import annotations

import random
import signal
import socket
import struct
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from pcnlab.jsonlines import Iteration
from pcnlab.workloads.announce import announce_socket, default_lead_us, send_announcement, start_listener
from pcnlab.workloads.config import BurstConfig, as_dict, parse_config
from pcnlab.workloads.joblog import JsonLog
from pcnlab.workloads.netutil import check_cc, connect_retry, listen, recv_exact, set_cc, tcp_info

HEADER = struct.Struct("!QQ")  # iteration, payload bytes
HELLO = struct.Struct("!Q")    # the worker's rank, once per connection


class _Payload:
    def __init__(self, size: int):
        self.buf = memoryview(bytearray(max(size, 1)))
        self._out = memoryview(bytearray(HEADER.size + max(size, 1)))

    def send(self, sock: socket.socket, it: int, size: int) -> None:
        """Header and payload in one write: a burst's first segment is a full one, never a lone header
        (which the switch would not count as the burst's start: it looks like a control message).
        One thread at a time per object: pack_into zeroes the header before writing it, so another
        thread's sendall of the same buffer could put a header of zeros on the wire."""
        if HEADER.size + size > len(self._out):
            self._out = memoryview(bytearray(HEADER.size + size))
        HEADER.pack_into(self._out, 0, it, size)
        sock.sendall(self._out[:HEADER.size + size])

    def receive(self, sock: socket.socket, expect_it: int) -> tuple[int, int]:
        """(first byte's time, payload size)."""
        head = bytearray(HEADER.size)
        first = recv_exact(sock, memoryview(head))
        it, size = HEADER.unpack(head)
        if it != expect_it:
            raise ConnectionError(f"expected iteration {expect_it}, got {it}")
        if size > len(self.buf):
            self.buf = memoryview(bytearray(size))
        recv_exact(sock, self.buf[:size])
        return first, size


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(BurstConfig, argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    log = JsonLog(cfg.log, job=cfg.job, host=cfg.host, role=cfg.role, rank=cfg.rank if cfg.role == "worker" else -1,
                  config=as_dict(cfg))
    try:
        check_cc(cfg.cc)
        if cfg.pattern == "ring":
            _ring_worker(cfg, log)
        elif cfg.transport == "ltp":  # bursts as LTP datagrams, answers over TCP (workloads/ltp/burst.py)
            from pcnlab.workloads.ltp.burst import ltp_ps, ltp_ps_worker

            (ltp_ps if cfg.role == "ps" else ltp_ps_worker)(cfg, log)
        elif cfg.role == "ps":
            _ps(cfg, log)
        else:
            _ps_worker(cfg, log)
    except SystemExit as exc:
        log.close("stopped" if exc.code else "ok")
        raise
    except BaseException as exc:  # noqa: BLE001
        message = f"{type(exc).__name__}: {exc}"
        log.error(message)
        log.close("failed")
        who = "ps" if cfg.role == "ps" else f"worker {cfg.rank}"
        print(f"{cfg.job} {who} ({cfg.host or 'localhost'}): {message}", file=sys.stderr, flush=True)
        sys.exit(1)
    log.close("ok")


def _announce_listener(cfg: BurstConfig, log: JsonLog, bind_addr: str) -> None:
    """Absorb (and log) PCN-START datagrams, so they cost the host no ICMP port-unreachable."""
    start_listener(log, bind_addr, cfg.port)


class _Pacer:
    """When each burst starts: period, compute gap and jitter; announcements one lead ahead."""

    def __init__(self, cfg: BurstConfig):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed * 7919 + cfg.rank)
        self.t0 = time.monotonic_ns()

    def next_start(self, it: int, answered_ns: int) -> int:
        cfg = self.cfg
        target = answered_ns + int(cfg.compute_ms * 1e6)
        if cfg.period_ms > 0:
            target = max(target, self.t0 + int(it * cfg.period_ms * 1e6))
        if cfg.jitter_ms > 0:
            target += int(self.rng.uniform(-cfg.jitter_ms, cfg.jitter_ms) * 1e6)
        return max(target, answered_ns)


def _sleep_until(t_ns: int) -> None:
    delay = (t_ns - time.monotonic_ns()) / 1e9
    if delay > 0:
        time.sleep(delay)


def _announce(cfg: BurstConfig, log: JsonLog, udp: socket.socket, dst: str, it: int, lead_us: float) -> int:
    return send_announcement(udp, log, dst, cfg.port, job=cfg.job, rank=cfg.rank, it=it, nbytes=cfg.burst_bytes,
                             lead_us=lead_us)


def _wait_and_announce(cfg, log, pacer, udp, data_sock, dst, it, answered_ns) -> tuple[int, int | None]:
    """Sleep through the compute gap, announcing one lead before the burst. (gap start, announce time)."""
    start = pacer.next_start(it, answered_ns)
    announced = None
    if udp is not None:
        lead_us = cfg.pcn_lead_us or default_lead_us(tcp_info(data_sock).get("srtt_us"))
        _sleep_until(start - int(lead_us * 1e3))
        announced = _announce(cfg, log, udp, dst, it, lead_us)
    _sleep_until(start)
    return start, announced


def _udp(cfg: BurstConfig) -> socket.socket | None:
    return announce_socket() if cfg.pcn_start else None


def _ps(cfg: BurstConfig, log: JsonLog) -> None:
    conns = accept_workers(cfg, log)
    ranks = sorted(conns)
    payloads = {r: _Payload(cfg.burst_bytes) for r in ranks}
    replies = {r: _Payload(cfg.reply_bytes) for r in ranks}  # answers go out at once: one buffer each
    with ThreadPoolExecutor(max_workers=len(ranks)) as pool:
        for it in range(cfg.iterations):
            got = list(pool.map(lambda r: (*payloads[r].receive(conns[r], it), time.monotonic_ns()), ranks))
            recv_end = max(end for _, _, end in got)
            send_start = time.monotonic_ns()
            list(pool.map(lambda r: replies[r].send(conns[r], it, cfg.reply_bytes), ranks))
            send_end = time.monotonic_ns()
            log.iteration(Iteration(
                iter=it, compute_start_ns=recv_end, compute_end_ns=send_start,
                comm_start_ns=min(first for first, _, _ in got), comm_end_ns=send_end,
                bytes_sent=cfg.reply_bytes * len(ranks), bytes_recv=sum(size for _, size, _ in got),
                extra=dict(recv_end_ns=recv_end, send_start_ns=send_start,
                           first_byte_ns={str(r): g[0] for r, g in zip(ranks, got)})))
    for sock in conns.values():
        sock.close()


def accept_workers(cfg: BurstConfig, log: JsonLog, before_go=None) -> dict[int, socket.socket]:
    """The PS's side of the start: every worker connects and says its rank; then (after `before_go(conns)`,
    if given) all are told to go."""
    server = listen(cfg.ps_addr, cfg.port)
    _announce_listener(cfg, log, cfg.ps_addr)
    server.settimeout(cfg.timeout_s)
    conns: dict[int, socket.socket] = {}
    while len(conns) < cfg.workers:
        try:
            sock, _ = server.accept()
        except TimeoutError:
            raise ConnectionError(f"only {len(conns)} of {cfg.workers} workers connected within "
                                  f"{cfg.timeout_s:.0f} s") from None
        sock.settimeout(None)
        set_cc(sock, cfg.cc)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = bytearray(HELLO.size)
        recv_exact(sock, memoryview(head))
        conns[HELLO.unpack(head)[0]] = sock
    server.close()
    if before_go is not None:
        before_go(conns)
    for sock in conns.values():  # everyone is here: iteration 0 starts together, like a real job
        sock.sendall(HELLO.pack(len(conns)))
    return conns


def join_ps(cfg: BurstConfig) -> socket.socket:
    """A worker's side of the start: connect, say its rank, wait for the PS's go."""
    sock = connect_retry(cfg.ps_addr, cfg.port, cfg.timeout_s, cfg.cc)
    sock.sendall(HELLO.pack(cfg.rank))
    recv_exact(sock, memoryview(bytearray(HELLO.size)))  # the PS's go, once every worker is connected
    return sock


def _ps_worker(cfg: BurstConfig, log: JsonLog) -> None:
    sock = join_ps(cfg)
    udp = _udp(cfg)
    payload = _Payload(max(cfg.burst_bytes, cfg.reply_bytes))
    pacer = _Pacer(cfg)
    answered = time.monotonic_ns()
    for it in range(cfg.iterations):
        gap_start = answered
        start, announced = _wait_and_announce(cfg, log, pacer, udp, sock, cfg.ps_addr, it, answered)
        comm_start = time.monotonic_ns()
        payload.send(sock, it, cfg.burst_bytes)
        sent_end = time.monotonic_ns()
        _, size = payload.receive(sock, it)
        answered = time.monotonic_ns()
        log.iteration(Iteration(
            iter=it, compute_start_ns=gap_start, compute_end_ns=comm_start, comm_start_ns=comm_start,
            comm_end_ns=answered, bytes_sent=cfg.burst_bytes, bytes_recv=size,
            extra=dict(send_end_ns=sent_end, planned_start_ns=start, announce_ns=announced, **tcp_info(sock))))
    sock.close()


def _ring_worker(cfg: BurstConfig, log: JsonLog) -> None:
    peers = [p for p in cfg.peers.split(",") if p]
    if len(peers) != cfg.workers:
        raise ValueError(f"ring: --peers lists {len(peers)} addresses for {cfg.workers} workers")
    n = cfg.workers
    me, succ = peers[cfg.rank], peers[(cfg.rank + 1) % n]
    server = listen(me, cfg.port)
    _announce_listener(cfg, log, me)
    out = connect_retry(succ, cfg.port, cfg.timeout_s, cfg.cc)
    out.sendall(HELLO.pack(cfg.rank))
    server.settimeout(cfg.timeout_s)
    try:
        inc, _ = server.accept()
    except TimeoutError:
        raise ConnectionError(f"the ring predecessor did not connect within {cfg.timeout_s:.0f} s") from None
    inc.settimeout(None)
    recv_exact(inc, memoryview(bytearray(HELLO.size)))
    server.close()
    udp = _udp(cfg)
    chunk = max(1, cfg.burst_bytes // n)
    steps = 2 * (n - 1)
    send_buf, recv_buf = _Payload(chunk), _Payload(chunk)
    pacer = _Pacer(cfg)
    answered = time.monotonic_ns()
    with ThreadPoolExecutor(max_workers=1) as pool:
        for it in range(cfg.iterations):
            gap_start = answered
            start, announced = _wait_and_announce(cfg, log, pacer, udp, out, succ, it, answered)
            comm_start = time.monotonic_ns()
            for step in range(steps):
                tag = it * steps + step
                sending = pool.submit(send_buf.send, out, tag, chunk)
                recv_buf.receive(inc, tag)
                sending.result()
            answered = time.monotonic_ns()
            log.iteration(Iteration(
                iter=it, compute_start_ns=gap_start, compute_end_ns=comm_start, comm_start_ns=comm_start,
                comm_end_ns=answered, bytes_sent=chunk * steps, bytes_recv=chunk * steps,
                extra=dict(planned_start_ns=start, announce_ns=announced, **tcp_info(out))))
    out.close()
    inc.close()


if __name__ == "__main__":
    main()
