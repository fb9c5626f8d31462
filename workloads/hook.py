"""The one line a user's DDP script adds to give PCN Lab every per-iteration metric of its own
workloads: `attach(model)` on its DistributedDataParallel model (examples/ddp_train_hooked.py).

An iteration starts at a training forward of the model (grad enabled, training mode) and its
communication at the first gradient bucket DDP hands to its communication hook: that moment ends the
iteration's compute (DDP overlaps the rest of backward with the all-reduce); the communication ends
when the last bucket's all-reduce has completed. Each iteration becomes one record of the testbed's
per-iteration log schema (joblog.py) in the file the launcher names (PCNLAB_LOG, torchrun.py). The
all-reduce is DDP's default one (divide by the world size, then sum, as allreduce_hook), so the
training is unchanged.

A Python communication hook makes gloo's threads run Python: each bucket's completion callback (the
`then` of its all-reduce future) and, just after it, the release of that callback, which takes the
GIL. A rank that ends within a few milliseconds of its last all-reduce, its main thread holding the
GIL, reaches interpreter shutdown first; the gloo thread then dies taking the GIL and the process
aborts ("terminate called without an active exception"; a core dump showed the gloo thread in
PythonFunctionGuard's release, the main thread in Py_FinalizeEx). Measured: 2 ranks' exits in about
120 runs of examples/ddp_train_hooked.py in containers, 2 in 10 of a script that ends right after its
last backward. So every callback is counted until released, and `drain` (at exit, while the
interpreter is whole) waits, GIL released, until gloo holds none of them. The callback's own future
(the `then`, whose value is the callback's Python result) is the other Python object a gloo thread
can free last: a core dump of the 1 abort in 110 exits that remained showed a gloo thread destroying
it (~ConcretePyObjectHolder taking the GIL) while the main thread was in Py_FinalizeEx. The hook holds
every future it hands DDP for two iterations, so the last reference goes on the training thread.

The hook listens on the job's port (PCNLAB_ANNOUNCE_PORT) for the controller's time shifts
(`mode.interleave`, announce.Shifts): a shift delays the next training forward once, and with it that
iteration's communication.

In pcn-host runs (PCNLAB_PCN_START=1) the hook announces each iteration's gradients (PCN-START,
announce.py) to the ring successor, where gloo's ring all-reduce sends them, one lead before the
communication is expected: the previous iteration's compute time after the forward began.

Outside PCN Lab (no PCNLAB_LOG in the environment) `attach` does nothing and returns None.
"""

from __future__ import annotations

import atexit
import os
import threading
import time

from pcnlab.jsonlines import Iteration
from pcnlab.workloads.announce import Announcer, Shifts, start_listener
from pcnlab.workloads.joblog import JsonLog


