"""One PyTorch rank's compression state: its codec ladder and exchange (gradsync.py), what it senses
of gloo's connections every iteration (tcpsense.py) and, with `compression: adaptive`, the policy
choosing the next iteration's level (netsense.py). ps.py and ring.py hold one `RankCompression` each.

Every rank senses (also without compression: it costs a few getsockopt calls per iteration), so every
run's logs carry the bytes TCP really moved. Each iteration record gets:

    "compression": {"method", "level", "codec"}          (compressed jobs)
    "payload_sent", "payload_recv"                        bytes handed to / taken from gloo, headers included
    "tcp": {"bytes_sent", "bytes_retrans", "bytes_acked", "bytes_received", "total_retrans", "delivered",
            "delivered_ce", "connections", "srtt_us", "min_rtt_us", "cwnd", "delivery_rate_Bps",
            "app_limited", "ecn"}                         tcpsense.sense over the iteration
    "policy": {"level", "codec", "reason", "rate_Bps", "floor_s", "congested", "limited",
               "predicted_s"}                            adaptive workers: the decision for the next iteration
"""

from __future__ import annotations

from pcnlab.workloads.compression_methods import ADAPTIVE
from pcnlab.workloads.process_config import TrainConfig
from pcnlab.workloads.gradsync import RingSync, ShardSync, WorkerSync
from pcnlab.workloads.netsense import NetSensePolicy, Observation, efficiency, job_ladder, rank_sizes
from pcnlab.workloads.tcpsense import GlooSockets, sense


class RankCompression:
    """Call after the process group is up (gloo's connections exist then)."""

    def __init__(self, cfg: TrainConfig, shard_sizes: list[int]):
        self.cfg = cfg
        self.ladder = job_ladder(cfg.compression, cfg.compression_ratio)
        self.shard_sizes = list(shard_sizes)
        self.level = 0
        self.sockets = GlooSockets(None, cfg.master_port)   # every TCP connection of this rank but the store's
        self.before = self.sockets.snapshot()
        self.policy = None
        if cfg.compression == ADAPTIVE and cfg.role() == "worker":
            world = cfg.world - (cfg.servers if cfg.kind == "ps" else 0)
            self.policy = NetSensePolicy(rank_sizes(cfg.kind, self.ladder, self.shard_sizes, world),
                                         efficiency=efficiency(cfg.model))

    @property
    def compressed(self) -> bool:
        return self.ladder is not None

    def worker_sync(self) -> WorkerSync:
        return WorkerSync(self.ladder, self.shard_sizes, self.cfg.seed, self.cfg.rank, self.cfg.error_feedback)

    def shard_sync(self, initial) -> ShardSync:
        return ShardSync(self.ladder, self.shard_sizes[0], initial, self.cfg.seed, self.cfg.rank)

    def ring_sync(self) -> RingSync:
        return RingSync(self.ladder, sum(self.shard_sizes), self.cfg.world, self.cfg.seed, self.cfg.rank,
                        self.cfg.error_feedback)

    def record(self, used_level: int, compute_s: float, comm_s: float, sent: int, received: int) -> dict:
        """The iteration's log fields (above); an adaptive worker also decides `self.level` for the next
        iteration from them."""
        if not self.sockets.sockets:
            self.sockets.refresh()   # a group whose connections came up late: from now on
            self.before = self.sockets.snapshot()
        after = self.sockets.snapshot()
        tcp = sense(self.before, after) if len(after) == len(self.before) else {}
        self.before = after
        out: dict = {"payload_sent": sent, "payload_recv": received, "tcp": tcp}
        if self.compressed:
            out["compression"] = {"method": self.cfg.compression, "level": used_level,
                                  "codec": self.ladder[used_level].name}
        if self.policy is not None:
            decision = self.policy.decide(Observation(
                level=used_level, compute_s=compute_s, comm_s=comm_s, bytes=sent + received,
                min_rtt_us=tcp.get("min_rtt_us"), srtt_us=tcp.get("srtt_us"),
                retrans=tcp.get("total_retrans", 0), ce=tcp.get("delivered_ce", 0)))
            self.level = decision.level
            out["policy"] = decision.record(self.ladder)
        return out
