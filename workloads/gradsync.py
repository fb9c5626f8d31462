"""Compressed gradient exchange for the PyTorch jobs: what ps.py and ring.py call when a job has
`compression` (compression.py: the codecs and the message format; netsense.py: the adaptive policy
choosing a level).

Parameter server (one WorkerSync per worker, one ShardSync per PS shard):
- up: each worker encodes its gradient for each shard with error feedback (one residual per shard;
  none when the job sets `error_feedback: false`) at the level it chose, and sends one message
  (header: level, payload length; then the payload);
- the shard decodes every worker's payload, averages, steps its optimizer;
- down: the shard sends the new parameters at the most compressed level any worker used this
  iteration (workers may differ under the adaptive policy). Level none sends the parameters
  themselves; a compressed level sends the change since what the workers hold, C(x - x_hat), and
  both sides add its decoded value to x_hat (the shard keeps a copy: its `shadow`). What one message
  leaves out stays in x - x_hat for the next (error feedback on the model). Workers compute their
  gradients at x_hat; the PS's own parameters x are the model (test accuracy is measured on them).
  So the whole exchange is compressed, the reply too; `error_feedback: false` switches off the
  gradients' residual only (the reply's change since x_hat keeps the workers' copy on the model).

Every receive is posted at once into a buffer of the ladder's largest message (compression.capacity),
so an exchange is one message each way, whatever the level.

Ring: the ranks agree on the level (an all_reduce of the levels, MAX: the most compressed one any rank
asked for; skipped when the ladder has one level), then all_gather their payloads (equal sizes at one
level), and every rank decodes them in rank order and averages: the same floats on every rank, so
replicas stay identical. Level none uses the plain all_reduce. Sparse payloads cannot be summed on the
way round a ring, so a compressed ring moves (N - 1) payloads per rank each way instead of
all_reduce's 2 (N - 1) / N of the gradient.

Message tags: the PS exchange of iteration `it` uses tags TAG_STRIDE * it (up) and + 1 (down).
"""

from __future__ import annotations

import torch

from pcnlab.workloads.compression import HEADER_BYTES, Codec, ErrorFeedback, capacity, pack, unpack
from pcnlab.workloads.compression_methods import DEFAULT_ERROR_FEEDBACK

TAG_STRIDE = 2


def _generator(seed: int, rank: int, stream: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + rank * 10_007 + stream * 101 + 17)


