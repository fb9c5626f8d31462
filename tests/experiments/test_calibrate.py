"""experiments/calibrate.py without a switch: what `ensure_calibration` refuses before it measures. Its
measuring runs on real BMv2 in test_calibrate_bmv2.py."""

from __future__ import annotations

import pytest


def test_a_calibration_that_cannot_be_written_is_one_line_before_anything_starts(tmp_path, monkeypatch):
    from pcnlab.errors import UsageError
    from pcnlab.experiments.calibrate import ensure_calibration

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("PCNLAB_CALIBRATION", str(tmp_path / "a-file" / "calibration.json"))
    with pytest.raises(UsageError, match="none can be written to .*set PCNLAB_CALIBRATION to a file you can write"):
        ensure_calibration(tmp_path / "results", say=lambda line: pytest.fail(f"said {line!r} before refusing"))
