"""The NetSenseML-style adaptive policy: each worker picks, every iteration, how much to compress the
next iteration's gradients from what it sensed during this one.

What it optimises: training progress per second. A level l of the LADDER (none, then ever smaller
payloads) learns efficiency[l] as much per iteration as no compression (EFFICIENCY, per model: measured
on the real digits models by bench/bench_compression_efficiency.py), and an iteration takes the compute
time plus the communication time. So the policy picks

    argmax_l  efficiency[l] / (compute_s + floor_s + bytes[l] / rate)

and moves to it only if that is at least GAIN times the current level's value (hysteresis, so a
noisy iteration does not flip the level). Communication times are the median of the last SMOOTH
iterations at the same level: on 2 shared cores a process wakes up milliseconds late now and then.
bytes[l] is what this rank moves per iteration at level l (sent + received, exact:
compression.Codec.wire_bytes). On a fast network every level's communication is small against
compute and none wins (its efficiency is 1); as the rate falls, the bytes dominate and smaller
payloads win; when the rate recovers, none wins again.

What it senses (netsense.Observation, every iteration, logged with the decision):
- comm_s: the worker's own communication time (comm_end - comm_start), and the bytes it moved;
- from TCP_INFO of gloo's own sockets (tcpsense.py: gloo owns them; the worker reads them through
  duplicates of its own file descriptors): smoothed and minimum RTT (queueing delay = srtt -
  min_rtt), retransmitted segments and CE-marked deliveries (ECN echoes) since the last iteration:
  the congestion signals.

How it turns that into the rate: comm_s = floor_s + bytes / rate. floor_s is what an exchange costs
whatever it carries (RTTs, gloo, the PS's work, the other workers' skew): the lowest communication
time of the last FLOOR_WINDOW iterations. To measure it from the start, the first iterations follow
BOOTSTRAP: iteration 0 at none (gloo's first exchange is slow; it only warms up), iteration 1 at the
smallest payload (the floor), iteration 2 at none (the rate). After that, a sample whose transfer
part (comm_s - floor_s) is measurable (at least NOISE x floor_s, and NOISE_MIN_S) is limited by the
network: rate = bytes / transfer time, up or down. So is one that met congestion (retransmissions,
ECN echoes, or a queueing delay srtt - min_rtt over QUEUE_DELAY_US). A payload that took no
measurable time only says the rate is at least bytes / (NOISE x floor_s): it can raise the estimate,
never lower it.

Backing off: while compressed the payloads are small and say little about the rate. After
PROBE_EVERY iterations without a network-limited sample and without congestion signals, the policy
probes: one iteration at the least compressed level predicted to take at most PROBE_COST times the
current communication time (a probe into a still-slow network costs little); its larger payload
measures the rate (or raises its lower bound), and the next decision uses it. A probe after which the
model still prefers more compression doubles the wait before the next one (up to PROBE_MAX); one
that finds the network fast resets it.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from pcnlab.workloads.compression_methods import ADAPTIVE, SPARSE
from pcnlab.workloads.compression import HEADER_BYTES, Codec

# The candidate levels, largest payload first (level 0 is no compression).
LADDER: tuple[Codec, ...] = (Codec("none"), Codec("int8"), Codec("topk", 0.1), Codec("sign"),
                             Codec("topk", 0.01))
# Learning per iteration relative to none, per model and level: bench/bench_compression_efficiency.py (2
# workers, 3 seeds; the mean over targets of iterations(none) / iterations(level), capped at 1): digits-mlp
# at lr 0.2, batch 32, targets 90/93/95/96 %; digits-cnn (2026-11-26) at lr 0.1, 800 iterations, the same
# targets. A model not measured takes digits-mlp's (`efficiency`): the costs the policy had before the table
# was per model (with them on digits-cnn it held top-k 1 %, 0.78 there, through fast phases where int8 at 1.0
# pays 1.18 x as much progress per second: netsense-competing, 2026-11-25/26).
EFFICIENCY: dict[str, tuple[float, ...]] = {
    "digits-mlp": (1.0, 1.0, 1.0, 0.98, 0.93),
    "digits-cnn": (1.0, 1.0, 0.96, 0.87, 0.78),
}
MEASURED_MODEL = "digits-mlp"   # whose costs a model without its own row takes
GAIN = 1.15              # move only for at least 15 % more predicted progress per second
SMOOTH = 3               # an iteration's communication time: the median of the last SMOOTH at its level
FLOOR_WINDOW = 200       # iterations over which the lowest communication time is the floor
NOISE = 0.25             # a transfer shorter than this share of the floor is not measurable
NOISE_MIN_S = 0.0002
QUEUE_DELAY_US = 5000.0  # srtt - min_rtt above this is a standing queue on the path (congestion)
PROBE_EVERY = 3          # iterations without a network-limited sample before a probe
PROBE_MAX = 40           # the longest wait between probes
PROBE_COST = 2.0         # a probe's predicted communication time, at most this x the current one
BOOTSTRAP = (0, -1, 0)   # levels of iterations 0, 1, 2 (-1: the smallest payload)


@dataclass
class Observation:
    """What a worker sensed during one iteration (at `level`)."""

    level: int
    compute_s: float
    comm_s: float
    bytes: int                    # moved by this rank (sent + received), as handed to / taken from gloo
    min_rtt_us: float | None = None
    srtt_us: float | None = None
    retrans: int = 0              # segments retransmitted during the iteration
    ce: int = 0                   # deliveries the receiver echoed as CE-marked (ECN)


@dataclass
class Decision:
    level: int
    reason: str
    rate_Bps: float | None
    floor_s: float
    congested: bool
    limited: bool                 # this iteration's sample was limited by the network
    predicted_s: list[float] = field(default_factory=list)   # communication time per level, as predicted

    def record(self, ladder: tuple[Codec, ...]) -> dict:
        out = asdict(self)
        out["codec"] = ladder[self.level].name
        out["predicted_s"] = [round(p, 6) for p in self.predicted_s]
        return out


class NetSensePolicy:
    """One worker's policy. `sizes[l]`: bytes this rank moves per iteration at level l."""

    def __init__(self, sizes: list[int], ladder: tuple[Codec, ...] = LADDER,
                 efficiency: tuple[float, ...] = EFFICIENCY[MEASURED_MODEL], gain: float = GAIN):
        if not (len(sizes) == len(ladder) == len(efficiency)):
            raise ValueError("one size and one efficiency per level of the ladder")
        self.sizes = list(sizes)
        self.ladder = ladder
        self.efficiency = efficiency
        self.gain = gain
        self.level = 0
        self.seen = 0                        # iterations observed
        self.run: list[float] = []           # communication times of the iterations since the level changed
        self.recent: list[float] = []        # the last FLOOR_WINDOW smoothed communication times
        self.rate: float | None = None       # bytes/s, the network's current rate for this rank
        self.since_limited = 0               # iterations since a network-limited sample
        self.probe_wait = PROBE_EVERY
        self.probing = False
        self._last_level = -1

    @staticmethod
    def congested(obs: Observation) -> bool:
        queueing = (obs.srtt_us or 0.0) - (obs.min_rtt_us or 0.0)
        return obs.retrans > 0 or obs.ce > 0 or queueing > QUEUE_DELAY_US

    def predict(self, floor: float) -> list[float]:
        rate = self.rate or float("inf")
        return [floor + b / rate for b in self.sizes]

    def progress(self, level: int, compute_s: float, predicted: list[float]) -> float:
        return self.efficiency[level] / max(compute_s + predicted[level], 1e-9)

    def _measure(self, comm_s: float, obs: Observation, floor: float, congested: bool) -> bool:
        """Update the rate from this iteration; True when the sample was limited by the network."""
        transfer = comm_s - floor
        noise = max(NOISE * floor, NOISE_MIN_S)
        limited = transfer >= noise or (congested and transfer > 0)
        if limited:
            self.rate = obs.bytes / transfer
        elif self.rate is not None or self.seen > 1:
            self.rate = max(self.rate or 0.0, obs.bytes / noise)
        return limited

    def decide(self, obs: Observation) -> Decision:
        """The level of the next iteration, from what this one sensed."""
        self.seen += 1
        congested = self.congested(obs)
        comm = obs.comm_s
        if self.seen > 1:          # iteration 0 carries gloo's warm-up: not a measurement
            self.run = (self.run if obs.level == self._last_level else [])[-(SMOOTH - 1):] + [obs.comm_s]
            comm = obs.comm_s if congested else statistics.median(self.run)   # a signalled sample counts as is
            self.recent = (self.recent + [comm])[-FLOOR_WINDOW:]
        self._last_level = obs.level
        floor = min(self.recent) if self.recent else comm
        limited = self._measure(comm, obs, floor, congested) if self.seen > 1 else False
        predicted = self.predict(floor)
        if self.seen < len(BOOTSTRAP):
            boot = BOOTSTRAP[self.seen] % len(self.ladder)
            self.level = boot
            return Decision(boot, "bootstrap: measure the floor and the rate", self.rate, floor, congested,
                            limited, predicted)
        was_probe, self.probing = self.probing, False
        self.since_limited = 0 if limited else self.since_limited + 1
        here = self.progress(obs.level, obs.compute_s, predicted)
        best = max(range(len(self.ladder)), key=lambda lv: (self.progress(lv, obs.compute_s, predicted), -lv))
        if was_probe:
            self.probe_wait = PROBE_EVERY if best <= obs.level else min(2 * self.probe_wait, PROBE_MAX)
        if best != obs.level and self.progress(best, obs.compute_s, predicted) >= self.gain * here:
            self.level, reason = best, f"{self.ladder[best].name} predicted fastest progress"
        else:
            self.level, reason = obs.level, "keeps the current level"
        if (self.level > 0 and not congested and self.level == obs.level
                and self.since_limited >= self.probe_wait):
            cheap = [lv for lv in range(self.level) if predicted[lv] <= PROBE_COST * max(obs.comm_s, 1e-6)]
            target = min(cheap) if cheap else self.level - 1
            self.level, self.probing, self.since_limited = target, True, 0
            reason = f"probe {self.ladder[target].name}: no rate sample for a while and no congestion"
        return Decision(self.level, reason, self.rate, floor, congested, limited, predicted)


