"""versions.json's provenance on a real `versions()` call: the checkout's commit and whether its tree has
changes (as git itself says), every installed package with its version, and p4c/BMv2; a folder that is no
checkout, and a machine without git, are said so instead of failing."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess

import pytest
import yaml

from pcnlab.experiments.provenance import PROJECT_DIR, git_state, versions

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")


def git(folder, *args) -> str:
    return subprocess.run(["git", "-c", f"safe.directory={folder}", "-C", str(folder), *args], check=True,
                          capture_output=True, text=True).stdout.strip()


def test_versions_of_this_machine():
    out = versions()
    json.dumps(out)                                   # what runner writes: plain JSON
    assert out["packages"]["pcnlab"] == importlib.metadata.version("pcnlab")
    assert out["packages"]["PyYAML"] == yaml.__version__
    assert len(out["packages"]) >= 20                 # torch, pandas, scapy, finsy, ... and their dependencies
    if shutil.which("p4c"):
        assert out["p4c"].startswith("p4c ")
    if shutil.which("simple_switch_grpc"):
        assert out["bmv2"] and out["bmv2_binary"].endswith("simple_switch_grpc")
    state = out["git"]
    if shutil.which("git") and (PROJECT_DIR / ".git").exists():
        assert state["commit"] == git(PROJECT_DIR, "rev-parse", "HEAD")
        assert state["dirty"] == bool(git(PROJECT_DIR, "status", "--porcelain"))
    else:
        assert state["commit"] is None and state["note"]


@needs_git
def test_a_checkout_clean_then_dirty(tmp_path):
    git(tmp_path, "init", "-q")
    assert git_state(tmp_path) == {"commit": None, "note": "a git checkout without commits"}
    (tmp_path / "a.txt").write_text("one\n")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert git_state(tmp_path) == {"commit": head, "dirty": False, "changed": 0}
    (tmp_path / "a.txt").write_text("two\n")
    (tmp_path / "b.txt").write_text("new\n")
    assert git_state(tmp_path) == {"commit": head, "dirty": True, "changed": 2}
    index = (tmp_path / ".git" / "index").stat().st_mtime_ns
    git_state(tmp_path)
    assert (tmp_path / ".git" / "index").stat().st_mtime_ns == index   # never writes to the user's checkout


@needs_git
def test_not_a_checkout(tmp_path):
    assert git_state(tmp_path) == {"commit": None, "note": f"{tmp_path} is not a git checkout"}


def test_no_git_installed(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))         # a PATH on which git is not found
    assert git_state(PROJECT_DIR) == {"commit": None, "note": "git is not installed"}
