"""The models the workers train, their data, and the gradient-profile stand-in (names: catalog.py).

Every rank builds the same model from the same seed, so all replicas start identical.

- mlp: 32 features -> 64 -> 64 -> 8 classes, on an easy task generated at run time (class prototypes
  plus noise), so the loss falls within a few iterations.
- cnn: 1x16x16 images whose class (of 4) is the quadrant holding a bright patch; two convolutions.
- digits-mlp: scikit-learn's handwritten digits (datasets.py), 64 pixels -> 128 -> 10 classes.
- digits-cnn: the same digits as 1x8x8 images; two 3x3 convolutions, a 2x2 pool, a linear head.
- profile:<name>: no forward pass; one parameter tensor per layer of a large model (see profiles.py),
  scaled, whose gradients are filled with seeded noise, so the network carries that model's bytes.

Each worker trains on its own data: the digits models on its shard of the fixed training split (a
fresh seeded permutation of the shard every epoch), the synthetic ones on batches seeded by its rank.
`evaluate` measures test accuracy on held-out data: the digits' test split, or for the synthetic
tasks a fixed batch of TEST_SAMPLES generated from a seed no training batch uses.
"""

from __future__ import annotations

import torch
from torch import nn

from pcnlab.workloads.catalog import DIGITS_MODELS, PROFILE_PREFIX, check_model, is_profile
from pcnlab.workloads.process_config import PROFILE_SCALE
from pcnlab.workloads.profiles import scaled

TEST_SAMPLES = 512            # the synthetic tasks' held-out batch
_TEST_STREAM = 999_983        # its seed offset: no (rank, iteration) of a training batch reaches it


class Mlp(nn.Module):
    features, classes = 32, 8

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(self.features, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(),
                                 nn.Linear(64, self.classes))

    def forward(self, x):
        return self.net(x)


class SmallCnn(nn.Module):
    side, classes = 16, 4

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(16 * 4 * 4, self.classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class DigitsMlp(nn.Module):
    features, hidden, classes = 64, 128, 10

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(self.features, self.hidden), nn.ReLU(),
                                 nn.Linear(self.hidden, self.classes))

    def forward(self, x):
        return self.net(x)


class DigitsCnn(nn.Module):
    side, classes = 8, 10

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Linear(32 * 4 * 4, self.classes)

    def forward(self, x):
        return self.head(self.features(x.view(-1, 1, self.side, self.side)).flatten(1))


class ProfileModel(nn.Module):
    """Parameters shaped like a large model's layers; it has no forward pass."""

    def __init__(self, name: str, factor: float):
        super().__init__()
        self.layers = scaled(name, factor)
        self.params = nn.ParameterList([nn.Parameter(torch.zeros(size)) for _, size in self.layers])


class Task:
    """Batches for one model, deterministic in (seed, worker, iteration), and its held-out test set.

    `shard`, `shards`: this worker's index among the job's workers and their number (the digits'
    training split is divided among them); `train=False` loads only what evaluation needs."""

    def __init__(self, model_name: str, seed: int, shard: int = 0, shards: int = 1, train: bool = True):
        self.model_name = model_name
        self.seed = seed
        self.shard = shard
        g = torch.Generator().manual_seed(10_000 + seed)
        if model_name == "mlp":
            self.prototypes = torch.randn(Mlp.classes, Mlp.features, generator=g) * 2.0
        if model_name in DIGITS_MODELS:
            from pcnlab.workloads.datasets import digits_split, shard_indices

            split = digits_split()
            self.x_test, self.y_test = torch.from_numpy(split.x_test), torch.from_numpy(split.y_test)
            if train:
                mine = shard_indices(len(split.y_train), shard, shards)
                self.x_train = torch.from_numpy(split.x_train[mine])
                self.y_train = torch.from_numpy(split.y_train[mine])

    def test_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.model_name in DIGITS_MODELS:
            return self.x_test, self.y_test
        return self._generated(TEST_SAMPLES, torch.Generator().manual_seed(self.seed * 1_000_003 + _TEST_STREAM))

    def batch(self, batch: int, rank: int, iteration: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.model_name in DIGITS_MODELS:
            return self._digits_batch(batch, iteration)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + rank * 10_007 + iteration)
        return self._generated(batch, g)

    def _digits_batch(self, batch: int, iteration: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The iteration's slice of this epoch's permutation of the shard (the last partial batch of an
        epoch is skipped, so every batch has the same size)."""
        n = len(self.y_train)
        size = min(batch, n)
        steps = n // size
        epoch, step = divmod(iteration, steps)
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.shard * 10_007 + epoch)
        idx = torch.randperm(n, generator=g)[step * size:(step + 1) * size]
        return self.x_train[idx], self.y_train[idx]

    def _generated(self, batch: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        if self.model_name == "mlp":
            y = torch.randint(0, Mlp.classes, (batch,), generator=g)
            x = self.prototypes[y] + torch.randn(batch, Mlp.features, generator=g)
            return x, y
        side, half = SmallCnn.side, SmallCnn.side // 2
        y = torch.randint(0, SmallCnn.classes, (batch,), generator=g)
        x = torch.randn(batch, 1, side, side, generator=g) * 0.5
        for i, c in enumerate(y.tolist()):
            r, col = (c // 2) * half, (c % 2) * half
            x[i, 0, r + 2:r + half - 2, col + 2:col + half - 2] += 2.0
        return x, y


_REAL = {"mlp": Mlp, "cnn": SmallCnn, "digits-mlp": DigitsMlp, "digits-cnn": DigitsCnn}


def build_model(name: str, seed: int, profile_scale: float = PROFILE_SCALE) -> nn.Module:
    check_model(name, profile_scale)
    torch.manual_seed(seed)
    if is_profile(name):
        return ProfileModel(name[len(PROFILE_PREFIX):], profile_scale)
    return _REAL[name]()


def evaluate(model: nn.Module, task: Task) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of the model on the task's held-out test set."""
    x, y = task.test_set()
    with torch.no_grad():
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y)
        accuracy = (logits.argmax(1) == y).float().mean()
    return float(accuracy), float(loss)


def compute_gradients(model: nn.Module, task: Task | None, batch: int, rank: int, iteration: int,
                      seed: int) -> float | None:
    """One real forward and backward pass (or, for a profile, seeded gradient noise); returns the loss."""
    model.zero_grad(set_to_none=False)
    if isinstance(model, ProfileModel):
        g = torch.Generator().manual_seed(seed * 1_000_003 + rank * 10_007 + iteration)
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=g) * 1e-3
        return None
    x, y = task.batch(batch, rank, iteration)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return float(loss.detach())
