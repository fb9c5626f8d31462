"""Every command the record (docs/results.md) quotes still parses.

A figure in the record is worth what its command is: a reader must be able to run it again. For each
command quoted in a code span or a fenced code block:

- `pcnlab ...`: the command line parses with the CLI's own parser (unknown options and bad values
  fail as they would for a user); for `pcnlab run`, the experiment file exists and loads, validated,
  with its `--set` overrides applied (`load_experiment` and the runs it expands to, as
  `pcnlab run --dry-run` does, without the fit, which needs this machine's calibration);
- `bench/<script>.py ...` and `python -m pcnlab.<module> ...`: the script or module exists and each
  `--option` quoted is one its source defines (their parsers are built inside main(), not
  importable cheaply); a command after `--` (bench/slow_machine.py) is checked in turn.

A span naming a subcommand alone (`pcnlab view`) names it: the subcommand must exist. Placeholders
(a seed `N`, a mode `M`, ...) are replaced by the values the record uses them for (PLACEHOLDERS); a
capitalised word or `<...>` in a value that is not in that table fails the command, so a new
placeholder is a decision, not a silent skip. No network, no root, no BMv2: a few seconds.
"""

from __future__ import annotations

import contextlib
import functools
import io
import itertools
import re
import shlex
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "docs" / "results.md"

# What each placeholder of the record stands for: every value is tried.
PLACEHOLDERS: dict[str, tuple[str, ...]] = {
    "N": ("401",),                       # a seed
    "S": ("14", "15"),                   # a seed
    "M": ("pcn", "pcn-host"),            # a mode
    "T": ("ltp", "tcp-reno"),            # a transport
    "D": ("100", "auto"),                # an LTP deadline
}

FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
SPAN = re.compile(r"`([^`\n]+(?:\n[^`\n]+)*)`")
LOOKS_LIKE_COMMAND = re.compile(r"(?:^|[\s/])pcnlab(?:\s|$)|\bbench/[\w.-]+\.py\b|-m\s+pcnlab\.")
CAPITALISED = re.compile(r"(?<![\w.-])[A-Z][A-Z_]{0,7}(?![\w.-])")
ANGLED = re.compile(r"<[^<>]*>")


@functools.lru_cache(maxsize=1)
def _build_parser():
    try:
        from pcnlab.app.cli import build_parser
    except ImportError:  # where the CLI lived before
        from pcnlab.cli import build_parser
    return build_parser()


@dataclass(frozen=True)
class Quoted:
    line: int
    text: str
    in_block: bool = False

    def __str__(self) -> str:
        return f"docs/results.md:{self.line}: {self.text}"


def quoted_commands(text: str) -> list[Quoted]:
    """The commands quoted in a Markdown text: each code block's lines (a line ending in `\\` joined to
    the next) and each code span (one that wraps onto the next line joined by a space)."""
    found: list[Quoted] = []
    for block in FENCE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        pending, start = "", first
        for offset, line in enumerate(block.group(1).splitlines()):
            if not pending:
                start = first + offset
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            found.append(Quoted(start, " ".join((pending + line).split()), in_block=True))
            pending = ""
    # Blank out the blocks, keeping the line count, and read the spans of what is left.
    rest = FENCE.sub(lambda m: "\n" * m.group().count("\n"), text)
    for span in SPAN.finditer(rest):
        found.append(Quoted(rest.count("\n", 0, span.start()) + 1, " ".join(span.group(1).split())))
    return [q for q in found if LOOKS_LIKE_COMMAND.search(q.text)]


def _substitutions(value: str) -> list[str] | str:
    """Every reading of a value with its placeholders replaced, or why it cannot be read."""
    words = sorted(set(CAPITALISED.findall(value)))
    unknown = [w for w in words if w not in PLACEHOLDERS] + ANGLED.findall(value)
    if unknown:
        return f"unknown placeholder {unknown[0]!r} in {value!r} (add it to PLACEHOLDERS or write a value)"
    readings = []
    for choice in itertools.product(*(PLACEHOLDERS[w] for w in words)):
        reading = value
        for word, sub in zip(words, choice):
            reading = re.sub(rf"(?<![\w.-]){word}(?![\w.-])", sub, reading)
        readings.append(reading)
    return readings


