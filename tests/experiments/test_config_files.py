"""Experiment files as YAML: a missing file, YAML 1.1 spellings, anchors and merge keys; every malformed file
in malformed/ is one line naming the file, the line and the problem, without a traceback; the YAML
reference (docs/yaml-reference.md) is up to date and lists every key."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from config_files import MINIMAL, write_file

from pcnlab.errors import UsageError
from pcnlab.experiments.config import load_experiment, reference_markdown
from pcnlab.experiments.config.schema import TOPOLOGY_PARAMS

ROOT = Path(__file__).resolve().parents[2]
MALFORMED = Path(__file__).resolve().parent / "malformed"


# --- YAML ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted((ROOT / "experiments").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_experiment_loads_with_its_runs(path):
    experiment = load_experiment(path)
    runs = experiment.runs()
    assert runs and len({r.name for r in runs}) == len(runs)
    assert experiment.name == path.stem



def test_missing_file_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="no such experiment file"):
        load_experiment(tmp_path / "nope.yaml")


def test_yaml_1_1_spellings_are_read_as_meant(tmp_path):
    text = MINIMAL + "mode: {kind: ecn, K: 4e1}\njobs.0.x: 1\n"
    with pytest.raises(UsageError, match=r"exp.yaml:7: jobs.0.x: unknown key \(dotted keys are for sweep"):
        load_experiment(write_file(tmp_path, text))
    text = MINIMAL.replace("workers: 2", "workers: 2\n    burst_bytes: 1e6\n    ecn: off")
    text += "mode: {kind: ecn, K: 4e1}\n"
    run = load_experiment(write_file(tmp_path, text)).runs()[0]
    assert run.jobs[0].burst_bytes == 1_000_000 and run.jobs[0].ecn is False and run.mode.K == 40


def test_merge_keys_and_anchors(tmp_path):
    text = """\
topology: {kind: star, hosts: 4}
defaults: &gen
  kind: generator
  ps: h1
"""
    with pytest.raises(UsageError, match="exp.yaml:2: defaults: unknown key"):
        load_experiment(write_file(tmp_path, text))
    text = """\
topology: {kind: star, hosts: 4}
jobs:
  - &gen {kind: generator, ps: h1, workers: [h2]}
  - {<<: *gen, name: second, workers: [h3, h4]}
"""
    jobs = load_experiment(write_file(tmp_path, text)).runs()[0].jobs
    assert [(j.name, j.ps, j.workers) for j in jobs] == [("job1", ("h1",), ("h2",)), ("second", ("h1",), ("h3", "h4"))]


# --- the malformed corpus ------------------------------------------------------------------------

def _cases():
    out = []
    for path in sorted(MALFORMED.glob("*.yaml")):
        first = path.read_text().split("\n", 1)[0]
        m = re.fullmatch(r"# expect: (\d+): (.+)", first)
        if path.stat().st_size and m is None:
            raise AssertionError(f"{path.name}: first line must be '# expect: LINE: FRAGMENT'")
        out.append((path, int(m.group(1)), m.group(2)) if m else (path, 1, "the file is empty"))
    return out


EMPTY_CASE = MALFORMED / "empty-file.yaml"


def test_the_corpus_is_large_enough():
    assert len(_cases()) >= 20


@pytest.mark.parametrize("path, line, fragment", _cases(), ids=lambda v: v.name if isinstance(v, Path) else "")
def test_malformed_file(path, line, fragment):
    with pytest.raises(UsageError) as err:
        load_experiment(path)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:{line}: "), message
    assert fragment in message, message


ENTRY = """
import json, sys
from pcnlab.errors import PcnLabError
from pcnlab.experiments.config import load_experiment
out = []
for path in sys.argv[1:]:
    try:
        load_experiment(path)
        out.append([path, None, None])
    except PcnLabError as exc:
        out.append([path, exc.exit_code, f"pcnlab: {exc}"])
print(json.dumps(out))
"""


def test_malformed_files_print_one_line_without_traceback():
    """As the CLI does it: catch PcnLabError and print `pcnlab: <msg>`; anything else would crash with a
    traceback and fail this test."""
    paths = [str(p) for p, _, _ in _cases()]
    proc = subprocess.run([sys.executable, "-c", ENTRY, *paths], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    results = json.loads(proc.stdout)
    for path, code, line in results:
        assert code == 2, path
        assert line.count("\n") == 0 and line.startswith(f"pcnlab: {path}:"), line


# --- the reference -------------------------------------------------------------------------------

def test_yaml_reference_is_up_to_date():
    doc = ROOT / "docs" / "yaml-reference.md"
    assert doc.read_text() == reference_markdown() + "\n", \
        "regenerate: .venv/bin/python -c 'from pcnlab.experiments.config import reference_markdown as r; " \
        "open(\"docs/yaml-reference.md\", \"w\").write(r() + \"\\n\")'"


def test_reference_lists_every_key():
    from pcnlab.experiments.config.schema import LIST_SECTIONS, SECTIONS
    text = reference_markdown()
    for section, keys in SECTIONS.items():
        for key in keys:
            prefix = "" if not section else (f"{section}.N." if section in LIST_SECTIONS else f"{section}.")
            assert f"| `{prefix}{key.name}` |" in text, (section, key.name)
    for params in TOPOLOGY_PARAMS.values():
        for key in params:
            assert f"| `topology.{key.name}` |" in text
