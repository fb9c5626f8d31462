"""No experiment file makes `pcnlab run` (or `--dry-run`) hang or fill memory: aliases that expand
exponentially, merges of merges, nesting thousands deep, files of megabytes or a device, integers of
thousands of digits and sizes no machine holds are each one line and exit 2, within a second of what a
valid file takes, under an address-space limit (RLIMIT_AS) and a timeout. The files that also have a
fixed message are in malformed/ (test_config.py checks their lines)."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MALFORMED = Path(__file__).resolve().parent / "malformed"
MEMORY = 512 << 20            # bytes of address space: a dry run of a valid file needs less than half
TIMEOUT = 30


def _limited():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def cli(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pcnlab.app.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=TIMEOUT, preexec_fn=_limited)
    return proc, time.monotonic() - started


@pytest.fixture(scope="module")
def baseline() -> float:
    """What a valid file takes, start to end, under the same limits (interpreter and imports included)."""
    times = []
    for _ in range(2):
        proc, took = cli("run", str(ROOT / "experiments" / "smoke.yaml"), "--dry-run")
        assert proc.returncode == 0, proc.stderr
        times.append(took)
    return min(times)


def _laughs(levels: int, width: int = 10) -> str:
    lines = ["name: lol", "topology: star", "description: x", "jobs:", "  - kind: generator",
             "    ps: &a0 [h1, h1, h1, h1, h1, h1, h1, h1, h1, h1]"]
    for i in range(1, levels):
        lines.append(f"    x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return "\n".join(lines) + "\n"


def _laughs_in_mappings(levels: int) -> str:
    lines = ["name: lol", "topology: star", "fidelity: &m0 {min_rate_pct: 1, min_backlog_s: 1}"]
    lines += [f"mode: &m{i} {{{', '.join(f'k{j}: *m{i - 1}' for j in range(10))}}}" if i == 1 else
              f"switch{i}: &m{i} {{{', '.join(f'k{j}: *m{i - 1}' for j in range(10))}}}" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def _merges(levels: int) -> str:
    lines = ["name: merges", "topology: {kind: star, hosts: 4}", "jobs:",
             "  - &j0 {kind: generator, ps: h1, workers: 2, iterations: 0}"]
    for i in range(1, levels):
        lines.append(f"  - &j{i} {{<<: [{', '.join([f'*j{i - 1}'] * 10)}]}}")
    return "\n".join(lines) + "\n"


GENERATED = {
    "laughs-9-levels": (_laughs(9), "once its aliases are expanded"),
    "laughs-30-levels": (_laughs(30), "once its aliases are expanded"),
    "laughs-in-mappings": (_laughs_in_mappings(12), "once its aliases are expanded"),
    "merges-of-merges": (_merges(16), "jobs: 16 jobs"),
    "nested-5000-deep": ("name: deep\ntopology: star\ndescription: " + "[" * 5000 + "]" * 5000 + "\n",
                         "nested more than"),
    "ten-megabytes": ("name: big\ntopology: star\ndescription: '" + "x" * (10 << 20) + "'\n", "larger than 64 KB"),
    "integer-of-70000-digits": ("name: big\ntopology: star\nseed: " + "9" * 70_000 + "\n", "larger than 64 KB"),
    "integer-of-40000-digits": ("name: big\ntopology: star\nseed: " + "9" * 40_000 + "\n",
                                "cannot read this value: Exceeds the limit"),
    "float-beyond-double": ("name: big\ntopology: star\nduration_s: 1e400\n", "expected a number of seconds"),
    "hosts-in-the-billions": ("name: big\ntopology: {kind: star, hosts: 1000000000}\n", "must be at most 1000"),
    "leaf-spine-in-the-thousands": ("name: big\ntopology: {kind: leaf-spine, leaves: 64, spines: 64, "
                                    "hosts_per_leaf: 1000}\n", "more than 64 switches"),
    "sweep-of-ten-thousand-runs": ("name: big\ntopology: star\nsweep:\n" + "".join(
        f"  {key}: [{', '.join(str(v) for v in range(1, 11))}]\n" for key in ("seed", "warmup_s", "duration_s",
                                                                             "mode.guard_us")),
        "10000 runs; at most 1000"),
    "repetitions-in-the-billions": ("name: big\ntopology: star\nrepetitions: 1000000000\n", "must be at most 1000"),
    "flows-of-every-pair": ("name: big\ntopology: {kind: star, hosts: 1000}\nswitch: bridge\nbackground:\n"
                            "  - {src: hosts, dst: hosts}\n", "one machine runs at most 500"),
}
CORPUS = ["alias-bomb", "merge-bomb", "nested-too-deep", "integer-of-5000-digits", "star-beyond-the-machine",
          "tree-hosts-beyond-the-machine", "leaf-spine-switches-beyond-the-machine", "duration-absurd",
          "burst-bytes-absurd", "too-many-flows", "sweep-too-long"]


def _check(proc: subprocess.CompletedProcess, took: float, baseline: float, fragment: str | None) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pcnlab: "), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    if fragment:
        assert fragment in lines[0], lines[0]
    assert took < baseline + 1.0, f"{took:.2f} s against {baseline:.2f} s for a valid file"


@pytest.mark.parametrize("name", sorted(GENERATED))
@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "run"])
def test_generated_file(name, dry, tmp_path, baseline):
    text, fragment = GENERATED[name]
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    proc, took = cli("run", str(path), *(["--dry-run"] if dry else []), "--results", str(tmp_path / "results"))
    _check(proc, took, baseline, fragment)
    assert not (tmp_path / "results").exists()      # nothing started


@pytest.mark.parametrize("name", CORPUS)
def test_corpus_file_under_limits(name, baseline):
    path = MALFORMED / f"{name}.yaml"
    fragment = path.read_text().split("\n", 1)[0].split(": ", 2)[2]
    _check(*cli("run", str(path), "--dry-run"), baseline, fragment)


def test_a_device_is_not_read_to_its_end(baseline):
    _check(*cli("run", "/dev/zero", "--dry-run"), baseline, "larger than 64 KB")


@pytest.mark.parametrize("value, fragment", [
    ("[" * 5000 + "]" * 5000, "nested more than"),
    ("[&a [x, x, x, x, x, x, x, x, x, x], &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a], &c [*b, *b, *b, *b, *b, *b, "
     "*b, *b, *b, *b], &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c], &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]]",
     "once its aliases are expanded"),
    ("9" * 5000, "cannot read this value"),
], ids=["nested", "aliases", "long-integer"])
def test_set_values_are_bounded_too(value, fragment, baseline):
    _check(*cli("run", str(ROOT / "experiments" / "smoke.yaml"), "--dry-run", "--set", f"description={value}"),
           baseline, fragment)


def test_merge_keys_still_mean_what_yaml_says(tmp_path):
    """Deduplicating merged pairs keeps YAML's meaning: the mapping's own key wins (with its own line),
    then the first mapping merged; keys keep the order they first appear in."""
    from pcnlab.experiments.config.yamlpos import load_tree

    path = tmp_path / "merge.yaml"
    path.write_text("a: &a {x: 1, y: 2}\nb: &b {y: 3, z: 4}\n"
                    "c:\n  <<: [*a, *b, *a]\n  z: 5\n")
    c = load_tree(path).value["c"]
    assert c.plain() == {"x": 1, "y": 2, "z": 5}
    assert list(c.value) == ["x", "y", "z"]
    assert c.value["z"].key_where.line == 5 and c.value["x"].where.line == 1
