"""LTP's parts with known answers, no network: the datagram format and every hostile case its parser
must refuse, the AIMD window, the RTT estimator, Early Close's decisions and Bubble Filling."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

from pcnlab.workloads.ltp.ratecontrol import MIN_RTO_S, AimdWindow, RttEstimator
from pcnlab.workloads.ltp.earlyclose import COMPLETE, DEADLINE, THRESHOLD, EarlyClose
from pcnlab.workloads.ltp.fill import bubble_fill
from pcnlab.workloads.ltp.wire import (ACK_HEADER, CHUNK_ELEMENTS, DATA_HEADER, FLAG_CLOSED, MAX_DATAGRAM, Layout,
                                       Rejected, bitmap_of, job_tag, mask_of, pack_ack, pack_data, parse_ack,
                                       parse_data)

TAG = job_tag("train", 20000)


def test_layout_cuts_tensors_into_chunks_in_order():
    lay = Layout([1000, 5, 360])
    # 1000 = 360 + 360 + 280; then 5; then 360
    assert lay.chunks == 5 and lay.total == 1365
    assert lay.tensor.tolist() == [0, 0, 0, 1, 2]
    assert lay.offset.tolist() == [0, 360, 720, 0, 0]
    assert lay.count.tolist() == [360, 360, 280, 5, 360]
    assert lay.start.tolist() == [0, 360, 720, 1000, 1005]
    assert lay.chunk_index(0, 720, 280) == 2 and lay.chunk_index(2, 0, 360) == 4
    assert lay.element_mask(np.array([True, False, False, True, False])).sum() == 365
    assert DATA_HEADER.size + 4 * CHUNK_ELEMENTS == MAX_DATAGRAM == 1472


def test_layout_refuses_what_one_acknowledgement_cannot_track():
    with pytest.raises(ValueError, match="PS shards"):
        Layout([CHUNK_ELEMENTS * ((MAX_DATAGRAM - ACK_HEADER.size) * 8 + 1)])


def _datagram(lay, tensor=0, offset=0, it=3, seq=17, rank=2, tag=TAG, values=None) -> bytes:
    index = lay.chunk_index(tensor, offset, int(lay.count[lay.chunk_base[tensor] + offset // lay.chunk]))
    values = np.arange(lay.count[index], dtype=np.float32) if values is None else values
    return bytes(pack_data(bytearray(MAX_DATAGRAM), tag, rank, 0, it, seq, tensor, offset, values, 1234))


def test_data_round_trip():
    lay = Layout([1000, 5])
    d = parse_data(_datagram(lay, tensor=0, offset=720), TAG, lay)
    assert (d.rank, d.iter, d.seq, d.chunk, d.srtt_us) == (2, 3, 17, 2, 1234)
    assert d.payload.tolist() == list(range(280))


def test_hostile_data_datagrams_are_refused_with_their_reason():
    lay = Layout([1000, 5])
    good = _datagram(lay, tensor=0, offset=360)
    parse_data(good, TAG, lay)

    def reason(datagram) -> str:
        with pytest.raises(Rejected) as exc:
            parse_data(datagram, TAG, lay)
        return exc.value.reason

    # Truncated anywhere: inside the header, or payload shorter than its count says.
    assert {reason(good[:n]) for n in range(DATA_HEADER.size)} == {"truncated"}
    assert reason(good[:-1]) == "truncated" and reason(good[:DATA_HEADER.size]) == "truncated"
    small = _datagram(lay, tensor=1, offset=0)
    assert reason(small + b"\0\0\0\0") == "bad_length"           # longer than its count says
    assert reason(good + bytes(MAX_DATAGRAM)) == "oversized"
    assert reason(b"XX" + good[2:]) == "bad_magic"
    assert reason(good[:2] + b"\x07" + good[3:]) == "bad_version"
    assert reason(good[:3] + b"\x02" + good[4:]) == "bad_kind"   # an ACK's kind
    assert reason(good[:11] + b"\x01" + good[12:]) == "bad_kind"  # reserved byte set
    assert reason(_datagram(lay, tag=job_tag("other", 20000))) == "wrong_job"

    def with_fields(**kw) -> bytes:
        head = list(DATA_HEADER.unpack_from(good))
        names = ["magic", "version", "kind", "job", "rank", "flags", "reserved", "iter", "seq", "tensor", "count",
                 "offset", "srtt"]
        for k, v in kw.items():
            head[names.index(k)] = v
        return DATA_HEADER.pack(*head) + good[DATA_HEADER.size:]

    assert reason(with_fields(tensor=2)) == "bad_offset"          # no such tensor
    assert reason(with_fields(tensor=1)) == "bad_offset"          # offset 360 beyond tensor 1's 5 elements
    assert reason(with_fields(offset=1000)) == "bad_offset"       # past the end of tensor 0
    assert reason(with_fields(offset=0xFFFFFFFF)) == "bad_offset"
    assert reason(with_fields(offset=361)) == "bad_offset"        # not a chunk boundary: would overlap two
    assert reason(with_fields(offset=720)) == "bad_length"        # chunk 2 holds 280, this carries 360
    assert reason(with_fields(count=100)) == "bad_length"
    nan = np.arange(360, dtype=np.float32)
    nan[7] = np.nan
    assert reason(_datagram(lay, offset=360, values=nan)) == "non_finite"
    inf = np.full(360, np.inf, dtype=np.float32)
    assert reason(_datagram(lay, offset=360, values=inf)) == "non_finite"


def test_ack_round_trip_and_hostile_acks():
    lay = Layout([1000, 5])
    mask = np.array([True, False, True, False])                  # 4 chunks: 360, 360, 280, 5
    assert mask_of(bitmap_of(mask), 4).tolist() == mask.tolist()
    good = pack_ack(TAG, 2, FLAG_CLOSED, 9, 41, lay.chunks, bitmap_of(mask))
    ack = parse_ack(good, TAG, 2, lay)
    assert ack.closed and (ack.iter, ack.echo_seq) == (9, 41)
    assert mask_of(ack.bitmap, lay.chunks).tolist() == mask.tolist()

    def reason(datagram, rank=2) -> str:
        with pytest.raises(Rejected) as exc:
            parse_ack(datagram, TAG, rank, lay)
        return exc.value.reason

    assert reason(good[:10]) == "truncated"
    assert reason(good, rank=3) == "bad_rank"                     # someone else's acknowledgement
    assert reason(good + b"\0") == "bad_length"
    assert reason(good[:-1]) == "bad_length"
    assert reason(pack_ack(TAG, 2, 0, 9, 41, 5, bitmap_of(mask))) == "bad_length"   # another layout
    assert reason(pack_ack(TAG + 1, 2, 0, 9, 41, 4, bitmap_of(mask))) == "wrong_job"


def test_aimd_window_halves_once_per_window_of_losses():
    w = AimdWindow()
    assert w.cwnd == 4 and w.allowed() == 4
    w.on_ack(4)                      # slow start: +1 per acknowledged packet
    assert w.cwnd == 8
    assert w.on_loss(lost_seq=10, highest_sent_seq=20) is True
    assert w.cwnd == 4 and w.ssthresh == 4
    assert w.on_loss(lost_seq=15, highest_sent_seq=22) is False  # same window: no second halving
    assert w.on_loss(lost_seq=21, highest_sent_seq=30) is True   # sent after the reduction: a new event
    assert w.cwnd == 2 and w.ssthresh == 2
    w.on_ack(2)                      # congestion avoidance: +1/cwnd each
    assert w.cwnd == pytest.approx(2 + 1 / 2 + 1 / 2.5)
    w.on_timeout(40)
    assert w.cwnd == 1 and w.allowed() == 1 and w.timeouts == 1
    w.on_loss(5, 50)
    assert w.cwnd == 1               # never below one packet


def test_rtt_estimator_follows_rfc6298():
    r = RttEstimator()
    assert r.rto() == 0.05           # nothing measured yet
    r.update(0.010)
    assert (r.srtt, r.rttvar) == (0.010, 0.005) and r.rto() == pytest.approx(0.030)
    r.timed_out()
    assert r.rto() == pytest.approx(0.060)          # doubled until an acknowledgement comes
    r.update(0.002)
    assert r.srtt == pytest.approx(0.875 * 0.010 + 0.125 * 0.002)
    assert r.rttvar == pytest.approx(0.75 * 0.005 + 0.25 * 0.008)
    assert r.min_rtt == 0.002 and r.backoff == 0
    fast = RttEstimator()
    fast.update(0.0001)
    assert fast.rto() == MIN_RTO_S
    # A quiet tail after a full queue: the timer still waits 1.5 x the recent peak RTT.
    burst = RttEstimator()
    burst.update(0.020)
    for _ in range(20):
        burst.update(0.001)
    assert burst.srtt < 0.006 and burst.rto() == pytest.approx(1.5 * 0.020 * 0.998 ** 20)


def test_early_close_threshold_follows_the_measured_loss():
    ec = EarlyClose(deadline_s=0.5, theta_min=0.8)
    assert ec.theta == 1.0           # nothing lost yet: wait for every byte
    ec.learn(0.04)                   # loss estimate 0.01 -> theta 0.98
    assert ec.loss == pytest.approx(0.01) and ec.theta == pytest.approx(0.98)
    for _ in range(50):
        ec.learn(0.5)
    assert ec.theta == 0.8           # held at theta_min
    for _ in range(100):
        ec.learn(0.0)
    assert ec.theta > 0.999


def test_theta_is_held_against_the_whole_gradient_and_theta_min_against_each_worker():
    import numpy as np

    ec = EarlyClose(deadline_s=0.5, theta_min=0.8)
    for _ in range(20):
        ec.learn(0.06)                   # the estimate near 6 %: theta near 0.88
    assert 0.87 < ec.theta < 0.89
    # 16 workers of 7 chunks, 2 of them a chunk short: 110 of 112 (98 %), each worker 6/7 >= 0.8.
    chunks = np.full(16, 7)
    chunks[[3, 9]] = 6
    assert ec.past_theta(chunks, 7)
    # Against each worker's share this waited for both retransmissions (6/7 = 0.857 < theta).
    assert not (chunks >= ec.theta * 7).all()
    # A worker below theta_min holds the iteration however much the others delivered.
    chunks[5] = 5                        # 5/7 = 0.71
    assert not ec.past_theta(chunks, 7)
    # The iteration as a whole short of theta: 14 of 16 workers a chunk short (98 of 112, 0.875).
    assert not ec.past_theta(np.array([6] * 14 + [7] * 2), 7)
    # Lossless, theta 1: every chunk of every worker.
    assert EarlyClose(deadline_s=0.5).past_theta(np.full(4, 27), 27)
    assert not EarlyClose(deadline_s=0.5).past_theta(np.array([27, 27, 26, 27]), 27)


def test_early_close_decisions():
    ec = EarlyClose(deadline_s=0.5)
    assert ec.decide(True, 1.0, None, None, 1.0) == COMPLETE
    assert ec.decide(False, None, None, None, 99.0) is None       # nothing arrived yet: no clock runs
    assert ec.decide(False, 1.0, None, None, 1.49) is None
    assert ec.decide(False, 1.0, None, None, 1.5) == DEADLINE
    assert ec.decide(False, 1.0, 1.1, 0.05, 1.149) is None
    assert ec.decide(False, 1.0, 1.1, 0.05, 1.151) == THRESHOLD
    assert ec.next_check(1.0, 1.1, 0.05) == pytest.approx(1.15)
    assert ec.next_check(1.0, None, None) == 1.5
    # 90 of 100 kB in 90 ms: the last 10 kB at that pace take 10 ms; grace = 2 x 10 ms + 2 x srtt
    assert EarlyClose.grace_s(90_000, 100_000, 0.0, 0.09, 0.001) == pytest.approx(0.022)
    assert EarlyClose.grace_s(0, 100_000, 0.0, 0.09, 0.0) == 0.002


def test_bubble_filling_averages_over_the_workers_that_delivered():
    lay = Layout([3, 2], chunk=2)            # chunks: t0[0:2], t0[2:3], t1[0:2]
    grads = np.array([[1, 2, 3, 10, 20],
                      [5, 6, 7, 30, 40],
                      [9, 9, 9, 50, 60]], dtype=np.float32)
    mask = np.array([[True, True, True],
                     [False, True, False],
                     [True, False, False]])
    received = grads.copy()
    received[~lay.element_mask(mask)] = 1e6  # whatever is in the buffer where nothing arrived
    filled = bubble_fill(received, mask, lay)
    assert filled.average.tolist() == [5.0, 5.5, 5.0, 10.0, 20.0]
    assert filled.filled_elements == (2 + 2) + (1 + 2) and filled.zero_elements == 0  # worker 1's, worker 2's
    none = mask.copy()
    none[:, 2] = False                       # nobody delivered tensor 1
    filled = bubble_fill(received, none, lay)
    assert filled.average.tolist()[3:] == [0.0, 0.0] and filled.zero_elements == 2


def test_bubble_filling_with_everything_is_tcp_arithmetic_bit_for_bit():
    g = torch.Generator().manual_seed(3)
    rows = [torch.randn(1000, generator=g) for _ in range(7)]
    lay = Layout([1000])
    filled = bubble_fill(torch.stack(rows).numpy().copy(), np.ones((7, lay.chunks), dtype=bool), lay)
    assert torch.equal(filled.average, torch.stack(rows).mean(0))
    assert filled.filled_elements == 0


def test_last_and_pull_flags_round_trip():
    from pcnlab.workloads.ltp.wire import FLAG_LAST, FLAG_PULL, NO_ECHO

    lay = Layout([1000, 5])
    d = parse_data(bytes(pack_data(bytearray(MAX_DATAGRAM), TAG, 2, FLAG_LAST, 3, 17, 0, 360,
                                   np.zeros(360, dtype=np.float32), 0)), TAG, lay)
    assert d.last and not parse_data(_datagram(lay), TAG, lay).last
    ack = parse_ack(pack_ack(TAG, 2, FLAG_PULL, 9, NO_ECHO, lay.chunks, bitmap_of(np.ones(4, dtype=bool))), TAG, 2,
                    lay)
    assert ack.pull and not ack.closed and ack.echo_seq == NO_ECHO


def test_a_spurious_timeout_gives_the_window_back():
    w = AimdWindow(cwnd=8.0)
    w.on_timeout(10)
    w.on_timeout(12)                 # consecutive timeouts: the window before the first comes back
    assert w.cwnd == 1
    assert w.undo_timeout() is True and (w.cwnd, w.ssthresh, w.undone) == (8.0, float("inf"), 1)
    assert w.undo_timeout() is False
    w.on_timeout(20)
    w.settle()                       # the first answer was to a later transmission: the timeout stands
    assert w.undo_timeout() is False and w.cwnd == 1


def test_a_timeout_declares_lost_for_its_undo_only_what_waited_the_rto():
    """seq 0 waited an RTO, seq 5 only RACK's reordering window (sent before the newest acknowledged one)
    in the same pass: both are resent, but a late answer to 5 proves nothing of the timeout."""
    from collections import deque

    from pcnlab.workloads.ltp.sender import LtpSender

    sender = object.__new__(LtpSender)          # its loss detection alone, no socket
    sender.rtt, sender.window, sender.seq = RttEstimator(), AimdWindow(cwnd=8.0), 10
    sender.rtt.update(0.010)
    now, rto, reorder = 100.0, sender.rtt.rto(), sender.rtt.reorder_window()
    outstanding = {0: (0, now - rto - 1e-3), 5: (1, now - 0.010 - reorder - 1e-4), 9: (2, now - 1e-4)}
    pending: deque = deque()
    declared = sender._detect_losses(outstanding, np.zeros(3, dtype=bool), pending, now, now - 5e-5, 0.010)
    assert declared == {0} and sorted(pending) == [0, 1] and list(outstanding) == [9]
    assert sender.window.timeouts == 1


def test_early_close_on_the_threshold_once_every_last_datagram_is_in():
    ec = EarlyClose(deadline_s=0.5)
    # every worker past theta at 1.1 s, a grace of 0.5 s: without the LAST datagrams it waits for the grace,
    assert ec.decide(False, 1.0, 1.1, 0.5, 1.11, 0.5) is None
    # with every worker's LAST in what is missing is lost: close now
    assert ec.decide(False, 1.0, 1.1, 0.5, 1.11, 0.5, all_in=True) == THRESHOLD
    assert ec.decide(False, 1.0, None, None, 1.11, 0.5, all_in=True) is None    # a worker short of theta
    assert ec.decide(False, 1.0, None, None, 1.2, 0.2) == DEADLINE              # the iteration's own deadline


def test_the_automatic_deadline_is_derived_from_the_ideal_exchange():
    from pcnlab.workloads.ltp.earlyclose import (AUTO_FACTOR, MIN_DEADLINE_S, UNMEASURED_DEADLINE_S,
                                                 hard_deadline_s)
    from pcnlab.workloads.ltp.earlyclose import LTP_DEADLINE_MS

    assert hard_deadline_s("auto") is None and hard_deadline_s(250) == 0.25 and hard_deadline_s(250.0) == 0.25
    ec = EarlyClose(deadline_s=None)
    assert ec.deadline_for(300_000, 0.01) == UNMEASURED_DEADLINE_S == LTP_DEADLINE_MS / 1e3
    ec.learn(0.0, 2.5e6)             # the port delivered 2.5 MB/s of gradient (20 Mbit/s)
    assert ec.deadline_for(300_000, 0.01) == pytest.approx(AUTO_FACTOR * 0.12 + 0.01)
    ec.learn(0.0, 5e6)               # averaged like the loss
    assert ec.rate == pytest.approx(0.75 * 2.5e6 + 0.25 * 5e6)
    assert EarlyClose(deadline_s=0.3).deadline_for(300_000, 0.01) == 0.3        # a number stays a number
    fast = EarlyClose(deadline_s=None, rate=1e12)
    assert fast.deadline_for(1000, 0.0) == MIN_DEADLINE_S


def test_the_port_rate_is_not_taken_from_bunched_arrivals():
    """What the automatic deadline divides by: 64 chunks 1 ms apart (1.44 MB/s of gradient), with 16 of
    them bunched within 16 µs (as a switch or the kernel sometimes hands them over): the rate stays the
    port's, where the fastest 16 read more than 10 times it."""
    from pcnlab.workloads.ltp.slot import Slot

    slot = Slot(1, Layout([360 * 64]))
    slot.reset(0)
    t = 0
    for i in range(64):
        t += 1_000 if 24 <= i < 40 else 1_000_000
        slot.arrived(t, 1440)
    assert slot.port_rate == pytest.approx(1.44e6, rel=0.01)
    fastest = max(16 * 1440 / ((sum(slot.gaps_ns[i:i + 16])) / 1e9) for i in range(len(slot.gaps_ns) - 16))
    assert fastest > 10 * slot.port_rate
