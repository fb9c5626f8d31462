"""The gradient compression methods by name, and the check of a job's setting: what the experiment
schema, the job specs and the workers share (compression.py has the codecs). Importing it does not
import PyTorch.

- none: the gradients as float32 (the workers' plain path);
- topk, randk: keep `ratio` of the values (the largest magnitudes, or random ones), sent as index + value;
- int8: 8-bit quantisation (a float32 scale per chunk); sign: 1 bit per value (a scale per chunk);
- adaptive: each worker picks one of those per iteration from what it senses of the network (netsense.py).

Every method but none uses error feedback (what one iteration leaves out is added to the next) unless
the job sets `error_feedback: false`, which only a fixed method (topk, randk, int8, sign) takes: none
leaves nothing out, and adaptive's policy weighs its levels by costs measured with error feedback
(netsense.EFFICIENCY).
"""

from __future__ import annotations

from pcnlab.errors import UsageError

METHODS = ("none", "topk", "randk", "int8", "sign")
ADAPTIVE = "adaptive"
CHOICES = METHODS + (ADAPTIVE,)
SPARSE = ("topk", "randk")
DEFAULT_RATIO = 0.01
DEFAULT_ERROR_FEEDBACK = True   # compressed gradients carry what they leave out to the next iteration
COMPRESSIBLE_KINDS = ("ps", "ring")   # job kinds with gradients to compress (not the burst generator)


def error_feedback_problem(method: str, error_feedback: bool) -> str | None:
    """Why `error_feedback` cannot go with `method` (one line), or None if it can."""
    if error_feedback:
        return None
    if method == "none":
        return ("error_feedback false means nothing with compression none (uncompressed gradients leave "
                "nothing out); remove it, or choose topk, randk, int8 or sign")
    if method == ADAPTIVE:
        return ("error_feedback false does not go with compression adaptive: its policy's costs "
                "(netsense.EFFICIENCY) were measured with error feedback; remove it, or choose topk, randk, "
                "int8 or sign")
    return None


def check_compression(method: str, ratio: float | None, kind: str, where: str = "compression",
                      error_feedback: bool = DEFAULT_ERROR_FEEDBACK) -> None:
    """A one-line UsageError unless `method` (with `ratio` and `error_feedback`) can compress a job of `kind`."""
    if method not in CHOICES:
        raise UsageError(f"{where}: unknown method {method!r}; choose one of {', '.join(CHOICES)}")
    if method != "none" and kind not in COMPRESSIBLE_KINDS:
        raise UsageError(f"{where}: {method} needs a PyTorch job (kind ps or ring) whose gradients it can "
                         f"compress; a {kind} job has none; remove compression from it")
    if ratio is not None and (isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1):
        raise UsageError(f"{where}: ratio must be in (0, 1] (the share of values topk/randk keep), got {ratio!r}")
    problem = error_feedback_problem(method, error_feedback)
    if problem:
        raise UsageError(f"{where}: {problem}")
