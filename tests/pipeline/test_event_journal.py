"""The engine's event journal, through the public API: which events come out, in order."""

from __future__ import annotations

import time

import pytest

from engine import Engine, Message
from engine.errors import InvalidArgument, NotFound, QueueFull
from engine.event_journal import EVENT_FIELDS, JournalEvent
from engine.patterns import parrot, wolfpack


def events(eng: Engine) -> list[tuple]:
    """(kind, queue, selector, target, detail) of each drained event, in order."""
    return [(e[1], e[3], e[4], e[5], e[6]) for e in eng.journal.drain()]


def test_an_engine_keeps_no_journal_unless_asked():
    eng = Engine()
    assert eng.journal is None
    eng.queue_create("q")
    eng.publish("q", Message(body=b"x"))  # nothing to record into, nothing breaks


def test_wolfpack_records_publish_move_deliver_confirm_in_order():
    eng = Engine(journal=True)
    wolfpack(eng, "jobs", "w1")
    before = time.time()
    [delivery] = eng.publish("jobs", Message(address="job.1", body=b"x"))
    eng.confirm(delivery)
    batch = eng.journal.drain()
    assert [(e[1], e[3], e[4], e[5], e[6]) for e in batch] == [
        ("publish", "jobs", None, None, "1"),  # a publish's detail: the seq it gets
        ("route", "jobs", 1, "jobs:w1", "move"),
        ("deliver", "jobs:w1", 1, "w1", None),
        ("confirm", "jobs:w1", 1, "w1", None),
    ]
    mids = {e[2] for e in batch}
    assert mids == {delivery.message.mid}
    publish = JournalEvent._make(batch.events[0])
    assert publish.address == "job.1"
    assert publish.time == delivery.message.timestamp
    assert all(before <= e[0] <= time.time() for e in batch)
    assert len(EVENT_FIELDS) == len(batch.events[0]) == len(JournalEvent._fields)


def test_parrot_records_one_route_per_copy_and_delivery_per_subscriber():
    eng = Engine(journal=True)
    parrot(eng, "alice", "stock.#")
    parrot(eng, "bob", "stock.*.price")
    deliveries = eng.publish("parrot", Message(address="stock.ibm.price"))
    eng.publish("parrot", Message(address="weather"))  # nobody matches
    kinds = events(eng)
    assert kinds[0] == ("publish", "parrot", None, None, "1")
    routes = [k for k in kinds if k[0] == "route"]
    assert sorted(k[3] for k in routes) == ["parrot:alice", "parrot:bob"]
    assert {k[4] for k in routes} == {"copy"}
    assert sorted(k[3] for k in kinds if k[0] == "deliver") == ["alice", "bob"]
    # the unmatched one: no DEFAULT, no dead-letter queue: dropped as unroutable
    assert kinds[-2:] == [
        ("publish", "parrot", None, None, "2"),
        ("drop", "parrot", None, None, "unroutable"),
    ]
    assert len(deliveries) == 2


def test_dead_letters_say_where_and_why():
    eng = Engine(journal=True)
    eng.queue_create("dlq")
    eng.queue_create("q", dead_letter="dlq", limit=1)
    eng.selector_create("q").when_match("eq", "a").do_deliver("app").enable()
    [first] = eng.publish("q", Message(address="a"))
    eng.publish("q", Message(address="b"))  # unroutable
    eng.publish("q", Message(address="a"))  # waits: the selector has credit, it is delivered
    eng.reject(first, requeue=False)
    assert events(eng) == [
        ("publish", "q", None, None, "1"),
        ("deliver", "q", 1, "app", None),
        ("publish", "q", None, None, "2"),
        ("dead_letter", "q", None, "dlq", "unroutable"),
        ("publish", "q", None, None, "3"),
        ("deliver", "q", 1, "app", None),
        ("reject", "q", 1, "app", None),
        ("dead_letter", "q", None, "dlq", "rejected"),
    ]


def test_reject_with_requeue_then_redelivery_is_flagged():
    eng = Engine(journal=True)
    eng.queue_create("q")
    eng.selector_create("q").when_always().do_deliver("app").enable()
    [delivery] = eng.publish("q", Message())
    [again] = eng.reject(delivery, requeue=True)
    eng.confirm(again)
    assert events(eng) == [
        ("publish", "q", None, None, "1"),
        ("deliver", "q", 1, "app", None),
        ("reject", "q", 1, "app", "requeue"),
        ("deliver", "q", 1, "app", "redelivered"),
        ("confirm", "q", 1, "app", None),
    ]


