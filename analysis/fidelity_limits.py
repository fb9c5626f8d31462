"""The thresholds of the fidelity check (analysis/fidelity.py) and their defaults, owned here: the YAML
schema's `fidelity` section takes its defaults from FidelityConfig, a run's configuration carries one,
and the check reads a run's back from its config.yaml (`thresholds`)."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class FidelityConfig:
    """Thresholds of the fidelity check; what each means: experiments/config/schema.py, section fidelity."""

    min_rate_pct: float = 95.0
    min_backlog_s: float = 1.0
    max_bmv2_cpu_pct: float = 90.0
    min_idle_pct: float = 0.0
    max_lag_factor: float = 5.0
    max_telemetry_loss_pct: float = 1.0
    max_controller_lag_ms: float = 50.0


def thresholds(config: dict) -> FidelityConfig:
    """The run's thresholds (config.yaml's fidelity mapping; defaults for runs from before it existed)."""
    given = config.get("fidelity") or {}
    known = {f.name for f in fields(FidelityConfig)}
    return FidelityConfig(**{k: v for k, v in given.items() if k in known})
