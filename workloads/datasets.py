"""A real data set that ships inside a package: scikit-learn's handwritten digits
(`sklearn.datasets.load_digits`: 1797 images of 8 x 8 pixels, 16 grey levels, 10 classes).

    split = digits_split()            # fixed: every run trains and tests on the same images
    split.x_train, split.y_train      # 1438 images (float32 in [0, 1], 64 pixels each), labels 0-9
    split.x_test, split.y_test        # 359 held out: 20 % of each class (rounded)
    shard_indices(len(split.y_train), worker, workers)   # a worker's own part of the training split

The split is stratified (20 % of every class held out) and seeded by DIGITS_SPLIT_SEED, not by the
run's seed, so runs of different seeds or sweep points measure accuracy on the same test images.

Importing scikit-learn costs about a second of CPU; on 2 cores, N workers importing it at once would
be N seconds of a busy machine inside the run. So the images are read once per scikit-learn version
and kept as a .npz in the user's cache folder (PCNLAB_CACHE, else $XDG_CACHE_HOME/pcnlab, else
~/.cache/pcnlab); the launcher fills it before it starts a job's processes and names it to them in
PCNLAB_DIGITS (a container mounts that folder and has no scikit-learn to name it by).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from pcnlab.errors import PcnLabError

DIGITS_VARIABLE = "PCNLAB_DIGITS"   # the cached copy a job's processes read (the launcher fills and sets it)
DIGITS_TEST_FRACTION = 0.2
DIGITS_SPLIT_SEED = 0
DIGITS_CLASSES = 10
DIGITS_SIDE = 8
DIGITS_LEVELS = 16.0     # pixel values are 0..16


@dataclass(frozen=True)
class Split:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def cache_dir() -> Path:
    if os.environ.get("PCNLAB_CACHE"):
        return Path(os.environ["PCNLAB_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pcnlab"


def _sklearn_version() -> str:
    try:
        return metadata.version("scikit-learn")
    except metadata.PackageNotFoundError:
        raise PcnLabError("the digits models need scikit-learn (its bundled digits data set): "
                          "run `make deps`, or .venv/bin/python -m pip install scikit-learn") from None


def cached_digits_path() -> Path:
    return cache_dir() / f"digits-sklearn-{_sklearn_version()}.npz"


def ensure_digits() -> Path:
    """The cached copy of the digits (made from sklearn.datasets.load_digits if missing); its path."""
    path = cached_digits_path()
    if path.exists():
        return path
    from sklearn.datasets import load_digits

    data = load_digits()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Several processes may fill the cache at once: each writes its own file and renames it into place.
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz.tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, data=data.data.astype(np.uint8), target=data.target.astype(np.int64))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def digits() -> tuple[np.ndarray, np.ndarray]:
    """(images as float32 rows of 64 pixels in [0, 1], labels as int64), in the data set's order."""
    given = os.environ.get(DIGITS_VARIABLE)     # a container's image has no sklearn to name the cached copy
    with np.load(given if given else ensure_digits()) as raw:
        return raw["data"].astype(np.float32) / DIGITS_LEVELS, raw["target"].astype(np.int64)


def stratified_split(y: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, test indices): round(test_fraction x n_c) of every class c held out, chosen by
    a permutation seeded by `seed`; both sorted."""
    rng = np.random.default_rng(seed)
    test = []
    for c in np.unique(y):
        members = np.flatnonzero(y == c)
        test.append(rng.permutation(members)[:round(test_fraction * len(members))])
    held = np.sort(np.concatenate(test))
    return np.setdiff1d(np.arange(len(y)), held), held


def digits_split() -> Split:
    x, y = digits()
    train, test = stratified_split(y, DIGITS_TEST_FRACTION, DIGITS_SPLIT_SEED)
    return Split(x[train], y[train], x[test], y[test])


def shard_indices(n: int, index: int, count: int) -> np.ndarray:
    """The training examples of worker `index` of `count`: every count-th one from its index, so the
    shards are disjoint, cover the split and differ in size by at most one."""
    if not 0 <= index < count:
        raise ValueError(f"shard {index} of {count}")
    return np.arange(index, n, count)
