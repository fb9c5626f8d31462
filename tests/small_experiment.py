"""The small experiment that the viewed sweep (conftest.py), the fault tests (experiments/test_faults_bmv2.py)
and bench/bench_faults.py run on real BMv2: a dumbbell (workers h1, h2 and a background sender h3 on s1,
the generator's PS h4 on s2, across a 10 Mbit/s bottleneck), one generator job of 30 kB bursts every
300 ms, one background flow, telemetry on every packet. Each names it, its mode, its length and a sweep."""

from __future__ import annotations


def small_experiment(name: str, mode: str, iterations: int, duration_s: float, sweep: str = "") -> str:
    """The experiment file's text; `sweep` (YAML, e.g. "sweep:\\n  mode: [ecn, pcn]\\n") is appended."""
    return f"""
name: {name}
topology: {{kind: dumbbell, left: 3, right: 1, bw: 20, bottleneck_bw: 10, queue: 60}}
mode: {{kind: {mode}, K: 20, K_pre: 5}}
telemetry: 1
jobs:
  - {{name: gen, kind: generator, pattern: ps, ps: h4, workers: [h1, h2], burst_bytes: 30000, reply_bytes: 0,
     period_ms: 300, iterations: {iterations}, burst_gap_us: 20000}}
background:
  - {{src: h3, dst: h4}}
duration_s: {duration_s:g}
warmup_s: 1
""" + sweep
