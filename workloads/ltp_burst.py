"""The burst generator's PS pattern over LTP (`--transport ltp`): each worker's burst of burst_bytes
goes to the PS as LTP datagrams (one float32 "tensor" of zeros, burst_bytes / 4 elements, rounded
up), the PS closes each iteration as the PyTorch PS does (Early Close, deadline) and answers every
worker with reply_bytes over its TCP connection, as the TCP generator does. The start (every worker
connects and says its rank, then all go together), the pacing and PCN-START are burst_protocol.py's.

The LTP fields of the logs are ltp_ps.py's (receiver and sender statistics per iteration).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from pcnlab.workloads.burst_protocol import (Pacer, Payload, accept_workers, announce_udp, answer_all, join_ps,
                                             ps_iteration, wait_and_announce, worker_iteration, worker_shifts)
from pcnlab.workloads.joblog import JsonLog
from pcnlab.workloads.ltp.earlyclose import EarlyClose, hard_deadline_s
from pcnlab.workloads.ltp.receiver import LtpServer
from pcnlab.workloads.ltp.sender import LtpSender
from pcnlab.workloads.ltp.wire import Layout, job_tag
from pcnlab.workloads.process_config import BurstConfig


def _layout(cfg: BurstConfig) -> Layout:
    return Layout([(cfg.burst_bytes + 3) // 4])


def _port(cfg: BurstConfig) -> int:
    return cfg.ltp_port or cfg.port + 1


def ltp_ps(cfg: BurstConfig, log: JsonLog) -> None:
    servers = []   # the receiver listens before the workers are told to go: no datagram meets a closed port

    def listen(conns):
        workers = {r: conns[r].getpeername()[0] for r in conns}
        servers.append(LtpServer((cfg.ps_addr, _port(cfg)), job_tag(cfg.job, cfg.port), workers, _layout(cfg),
                                 EarlyClose(hard_deadline_s(cfg.ltp_deadline_ms), cfg.ltp_theta_min)))

    conns = accept_workers(cfg, log, before_go=listen)
    ranks = sorted(conns)
    server = servers[0]
    replies = {r: Payload(cfg.reply_bytes) for r in ranks}  # answers go out at once: one buffer each
    try:
        with ThreadPoolExecutor(max_workers=len(ranks)) as pool:
            for it in range(cfg.iterations):
                comm_start = time.monotonic_ns()
                closed = server.wait(it, cfg.timeout_s)
                stats = closed.stats
                server.release(it)
                answered = answer_all(pool, conns, replies, it, cfg.reply_bytes)
                extra = {**stats}
                log.iteration(ps_iteration(
                    it, stats["ltp_first_ns"] or comm_start, stats["ltp_close_ns"], answered,
                    cfg.reply_bytes * len(ranks), extra.pop("bytes_recv"), compute_start_ns=answered[0],
                    transport="ltp", **extra))
    finally:
        server.stop()
    log.write("ltp_counters", **server.counters())
    for sock in conns.values():
        sock.close()


def ltp_ps_worker(cfg: BurstConfig, log: JsonLog) -> None:
    sock = join_ps(cfg)
    udp = announce_udp(cfg)
    layout = _layout(cfg)
    sender = LtpSender((cfg.ps_addr, _port(cfg)), job_tag(cfg.job, cfg.port), cfg.rank, layout, seed=cfg.seed,
                       bind_addr=sock.getsockname()[0], idle_timeout_s=cfg.timeout_s)
    burst = np.zeros(layout.total, dtype=np.float32)
    answer = Payload(cfg.reply_bytes)
    pacer = Pacer(cfg, worker_shifts(cfg, log, sock.getsockname()[0]), log)
    answered = time.monotonic_ns()
    try:
        for it in range(cfg.iterations):
            gap_start = answered
            start, announced = wait_and_announce(cfg, log, pacer, udp, sock, cfg.ps_addr, it, answered)
            comm_start = time.monotonic_ns()
            result = sender.send(it, burst, hard_deadline_s(cfg.ltp_deadline_ms) or cfg.timeout_s)
            sent_end = time.monotonic_ns()
            _, size = answer.receive(sock, it)
            answered = time.monotonic_ns()
            log.iteration(worker_iteration(
                it, gap_start, comm_start, answered, result.bytes_sent, size, send_end_ns=sent_end,
                planned_start_ns=start, announce_ns=announced, transport="ltp", **result.log_fields()))
    finally:
        sender.close()
        sock.close()
