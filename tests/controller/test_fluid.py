"""The port as a fluid (controller/fluid.py): a communication's time alone, and where each job's next
iteration starts when the round under way still collides."""

from __future__ import annotations

import pytest

from pcnlab.controller.fluid import Sender, alone_us, first_starts


def test_the_time_alone_counts_each_stretch_over_the_jobs_sending_then():
    assert alone_us((0, 400), []) == 400
    assert alone_us((0, 400), [(100, 300)]) == 100 + 200 / 2 + 100
    assert alone_us((0, 400), [(100, 300), (200, 600), (700, 800)]) == 100 + 100 / 2 + 100 / 3 + 100 / 2


def test_a_job_alone_starts_again_a_silence_after_its_communication():
    one = Sender("a", start_us=0, comm_us=300, period_us=1000, silence_us=700)
    assert first_starts([one], at_us=100) == {"a": 1000}
    # its communication ended (300) before the moment: the start at 1,000 is decided; the next one is not
    assert first_starts([one], at_us=400) == {"a": 2000}


def test_jobs_that_collide_share_the_port_and_start_later():
    # a sends 0-300 alone for 100, then shares with b: 200 of a's work left at half the port ends at 500;
    # b has 100 left alone, ends at 600. Each starts again its silence later.
    a = Sender("a", 0, 300, 1000, silence_us=700)
    b = Sender("b", 100, 300, 1000, silence_us=700)
    assert first_starts([a, b], at_us=50) == {"a": pytest.approx(1200), "b": pytest.approx(1300)}


def test_a_start_decided_before_the_moment_is_played_out():
    # a ends at 300, before the moment (350): its start at 500 is decided and played out. b sends alone
    # 400-500 (100 of 300), then both at half the port: b's 200 left end at 900, a's last 100 go alone
    # to 1,000. The first starts decided from 350 on: a's after 1,000, b's after 900.
    a = Sender("a", 0, 300, 500, silence_us=200)
    b = Sender("b", 400, 300, 1000, silence_us=700)
    starts = first_starts([a, b], at_us=350)
    assert starts == {"a": pytest.approx(1200), "b": pytest.approx(1600)}


def test_a_clocked_job_keeps_its_tick_unless_it_still_sends():
    clocked = Sender("c", 0, 300, 800)
    assert first_starts([clocked], at_us=10) == {"c": 800}
    other = Sender("d", 0, 900, 2000, silence_us=100)
    # both share from 0: c's 300 take 600; d's 900 end at 1,200; c decided its tick at 600 (after the
    # moment): 800
    assert first_starts([clocked, other], at_us=10) == {"c": 800, "d": pytest.approx(1300)}
    slow = Sender("c", 0, 500, 800)
    assert first_starts([slow, Sender("e", 0, 500, 800, silence_us=10)], at_us=10)["c"] == 1000


def test_communications_that_are_over_hold_their_share_while_they_lasted():
    # a finished communication of another job covered 0-200: a's 300 go at half the port until 200
    a = Sender("a", 0, 300, 1000, silence_us=700)
    assert first_starts([a], at_us=10, known=[(0, 200), (-500, -100)]) == {"a": pytest.approx(400 + 700)}
