"""The P4 program's sources and its committed compiled outputs (BMv2 JSON and P4Info)."""

from pathlib import Path

P4SRC_DIR = Path(__file__).resolve().parent
BUILD_DIR = P4SRC_DIR / "build"
MAIN_SOURCE = "pcn.p4"
PROGRAMS = ("pcn.p4", "plain.p4")  # plain.p4: the benchmark's baseline (forwarding only)


def program_json(program: str = "pcn") -> Path:
    return BUILD_DIR / f"{program}.json"


def program_p4info(program: str = "pcn") -> Path:
    return BUILD_DIR / f"{program}.p4info.txtpb"
