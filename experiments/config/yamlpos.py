"""YAML documents as plain trees that remember where every key and value came from.

`load_tree(path)` composes the document with `yaml.compose` (so every node keeps its line), then turns
it into `Raw` nodes: a mapping is a dict of `Raw`, a list a list of `Raw`, anything else a Python
scalar built by PyYAML's safe constructor. Each `Raw` carries a `Where` (file and line, `--set ...`,
or a sweep value's line), which every error message starts with.

Keys are taken as written: `on:` stays the key "on" (YAML 1.1 would make it the boolean True).

Nothing a file says can make reading it hang or fill memory: a file is at most MAX_FILE_BYTES, a document
at most MAX_VALUES values once its aliases are expanded (so "billion laughs" stop at once), MAX_DEPTH
levels deep, and merge keys (`<<`) keep each key once, however often a mapping is merged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from pcnlab.errors import UsageError

MAX_FILE_BYTES = 64 * 1024     # the shipped experiments are 1-3 KB
MAX_VALUES = 10_000            # mappings, lists and scalars, every alias expanded
MAX_DEPTH = 32                 # nesting of mappings and lists (an experiment uses 4)
TOO_DEEP = f"nested more than {MAX_DEPTH} levels deep; an experiment needs 4"


@dataclass(frozen=True)
class Where:
    """Where a value was written: `source` is a file path or a `--set key=value`; `line` is 1-based."""

    source: str
    line: int | None = None
    via: str = ""            # "sweep" when the value came from a sweep list

    def __str__(self) -> str:
        return f"{self.source}:{self.line}" if self.line is not None else self.source


class Raw:
    """One node of a document: `value` is dict[str, Raw], list[Raw] or a scalar."""

    __slots__ = ("value", "where", "key_where")

    def __init__(self, value: Any, where: Where, key_where: Where | None = None):
        self.value = value
        self.where = where
        self.key_where = key_where or where

    @property
    def is_map(self) -> bool:
        return isinstance(self.value, dict)

    @property
    def is_list(self) -> bool:
        return isinstance(self.value, list)

    def copy(self) -> "Raw":
        if self.is_map:
            value: Any = {k: v.copy() for k, v in self.value.items()}
        elif self.is_list:
            value = [v.copy() for v in self.value]
        else:
            value = self.value
        return Raw(value, self.where, self.key_where)

    def plain(self) -> Any:
        """The value without positions (dicts, lists, scalars)."""
        if self.is_map:
            return {k: v.plain() for k, v in self.value.items()}
        if self.is_list:
            return [v.plain() for v in self.value]
        return self.value

    def __repr__(self) -> str:
        return f"Raw({self.plain()!r} @ {self.where})"


def _fail(where: Where, message: str) -> UsageError:
    return UsageError(f"{where}: {message}")


def _one_line(text: str | None) -> str:
    return " ".join((text or "").split())


class _Constructor(SafeConstructor):
    def flatten_mapping(self, node: MappingNode) -> None:
        """PyYAML's merge, then each key once, as a dict keeps it (the last pair, where the first stood):
        mappings merged again and again cannot multiply the pairs."""
        super().flatten_mapping(node)
        winners: dict = {}
        for key_node, value_node in node.value:
            winners[key_node.value if isinstance(key_node, ScalarNode) else id(key_node)] = (key_node, value_node)
        node.value = list(winners.values())


def from_node(node: Node, source: str, via: str = "", _active: set[int] | None = None, _path: str = "",
              _budget: list[int] | None = None) -> Raw:
    """Turn a composed YAML node into a `Raw` tree (merge keys `<<` applied, duplicate keys refused;
    at most MAX_VALUES values and MAX_DEPTH levels)."""
    active = _active if _active is not None else set()
    budget = _budget if _budget is not None else [MAX_VALUES]
    where = Where(source, node.start_mark.line + 1, via)
    if id(node) in active:
        raise _fail(where, "a YAML alias refers to itself; write the value out")
    budget[0] -= 1
    if budget[0] < 0:
        raise _fail(where, f"the document holds more than {MAX_VALUES} values once its aliases are expanded "
                           "(aliases of aliases?); an experiment needs far fewer: write them out")
    if len(active) >= MAX_DEPTH:
        raise _fail(where, TOO_DEEP)
    if isinstance(node, MappingNode):
        active.add(id(node))
        own: dict[str, int] = {}
        for key_node, _ in node.value:
            key_where = Where(source, key_node.start_mark.line + 1, via)
            if not isinstance(key_node, ScalarNode) or not key_node.value:
                raise _fail(key_where, "a key must be a plain name (text), not a list or a mapping")
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            if key_node.value in own:
                dotted = f"{_path}.{key_node.value}" if _path else key_node.value
                raise _fail(key_where, f"{dotted}: the key appears twice in the same mapping "
                                       f"(first on line {own[key_node.value]}); keep one")
            own[key_node.value] = key_where.line
        try:
            _Constructor().flatten_mapping(node)        # `<<: *anchor` first, the mapping's own keys win
        except ConstructorError as exc:
            raise _fail(where, f"invalid merge key: {_one_line(exc.problem)}") from None
        out: dict[str, Raw] = {}
        for key_node, value_node in node.value:
            key_where = Where(source, key_node.start_mark.line + 1, via)
            if not isinstance(key_node, ScalarNode) or not key_node.value:
                raise _fail(key_where, "a key must be a plain name (text), not a list or a mapping")
            key = key_node.value
            child = from_node(value_node, source, via, active, f"{_path}.{key}" if _path else key, budget)
            child.key_where = key_where
            out[key] = child
        active.discard(id(node))
        return Raw(out, where)
    if isinstance(node, SequenceNode):
        active.add(id(node))
        items = [from_node(item, source, via, active, f"{_path}.{i}" if _path else str(i), budget)
                 for i, item in enumerate(node.value)]
        active.discard(id(node))
        return Raw(items, where)
    try:
        value = SafeConstructor().construct_object(node)
    except ConstructorError as exc:
        raise _fail(where, f"cannot read this value: {_one_line(exc.problem)}") from None
    except (ValueError, OverflowError) as exc:    # a date that is none, an integer of thousands of digits
        raise _fail(where, f"cannot read this value: {_one_line(str(exc)).split('; use sys.')[0]}") from None
    return Raw(value, where)


def load_tree(path: Path | str) -> Raw | None:
    """Compose a YAML file into a `Raw` tree; None for an empty document. Syntax errors are one-line
    UsageErrors naming the file and line."""
    path = Path(path)
    source = str(path)
    try:
        with open(path, "rb") as handle:            # never more than the limit, whatever the path is
            data = handle.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise UsageError(f"{source}: larger than {MAX_FILE_BYTES // 1024} KB; an experiment file is a few KB "
                             "(is this the right file?)")
        text = data.decode()
    except FileNotFoundError:
        raise UsageError(f"{source}: no such experiment file") from None
    except IsADirectoryError:
        raise UsageError(f"{source}: is a folder; give an experiment YAML file") from None
    except UnicodeDecodeError:
        raise UsageError(f"{source}: not a text file; give an experiment YAML file") from None
    try:
        deep = _deeper_than(text, MAX_DEPTH)
        if deep is not None:
            raise _fail(Where(source, deep), TOO_DEEP)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        what = _one_line(exc.problem) or "cannot parse"
        context = _one_line(exc.context)
        detail = f"{what} ({context})" if context else what
        if "'\\t'" in what:
            detail = "a tab in the indentation; YAML indents with spaces only"
        elif "block" in what or "block" in context or "mapping values are not allowed" in what:
            detail += "; check the indentation and the colons around this line"
        raise _fail(Where(source, line), f"invalid YAML: {detail}") from None
    except yaml.YAMLError as exc:
        raise _fail(Where(source, None), f"invalid YAML: {_one_line(str(exc))}") from None
    except RecursionError:
        raise _fail(Where(source, None), f"invalid YAML: {TOO_DEEP}") from None
    return None if node is None else from_node(node, source)


def _deeper_than(text: str, depth: int) -> int | None:
    """The line of the first collection nested more than `depth` deep, or None. Read from PyYAML's event
    stream, which stops there: composing a 5,000-deep file ran into Python's recursion limit only after
    0.86 s (0.14 s here)."""
    level = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            level += 1
            if level > depth:
                return event.start_mark.line + 1
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            level -= 1
    return None


def parse_scalar(text: str, where: Where) -> Raw:
    """A `--set` value: YAML text (a scalar, or a flow list/mapping such as [2, 4])."""
    if len(text) > MAX_FILE_BYTES:
        raise _fail(where, f"the value is longer than {MAX_FILE_BYTES // 1024} KB")
    try:
        if _deeper_than(text, MAX_DEPTH) is not None:
            raise RecursionError
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except RecursionError:
        raise _fail(where, f"the value is nested more than {MAX_DEPTH} levels deep") from None
    except yaml.YAMLError as exc:
        problem = _one_line(getattr(exc, "problem", None) or str(exc))
        raise _fail(where, f"the value is not valid YAML: {problem}") from None
    if node is None:
        return Raw(None, where)
    raw = from_node(node, where.source)
    return _relocate(raw, where)


def _relocate(raw: Raw, where: Where) -> Raw:
    """Give every node of a tree the same position (values typed on the command line have no lines)."""
    if raw.is_map:
        value: Any = {k: _relocate(v, where) for k, v in raw.value.items()}
    elif raw.is_list:
        value = [_relocate(v, where) for v in raw.value]
    else:
        value = raw.value
    return Raw(value, where, where)
