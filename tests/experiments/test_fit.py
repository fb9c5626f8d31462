"""The fit, before the run (experiments/fit.py, experiments/traffic.py): the shipped experiments loaded
for real and estimated against a slow machine's calibration and a fast one's; estimates worked out by
hand; a heavier --set that no longer fits, and the suggested --set that makes it fit again; each job's
flows capped at what it sends per iteration over its shortest iteration (`job_flows`), by hand.

Figures used throughout: a full frame's TCP payload is 1514 - 14 (Ethernet) - 20 (IPv4) - 32 (TCP with
timestamps) = 1448 bytes; rate_pps: 1 Mbit/s = 83, 10 = 826, 20 = 1651, 40 = 3303 packets/s."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pcnlab.experiments.config import load_experiment
from pcnlab.experiments.config.schema import section_keys
from pcnlab.experiments.fit import estimate, fit_lines
from pcnlab.experiments.traffic import flows, model_parameters, switch_pps
from pcnlab.rates import rate_pps

ROOT = Path(__file__).resolve().parents[2]
EXPERIMENTS = ROOT / "experiments"
SLOW_VM_FILE = ROOT.parent / "shared" / "machines" / "slow-vm-calibration.json"

# What `pcnlab calibrate` measured on a fresh 2-core Debian 12 VM (../shared/machines/slow-vm-calibration.json,
# the keys the fit reads): 12.0k packets/s telemetry off, 5.0k every packet; one worker and its PS beside a
# switch held at 20 Mbit/s took BMv2 past the fidelity check's CPU limit (fit 0, tried 1).
SLOW_VM = {"measured": "2026-11-28T20:42:14", "forward_pps": {"off": 11994.52512964825, "every1": 4975.5437118255695},
           "idle_lag_us": {"p50": 69.0, "p95": 295.79999999999995, "n": 1425},
           "workers": {"rate_mbps": 20.0, "fit": 0, "steps": [{"workers": 0}, {"workers": 1}]}}
# A fast machine: six workers beside the switch held (every count tried): nothing measured not to hold.
FAST = {"measured": "2026-12-01T09:00:00", "forward_pps": {"off": 30000.0, "every1": 20000.0},
        "workers": {"rate_mbps": 20.0, "fit": 6, "steps": [{"workers": n} for n in range(7)]}}
CORES = 2


def runs_of(name: str, overrides=()):
    return load_experiment(EXPERIMENTS / f"{name}.yaml", overrides).runs()


# smoke's generator: 50,000 bytes each way (reply_bytes null: burst_bytes) every 500 ms, per worker.
SMOKE_CAP = 50_000 / 1448 / 0.5                  # 69.06 packets/s, each of its four flows


def test_the_fixture_is_the_slow_vms_calibration():
    if not SLOW_VM_FILE.exists():
        pytest.skip(f"{SLOW_VM_FILE} is not beside this checkout; the fixture above is a copy of it")
    real = json.loads(SLOW_VM_FILE.read_text())
    assert real["forward_pps"] == SLOW_VM["forward_pps"]
    assert real["measured"] == SLOW_VM["measured"]
    assert (real["workers"]["fit"], real["workers"]["rate_mbps"]) == (0, 20.0)
    assert [s["workers"] for s in real["workers"]["steps"]] == [s["workers"] for s in SLOW_VM["workers"]["steps"]]


def test_smoke_by_hand_on_the_slow_vm():
    # Dumbbell: h1, h2 (workers), h3 (background) on s1; h4 (the PS) on s2. Flows: h1->h4, h2->h4 and
    # h4->h1, h4->h2, the generator's, each capped at c = 50,000 / 1448 / 0.5 s = 69.06 packets/s; h3->h4
    # (x), backlogged. s1's queue towards s2 (10 Mbit/s = 826 packets/s) carries the three up flows' data
    # and the two down flows' ACKs. Filling alike (all at t), s1->s2 holds 4t: at t = c it holds 276 < 826,
    # so the generator's four flows stop at their cap. x grows alone until s1->s2 is full:
    # 2c + 2(c/2) + x = 826, x = 826 - 3c = 618.8 (s2->h4 carries the same 3c + x = 826 of its 1651;
    # s2->s1: 2c + (2c + x)/2 = 517 < 826). Every flow's data and ACKs cross both switches:
    # 1.5 (4c + x) = 1.5 (826 + c) = 1342.6 each (backlogged, it was 5 x 1.5 x 826/4 = 1548.75).
    c = SMOKE_CAP
    assert c == pytest.approx(69.06, abs=0.01)
    x = rate_pps(10) - 3 * c
    assert x == pytest.approx(618.8, abs=0.1)
    s1 = 1.5 * (4 * c + x)
    assert s1 == pytest.approx(1.5 * (826 + c)) == pytest.approx(1342.59, abs=0.01)
    fits = estimate(runs_of("smoke"), SLOW_VM, cores=CORES)
    assert len(fits) == 2
    for fit in fits:
        assert fit.pps_of("s1") == pytest.approx(s1)
        assert fit.pps_of("s2") == pytest.approx(s1)
        assert fit.switch == "s1"                                   # a tie goes to the first switch
        assert fit.capacity == pytest.approx(SLOW_VM["forward_pps"]["every1"])
        assert fit.share == pytest.approx(s1 / 4975.5437118255695)   # 27 %
        # 2 switches, 2 collectors, the generator's PS and 2 workers, the background sender and receiver
        assert (fit.processes, fit.torch_processes, fit.cores) == (9, 0, CORES)
        assert fit.keeps_up is True and fit.suggestion is None
    lines = fit_lines(fits)
    assert lines == ["fit: s1 busiest, about 1,300 packets/s of the 5,000 one BMv2 switch forwards here with "
                     "telemetry every packet (27 %); 9 processes on 2 cores"]


def test_a_capped_background_flow_and_a_ring_by_hand():
    # Smoke with the background flow capped at 1 Mbit/s (83 packets/s): all five grow alike; the
    # generator's four stop at c = 69.06, the background flow at 83. s1->s2 then holds 3c + 83 = 290 of
    # its 826: no link is full, every flow sends what it is capped at, and both switches carry
    # 1.5 (4c + 83) = 538.9.
    capped = rate_pps(1)
    c = SMOKE_CAP
    run = runs_of("smoke", ["background.0.rate=1"])[0]
    assert sorted(f.cap_pps for f in flows(run)) == [pytest.approx(c)] * 4 + [capped]
    assert switch_pps(run) == {"s1": pytest.approx(1.5 * (4 * c + capped)), "s2": pytest.approx(1.5 * (4 * c + capped))}
    assert switch_pps(run)["s1"] == pytest.approx(538.86, abs=0.01)
    # The same with the generator backlogged (period_ms 0 and compute_ms 0: no time to cap it by), so the
    # capped flow stops among flows that go on and fill the link: all five grow alike to 83, where it
    # stops; s1->s2 then holds 4 x 83 and the four others add 1 + 1 + 1/2 + 1/2 each per step:
    # (826 - 332) / 3 more each, and s1->s2 is full (s2->s1: 3.5 x 83 + 3 x 164.7 = 784 < 826).
    t = capped + (rate_pps(10) - 4 * capped) / 3
    run = runs_of("smoke", ["background.0.rate=1", "jobs.0.period_ms=0"])[0]
    assert [f.cap_pps for f in flows(run)] == [None] * 4 + [capped]
    assert switch_pps(run) == {"s1": pytest.approx(1.5 * (4 * t + capped)), "s2": pytest.approx(1.5 * (4 * t + capped))}
    # Burstiness' ring: h2 -> h3 -> h4 -> h2 on one switch at 10 Mbit/s; each queue towards a rank carries
    # the flow into it and the ACKs of the flow out of it: 1.5t <= 826, t <= 550.7. Its model,
    # profile:resnet50 at scale 0.001, has 25,617 parameters counted on the model the workers build:
    # 102,468 bytes, of which a ring rank sends 2 (3 - 1) / 3 = 4/3 per iteration, 136,624 bytes:
    # at compute_ms 50, 136,624 / 1448 / 0.05 s = 1887 packets/s, above the link's 550.7 (the switch carries
    # 3 x 1.5 x 550.7 = 826 x 3 = 2478); at compute_ms 200, 471.8 packets/s, below it: 3 x 1.5 x 471.8 = 2123.
    assert model_parameters("profile:resnet50", 0.001) == 25_617
    rank_bytes = 4 * 25_617 * 2 * (3 - 1) / 3
    rings = {r.jobs[0].compute_ms: r for r in runs_of("burstiness") if r.jobs[0].kind == "ring"}
    assert [(f.src, f.dst) for f in flows(rings[50])] == [("h2", "h3"), ("h3", "h4"), ("h4", "h2")]
    assert [f.cap_pps for f in flows(rings[50])] == [pytest.approx(rank_bytes / 1448 / 0.05)] * 3   # 1887
    assert switch_pps(rings[50]) == {"s1": pytest.approx(3 * rate_pps(10))}
    assert [f.cap_pps for f in flows(rings[200])] == [pytest.approx(rank_bytes / 1448 / 0.2)] * 3   # 471.8
    assert switch_pps(rings[200]) == {"s1": pytest.approx(3 * 1.5 * rank_bytes / 1448 / 0.2)}
    assert switch_pps(rings[200])["s1"] == pytest.approx(2122.96, abs=0.01)


def test_pcn_training_by_hand_does_not_keep_up_on_the_slow_vm_and_its_suggestions_make_it():
    # Star: PS h1, workers h2-h4, background h5, h6 -> h1. The PS job's model, digits-mlp, has 9,610
    # parameters: 38,440 bytes of gradients up and of parameters down per worker per iteration, at least
    # compute_ms 150 apart: each of its six flows capped at c = 38,440 / 1448 / 0.15 s = 176.98 packets/s.
    # s1's queue towards h1 (1651 packets/s) carries five flows' data and the ACKs of the PS's three
    # answers: 6.5t; at t = c that is 1150 < 1651, so the job's six flows stop at their cap, and the two
    # background flows fill the rest: 3c + 3c/2 + 2x = 1651, x = (1651 - 4.5c) / 2 = 427.3. All eight
    # flows cross s1, data and ACKs: 1.5 (6c + 2x) = 1.5 (1651 + 1.5c) = 2874.7 (backlogged: 3048).
    assert model_parameters("digits-mlp", 0.01) == 9_610
    c = 4 * 9_610 / 1448 / 0.15
    x = (rate_pps(20) - 4.5 * c) / 2
    assert (c, x) == (pytest.approx(176.98, abs=0.01), pytest.approx(427.3, abs=0.1))
    fits = estimate(runs_of("pcn-training"), SLOW_VM, cores=CORES)
    fit = fits[0]
    assert fit.pps_of("s1") == pytest.approx(1.5 * (6 * c + 2 * x)) == pytest.approx(2874.70, abs=0.01)
    assert fit.torch_processes == 4 and fit.processes == 1 + 1 + 4 + 4
    # 58 % of what the switch forwards: within it, but heavier than the calibration's switch at 20 Mbit/s
    # (1651 / 4976 = 33 %), which did not hold its rate beside a PS and one worker: 4 PyTorch processes here.
    assert fit.share == pytest.approx(1.5 * (6 * c + 2 * x) / 4975.5437118255695)
    assert fit.share < 1
    assert fit.keeps_up is False
    assert "beside 4 PyTorch processes" in fit.reason and "20 Mbit/s (33 %)" in fit.reason
    # The suggested rates: at 10 Mbit/s (826) the job's caps no longer bind (6.5c = 1150 > 826): all eight
    # flows at 826 / 6.5, s1 at 8 x 1.5 x 826 / 6.5 = 1525, 31 % < 33 %; at 11 (908) 12 x 908 / 6.5 = 1676,
    # 34 %: still too heavy, so 10.
    assert fit.rate_overrides == ("topology.bw=10", "topology.first_bw=10")
    lines = fit_lines(fits)
    assert len(lines) == 2 and lines[1].startswith("will not keep up here: s1 at about 2,900 packets/s (58 %")
    assert lines[1].endswith("(calibrated 2026-11-28): add --set time_scale=2 (or --set topology.bw=10 "
                             "--set topology.first_bw=10)") or "time_scale" not in section_keys("")
    fixed = estimate(runs_of("pcn-training", fit.rate_overrides), SLOW_VM, cores=CORES)
    assert all(f.keeps_up is True for f in fixed)
    assert fixed[0].pps_of("s1") == pytest.approx(8 * 1.5 * rate_pps(10) / 6.5)             # 1525
    assert all(f.keeps_up is True for f in estimate(runs_of("pcn-training"), FAST, cores=CORES))


def test_without_a_measured_count_processes_are_reported_without_a_verdict():
    # The same machine's forwarding, but no workers measured (or none that failed): 58 % keeps up.
    for workers in (None, {"rate_mbps": 20.0, "fit": 1, "steps": [{"workers": 0}, {"workers": 1}]}):
        calibration = {**SLOW_VM, "workers": workers}
        fits = estimate(runs_of("pcn-training"), calibration, cores=CORES)
        assert all(f.keeps_up is True for f in fits)
        assert "10 processes (4 PyTorch) on 2 cores" in fit_lines(fits)[0] and len(fit_lines(fits)) == 1


def test_a_heavier_set_does_not_keep_up_and_the_suggested_rates_make_it():
    heavy = ["topology.bw=40", "topology.bottleneck_bw=40"]
    # Both links 40 Mbit/s (3303 packets/s): s1->s2 and s2's queue towards h4 carry the three up flows' data
    # and the two down flows' ACKs, 4t: at the generator's cap c = 69.06 that is 276, so its four flows
    # stop there; the background flow fills the rest, x = 3303 - 3c = 3096. Both switches carry
    # 1.5 (4c + x) = 1.5 (3303 + c) = 5058: 1.02 x the 4976 the slow VM forwards.
    c = SMOKE_CAP
    fits = estimate(runs_of("smoke", heavy), SLOW_VM, cores=CORES)
    assert fits[0].pps_of("s1") == pytest.approx(1.5 * (rate_pps(40) + c)) == pytest.approx(5058.09, abs=0.01)
    assert all(f.keeps_up is False for f in fits)
    assert "s1 needs about 5,100 packets/s, 1.0 x the 5,000" in fits[0].reason
    # Lowered by one factor: at 39 Mbit/s (3220) 1.5 (3220 + c) = 4934 < 4976 fits.
    assert fits[0].rate_overrides == ("topology.bw=39", "topology.bottleneck_bw=39")
    assert estimate(runs_of("smoke", heavy + list(fits[0].rate_overrides)), SLOW_VM, cores=CORES)[0].pps_of("s1") \
        == pytest.approx(1.5 * (rate_pps(39) + c))
    assert all(f.keeps_up is True for f in estimate(runs_of("smoke", heavy + list(fits[0].rate_overrides)),
                                                       SLOW_VM, cores=CORES))
    # The fast machine forwards it.
    assert all(f.keeps_up is True for f in estimate(runs_of("smoke", heavy), FAST, cores=CORES))
    # With the generator backlogged (period_ms 0, compute_ms 0) the same links carry what they did under
    # the old model: s2->h4 full at 3t + t = 3303 with every flow crossing it, 5 x 1.5 x 3303/4 = 6193, 1.2 x.
    backlogged = heavy + ["jobs.0.period_ms=0"]
    fits = estimate(runs_of("smoke", backlogged), SLOW_VM, cores=CORES)
    assert fits[0].pps_of("s1") == pytest.approx(5 * 1.5 * rate_pps(40) / 4)     # 6193
    assert all(f.keeps_up is False for f in fits)
    assert "s1 needs about 6,200 packets/s, 1.2 x the 5,000" in fits[0].reason
    assert fits[0].rate_overrides == ("topology.bw=32", "topology.bottleneck_bw=32")
    assert all(f.keeps_up is True for f in estimate(runs_of("smoke", backlogged + list(fits[0].rate_overrides)),
                                                       SLOW_VM, cores=CORES))


def test_the_suggested_time_scale_makes_it_fit():
    if "time_scale" not in section_keys(""):
        pytest.skip("the schema has no time_scale key yet (experiments/config/schema.py): only the rate "
                    "suggestion is tested")
    heavy = ["topology.bw=40", "topology.bottleneck_bw=40"]
    # 5058 packets/s at 40 Mbit/s (the test above). time_scale 2 halves the rates (20 Mbit/s: 1651) and
    # doubles period_ms (1000: the generator's cap halves, c/2 = 34.53): 1.5 (1651 + c/2) = 2528, half of
    # 5058 but for rate_pps's rounding (3303 / 2 = 1651.5).
    c = SMOKE_CAP
    fits = estimate(runs_of("smoke", heavy), SLOW_VM, cores=CORES)
    assert fits[0].time_scale == 2 and fits[0].suggestion.startswith("--set time_scale=2 (or --set topology.bw=39")
    scaled = estimate(runs_of("smoke", heavy + ["time_scale=2"]), SLOW_VM, cores=CORES)
    assert all(f.keeps_up is True for f in scaled)
    assert scaled[0].pps == pytest.approx(1.5 * (rate_pps(20) + c / 2))
    assert scaled[0].pps == pytest.approx(fits[0].pps / 2, rel=1e-3)        # rate_pps rounds
    # pcn-training: 58 % against the 33 % the calibration's switch did not hold beside a PS and one worker:
    # 2 is the least factor; scaled by it (10 Mbit/s links, compute_ms 300: the job's caps halve, 88.49),
    # 6.5 x 88.49 = 575 < 826, so they bind, the background takes (826 - 4.5 x 88.49) / 2 each, and s1
    # carries 1.5 (826 + 1.5 x 88.49) = 1438, 29 %.
    training = estimate(runs_of("pcn-training"), SLOW_VM, cores=CORES)
    assert training[0].time_scale == 2
    training2 = estimate(runs_of("pcn-training", ["time_scale=2"]), SLOW_VM, cores=CORES)
    assert all(f.keeps_up is True for f in training2)
    assert training2[0].pps == pytest.approx(1.5 * (rate_pps(10) + 1.5 * 4 * 9_610 / 1448 / 0.3))
    # A run already scaled is suggested a larger factor, counted from the file's rates. At 80 Mbit/s and
    # time_scale 2 (40 Mbit/s, period_ms 1000): 1.5 (3303 + c/2) = 5006 > 4976 does not fit; 3 does.
    already = estimate(runs_of("smoke", ["topology.bw=80", "topology.bottleneck_bw=80", "time_scale=2"]), SLOW_VM,
                       cores=CORES)[0]
    assert already.pps == pytest.approx(1.5 * (rate_pps(40) + c / 2)) and already.keeps_up is False
    assert already.time_scale == 3


def test_pcn_paper_by_hand_and_one_line_for_twelve_runs():
    # Tree: ten flows into the PS (4 workers, 6 background) and four answers. The generator sends
    # 100,000 bytes up and gets 1,000 back every 2000 ms: each up flow capped at u = 100,000 / 1448 / 2 s =
    # 34.53 packets/s, each answer at d = 1,000 / 1448 / 2 s = 0.345. s1's queue towards h1 (1651) carries
    # the ten flows' data and the four answers' ACKs; filling alike, the answers stop at d, the up flows at u
    # (10u + 4d/2 = 346 < 1651), and the six background flows fill the rest: 4u + 2d + 6x = 1651,
    # x = 252.0 (a leaf's uplink, 40 Mbit/s, carries 2u + 3x + d = 825 of its 3303). s1 forwards all 14
    # (data and ACKs): 1.5 (4u + 4d + 6x) = 1.5 (1651 + 2d) = 2477.5; each leaf its 2 workers' up flows and
    # answers and 3 background flows, 1.5 (2u + 2d + 3x): half of s1's. 50 % of the slow VM's 4976,
    # 12 % of the fast machine's 20,000 (backlogged it was 14 x 1.5 x 1651/12 = 2889: 58 % and 14 %).
    u, d = 100_000 / 1448 / 2, 1_000 / 1448 / 2
    x = (rate_pps(20) - 4 * u - 2 * d) / 6
    assert (u, d, x) == (pytest.approx(34.53, abs=0.01), pytest.approx(0.345, abs=0.001), pytest.approx(252.0, abs=0.1))
    s1 = 1.5 * (4 * u + 4 * d + 6 * x)
    assert s1 == pytest.approx(1.5 * (rate_pps(20) + 2 * d)) == pytest.approx(2477.54, abs=0.01)
    runs = runs_of("pcn-paper")
    for calibration, share in ((SLOW_VM, "50 %"), (FAST, "12 %")):
        fits = estimate(runs, calibration, cores=CORES)
        assert len(fits) == 12
        assert fits[0].pps_of("s1") == pytest.approx(s1)
        assert fits[0].pps_of("s2") == pytest.approx(1.5 * (2 * u + 2 * d + 3 * x)) == fits[0].pps_of("s3")
        assert fits[0].pps_of("s2") == pytest.approx(s1 / 2)
        assert all(f.keeps_up is True for f in fits)
        lines = fit_lines(fits)
        assert len(lines) == 1 and f"({share}); 23 processes on 2 cores" in lines[0]


def test_a_line_per_run_shape():
    fits = estimate(runs_of("scaling"), SLOW_VM, cores=CORES)
    lines = fit_lines(fits)
    assert len(lines) == 4 and lines[0].startswith("fit, workers=1: s1 busiest")
    assert "with telemetry 1 in 10 packets" in lines[0]
    assert [line.split("; ")[1] for line in lines] == [f"{n + 3} processes ({n + 1} PyTorch) on 2 cores"
                                                      for n in (1, 2, 4, 6)]


def test_no_calibration_no_estimate():
    for calibration in (None, {}):
        fits = estimate(runs_of("smoke"), calibration, cores=CORES)
        assert [f.keeps_up for f in fits] == [None, None]
        assert fits[0].pps_of("s1") == pytest.approx(1.5 * (826 + SMOKE_CAP))   # 1342.6: still estimated
        assert fit_lines(fits) == ["fit: this machine is not calibrated yet (pcnlab calibrate), so no estimate "
                                   "of whether the runs keep up here"]
    fits = estimate(runs_of("smoke"), {"measured": "2026-11-28", "workers": SLOW_VM["workers"]}, cores=CORES)
    assert [f.keeps_up for f in fits] == [None, None]
    assert fit_lines(fits) == ["fit: this machine's calibration has no forwarding figure for the runs' telemetry "
                               "setting (pcnlab calibrate), so no estimate of whether they keep up here"]


def test_linux_bridges_only_nothing_to_estimate():
    runs = runs_of("scaling-unconstrained")
    assert runs and all(r.switch.kind == "bridge" for r in runs)
    fits = estimate(runs, SLOW_VM, cores=CORES)
    assert [(f.switch, f.keeps_up) for f in fits] == [(None, None)] * len(runs)
    assert fit_lines(fits) == []


def test_a_suggested_time_scale_spreads_a_jobs_bytes_over_its_longer_iterations():
    # Smoke with 400,000-byte bursts and both links at 70 Mbit/s (5,779 packets/s each). At time_scale 2 the
    # links carry 2,890 and each worker's 400,000 bytes come every 1,000 ms, not 500: 276.2 packets/s each.
    # The estimate of the suggestion must be of that run, as `--set time_scale=2` makes it.
    heavy = ["jobs.0.burst_bytes=400000", "topology.bw=70", "topology.bottleneck_bw=70"]
    fits = estimate(runs_of("smoke", heavy), SLOW_VM, cores=CORES)
    assert fits[0].keeps_up is False and fits[0].time_scale == 2        # 3 when the jobs' times were not scaled
    scaled = estimate(runs_of("smoke", heavy + ["time_scale=2"]), SLOW_VM, cores=CORES)
    assert all(f.keeps_up for f in scaled)
    assert scaled[0].pps == pytest.approx(1.5 * (rate_pps(35) + 400_000 / 1448 / 1.0))
