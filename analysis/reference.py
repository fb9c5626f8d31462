"""Published figures our results are compared with, as data: the one place they are written down.

An experiment declares `reference: <name>` (experiments/config/schema.py); `pcnlab report` then shows the
figures beside ours, in their own column. Each figure is keyed by its metric's key in metrics.json.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """One published comparison, baseline -> the mechanism: the two values when the source gives them
    (in the metric's unit), and the relative change in % (computed from the values when both are given)."""

    baseline: float | None = None
    value: float | None = None
    change_pct: float | None = None

    @property
    def relative_change_pct(self) -> float | None:
        if self.baseline and self.value is not None:
            return (self.value - self.baseline) / self.baseline * 100
        return self.change_pct

    def text(self, fmt: str = "{:g}") -> str:
        """How the figure reads in a table, e.g. '35 → 5 (-86 %)' or '-39 %'."""
        change = self.relative_change_pct
        pct = f"{change:+.0f} %" if change is not None and abs(change) >= 10 else (
            f"{change:+.1f} %" if change is not None else "")
        if self.baseline is not None and self.value is not None:
            return f"{fmt.format(self.baseline)} → {fmt.format(self.value)} ({pct})"
        return pct or "-"

    def as_dict(self) -> dict:
        return {"baseline": self.baseline, "value": self.value, "change_pct": self.relative_change_pct}


@dataclass(frozen=True)
class Reference:
    name: str
    title: str          # the report column's heading
    source: str         # the citation
    baseline: str       # what the source's baseline was
    mechanism: str      # what the source measured against it
    figures: dict[str, Figure]


REFERENCES: dict[str, Reference] = {
    "pcn-paper": Reference(
        name="pcn-paper",
        title="PCN paper (baseline → PCN)",
        source='Kang et al., "Proactive Congestion Avoidance for Distributed Deep Learning", Sensors 2021',
        baseline="without PCN", mechanism="PCN (hosts announce bursts)",
        figures={
            "iterations.start_queue_pkts.mean": Figure(baseline=35, value=5),
            "iterations.max_queue_pkts.mean": Figure(baseline=54.8, value=44.1),
            "iterations.bct_ms.mean": Figure(change_pct=-39),
            "iterations.ddl_mbps.mean": Figure(change_pct=72),
            "queue_delay_us.ddl.mean": Figure(change_pct=-13),
            "throughput_mbps.background": Figure(change_pct=-5.7),
        },
    ),
}


def get(name: str | None) -> Reference | None:
    """The reference called `name` (None: none). The YAML key's choices are this table's names, so an
    unknown name only comes from a hand-edited config.yaml: it is reported as having no figures."""
    return REFERENCES.get(name) if name else None
