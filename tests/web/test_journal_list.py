"""The router's journal list in Redis (xumpweb/analytics/journal.py): what a step writes and
what the archive and the trace read back, from this router and from older ones."""

from __future__ import annotations

import orjson

from engine import Engine, Message
from engine.event_journal import EVENT_FIELDS
from engine.lineage import step_of
from engine.patterns import wolfpack
from xumpweb.analytics.journal import chunks, runs


def wolfpack_events() -> Engine:
    eng = Engine(journal=True)
    wolfpack(eng, "jobs", "w1", credit=10)
    [delivery] = eng.publish("jobs", Message(address="job", body=b"x"))
    eng.confirm(delivery)
    [redelivered] = eng.publish("jobs", Message(address="job", body=b"y"))
    eng.reject(redelivered, requeue=True)
    return eng


def test_a_step_writes_records_that_read_back_as_the_engines_events() -> None:
    journal = wolfpack_events().journal
    batch = journal.peek()
    items = chunks(batch)
    read = [orjson.loads(item) for item in items]
    # as the engine keeps them, in a row: time, [kind, queue, selector, target], mid,
    # detail, extra, then the next record's
    assert {chunk["width"] for chunk in read} == {5}
    written = [field for chunk in read for field in chunk["fields"]]
    assert len(written) == 5 * len(batch)
    assert written[1] == ["publish", "jobs", None, None]
    [run] = runs(items)
    assert (run.epoch, run.first) == (batch.epoch, batch.first)
    assert run.events == journal.drain().events
    assert [event[1] for event in run.events] == [
        "publish", "route", "deliver", "confirm",
        "publish", "route", "deliver", "reject", "deliver",
    ]  # fmt: skip
    assert run.events[-1][6] == "redelivered" and run.events[2][6] is None
    assert run.events[0][6] == "1" and run.events[0][7] == "job"  # seq as text, address


def test_lists_written_by_older_routers_still_read() -> None:
    nine = [1.5, "publish", "m-1", "jobs", None, None, "3", "job", None]
    eight = [2.5, "deliver", "m-1", "w1", 1, "w1", None, None]  # before tags were kept
    item = orjson.dumps({"epoch": "e", "first": 7, "events": [nine, eight]})
    [run] = runs([item])
    assert run.first == 7
    assert run.events == [tuple(nine), (*eight, None)]
    assert all(len(event) == len(EVENT_FIELDS) for event in run.events)
    assert step_of(run.events[0])["seq"] == 3
    assert step_of(eight)["said"] == "selector 1 of 'w1' delivered it to destination 'w1'"
