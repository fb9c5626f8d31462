"""metrics.json's training figures from the workers' and the PS's logs, on a hand-made run folder with
known answers: iteration time, the training loss (mean over workers) at the first and last iteration,
and the test accuracy the evaluating rank logged."""

from __future__ import annotations

import json

from pcnlab.analysis.metrics import training_metrics
from pcnlab.analysis.results import RunData


def _log(path, role, rank, host, records):
    lines = [{"type": "anchor", "host_ns": 0, "wall_time": 0, "job": "train", "role": role, "rank": rank, "host": host}]
    # The moments every iteration line has (jsonlines.ITERATION_REQUIRED); these figures need only the start.
    moments = ("compute_end_ns", "comm_start_ns", "comm_end_ns")
    lines += [{"type": "iteration", **{k: r["compute_start_ns"] for k in moments}, **r} for r in records]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")


def test_training_metrics_from_the_logs(tmp_path):
    folder = tmp_path / "jobs" / "train"
    folder.mkdir(parents=True)
    period = 250_000_000  # ns
    for rank, host, losses in ((1, "h2", [2.0, 1.5, 1.0, 0.6]), (2, "h3", [2.2, 1.7, 1.2, 0.8])):
        _log(folder / f"worker{rank - 1}-{host}.jsonl", "worker", rank, host,
             [{"iter": i, "compute_start_ns": i * period + rank, "loss": loss} for i, loss in enumerate(losses)])
    # The PS measured test accuracy after iterations 1 and 3 (eval_every 2); no loss of its own.
    _log(folder / "ps0-h1.jsonl", "ps", 0, "h1",
         [{"iter": i, "compute_start_ns": i * period, "loss": None,
           **({"accuracy": acc, "test_loss": tl} if acc is not None else {})}
          for i, (acc, tl) in enumerate([(None, None), (0.4, 1.9), (None, None), (0.85, 0.5)])])
    out = training_metrics(RunData(tmp_path))
    assert out["iteration_ms"]["mean"] == 250.0 and out["iteration_ms"]["n"] == 6
    assert out["loss_first"] == 2.1 and abs(out["loss_last"] - 0.7) < 1e-12
    assert (out["accuracy_first"], out["accuracy_final"], out["test_loss_final"]) == (0.4, 0.85, 0.5)
    assert out["accuracy_iteration"] == 3


def test_no_accuracy_without_a_real_model(tmp_path):
    folder = tmp_path / "jobs" / "train"
    folder.mkdir(parents=True)
    _log(folder / "worker0-h2.jsonl", "worker", 1, "h2",
         [{"iter": i, "compute_start_ns": i * 1_000_000, "loss": None} for i in range(3)])
    out = training_metrics(RunData(tmp_path))
    assert out["iteration_ms"]["mean"] == 1.0
    assert not {"loss_first", "accuracy_final"} & set(out)


def test_gradient_delivery_of_a_generator_over_ltp(tmp_path):
    """The burst generator's LTP PS has no model: it logs what arrived and how each iteration closed,
    but no bytes_filled. The figures come out (fills 0), and a run's analysis does not fail on it."""
    folder = tmp_path / "jobs" / "gen"
    folder.mkdir(parents=True)
    records = [{"iter": i, "compute_start_ns": i * 10**8, "delivered_fraction": frac, "bytes_recv": got,
                "gradient_bytes": 1000, "bytes_lost": 1000 - got, "ltp_close": close}
               for i, (frac, got, close) in enumerate([(1.0, 1000, "complete"), (0.9, 900, "threshold")])]
    _log(folder / "ps0-h1.jsonl", "ps", 0, "h1", records)
    out = training_metrics(RunData(tmp_path))
    assert out["gradient_fraction"] == 1900 / 2000 and out["gradient_fraction_min"] == 0.9
    assert out["early_close"] == {"threshold": 1} and out["bytes_lost"] == 100 and out["bytes_filled"] == 0


