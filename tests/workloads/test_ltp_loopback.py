"""LTP over this machine's loopback (real UDP sockets, no root): a live PS receiver under hostile
datagrams, and the sender against it."""

from __future__ import annotations

import contextlib
import socket
import threading
import time

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
        while _ack_of(w1.recv(MAX_DATAGRAM), tag, 1, lay).echo_seq != 6:   # the copy is acknowledged at once
            pass
        server.stop()
        counters = server.counters()
        slot = server.slots[1]
        assert slot.iter == 1 and np.array_equal(slot.grad[0, :360], first)
        assert server.error is None and not server.thread.is_alive()
        assert counters["foreign"] + counters["rcvbuf_drops"] == 3000, counters
        expected = {"truncated": 2, "bad_magic": 1, "wrong_job": 1, "bad_rank": 1, "bad_iteration": 1,
                    "bad_offset": 2, "non_finite": 1, "oversized": 1}
        assert {k: counters.get(k, 0) for k in expected} == expected, counters
        # The test's own late copy and duplicate, and any copy a sender resent on its timer (a busy machine
        # can delay an acknowledgement past it): read after its original, each is one more of either.
        resent = sum(r.retransmissions for r in results.values())
        extra = counters.get("late", 0) + counters.get("duplicate", 0) - 2
        assert counters.get("late", 0) >= 1 and counters.get("duplicate", 0) >= 1 and 0 <= extra <= resent, counters
        expected |= {"late": counters["late"], "duplicate": counters["duplicate"]}
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


@contextlib.contextmanager
def _serving(chunks: int, deadline_s: float | None = 5.0):
    """A live PS receiver of one worker's `chunks` chunks, and that worker as a raw socket: yields (lay,
    tag, port, server, w1)."""
    lay = Layout([360 * chunks])
    port = _free_udp_port()
    tag = job_tag("train", port)
    server = LtpServer((PS, port), tag, {1: W1}, lay, EarlyClose(deadline_s=deadline_s))
    w1 = _raw(W1)
    w1.settimeout(2)
    try:
        yield lay, tag, port, server, w1
    finally:
        w1.close()
        server.stop()


def _ack_of(raw: bytes, tag: int, rank: int, lay: Layout):
    from pcnlab.workloads.ltp.wire import parse_ack

    return parse_ack(raw, tag, rank, lay)


def _answer_to(seq: int, w1, tag: int, lay: Layout):
    """The PS's acknowledgement echoing `seq`, past the pulls (NO_ECHO) it sent before: a worker silent
    MIN_PULL_S (5 ms) is pulled, and a busy machine can keep a test that long between two datagrams."""
    from pcnlab.workloads.ltp.wire import NO_ECHO

    for _ in range(16):
        ack = _ack_of(w1.recv(MAX_DATAGRAM), tag, 1, lay)
        if ack.echo_seq != NO_ECHO:
            assert ack.echo_seq == seq
            return ack
    raise AssertionError(f"no acknowledgement of datagram {seq} among 16 answers")


def _port_of(sender: LtpSender) -> int:
    return sender.sock.getsockname()[1]


@contextlib.contextmanager
def _sending(chunks: int, rtt_s: float, cwnd: float | None = None, release: threading.Event | None = None):
    """A worker's sender of `chunks` chunks, its RTT (and window) as if measured before, sending iteration
    0 in a thread to a raw socket that stands for the PS: yields (ps, tag, lay, sender, thread, out),
    out["r"] the SendResult once the send ended."""
    lay = Layout([360 * chunks])
    ps = _raw(PS)
    tag = job_tag("train", ps.getsockname()[1])
    sender = LtpSender(ps.getsockname(), tag, 1, lay, bind_addr=W1)
    sender.rtt.update(rtt_s)
    if cwnd is not None:
        sender.window.cwnd = cwnd
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(
        r=sender.send(0, np.zeros(lay.total, dtype=np.float32), 10.0, release)))
    try:
        thread.start()
        ps.settimeout(2)
        yield ps, tag, lay, sender, thread, out
    finally:
        sender.close()
        ps.close()


