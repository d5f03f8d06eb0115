"""The persistent stores keep queue state: a new engine on the same database finds it as the
last one left it. SQLite, PostgreSQL (where one answers) and Redis (a private server)."""

from __future__ import annotations

import sqlite3
import uuid

import pytest

from engine import Engine, Message
from engine.errors import StoreError
from engine.stores.sql import mask_password
from tests.engine.conftest import drop_postgres_rows, drop_redis_keys
from tests.postgres import postgres_url


@pytest.fixture(params=["sqlite", "postgresql", "redis", "redis-cluster"])
def database(request, tmp_path):
    """(kind, url, store name) of a fresh persistent store; removed afterwards."""
    if request.param == "sqlite":
        yield "sql", f"sqlite:///{tmp_path}/xump.sqlite3", "db"
        return
    name = f"t{uuid.uuid4().hex[:12]}"
    if request.param.startswith("redis"):
        server = "redis_server" if request.param == "redis" else "redis_cluster"
        url = request.getfixturevalue(server).url
        yield "redis", url, name
        drop_redis_keys(url, name)
        return
    url = postgres_url()
    if url is None:
        pytest.skip("no PostgreSQL server answers (set XUMP_TEST_POSTGRES_URL)")
    yield "sql", url, name
    drop_postgres_rows(url, name)


def engine_with_store(url: str, name: str, kind: str = "sql") -> Engine:
    engine = Engine()
    engine.store_create(kind, name, url=url)
    engine.set_default_store(name)
    return engine


def wire(engine: Engine, credit: int) -> None:
    engine.queue_create("orders", history=10)
    engine.queue_create("audit")
    copier = engine.selector_create("orders").when_always().do_copy("audit")
    worker = engine.selector_create("orders").when_always().do_deliver("app")
    worker.set_credit(credit).enable()  # first, so held messages wait for credit
    copier.enable()


def test_unprocessed_history_outstanding_and_counters_survive_a_restart(database) -> None:
    kind, url, name = database
    first = engine_with_store(url, name, kind)
    wire(first, credit=2)
    deliveries = first.publish_many(
        "orders", [Message(body=f"m{n}".encode(), headers={"n": n}) for n in range(5)]
    )
    assert [d.message.body for d in deliveries] == [b"m0", b"m1"]
    [third] = first.confirm(deliveries[0])
    assert third.message.body == b"m2"
    before = first.stats("orders")

    second = engine_with_store(url, name, kind)
    wire(second, credit=0)
    assert second.stats("orders") == before
    assert [m.body for m in second.peek("orders")] == [b"m3", b"m4"]
    assert [m.headers["n"] for m in second.peek("orders")] == [3, 4]
    assert [m.body for m in second.browse("orders")] == [b"m0"]
    assert second.queue_fetch("audit").depth == 3  # copies of m0, m1, m2
    assert second.queue_fetch("orders").outstanding == 2
    # deliveries outstanding before the restart can still be settled; credit flows again
    [fourth] = second.confirm(deliveries[1].tag)
    assert fourth.message.body == b"m3"
    assert [m.body for m in second.browse("orders", start="oldest")] == [b"m0", b"m1"]


def test_a_body_copied_to_many_queues_is_stored_once_and_freed_with_its_last_copy(
    tmp_path,
) -> None:
    url = f"sqlite:///{tmp_path}/xump.sqlite3"
    engine = engine_with_store(url, "db")
    engine.queue_create("src")
    for name in ("a", "b", "c"):
        engine.queue_create(name)
        engine.selector_create("src").when_always().do_copy(name).enable()
    engine.publish("src", Message(body=b"shared body"))
    database = sqlite3.connect(f"{tmp_path}/xump.sqlite3")
    assert database.execute("SELECT body, refs FROM xump_body").fetchall() == [(b"shared body", 3)]
    for name in ("a", "b"):
        engine.queue_delete(name)
    assert database.execute("SELECT refs FROM xump_body").fetchall() == [(1,)]
    engine.selector_create("c").when_always().do_delete().enable()
    assert database.execute("SELECT COUNT(*) FROM xump_body").fetchall() == [(0,)]
    assert database.execute("SELECT COUNT(*) FROM xump_entry").fetchall() == [(0,)]


