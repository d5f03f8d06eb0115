"""SPEC §12, lineage: `eng.trace(mid)` tells what happened to a message, oldest first."""

from __future__ import annotations

import pytest

from engine import Engine, Message
from engine.errors import InvalidArgument, NotFound


@pytest.fixture
def jeng(store_kind, engine_on) -> Engine:
    return engine_on(store_kind, journal=True)


def network(eng: Engine) -> None:
    """in copies into a and b; a moves into work, which delivers to app; dlq keeps letters."""
    eng.queue_create("dlq", history=10)
    for name in ("a", "b", "work"):
        eng.queue_create(name, dead_letter="dlq")
    eng.queue_create("in")
    eng.selector_create("in").when_always().do_copy("a").enable()
    eng.selector_create("in").when_always().do_copy("b").enable()
    eng.selector_create("a").when_always().do_move("work").enable()
    eng.selector_create("work").when_always().do_deliver("app").enable()
    eng.selector_create("b").when_always().do_delete().enable()


def kinds(steps: list[dict]) -> list[tuple]:
    return [(s["kind"], s["queue"], s["target"], s["detail"]) for s in steps]


def test_the_trace_of_a_copied_moved_delivered_rejected_message(jeng: Engine) -> None:
    network(jeng)
    delivery = jeng.publish("in", Message(address="x"))[0]
    again = jeng.reject(delivery, requeue=True)[0]
    assert again.redelivered
    jeng.reject(again, requeue=False)
    steps = jeng.trace(delivery.message.mid)
    assert kinds(steps) == [
        ("publish", "in", None, None),
        ("route", "in", "a", "copy"),
        ("route", "a", "work", "move"),
        ("deliver", "work", "app", None),
        ("route", "in", "b", "copy"),
        ("delete", "b", None, None),
        ("reject", "work", "app", "requeue"),
        ("deliver", "work", "app", "redelivered"),
        ("reject", "work", "app", None),
        ("dead_letter", "work", "dlq", "rejected"),
    ]
    assert steps[0]["seq"] == 1 and steps[0]["address"] == "x"
    assert all(isinstance(s["time"], float) for s in steps)
    # each delivery's tag, on the delivery and on what the application did with it
    tags = [s["tag"] for s in steps]
    assert tags == [None, None, None, delivery.tag, None, None, delivery.tag, again.tag,
                    again.tag, None]  # fmt: skip
    assert delivery.tag != again.tag
    assert steps[3]["said"] == (
        f"selector 1 of 'work' delivered it to destination 'app' as {delivery.tag}"
    )
    assert steps[-1]["said"] == "dead-lettered from 'work' into 'dlq' (rejected)"


def test_the_trace_of_a_confirmed_message(jeng: Engine) -> None:
    network(jeng)
    delivery = jeng.publish("in", Message())[0]
    jeng.confirm(delivery)
    confirmed = jeng.trace(delivery.message.mid)[-1]
    assert kinds([confirmed]) == [("confirm", "work", "app", None)]
    assert confirmed["tag"] == delivery.tag


def test_a_trace_keeps_the_engine_s_time_after_tick(jeng: Engine) -> None:
    """Every event of a call is timed by the engine's clock, which `tick(now)` moves ahead
    of the wall clock: a route or a confirm is never timed before the publish it follows."""
    network(jeng)
    jeng.tick(now=4_000_000_000.0)  # the year 2096: far ahead of any wall clock
    delivery = jeng.publish("in", Message())[0]
    jeng.confirm(delivery)
    times = [s["time"] for s in jeng.trace(delivery.message.mid)]
    assert [kind for kind, *_ in kinds(jeng.trace(delivery.message.mid))] == [
        "publish", "route", "route", "deliver", "route", "delete", "confirm"]  # fmt: skip
    assert all(t >= 4_000_000_000.0 for t in times), times
    assert times == sorted(times)


def test_the_trace_of_an_expired_message(jeng: Engine) -> None:
    jeng.queue_create("dlq", history=10)
    jeng.queue_create("slow", dead_letter="dlq", ttl=1.0)
    jeng.publish("slow", Message())  # no selectors: it waits, then expires
    mid = jeng.peek("slow")[0].mid
    jeng.tick(now=jeng.peek("slow")[0].timestamp + 5)
    assert kinds(jeng.trace(mid))[-1] == ("dead_letter", "slow", "dlq", "expired")


def test_a_target_from_the_envelope_and_its_failure_are_traced(jeng: Engine) -> None:
    jeng.queue_create("dlq", history=10)
    jeng.queue_create("in", dead_letter="dlq")
    jeng.selector_create("in").when_always().do_move(target_from="to").enable()
    jeng.publish("in", Message(headers={"to": "nowhere"}))
    mid = jeng.peek("dlq")[0].mid
    assert kinds(jeng.trace(mid))[-1] == ("dead_letter", "in", "dlq", "no-such-queue")


def test_a_queue_without_journal_is_not_traced(jeng: Engine) -> None:
    jeng.queue_create("quiet", journal=False, history=1)
    jeng.selector_create("quiet").when_always().do_delete().enable()
    jeng.publish("quiet", Message())
    with pytest.raises(NotFound):
        jeng.trace(jeng.browse("quiet")[0].mid)


def test_trace_of_an_unknown_mid_is_not_found(jeng: Engine) -> None:
    with pytest.raises(NotFound, match="no events"):
        jeng.trace("nope-1")


@pytest.mark.parametrize("mid", ["", "x" * 201, 7, "a\nb", None])
def test_trace_refuses_what_is_no_mid(jeng: Engine, mid) -> None:
    with pytest.raises(InvalidArgument):
        jeng.trace(mid)


def test_an_engine_without_journal_says_so(eng: Engine) -> None:
    with pytest.raises(InvalidArgument, match="journal"):
        eng.trace("m-1")


