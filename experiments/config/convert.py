"""From the file's raw nodes (yamlpos.Raw) to typed values, by the key table: every mistake is one line,
`file:line: dotted.key: what is wrong; what is allowed` (or the `--set` that caused it)."""

from __future__ import annotations

import difflib
import math
import re
import shlex
from typing import Any, Iterable

from pcnlab.errors import UsageError
from pcnlab.experiments.config.schema import SHORTHAND, Key
from pcnlab.experiments.config.yamlpos import Raw, Where
from pcnlab.workloads.specs import NAME_RE


def error(where: Where, path: str, message: str) -> UsageError:
    tag = " (sweep value)" if where.via == "sweep" else ""
    return UsageError(f"{where}: {path}{tag}: {message}" if path else f"{where}: {message}")


def list_section(raw, section: str, shape: str) -> list | None:
    """A top-level list section's items (None when absent or empty); `shape` shows one item."""
    if raw is None or raw.value is None:
        return None
    if not raw.is_list:
        raise error(raw.where, section, f"expected a list of {shape}, got {fmt(raw.value)}")
    return raw.value


def mapped_items(items: list, section: str, keys, shape: str):
    """(path, item, its keys present) for each item of a list section, each checked to be a mapping of
    the section's keys; `shape` shows one."""
    for index, item in enumerate(items):
        path = f"{section}.{index}"
        if not item.is_map:
            raise error(item.where, path, f"expected a mapping ({shape}), got {fmt(item.value)}")
        yield path, item, mapping(item, path, section, keys)


def suggest(word: str, options: Iterable[str]) -> str:
    options = list(options)
    lowered = {o.lower(): o for o in options}
    if word.lower() in lowered:
        return f" (did you mean {lowered[word.lower()]!r}?)"
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if not close:
        close = difflib.get_close_matches(word.lower(), list(lowered), n=1, cutoff=0.6)
        close = [lowered[c] for c in close]
    return f" (did you mean {close[0]!r}?)" if close else ""


def join(path: str, key: str | int) -> str:
    return f"{path}.{key}" if path else str(key)


def first_where(*candidates: Raw | None, fallback: Where) -> Where:
    """Where the first of the candidates that the file has was written."""
    for raw in candidates:
        if raw is not None:
            return raw.where
    return fallback


_UNIT_WORDS = {"Mbit/s": "in Mbit/s", "packets": "of packets", "bytes": "of bytes", "s": "of seconds",
               "ms": "of milliseconds", "us": "of microseconds", "MB": "of megabytes", "%": "in percent"}
_UNIT_NAMES = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "MB": "megabytes", "%": "percent"}


def _describe(key: Key) -> str:
    unit = f" {_UNIT_WORDS[key.unit]}" if key.unit else ""
    return {"int": f"a whole number{unit}", "number": f"a number{unit}", "lead": f"auto or a whole number{unit}",
            "autonumber": f"auto or a number{unit}"}.get(key.type, key.type)


def fmt(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    return repr(value)


def _check_range(key: Key, raw: Raw, path: str, value: float) -> None:
    unit = f" {key.unit}" if key.unit else ""
    if key.min is not None and value < key.min:
        raise error(raw.where, path, f"must be at least {key.min:g}{unit}, got {fmt(value)}")
    if key.above is not None and value <= key.above:
        raise error(raw.where, path, f"must be above {key.above:g}{unit}, got {fmt(value)}")
    if key.max is not None and value > key.max:
        raise error(raw.where, path, f"must be at most {key.max:.15g}{unit}, got {fmt(value)}")


def _number(key: Key, raw: Raw, path: str, whole: bool) -> int | float:
    value = raw.value
    number: float | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, (int, float)):
        number = value
    elif isinstance(value, str):
        try:
            number = float(value.strip())      # YAML 1.1 reads 1e6 as text
        except ValueError:
            number = None
    if number is None or (isinstance(number, float) and not math.isfinite(number)) \
            or (whole and float(number) != int(number)):
        hint = ""
        if isinstance(value, str) and re.fullmatch(r"\s*[-+]?[0-9][0-9_.]*\s*[A-Za-z/%]+\s*", value):
            digits = re.match(r"\s*([-+]?[0-9][0-9_.]*)", value).group(1)
            unit = _UNIT_NAMES.get(key.unit, key.unit) or "fixed"
            hint = f"; write the number alone ({path.rsplit('.', 1)[-1]}: {digits}): the unit is always {unit}"
        raise error(raw.where, path, f"expected {_describe(key)}, got {fmt(value)}{hint}")
    number = int(number) if whole else float(number)
    _check_range(key, raw, path, number)
    return number


