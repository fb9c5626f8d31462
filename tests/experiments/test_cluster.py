"""What a node must share with the submitter, and a run folder's trip home (experiments/cluster.py),
without a cluster: the differences named, a folder packed and unpacked whole, a tar that would write
outside the sweep refused, an address with nothing behind it one line at once."""

from __future__ import annotations

import tarfile
import time

import pytest

from pcnlab.errors import UsageError
from pcnlab.experiments.cluster import _reachable, chunks, differences, node_facts, pack, unpack


def test_the_facts_of_this_machine_name_its_code():
    import subprocess

    from conftest import ROOT

    facts = node_facts()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert facts["commit"] == head and len(facts["p4"]) == 16 and "torch" in facts["packages"]
    assert differences(facts, {**facts, "p4": "0" * 16}) == [f"p4 {facts['p4']} here, {'0' * 16} there"]


def test_differences_name_what_differs_and_nothing_else():
    mine = {"commit": "a" * 40, "dirty": False, "p4": "1" * 16, "python": "3.11.2",
            "packages": {"torch": "2.13.0", "numpy": "2.1"}, "p4c": "1.2.5", "bmv2": "1.15.5", "host": "x"}
    theirs = {**mine, "commit": "b" * 40, "host": "y", "packages": {"torch": "2.12.0", "numpy": "2.1", "ray": "2.60"}}
    assert differences(mine, theirs) == [f"commit {'a' * 12} here, {'b' * 12} there",
                                         "package ray absent here, 2.60 there",
                                         "package torch 2.13.0 here, 2.12.0 there"]


def test_a_run_folder_comes_home_whole(tmp_path):
    run = tmp_path / "node" / "mode=pcn"
    (run / "jobs" / "gen").mkdir(parents=True)
    (run / "metrics.json").write_text('{"a": 1}')
    (run / "jobs" / "gen" / "worker0-h2.jsonl").write_bytes(bytes(range(256)) * 4000)
    packed = pack(run, tmp_path / "run.tar")
    pieces = list(chunks(packed, 100_000))
    assert len(pieces) > 5
    home = unpack(pieces, tmp_path / "home" / "sweep")
    assert home == tmp_path / "home" / "sweep" / "mode=pcn"
    assert (home / "metrics.json").read_text() == '{"a": 1}'
    assert (home / "jobs" / "gen" / "worker0-h2.jsonl").read_bytes() == bytes(range(256)) * 4000


def test_a_tar_that_writes_outside_the_sweep_is_refused(tmp_path):
    bad = tmp_path / "bad.tar"
    (tmp_path / "x").write_text("x")
    with tarfile.open(bad, "w") as tar:
        tar.add(tmp_path / "x", arcname="run/../../escaped")
    with pytest.raises(tarfile.TarError):
        unpack([bad.read_bytes()], tmp_path / "home")
    assert not (tmp_path / "escaped").exists()


@pytest.mark.parametrize("address, words", [("127.0.0.1:1", "no Ray cluster at 127.0.0.1:1"),
                                            ("nonsense", "give host:port")])
def test_an_address_with_nothing_behind_it_is_one_line_at_once(address, words):
    started = time.monotonic()
    with pytest.raises(UsageError, match=words):
        _reachable(address)
    assert time.monotonic() - started < 6



def test_without_ray_the_cluster_option_says_how_to_get_it(tmp_path):
    import subprocess
    import sys

    from conftest import ROOT

    spec = tmp_path / "s.yaml"
    spec.write_text("name: s\ntopology: {kind: star, hosts: 2}\nswitch: bridge\nduration_s: 2\n")
    blocked = ("import sys; sys.modules['ray'] = None; from pcnlab.app.cli import main; "
               f"sys.exit(main(['run', {str(spec)!r}, '--cluster', '127.0.0.1:6379']))")
    done = subprocess.run([sys.executable, "-c", blocked], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("pcnlab: --cluster and pcnlab cluster need Ray, which is not installed here: "
                                   "`make deps` installs Ray (or: .venv/bin/pip install 'ray>=2.9')")
