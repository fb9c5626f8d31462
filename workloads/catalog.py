"""The models a PyTorch job can train, by name: the one list the workers (models.py), the launcher and
the experiment schema (experiments/config/schema.py) share. Importing it does not import PyTorch.

Two kinds of names:
- real models, trained on data (they report a training loss and a test accuracy): `mlp`, `cnn` (easy
  synthetic tasks generated at run time) and `digits-mlp`, `digits-cnn` (scikit-learn's bundled
  handwritten digits, datasets.py);
- gradient profiles (no forward pass; a large model's per-layer gradient sizes, scaled: profiles.py).
  Experiment files name them alone (`resnet50`); the worker processes take `profile:resnet50`.
"""

from __future__ import annotations

from pcnlab.errors import UsageError
from pcnlab.workloads.process_config import PROFILE_SCALE
from pcnlab.workloads.profiles import PROFILES, scaled

SYNTHETIC_MODELS = ("mlp", "cnn")
DIGITS_MODELS = ("digits-mlp", "digits-cnn")
REAL_MODELS = SYNTHETIC_MODELS + DIGITS_MODELS
PROFILE_MODELS = tuple(PROFILES)
MODELS = REAL_MODELS + PROFILE_MODELS          # as experiment files name them
PROFILE_PREFIX = "profile:"
PROCESS_MODELS = REAL_MODELS + tuple(PROFILE_PREFIX + p for p in PROFILE_MODELS)  # as the workers take them


def process_model(name: str) -> str:
    """An experiment file's model name as the worker processes take it (`resnet50` -> `profile:resnet50`)."""
    return PROFILE_PREFIX + name if name in PROFILE_MODELS else name


def is_profile(name: str) -> bool:
    return name.startswith(PROFILE_PREFIX)


def check_model(name: str, profile_scale: float = PROFILE_SCALE) -> None:
    """A one-line UsageError unless the workers can build `name` (a process model name)."""
    if is_profile(name):
        scaled(name[len(PROFILE_PREFIX):], profile_scale)
    elif name not in REAL_MODELS:
        raise UsageError(f"unknown model {name!r}; choose one of {', '.join(PROCESS_MODELS)}")
