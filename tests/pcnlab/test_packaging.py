"""Every Python package of the source tree is in the distribution: an install that is not editable
(`pip install .`) once shipped without pcnlab.workloads.ltp, and every LTP job failed with
ModuleNotFoundError."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_with_an_init_is_listed():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    found = set()
    for name, folder in setuptools["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            if "__pycache__" in init.parts or ".venv" in init.parts:
                continue
            sub = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *sub)))
    missing = sorted(found - listed)
    assert not missing, f"add to [tool.setuptools] packages in pyproject.toml: {missing}"