def _option_defined(option: str, source: str) -> bool:
    return f'"{option}"' in source or f"'{option}'" in source


def _check_script(path: str, args: list[str]) -> list[str]:
    script = ROOT / path
    if not script.is_file():
        return [f"{path} does not exist"]
    own, _, after = _split_at_dashes(args)
    source = script.read_text()
    problems = [f"{path} defines no option {opt}" for opt in _options(own) if not _option_defined(opt, source)]
    if after:
        problems += check_tokens(after)
    return problems


def _check_module(module: str, args: list[str]) -> list[str]:
    spec = find_spec(module) if module.startswith("pcnlab.") else None
    if spec is None or not spec.origin:
        return [f"no module {module}"]
    source = Path(spec.origin).read_text()
    return [f"{module} defines no option {opt}" for opt in _options(args) if not _option_defined(opt, source)]


def _split_at_dashes(args: list[str]) -> tuple[list[str], bool, list[str]]:
    if "--" in args:
        i = args.index("--")
        return args[:i], True, args[i + 1:]
    return args, False, []


def _options(args: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("--") and a != "--"]


def _check_pcnlab(args: list[str], naming: bool) -> list[str]:
    parser = _build_parser()
    subcommands = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    if naming and len(args) == 1 and not args[0].startswith("-"):  # a span naming a subcommand
        return [] if args[0] in subcommands else [f"pcnlab has no subcommand {args[0]!r}"]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parsed = parser.parse_args(args)
    except SystemExit:
        return [f"pcnlab does not parse it: {err.getvalue().strip()}"]
    if getattr(parsed, "func", None) is None or args[0] != "run":
        return []
    return _check_run(parsed.file, parsed.overrides)


def _check_run(file: str, overrides: list[str]) -> list[str]:
    from pcnlab.errors import PcnLabError
    from pcnlab.experiments.config import load_experiment

    if ANGLED.search(file) or CAPITALISED.fullmatch(Path(file).stem):
        return [f"placeholder file {file!r}: name the experiment file"]
    if not (ROOT / file).is_file():
        return [f"{file} does not exist"]
    readings = []
    for item in overrides:
        subs = _substitutions(item)
        if isinstance(subs, str):
            return [subs]
        readings.append(subs)
    problems = []
    for chosen in itertools.product(*readings) if readings else [()]:
        try:
            load_experiment(ROOT / file, chosen).runs()
        except PcnLabError as exc:
            problems.append(f"{file} with {list(chosen)}: {exc}")
    return problems


def check_tokens(tokens: list[str], naming: bool = False) -> list[str]:
    """What is wrong with one command line, as tokens (empty: it parses). `naming`: a code span, where
    `pcnlab <subcommand>` alone names the subcommand rather than runs it."""
    for i, token in enumerate(tokens):
        if token.rsplit("/", 1)[-1] == "pcnlab":
            return _check_pcnlab(tokens[i + 1:], naming) if tokens[i + 1:] else ["pcnlab with no subcommand"]
        if token.startswith("bench/") and token.endswith(".py"):
            return _check_script(token, tokens[i + 1:])
        if token == "-m" and i + 1 < len(tokens) and tokens[i + 1].startswith("pcnlab."):
            return _check_module(tokens[i + 1], tokens[i + 2:])
    return []


def check_command(quoted: Quoted) -> list[str]:
    try:
        tokens = shlex.split(quoted.text)
    except ValueError as exc:
        return [f"not a command line ({exc})"]
    return check_tokens(tokens, naming=not quoted.in_block)


RECORDED = quoted_commands(RECORD.read_text())


