"""LTP over this machine's loopback (real UDP sockets, no root): a live PS receiver under hostile
datagrams, and the sender against it."""

from __future__ import annotations

import socket
import threading

import numpy as np
import pytest

from pcnlab.workloads.ltp.earlyclose import EarlyClose
from pcnlab.workloads.ltp.receiver import LtpServer
from pcnlab.workloads.ltp.sender import LtpSender
from pcnlab.workloads.ltp.wire import DATA_HEADER, MAX_DATAGRAM, Layout, job_tag, pack_data

PS, W1, W2, STRANGER = "127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.9"


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((PS, 0))
        return s.getsockname()[1]


def _raw(src: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, 0))
    return s


def _chunk(lay: Layout, index: int, it: int, rank: int, tag: int, values=None, seq: int = 1 << 30) -> bytes:
    values = np.full(int(lay.count[index]), 666.0, dtype=np.float32) if values is None else values
    return bytes(pack_data(bytearray(MAX_DATAGRAM), tag, rank, 0, it, seq, int(lay.tensor[index]),
                           int(lay.offset[index]), values, 0))


def test_hostile_datagrams_are_counted_and_dropped_and_never_touch_a_tensor():
    lay = Layout([1000, 5])
    port = _free_udp_port()
    tag = job_tag("train", port)
    server = LtpServer((PS, port), tag, {1: W1, 2: W2}, lay, EarlyClose(deadline_s=5.0))
    ps = (PS, port)
    try:
        stranger, w1, w2 = _raw(STRANGER), _raw(W1), _raw(W2)
        flood = _chunk(lay, 0, 0, 1, tag)
        for _ in range(3000):                       # a host outside the job: perfect datagrams, all dropped
            stranger.sendto(flood, ps)
        good = _chunk(lay, 1, 0, 1, tag)
        w1.sendto(good[:20], ps)                                    # truncated header
        w1.sendto(good[:-8], ps)                                    # truncated payload
        w1.sendto(b"XX" + good[2:], ps)                             # not LTP
        w1.sendto(_chunk(lay, 1, 0, 1, job_tag("other", port)), ps)   # another job's
        w1.sendto(_chunk(lay, 1, 0, 2, tag), ps)                    # worker 1's address, worker 2's rank
        w1.sendto(_chunk(lay, 1, 7, 1, tag), ps)                    # an iteration far ahead
        head = list(DATA_HEADER.unpack_from(good))
        head[11] = 1000                                             # offset past tensor 0's end
        w1.sendto(DATA_HEADER.pack(*head) + good[DATA_HEADER.size:], ps)
        head[11] = 1                                                # not on a chunk boundary
        w1.sendto(DATA_HEADER.pack(*head) + good[DATA_HEADER.size:], ps)
        nan = np.full(360, np.nan, dtype=np.float32)
        w2.sendto(_chunk(lay, 0, 0, 2, tag, values=nan), ps)        # non-finite values
        w2.sendto(good + bytes(200), ps)                            # oversized

        # The real workers send iteration 0 meanwhile.
        g1 = np.arange(lay.total, dtype=np.float32)
        g2 = -np.arange(lay.total, dtype=np.float32) / 7
        results = {}
        senders = [LtpSender(ps, tag, r, lay, bind_addr=a) for r, a in ((1, W1), (2, W2))]
        threads = [threading.Thread(target=lambda s=s, g=g: results.update({s.rank: s.send(0, g, 5.0)}))
                   for s, g in zip(senders, (g1, g2))]
        for t in threads:
            t.start()
        closed = server.wait(0, timeout_s=10)
        for t in threads:
            t.join()
        assert closed.reason == "complete" and closed.stats["delivered_fraction"] == 1.0
        assert np.array_equal(closed.grad[0], g1) and np.array_equal(closed.grad[1], g2)
        assert all(r.outcome == "complete" and r.acked_chunks == lay.chunks for r in results.values())

        # Iteration 0 is closed: a copy of one of its chunks is late, and is answered with CLOSE.
        w1.sendto(_chunk(lay, 0, 0, 1, tag), ps)
        w1.settimeout(2)
        reply = w1.recv(MAX_DATAGRAM)
        assert reply[3] == 2 and reply[10] & 1   # an ACK, flagged CLOSED
        assert np.array_equal(closed.grad[0], g1), "a late datagram changed a closed iteration's tensor"
        server.release(0)
        # Iteration 1: a chunk that arrives twice is written once (the first copy wins) and counted.
        first = np.ones(360, dtype=np.float32)
        w1.sendto(_chunk(lay, 0, 1, 1, tag, values=first, seq=5), ps)
        w1.sendto(_chunk(lay, 0, 1, 1, tag, values=first * 9, seq=6), ps)
        w1.recv(MAX_DATAGRAM), w1.recv(MAX_DATAGRAM)                  # both acknowledged
        server.stop()
        counters = server.counters()
        slot = server.slots[1]
        assert slot.iter == 1 and np.array_equal(slot.grad[0, :360], first)
        assert server.error is None and not server.thread.is_alive()
        assert counters["foreign"] + counters["rcvbuf_drops"] == 3000, counters
        expected = {"truncated": 2, "bad_magic": 1, "wrong_job": 1, "bad_rank": 1, "bad_iteration": 1,
                    "bad_offset": 2, "non_finite": 1, "oversized": 1, "late": 1, "duplicate": 1}
        assert {k: counters.get(k, 0) for k in expected} == expected, counters
        # Every datagram read is accounted for: accepted chunks, or one of the reasons.
        accepted = 2 * lay.chunks + 1
        assert counters["read"] == accepted + sum(expected.values()) + counters["foreign"]
    finally:
        server.stop() if server.thread.is_alive() else None


