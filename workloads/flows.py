"""One end of a long-lived background TCP flow: `python -m pcnlab.workloads.flows --role sender|receiver`.

The receiver accepts one connection and records what arrives per interval ("interval" records:
start_ns, end_ns, bytes, mbps) until the sender closes; the sender sends as fast as TCP lets it, for
duration_s or until SIGTERM, and records what it handed to TCP per interval with its cwnd, smoothed RTT
and retransmits. Congestion control is per socket (--cc); ECN is per host (see hosts.py).
"""

from __future__ import annotations

import signal
import sys
import time

from pcnlab.workloads.process_config import FlowConfig, as_dict, parse_config
from pcnlab.workloads.joblog import JsonLog
from pcnlab.workloads.netutil import check_cc, connect_retry, get_cc, listen, tcp_info

CHUNK = 64 * 1024


class _Stop(Exception):
    pass


def _raise_stop(*_):
    raise _Stop


def main(argv: list[str] | None = None) -> None:
    cfg = parse_config(FlowConfig, argv)
    signal.signal(signal.SIGTERM, _raise_stop)
    log = JsonLog(cfg.log, flow=cfg.flow, host=cfg.host, role=cfg.role, config=as_dict(cfg))
    try:
        check_cc(cfg.cc)
        (_send if cfg.role == "sender" else _receive)(cfg, log)
    except _Stop:
        log.close("stopped")
        return
    except BaseException as exc:  # noqa: BLE001
        message = f"{type(exc).__name__}: {exc}"
        log.error(message)
        log.close("failed")
        print(f"flow {cfg.flow} {cfg.role} ({cfg.host or 'localhost'}): {message}", file=sys.stderr, flush=True)
        sys.exit(1)
    log.close("ok")


def _send(cfg: FlowConfig, log: JsonLog) -> None:
    sock = connect_retry(cfg.addr, cfg.port, cfg.timeout_s, cfg.cc)
    log.write("connected", cc=get_cc(sock), ecn=tcp_info(sock).get("ecn"))
    buf = memoryview(bytearray(CHUNK))
    interval = int(cfg.interval_ms * 1e6)
    start = time.monotonic_ns()
    end = start + int(cfg.duration_s * 1e9) if cfg.duration_s > 0 else None
    tick, sent = start, 0
    try:
        while True:
            sent += sock.send(buf)
            now = time.monotonic_ns()
            if now - tick >= interval:
                log.write("interval", start_ns=tick, end_ns=now, bytes=sent,
                          mbps=round(sent * 8e3 / (now - tick), 3), **tcp_info(sock))
                tick, sent = now, 0
            if end is not None and now >= end:
                break
    finally:
        sock.close()


def _receive(cfg: FlowConfig, log: JsonLog) -> None:
    server = listen(cfg.addr, cfg.port, 1)
    server.settimeout(cfg.timeout_s)
    try:
        sock, peer = server.accept()
    except TimeoutError:
        raise ConnectionError(f"no sender connected within {cfg.timeout_s:.0f} s") from None
    server.close()
    log.write("connected", peer=peer[0])
    sock.settimeout(cfg.interval_ms / 1e3)
    buf = memoryview(bytearray(4 * CHUNK))
    interval = int(cfg.interval_ms * 1e6)
    tick, got = time.monotonic_ns(), 0

    def flush(now: int) -> None:
        nonlocal tick, got
        log.write("interval", start_ns=tick, end_ns=now, bytes=got, mbps=round(got * 8e3 / (now - tick), 3))
        tick, got = now, 0

    while True:
        try:
            n = sock.recv_into(buf)
        except TimeoutError:
            n = -1
        now = time.monotonic_ns()
        if n == 0:
            if now > tick:
                flush(now)
            break
        if n > 0:
            got += n
        if now - tick >= interval:
            flush(now)
    sock.close()


if __name__ == "__main__":
    main()