def efficiency(model: str) -> tuple[float, ...]:
    """The ladder's learning per iteration for this model (EFFICIENCY), digits-mlp's if not measured."""
    return EFFICIENCY.get(model, EFFICIENCY[MEASURED_MODEL])


def rank_sizes(kind: str, ladder: tuple[Codec, ...], shard_sizes: list[int], world: int) -> list[int]:
    """Bytes a worker moves per iteration at each level (what it sends plus what it receives).
    ps: its gradient to every shard and each shard's answer at the same level; ring: level none is an
    all_reduce (2 (N - 1) / N of the gradient each way), a compressed level an all_gather of N - 1
    payloads each way."""
    out = []
    for codec in ladder:
        if kind == "ps":
            out.append(2 * sum(codec.wire_bytes(n) + HEADER_BYTES for n in shard_sizes))
        elif codec.method == "none":
            out.append(round(2 * 2 * (world - 1) / world * sum(4 * n for n in shard_sizes)))
        else:
            out.append(2 * (world - 1) * sum(codec.wire_bytes(n) for n in shard_sizes))
    return out


def job_ladder(method: str, ratio: float) -> tuple[Codec, ...] | None:
    """The codecs a job may use, its ladder (level i is ladder[i]); None for `none` (the plain,
    uncompressed path of the workers) and for `adaptive` this policy's LADDER."""
    if method == "none":
        return None
    if method == ADAPTIVE:
        return LADDER
    return (Codec(method, ratio if method in SPARSE else 1.0),)