def test_expired_deliveries_and_delete_selectors_are_recorded():
    eng = Engine(journal=True)
    eng.queue_create("q")
    eng.queue_create("bin")
    eng.selector_create("bin").when_always().do_delete().enable()
    eng.selector_create("q").when_always().do_deliver("app").enable()
    eng.publish("q", Message())
    eng.publish("bin", Message())
    eng.journal.drain()
    eng.expire(0)
    assert events(eng) == [
        ("expire", "q", 1, "app", None),
        ("deliver", "q", 1, "app", "redelivered"),
    ]
    eng.publish("bin", Message())
    assert events(eng) == [("publish", "bin", None, None, "2"), ("delete", "bin", 1, None, None)]


def test_a_publish_to_a_missing_queue_is_a_dead_letter_event():
    eng = Engine(dead_letter="$dead", journal=True)
    eng.publish("nowhere", Message(address="x"))
    eng.publish_many("nowhere", [Message(address="y")])
    assert events(eng) == [
        ("dead_letter", "nowhere", None, "$dead", "no-such-queue"),
        ("dead_letter", "nowhere", None, "$dead", "no-such-queue"),
    ]


def test_a_queue_can_be_left_out_of_the_journal_and_put_back():
    eng = Engine(journal=True)
    eng.queue_create("quiet", journal=False)
    eng.queue_create("loud")
    eng.selector_create("quiet").when_always().do_copy("loud").enable()
    assert eng.queue_fetch("quiet").journal is False
    eng.publish("quiet", Message())
    assert events(eng) == []  # "loud" received it by a copy: that is quiet's route event
    eng.publish("loud", Message())
    assert events(eng) == [("publish", "loud", None, None, "2")]
    eng.queue_update("quiet", journal=True)
    eng.publish("quiet", Message())
    assert [k[0] for k in events(eng)] == ["publish", "route"]
    # the same settings again are idempotent; another journal setting is a conflict
    assert eng.queue_create("loud").journal is True
    with pytest.raises(InvalidArgument):
        eng.queue_create("other", journal="yes")


def test_publish_many_records_each_message_in_order():
    eng = Engine(journal=True)
    eng.queue_create("q")
    eng.selector_create("q").when_always().do_delete().enable()
    eng.publish_many("q", [Message(address=str(n)) for n in range(3)])
    batch = eng.journal.drain()
    assert [(e[1], e[7]) for e in batch] == [
        ("publish", "0"),
        ("delete", None),
        ("publish", "1"),
        ("delete", None),
        ("publish", "2"),
        ("delete", None),
    ]


def test_a_failed_call_leaves_no_events():
    eng = Engine(journal=True)
    eng.queue_create("full", limit=0)
    with pytest.raises(QueueFull):
        eng.publish("full", Message())
    assert len(eng.journal) == 0


def test_capacity_drops_the_oldest_and_counts_them_and_positions_stay_true():
    eng = Engine(journal=3)
    eng.queue_create("q")  # no selectors: messages are held, one publish event each
    for n in range(5):
        eng.publish("q", Message(address=str(n)))
    batch = eng.journal.drain()
    assert [e[7] for e in batch] == ["2", "3", "4"]
    assert (batch.first, batch.last, batch.dropped) == (3, 5, 2)
    assert eng.journal.dropped == 2
    eng.publish("q", Message(address="5"))
    eng.publish("q", Message(address="6"))
    first = eng.journal.drain(limit=1)
    rest = eng.journal.drain()
    assert (first.first, [e[7] for e in first], first.dropped) == (6, ["5"], 0)
    assert (rest.first, [e[7] for e in rest]) == (7, ["6"])
    assert rest.epoch == batch.epoch
    assert eng.journal.position == 8


def test_journal_capacity_must_be_a_positive_count():
    with pytest.raises(InvalidArgument):
        Engine(journal=0)
    with pytest.raises(InvalidArgument):
        Engine(journal="big")


def test_a_publish_records_the_seq_it_gets_unless_it_gets_none():
    eng = Engine(journal=True)
    eng.queue_create("dlq")
    eng.queue_create("full", limit=1, dead_letter="dlq")
    eng.queue_create("later")
    eng.publish("full", Message())  # no selectors: it waits and fills the queue
    eng.publish("full", Message())  # full: dead-lettered, no seq in "full"
    eng.publish("later", Message(delay=60))  # gets its seq when due
    eng.publish_many("later", [Message(), Message()])
    published = [(e[1], e[6]) for e in eng.journal.drain() if e[1] == "publish"]
    assert [detail for _, detail in published] == ["1", None, None, "1", "2"]


