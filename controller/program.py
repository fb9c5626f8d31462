"""Which compiled P4 program a switch runs: its BMv2 JSON and its P4Info."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pcnlab.errors import ToolchainMissing
from pcnlab.p4src import program_json, program_p4info


@dataclass(frozen=True)
class P4Program:
    json: Path
    p4info: Path

    @classmethod
    def named(cls, name: str = "pcn") -> "P4Program":
        """A program compiled into p4src/build (`make p4`)."""
        program = cls(program_json(name), program_p4info(name))
        for path in (program.json, program.p4info):
            if not path.exists():
                raise ToolchainMissing(f"{path} is missing: run `make p4` to compile p4src/")
        return program
