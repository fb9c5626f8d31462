"""The adaptive policy (workloads/netsense.py) against a link whose rate is known: an exchange takes
a fixed floor plus its bytes over the rate; the rate steps down and back up. And what a worker senses
of its own TCP connections (tcpsense.py), on a real loopback connection."""

from __future__ import annotations

import socket
import time

import pytest

from pcnlab.workloads.compression import Codec
from pcnlab.workloads.netsense import (EFFICIENCY, GAIN, LADDER, PROBE_MAX, NetSensePolicy, Observation,
                                       efficiency, rank_sizes)
from pcnlab.workloads.tcpsense import GlooSockets, sense

COMPUTE_S = 0.05
FLOOR_S = 0.002
SIZES = rank_sizes("ps", LADDER, [9610], world=2)      # digits-mlp, one PS shard


def run(policy: NetSensePolicy, rates_Bps: list[float], jitter_s: float = 0.0) -> list[int]:
    """Feed the policy one iteration per rate; the levels it used, iteration by iteration."""
    levels = []
    for i, rate in enumerate(rates_Bps):
        level = policy.level
        comm = FLOOR_S + SIZES[level] / rate + (jitter_s if i % 7 == 3 else 0.0)
        policy.decide(Observation(level=level, compute_s=COMPUTE_S, comm_s=comm, bytes=SIZES[level],
                                  min_rtt_us=300, srtt_us=400))
        levels.append(level)
    return levels


def best_level(rate: float) -> int:
    """What pays most at this rate, if it pays GAIN times more than no compression (else none)."""
    costs = EFFICIENCY["digits-mlp"]
    progress = [costs[lv] / (COMPUTE_S + FLOOR_S + SIZES[lv] / rate) for lv in range(len(LADDER))]
    best = max(range(len(LADDER)), key=lambda lv: (progress[lv], -lv))
    return best if progress[best] >= GAIN * progress[0] else 0


def test_sizes_are_the_codecs_wire_bytes_both_ways():
    assert SIZES[0] == 2 * (4 * 9610 + 8)
    assert SIZES[-1] == 2 * (Codec("topk", 0.01).wire_bytes(9610) + 8)
    assert SIZES == sorted(SIZES, reverse=True)
    ring = rank_sizes("ring", LADDER, [9610], world=4)
    assert ring[0] == round(2 * 2 * 3 / 4 * 4 * 9610) and ring[1] == 2 * 3 * Codec("int8").wire_bytes(9610)


def test_what_pays_depends_on_the_rate_against_compute():
    # 77 KB per exchange: at 20 Mbit/s 31 ms on top of 50 ms of compute, so compressing pays there.
    assert best_level(125e6) == 0 and best_level(2.5e6) > 0 and best_level(0.25e6) == len(LADDER) - 1


def test_idle_link_stays_uncompressed():
    levels = run(NetSensePolicy(SIZES), [125e6] * 100, jitter_s=0.004)     # 1 Gbit/s, a late wake-up now and then
    assert levels[:3] == [0, len(LADDER) - 1, 0]                            # the bootstrap: floor, then rate
    assert set(levels[3:]) == {0}


def test_compresses_when_the_rate_drops_and_backs_off_when_it_recovers():
    fast, slow = 125e6, 0.25e6                   # 1 Gbit/s, then 2 Mbit/s
    assert best_level(fast) == 0 and best_level(slow) > 0
    policy = NetSensePolicy(SIZES)
    levels = run(policy, [fast] * 30 + [slow] * 60 + [fast] * 60)
    assert set(levels[3:30]) == {0}
    assert all(lv > 0 for lv in levels[32:90]), levels[30:90]               # within two slow iterations
    assert levels[40:90].count(best_level(slow)) >= 40                      # mostly the level that pays most
    recovered = next(i for i in range(90, 150) if levels[i:] == [0] * (150 - i))
    assert recovered - 90 <= PROBE_MAX + 10, levels[90:]                    # back to none, and it stays


def test_congestion_signals_make_a_sample_count():
    """A payload whose transfer is within the noise says nothing, unless the network signalled
    congestion (retransmissions, ECN echoes, a standing queue)."""
    quiet, ecn = NetSensePolicy(SIZES), NetSensePolicy(SIZES)
    for policy, ce in ((quiet, 0), (ecn, 3)):
        for _ in range(4):
            policy.decide(Observation(level=0, compute_s=COMPUTE_S, comm_s=FLOOR_S, bytes=SIZES[0]))
        decision = policy.decide(Observation(level=0, compute_s=COMPUTE_S, comm_s=FLOOR_S * 1.1, bytes=SIZES[0],
                                             ce=ce))
        assert decision.congested == bool(ce) and decision.limited == bool(ce)


def test_tcp_info_counts_what_a_real_connection_carried():
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    peer, _ = server.accept()
    with server, client, peer:
        sockets = GlooSockets(["127.0.0.1"], skip_port=port + 1)
        assert len(sockets.sockets) == 2              # both ends; the listening socket has no peer
        skipped = GlooSockets(["127.0.0.1"], skip_port=port)
        assert skipped.sockets == []                  # the store's port is left out
        before = sockets.snapshot()
        client.sendall(b"x" * 300_000)
        got = 0
        while got < 300_000:
            got += len(peer.recv(1 << 16))
        time.sleep(0.05)
        moved = sense(before, sockets.snapshot())
        sockets.close()
    assert moved["bytes_acked"] == 300_000 and moved["bytes_received"] == 300_000
    assert moved["bytes_sent"] == 300_000 + moved["bytes_retrans"]
    assert moved["connections"] == 2 and moved["min_rtt_us"] is not None and moved["srtt_us"] >= moved["min_rtt_us"]
    assert moved["delivered_ce"] == 0


@pytest.mark.parametrize("kind", ["ps", "ring"])
def test_rank_sizes_rejects_nothing_it_cannot_price(kind):
    assert len(rank_sizes(kind, LADDER, [100, 200], world=3)) == len(LADDER)


def test_each_model_weighs_the_levels_by_its_own_learning_costs():
    """netsense-competing's fast phase (digits-cnn, 30 ms of compute, 14 ms per exchange, 40 Mbit/s):
    with digits-cnn's costs (top-k 1 % learns 0.78 of none per iteration) int8 pays 1.18 x top-k 1 % and the
    policy moves there; with digits-mlp's (0.93) it stayed at top-k 1 % (measured: 2026-11-25/26, every
    phase from 18 s on)."""
    sizes = rank_sizes("ps", LADDER, [9926], world=2)          # digits-cnn, one PS shard
    assert efficiency("digits-cnn") != efficiency("digits-mlp") and efficiency("cnn") == efficiency("digits-mlp")

    def next_level(costs: tuple[float, ...]) -> int:
        """The decision after a fast-phase iteration at top-k 1 %, the rate known (no probe due)."""
        policy = NetSensePolicy(sizes, efficiency=costs)
        top = len(LADDER) - 1                                   # where the slow phase left it
        policy.level, policy.seen, policy.recent, policy.rate, policy._last_level = top, 10, [0.014], 5e6, top
        policy.run = [0.014 + sizes[top] / 5e6] * 2
        return policy.decide(Observation(level=top, compute_s=0.030, comm_s=0.014 + sizes[top] / 5e6,
                                         bytes=sizes[top], min_rtt_us=300, srtt_us=400)).level

    assert LADDER[next_level(efficiency("digits-cnn"))].name == "int8"
    assert next_level(efficiency("digits-mlp")) == len(LADDER) - 1
