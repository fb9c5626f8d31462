"""The codecs, their wire formats and error feedback (workloads/compression.py), and the PS's model
copy kept in step on both ends (gradsync.py): real tensors with known answers."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pcnlab.errors import UsageError
from pcnlab.workloads.compression_methods import check_compression
from pcnlab.workloads.compression import CHUNK, HEADER_BYTES, Codec, ErrorFeedback, capacity, pack, unpack
from pcnlab.workloads.gradsync import ShardSync, WorkerSync
from pcnlab.workloads.netsense import LADDER

N = 9610   # digits-mlp's parameters


def gradient(n: int = N, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, generator=g) * torch.rand(n, generator=g) ** 3   # heavy-tailed, like gradients


@pytest.mark.parametrize("ratio", [0.001, 0.01, 0.1, 0.37, 1.0])
def test_topk_keeps_exactly_k_largest_values_exactly(ratio):
    x = gradient()
    codec = Codec("topk", ratio)
    k = max(1, round(ratio * N))
    out = codec.decode(codec.encode(x), N)
    kept = out.nonzero().flatten()
    assert len(kept) == k == codec.k(N)
    assert torch.equal(out[kept], x[kept])                       # the kept values travel as float32
    threshold = x.abs().sort(descending=True).values[k - 1]
    assert bool((x[kept].abs() >= threshold).all())              # and they are the k largest magnitudes


def test_randk_keeps_exactly_k_values_seeded_per_generator():
    x = gradient()
    codec = Codec("randk", 0.05)
    a = codec.decode(codec.encode(x, torch.Generator().manual_seed(1)), N)
    b = codec.decode(codec.encode(x, torch.Generator().manual_seed(1)), N)
    c = codec.decode(codec.encode(x, torch.Generator().manual_seed(2)), N)
    assert (a != 0).sum() == codec.k(N) == round(0.05 * N)
    assert torch.equal(a, b) and not torch.equal(a, c)
    kept = a.nonzero().flatten()
    assert torch.equal(a[kept], x[kept])


def test_int8_error_within_half_a_step_of_each_chunk():
    x = gradient(3 * CHUNK + 17)
    x[5] = 40.0                                  # an outlier coarsens its own chunk only
    x[CHUNK:2 * CHUNK] = 0.0                     # an all-zero chunk comes back as zeros
    codec = Codec("int8")
    out = codec.decode(codec.encode(x), x.numel())
    for start in range(0, x.numel(), CHUNK):
        chunk, back = x[start:start + CHUNK], out[start:start + CHUNK]
        step = chunk.abs().max() / 127
        assert float((chunk - back).abs().max()) <= float(step) / 2 * (1 + 1e-5) + 1e-12
    assert bool((out[CHUNK:2 * CHUNK] == 0).all())


def test_sign_keeps_signs_and_each_chunks_mean_magnitude():
    x = gradient(2 * CHUNK + 100)
    codec = Codec("sign")
    out = codec.decode(codec.encode(x), x.numel())
    assert bool((torch.sign(out) == torch.where(x >= 0, 1.0, -1.0)).all())
    for start in range(0, x.numel(), CHUNK):
        chunk, back = x[start:start + CHUNK], out[start:start + CHUNK]
        assert float(back.abs().max()) == pytest.approx(float(chunk.abs().mean()), rel=1e-5)
        assert float((chunk - back).abs().max()) <= float(chunk.abs().max()) * (1 + 1e-6)


@pytest.mark.parametrize("codec, expected", [
    (Codec("none"), 4 * N),
    (Codec("topk", 0.01), 96 * (2 + 4)),             # uint16 indices below 65,536 values
    (Codec("randk", 0.1), 961 * (2 + 4)),
    (Codec("int8"), 4 * math.ceil(N / CHUNK) + N),
    (Codec("sign"), 4 * math.ceil(N / CHUNK) + math.ceil(N / 8)),
])
def test_payload_is_the_wire_format_size(codec, expected):
    payload = codec.encode(gradient(), torch.Generator().manual_seed(0))
    assert payload.dtype == torch.uint8 and payload.numel() == codec.wire_bytes(N) == expected


def test_sparse_indices_widen_to_32_bits_past_65536_values():
    n = 70_000
    x = torch.zeros(n)
    x[69_999] = 3.0                              # only representable with 32-bit indices
    codec = Codec("topk", 1 / n)
    payload = codec.encode(x)
    assert payload.numel() == 4 + 4
    assert np.frombuffer(payload.numpy().tobytes()[:4], "<u4")[0] == 69_999
    assert float(codec.decode(payload, n)[69_999]) == 3.0


def test_decode_refuses_a_payload_of_the_wrong_length():
    codec = Codec("int8")
    with pytest.raises(ValueError, match="expected"):
        codec.decode(codec.encode(gradient())[:-1], N)


@pytest.mark.parametrize("codec", [c for c in LADDER if c.method != "none"] + [Codec("randk", 0.02)])
def test_error_feedback_carries_the_remainder(codec):
    """Each step's residual is exactly what it did not send; over many steps what was sent plus the
    last residual adds up to everything that went in (nothing is lost, only delayed)."""
    ef = ErrorFeedback(N)
    gen = torch.Generator().manual_seed(3)
    total_in = torch.zeros(N, dtype=torch.float64)
    total_sent = torch.zeros(N, dtype=torch.float64)
    for step in range(30):
        g = gradient(seed=step)
        before = ef.residual.clone()
        payload, sent = ef.compress(g, codec, gen)
        assert torch.equal(sent, codec.decode(payload, N))
        assert torch.equal(ef.residual, (g + before) - sent)
        total_in += g.double()
        total_sent += sent.double()
    assert torch.allclose(total_sent + ef.residual.double(), total_in, atol=1e-4)
    # The residual stays bounded: the codec sends what accumulates.
    assert float(ef.residual.abs().max()) < 30 * float(gradient().abs().max())


def test_downlink_model_copies_stay_identical():
    """The PS shard's copy of what the workers hold (shadow) and a worker's parameters follow the same
    floats through compressed and uncompressed answers."""
    ladder = LADDER
    start = gradient(seed=10)
    shard = ShardSync(ladder, N, start)
    worker = WorkerSync(ladder, [N])
    held = start.clone()
    x = start.clone()
    box = torch.zeros(capacity(ladder, N), dtype=torch.uint8)
    for step, level in enumerate([4, 4, 1, 3, 0, 2, 4]):
        x = x - 0.1 * gradient(seed=100 + step)
        message = shard.encode(x, level)
        assert message.numel() == HEADER_BYTES + ladder[level].wire_bytes(N)
        box[:message.numel()] = message          # what gloo leaves in a receive buffer of the largest size
        sent_level, payload = unpack(box)
        assert sent_level == level and payload.numel() == ladder[level].wire_bytes(N)
        held = worker.decode(box, held)
        assert torch.equal(held, shard.shadow)
        if level == 0:
            assert torch.equal(held, x)          # none sends the parameters themselves


def test_a_message_carries_its_level_and_length():
    payload = Codec("topk", 0.01).encode(gradient())
    message = pack(4, payload)
    assert message.numel() == HEADER_BYTES + payload.numel()
    level, back = unpack(message)
    assert level == 4 and torch.equal(back, payload)
    assert capacity(LADDER, N) == HEADER_BYTES + 4 * N      # none's is the largest
    with pytest.raises(ValueError, match="in a buffer of"):
        unpack(message[:-1])


@pytest.mark.parametrize("method, ratio, kind, message", [
    ("zip", None, "ps", "unknown method 'zip'"),
    ("topk", 0.0, "ps", "ratio must be in (0, 1]"),
    ("topk", 1.5, "ring", "ratio must be in (0, 1]"),
    ("adaptive", None, "generator", "needs a PyTorch job"),
    ("int8", None, "generator", "needs a PyTorch job"),
    ("none", 0.01, "ps", "error_feedback false means nothing with compression none"),
    ("adaptive", 0.01, "ring", "error_feedback false does not go with compression adaptive: its policy's costs"),
])
def test_bad_settings_are_one_line_errors(method, ratio, kind, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)").replace("]", r"\]")) as exc:
        check_compression(method, ratio, kind, error_feedback="error_feedback" not in message)
    assert "\n" not in str(exc.value)


def test_good_settings_pass():
    for kind in ("ps", "ring"):
        for method in ("none", "topk", "randk", "int8", "sign", "adaptive"):
            check_compression(method, 0.01, kind)
        for method in ("topk", "randk", "int8", "sign"):
            check_compression(method, 0.01, kind, error_feedback=False)
    check_compression("none", None, "generator")


@pytest.mark.parametrize("codec", [Codec("topk", 0.01), Codec("topk", 0.001)])
def test_without_error_feedback_what_a_payload_leaves_out_is_lost(codec):
    """error_feedback: false (NetSenseML's fixed top-k baselines): every payload is the codec of that
    iteration's gradient alone, and no residual carries the rest into the next."""
    ef = ErrorFeedback(N, enabled=False)
    gen = torch.Generator().manual_seed(3)
    lost = torch.zeros(N, dtype=torch.float64)
    for step in range(5):
        g = gradient(seed=step)
        payload, sent = ef.compress(g, codec, gen)
        assert torch.equal(payload, codec.encode(g)) and torch.equal(sent, codec.decode(payload, N))
        assert torch.count_nonzero(ef.residual) == 0
        lost += (g - sent).double()
    assert float(lost.abs().sum()) > 0.5 * float(sum(gradient(seed=s).abs().sum() for s in range(5)))


def test_a_worker_without_error_feedback_keeps_no_residual_per_shard():
    grads = [gradient(seed=1), gradient(n=500, seed=2)]
    ladder = (Codec("topk", 0.005),)
    with_ef, without = WorkerSync(ladder, [N, 500]), WorkerSync(ladder, [N, 500], error_feedback=False)
    for _ in range(2):
        with_ef.encode(grads, 0)
        sent = without.encode(grads, 0)
    assert all(torch.count_nonzero(f.residual) > 0 for f in with_ef.feedback)
    assert all(torch.count_nonzero(f.residual) == 0 for f in without.feedback)
    assert all(torch.equal(unpack(m)[1], ladder[0].encode(g)) for m, g in zip(sent, grads))
