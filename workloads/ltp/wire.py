"""LTP's datagrams: what a worker's gradient chunk and the PS's acknowledgement look like on the wire,
and the checks every received datagram passes before a byte of it reaches a tensor.

A gradient (one PS shard's part of a worker's gradients: a list of float32 tensors) is cut into
chunks of at most CHUNK_ELEMENTS elements, tensor by tensor; a chunk is named by (tensor index,
element offset) and numbered in that order (`Layout`). Both ends build the same layout from the same
model, so a datagram carries where it goes, never how big the whole is.

DATA (worker -> PS), 32 bytes of header in network byte order, then `count` float32 (little-endian):

    magic u16 'LT' | version u8 | kind u8 = 1 | job u32 | rank u16 | flags u8 | reserved u8 = 0 |
    iter u32 | seq u32 | tensor u16 | count u16 | offset u32 | srtt_us u32

  job: the job's tag (`job_tag`: CRC-32 of its name and port), so a datagram of another job is
  foreign; rank: the sender's torch rank, which must be the one its source address belongs to; seq:
  the sender's transmission number (every transmission, retransmissions included, gets a new one, so
  an acknowledgement names exactly which transmission it answers); flags: RETRANSMISSION (informative),
  LAST (every chunk of the iteration has been sent at least once: set on the transmission that
  completes the first pass and on every one after it, so any of them tells the PS the sender is done
  sending and what it lacks is lost, not on its way); srtt_us: the sender's smoothed
  RTT, which the PS's Early Close uses for its grace period. 32 + 360 x 4 = 1472 bytes: a full
  1500-byte IPv4 frame.

ACK (PS -> worker), 24 bytes of header, then a bitmap of the iteration's chunks (bit i of byte i//8,
least significant first: chunk i of this worker has arrived):

    magic u16 | version u8 | kind u8 = 2 | job u32 | rank u16 | flags u8 | reserved u8 = 0 |
    iter u32 | echo_seq u32 | chunks u32

  flags: CLOSED (the PS has closed the iteration: stop sending it); PULL (the receiver-driven pull of
  what is missing, sent once the worker's LAST is in: every chunk the bitmap lacks whose latest
  transmission is older than echo_seq is lost, resend it now; with NO_ECHO, after the worker fell
  silent: resend every chunk the bitmap lacks); echo_seq: the seq of the DATA datagram that caused
  this acknowledgement (NO_ECHO for a CLOSE or a PULL sent on its own). Every acknowledgement carries
  the whole state of the iteration, so a lost or reordered one costs nothing.

`parse_data` and `parse_ack` raise `Rejected(reason)` with one of REASONS; the receiver counts each
reason and drops the datagram.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

import numpy as np

MAGIC = 0x4C54                    # "LT"
VERSION = 1
DATA, ACK = 1, 2
FLAG_CLOSED = 0x01                # ACK: the iteration is closed at the PS
FLAG_PULL = 0x02                  # ACK: resend now the chunks the bitmap lacks (sent before echo_seq)
FLAG_RETRANSMISSION = 0x01        # DATA: this chunk was sent before (informative)
FLAG_LAST = 0x02                  # DATA: every chunk of the iteration has been sent at least once
NO_ECHO = 0xFFFFFFFF

DATA_HEADER = struct.Struct("!HBBIHBBIIHHII")
ACK_HEADER = struct.Struct("!HBBIHBBIII")
MAX_DATAGRAM = 1472               # UDP payload of a 1500-byte IPv4 frame
CHUNK_ELEMENTS = (MAX_DATAGRAM - DATA_HEADER.size) // 4     # 360 float32
MAX_CHUNKS = (MAX_DATAGRAM - ACK_HEADER.size) * 8           # what one acknowledgement's bitmap holds
PAYLOAD_DTYPE = np.dtype("<f4")

# Why a datagram was dropped (the receiver's counters, in the job log).
REASONS = ("truncated", "bad_magic", "bad_version", "bad_kind", "wrong_job", "foreign", "bad_rank",
           "bad_iteration", "late", "bad_offset", "bad_length", "non_finite", "duplicate", "oversized")

assert DATA_HEADER.size == 32 and ACK_HEADER.size == 24


class Rejected(Exception):
    """A datagram that is not (or no longer) welcome; `reason` is one of REASONS."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


