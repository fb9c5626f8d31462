"""The generator's PS answers its workers from its pool's threads at once: each send needs a Payload of
its own. struct's pack_into zeroes the header before it writes the fields, so a send sharing the buffer
with another thread's sendall (the kernel copying it, GIL released) can put a header of zeros on the wire:
"expected iteration 13, got 0" in pcn-predict jitter_ms=200,mode=pcn,rep=2. Loopback, no Mininet."""

from __future__ import annotations

import socket
import threading
import time

from pcnlab.workloads import burst, burst_protocol
from pcnlab.workloads.process_config import BurstConfig
from pcnlab.workloads.joblog import JsonLog


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_ps_never_shares_a_payload_between_concurrent_sends(tmp_path, monkeypatch):
    send = burst_protocol.Payload.send
    busy: set[int] = set()
    shared: list[int] = []
    lock = threading.Lock()

    def checked_send(self, sock, it, size):
        with lock:
            if id(self) in busy:
                shared.append(it)
            busy.add(id(self))
        try:
            time.sleep(0.02)  # widen the window: concurrent sends of one object surely overlap
            send(self, sock, it, size)
        finally:
            with lock:
                busy.discard(id(self))

    monkeypatch.setattr(burst_protocol.Payload, "send", checked_send)
    port, workers, iterations = _free_port(), 3, 3
    common = dict(workers=workers, port=port, burst_bytes=2000, reply_bytes=100, iterations=iterations,
                  timeout_s=10.0)
    errors: list[BaseException] = []

    def run(fn, cfg):
        try:
            with JsonLog(tmp_path / f"{cfg.role}{cfg.rank}.jsonl", role=cfg.role) as log:
                fn(cfg, log)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(burst._ps, BurstConfig(role="ps", **common)))]
    threads[0].start()
    for rank in range(workers):
        threads.append(threading.Thread(target=run, args=(burst._ps_worker,
                                                          BurstConfig(role="worker", rank=rank, **common))))
        threads[-1].start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    assert not shared, f"one Payload sent on several connections at once in iterations {sorted(set(shared))}"
