"""When the PS acknowledges (workloads/ltp/acks.py): the pacer's decisions, and the receiver's over this
machine's loopback (real UDP sockets, no root)."""

from __future__ import annotations

import time

import numpy as np

from pcnlab.workloads.ltp.acks import ACK_DELAY_S, Ack, AckPacer
from pcnlab.workloads.ltp.wire import MAX_DATAGRAM, pack_data
from test_ltp_loopback import PS, _ack_of, _answer_to, _serving

W = ("10.0.0.2", 5000)


def test_every_second_datagram_is_acknowledged_and_the_first_waits():
    pacer = AckPacer()
    assert pacer.placed(Ack(W, 1, 0, 10), 1_000) == [] and pacer.next_s() == (1_000 + ACK_DELAY_S * 1e9) / 1e9
    assert pacer.placed(Ack(W, 1, 0, 11), 2_000) == [Ack(W, 1, 0, 11)]   # one for both: the newest echoed
    assert pacer.next_s() is None and pacer.due(10**12) == []


def test_last_pull_or_duplicate_goes_at_once_and_answers_for_the_one_held():
    pacer = AckPacer()
    pacer.placed(Ack(W, 1, 0, 10), 1_000)
    assert pacer.placed(Ack(W, 1, 0, 11), 1_500, at_once=True) == [Ack(W, 1, 0, 11)]
    assert pacer.placed(Ack(W, 2, 0, 3), 1_600, at_once=True) == [Ack(W, 2, 0, 3)]   # nothing held: at once
    assert pacer.next_s() is None


def test_a_held_acknowledgement_goes_before_one_of_the_workers_other_iteration():
    pacer = AckPacer()
    pacer.placed(Ack(W, 1, 0, 10), 1_000)
    assert pacer.placed(Ack(W, 1, 1, 11), 1_200) == [Ack(W, 1, 0, 10)]   # iteration 0's, sent; 1's held
    assert pacer.due(1_200 + int(ACK_DELAY_S * 1e9)) == [Ack(W, 1, 1, 11)]


def test_a_lone_datagram_is_acknowledged_after_the_delay_per_worker():
    pacer = AckPacer()
    pacer.placed(Ack(W, 1, 0, 10), 1_000)
    pacer.placed(Ack(W, 2, 0, 20), 5_000)
    delay = int(ACK_DELAY_S * 1e9)
    assert pacer.due(1_000 + delay - 1) == []
    assert pacer.due(1_000 + delay) == [Ack(W, 1, 0, 10)]
    assert pacer.due(5_000 + delay) == [Ack(W, 2, 0, 20)] and pacer.next_s() is None


def test_the_ps_acknowledges_every_second_chunk_and_a_lone_one_after_a_millisecond():
    """Four chunks back to back: two acknowledgements, each echoing the second of its pair with the
    bitmap of both; a fifth alone is acknowledged on the PS's timer; LAST at once (acks.ACK_EVERY,
    ACK_DELAY_S). Each acknowledgement is a packet the switch forwards: LTP's sent one per datagram."""
    from pcnlab.workloads.ltp.wire import FLAG_LAST, mask_of

    def send(seq, c, flags=0):
        w1.sendto(bytes(pack_data(bytearray(MAX_DATAGRAM), tag, 1, flags, 0, seq, 0, 360 * c,
                                  np.full(360, c, dtype=np.float32), 1000)), (PS, port))

    with _serving(6) as (lay, tag, port, server, w1):
        with server.cond:   # the receiver reads none of the four before all are in its socket buffer: the
            for c in range(4):   # test's own sends can be further apart than ACK_DELAY_S on a busy machine
                send(c, c)       # (CI, 2026-11-29: a lone ack of chunk 2 on the timer, [1, 2])
        acks = [_ack_of(w1.recv(MAX_DATAGRAM), tag, 1, lay) for _ in range(2)]
        assert [a.echo_seq for a in acks] == [1, 3]
        assert [int(mask_of(a.bitmap, lay.chunks).sum()) for a in acks] == [2, 4]
        sent = time.monotonic()
        send(4, 4)
        lone = _ack_of(w1.recv(MAX_DATAGRAM), tag, 1, lay)
        assert lone.echo_seq == 4 and not lone.pull and time.monotonic() - sent >= 0.0009
        send(5, 5, FLAG_LAST)
        last = _answer_to(5, w1, tag, lay)                  # past a pull a busy machine's test can earn
        assert last.echo_seq == 5 and mask_of(last.bitmap, lay.chunks).all()
        assert server.wait(0, 2).reason == "complete"
