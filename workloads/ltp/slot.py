"""One iteration at the PS's LTP receiver (receiver.py): its gradient buffers, which chunks arrived,
and what the receiver measures of it (arrivals, sequence numbers, the port's rate); and `Closed`, an
iteration as the PS's main thread gets it."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pcnlab.workloads.ltp.wire import Layout


@dataclass
class Closed:
    """One closed iteration, as the main thread gets it (valid until release)."""

    iter: int
    reason: str                    # complete | threshold | deadline
    grad: np.ndarray               # float32 (workers, elements): what arrived (anything elsewhere)
    mask: np.ndarray               # bool (workers, chunks): the chunks that arrived
    stats: dict = field(default_factory=dict)


class Slot:
    """One open iteration's buffers and bookkeeping."""

    def __init__(self, workers: int, layout: Layout):
        self.grad = np.zeros((workers, layout.total), dtype=np.float32)
        self.mask = np.zeros((workers, layout.chunks), dtype=bool)
        self.elements = np.zeros(workers, dtype=np.int64)
        self.layout = layout
        self.reset(-1)

    def reset(self, it: int) -> None:
        self.iter = it
        self.mask[:] = False
        self.elements[:] = 0
        self.first_ns: int | None = None
        self.theta_ns: int | None = None
        self.theta = 1.0
        self.grace_s: float | None = None
        self.reason: str | None = None
        self.close_ns: int | None = None
        self.datagrams = 0
        self.duplicates = 0
        self.srtt_s = 0.0
        self.deadline_s: float | None = None
        self.pulls = 0
        n = len(self.elements)
        self.done = np.zeros(n, dtype=bool)          # the worker's LAST datagram is in
        self.heard_ns = np.zeros(n, dtype=np.int64)  # its latest datagram (or the PS's latest pull)
        self.row_srtt = np.zeros(n)
        self.last_arrival_ns: int | None = None      # the kernel's arrival time of the latest new chunk
        self.gaps_ns: list[int] = []                 # between consecutive new chunks
        self.sizes: list[int] = []                   # their gradient bytes
        self.seq_min = np.full(n, -1, dtype=np.int64)
        self.seq_max = np.full(n, -1, dtype=np.int64)
        self.seq_count = np.zeros(n, dtype=np.int64)

    @property
    def complete(self) -> bool:
        return bool(self.mask.all())

    def arrived(self, kernel_ns: int, nbytes: int) -> None:
        """A new chunk of `nbytes` arrived at `kernel_ns` (the kernel's clock)."""
        if self.last_arrival_ns is not None:
            self.gaps_ns.append(kernel_ns - self.last_arrival_ns)
            self.sizes.append(nbytes)
        self.last_arrival_ns = kernel_ns

    @property
    def port_rate(self) -> float | None:
        """The rate the port delivered this iteration's gradient bytes at (bytes/s; None: not measured)."""
        gap = float(np.median(self.gaps_ns)) if self.gaps_ns else 0.0
        return float(np.median(self.sizes)) / (gap / 1e9) if gap > 0 else None

    def loss_rate(self) -> float:
        """Transmissions missing among each worker's consecutive sequence numbers of this iteration."""
        seen = self.seq_max >= 0
        span = int((self.seq_max[seen] - self.seq_min[seen] + 1).sum())
        return (span - int(self.seq_count[seen].sum())) / span if span else 0.0
