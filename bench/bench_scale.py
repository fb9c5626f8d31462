"""How far one machine goes: a leaf-spine grown step by step, one `pcnlab run` per size, until the
fidelity check says no (docs/results.md, "How far one machine goes"). Each size: `leaves` x `spines`
switches, `hosts_per_leaf` hosts per leaf, a generator whose workers are every host but the PS and two
background senders (PS on h1), 30 KB per worker every second, two cubic flows into the PS, telemetry
on every packet, pcn mode.

    sudo .venv/bin/python bench/bench_scale.py [--sizes 2x2x4,4x2x4,6x3x4,8x4x4] [--duration 25]

Prints, per size: switches, hosts, workers, the packets per second the busiest switch forwarded and
all switches together (counters.json), the machine's idle share at its busiest (p5), the busiest BMv2's
CPU (p95), trusted or not and why. Stops growing after the first size that is not trusted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from pcnlab.cmdline import OneLineParser, positive

SPEC = """
name: scale
topology: {{kind: leaf-spine, leaves: {leaves}, spines: {spines}, hosts_per_leaf: {hosts}, bw: 20,
           fabric_bw: 40, queue: 60}}
mode: {{kind: pcn, K: 40, K_pre: 10}}
telemetry: 1
jobs:
  - {{name: gen, kind: generator, pattern: ps, ps: h1, workers: [{workers}], burst_bytes: 30000,
     reply_bytes: 1000, period_ms: 1000, iterations: {iterations}, burst_gap_us: 50000, cc: cubic, ecn: true}}
background:
  - {{src: [h2, h3], dst: h1, cc: cubic, ecn: true}}
duration_s: {duration}
warmup_s: 3
"""


def run_size(leaves: int, spines: int, hosts: int, duration: float, results: Path) -> dict:
    total = leaves * hosts
    workers = [f"h{i}" for i in range(4, total + 1)]
    spec = results / f"scale-{leaves}x{spines}x{hosts}.yaml"
    spec.write_text(SPEC.format(leaves=leaves, spines=spines, hosts=hosts, workers=", ".join(workers),
                                iterations=int(duration) - 5, duration=duration))
    out = results / spec.stem
    proc = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", "run", str(spec), "--results", str(out)],
                          capture_output=True, text=True, timeout=1800)
    run = next(out.glob("scale/*/run"), None)
    row = {"size": f"{leaves}x{spines}", "switches": leaves + spines, "hosts": total, "workers": len(workers),
           "exit": proc.returncode}
    if run is None or not (run / "fidelity.json").exists():
        row["why"] = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no run folder"]
        return row
    fidelity = json.loads((run / "fidelity.json").read_text())
    counters = json.loads((run / "counters.json").read_text())
    per_switch = {sw: sum(c["packets"] for c in rows if c["counter"] == "tx") / duration
                  for sw, rows in counters.items() if isinstance(rows, list)}
    cpu = fidelity["checks"].get("cpu") or {}
    row.update(trusted=fidelity["trusted"], reasons=fidelity["reasons"][:2],
               busiest_pps=round(max(per_switch.values(), default=0)), total_pps=round(sum(per_switch.values())),
               idle_p5=(cpu.get("machine_idle") or {}).get("p5"),
               bmv2_p95=max((v["p95"] for v in (cpu.get("bmv2") or {}).values()), default=None), run=str(run))
    return row


def main() -> None:
    parser = OneLineParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2x2x4,4x2x4,6x3x4,8x4x4", help="LEAVESxSPINESxHOSTS_PER_LEAF, ...")
    parser.add_argument("--duration", type=positive, default=25.0)
    parser.add_argument("--results", type=Path, default=None)
    args = parser.parse_args()
    results = args.results or Path(tempfile.mkdtemp(prefix="pcnlab-scale-"))
    results.mkdir(parents=True, exist_ok=True)
    for size in args.sizes.split(","):
        leaves, spines, hosts = (int(x) for x in size.split("x"))
        row = run_size(leaves, spines, hosts, args.duration, results)
        print(json.dumps(row), flush=True)
        if not row.get("trusted"):
            break


if __name__ == "__main__":
    main()