def test_trace_reads_only_what_was_not_drained(jeng: Engine) -> None:
    jeng.queue_create("q", history=1)
    jeng.selector_create("q").when_always().do_delete().enable()
    jeng.publish("q", Message())
    mid = jeng.browse("q")[0].mid
    jeng.journal.drain()
    with pytest.raises(NotFound, match="drained"):
        jeng.trace(mid)


def test_archived_events_give_the_same_steps(jeng: Engine, tmp_path) -> None:
    from engine.archive import Archive
    from engine.lineage import step_of

    network(jeng)
    delivery = jeng.publish("in", Message(address="x"))[0]
    jeng.reject(delivery, requeue=False)
    mid = delivery.message.mid
    live = jeng.trace(mid)
    archive = Archive(tmp_path / "archive")
    archive.write_events(jeng.journal.drain())
    found = sorted(archive.events_of(mid), key=lambda item: item[1])
    assert [step_of(event) for _, _, event in found] == live
    assert archive.events_of("nope") == []


def test_a_delivery_to_a_destination_the_message_names_is_traced_with_it(jeng: Engine) -> None:
    jeng.queue_create("in")
    jeng.selector_create("in").when_always().do_deliver(target_from="user").enable()
    delivery = jeng.publish("in", Message(headers={"user": "alice"}))[0]
    jeng.reject(delivery, requeue=True)
    [timed_out] = jeng.expire(0)  # the redelivery timed out: delivered a third time
    assert timed_out.destination == "alice"
    jeng.confirm(timed_out)
    steps = kinds(jeng.trace(delivery.message.mid))
    assert [kind for kind, *_ in steps] == [
        "publish",
        "deliver",
        "reject",
        "deliver",
        "expire",
        "deliver",
        "confirm",
    ]
    assert {target for kind, _, target, _ in steps if kind != "publish"} == {"alice"}


def test_a_timed_out_delivery_is_traced_with_its_tag(jeng: Engine) -> None:
    jeng.queue_create("in")
    jeng.selector_create("in").when_always().do_deliver("app").enable()
    first = jeng.publish("in", Message())[0]
    [second] = jeng.expire(0)
    steps = jeng.trace(first.message.mid)
    assert [(s["kind"], s["tag"]) for s in steps] == [
        ("publish", None), ("deliver", first.tag), ("expire", first.tag),
        ("deliver", second.tag),
    ]  # fmt: skip
    assert first.tag in steps[2]["said"]


def test_events_recorded_before_delivery_tags_read_with_none(jeng: Engine, tmp_path) -> None:
    """A journal list or an archive written by an older version holds events of 8 fields
    (no tag): they are read as before, their tag None."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from engine.archive import EVENTS_SCHEMA, Archive
    from engine.lineage import step_of

    old = (1.0, "deliver", "m-1", "work", 1, "app", None, None)
    step = step_of(list(old))
    assert step["tag"] is None and step["target"] == "app"
    assert step["said"] == "selector 1 of 'work' delivered it to destination 'app'"
    archive = Archive(tmp_path / "archive")
    jeng.queue_create("q", history=1)
    jeng.selector_create("q").when_always().do_delete().enable()
    jeng.publish("q", Message())
    archive.write_events(jeng.journal.drain())  # lays the archive's directories out
    [written] = list(archive.events_path.glob("date=*/queue=*/e-*.parquet"))
    schema = pa.schema([f for f in EVENTS_SCHEMA if f.name != "tag"])
    row = dict(zip(EVENT_NAMES, old, strict=True)) | {"epoch": "older", "position": 1}
    row.pop("queue")
    pq.write_table(pa.Table.from_pylist([row], schema=schema), written.parent / "e-older.parquet")
    [(epoch, position, event)] = archive.events_of("m-1")
    assert (epoch, position) == ("older", 1)
    assert step_of(event)["tag"] is None and step_of(event)["queue"] == "q"


EVENT_NAMES = ("time", "kind", "mid", "queue", "selector", "target", "detail", "address")


def test_messages_taken_out_by_a_person_end_their_trace_saying_so(jeng: Engine) -> None:
    """Purged, deleted or moved by a message operation, or held by a queue deleted: the
    trace ended at "published", as if the message still waited."""
    from engine.message_ops import operate

    for name in ("held", "elsewhere", "doomed"):
        jeng.queue_create(name)
    jeng.publish_many("held", [Message(body=str(n)) for n in range(4)])
    mids = [m.mid for m in jeng.peek("held", 4)]
    operate(jeng, "held", "delete", mids=[mids[0]])
    operate(jeng, "held", "move", mids=[mids[1]], target="elsewhere")
    jeng.purge("held", [jeng.peek("held", 2)[0].seq])
    jeng.publish("doomed", Message())
    doomed = jeng.peek("doomed", 1)[0].mid
    jeng.queue_delete("doomed")

    def said(mid: str) -> list[tuple]:
        return [(s["kind"], s["queue"], s["detail"]) for s in jeng.trace(mid)]

    assert said(mids[0]) == [("publish", "held", None), ("drop", "held", "deleted")]
    assert said(mids[1]) == [("publish", "held", None), ("publish", "elsewhere", None),
                             ("drop", "held", "moved")]  # fmt: skip
    assert said(mids[2]) == [("publish", "held", None), ("drop", "held", "purged")]
    assert said(mids[3]) == [("publish", "held", None)]  # still waits
    assert said(doomed) == [("publish", "doomed", None), ("drop", "doomed", "queue deleted")]
    assert jeng.trace(doomed)[-1]["said"] == "taken out of 'doomed' (the queue was deleted)"
    with pytest.raises(InvalidArgument):
        jeng.purge("held", reason="because")
