"""Gradient compression for the PyTorch jobs: the codecs, their wire formats, and error feedback.

    codec = Codec("topk", 0.01)
    ef = ErrorFeedback(n)                       # one per stream (a worker's gradient to one PS shard)
    payload, sent = ef.compress(grad, codec)    # payload: a uint8 tensor, exactly what gloo carries
    grad_hat = codec.decode(payload, n)         # what the receiver reconstructs (== sent)

Methods (what a job's `compression:` names; `adaptive` is netsense.py's policy choosing among them):

| method | keeps | wire format (little-endian), n values | bytes |
|---|---|---|---|
| none  | every value | n float32 | 4 n |
| topk  | the k = max(1, round(ratio n)) largest magnitudes | k indices (uint16 when n <= 65536, else uint32), then k float32 values | k (2 or 4) + 4 k |
| randk | k indices drawn at random (a seeded generator per rank) | as topk | as topk |
| int8  | every value, 8 bits: per chunk of CHUNK values a float32 scale s = max abs / 127, q = round(x / s) | ceil(n / CHUNK) float32 scales, then n int8 | 4 ceil(n / CHUNK) + n |
| sign  | the sign, 1 bit: per chunk a float32 scale s = mean abs (signSGD with error feedback) | ceil(n / CHUNK) float32 scales, then the bits packed 8 per byte (1 = x >= 0, first value in the highest bit) | 4 ceil(n / CHUNK) + ceil(n / 8) |

Error bounds: int8 reconstructs every value within s / 2 of its chunk's scale (max abs / 254); sign
within max(|x|, s) <= the chunk's max abs; topk and randk are exact on the k values they keep.

Error feedback (Seide et al. 2014; Karimireddy et al. 2019, "Error Feedback Fixes SignSGD"): what a
codec leaves out of one iteration is added to the next one's input, so nothing is lost, only delayed:
p = g + e; send C(p); e = p - decode(C(p)). A job's `error_feedback: false` switches it off (e stays 0).

Messages: one gloo message per stream and iteration, a header of HEADER_BYTES (two little-endian
int32: the codec's level in the job's ladder, the payload's length in bytes) followed by the payload.
The receiver posts a buffer as large as the largest level's message (`capacity`; gloo fills a larger
buffer with what was sent) and reads the length from the header, so the level may change every
iteration (the adaptive policy) at no extra message: on a BMv2 port shaped in packets per second,
every small packet costs as much as a full one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from pcnlab.errors import UsageError
from pcnlab.workloads.compression_methods import DEFAULT_ERROR_FEEDBACK, METHODS, SPARSE

CHUNK = 1024                 # values per scale (int8, sign)
HEADER_BYTES = 8             # level, payload bytes: two little-endian int32


def _chunks(n: int) -> int:
    return max(1, math.ceil(n / CHUNK))


def _index_dtype(n: int) -> str:
    return "<u2" if n <= 1 << 16 else "<u4"


def _bytes(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array).view(np.uint8).copy())


@dataclass(frozen=True)
class Codec:
    """One way to put n float32 values on the wire. `ratio`: the share of values topk/randk keep."""

    method: str = "none"
    ratio: float = 1.0

    def __post_init__(self):
        if self.method not in METHODS:
            raise UsageError(f"unknown compression method {self.method!r}; choose one of {', '.join(METHODS)}")
        if not 0 < self.ratio <= 1:
            raise UsageError(f"compression ratio must be in (0, 1], got {self.ratio!r}")

    @property
    def name(self) -> str:
        return f"{self.method}-{self.ratio:g}" if self.method in SPARSE else self.method

    def k(self, n: int) -> int:
        """How many values topk/randk keep of n: exactly this many."""
        return min(n, max(1, round(self.ratio * n)))

    def wire_bytes(self, n: int) -> int:
        """The payload's length for n values (the header not included)."""
        if self.method == "none":
            return 4 * n
        if self.method in SPARSE:
            return self.k(n) * (np.dtype(_index_dtype(n)).itemsize + 4)
        if self.method == "int8":
            return 4 * _chunks(n) + n
        return 4 * _chunks(n) + math.ceil(n / 8)

    # --- encode ---------------------------------------------------------------------------------------

    def encode(self, x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The payload (a uint8 tensor of wire_bytes(n)) for the flat float32 tensor x."""
        x = x.detach().reshape(-1).to(torch.float32)
        n = x.numel()
        if self.method == "none":
            return _bytes(x.numpy().astype("<f4"))
        if self.method in SPARSE:
            k = self.k(n)
            if self.method == "topk":
                idx = torch.topk(x.abs(), k, sorted=False).indices
            else:
                idx = torch.randperm(n, generator=generator)[:k]
            idx = torch.sort(idx).values
            values = x[idx].numpy().astype("<f4")
            return _bytes(np.concatenate([idx.numpy().astype(_index_dtype(n)).view(np.uint8),
                                          values.view(np.uint8)]))
        rows = self._rows(x.numpy())
        if self.method == "int8":
            scale = (np.abs(rows).max(axis=1) / 127.0).astype("<f4")
            safe = np.where(scale > 0, scale, 1.0)
            q = np.clip(np.rint(rows / safe[:, None]), -127, 127).astype(np.int8).reshape(-1)[:n]
            return _bytes(np.concatenate([scale.view(np.uint8), q.view(np.uint8)]))
        counts = np.full(len(rows), CHUNK, dtype=np.float64)
        counts[-1] = n - CHUNK * (len(rows) - 1)
        scale = (np.abs(rows).sum(axis=1) / counts).astype("<f4")
        bits = np.packbits(x.numpy() >= 0)
        return _bytes(np.concatenate([scale.view(np.uint8), bits]))

    @staticmethod
    def _rows(values: np.ndarray) -> np.ndarray:
        """The values in rows of CHUNK, the last padded with zeros (which change no max and no sum)."""
        rows = np.zeros(_chunks(values.size) * CHUNK, dtype=np.float32)
        rows[:values.size] = values
        return rows.reshape(-1, CHUNK)

    # --- decode ---------------------------------------------------------------------------------------

    def decode(self, payload: torch.Tensor, n: int) -> torch.Tensor:
        """The n float32 values a payload stands for (zeros where a sparse codec sent nothing)."""
        raw = payload.detach().numpy()
        if raw.size != self.wire_bytes(n):
            raise ValueError(f"{self.name}: a payload of {raw.size} bytes for {n} values; expected "
                             f"{self.wire_bytes(n)}")
        if self.method == "none":
            return torch.from_numpy(raw.view("<f4").astype(np.float32))
        if self.method in SPARSE:
            k = self.k(n)
            width = np.dtype(_index_dtype(n)).itemsize
            idx = raw[:k * width].view(_index_dtype(n)).astype(np.int64)
            out = np.zeros(n, dtype=np.float32)
            out[idx] = raw[k * width:].view("<f4")
            return torch.from_numpy(out)
        chunks = _chunks(n)
        scale = np.repeat(raw[:4 * chunks].view("<f4").astype(np.float32), CHUNK)[:n]
        body = raw[4 * chunks:]
        if self.method == "int8":
            return torch.from_numpy(body.view(np.int8).astype(np.float32) * scale)
        signs = np.unpackbits(body)[:n].astype(np.float32) * 2.0 - 1.0
        return torch.from_numpy(signs * scale)


class ErrorFeedback:
    """One stream's residual: what earlier payloads left out, added to the next input. `enabled=False`:
    no residual (what a payload leaves out is lost), the baselines NetSenseML compares with."""

    def __init__(self, n: int, enabled: bool = DEFAULT_ERROR_FEEDBACK):
        self.enabled = enabled
        self.residual = torch.zeros(n, dtype=torch.float32)

    def compress(self, x: torch.Tensor, codec: Codec,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(payload, what it decodes to) for x plus the residual; the residual becomes the rest."""
        corrected = x.detach().reshape(-1).to(torch.float32) + self.residual
        payload = codec.encode(corrected, generator)
        sent = codec.decode(payload, corrected.numel())
        if self.enabled:
            self.residual = corrected - sent
        return payload, sent


def pack(level: int, payload: torch.Tensor) -> torch.Tensor:
    """One message: the header (level, payload length) and the payload."""
    head = torch.from_numpy(np.array([level, payload.numel()], dtype="<i4").view(np.uint8).copy())
    return torch.cat([head, payload])


def unpack(message: torch.Tensor) -> tuple[int, torch.Tensor]:
    """(level, payload) of a message, or of a receive buffer it filled from the start."""
    level, length = np.frombuffer(message[:HEADER_BYTES].numpy().tobytes(), dtype="<i4")
    if HEADER_BYTES + length > message.numel():
        raise ValueError(f"a message of {length} payload bytes in a buffer of {message.numel()}")
    return int(level), message[HEADER_BYTES:HEADER_BYTES + int(length)]


def capacity(ladder: tuple[Codec, ...], n: int) -> int:
    """The largest message of n values at any level of the ladder: the receive buffer's size."""
    return HEADER_BYTES + max(codec.wire_bytes(n) for codec in ladder)
