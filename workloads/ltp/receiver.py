"""The PS's LTP receiver: a thread that reads every datagram, places the chunks, acknowledges them and
closes iterations (Early Close); the PS's main thread waits for each iteration and averages it.

    server = LtpServer(("10.0.0.1", port), tag, {1: "10.0.0.2", 2: "10.0.0.3"}, layout, EarlyClose(0.5))
    closed = server.wait(it, timeout_s=120)   # a Closed: the gradients (workers x elements), chunk masks, stats
    ... bubble_fill(closed.grad, closed.mask, layout) ...
    server.release(it)                        # its buffers may now take iteration it + 2
    server.stop()

Two iterations are open at most: the oldest one the main thread has not released, and the next
(a worker that already has its parameters sends the next iteration while the PS is still sending
the others theirs). Every datagram passes, in order: its source address is one of the job's workers
(else `foreign`, dropped before it is parsed, so a flood costs little), the checks of wire.parse_data,
its rank belongs to that address (`bad_rank`), its iteration is one of the two open ones (`late` for
older ones, which get a CLOSE back so their sender stops; `bad_iteration` for others), and its chunk
has not arrived before (`duplicate`, acknowledged again). Only then are its bytes copied into the
iteration's buffer, at the place its (tensor, offset) names and with exactly its length: no datagram
can write outside its chunk, nor into an iteration other than its own, nor non-finite values.
Datagrams the socket's buffer overflowed on are counted too (SO_RXQ_OVFL: `rcvbuf_drops`).

Acknowledgements: every second new chunk of a worker, its LAST, duplicates and pulls at once (acks.py).

The receiver-driven pull: once a worker's LAST datagram is in (it has sent every chunk once), every
acknowledgement the PS sends it while chunks are missing is a PULL (wire.py): what the bitmap lacks
and is older than the datagram acknowledged is lost, and the worker sends it again first, without
waiting for its own timers. A worker that has sent part of its gradient and then falls silent for
PULL_RTTS of its smoothed RTT (at least MIN_PULL_S), LAST in or not, is pulled on the PS's own timer
(NO_ECHO: resend all that is missing): on ltp-incast.yaml the iterations that reached the deadline
had a worker whose last transmissions before its LAST were lost, waiting for its retransmission
timer (1.5 x the recent peak RTT: 150 ms and more behind the PS's parameters). The PS also
measures how fast its port delivers gradient bytes (a chunk's median size over the median gap
between new chunks, by the kernel's arrival timestamps: robust to bunched arrivals, which made the
fastest 16 chunks read up to 2.3 x the port's 100 Mbit/s on ltp-synchronised.yaml and took the
deadline to its 10 ms floor, and to the idle gaps of workers that start apart), from which an
automatic deadline is derived (earlyclose.py).
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time

import numpy as np

from pcnlab.workloads.ltp.acks import Ack, AckPacer
from pcnlab.workloads.ltp.earlyclose import COMPLETE, EarlyClose
from pcnlab.workloads.ltp.slot import Closed, Slot
from pcnlab.workloads.ltp.wire import (FLAG_CLOSED, FLAG_PULL, MAX_DATAGRAM, NO_ECHO, REASONS, Layout, Rejected,
                                       bitmap_of, pack_ack, parse_data)

SO_RXQ_OVFL = getattr(socket, "SO_RXQ_OVFL", 40)
SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)     # its control message is SCM_TIMESTAMPNS, the same number
PULL_RTTS = 2.0        # a worker whose LAST is in, silent this many smoothed RTTs, is pulled again
MIN_PULL_S = 0.005
RECEIVE_BUFFER = 8 << 20
DRAIN_S = 0.1          # on stop: datagrams still arriving are read (and counted) this long


class LtpServer:
    """Receives one PS shard's gradients from every worker of the job."""

    def __init__(self, bind: tuple[str, int], tag: int, workers: dict[int, str], layout: Layout,
                 policy: EarlyClose, dead_after: int = 3):
        self.tag, self.layout, self.policy = tag, layout, policy
        self.ranks = sorted(workers)
        self.row = {r: i for i, r in enumerate(self.ranks)}
        self.rank_ip = dict(workers)
        self.ips = set(workers.values())
        self.dead_after = dead_after
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
        except OSError:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RXQ_OVFL, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.sock.bind(bind)
        self.sock.setblocking(False)
        self.slots = [Slot(len(self.ranks), layout) for _ in range(2)]
        self.slots[0].reset(0)
        self.slots[1].reset(1)
        self.base = 0
        self.peer: dict[int, tuple[str, int]] = {}
        self.rejected = {r: 0 for r in REASONS}
        self.read_datagrams = 0                # every datagram read from the socket, whatever it was
        self.rcvbuf_drops = 0
        self.silent = {r: 0 for r in self.ranks}      # iterations closed in a row without a word from it
        self.heard: set[int] = set()
        self.acks = AckPacer()
        self.error: BaseException | None = None
        self.cond = threading.Condition()
        self._stop = threading.Event()
        self._buf = bytearray(MAX_DATAGRAM + 1)
        self.thread = threading.Thread(target=self._run, name="ltp-receiver", daemon=True)
        self.thread.start()

    # --- the main thread's side -----------------------------------------------------------------

    def wait(self, it: int, timeout_s: float) -> Closed:
        """Block until iteration `it` is closed; its gradients, masks and statistics."""
        if it != self.base:
            raise ValueError(f"iteration {it} waited for while {self.base} is the oldest open one")
        slot = self.slots[it % 2]
        deadline = time.monotonic() + timeout_s
        with self.cond:
            while slot.reason is None and self.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no worker's gradient of iteration {it} arrived within {timeout_s:g} s")
                self.cond.wait(min(left, 0.5))
            if self.error is not None:
                raise self.error
            return Closed(it, slot.reason, slot.grad, slot.mask, self._stats(slot))

    def release(self, it: int) -> None:
        """The main thread is done with iteration `it`: its slot takes it + 2."""
        with self.cond:
            if it != self.base:
                raise ValueError(f"release of iteration {it} while {self.base} is the oldest open one")
            self.slots[it % 2].reset(it + 2)
            self.base = it + 1

    def stop(self) -> None:
        """Read what is still arriving for DRAIN_S (so every datagram is counted), then stop."""
        time.sleep(DRAIN_S)
        self._stop.set()
        self.thread.join(2.0)
        self.sock.close()

    def counters(self) -> dict:
        with self.cond:
            return {"read": self.read_datagrams, "rcvbuf_drops": self.rcvbuf_drops,
                    **{k: v for k, v in self.rejected.items() if v}}

    # --- the receiving thread --------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with self.cond:
                    wake = self._next_check()
                timeout = 0.05 if wake is None else min(0.05, max(0.0, wake - time.monotonic()))
                readable, _, _ = select.select([self.sock], [], [], timeout)
                if readable:
                    self._drain()
                with self.cond:
                    now_ns = time.monotonic_ns()
                    for ack in self.acks.due(now_ns):
                        self._acknowledge(ack, 0)
                    self._check_close(now_ns)
        except BaseException as exc:  # noqa: BLE001 -- handed to the main thread, which fails the rank
            with self.cond:
                self.error = exc
                self.cond.notify_all()

    def _next_check(self) -> float | None:
        times = [t for s in self.slots if s.reason is None
                 for t in [self.policy.next_check(*self._times(s), s.deadline_s), self._next_pull(s)]
                 if t is not None]
        times += [t for t in [self.acks.next_s()] if t is not None]
        return min(times) if times else None

    @staticmethod
    def _times(slot: Slot) -> tuple[float | None, float | None, float | None]:
        first = slot.first_ns / 1e9 if slot.first_ns is not None else None
        theta = slot.theta_ns / 1e9 if slot.theta_ns is not None else None
        return first, theta, slot.grace_s

    @staticmethod
    def _waiting(slot: Slot) -> np.ndarray:
        """The rows that have sent part of their gradient and not all of it: what a pull is for."""
        return (slot.heard_ns > 0) & ~slot.mask.all(axis=1)

    @staticmethod
    def _pull_due_ns(slot: Slot, row: int) -> float:
        """When a silent worker is pulled: PULL_RTTS of its smoothed RTT (at least MIN_PULL_S) after its
        latest datagram or pull."""
        return slot.heard_ns[row] + 1e9 * max(MIN_PULL_S, PULL_RTTS * slot.row_srtt[row])

    def _next_pull(self, slot: Slot) -> float | None:
        rows = np.flatnonzero(self._waiting(slot))
        return min(self._pull_due_ns(slot, r) for r in rows) / 1e9 if len(rows) else None

    def _pull_silent(self, slot: Slot, now_ns: int) -> None:
        """Pull (NO_ECHO) from each worker whose gradient is partly in and whose pull is due."""
        for row in np.flatnonzero(self._waiting(slot)):
            rank = self.ranks[row]
            if rank in self.peer and now_ns >= self._pull_due_ns(slot, row):
                self._send_ack(self.peer[rank], rank, FLAG_PULL, slot.iter, NO_ECHO, slot.mask[row])
                slot.heard_ns[row] = now_ns
                slot.pulls += 1

    def _drain(self) -> None:
        anc = socket.CMSG_SPACE(4) + socket.CMSG_SPACE(16)
        for _ in range(512):
            try:
                n, ancdata, _, src = self.sock.recvmsg_into([self._buf], anc)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                continue  # an ICMP error queued on the socket (a worker gone): nothing to read
            now_ns = time.monotonic_ns()
            kernel_ns = now_ns
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == SO_RXQ_OVFL and len(data) >= 4:
                    self.rcvbuf_drops = struct.unpack("=I", data[:4])[0]
                elif level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
                    sec, nsec = struct.unpack("=qq", data[:16])
                    kernel_ns = sec * 1_000_000_000 + nsec
            with self.cond:
                self.read_datagrams += 1
                self._datagram(memoryview(self._buf)[:n], src, now_ns, kernel_ns)

    def _reject(self, reason: str) -> None:
        self.rejected[reason] += 1

    def _datagram(self, datagram: memoryview, src: tuple[str, int], now_ns: int, kernel_ns: int) -> None:
        if src[0] not in self.ips:
            self._reject("foreign")
            return
        try:
            data = parse_data(datagram, self.tag, self.layout)
        except Rejected as exc:
            self._reject(exc.reason)
            return
        if self.rank_ip.get(data.rank) != src[0]:
            self._reject("bad_rank")
            return
        row = self.row[data.rank]
        self.heard.add(data.rank)
        if data.iter < self.base or (data.iter <= self.base + 1 and self.slots[data.iter % 2].reason is not None):
            self._reject("late")
            slot = self.slots[data.iter % 2]
            mask = slot.mask[row] if slot.iter == data.iter else np.zeros(self.layout.chunks, dtype=bool)
            self._send_ack(src, data.rank, FLAG_CLOSED, data.iter, data.seq, mask)
            return
        if data.iter > self.base + 1:
            self._reject("bad_iteration")
            return
        slot = self.slots[data.iter % 2]
        self.peer[data.rank] = src
        seq = data.seq
        if slot.seq_min[row] < 0:
            slot.seq_min[row] = seq
        slot.seq_min[row] = min(slot.seq_min[row], seq)
        slot.seq_max[row] = max(slot.seq_max[row], seq)
        slot.seq_count[row] += 1
        slot.srtt_s = max(slot.srtt_s, data.srtt_us / 1e6)
        slot.row_srtt[row] = data.srtt_us / 1e6
        slot.heard_ns[row] = now_ns
        slot.done[row] |= data.last
        if slot.first_ns is None:
            slot.first_ns = now_ns
            slot.deadline_s = self.policy.deadline_for(4 * self.layout.total * len(self.ranks), slot.srtt_s)
        duplicate = bool(slot.mask[row, data.chunk])
        if duplicate:
            self._reject("duplicate")
            slot.duplicates += 1
        else:
            start = int(self.layout.start[data.chunk])
            slot.grad[row, start:start + data.payload.size] = data.payload
            slot.mask[row, data.chunk] = True
            slot.elements[row] += data.payload.size
            slot.datagrams += 1
            slot.arrived(kernel_ns, 4 * data.payload.size)
        pull = bool(slot.done[row]) and not slot.mask[row].all()
        slot.pulls += pull
        for ack in self.acks.placed(Ack(src, data.rank, data.iter, data.seq), now_ns, pull or data.last or duplicate):
            self._acknowledge(ack, FLAG_PULL if pull and ack.seq == data.seq else 0)
        self._check_close(now_ns)

    def _acknowledge(self, ack: Ack, flags: int) -> None:
        """Send `ack` with its iteration's bitmap as it is now (none if that slot took another iteration)."""
        slot = self.slots[ack.it % 2]
        if slot.iter == ack.it:
            self._send_ack(ack.dst, ack.rank, flags, ack.it, ack.seq, slot.mask[self.row[ack.rank]])

    def _send_ack(self, dst: tuple[str, int], rank: int, flags: int, it: int, echo: int, mask: np.ndarray) -> None:
        try:
            self.sock.sendto(pack_ack(self.tag, rank, flags, it, echo, self.layout.chunks, bitmap_of(mask)), dst)
        except (BlockingIOError, OSError):
            pass  # an acknowledgement lost here is like one lost on the wire: the next one says it all

    def _check_close(self, now_ns: int) -> None:
        for slot in self.slots:
            if slot.reason is not None or slot.iter < self.base:
                continue
            if slot.theta_ns is None and slot.first_ns is not None:
                slot.theta = self.policy.theta
                if self.policy.past_theta(slot.elements, self.layout.total, slot.theta):
                    slot.theta_ns = now_ns
                    slot.grace_s = self.policy.grace_s(4 * int(slot.elements.sum()), 4 * self.layout.total *
                                                       len(self.ranks), slot.first_ns / 1e9, now_ns / 1e9,
                                                       slot.srtt_s)
            reason = self.policy.decide(slot.complete, *self._times(slot), now_ns / 1e9, slot.deadline_s,
                                        all_in=bool(slot.done.all()))
            if reason is not None:
                self._close(slot, reason, now_ns)
            else:
                self._pull_silent(slot, now_ns)

    def _close(self, slot: Slot, reason: str, now_ns: int) -> None:
        slot.reason, slot.close_ns = reason, now_ns
        self.policy.learn(slot.loss_rate(), slot.port_rate)
        for rank in self.ranks:
            row = self.row[rank]
            self.silent[rank] = 0 if rank in self.heard else self.silent[rank] + 1
            if self.silent[rank] >= self.dead_after:
                self.error = ConnectionError(f"worker rank {rank} ({self.rank_ip[rank]}) sent nothing for "
                                             f"{self.silent[rank]} iterations: it is gone")
            if reason != COMPLETE and rank in self.peer and not slot.mask[row].all():
                self._send_ack(self.peer[rank], rank, FLAG_CLOSED, slot.iter, NO_ECHO, slot.mask[row])
        self.heard.clear()
        self.cond.notify_all()

    def _stats(self, slot: Slot) -> dict:
        total = 4 * self.layout.total
        received = 4 * slot.elements
        early = slot.reason != COMPLETE
        rate = slot.port_rate
        return {
            "ltp_close": slot.reason, "early_close": slot.reason if early else None,
            "early_close_ns": slot.close_ns if early else None, "ltp_first_ns": slot.first_ns,
            "ltp_close_ns": slot.close_ns, "ltp_threshold": round(slot.theta, 4),
            "ltp_loss_estimate": round(self.policy.loss, 5), "ltp_loss_rate": round(slot.loss_rate(), 5),
            "gradient_bytes": total * len(self.ranks), "bytes_recv": int(received.sum()),
            "bytes_lost": int(total * len(self.ranks) - received.sum()),
            "delivered_fraction": float(received.sum() / (total * len(self.ranks))),
            "delivered_by_rank": {str(r): round(float(received[self.row[r]] / total), 5) for r in self.ranks},
            "ltp_datagrams": slot.datagrams, "ltp_duplicates": slot.duplicates, "ltp_pulls": slot.pulls,
            "ltp_deadline_ms": round(slot.deadline_s * 1e3, 3) if slot.deadline_s is not None else None,
            "ltp_rate_mbps": round(8 * rate / 1e6, 3) if rate else None,
            "ltp_transmissions_seen": int(slot.seq_count.sum()),
            "ltp_counters": {"read": self.read_datagrams, "rcvbuf_drops": self.rcvbuf_drops,
                             **{k: v for k, v in self.rejected.items() if v}},
        }