def job_tag(job: str, port: int) -> int:
    """The tag both ends put in every datagram of a job: CRC-32 of its name and port."""
    return zlib.crc32(f"{job}:{port}".encode())


class Layout:
    """The chunks of one gradient: tensor sizes (elements) in order -> (tensor, offset, count) per chunk,
    and where each chunk sits in the flat vector of all the tensors."""

    def __init__(self, sizes: list[int], chunk: int = CHUNK_ELEMENTS):
        if len(sizes) > 0xFFFF or any(s < 0 or s > 0xFFFFFFFF for s in sizes):
            raise ValueError("LTP carries at most 65535 tensors of at most 2^32 elements each")
        self.sizes = list(sizes)
        self.chunk = chunk
        self.total = sum(self.sizes)
        self.tensor_start: list[int] = []     # flat element offset of each tensor
        self.chunk_base: list[int] = []       # index of each tensor's first chunk
        tensor, offset, count, start = [], [], [], []
        flat = 0
        for t, size in enumerate(self.sizes):
            self.tensor_start.append(flat)
            self.chunk_base.append(len(tensor))
            for o in range(0, size, chunk):
                tensor.append(t)
                offset.append(o)
                count.append(min(chunk, size - o))
                start.append(flat + o)
            flat += size
        self.tensor = np.array(tensor, dtype=np.int64)
        self.offset = np.array(offset, dtype=np.int64)
        self.count = np.array(count, dtype=np.int64)
        self.start = np.array(start, dtype=np.int64)
        self.chunks = len(tensor)
        if self.chunks > MAX_CHUNKS:
            raise ValueError(f"a gradient of {self.total:,} elements is {self.chunks:,} chunks; one LTP "
                             f"acknowledgement tracks at most {MAX_CHUNKS:,} ({MAX_CHUNKS * chunk * 4 / 1e6:.1f} MB): "
                             f"use more PS shards or a smaller model")
        self.bitmap_bytes = (self.chunks + 7) // 8

    def chunk_index(self, tensor: int, offset: int, count: int) -> int:
        """The chunk a DATA datagram claims to be; Rejected unless it is exactly one of this layout's."""
        if tensor >= len(self.sizes) or offset >= self.sizes[tensor] or offset % self.chunk:
            raise Rejected("bad_offset")
        index = self.chunk_base[tensor] + offset // self.chunk
        if count != self.count[index]:
            raise Rejected("bad_length")
        return index

    def element_mask(self, chunk_mask: np.ndarray) -> np.ndarray:
        """Per element: whether its chunk is set in `chunk_mask` (shape (..., chunks))."""
        return np.repeat(chunk_mask, self.count, axis=-1)


@dataclass(frozen=True)
class Data:
    rank: int
    flags: int
    iter: int
    seq: int
    chunk: int
    srtt_us: int
    payload: np.ndarray      # float32 view of the datagram's payload (count elements)

    @property
    def last(self) -> bool:
        return bool(self.flags & FLAG_LAST)


@dataclass(frozen=True)
class Ack:
    rank: int
    flags: int
    iter: int
    echo_seq: int
    bitmap: bytes

    @property
    def closed(self) -> bool:
        return bool(self.flags & FLAG_CLOSED)

    @property
    def pull(self) -> bool:
        return bool(self.flags & FLAG_PULL)