def test_a_publish_event_comes_before_what_routes_it_and_overflow_gets_no_seq():
    # the publish event is recorded where the seq is given (Rules._arrive), before the
    # message is routed: also when a full queue's overflow selector takes it at once
    eng = Engine(journal=True)
    eng.queue_create("spill")
    eng.queue_create("small", limit=1)
    eng.selector_create("small").when_overflow().do_move("spill").enable()
    eng.publish_many("small", [Message(address="a"), Message(address="b")])
    eng.publish("small", Message(address="c"))
    got = [(e[1], e[3], e[6], e[7]) for e in eng.journal.drain()]
    assert got == [
        ("publish", "small", "1", "a"),  # waits: no routing selector
        ("publish", "small", None, "b"),  # full: the overflow selector moves it
        ("route", "small", "move", None),
        ("publish", "small", None, "c"),
        ("route", "small", "move", None),
    ]


def test_readers_see_the_capacity_bound_as_soon_as_a_call_ends():
    # the engine trims what a call left beyond `capacity` at the start of the next call; a
    # reader in between trims first, so it sees what it did when the call trimmed at its end
    eng = Engine(journal=2)
    eng.queue_create("q")
    eng.publish("q", Message())
    first = eng.journal.peek().events[0][2]  # its mid
    eng.publish_many("q", [Message(), Message()])
    assert eng.journal.dropped == 1
    assert len(eng.journal) == 2
    with pytest.raises(NotFound):
        eng.trace(first)
    batch = eng.journal.peek()
    assert (batch.first, len(batch), batch.dropped) == (2, 2, 1)


def test_a_batch_gives_its_events_as_columns_too():
    # the archive writes a drained batch column by column (its fields as the journal kept
    # them), the same values as transposing its events
    eng = Engine(journal=True)
    wolfpack(eng, "jobs", "w1")
    waiting = eng.publish_many("jobs", [Message(address="a"), Message(address="b")])
    while waiting:
        waiting = eng.confirm(waiting[0])  # credit 1: the second is delivered then
    batch = eng.journal.drain()
    assert len(batch) == 8 and batch.last == batch.first + 7
    assert batch.columns() == [list(column) for column in zip(*batch.events, strict=True)]
    assert [len(column) for column in eng.journal.drain().columns()] == [0] * len(EVENT_FIELDS)


def test_a_journal_nobody_drains_keeps_the_newest_in_order():
    # every call past the bound drops the oldest; the journal gives their room back now and
    # then, never losing or reordering what it keeps
    eng = Engine(journal=5)
    eng.queue_create("q")
    for n in range(1000):
        eng.publish("q", Message(address=str(n)))
        if n == 500:
            assert len(eng.journal) == 5 and eng.journal.dropped == 496
    batch = eng.journal.drain()
    assert [e[7] for e in batch] == ["995", "996", "997", "998", "999"]
    assert (batch.first, batch.dropped, eng.journal.position) == (996, 995, 1001)


def test_a_writer_peeks_then_forgets_what_it_wrote():
    # the service's router: peek, write the events elsewhere, then forget exactly those
    eng = Engine(journal=True)
    eng.queue_create("q")
    eng.publish_many("q", [Message(address="a"), Message(address="b")])
    seen = eng.journal.peek()
    eng.publish("q", Message(address="c"))  # recorded after the peek: not forgotten
    eng.journal.forget(len(seen))
    assert [e[7] for e in seen] == ["a", "b"] and eng.journal.position == 3
    rest = eng.journal.drain()
    assert (rest.first, [e[7] for e in rest]) == (3, ["c"])


def test_a_selector_given_a_new_target_records_the_new_one():
    eng = Engine(journal=True)
    for name in ("q", "first", "second"):
        eng.queue_create(name)
    selector = eng.selector_create("q")
    selector.when_always().do_move("first").enable()
    eng.publish("q", Message(body=b"1"))
    selector.do_move("second")
    eng.publish("q", Message(body=b"2"))
    selector.do_deliver("app")
    [delivery] = eng.publish("q", Message(body=b"3"))
    eng.confirm(delivery)
    routed = [e[1:2] + e[3:7] for e in eng.journal.drain() if e[3] == "q" and e[1] != "publish"]
    assert routed == [
        ("route", "q", selector.id, "first", "move"),
        ("route", "q", selector.id, "second", "move"),
        ("deliver", "q", selector.id, "app", None),
        ("confirm", "q", selector.id, "app", None),
    ]
