"""pyproject.toml's build backend: setuptools, minus its "Editable installation." notice.

The project's top-level folders (controller/, topologies/, ...) are installed as pcnlab.* packages,
which setuptools can only install editable through an import finder; it then prints a boxed notice
that folders named like the package may shadow it, on every `pip install -e .`. Nothing here is
named pcnlab.* but pcnlab/ itself, so the notice is dropped. Every other warning still shows."""

import warnings

from setuptools.build_meta import *  # noqa: F401,F403  (the hooks pip calls)
from setuptools.build_meta import __all__  # noqa: F401
from setuptools.warnings import InformationOnly

warnings.filterwarnings("ignore", message=r"\s*Editable installation", category=InformationOnly)
