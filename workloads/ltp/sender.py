"""A worker's LTP sender: one iteration's gradient to one PS shard, out of order, as datagrams.

    sender = LtpSender(("10.0.0.1", port), tag, rank, layout, seed=0)
    result = sender.send(it, flat_gradient, deadline_s=0.5)     # a SendResult: what went, how it ended

Every iteration the chunks go out in a fresh seeded permutation (per worker and iteration): a burst of
losses at the switch then hits different parts of each worker's gradient, so the PS's Bubble
Filling almost always has other workers' values for a lost chunk. The window (ratecontrol.py) bounds the
transmissions outstanding; the PS acknowledges every second datagram (receiver.py) with the iteration's
whole bitmap, so chunks arrive and are acknowledged in any order (no head-of-line blocking), and the
window grows by the chunks a bitmap newly acknowledges, however many that is. A transmission is lost
when one sent later was acknowledged and a reordering window has passed (RACK), or when the
retransmission timer fires, or when the PS pulls it (a PULL: once the PS has this worker's LAST
datagram, sent when every chunk has gone out once, it names what is missing and the newest
transmission it got, and every transmission older than that is lost); its chunk is sent again
first, but only while the iteration is open: the sender stops at the PS's CLOSE, when every chunk is
acknowledged, or at its own deadline (the PS's hard deadline counted from this worker's own start,
which is never earlier than the PS's).

Every transmission of the iteration keeps its sending time until it is acknowledged, also after it
was declared lost: its acknowledgement is an RTT sample (every transmission has its own sequence
number, so there is no retransmission ambiguity) and ends the timer's backoff, and one that a
timeout declared lost makes the timeout spurious and gives back the window (ratecontrol.py). Without
that, measured on ltp-incast.yaml (commit 764d628), a worker whose acknowledgements waited behind
the PS's parameters in its host queue timed out spuriously, took no RTT sample from the late
acknowledgements, and backed off 2-3 times with a window of one: 3-6 of its 27 chunks arrived in
the 300 ms deadline, which closed 55 of 100 iterations.

The socket is connected to the PS's address, so the kernel drops datagrams from anyone else; an
acknowledgement that still fails its checks (wire.parse_ack) is counted by reason and dropped.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from pcnlab.workloads.ltp.ratecontrol import AimdWindow, RttEstimator
from pcnlab.workloads.ltp.wire import (DATA_HEADER, FLAG_LAST, FLAG_RETRANSMISSION, MAGIC, MAX_DATAGRAM, NO_ECHO,
                                       VERSION, DATA, Layout, Rejected, mask_of, parse_ack)

SOCKET_BUFFER = 1 << 20
STOP_POLL_S = 0.005               # how often a send that may be released (`stop`) looks


@dataclass
class SendResult:
    iter: int
    outcome: str                  # complete | closed (the PS closed it) | deadline (this sender gave up)
                                  # | released (the caller learned the other end has it all: `stop`)
    chunks: int
    acked_chunks: int
    datagrams: int                # transmissions, retransmissions included
    retransmissions: int
    bytes_sent: int               # UDP payload bytes of every transmission (headers included)
    gradient_bytes: int           # the gradient's own bytes (4 per element)
    acked_bytes: int              # gradient bytes the PS acknowledged
    start_ns: int
    end_ns: int
    cwnd: float
    srtt_us: int
    loss_events: int
    timeouts: int
    rejected: dict = field(default_factory=dict)
    pulled: int = 0               # chunks sent again because the PS pulled them
    spurious_timeouts: int = 0    # timeouts undone: a transmission they declared lost was acknowledged

    def log_fields(self) -> dict:
        return {"ltp_outcome": self.outcome, "ltp_chunks": self.chunks, "ltp_acked_chunks": self.acked_chunks,
                "ltp_datagrams": self.datagrams, "ltp_retransmissions": self.retransmissions,
                "ltp_gradient_bytes": self.gradient_bytes, "ltp_acked_bytes": self.acked_bytes,
                "ltp_cwnd": round(self.cwnd, 2), "srtt_us": self.srtt_us, "ltp_loss_events": self.loss_events,
                "ltp_timeouts": self.timeouts, "ltp_spurious_timeouts": self.spurious_timeouts,
                "ltp_pulled": self.pulled, "ltp_rejected": dict(self.rejected)}


class LtpSender:
    """Sends one worker's gradients to one PS shard, iteration after iteration; the window and the RTT
    estimate carry over between iterations."""

    def __init__(self, dest: tuple[str, int], tag: int, rank: int, layout: Layout, seed: int = 0,
                 bind_addr: str = "", idle_timeout_s: float = 60.0, min_window: int = 0):
        self.dest = dest
        self.min_window = min_window     # transmissions always allowed outstanding (see workloads/ltp_ps.py)
        self.tag, self.rank, self.layout, self.seed = tag, rank, layout, seed
        self.idle_timeout_s = idle_timeout_s
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER)
        self.sock.bind((bind_addr, 0))
        self.sock.connect(dest)
        self.sock.setblocking(False)
        self.rtt = RttEstimator()
        self.window = AimdWindow()
        self.seq = 0
        self.rejected: dict[str, int] = {}     # acknowledgements dropped, by reason (cumulative)
        self._header = bytearray(DATA_HEADER.size)

    def close(self) -> None:
        self.sock.close()

    def _reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1

    def _transmit(self, raw: bytes, it: int, chunk: int, flags: int) -> None:
        lay = self.layout
        start, count = int(lay.start[chunk]), int(lay.count[chunk])
        DATA_HEADER.pack_into(self._header, 0, MAGIC, VERSION, DATA, self.tag, self.rank,
                              flags, 0, it & 0xFFFFFFFF, self.seq & 0xFFFFFFFF,
                              int(lay.tensor[chunk]), count, int(lay.offset[chunk]),
                              min(self.rtt.srtt_us, 0xFFFFFFFF))
        while True:
            try:
                self.sock.send(bytes(self._header) + raw[4 * start:4 * (start + count)])
                return
            except BlockingIOError:           # the socket's send buffer is full: wait for room
                select.select([], [self.sock], [], 0.01)
            except ConnectionRefusedError:    # an ICMP unreachable from an earlier datagram: the PS is
                pass                          # not listening yet (or is gone: the idle timeout decides)

    def send(self, it: int, flat: np.ndarray, deadline_s: float, stop: threading.Event | None = None) -> SendResult:
        """Send iteration `it`'s gradient (`flat`: the layout's tensors, flattened, float32) until every
        chunk is acknowledged, the PS closes the iteration, `deadline_s` has passed, or `stop` is set (the
        caller learned otherwise that the other end has everything: outcome released)."""
        lay = self.layout
        raw = np.ascontiguousarray(flat, dtype="<f4").tobytes()
        if len(raw) != 4 * lay.total:
            raise ValueError(f"gradient of {len(raw) // 4} elements for a layout of {lay.total}")
        start_ns = time.monotonic_ns()
        start = start_ns / 1e9
        self.rtt.backoff = 0   # a new iteration's data: the last one's timer backoff does not carry over
        self.window.settle()   # nor a timeout of the last send that no answer decided
        give_up = start + deadline_s
        rng = np.random.default_rng([self.seed, self.rank, it])
        pending = deque(int(c) for c in rng.permutation(lay.chunks))
        acked = np.zeros(lay.chunks, dtype=bool)
        ever_sent = np.zeros(lay.chunks, dtype=bool)
        unsent = lay.chunks                                 # chunks not sent once yet (LAST when 0)
        outstanding: dict[int, tuple[int, float]] = {}      # seq -> (chunk, sent at)
        sent_at: dict[int, float] = {}                      # seq -> sent at, until acknowledged
        timed_out: set[int] = set()                         # seqs the last timeout declared lost
        datagrams = retransmissions = sent_bytes = pulled = 0
        loss_events0, timeouts0, undone0 = self.window.reductions, self.window.timeouts, self.window.undone
        rack_xmit, rack_rtt = -1.0, 0.0                     # newest delivered transmission: sent at, its RTT
        last_heard = time.monotonic()
        outcome = ""
        buf = bytearray(MAX_DATAGRAM)
        while not outcome:
            if stop is not None and stop.is_set():
                outcome = "released"
                break
            if not outstanding and not pending:       # nothing in flight, nothing queued: send what is missing
                pending.extend(int(c) for c in np.flatnonzero(~acked))
            while len(outstanding) < max(self.window.allowed(), self.min_window) and pending:
                c = pending.popleft()
                if acked[c]:
                    continue
                again = bool(ever_sent[c])
                if not again:
                    ever_sent[c] = True
                    unsent -= 1
                self._transmit(raw, it, c, (FLAG_RETRANSMISSION if again else 0) | (0 if unsent else FLAG_LAST))
                retransmissions += int(again)
                now = time.monotonic()
                outstanding[self.seq] = (c, now)
                sent_at[self.seq] = now
                self.seq += 1
                datagrams += 1
                sent_bytes += DATA_HEADER.size + 4 * int(lay.count[c])
            now = time.monotonic()
            if now >= give_up:
                outcome = "deadline"
                break
            rto = self.rtt.rto()
            wake = give_up
            if outstanding:
                oldest = next(iter(outstanding.values()))[1]
                wake = min(wake, oldest + rto)
                # RACK can only declare lost what was sent before the newest delivered transmission; the
                # oldest outstanding, sent after it, is waiting in a queue and has no RACK deadline (taking
                # one spun this loop at 100 % CPU for as long as an incast queue held the datagrams).
                if oldest < rack_xmit:
                    wake = min(wake, oldest + rack_rtt + self.rtt.reorder_window())
            if stop is not None:
                wake = min(wake, now + STOP_POLL_S)
            readable, _, _ = select.select([self.sock], [], [], max(0.0, wake - now))
            now = time.monotonic()
            if readable:
                while True:
                    try:
                        n = self.sock.recv_into(buf)
                    except (BlockingIOError, InterruptedError):
                        break
                    except ConnectionRefusedError:
                        continue
                    try:
                        ack = parse_ack(memoryview(buf)[:n], self.tag, self.rank, lay)
                    except Rejected as exc:
                        self._reject(exc.reason)
                        continue
                    if ack.iter != it:
                        self._reject("late")
                        continue
                    last_heard = now
                    got = mask_of(ack.bitmap, lay.chunks)
                    newly = int((got & ~acked).sum())
                    if newly:
                        acked |= got
                        if pending:  # grow only while the window, not the gradient's end, limits sending
                            self.window.on_ack(newly)
                    sent = sent_at.pop(ack.echo_seq, None)
                    if sent is not None:       # the first acknowledgement of this transmission
                        self.rtt.update(now - sent)
                        if sent > rack_xmit:
                            rack_xmit, rack_rtt = sent, now - sent
                        outstanding.pop(ack.echo_seq, None)
                        if ack.echo_seq in timed_out:     # the first answer after a timeout decides:
                            self.window.undo_timeout()    # one it declared lost was only delayed
                        else:
                            self.window.settle()
                        timed_out.clear()
                    if ack.closed:
                        outcome = "closed"
                    elif ack.pull:
                        pulled += self._pulled(ack.echo_seq, outstanding, acked, pending)
                if acked.all():
                    outcome = "complete"
                if outcome:
                    break
                for seq in [s for s, (c, _) in outstanding.items() if acked[c]]:
                    del outstanding[seq]
            elif now - last_heard > self.idle_timeout_s:
                raise ConnectionError(f"no acknowledgement from the PS at {self.dest[0]}:{self.dest[1]} for "
                                      f"{self.idle_timeout_s:.0f} s")
            declared = self._detect_losses(outstanding, acked, pending, now, rack_xmit, rack_rtt)
            if declared and not timed_out:   # the first of consecutive timeouts, whose window an undo restores
                timed_out = declared
        end_ns = time.monotonic_ns()
        acked_elems = int(lay.count[acked].sum())
        return SendResult(it, outcome, lay.chunks, int(acked.sum()), datagrams, retransmissions, sent_bytes,
                          4 * lay.total, 4 * acked_elems, start_ns, end_ns, self.window.cwnd, self.rtt.srtt_us,
                          self.window.reductions - loss_events0, self.window.timeouts - timeouts0,
                          dict(self.rejected), pulled, self.window.undone - undone0)

    def _pulled(self, newest: int, outstanding: dict, acked: np.ndarray, pending: deque) -> int:
        """The PS pulled what it lacks: every transmission older than `newest` (the newest it got; for
        NO_ECHO, the PS's pull of a silent worker, every one sent at least the minimum RTT ago: a newer
        one cannot have reached the PS before the pull left it) of a chunk still missing is lost. Its
        chunk goes to the front of the queue, once; a chunk already queued stays where it is. Returns
        the chunks queued."""
        now = time.monotonic()
        settled = now - (self.rtt.min_rtt or 0.0)
        lost = [seq for seq, (c, t) in outstanding.items()
                if not acked[c] and (seq < newest if newest != NO_ECHO else t <= settled)]
        if not lost:
            return 0
        self.window.on_loss(lost[0], self.seq - 1)
        queued = set(pending)
        chunks = []
        for seq in lost:
            c, _ = outstanding.pop(seq)
            if c not in queued:
                queued.add(c)
                chunks.append(c)
        pending.extendleft(reversed(chunks))
        return len(chunks)

    def _detect_losses(self, outstanding: dict, acked: np.ndarray, pending: deque, now: float,
                       rack_xmit: float, rack_rtt: float) -> set[int]:
        """RACK: a transmission sent before the newest acknowledged one is lost once a reordering window
        past that one's RTT has gone by; every transmission is lost when the oldest has waited an RTO.
        Lost chunks still unacknowledged go to the front of the queue. Returns the transmissions a
        timeout declared lost (none when RACK did)."""
        if not outstanding:
            return set()
        reorder = self.rtt.reorder_window()
        rto = self.rtt.rto()
        oldest = next(iter(outstanding.values()))[1]
        timed_out = now - oldest >= rto
        lost = [(seq, t) for seq, (_, t) in outstanding.items()
                if timed_out and now - t >= rto or (t < rack_xmit and now - t >= rack_rtt + reorder)]
        if not lost:
            return set()
        if timed_out:
            self.window.on_timeout(self.seq - 1)
            self.rtt.timed_out()
        for seq, _ in reversed(lost):
            c, _ = outstanding.pop(seq)
            if not timed_out:
                self.window.on_loss(seq, self.seq - 1)
            if not acked[c]:
                pending.appendleft(c)
        # Only those that waited the RTO: one RACK found lost in the same pass is not the timeout's to undo.
        return {seq for seq, t in lost if now - t >= rto} if timed_out else set()