def test_push_spread_and_the_workers_tcp_timeouts_per_iteration(tmp_path):
    """The spread of the workers' communication starts per iteration (max - min, ms) and the job's hosts'
    retransmission timeouts and tail-loss probes (ps.py logs each host's increase), summed per iteration
    over the workers and the PS."""
    folder = tmp_path / "jobs" / "train"
    folder.mkdir(parents=True)
    starts = {"h2": [0, 100, 200], "h3": [2, 103, 290], "h4": [1, 140, 201]}          # ms after each iteration
    rtos = {"h2": [0, 1, 0], "h3": [0, 0, 2], "h4": [0, 1, 0]}
    for rank, host in enumerate(starts, start=1):
        _log(folder / f"worker{rank - 1}-{host}.jsonl", "worker", rank, host,
             [{"iter": i, "compute_start_ns": i * 10**9, "comm_start_ns": i * 10**9 + starts[host][i] * 10**6,
               "tcp_timeouts": rtos[host][i], "tcp_loss_probes": 1} for i in range(3)])
    # The PS's own host: a probe for its parameters in iteration 2 (the PS's start is no push).
    _log(folder / "ps0-h1.jsonl", "ps", 0, "h1",
         [{"iter": i, "compute_start_ns": i * 10**9, "tcp_timeouts": 0, "tcp_loss_probes": int(i == 2)}
          for i in range(3)])
    out = training_metrics(RunData(tmp_path))
    spread = out["push_spread_ms"]
    assert (spread["min"], spread["p50"], spread["max"], spread["n"]) == (2.0, 40.0, 90.0, 3)
    assert out["tcp_timeouts_per_iteration"] == 4 / 3 and out["tcp_loss_probes_per_iteration"] == 10 / 3
    assert out["iterations_with_timeout"] == 2 / 3
    # Stalls: the iterations 150 ms over the 5th percentile of the longest communication per iteration.
    assert (out["stalled_iterations"], out["stalled_with_tcp_timer"]) == (0, 0)


def test_a_stall_is_counted_and_matched_to_the_hosts_timers(tmp_path):
    folder = tmp_path / "jobs" / "train"
    folder.mkdir(parents=True)
    comm_ms = {"h2": [30, 31, 240, 30, 250], "h3": [32, 30, 235, 31, 248]}   # iterations 2 and 4 stall
    probes = {"h2": [0, 0, 1, 0, 0], "h3": [0, 0, 0, 0, 0]}                 # only iteration 2's has a timer
    for rank, host in enumerate(comm_ms, start=1):
        _log(folder / f"worker{rank - 1}-{host}.jsonl", "worker", rank, host,
             [{"iter": i, "compute_start_ns": i * 10**9, "comm_start_ns": i * 10**9,
               "comm_end_ns": i * 10**9 + comm_ms[host][i] * 10**6, "tcp_timeouts": 0,
               "tcp_loss_probes": probes[host][i]} for i in range(5)])
    out = training_metrics(RunData(tmp_path))
    assert (out["stalled_iterations"], out["stalled_with_tcp_timer"]) == (2, 1)
    # When most iterations wait on a timer, they are still stalls (the median would hide them).
    for host in comm_ms:
        comm_ms[host][1] = comm_ms[host][3] = 245
    for rank, host in enumerate(comm_ms, start=1):
        _log(folder / f"worker{rank - 1}-{host}.jsonl", "worker", rank, host,
             [{"iter": i, "compute_start_ns": i * 10**9, "comm_start_ns": i * 10**9,
               "comm_end_ns": i * 10**9 + comm_ms[host][i] * 10**6, "tcp_timeouts": 0,
               "tcp_loss_probes": probes[host][i]} for i in range(5)])
    assert training_metrics(RunData(tmp_path))["stalled_iterations"] == 4


def test_no_push_spread_with_one_worker_nor_timeouts_without_counters(tmp_path):
    folder = tmp_path / "jobs" / "train"
    folder.mkdir(parents=True)
    _log(folder / "worker0-h2.jsonl", "worker", 1, "h2",
         [{"iter": i, "compute_start_ns": i * 1_000_000} for i in range(3)])
    assert not {"push_spread_ms", "tcp_timeouts_per_iteration"} & set(training_metrics(RunData(tmp_path)))
