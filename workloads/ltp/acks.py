"""When the PS acknowledges a worker's datagrams (receiver.py): every second new chunk of a worker, or
ACK_DELAY_S after a lone one, and at once for its LAST datagram, a duplicate or a pull. Each
acknowledgement carries the iteration's whole bitmap and echoes the newest transmission, so one says
everything the ones it replaces would have (the sender's window grows by the chunks a bitmap newly
acknowledges). Hand-written: TCP's delayed acknowledgement is the kernel's, and no library paces a
UDP protocol's.

One acknowledgement per datagram made LTP the transport whose packets cost BMv2 most: on
ltp-synchronised-generator.yaml with a realtime switch (16 workers of 7 chunks) the switch forwarded
397 packets an iteration for LTP against 320-330 for TCP, and BMv2 used 84-93 % of a core (p95), over
the fidelity check's 90 % in three runs of four; with every second, 350 and 81-87 %, every run trusted
(measured 2026-11-27, docs/results.md).

    pacer = AckPacer()
    for ack in pacer.placed(Ack(addr, rank, it, seq), now_ns, at_once=is_last):   # send these now
        ...
    for ack in pacer.due(now_ns):                                                  # and these, later
        ...
"""

from __future__ import annotations

from dataclasses import dataclass

ACK_EVERY = 2          # a worker's new chunks are acknowledged every this many ...
ACK_DELAY_S = 0.001    # ... or this long after the first of them that waits


@dataclass(frozen=True)
class Ack:
    """The acknowledgement of a worker's datagram: where it goes, whose, which iteration, the echo."""
    dst: tuple[str, int]
    rank: int
    it: int
    seq: int


class AckPacer:
    """Per worker, the acknowledgement held back, how many datagrams it answers and since when."""

    def __init__(self, every: int = ACK_EVERY, delay_s: float = ACK_DELAY_S):
        self.every, self.delay_ns = every, int(delay_s * 1e9)
        self._held: dict[int, tuple[Ack, int, int]] = {}

    def placed(self, ack: Ack, now_ns: int, at_once: bool = False) -> list[Ack]:
        """A datagram of `ack.rank` was taken in at `now_ns`: the acknowledgements to send now (one held
        for the worker's other iteration first, then this one unless it waits for company)."""
        out, count, since = [], 0, now_ns
        held = self._held.pop(ack.rank, None)
        if held is not None:
            if held[0].it == ack.it:
                count, since = held[1], held[2]
            else:
                out.append(held[0])
        if at_once or count + 1 >= self.every:
            out.append(ack)
        else:
            self._held[ack.rank] = (ack, count + 1, since)
        return out

    def due(self, now_ns: int) -> list[Ack]:
        """The acknowledgements held ACK_DELAY_S or longer, released."""
        ranks = [r for r, (_, _, since) in self._held.items() if now_ns - since >= self.delay_ns]
        return [self._held.pop(r)[0] for r in ranks]

    def next_s(self) -> float | None:
        """When the next held acknowledgement is due (monotonic seconds), or None."""
        return min((since + self.delay_ns) / 1e9 for _, _, since in self._held.values()) if self._held else None
