"""Engine.purge: taking unprocessed messages out of a queue (the console's purge and the
dead-letter inspector use it). Runs on every store."""

from __future__ import annotations

import pytest

from engine import Engine, Message
from engine.errors import InvalidArgument, NotFound


def test_purge_removes_every_waiting_message_and_counts_them_dropped(eng: Engine) -> None:
    eng.queue_create("held")
    for n in range(5):
        eng.publish("held", Message(body=str(n).encode()))
    assert eng.queue_fetch("held").depth == 5
    assert eng.purge("held") == []
    assert eng.queue_fetch("held").depth == 0
    assert eng.stats("held")["dropped"] == 5


def test_purge_of_chosen_seqs_keeps_the_others_in_order(eng: Engine) -> None:
    eng.queue_create("held")
    for n in range(5):
        eng.publish("held", Message(body=str(n).encode()))
    eng.purge("held", [2, 4])
    assert [m.body for m in eng.peek("held")] == [b"0", b"2", b"4"]


def test_purge_of_a_seq_not_waiting_changes_nothing(eng: Engine) -> None:
    eng.queue_create("held")
    eng.publish("held", Message(body=b"a"))
    with pytest.raises(NotFound, match="seq 7"):
        eng.purge("held", [1, 7])
    with pytest.raises(InvalidArgument):
        eng.purge("held", [0])
    assert eng.queue_fetch("held").depth == 1


def test_purging_a_moved_message_gives_credit_back_upstream(eng: Engine) -> None:
    eng.queue_create("in")
    eng.queue_create("out")  # no selectors: moved messages wait here
    mover = eng.selector_create("in").when_always().do_move("out").set_credit(1)
    mover.enable()
    eng.publish("in", Message(body=b"first"))
    eng.publish("in", Message(body=b"second"))
    assert eng.queue_fetch("in").depth == 1  # waits for credit
    eng.purge("out")
    # the first was settled (dropped downstream): its credit moved the second along
    assert [m.body for m in eng.peek("out")] == [b"second"]
    assert eng.queue_fetch("in").depth == 0