def test_acknowledgements_that_waited_in_a_queue_end_the_timers_backoff():
    """The PS (raw socket) holds its acknowledgements 150 ms, as a PS's host queue full of parameters
    does, while the sender's timer (RTT 2 ms) fires again and again; the late acknowledgements of the
    first transmissions are RTT samples and prove the timeouts spurious: the window comes back."""
    from pcnlab.workloads.ltp.wire import FLAG_CLOSED, bitmap_of, pack_ack, parse_data

    with _sending(8, 0.002, 4.0) as (ps, tag, lay, sender, thread, out):
        first = [parse_data(ps.recvfrom(MAX_DATAGRAM)[0], tag, lay) for _ in range(4)]
        held = time.monotonic() + 0.15
        while time.monotonic() < held:                 # the timer's retransmissions: read, not answered
            ps.settimeout(max(0.001, held - time.monotonic()))
            try:
                ps.recvfrom(MAX_DATAGRAM)
            except TimeoutError:
                pass
        mask = np.zeros(lay.chunks, dtype=bool)
        for d in first:                                # the held answers to the first four, in order
            mask[d.chunk] = True
            ps.sendto(pack_ack(tag, 1, 0, 0, d.seq, lay.chunks, bitmap_of(mask)), (W1, _port_of(sender)))
        time.sleep(0.05)
        ps.sendto(pack_ack(tag, 1, FLAG_CLOSED, 0, 0xFFFFFFFF, lay.chunks, bitmap_of(mask)), (W1, _port_of(sender)))
        thread.join(5)
        r = out["r"]
        assert r.outcome == "closed" and r.timeouts >= 2
        assert r.spurious_timeouts >= 1 and r.cwnd >= 4.0, r
        assert r.srtt_us > 20_000, r                   # the late answers were measured
        assert sender.rtt.backoff == 0
        ps.close()


def test_an_automatic_deadline_comes_from_the_rate_the_ps_measured():
    """ltp_deadline_ms: auto. A worker (raw socket) paces 24 chunks 2 ms apart: the PS measures the rate
    its gradient bytes arrived at (kernel timestamps), and the next iteration's deadline is 3 ideal
    exchanges at that rate plus the RTT the worker reports."""
    from pcnlab.workloads.ltp.earlyclose import AUTO_FACTOR, UNMEASURED_DEADLINE_S
    from pcnlab.workloads.ltp.wire import FLAG_LAST

    with _serving(24, deadline_s=None) as (lay, tag, port, server, w1):
        for it in range(2):
            for c in range(lay.chunks):
                w1.sendto(bytes(pack_data(bytearray(MAX_DATAGRAM), tag, 1, FLAG_LAST if c == lay.chunks - 1 else 0,
                                          it, 100 * it + c, 0, 360 * c, np.zeros(360, dtype=np.float32), 3000)),
                          (PS, port))
                time.sleep(0.002)
            closed = server.wait(it, 2)
            assert closed.reason == "complete"
            if it == 0:
                assert closed.stats["ltp_deadline_ms"] == UNMEASURED_DEADLINE_S * 1e3
                paced = 8 * 1440 / 0.002 / 1e6                      # Mbit/s of gradient at 2 ms a chunk
                assert 0.5 * paced < closed.stats["ltp_rate_mbps"] <= 1.1 * paced, closed.stats
                rate = closed.stats["ltp_rate_mbps"] * 1e6 / 8
            else:
                ideal = 4 * lay.total / rate
                assert closed.stats["ltp_deadline_ms"] == pytest.approx(1e3 * (AUTO_FACTOR * ideal + 0.003), rel=1e-3)
            server.release(it)


def test_a_send_is_released_when_the_caller_learns_the_other_end_has_it_all():
    """The PS's parameters reached a worker but its acknowledgements were lost: the PS learns it from
    the worker's next gradient and releases the send, which ends at once instead of at its timer."""
    release = threading.Event()                          # the PS: reads and never answers; a timer of 1.5 s
    with _sending(4, 0.5, release=release) as (ps, tag, lay, sender, thread, out):
        for _ in range(lay.chunks):
            ps.recvfrom(MAX_DATAGRAM)
        released_at = time.monotonic()
        release.set()
        thread.join(2)
        assert not thread.is_alive() and out["r"].outcome == "released"
        assert time.monotonic() - released_at < 0.1 and out["r"].timeouts == 0
