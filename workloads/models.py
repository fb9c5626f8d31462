"""The models the workers train, on data generated at run time, and the gradient-profile stand-in.

Every rank builds the same model from the same seed, so all replicas start identical. The data are
easy classification tasks (class prototypes plus noise), so the loss falls within a few iterations:

- mlp: 32 features -> 64 -> 64 -> 8 classes.
- cnn: 1x16x16 images whose class (of 4) is the quadrant holding a bright patch; two convolutions.
- profile:<name>: no forward pass; one parameter tensor per layer of a large model (see profiles.py),
  scaled, whose gradients are filled with seeded noise, so the network carries that model's bytes.
"""

from __future__ import annotations

import torch
from torch import nn

from pcnlab.errors import UsageError
from pcnlab.workloads.profiles import scaled

MODELS = ("mlp", "cnn", "profile:<resnet50|vgg16|bert-base>")


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


class ProfileModel(nn.Module):
    """Parameters shaped like a large model's layers; it has no forward pass."""

    def __init__(self, name: str, factor: float):
        super().__init__()
        self.layers = scaled(name, factor)
        self.params = nn.ParameterList([nn.Parameter(torch.zeros(size)) for _, size in self.layers])


class Task:
    """Generates batches for one model: deterministic in (seed, rank, iteration)."""

    def __init__(self, model_name: str, seed: int):
        self.model_name = model_name
        self.seed = seed
        g = torch.Generator().manual_seed(10_000 + seed)
        if model_name == "mlp":
            self.prototypes = torch.randn(Mlp.classes, Mlp.features, generator=g) * 2.0

    def batch(self, batch: int, rank: int, iteration: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + rank * 10_007 + iteration)
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


def build_model(name: str, seed: int, profile_scale: float = 0.01) -> nn.Module:
    torch.manual_seed(seed)
    if name == "mlp":
        return Mlp()
    if name == "cnn":
        return SmallCnn()
    if name.startswith("profile:"):
        return ProfileModel(name.split(":", 1)[1], profile_scale)
    raise UsageError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")


def check_model_name(name: str, profile_scale: float = 0.01) -> None:
    """Validate a model name without building anything big (for the launcher)."""
    if name in ("mlp", "cnn"):
        return
    if name.startswith("profile:"):
        scaled(name.split(":", 1)[1], profile_scale)
        return
    raise UsageError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")


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
