"""pcnlab/cmdline.py: the commands' numbers are checked before anything runs or is written, and a bad
option is one line (what is wrong, where help is), exit 2."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from conftest import ROOT
from pcnlab.cmdline import OneLineParser, count, fraction, natural, non_negative, positive, tcp_port


def test_numbers_in_range_are_taken():
    assert (count("3"), natural("0"), positive("0.5"), non_negative("0"), fraction("1"), tcp_port("65535")) == \
        (3, 0, 0.5, 0.0, 1.0, 65535)
    assert isinstance(count("3"), int) and isinstance(positive("2"), float)


@pytest.mark.parametrize("kind, text", [
    (count, "0"), (count, "-1"), (count, "1.5"), (count, "x"), (natural, "-1"), (positive, "0"),
    (positive, "nan"), (positive, "inf"), (non_negative, "-0.1"), (non_negative, "nan"), (fraction, "0"),
    (fraction, "1.01"), (fraction, "95"), (fraction, "-inf"), (tcp_port, "0"), (tcp_port, "65536")])
def test_numbers_out_of_range_or_not_finite_are_refused_naming_the_value(kind, text):
    with pytest.raises(argparse.ArgumentTypeError, match=f"^'{text}' is not "):
        kind(text)


def test_a_bad_option_is_one_line_naming_it_and_exit_2(capsys):
    parser = OneLineParser(prog="tool")
    parser.add_argument("--rows", type=count)
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["--rows", "0"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "tool: argument --rows: '0' is not a whole number of 1 or more; see tool --help"]


def test_the_commands_refuse_bad_numbers_in_one_line_and_leave_earlier_results(tmp_path):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "netsense.md").write_text("an earlier report")
    commands = [
        ["-m", "pcnlab.app.cli"],                                          # no command at all
        ["-m", "pcnlab.app.cli", "queues", str(sweep), "--margin-ms", "nan"],  # was a traceback
        ["-m", "pcnlab.app.cli", "queues", str(sweep), "--rows", "0"],
        ["-m", "pcnlab.app.cli", "calibrate", "--seconds", "nan"],           # was a calibration still going at 60 s
        ["-m", "pcnlab.app.cli", "slice", "--grpc-base-port", "70000"],      # was a traceback
        ["-m", "pcnlab.analysis.compression_report", "netsense", str(sweep), "--target", "7"],  # was a report
        ["-m", "pcnlab.analysis.compression_ceiling", str(sweep), "--bench", "b.json", "--target", "-1"],
        [str(ROOT / "bench" / "bench_compression_efficiency.py"), "--seeds", "-1"],            # was exit 0
    ]
    for command in commands:
        proc = subprocess.run([sys.executable, *command], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "see " in lines[0], (command, proc.stderr)
    assert (sweep / "netsense.md").read_text() == "an earlier report"
    assert not list(tmp_path.glob("results*")) and not list(tmp_path.glob("bench"))
