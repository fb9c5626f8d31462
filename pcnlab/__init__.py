"""PCN Lab: a Mininet/P4 testbed for distributed deep learning traffic.

The project's top-level folders (controller/, workloads/, ...) are pcnlab's subpackages (pyproject.toml's
package-dir). Installed, setuptools maps them; from a checkout on PYTHONPATH alone (a container's worker,
which mounts the checkout and puts containers/pythonpath first: workloads/containers.py), the checkout's
own folder is searched as well, which finds the same folders under the same names."""

from pathlib import Path as _Path

__version__ = "0.1.0"
__path__.append(str(_Path(__file__).resolve().parents[1]))  # noqa: F821 (a package's own __path__)
