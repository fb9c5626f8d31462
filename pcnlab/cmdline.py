"""The commands' command lines: a parser whose errors are one line, and types for the numbers they take.

Hand-written over argparse: its errors print the whole usage first, and its `type=int` and `type=float`
take negative counts, nan and inf, which reached the tools as a traceback, a hang or a report of
nonsense. Here a bad value is one line naming the option (exit 2), before anything runs or is written."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Callable, NoReturn


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser (its subcommands' too), with an error as one line: what is wrong, where help is."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message}; see {self.prog} --help", file=sys.stderr)
        raise SystemExit(2)


def _number(text: str, kind: type, what: str, ok: Callable[[float], bool]):
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or not ok(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
    return value


def count(text: str) -> int:
    """A whole number, 1 or more (seeds, rows, repetitions)."""
    return _number(text, int, "a whole number of 1 or more", lambda v: v >= 1)


def natural(text: str) -> int:
    """A whole number, 0 or more (a port, an iteration, a threshold in packets)."""
    return _number(text, int, "a whole number of 0 or more", lambda v: v >= 0)


def positive(text: str) -> float:
    """A finite number above 0 (a rate, a length of time)."""
    return _number(text, float, "a number above 0", lambda v: v > 0)


def non_negative(text: str) -> float:
    """A finite number, 0 or more (a margin, a time since the start)."""
    return _number(text, float, "a number of 0 or more", lambda v: v >= 0)


def fraction(text: str) -> float:
    """Above 0 and at most 1 (an accuracy target)."""
    return _number(text, float, "a fraction above 0 and at most 1 (e.g. 0.95)", lambda v: 0 < v <= 1)


def tcp_port(text: str) -> int:
    """A TCP port number, 1-65535."""
    return _number(text, int, "a TCP port (1-65535)", lambda v: 0 < v < 65536)
