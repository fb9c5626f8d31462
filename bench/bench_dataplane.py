"""Packets per second p4src/pcn.p4 forwards on BMv2, against plain.p4 (the same parser and IPv4
forwarding, nothing else), on the same build and machine, in one run: telemetry off, sampled 1 in 10,
and on every packet.

    sudo .venv/bin/python bench/bench_dataplane.py [--seconds 5] [--rounds 6] [--offered 40000]

Decisive on a noisy machine: every round measures every variant once, in an order rotated from round
to round, so drift and position hit all alike; the ratio to plain is taken within each round (the same
minute of the machine), and the table gives each variant's median with its spread (min-max, and the
spread as a share of the median) and the ratios' median with their min-max. A variant is one UDP
iperf3 flow of full-size datagrams offered at `--offered` packets/s, above what BMv2 forwards; what
arrives per second is the rate. Goal: pcn / plain >= 0.9 (docs/results.md, "The data plane's cost").
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pcnlab.experiments.calibrate import one_switch, udp_pps
from pcnlab.cmdline import OneLineParser, count, positive


@dataclass(frozen=True)
class Variant:
    name: str
    program: str
    telemetry_every: int = 0   # 0: off


VARIANTS = (Variant("plain", "plain"), Variant("pcn", "pcn"), Variant("pcn+tel/10", "pcn", 10),
            Variant("pcn+tel/1", "pcn", 1))


def measure(variant: Variant, results: Path, seconds: float, offered: float) -> float:
    with one_switch(results, "bench-dataplane", f"{variant.name.replace('/', '-')}-{time.monotonic_ns()}",
                    program=variant.program, telemetry=bool(variant.telemetry_every),
                    telemetry_every=variant.telemetry_every or 1) as rig:
        return udp_pps(rig.net, seconds, offered_pps=offered, ledger=rig.folder.ledger)["received_pps"]


def _spread(values: list[float]) -> str:
    med = statistics.median(values)
    return f"{med:9.0f}  {min(values):7.0f}-{max(values):<7.0f} {100 * (max(values) - min(values)) / med:5.1f} %"


def main(argv: list[str] | None = None) -> dict:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=positive, default=5)
    parser.add_argument("--rounds", type=count, default=6)
    parser.add_argument("--offered", type=positive, default=40_000, help="offered packets/s (above capacity)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args(argv)
    samples: dict[str, list[float]] = {v.name: [] for v in VARIANTS}
    with tempfile.TemporaryDirectory() as tmp:
        for round_no in range(args.rounds):
            order = VARIANTS[round_no % len(VARIANTS):] + VARIANTS[:round_no % len(VARIANTS)]
            for variant in order:
                pps = measure(variant, Path(tmp), args.seconds, args.offered)
                samples[variant.name].append(pps)
                print(f"round {round_no + 1}/{args.rounds} {variant.name:11s} {pps:9.0f} packets/s", flush=True)
    ratios = {v.name: [x / p for x, p in zip(samples[v.name], samples["plain"])] for v in VARIANTS[1:]}
    print(f"\n{'variant':11s} {'median':>9s}  {'min-max':15s} {'spread':>7s}   ratio to plain (same round)")
    for v in VARIANTS:
        line = f"{v.name:11s} {_spread(samples[v.name])}"
        if v.name in ratios:
            r = ratios[v.name]
            line += f"   {statistics.median(r):.2f} ({min(r):.2f}-{max(r):.2f})"
        print(line)
    report = {"offered_pps": args.offered, "seconds": args.seconds, "rounds": args.rounds,
              "samples_pps": samples, "median_pps": {k: statistics.median(v) for k, v in samples.items()},
              "ratios_to_plain": ratios,
              "median_ratio_to_plain": {k: statistics.median(v) for k, v in ratios.items()},
              "datagram_bytes": "full-size frames (1514 bytes on the wire)"}
    print(f"pcn / plain = {report['median_ratio_to_plain']['pcn']:.2f} (goal >= 0.9)")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "dataplane.json").write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
