"""The P4 program's facts that the controller, the collector and the Wireshark dissector need: its
integer constants (ethertype, traffic classes, telemetry flags, register slots) and the telemetry
record's layout, generated from the program by `pcnlab p4` into build/facts.json, never copied by hand.

The layout comes from p4c's own output (the BMv2 JSON's header_types). The constants are the
program's `const bit<W> NAME = <integer>;` declarations and `#define NAME <integer>` macros, read from
the sources with a regular expression: p4c's JSON outputs inline them, and these two one-line forms
are all the program uses (a constant in another form is not exported, and a test says which names
the Python side needs).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pcnlab.p4src import BUILD_DIR

FACTS_FILE = "facts.json"
TELEMETRY_HEADER = "telemetry_h"
_CONST = re.compile(r"^\s*const\s+bit<\d+>\s+([A-Z][A-Z0-9_]*)\s*=\s*(0x[0-9A-Fa-f]+|\d+)\s*;", re.M)
_DEFINE = re.compile(r"^\s*#define\s+([A-Z][A-Z0-9_]*)\s+(0x[0-9A-Fa-f]+|\d+)\b", re.M)


@dataclass(frozen=True)
class Field:
    name: str
    bits: int
    offset: int    # bytes from the record's start


@dataclass(frozen=True)
class ProgramFacts:
    constants: dict[str, int]
    telemetry: tuple[Field, ...]

    def __getitem__(self, name: str) -> int:
        try:
            return self.constants[name]
        except KeyError:
            raise KeyError(f"{name} is not a constant of the P4 program (p4src/*.p4); "
                           f"run `make p4` after adding it") from None

    @property
    def telemetry_bytes(self) -> int:
        return sum(f.bits for f in self.telemetry) // 8

    def prefixed(self, prefix: str) -> dict[str, int]:
        """The constants named prefix + X, as {X: value}, by value."""
        named = {k[len(prefix):]: v for k, v in self.constants.items() if k.startswith(prefix)}
        return dict(sorted(named.items(), key=lambda kv: (kv[1], kv[0])))


def extract(source_dir: Path, bmv2_json: Path) -> dict:
    """The facts of the program in `source_dir` compiled into `bmv2_json`, as facts.json holds them."""
    constants: dict[str, int] = {}
    for source in sorted(source_dir.glob("*.p4")):
        text = source.read_text()
        for pattern in (_CONST, _DEFINE):
            for name, value in pattern.findall(text):
                constants[name] = int(value, 0)
    headers = {h["name"]: h for h in json.loads(bmv2_json.read_text())["header_types"]}
    layout = {name: bits for name, bits, *_ in headers[TELEMETRY_HEADER]["fields"]}
    return {"constants": dict(sorted(constants.items())), "telemetry": layout}


def write(data: dict, out: Path) -> Path:
    """facts.json from `extract`'s data."""
    out.write_text(json.dumps(data, indent=1) + "\n")
    return out


def parse(data: dict) -> ProgramFacts:
    fields, offset = [], 0
    for name, bits in data["telemetry"].items():
        fields.append(Field(name, bits, offset))
        offset += bits // 8
    return ProgramFacts(dict(data["constants"]), tuple(fields))


@lru_cache(maxsize=1)
def program_facts() -> ProgramFacts:
    """The committed facts of p4src/pcn.p4 (p4src/build/facts.json, written by `make p4`)."""
    return parse(json.loads((BUILD_DIR / FACTS_FILE).read_text()))
