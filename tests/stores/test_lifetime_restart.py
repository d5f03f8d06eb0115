"""Message lifetime (SPEC §8) across a restart of the persistent stores: scheduled, waiting
and prioritised messages and the new counters are where the last process left them;
nothing scheduled is lost or fires twice. SQLite, PostgreSQL (where one answers), Redis.
Time is driven with `tick(now)` (see tests/engine/test_lifetime.py)."""

from __future__ import annotations

import sqlite3
import time
import uuid

import pytest

from engine import Engine, Message
from engine.relay.wire import _message_from, message_json
from tests.engine.conftest import drop_postgres_rows, drop_redis_keys
from tests.postgres import postgres_url
from tests.stores.conftest import restart


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def fresh(request, tmp_path):
    """`fresh()`: a new engine whose default store is a fresh persistent store."""
    if request.param == "sqlite":
        kind, url, name = "sql", f"sqlite:///{tmp_path}/xump.sqlite3", "db"
    elif request.param == "redis":
        kind, url, name = "redis", request.getfixturevalue("redis_server").url, None
    else:
        kind, url, name = "sql", postgres_url(), None
        if url is None:
            pytest.skip("no PostgreSQL server answers (set XUMP_TEST_POSTGRES_URL)")
    name = name or f"t{uuid.uuid4().hex[:12]}"

    def make() -> Engine:
        engine = Engine()
        engine.store_create(kind, name, url=url)
        engine.set_default_store(name)
        return engine

    yield make
    if request.param == "redis":
        drop_redis_keys(url, name)
    elif request.param == "postgresql":
        drop_postgres_rows(url, name)


def frozen(eng: Engine) -> float:
    t0 = float(int(time.time()) + 100_000)
    eng.tick(t0)
    return t0


def test_delayed_messages_fire_in_due_order_across_a_restart_and_only_once(fresh) -> None:
    first = fresh()
    first.queue_create("q", history=10)
    t0 = frozen(first)
    first.selector_create("q").when_always().do_deliver("app").enable()
    for body, delay in ((b"30", 30), (b"10", 10), (b"20", 20), (b"gone", 15)):
        first.publish("q", Message(body=body, delay=delay))
    gone = next(m for m in first.scheduled("q") if m.body == b"gone")
    first.cancel("q", gone.mid)
    assert first.tick(t0 + 10)[0].message.body == b"10"

    second = restart(first)
    assert [m.body for m in second.scheduled("q")] == [b"20", b"30"]
    assert second.stats("q")["scheduled"] == 2
    assert second.tick(t0 + 19) == []
    fired = second.tick(t0 + 40)
    assert [d.message.body for d in fired] == [b"20", b"30"]
    assert [d.message.timestamp for d in fired] == [t0 + 20, t0 + 30]
    second.confirm_many(fired)

    third = restart(second)
    assert third.scheduled("q") == [] and third.tick(t0 + 1000) == []
    assert third.stats("q")["dropped"] == 1  # the cancelled one
    assert third.stats("q")["published"] == 3


def test_a_redelivery_waiting_out_its_delay_survives_a_restart(fresh) -> None:
    first = fresh()
    first.queue_create("q", redelivery_delay=5, max_deliveries=2)
    t0 = frozen(first)
    first.selector_create("q").when_always().do_deliver("app").enable()
    [d] = first.publish("q", Message(body=b"retry", ttl=1000))
    assert first.reject(d) == []

    second = restart(first)
    [waiting] = second.scheduled("q")
    assert (waiting.body, waiting.seq, waiting.ttl) == (b"retry", 1, 1000)
    assert second.tick(t0 + 4) == []
    [again] = second.tick(t0 + 5)
    assert (again.message.body, again.delivery_count, again.message.seq) == (b"retry", 2, 1)
    assert second.reject(again) == []  # the limit: dropped (no dead-letter queue)

    third = restart(second)
    stats = third.stats("q")
    assert (stats["delivery_limited"], stats["dropped"], stats["scheduled"]) == (1, 1, 0)


def test_priority_order_and_message_ttl_survive_a_restart(fresh) -> None:
    first = fresh()
    first.queue_create("dlq")
    first.queue_create("q", priorities=10, dead_letter="dlq")
    t0 = frozen(first)
    sel = first.selector_create("q").when_always().do_deliver("app").set_credit(0)
    sel.enable()
    for body, priority, ttl in (("a", 1, None), ("b", 9, None), ("c", 1, 5), ("d", 9, None)):
        first.publish("q", Message(body=body.encode(), headers={"priority": priority}, ttl=ttl))
    assert [m.body for m in first.peek("q")] == [b"b", b"d", b"a", b"c"]

    second = restart(first)
    assert [m.body for m in second.peek("q")] == [b"b", b"d", b"a", b"c"]
    second.tick(t0 + 5)  # c expires, though it sits behind held messages
    assert [m.body for m in second.peek("dlq")] == [b"c"]
    second.publish("q", Message(body=b"e", headers={"priority": 5}))

    third = restart(second)
    got = third.selector_fetch("q", sel.id).credit(10)
    assert [d.message.body for d in got] == [b"b", b"d", b"e", b"a"]


def test_an_older_sqlite_database_gains_the_new_columns(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/old.sqlite3"
    first = Engine()
    first.store_create("sql", "db", url=url)
    first.backend("db").close()
    with sqlite3.connect(tmp_path / "old.sqlite3") as db:  # as the first release made it
        for table, column in (
            ("xump_entry", "ttl"), ("xump_entry", "delay"), ("xump_entry", "due"),
            ("xump_queue", "delivery_limited"),
        ):  # fmt: skip
            db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    again = Engine()
    again.store_create("sql", "db", url=url)
    again.queue_create("q", store="db")
    again.publish("q", Message(body=b"x", delay=5, ttl=9))
    later = restart(again)
    [waiting] = later.scheduled("q")
    assert (waiting.delay, waiting.ttl) == (5, 9)


def test_the_relay_carries_ttl_and_delay_and_reads_items_without_them() -> None:
    message = Message(address="a", body=b"x", ttl=2.5, delay=1)
    assert _message_from(message_json(message))[-2:] == (2.5, 1)
    plain = message_json(Message(address="a", body=b"x"))
    assert "ttl" not in plain and "delay" not in plain  # old readers see what they knew
    assert _message_from(plain)[-2:] == (None, None)
