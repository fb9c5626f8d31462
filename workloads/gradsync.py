"""Compressed gradient exchange for the PyTorch jobs: what ps.py and ring.py call when a job has
`compression` (compression.py: the codecs; netsense.py: the adaptive policy choosing a level).

Parameter server (one WorkerSync per worker, one ShardSync per PS shard):
- up: each worker encodes its gradient for each shard with error feedback (one residual per shard)
  at the level it chose, and sends a header (level, payload bytes) then the payload;
- the shard decodes every worker's payload, averages, steps its optimizer;
- down: the shard sends the new parameters at the most compressed level any worker used this
  iteration (workers may differ under the adaptive policy). Level none sends the parameters
  themselves; a compressed level sends the change since what the workers hold, C(x - x_hat), and
  both sides add its decoded value to x_hat (the shard keeps a copy: its `shadow`). What one message
  leaves out stays in x - x_hat for the next (error feedback on the model). Workers compute their
  gradients at x_hat; the PS's own parameters x are the model (test accuracy is measured on them).

Ring: the ranks agree on the level (an all_reduce of the levels, MAX: the most compressed any rank
asked for), then all_gather their payloads (equal sizes at one level), and every rank decodes them in
rank order and averages: the same floats on every rank, so replicas stay identical. Level none uses
the plain all_reduce. Sparse payloads cannot be summed on the way round a ring, so a compressed ring
moves (N - 1) payloads per rank each way instead of all_reduce's 2 (N - 1) / N of the gradient.

Message tags: the PS exchange of iteration `it` uses tags TAG_STRIDE * it + 0..3 (up header, up
payload, down header, down payload).
"""

from __future__ import annotations

import torch

from pcnlab.workloads.compression import Codec, ErrorFeedback, empty_header, header

TAG_STRIDE = 4


def _generator(seed: int, rank: int, stream: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed * 1_000_003 + rank * 10_007 + stream * 101 + 17)


def message_bytes(msgs) -> int:
    return sum(t.numel() * t.element_size() for t in msgs)


class WorkerSync:
    """A PS worker's side: its error feedback per shard, and its copy x_hat of each shard's parameters."""

    def __init__(self, ladder: tuple[Codec, ...], shard_sizes: list[int], seed: int = 0, rank: int = 0):
        self.ladder = ladder
        self.sizes = list(shard_sizes)
        self.feedback = [ErrorFeedback(n) for n in self.sizes]
        self.generators = [_generator(seed, rank, s) for s in range(len(self.sizes))]

    def encode(self, grads: list[torch.Tensor], level: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(header, payload) per shard for this iteration's flat gradients, at `level`."""
        out = []
        for s, g in enumerate(grads):
            payload, _ = self.feedback[s].compress(g, self.ladder[level], self.generators[s])
            out.append((header(level, payload), payload))
        return out

    def decode(self, hdr: torch.Tensor, payload: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
        """A shard's new flat parameters from its answer: the parameters (level none) or x_hat plus the
        decoded change."""
        codec = self.ladder[int(hdr[0])]
        values = codec.decode(payload, current.numel())
        return values if codec.method == "none" else current + values

    def exchange(self, dist, it: int, grads: list[torch.Tensor], current: list[torch.Tensor],
                 level: int) -> tuple[list[torch.Tensor], int, int]:
        """One iteration with every shard over gloo: send the gradients, receive the parameters.
        Returns (each shard's new flat parameters, bytes sent, bytes received) -- headers included."""
        msgs = self.encode(grads, level)
        base = TAG_STRIDE * it
        reqs = []
        for s, (hdr, payload) in enumerate(msgs):
            reqs += [dist.isend(hdr, dst=s, tag=base), dist.isend(payload, dst=s, tag=base + 1)]
        headers = [empty_header() for _ in msgs]
        for req in [dist.irecv(h, src=s, tag=base + 2) for s, h in enumerate(headers)]:
            req.wait()
        payloads = [torch.empty(int(h[1]), dtype=torch.uint8) for h in headers]
        for req in [dist.irecv(p, src=s, tag=base + 3) for s, p in enumerate(payloads)]:
            req.wait()
        for req in reqs:
            req.wait()
        new = [self.decode(h, p, c) for h, p, c in zip(headers, payloads, current)]
        sent = message_bytes(t for pair in msgs for t in pair)
        return new, sent, message_bytes(headers) + message_bytes(payloads)


class ShardSync:
    """A PS shard's side: decodes the workers' gradients, and keeps the workers' copy of its parameters
    (`shadow`) to send them the change."""

    def __init__(self, ladder: tuple[Codec, ...], size: int, initial: torch.Tensor, seed: int = 0, rank: int = 0):
        self.ladder = ladder
        self.size = size
        self.shadow = initial.detach().reshape(-1).clone().to(torch.float32)
        self.generator = _generator(seed, rank, 999)

    def gather(self, dist, it: int, workers: list[int]) -> tuple[dict[int, torch.Tensor], list[int], int]:
        """Every worker's decoded gradient, the levels they used, and the bytes received."""
        base = TAG_STRIDE * it
        headers = {w: empty_header() for w in workers}
        for req in [dist.irecv(headers[w], src=w, tag=base) for w in workers]:
            req.wait()
        payloads = {w: torch.empty(int(headers[w][1]), dtype=torch.uint8) for w in workers}
        for req in [dist.irecv(payloads[w], src=w, tag=base + 1) for w in workers]:
            req.wait()
        grads = {w: self.ladder[int(headers[w][0])].decode(payloads[w], self.size) for w in workers}
        received = message_bytes(headers.values()) + message_bytes(payloads.values())
        return grads, [int(headers[w][0]) for w in workers], received

    def encode(self, params: torch.Tensor, level: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(header, payload) carrying the new parameters to the workers at `level`."""
        codec = self.ladder[level]
        x = params.detach().reshape(-1).to(torch.float32)
        if codec.method == "none":
            self.shadow = x.clone()
            payload = codec.encode(x)
        else:
            payload = codec.encode(x - self.shadow, self.generator)
            self.shadow = self.shadow + codec.decode(payload, self.size)
        return header(level, payload), payload

    def broadcast(self, dist, it: int, params: torch.Tensor, workers: list[int], level: int) -> int:
        """Send the parameters to every worker; returns the bytes sent."""
        hdr, payload = self.encode(params, level)
        base = TAG_STRIDE * it
        reqs = []
        for w in workers:
            reqs += [dist.isend(hdr, dst=w, tag=base + 2), dist.isend(payload, dst=w, tag=base + 3)]
        for req in reqs:
            req.wait()
        return len(workers) * message_bytes((hdr, payload))


class RingSync:
    """A ring rank's side: error feedback on its whole flat gradient; the average of everyone's."""

    def __init__(self, ladder: tuple[Codec, ...], size: int, world: int, seed: int = 0, rank: int = 0):
        self.ladder = ladder
        self.size = size
        self.world = world
        self.feedback = ErrorFeedback(size)
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
