"""The PS pulls a worker (workloads/ltp/receiver.py, sender.py) over this machine's loopback (real UDP
sockets, no root): what a worker lacks once its LAST is in, a worker silent before it, and the sender
resending at once when pulled, not at its timers."""

from __future__ import annotations

import time

import numpy as np

from pcnlab.workloads.ltp.wire import MAX_DATAGRAM, pack_data
from test_ltp_loopback import PS, W1, _ack_of, _answer_to, _port_of, _sending, _serving


def test_the_ps_pulls_what_a_worker_lacks_once_its_last_datagram_is_in():
    """A worker (raw socket) sends every chunk but one, the last flagged LAST: the PS's answer to it is a
    PULL naming the missing chunk, answers before it are plain; silent afterwards, the worker is pulled
    again on the PS's own timer (NO_ECHO); the missing chunk completes the iteration."""
    from pcnlab.workloads.ltp.wire import FLAG_LAST, NO_ECHO, mask_of

    with _serving(6) as (lay, tag, port, server, w1):
        order = [0, 1, 3, 4, 5]                       # chunk 2 is "lost"
        answers = []
        for seq, c in enumerate(order):
            flags = FLAG_LAST if c == order[-1] else 0
            w1.sendto(bytes(pack_data(bytearray(MAX_DATAGRAM), tag, 1, flags, 0, seq, 0, 360 * c,
                                      np.full(360, c, dtype=np.float32), 1000)), (PS, port))
            answers.append(_answer_to(seq, w1, tag, lay))
        assert [a.pull for a in answers] == [False] * 4 + [True]
        pull = answers[-1]
        assert pull.echo_seq == 4 and mask_of(pull.bitmap, lay.chunks).tolist() == [True, True, False, True, True, True]
        again = _ack_of(w1.recv(MAX_DATAGRAM), tag, 1, lay)     # silent: pulled again (srtt 1 ms: after 5 ms)
        assert again.pull and again.echo_seq == NO_ECHO and not again.closed
        w1.sendto(bytes(pack_data(bytearray(MAX_DATAGRAM), tag, 1, FLAG_LAST, 0, 5, 0, 720,
                                  np.full(360, 2, dtype=np.float32), 1000)), (PS, port))
        closed = server.wait(0, 2)
        assert closed.reason == "complete" and closed.stats["ltp_pulls"] >= 2
        assert closed.grad[0].tolist() == np.repeat(np.arange(6, dtype=np.float32), 360).tolist()


def test_a_pulled_sender_resends_at_once_not_at_its_timers():
    """The PS (raw socket) gets all 6 chunks but one and answers the last with a PULL: the sender resends
    the missing chunk at once, although its timers (an RTT of 2 s measured before: RACK's reordering
    window alone is 0.4 s) would wait far longer."""
    from pcnlab.workloads.ltp.wire import FLAG_PULL, bitmap_of, pack_ack, parse_data

    with _sending(6, 2.0, 8.0) as (ps, tag, lay, sender, thread, out):
        got = [parse_data(ps.recvfrom(MAX_DATAGRAM)[0], tag, lay) for _ in range(lay.chunks)]
        assert [d.last for d in got] == [False] * 5 + [True]
        lost = got[1].chunk
        mask = np.ones(lay.chunks, dtype=bool)
        mask[lost] = False
        pulled_at = time.monotonic()
        ps.sendto(pack_ack(tag, 1, FLAG_PULL, 0, got[-1].seq, lay.chunks, bitmap_of(mask)), (W1, _port_of(sender)))
        again, _ = ps.recvfrom(MAX_DATAGRAM)
        resent_after = time.monotonic() - pulled_at
        again = parse_data(again, tag, lay)
        assert again.chunk == lost and again.last and resent_after < 0.1, resent_after
        ps.sendto(pack_ack(tag, 1, 0, 0, again.seq, lay.chunks, bitmap_of(np.ones(lay.chunks, dtype=bool))),
                  (W1, _port_of(sender)))
        thread.join(5)
        assert out["r"].outcome == "complete" and out["r"].pulled == 1 and out["r"].retransmissions == 1


def test_a_silent_worker_is_pulled_before_its_last_datagram_and_resends_before_its_timer():
    """The tail of a worker's window is lost before its LAST: the PS, hearing nothing from it for two of
    its RTTs, pulls it (NO_ECHO); the sender (RTT 0.5 s measured before: a timer of 1.5 s) takes every
    missing chunk sent at least its minimum RTT ago as lost and resends them first, at once."""
    from pcnlab.workloads.ltp.wire import FLAG_PULL, NO_ECHO, bitmap_of, pack_ack, parse_data

    with _serving(6) as (lay, tag, port, server, w1):   # the PS's side: two chunks, then silence
        for seq in range(2):
            started = time.monotonic()   # the PS hears the last of them after this
            w1.sendto(bytes(pack_data(bytearray(MAX_DATAGRAM), tag, 1, 0, 0, seq, 0, 360 * seq,
                                      np.zeros(360, dtype=np.float32), 2000)), (PS, port))
            assert not _answer_to(seq, w1, tag, lay).pull
        pull = _ack_of(w1.recv(MAX_DATAGRAM), tag, 1, lay)
        assert pull.pull and pull.echo_seq == NO_ECHO and 0.003 < time.monotonic() - started < 5.0   # the deadline

    with _sending(6, 0.5, 4.0) as (ps, tag, lay, sender, thread, out):   # the sender's side
        first = [parse_data(ps.recvfrom(MAX_DATAGRAM)[0], tag, lay) for _ in range(4)]
        mask = np.zeros(lay.chunks, dtype=bool)
        mask[first[0].chunk] = True                      # the last three of the window "lost"
        ps.sendto(pack_ack(tag, 1, 0, 0, first[0].seq, lay.chunks, bitmap_of(mask)), (W1, _port_of(sender)))
        time.sleep(0.55)                                 # the window moved on meanwhile (read below)
        ps.sendto(pack_ack(tag, 1, FLAG_PULL, 0, NO_ECHO, lay.chunks, bitmap_of(mask)), (W1, _port_of(sender)))
        resent, until = set(), time.monotonic() + 0.1
        while time.monotonic() < until:
            ps.settimeout(max(0.001, until - time.monotonic()))
            try:
                d = parse_data(ps.recvfrom(MAX_DATAGRAM)[0], tag, lay)
            except TimeoutError:
                continue
            if d.flags & 0x01:                           # a retransmission
                resent.add(d.chunk)
        # at once, first the window's lost tail, as many as the halved window lets out (no answer comes)
        assert resent and resent <= {d.chunk for d in first[1:]}, resent
        ps.sendto(pack_ack(tag, 1, 0x01, 0, NO_ECHO, lay.chunks, bitmap_of(mask)), (W1, _port_of(sender)))
        thread.join(5)
        assert out["r"].outcome == "closed" and out["r"].pulled >= 3