@pytest.fixture(autouse=True)
def _at_the_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # experiment files name their scripts relative to the checkout


def test_the_record_quotes_commands_to_check():
    assert len(RECORDED) >= 30, [str(q) for q in RECORDED]
    kinds = {("run" if " run " in f" {q.text} " else "bench" if "bench/" in q.text else "other") for q in RECORDED}
    assert {"run", "bench"} <= kinds


@pytest.mark.parametrize("quoted", RECORDED, ids=lambda q: f"line{q.line}")
def test_every_quoted_command_parses(quoted):
    assert check_command(quoted) == [], str(quoted)


BROKEN = """\
A made-up record. `sudo .venv/bin/pcnlab run experiments/pcn-paper.yaml --sett repetitions=1` has a typo,
`pcnlab run experiments/no-such-file.yaml` names no file, and this one spans two lines:
`pcnlab run experiments/pcn-paper.yaml
--set topology.no_such_key=1`. In a table: | `pcnlab run experiments/pcn-paper.yaml --set seed=FOO` |.
`.venv/bin/python bench/bench_dataplane.py --rounds 6 --no-such-option 3`, `pcnlab frobnicate`,
`python -m pcnlab.analysis.compression_report netsense results/x --no-such-target 0.9`,
`sudo .venv/bin/python bench/slow_machine.py --cpu-pct 60 -- .venv/bin/pcnlab run experiments/smoke.yaml --set repetitions=0`

```
sudo .venv/bin/pcnlab run experiments/pcn-ring.yaml \\
    --set 'sweep.mode=[pcn, no-such-mode]'
pcnlab report
```

Good ones: `pcnlab view`, `pcnlab run experiments/pcn-paper.yaml --set seed=N --set 'sweep.mode=[M]'`,
`.venv/bin/python bench/bench_dataplane.py --rounds 6 --seconds 4 --offered 50000`.
"""


def test_the_extractor_finds_every_kind_of_quote():
    texts = [q.text for q in quoted_commands(BROKEN)]
    assert "pcnlab run experiments/pcn-paper.yaml --set topology.no_such_key=1" in texts   # wrapped span
    assert "sudo .venv/bin/pcnlab run experiments/pcn-ring.yaml --set 'sweep.mode=[pcn, no-such-mode]'" in texts
    assert "pcnlab report" in texts
    lines = {q.text: q.line for q in quoted_commands(BROKEN)}
    assert lines["pcnlab report"] == 12
    assert len(texts) == 13


def test_a_broken_command_fails_and_says_why():
    verdicts = {q.text: check_command(q) for q in quoted_commands(BROKEN)}
    broken = {text: why for text, why in verdicts.items() if why}
    good = [text for text, why in verdicts.items() if not why]
    assert sorted(good) == sorted([
        "pcnlab view",
        "pcnlab run experiments/pcn-paper.yaml --set seed=N --set 'sweep.mode=[M]'",
        ".venv/bin/python bench/bench_dataplane.py --rounds 6 --seconds 4 --offered 50000",
    ])
    assert len(broken) == 10
    reasons = " | ".join(why[0] for why in broken.values())
    for expected in ("unrecognized arguments: --sett", "no-such-file.yaml does not exist", "no_such_key",
                     "unknown placeholder 'FOO'", "defines no option --no-such-option", "no subcommand 'frobnicate'",
                     "defines no option --no-such-target", "no-such-mode", "the following arguments are required"):
        assert expected in reasons, reasons


def test_a_placeholder_stands_for_each_of_its_values():
    assert _substitutions("seed=N") == ["seed=401"]
    assert _substitutions("sweep={jobs.0.transport: [T]}") == ["sweep={jobs.0.transport: [ltp]}",
                                                                 "sweep={jobs.0.transport: [tcp-reno]}"]
    assert _substitutions("mode.K=40") == ["mode.K=40"]          # a key's capital is no placeholder
    assert "unknown placeholder" in _substitutions("jobs.0.image=<image>")