class IterationHook:
    """The state of one attached model: the iteration under way and its moments (monotonic ns)."""

    def __init__(self, log: JsonLog, world: int, announcer: Announcer | None, shifts: Shifts | None = None):
        self.log, self.world, self.announcer, self.shifts = log, world, announcer, shifts
        self.iter = -1
        self.compute_start = self.comm_start = 0
        self.last_compute_ns = 0
        self.bytes = 0
        self.outstanding = 0
        self.last_seen = False
        self.held = 0              # completion callbacks not yet released by gloo's threads
        # The futures handed to DDP in this iteration and the one before, held here too (see the
        # module's docstring); older ones go on the training thread at a forward, long after gloo let go
        # of them (two iterations, not a count of buckets: DDP rebuilds its buckets after the first
        # iteration, and a count would keep the first buffers alive beside the new).
        self._futures: list = []
        self._previous: list = []
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None

    def on_forward(self, module, _inputs) -> None:
        import torch

        if not (module.training and torch.is_grad_enabled()):
            return
        if self.shifts is not None:
            now = time.monotonic_ns()     # its communication comes one compute later (as the last one did)
            shift_us = self.shifts.take(self.log, self.iter + 1, now,
                                        now + self.last_compute_ns if self.last_compute_ns else None)
            if shift_us > 0:
                time.sleep(shift_us / 1e6)
        with self._lock:
            self.iter += 1
            self.compute_start, self.comm_start, self.bytes = time.monotonic_ns(), 0, 0
            self.outstanding, self.last_seen = 0, False
            self._previous, self._futures = self._futures, []
        if self.announcer is not None and self.last_compute_ns:
            expected = self.compute_start + self.last_compute_ns
            delay = max(0.0, (expected - time.monotonic_ns()) / 1e9 - self.announcer.lead_us() / 1e6)
            self._timer = threading.Timer(delay, self.announcer.before, (expected, self.iter))
            self._timer.daemon = True
            self._timer.start()

    def comm_hook(self, _state, bucket):
        import torch.distributed as dist

        with self._lock:
            if not self.comm_start:
                self.comm_start = time.monotonic_ns()
                self.last_compute_ns = self.comm_start - self.compute_start
            self.outstanding += 1
            self.bytes += bucket.buffer().numel() * bucket.buffer().element_size()
            if bucket.is_last():
                self.last_seen = True
            self.held += 1
        future = dist.all_reduce(bucket.buffer().div_(self.world), async_op=True).get_future()
        result = future.then(_Completion(self))
        self._futures.append(result)
        return result

    def done(self) -> None:
        """One bucket's all-reduce completed (on a gloo thread); the last one ends the iteration."""
        with self._lock:
            self.outstanding -= 1
            if self.last_seen and self.outstanding == 0 and self.comm_start:
                end = time.monotonic_ns()
                self.log.iteration(Iteration(
                    iter=self.iter, compute_start_ns=self.compute_start, compute_end_ns=self.comm_start,
                    comm_start_ns=self.comm_start, comm_end_ns=end, bytes_sent=self.bytes, bytes_recv=self.bytes,
                    extra={"announce_ns": self.announcer.last_ns} if self.announcer else {}))
                self.comm_start = 0

    def released(self) -> None:
        with self._lock:
            self.held -= 1

    def drain(self, timeout_s: float = 2.0, grace_s: float = 0.02) -> None:
        """Wait (sleeping, so gloo's threads may take the GIL) until they hold none of the callbacks, and
        `grace_s` more for the rest of each callback's teardown (the GIL may pass to this thread inside
        the release, before the callback's future is let go)."""
        deadline = time.monotonic() + timeout_s
        while self.held > 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(grace_s)


class _Completion:
    """A bucket's completion callback; its release (on whichever thread frees it) is counted."""

    __slots__ = ("hook",)

    def __init__(self, hook: IterationHook):
        self.hook = hook

    def __call__(self, future):
        self.hook.done()
        return future.value()[0]

    def __del__(self):
        self.hook.released()


def attach(model) -> IterationHook | None:
    """Log `model`'s iterations (a torch DistributedDataParallel) for PCN Lab, and announce them in
    pcn-host runs; nothing outside PCN Lab. Call it once, before training."""
    path = os.environ.get("PCNLAB_LOG")
    if not path:
        return None
    import torch.distributed as dist

    rank, world = dist.get_rank(), dist.get_world_size()
    job, host = os.environ.get("PCNLAB_JOB", "job"), os.environ.get("PCNLAB_HOST", "")
    log = JsonLog(path, job=job, host=host, role="worker", rank=rank,
                  config={"kind": "torchrun", "rank": rank, "world": world, "hook": "ddp"})
    atexit.register(log.close)
    announcer, shifts = None, Shifts()
    port = int(os.environ.get("PCNLAB_ANNOUNCE_PORT") or 0)
    if port:   # absorbs the predecessor's announcements; takes the controller's shifts
        start_listener(log, "0.0.0.0", port, shifts)
    if os.environ.get("PCNLAB_PCN_START") == "1":
        announcer = Announcer(log, [os.environ["PCNLAB_ANNOUNCE_TO"]], port, job, rank,
                              sum(p.numel() * p.element_size() for p in model.parameters()),
                              float(os.environ.get("PCNLAB_PCN_LEAD_US") or 0))
    hook = IterationHook(log, world, announcer, shifts)
    atexit.register(hook.drain)         # runs before log.close (atexit is last in, first out)
    model.register_forward_pre_hook(hook.on_forward)
    model.register_comm_hook(None, hook.comm_hook)
    return hook
