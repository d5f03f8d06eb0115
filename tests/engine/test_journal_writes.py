"""What the journal records of a message's path, pinned on every store: the records, their
order, their times (a fake clock) and positions, as drained, as fields and columns, archived
and traced (engine/event_journal.py). A change that records fewer writes a message (a
path's records written together, say) must leave all of this as it is."""

from __future__ import annotations

import itertools

import pytest

import engine.messaging
import engine.rules
from engine import Engine, Message
from engine.archive import Archive
from engine.event_journal import EVENT_FIELDS, widened
from engine.patterns import wolfpack


@pytest.fixture
def jeng(store_kind, engine_on) -> Engine:
    return engine_on(store_kind, journal=True)


class Clock:
    """The engine's clocks made predictable once `start`ed: a publish stamps its message
    with the next `wall` reading (1000.0, 1001.0, ...); every other reading (the time a
    call starts, a delivery's, an expiry test) is the next of 2000.0, 2001.0, ..."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch

    def start(self) -> None:
        walls, nows = itertools.count(1000.0), itertools.count(2000.0)
        self.monkeypatch.setattr(engine.messaging, "_wall", lambda: next(walls))
        self.monkeypatch.setattr(engine.rules, "_now", lambda: next(nows))


@pytest.fixture
def clock(monkeypatch) -> Clock:
    return Clock(monkeypatch)


def events(eng: Engine) -> list[tuple]:
    """(time, kind, message, queue, target, detail) of each waiting event, oldest first;
    the message as "m0", "m1", ... in the order the journal first names their mids."""
    names: dict[str, str] = {}
    return [
        (e[0], e[1], names.setdefault(e[2], f"m{len(names)}"), e[3], e[5], e[6])
        for e in eng.journal.peek()
    ]


def test_a_wolfpack_message_has_its_four_records_at_their_own_times(
    jeng: Engine, clock: Clock, tmp_path
) -> None:
    wolfpack(jeng, "jobs", "w1")
    clock.start()
    [delivery] = jeng.publish("jobs", Message(address="job.1"))  # walls 1000; nows 2000, 2001
    jeng.confirm(delivery)  # nows 2002
    mid, tag = delivery.message.mid, delivery.tag
    batch = jeng.journal.drain()
    assert batch.events == [
        (1000.0, "publish", mid, "jobs", None, None, "1", "job.1", None),  # its stamp
        (2000.0, "route", mid, "jobs", 1, "jobs:w1", "move", None, None),  # the call's time
        (2001.0, "deliver", mid, "jobs:w1", 1, "w1", None, None, tag),  # when it was taken
        (2002.0, "confirm", mid, "jobs:w1", 1, "w1", None, None, tag),
    ]
    assert delivery.message.timestamp == 1000.0
    assert (batch.first, batch.last, len(batch), batch.dropped) == (1, 4, 4, 0)
    # every reader makes the same events of them
    assert [widened(record) for record in batch.records()] == batch.events
    fields, width = batch.fields()
    assert len(fields) == 4 * width
    assert batch.columns() == [list(column) for column in zip(*batch.events, strict=True)]
    archive = Archive(tmp_path)
    assert archive.write_events(batch) == 4
    assert [(position, event) for _, position, event in archive.events_of(mid)] == list(
        enumerate(batch.events, start=1)
    )


def test_the_trace_reads_a_path_written_at_once_step_by_step(jeng: Engine, clock: Clock) -> None:
    wolfpack(jeng, "jobs", "w1")
    clock.start()
    [delivery] = jeng.publish("jobs", Message(address="job.1"))
    steps = jeng.trace(delivery.message.mid)
    assert [(s["time"], s["kind"], s["seq"] if s["kind"] == "publish" else s["tag"]) for s in
            steps] == [(1000.0, "publish", 1), (2000.0, "route", None),
                       (2001.0, "deliver", delivery.tag)]  # fmt: skip


def test_a_publish_taken_in_its_own_queue_keeps_its_records(jeng: Engine, clock: Clock) -> None:
    jeng.queue_create("inbox")
    jeng.selector_create("inbox").when_always().do_deliver("app").enable()
    jeng.queue_create("bin")
    jeng.selector_create("bin").when_always().do_delete().enable()
    clock.start()
    [delivery] = jeng.publish("inbox", Message(address="a"))  # walls 1000; nows 2000, 2001
    assert jeng.publish("bin", Message(address="b")) == []  # walls 1001; nows 2002
    mid = delivery.message.mid
    deleted = jeng.journal.peek().events[2][2]
    assert jeng.journal.drain().events == [
        (1000.0, "publish", mid, "inbox", None, None, "1", "a", None),
        (2001.0, "deliver", mid, "inbox", 1, "app", None, None, delivery.tag),
        (1001.0, "publish", deleted, "bin", None, None, "1", "b", None),
        (2002.0, "delete", deleted, "bin", 1, None, None, None, None),
    ]


def test_a_waiting_message_routed_by_a_confirm_is_recorded_after_it(
    jeng: Engine, clock: Clock
) -> None:
    wolfpack(jeng, "jobs", "w1", credit=1)
    clock.start()
    [first] = jeng.publish("jobs", Message(address="1"))  # walls 1000; nows 2000, 2001
    assert jeng.publish("jobs", Message(address="2")) == []  # no credit: walls 1001; 2002
    [second] = jeng.confirm(first)  # nows 2003 (the call), 2004 (the delivery)
    assert events(jeng) == [
        (1000.0, "publish", "m0", "jobs", None, "1"),
        (2000.0, "route", "m0", "jobs", "jobs:w1", "move"),
        (2001.0, "deliver", "m0", "jobs:w1", "w1", None),
        (1001.0, "publish", "m1", "jobs", None, "2"),  # it waits in jobs
        (2003.0, "confirm", "m0", "jobs:w1", "w1", None),
        (2003.0, "route", "m1", "jobs", "jobs:w1", "move"),
        (2004.0, "deliver", "m1", "jobs:w1", "w1", None),
    ]
    assert [e[2] for e in jeng.journal.peek()][-2:] == [second.message.mid] * 2


def test_copies_record_before_the_taker(jeng: Engine, clock: Clock) -> None:
    for name, reader in (("audit", "auditor"), ("work", "worker")):
        jeng.queue_create(name)
        jeng.selector_create(name).when_always().do_deliver(reader).enable()
    jeng.queue_create("quiet", journal=False)  # records nothing: its copy is recorded at once
    jeng.queue_create("in")
    jeng.selector_create("in").when_always().do_copy("quiet").enable()
    jeng.selector_create("in").when_always().do_copy("audit").enable()
    jeng.selector_create("in").when_always().do_move("work").enable()
    clock.start()
    assert len(jeng.publish("in", Message(address="x"))) == 2
    assert events(jeng) == [
        (1000.0, "publish", "m0", "in", None, "1"),
        (2000.0, "route", "m0", "in", "quiet", "copy"),
        (2000.0, "route", "m0", "in", "audit", "copy"),
        (2001.0, "deliver", "m0", "audit", "auditor", None),
        (2000.0, "route", "m0", "in", "work", "move"),
        (2002.0, "deliver", "m0", "work", "worker", None),
    ]


def test_a_path_that_stops_or_turns_keeps_its_records_in_order(jeng: Engine, clock: Clock) -> None:
    jeng.queue_create("dlq")  # no selectors: what arrives waits
    jeng.queue_create("hold")  # no selectors either
    jeng.queue_create("small", limit=1, dead_letter="dlq")
    jeng.queue_create("quiet", journal=False)
    jeng.selector_create("quiet").when_always().do_deliver("app").enable()
    for name, target in (("to_hold", "hold"), ("to_small", "small"), ("to_quiet", "quiet")):
        jeng.queue_create(name, dead_letter="dlq")
        jeng.selector_create(name).when_always().do_move(target).enable()
    jeng.queue_create("short", dead_letter="dlq")
    jeng.selector_create("short").when_always().do_delete().enable()
    jeng.publish("small", Message(address="filler"))  # small is full from now on
    jeng.journal.drain()
    jeng.queue_create("x", dead_letter="dlq")  # x and y move to each other: a cycle
    jeng.queue_create("y", dead_letter="dlq")
    jeng.selector_create("x").when_always().do_move("y").enable()
    jeng.selector_create("y").when_always().do_move("x").enable()
    clock.start()
    jeng.publish("to_hold", Message(address="h"))  # walls 1000; nows 2000
    jeng.publish("to_hold", Message(address="h2"))  # walls 1001; nows 2001: it queues in hold
    jeng.publish("to_small", Message(address="s"))  # walls 1002; nows 2002
    jeng.publish("to_quiet", Message(address="q"))  # walls 1003; nows 2003, 2004 (delivered)
    jeng.publish("short", Message(address="e", ttl=5.0))  # expired at once: its 1004 + 5
    jeng.publish("x", Message(address="c"))  # walls 1005; nows 2007
    assert events(jeng) == [  # (2005 the call; 2006 the expiry test)
        (1000.0, "publish", "m0", "to_hold", None, "1"),
        (2000.0, "route", "m0", "to_hold", "hold", "move"),  # hold holds it: nothing more
        (1001.0, "publish", "m1", "to_hold", None, "2"),
        (2001.0, "route", "m1", "to_hold", "hold", "move"),  # behind the first one
        (1002.0, "publish", "m2", "to_small", None, "1"),
        (2002.0, "route", "m2", "to_small", "small", "move"),
        (2002.0, "dead_letter", "m2", "small", "dlq", "overflow"),  # small is full
        (1003.0, "publish", "m3", "to_quiet", None, "1"),
        (2003.0, "route", "m3", "to_quiet", "quiet", "move"),  # quiet delivers it unrecorded
        (1004.0, "publish", "m4", "short", None, "1"),
        (2005.0, "dead_letter", "m4", "short", "dlq", "expired"),
        (1005.0, "publish", "m5", "x", None, "1"),
        (2007.0, "route", "m5", "x", "y", "move"),
        (2007.0, "dead_letter", "m5", "y", "dlq", "unroutable"),  # back to x: the cycle stops
    ]


def test_a_queue_that_records_nothing_leaves_out_only_its_own_records(
    jeng: Engine, clock: Clock
) -> None:
    jeng.queue_create("loud")
    jeng.selector_create("loud").when_always().do_deliver("app").enable()
    jeng.queue_create("quiet", journal=False)
    jeng.selector_create("quiet").when_always().do_move("loud").enable()
    clock.start()
    [delivery] = jeng.publish("quiet", Message(address="x"))
    assert events(jeng) == [(2001.0, "deliver", "m0", "loud", "app", None)]
    assert jeng.journal.peek().events[0][8] == delivery.tag


def test_moves_of_moves_bounces_and_named_targets_keep_their_records(
    jeng: Engine, clock: Clock
) -> None:
    for name in ("a", "b", "c"):
        jeng.queue_create(name)
    jeng.selector_create("c").when_always().do_deliver("app").enable()
    jeng.selector_create("a").when_always().do_move("b").enable()
    jeng.selector_create("b").when_always().do_move("c").enable()
    jeng.queue_create("replies")
    jeng.selector_create("replies").when_always().do_deliver("caller").enable()
    jeng.queue_create("asks")
    jeng.selector_create("asks").when_always().do_bounce("replies").enable()
    jeng.queue_create("dlq")
    jeng.queue_create("post", dead_letter="dlq")
    jeng.selector_create("post").when_always().do_move(target_from="to").enable()
    clock.start()
    jeng.publish("a", Message(address="m"))  # walls 1000; nows 2000, 2001
    [bounced] = jeng.publish("asks", Message(address="q", return_address="r"))  # 1001; 2002-3
    [posted] = jeng.publish("post", Message(address="p", headers={"to": "c"}))  # 1002; 2004-5
    assert jeng.publish("post", Message(address="lost", headers={"to": "none"})) == []  # 2006
    got = [(e[0], e[1], e[3], e[5], e[6], e[7]) for e in jeng.journal.peek()]
    assert got == [
        (1000.0, "publish", "a", None, "1", "m"),
        (2000.0, "route", "a", "b", "move", None),
        (2000.0, "route", "b", "c", "move", None),
        (2001.0, "deliver", "c", "app", None, None),
        (1001.0, "publish", "asks", None, "1", "q"),  # the address it was published with
        (2002.0, "route", "asks", "replies", "bounce", None),
        (2003.0, "deliver", "replies", "caller", None, None),
        (1002.0, "publish", "post", None, "1", "p"),
        (2004.0, "route", "post", "c", "move", None),
        (2005.0, "deliver", "c", "app", None, None),
        (1003.0, "publish", "post", None, "2", "lost"),
        (2006.0, "dead_letter", "post", "dlq", "no-such-queue", None),  # names no queue
    ]
    assert bounced.message.address == "r" and posted.destination == "app"


def test_publish_many_records_each_message_whole_before_the_next(
    jeng: Engine, clock: Clock
) -> None:
    wolfpack(jeng, "jobs", "w1", credit=10)
    clock.start()
    deliveries = jeng.publish_many("jobs", [Message(address="1"), Message(address="2")])
    assert [e[1:3] for e in jeng.journal.peek()] == [
        (kind, d.message.mid) for d in deliveries for kind in ("publish", "route", "deliver")
    ]
    assert [e[0] for e in jeng.journal.peek()] == [1000.0, 2000.0, 2001.0, 1001.0, 2000.0,
                                                   2002.0]  # fmt: skip


def test_a_call_that_fails_on_the_way_leaves_no_records_and_none_for_the_next(
    jeng: Engine, monkeypatch
) -> None:
    wolfpack(jeng, "jobs", "w1", credit=10)
    jeng.queue_create("inbox")
    jeng.selector_create("inbox").when_always().do_deliver("app").enable()
    take = jeng._take

    def failing(qrt, sel, entry) -> None:  # a defect as the second message is delivered,
        if entry.message.address == "boom" and sel.action == "deliver":  # its publish and
            raise RuntimeError("a defect on the way")  # move not written yet
        take(qrt, sel, entry)

    monkeypatch.setattr(jeng, "_take", failing)
    with pytest.raises(RuntimeError):
        jeng.publish_many("jobs", [Message(address="ok"), Message(address="boom")])
    assert len(jeng.journal) == 0  # the first message's records too: the call failed
    [delivery] = jeng.publish("inbox", Message(address="next"))
    batch = jeng.journal.drain()
    assert [(e[1], e[3], e[2]) for e in batch] == [
        ("publish", "inbox", delivery.message.mid),
        ("deliver", "inbox", delivery.message.mid),
    ]
    assert batch.first == 1


def test_the_capacity_bound_drops_the_oldest_records_of_a_path_one_by_one(
    store_kind, engine_on
) -> None:
    eng = engine_on(store_kind, journal=2)
    wolfpack(eng, "jobs", "w1")
    [delivery] = eng.publish("jobs", Message())  # three records
    assert (len(eng.journal), eng.journal.dropped, eng.journal.position) == (2, 1, 2)
    batch = eng.journal.peek()
    assert [e[1] for e in batch] == ["route", "deliver"]
    assert (batch.first, batch.last, batch.dropped) == (2, 3, 1)
    eng.confirm(delivery)
    batch = eng.journal.drain()
    assert [e[1] for e in batch] == ["deliver", "confirm"]
    assert (batch.first, batch.dropped) == (3, 2)
    assert all(len(event) == len(EVENT_FIELDS) for event in batch)


def test_a_move_to_another_shards_queue_keeps_its_records() -> None:
    eng = Engine(journal=True)
    eng.queue_create("q")
    eng.set_remote_queues({"far": "b"})  # a stand-in: "far" lives on shard b
    eng.selector_create("q").when_always().do_move("far").enable()
    assert eng.publish("q", Message(address="x")) == []
    forwards, _ = eng.take_forwards()
    assert [f.queue for f in forwards] == ["far"]
    assert [(e[1], e[3], e[5], e[6]) for e in eng.journal.drain()] == [
        ("publish", "q", None, "1"),
        ("route", "q", "far", "move"),
    ]
