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

import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from pcnlab.workloads.burst_protocol import (HELLO, Pacer, Payload, accept_workers, announce_udp, answer_all, join_ps,
                                             ps_iteration, wait_and_announce, worker_iteration, worker_shifts)
from pcnlab.workloads.joblog import JsonLog
from pcnlab.workloads.netutil import check_cc, connect_retry, listen, recv_exact, tcp_info
from pcnlab.workloads.process_config import BurstConfig, as_dict, parse_config
from pcnlab.workloads.tcpsense import HostTcpCounters


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(BurstConfig, argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    log = JsonLog(cfg.log, job=cfg.job, host=cfg.host, role=cfg.role, rank=cfg.rank if cfg.role == "worker" else -1,
                  config=as_dict(cfg))
    try:
        check_cc(cfg.cc)
        if cfg.pattern == "ring":
            _ring_worker(cfg, log)
        elif cfg.transport == "ltp":  # bursts as LTP datagrams, answers over TCP (workloads/ltp_burst.py)
            from pcnlab.workloads.ltp_burst import ltp_ps, ltp_ps_worker

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


def _ps(cfg: BurstConfig, log: JsonLog) -> None:
    conns = accept_workers(cfg, log)
    ranks = sorted(conns)
    payloads = {r: Payload(cfg.burst_bytes) for r in ranks}
    replies = {r: Payload(cfg.reply_bytes) for r in ranks}  # answers go out at once: one buffer each
    host_tcp = HostTcpCounters()   # this host's RTOs and tail-loss probes, per iteration (tcpsense.py)
    with ThreadPoolExecutor(max_workers=len(ranks)) as pool:
        for it in range(cfg.iterations):
            got = list(pool.map(lambda r: (*payloads[r].receive(conns[r], it), time.monotonic_ns()), ranks))
            recv_end = max(end for _, _, end in got)
            answered = answer_all(pool, conns, replies, it, cfg.reply_bytes)
            log.iteration(ps_iteration(
                it, min(first for first, _, _ in got), recv_end, answered, cfg.reply_bytes * len(ranks),
                sum(size for _, size, _ in got), first_byte_ns={str(r): g[0] for r, g in zip(ranks, got)},
                **host_tcp.delta()))
    for sock in conns.values():
        sock.close()


def _ps_worker(cfg: BurstConfig, log: JsonLog) -> None:
    sock = join_ps(cfg)
    udp = announce_udp(cfg)
    payload = Payload(max(cfg.burst_bytes, cfg.reply_bytes))
    pacer = Pacer(cfg, worker_shifts(cfg, log, sock.getsockname()[0]), log)
    host_tcp = HostTcpCounters()
    answered = time.monotonic_ns()
    for it in range(cfg.iterations):
        gap_start = answered
        start, announced = wait_and_announce(cfg, log, pacer, udp, sock, cfg.ps_addr, it, answered)
        comm_start = time.monotonic_ns()
        payload.send(sock, it, cfg.burst_bytes)
        sent_end = time.monotonic_ns()
        _, size = payload.receive(sock, it)
        answered = time.monotonic_ns()
        log.iteration(worker_iteration(
            it, gap_start, comm_start, answered, cfg.burst_bytes, size, send_end_ns=sent_end, planned_start_ns=start,
            announce_ns=announced, **tcp_info(sock), **host_tcp.delta()))
    sock.close()


def _ring_worker(cfg: BurstConfig, log: JsonLog) -> None:
    peers = [p for p in cfg.peers.split(",") if p]
    if len(peers) != cfg.workers:
        raise ValueError(f"ring: --peers lists {len(peers)} addresses for {cfg.workers} workers")
    n = cfg.workers
    me, succ = peers[cfg.rank], peers[(cfg.rank + 1) % n]
    server = listen(me, cfg.port)
    shifts = worker_shifts(cfg, log, me)
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
    udp = announce_udp(cfg)
    chunk = max(1, cfg.burst_bytes // n)
    steps = 2 * (n - 1)
    send_buf, recv_buf = Payload(chunk), Payload(chunk)
    pacer = Pacer(cfg, shifts, log)
    host_tcp = HostTcpCounters()
    answered = time.monotonic_ns()
    with ThreadPoolExecutor(max_workers=1) as pool:
        for it in range(cfg.iterations):
            gap_start = answered
            start, announced = wait_and_announce(cfg, log, pacer, udp, out, succ, it, answered)
            comm_start = time.monotonic_ns()
            for step in range(steps):
                tag = it * steps + step
                sending = pool.submit(send_buf.send, out, tag, chunk)
                recv_buf.receive(inc, tag)
                sending.result()
            answered = time.monotonic_ns()
            log.iteration(worker_iteration(
                it, gap_start, comm_start, answered, chunk * steps, chunk * steps, planned_start_ns=start,
                announce_ns=announced, **tcp_info(out), **host_tcp.delta()))
    out.close()
    inc.close()


if __name__ == "__main__":
    main()