def convert(key: Key, raw: Raw, path: str) -> Any:
    """The value of `raw` as `key` takes it (types of the key table), or a one-line error."""
    value = raw.value
    if value is None and key.nullable:
        return None
    kind = key.type
    if kind in ("int", "number"):
        return _number(key, raw, path, whole=kind == "int")
    if kind == "bool":
        if not isinstance(value, bool):
            raise error(raw.where, path, f"expected true or false, got {fmt(value)}")
        return value
    if kind == "choice":
        if not isinstance(value, str) or value not in key.choices:
            hint = suggest(value, key.choices) if isinstance(value, str) else ""
            raise error(raw.where, path, f"unknown {key.what or key.name} {fmt(value)}{hint}; "
                                         f"choose one of {', '.join(key.choices)}")
        return value
    if kind == "name":
        if not isinstance(value, str) or not NAME_RE.fullmatch(value):
            raise error(raw.where, path, f"expected a name of letters, digits, '.', '_' and '-', "
                                         f"got {fmt(value)}")
        return value
    if kind == "text":
        if not isinstance(value, str):
            raise error(raw.where, path, f"expected text, got {fmt(value)}")
        return value
    if kind in ("lead", "autonumber"):     # auto, or a number (lead: whole microseconds)
        whole = kind == "lead"
        expected = f"expected auto or a {'whole ' if whole else ''}number of {_UNIT_NAMES.get(key.unit, key.unit)}"
        if value == "auto":
            return "auto"
        if isinstance(value, str):
            try:
                float(value)
            except ValueError:
                raise error(raw.where, path, f"{expected}, got {fmt(value)}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise error(raw.where, path, f"{expected}, got {fmt(value)}")
        return _number(key, raw, path, whole=whole)
    if kind == "every":
        if value is None or value is False or value == "off":
            return None
        if value is True or not isinstance(value, (int, float, str)):
            raise error(raw.where, path, f"expected off or a whole number N (1 in N packets), got {fmt(value)}")
        return _number(key, raw, path, whole=True)
    if kind == "autobool":
        if value == "auto" or isinstance(value, bool):
            return value
        raise error(raw.where, path, f"expected auto, true or false, got {fmt(value)}")
    if kind == "argv":
        return _argv(raw, path)
    if kind == "env":
        return _env(raw, path)
    raise AssertionError(f"no converter for {kind}")


def _argv(raw: Raw, path: str) -> tuple[str, ...]:
    """A program and its arguments: a list of words, or one line split as a shell would."""
    value = raw.value
    if isinstance(value, str):
        try:
            return tuple(shlex.split(value))
        except ValueError as exc:
            raise error(raw.where, path, f"cannot split {value!r} into words ({exc}); write a list") from None
    if not isinstance(value, list):
        raise error(raw.where, path, f"expected a list of words (e.g. [train.py, --steps, 100]), got {fmt(value)}")
    words = []
    for child in value:
        if isinstance(child.value, bool) or not isinstance(child.value, (str, int, float)):
            raise error(child.where, path, f"expected a word (text or a number), got {fmt(child.value)}")
        words.append(str(child.value))
    return tuple(words)


def _env(raw: Raw, path: str) -> tuple[tuple[str, str], ...]:
    """Environment variables: a mapping of names to text (numbers and booleans as written)."""
    if not raw.is_map:
        raise error(raw.where, path, f"expected a mapping of variable names to values, got {fmt(raw.value)}")
    out = []
    for name, child in raw.value.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise error(child.key_where, join(path, name), "not a variable name: use letters, digits and '_', "
                                                           "not starting with a digit")
        value = child.value
        if isinstance(value, (dict, list)) or value is None:
            raise error(child.where, join(path, name), f"expected a value (text or a number), got {fmt(value)}")
        out.append((name, ("true" if value else "false") if isinstance(value, bool) else str(value)))
    return tuple(out)


_SHORT_EXAMPLES = {"topology": "tree", "switch": "bmv2", "mode": "pcn", "telemetry": "10",
                   "containers": "localhost/pcnlab-worker:latest"}


def mapping(raw: Raw, path: str, section: str, allowed: dict[str, Key]) -> dict[str, Raw]:
    """The keys of a mapping, every one of them known. A scalar stands for the section's shorthand key."""
    if raw.value is None:
        return {}
    if not raw.is_map:
        short = SHORTHAND.get(section)
        if short and not raw.is_list:
            return {short: raw}
        what = f"a mapping of {', '.join(allowed)}"
        if short:
            what += f", or a {short} on its own (e.g. {section}: {_SHORT_EXAMPLES[section]})"
        raise error(raw.where, path or "document", f"expected {what}, got {fmt(raw.value)}")
    for name, child in raw.value.items():
        if name not in allowed:
            where = child.key_where
            hint = (" (dotted keys are for sweep: and --set; here write the mapping out)" if "." in name
                    else suggest(name, allowed))
            raise error(where, join(path, name), f"unknown key{hint}; "
                                                 f"{path or 'the top level'} takes {', '.join(allowed)}")
    return raw.value


def value_of(key: Key, present: dict[str, Raw], path: str) -> Any:
    """The key's value in the mapping `present`, converted, or its default when it is not there."""
    raw = present.get(key.name)
    if raw is None:
        return key.default
    return convert(key, raw, join(path, key.name))