class WorkerSync:
    """A PS worker's side: its error feedback per shard; it applies the shards' answers to its copy
    x_hat of their parameters."""

    def __init__(self, ladder: tuple[Codec, ...], shard_sizes: list[int], seed: int = 0, rank: int = 0,
                 error_feedback: bool = DEFAULT_ERROR_FEEDBACK):
        self.ladder = ladder
        self.sizes = list(shard_sizes)
        self.feedback = [ErrorFeedback(n, error_feedback) for n in self.sizes]
        self.generators = [_generator(seed, rank, s) for s in range(len(self.sizes))]
        self.inbox = [torch.empty(capacity(ladder, n), dtype=torch.uint8) for n in self.sizes]

    def encode(self, grads: list[torch.Tensor], level: int) -> list[torch.Tensor]:
        """One message per shard for this iteration's flat gradients, at `level`."""
        return [pack(level, self.feedback[s].compress(g, self.ladder[level], self.generators[s])[0])
                for s, g in enumerate(grads)]

    def decode(self, message: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
        """A shard's new flat parameters from its answer: the parameters (level none) or x_hat plus the
        decoded change."""
        level, payload = unpack(message)
        codec = self.ladder[level]
        values = codec.decode(payload, current.numel())
        return values if codec.method == "none" else current + values

    def exchange(self, dist, it: int, grads: list[torch.Tensor], current: list[torch.Tensor],
                 level: int) -> tuple[list[torch.Tensor], int, int]:
        """One iteration with every shard over gloo: send the gradients, receive the parameters.
        Returns (each shard's new flat parameters, bytes sent, bytes received), headers included."""
        msgs = self.encode(grads, level)
        tag = TAG_STRIDE * it
        reqs = [dist.isend(m, dst=s, tag=tag) for s, m in enumerate(msgs)]
        reqs += [dist.irecv(box, src=s, tag=tag + 1) for s, box in enumerate(self.inbox)]
        for req in reqs:
            req.wait()
        new = [self.decode(box, c) for box, c in zip(self.inbox, current)]
        received = sum(HEADER_BYTES + unpack(box)[1].numel() for box in self.inbox)
        return new, sum(m.numel() for m in msgs), received


class ShardSync:
    """A PS shard's side: decodes the workers' gradients, and keeps the workers' copy of its parameters
    (`shadow`) to send them the change."""

    def __init__(self, ladder: tuple[Codec, ...], size: int, initial: torch.Tensor, seed: int = 0, rank: int = 0):
        self.ladder = ladder
        self.size = size
        self.shadow = initial.detach().reshape(-1).clone().to(torch.float32)
        self.generator = _generator(seed, rank, 999)
        self.inbox: dict[int, torch.Tensor] = {}

    def gather(self, dist, it: int, workers: list[int]) -> tuple[dict[int, torch.Tensor], list[int], int]:
        """Every worker's decoded gradient, the levels they used, and the bytes received."""
        for w in workers:
            self.inbox.setdefault(w, torch.empty(capacity(self.ladder, self.size), dtype=torch.uint8))
        for req in [dist.irecv(self.inbox[w], src=w, tag=TAG_STRIDE * it) for w in workers]:
            req.wait()
        grads, levels, received = {}, [], 0
        for w in workers:
            level, payload = unpack(self.inbox[w])
            grads[w] = self.ladder[level].decode(payload, self.size)
            levels.append(level)
            received += HEADER_BYTES + payload.numel()
        return grads, levels, received

    def encode(self, params: torch.Tensor, level: int) -> torch.Tensor:
        """The message carrying the new parameters to the workers at `level`."""
        codec = self.ladder[level]
        x = params.detach().reshape(-1).to(torch.float32)
        if codec.method == "none":
            self.shadow = x.clone()
            payload = codec.encode(x)
        else:
            payload = codec.encode(x - self.shadow, self.generator)
            self.shadow = self.shadow + codec.decode(payload, self.size)
        return pack(level, payload)

    def broadcast(self, dist, it: int, params: torch.Tensor, workers: list[int], level: int) -> int:
        """Send the parameters to every worker; returns the bytes sent."""
        message = self.encode(params, level)
        for req in [dist.isend(message, dst=w, tag=TAG_STRIDE * it + 1) for w in workers]:
            req.wait()
        return len(workers) * message.numel()


class RingSync:
    """A ring rank's side: error feedback on its whole flat gradient; the average of everyone's."""

    def __init__(self, ladder: tuple[Codec, ...], size: int, world: int, seed: int = 0, rank: int = 0,
                 error_feedback: bool = DEFAULT_ERROR_FEEDBACK):
        self.ladder = ladder
        self.size = size
        self.world = world
        self.feedback = ErrorFeedback(size, error_feedback)
        self.generator = _generator(seed, rank, 0)

    def agree(self, dist, level: int) -> int:
        """The level every rank uses: the most compressed one any rank asked for."""
        if len(self.ladder) == 1:
            return 0
        t = torch.tensor([level], dtype=torch.int32)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return int(t[0])

    def average(self, dist, flat: torch.Tensor, level: int) -> tuple[torch.Tensor, int]:
        """The average over the ranks of their (compressed) gradients, and the payload bytes this rank
        handed to gloo (its own payload, which an all_gather carries round to the N - 1 others)."""
        codec = self.ladder[level]
        payload, _ = self.feedback.compress(flat, codec, self.generator)
        if codec.method == "none":
            total = payload.view(torch.float32).clone()
            dist.all_reduce(total, op=dist.ReduceOp.SUM)
            return total / self.world, payload.numel()
        gathered = [torch.empty_like(payload) for _ in range(self.world)]
        dist.all_gather(gathered, payload)
        total = torch.zeros(self.size, dtype=torch.float32)
        for p in gathered:          # rank order: every rank adds the same floats in the same order
            total += codec.decode(p, self.size)
        return total / self.world, payload.numel()