def test_a_worker_that_never_sends_is_filled_at_the_deadline_then_reported_gone():
    lay = Layout([2000])
    port = _free_udp_port()
    tag = job_tag("train", port)
    server = LtpServer((PS, port), tag, {1: W1, 2: W2}, lay, EarlyClose(deadline_s=0.2), dead_after=2)
    sender = LtpSender((PS, port), tag, 1, lay, bind_addr=W1)
    try:
        g = np.arange(lay.total, dtype=np.float32)
        result = sender.send(0, g, 0.5)
        closed = server.wait(0, 5)
        assert result.outcome == "complete" and closed.reason == "deadline"   # its own part all arrived
        assert closed.stats["early_close"] == "deadline"
        assert closed.stats["delivered_by_rank"] == {"1": 1.0, "2": 0.0}
        assert closed.stats["bytes_lost"] == 4 * lay.total
        server.release(0)
        sender.send(1, g, 0.5)
        with pytest.raises(ConnectionError, match="worker rank 2 .* sent nothing for 2 iterations"):
            server.wait(1, 5)
    finally:
        sender.close()
        server.stop()


def test_a_sender_waiting_for_delayed_acknowledgements_sleeps():
    """While its outstanding datagrams wait in a queue longer than the last RTT (incast), a sender has
    nothing to do until an acknowledgement or its retransmission timer: it must sleep, not spin. The
    PS here acknowledges the first datagram at once and the rest only 300 ms later."""
    import time

    from pcnlab.workloads.ltp.wire import bitmap_of, pack_ack, parse_data

    lay = Layout([20_000])
    ps = _raw(PS)
    tag = job_tag("train", ps.getsockname()[1])
    sender = LtpSender(ps.getsockname(), tag, 1, lay, bind_addr=W1)
    out = {}

    def send():
        cpu = time.thread_time()
        out["result"] = sender.send(0, np.zeros(lay.total, dtype=np.float32), deadline_s=5.0)
        out["cpu_s"] = time.thread_time() - cpu

    thread = threading.Thread(target=send)
    try:
        thread.start()
        ps.settimeout(2)
        raw, addr = ps.recvfrom(MAX_DATAGRAM)
        first = parse_data(raw, tag, lay)
        got = np.zeros(lay.chunks, dtype=bool)
        got[first.chunk] = True
        ps.sendto(pack_ack(tag, 1, 0, 0, first.seq, lay.chunks, bitmap_of(got)), addr)
        held = time.monotonic() + 0.3
        while time.monotonic() < held:                    # the rest: read, not yet acknowledged
            ps.settimeout(max(0.001, held - time.monotonic()))
            try:
                ps.recvfrom(MAX_DATAGRAM)
            except TimeoutError:
                pass
        ps.sendto(pack_ack(tag, 1, 0, 0, 1 << 31, lay.chunks, bitmap_of(np.ones(lay.chunks, dtype=bool))), addr)
        thread.join(5)
        assert out["result"].outcome == "complete"
        assert out["cpu_s"] < 0.06, out          # spinning through the 300 ms would burn about 0.3 s
    finally:
        sender.close()
        ps.close()
