"""Finds p4c and BMv2 and says how to install them when they are missing."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from pcnlab.errors import NotRoot, P4CompileError, ToolchainMissing

# p4tools' second BMv2 build: logging compiled out, about twice the packet rate.
NOLOG_BIN = Path("/usr/local/opt/bmv2-nolog/bin")

INSTALL_HINT = (
    "install it: `make deps` on Ubuntu (p4lang's p4lang-p4c/p4lang-bmv2 packages), "
    "or `sudo ../shared/p4tools/install` on Debian 12"
)


@dataclass(frozen=True)
class Bmv2Build:
    """One simple_switch_grpc binary and whether it can write the per-packet log."""

    switch: Path
    logging: bool

    def version(self) -> str:
        return tool_output_line([str(self.switch), "--version"])


def find_program(name: str) -> Path | None:
    found = shutil.which(name)
    return Path(found) if found else None


def require_program(name: str) -> Path:
    path = find_program(name)
    if path is None:
        raise ToolchainMissing(f"{name} not found on PATH; {INSTALL_HINT}")
    return path


def bmv2_build(packet_log: bool = False) -> Bmv2Build:
    """The switch binary to run: the no-logging build unless the packet log is wanted."""
    fast = NOLOG_BIN / "simple_switch_grpc"
    if not packet_log and os.access(fast, os.X_OK):
        return Bmv2Build(fast, logging=False)
    return Bmv2Build(require_program("simple_switch_grpc"), logging=True)


def p4c_version() -> str:
    return tool_output_line([str(require_program("p4c")), "--version"], last=True)


def thrift_client_available() -> bool:
    try:
        import sswitch_runtime  # noqa: F401  (BMv2's thrift client)
        import thrift  # noqa: F401
    except ImportError:
        return False
    return True


def require_root(what: str = "Mininet") -> None:
    if os.geteuid() != 0:
        raise NotRoot(f"{what} needs root: run this command with sudo")


def tool_output_line(cmd: list[str], last: bool = False) -> str:
    """The first (or last) non-empty line a tool prints, e.g. its version; "unknown" if it prints none."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    lines = [ln.strip() for ln in (out.stdout + out.stderr).splitlines() if ln.strip()]
    if not lines:
        return "unknown"
    return lines[-1] if last else lines[0]


def compile_p4(source_dir: Path, main: str, out_dir: Path) -> tuple[Path, Path]:
    """Compile a v1model program with p4c; returns (BMv2 JSON, P4Info). Raises with p4c's first error."""
    p4c = require_program("p4c")
    stem = Path(main).stem
    out_dir.mkdir(parents=True, exist_ok=True)
    p4info = out_dir / f"{stem}.p4info.txtpb"
    # Relative paths, run from the source folder: the JSON's source_info then does not depend on
    # where the checkout is, so the committed outputs can be compared byte for byte.
    proc = subprocess.run(
        [str(p4c), "--target", "bmv2", "--arch", "v1model", "--p4runtime-files", str(p4info),
         "-o", str(out_dir), main],
        cwd=source_dir, capture_output=True, text=True,
    )
    preprocessed = out_dir / f"{stem}.p4i"
    preprocessed.unlink(missing_ok=True)
    if proc.returncode != 0:
        error = next((ln for ln in proc.stderr.splitlines() if "error" in ln.lower()), proc.stderr.strip())
        raise P4CompileError(f"p4c failed on {source_dir / main}: {error}")
    # The JSON names the preprocessed file by its absolute path; name the source instead.
    json_path = out_dir / f"{stem}.json"
    json_path.write_text(json_path.read_text().replace(f'"{preprocessed}"', f'"{main}"', 1))
    return json_path, p4info