def test_history_trimming_deletes_rows(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/xump.sqlite3"
    engine = engine_with_store(url, "db")
    engine.queue_create("q", history=3)
    engine.selector_create("q").when_always().do_delete().enable()
    engine.publish_many("q", [Message(body=str(n).encode()) for n in range(10)])
    database = sqlite3.connect(f"{tmp_path}/xump.sqlite3")
    assert database.execute("SELECT seq FROM xump_entry ORDER BY seq").fetchall() == [
        (8,),
        (9,),
        (10,),
    ]
    assert database.execute("SELECT COUNT(*) FROM xump_body").fetchall() == [(3,)]


@pytest.mark.parametrize(
    "kind, url, password",
    [
        ("sql", "postgresql://xump:s3cret@127.0.0.1:1/xump", "s3cret"),
        ("redis", "redis://:hunter2@127.0.0.1:1/0", "hunter2"),
    ],
    ids=["sql", "redis"],
)
def test_unreachable_store_raises_store_error_with_the_password_masked(
    kind: str, url: str, password: str
) -> None:
    engine = Engine()
    with pytest.raises(StoreError) as raised:
        engine.store_create(kind, "unreachable", url=url)
    assert password not in str(raised.value)
    assert "***" in str(raised.value)
    assert "check" in str(raised.value)
    assert [s.name for s in engine.stores()] == ["ram"]


def test_bad_urls_are_refused() -> None:
    engine = Engine()
    for url in ("mysql://x", "", None, "sqlite:////proc/no/such/dir/x.db"):
        with pytest.raises(StoreError):
            engine.store_create("sql", "bad", url=url)
    assert [s.name for s in engine.stores()] == ["ram"]


def test_mask_password_hides_only_the_password() -> None:
    assert mask_password("postgresql://u:p@h:5/d") == "postgresql://u:***@h:5/d"
    assert mask_password("sqlite:///var/x.db") == "sqlite:///var/x.db"


def test_other_stores_stay_usable_when_one_fails(tmp_path) -> None:
    engine = Engine()
    with pytest.raises(StoreError):
        engine.store_create("sql", "pg", url="postgresql://u:p@127.0.0.1:1/x")
    engine.queue_create("q")
    engine.selector_create("q").when_always().do_deliver("app").enable()
    assert len(engine.publish("q", Message())) == 1


def test_deliveries_outstanding_at_a_restart_can_be_expired_and_redelivered(database) -> None:
    kind, url, name = database
    first = engine_with_store(url, name, kind)
    first.queue_create("q")
    first.selector_create("q").when_always().do_deliver("app").enable()
    sent = first.publish_many("q", [Message(body=b"a"), Message(body=b"b")])
    second = engine_with_store(url, name, kind)
    second.queue_create("q")
    second.selector_create("q").when_always().do_deliver("app").enable()
    again = second.expire(0)
    assert [(d.message.body, d.redelivered) for d in again] == [(b"a", True), (b"b", True)]
    assert {d.tag for d in again}.isdisjoint(d.tag for d in sent)


def test_an_engine_rebuilt_from_the_catalog_takes_over_held_and_outstanding_messages(
    database,
) -> None:
    kind, url, name = database
    first = engine_with_store(url, name, kind)
    first.queue_create("q")
    worker = first.selector_create("q").when_always().do_deliver("app").set_credit(1)
    [taken] = worker.enable() + first.publish_many("q", [Message(body=b"1"), Message(body=b"2")])
    assert first.queue_fetch("q").depth == 1

    second = Engine(catalog=first.catalog)
    assert second.selectors("q")[0].available_credit == 0  # kept, not reset to the setting
    assert second.resume() == []  # no credit: "2" waits
    assert [d.message.body for d in second.confirm(taken.tag)] == [b"2"]


def test_credit_set_between_operations_survives_a_restart(database) -> None:
    kind, url, name = database
    first = engine_with_store(url, name, kind)
    first.queue_create("q")
    first.selector_create("q").when_always().do_deliver("app").set_credit(4)
    second = engine_with_store(url, name, kind)
    second.queue_create("q")
    assert second.backend(name).open_queue("q").selector(1).credit == 4


def test_a_message_moved_here_from_another_shard_survives_a_restart_and_settles_back(
    database,
) -> None:
    """Its origin names the other shard's MOVE (engine/forwarding.py's remote origin, which
    holds a control character): the Redis store once split its record on that character,
    so the queue could not be loaded again and its shard's router stopped for good."""
    kind, url, name = database
    first = engine_with_store(url, name, kind)
    first.queue_create("work")
    first.arrive_forwarded(
        "a", [("work", Message(body=b"job", mid="m1"), ("jobs",), ("jobs", 1, "t7"), 1)]
    )
    second = engine_with_store(url, name, kind)
    second.queue_create("work")
    assert [m.body for m in second.peek("work")] == [b"job"]
    [delivery] = second.selector_create("work").when_always().do_deliver("app").enable()
    second.confirm(delivery)
    forwards, settles = second.take_forwards()
    assert forwards == [] and [(s.shard, s.origin) for s in settles] == [("a", ("jobs", 1, "t7"))]
