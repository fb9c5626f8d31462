"""Errors a user can act on. The CLI prints each as one line, without a traceback."""


class PcnLabError(Exception):
    """Something the user can fix; the message says what is wrong and how to fix it."""

    exit_code = 1


class UsageError(PcnLabError):
    """Bad input: a wrong option, key, mode or value (exit 2)."""

    exit_code = 2


class ToolchainMissing(PcnLabError):
    """p4c, BMv2 or another required program is not installed."""


class NotRoot(PcnLabError):
    """Mininet and BMv2 ports need root."""


class PortInUse(UsageError):
    """A TCP port that was asked for is already taken."""


class AnalysisFailed(PcnLabError):
    """A run finished but reading its files failed (a defect of ours): the files are kept."""

    run_complete = True


class P4CompileError(PcnLabError):
    """p4c rejected the program."""