def pack_data(buf: bytearray, tag: int, rank: int, flags: int, it: int, seq: int, tensor: int, offset: int,
              payload: np.ndarray, srtt_us: int) -> memoryview:
    """Write a DATA datagram into `buf` (at least MAX_DATAGRAM bytes); returns the view to send."""
    count = int(payload.size)
    DATA_HEADER.pack_into(buf, 0, MAGIC, VERSION, DATA, tag, rank, flags, 0, it & 0xFFFFFFFF,
                          seq & 0xFFFFFFFF, tensor, count, offset, min(int(srtt_us), 0xFFFFFFFF))
    end = DATA_HEADER.size + 4 * count
    buf[DATA_HEADER.size:end] = payload.astype(PAYLOAD_DTYPE, copy=False).tobytes()
    return memoryview(buf)[:end]


def _common(head: tuple, tag: int, kind: int) -> None:
    magic, version, got_kind, got_tag = head[0], head[1], head[2], head[3]
    if magic != MAGIC:
        raise Rejected("bad_magic")
    if version != VERSION:
        raise Rejected("bad_version")
    if got_kind != kind:
        raise Rejected("bad_kind")
    if got_tag != tag:
        raise Rejected("wrong_job")


def parse_data(datagram: bytes | memoryview, tag: int, layout: Layout) -> Data:
    """A DATA datagram checked against the job's tag and the gradient's layout (Rejected otherwise).
    The payload is a read-only float32 view: copy it before the datagram's buffer is reused."""
    if len(datagram) < DATA_HEADER.size:
        raise Rejected("truncated")
    if len(datagram) > MAX_DATAGRAM:
        raise Rejected("oversized")
    head = DATA_HEADER.unpack_from(datagram, 0)
    _common(head, tag, DATA)
    _, _, _, _, rank, flags, reserved, it, seq, tensor, count, offset, srtt_us = head
    if reserved:
        raise Rejected("bad_kind")
    chunk = layout.chunk_index(tensor, offset, count)
    if len(datagram) != DATA_HEADER.size + 4 * count:
        raise Rejected("truncated" if len(datagram) < DATA_HEADER.size + 4 * count else "bad_length")
    payload = np.frombuffer(datagram, dtype=PAYLOAD_DTYPE, count=count, offset=DATA_HEADER.size)
    if not np.isfinite(payload).all():
        raise Rejected("non_finite")
    return Data(rank, flags, it, seq, chunk, srtt_us, payload)


def pack_ack(tag: int, rank: int, flags: int, it: int, echo_seq: int, chunks: int, bitmap: bytes) -> bytes:
    return ACK_HEADER.pack(MAGIC, VERSION, ACK, tag, rank, flags, 0, it & 0xFFFFFFFF, echo_seq & 0xFFFFFFFF,
                           chunks) + bitmap


def parse_ack(datagram: bytes, tag: int, rank: int, layout: Layout) -> Ack:
    """An ACK for this worker (`rank`) checked against the job's tag and the layout (Rejected otherwise)."""
    if len(datagram) < ACK_HEADER.size:
        raise Rejected("truncated")
    head = ACK_HEADER.unpack_from(datagram, 0)
    _common(head, tag, ACK)
    _, _, _, _, got_rank, flags, reserved, it, echo_seq, chunks = head
    if reserved:
        raise Rejected("bad_kind")
    if got_rank != rank:
        raise Rejected("bad_rank")
    if chunks != layout.chunks or len(datagram) != ACK_HEADER.size + layout.bitmap_bytes:
        raise Rejected("bad_length")
    return Ack(got_rank, flags, it, echo_seq, bytes(datagram[ACK_HEADER.size:]))


def bitmap_of(mask: np.ndarray) -> bytes:
    """Chunk mask (bool, one per chunk) -> the acknowledgement's bitmap."""
    return np.packbits(mask, bitorder="little").tobytes()


def mask_of(bitmap: bytes, chunks: int) -> np.ndarray:
    """The acknowledgement's bitmap -> chunk mask (bool, `chunks` long)."""
    return np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), count=chunks, bitorder="little").astype(bool)
