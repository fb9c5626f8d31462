"""experiments/calibrate.py without a switch: what `ensure_calibration` refuses before it measures, and
where `refine` offers steps between the last sustained one and the next. Its measuring runs on real BMv2
in test_calibrate_bmv2.py."""

from __future__ import annotations

import pytest


def test_a_calibration_that_cannot_be_written_is_one_line_before_anything_starts(tmp_path, monkeypatch):
    from pcnlab.errors import UsageError
    from pcnlab.experiments.calibrate import ensure_calibration

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("PCNLAB_CALIBRATION", str(tmp_path / "a-file" / "calibration.json"))
    with pytest.raises(UsageError, match="none can be written to .*set PCNLAB_CALIBRATION to a file you can write"):
        ensure_calibration(tmp_path / "results", say=lambda line: pytest.fail(f"said {line!r} before refusing"))


@pytest.mark.parametrize("capacity, offered, figure", [(4800, [3500, 4250], 4250), (2600, [3500, 2750], 2000),
                                                       (60000, [], 5000)])
def test_the_gap_above_the_last_sustained_step_is_halved_twice(capacity, offered, figure):
    # The steps of a suite's calibration under CPU steal: 5,000 packets/s lost 1.7 %, so it read 2,000.
    from pcnlab.experiments.calibrate import MAX_LOSS, refine

    def row(pps: float) -> dict:
        loss = 0.0 if pps <= capacity else 0.017
        return {"offered_pps": pps, "received_pps": pps * (1 - loss), "loss": loss}

    rows = [row(pps) for pps in ((500, 2000, 5000, 8000) if capacity < 5000 else (500, 2000, 5000))]
    asked: list = []

    def measure(pps: float) -> dict:
        asked.append(pps)
        rows.append(row(pps))
        return rows[-1]

    refine(rows, measure)
    assert asked == offered and max(r["received_pps"] for r in rows if r["loss"] <= MAX_LOSS) == figure
