"""The SQL store (engine/stores/sql.py) on SQLite and, where one answers, PostgreSQL.

First the store contract of stores/base.py, used directly as the engine uses it (each change
inside begin/commit) and read back by a second store on the same database, as after a
restart. Then engines on a SQL store: the same scenarios as on the RAM store give the same
results, with a restart in the middle, and the database always holds what memory holds.
Last, what goes wrong: bad URLs, failed commits, lost connections, a second writer.
"""

from __future__ import annotations

import sqlite3
from types import MappingProxyType

import pytest

from engine import Engine, Message
from engine.errors import StoreError
from engine.patterns import housecat, parrot, wolfpack
from engine.stores.base import COUNTERS, Entry
from engine.stores.sql import SqlStore, mask_password
from tests.postgres import postgres_url
from tests.stores.conftest import observe, restart

# -- the store contract ------------------------------------------------------------------------


def message(n: int, **headers) -> Message:
    return Message(f"addr.{n}", MappingProxyType(headers), f"body {n}".encode(), None,
                   f"mid-{n}", None, float(n))  # fmt: skip


def operation(store: SqlStore, change):
    """Run `change` as the engine runs an operation: one transaction."""
    store.begin()
    try:
        result = change()
    except BaseException:
        store.rollback()
        raise
    store.commit()
    return result


def reopened(store: SqlStore) -> SqlStore:
    """The same store opened afresh, as a new process opens it."""
    store.close()
    return SqlStore(store.name, store.url)


def seqs(entries) -> list[int]:
    return [entry.seq for entry in entries]


def fill(store: SqlStore, queue: str, count: int):
    state = store.open_queue(queue)

    def append() -> None:
        for _ in range(count):
            seq = state.next_seq()
            state.append(Entry(seq, message(seq), None))

    operation(store, append)
    return state


def test_unprocessed_is_fifo_and_push_front_puts_entries_back_at_the_head(sql_url) -> None:
    store = SqlStore("db", sql_url)
    queue = fill(store, "q", 5)
    taken = operation(store, lambda: [queue.pop_head(), queue.pop_head(), queue.pop_head()])
    assert seqs(taken) == [1, 2, 3]
    operation(store, lambda: queue.push_front(taken[2:]))
    operation(store, lambda: queue.push_front(taken[:2]))
    assert seqs(queue.unprocessed(10)) == [1, 2, 3, 4, 5]

    store = reopened(store)
    queue = store.open_queue("q")
    assert seqs(queue.unprocessed(10)) == [1, 2, 3, 4, 5]
    assert queue.head().seq == 1
    assert (queue.depth(), queue.last_seq()) == (5, 5)
    assert operation(store, queue.next_seq) == 6
    store.close()


def test_remove_withdraws_an_unprocessed_entry_once(sql_url) -> None:
    store = SqlStore("db", sql_url)
    queue = fill(store, "q", 4)
    assert operation(store, lambda: queue.remove(3)) is True
    assert operation(store, lambda: queue.remove(3)) is False
    assert operation(store, lambda: queue.remove(99)) is False
    store = reopened(store)
    assert seqs(store.open_queue("q").unprocessed(10)) == [1, 2, 4]
    store.close()


def test_history_is_ordered_by_seq_and_trimmed_to_the_newest(sql_url) -> None:
    store = SqlStore("db", sql_url)
    queue = store.open_queue("q")

    def add(seq: int) -> None:
        queue.add_history(Entry(seq, message(seq), None), keep=3)

    for seq in (5, 2, 9, 7, 1):  # settled out of order, as deliveries are
        operation(store, lambda seq=seq: add(seq))
    assert seqs(queue.history_oldest(10)) == [5, 7, 9]
    store = reopened(store)
    queue = store.open_queue("q")
    assert queue.history_size() == 3
    assert seqs(queue.history_oldest(10)) == [5, 7, 9]
    operation(store, lambda: queue.trim_history(2))
    store = reopened(store)
    assert seqs(store.open_queue("q").history_latest(10)) == [9, 7]
    store.close()


def test_history_pages_before_and_after_are_exclusive(sql_url) -> None:
    store = SqlStore("db", sql_url)
    queue = store.open_queue("q")
    operation(store, lambda: [queue.add_history(Entry(s, message(s), None), 100)
                              for s in range(1, 11)])  # fmt: skip
    store = reopened(store)
    queue = store.open_queue("q")
    assert seqs(queue.history_latest(3)) == [10, 9, 8]
    assert seqs(queue.history_oldest(3)) == [1, 2, 3]
    assert seqs(queue.history_before(8, 3)) == [7, 6, 5]
    assert seqs(queue.history_after(3, 3)) == [4, 5, 6]
    assert seqs(queue.history_before(1, 3)) == []
    assert seqs(queue.history_after(10, 3)) == []
    assert seqs(queue.history_since(8.0)) == [8, 9, 10]
    store.close()


def test_outstanding_is_a_write_through_mapping_in_the_order_taken(sql_url) -> None:
    store = SqlStore("db", sql_url)
    queue = store.open_queue("q")
    selector = queue.selector(3)
    assert (selector.credit, len(selector.outstanding)) == (-1, 0)
    entries = [Entry(operation(store, queue.next_seq), message(n), None) for n in (1, 2, 3)]
    taken = [entries[2], entries[0], entries[1]]  # taken out of seq order, as redeliveries are

    def take() -> None:
        for tag, entry in zip("abc", taken, strict=True):
            entry.delivery_count = 1
            selector.outstanding[tag] = entry

    operation(store, take)

    def settle_b_and_redeliver_a() -> Entry:
        settled = selector.outstanding.pop("b")
        taken[0].delivery_count = 2
        taken[0].downstream = ("next", 7)
        selector.outstanding["a"] = taken[0]  # set again after a change: saved again
        return settled

    assert operation(store, settle_b_and_redeliver_a) is taken[1]
    assert selector.outstanding.pop("zz", None) is None
    assert "b" not in selector.outstanding
    assert list(selector.outstanding) == ["a", "c"]

    store = reopened(store)
    selector = store.open_queue("q").selector(3)
    assert list(selector.outstanding) == ["a", "c"]
    assert "a" in selector.outstanding and len(selector.outstanding) == 2
    again = selector.outstanding["a"]
    assert (again.seq, again.delivery_count, again.downstream) == (3, 2, ("next", 7))
    assert seqs(selector.outstanding.values()) == [3, 2]
    operation(store, selector.outstanding.clear)
    store = reopened(store)
    assert len(store.open_queue("q").selector(3).outstanding) == 0
    store.close()


def test_credit_and_counters_are_write_through(sql_url) -> None:
    store = SqlStore("db", sql_url)
    queue = store.open_queue("q")

    def change() -> None:
        queue.selector(1).credit = 5
        queue.selector(2).credit = 0
        queue.counters["published"] += 3
        queue.counters["dead_lettered"] = 2

    operation(store, change)
    store = reopened(store)
    queue = store.open_queue("q")
    assert (queue.selector(1).credit, queue.selector(2).credit) == (5, 0)
    assert queue.counters == {**dict.fromkeys(COUNTERS, 0), "published": 3, "dead_lettered": 2}
    operation(store, lambda: queue.drop_selector(1))
    store = reopened(store)
    assert store.open_queue("q").selector(1).credit == -1  # a new selector state
    store.close()


def body_rows(store: SqlStore) -> list[tuple]:
    return store.db.query("SELECT mid, refs FROM xump_body ORDER BY mid")


def test_a_body_is_stored_once_and_freed_when_the_last_queue_lets_go(sql_url) -> None:
    store = SqlStore("db", sql_url)
    shared = message(1)
    states = [store.open_queue(name) for name in ("a", "b", "c")]
    operation(store, lambda: [s.append(Entry(s.next_seq(), shared, None)) for s in states])
    operation(store, lambda: states[2].add_history(states[2].pop_head(), 10))
    assert body_rows(store) == [("mid-1", 3)]
    assert store.db.query("SELECT COUNT(*) FROM xump_body")[0][0] == 1
    operation(store, lambda: store.drop_queue("a"))
    assert body_rows(store) == [("mid-1", 2)]
    operation(store, lambda: store.drop_queue("b"))
    operation(store, lambda: states[2].trim_history(0))
    assert body_rows(store) == []
    assert store.db.query("SELECT COUNT(*) FROM xump_entry")[0][0] == 0
    store.close()


def test_messages_come_back_with_their_mid_body_and_read_only_headers(sql_url) -> None:
    store = SqlStore("db", sql_url)
    queue = store.open_queue("q")
    sent = [
        Message("orders.eu", MappingProxyType({"n": 7, "f": 1.5, "ok": True, "s": "ü"}),
                b"\x00\xff binary", "replies", "m-1", None, 12.5),
        # text a database cannot hold as it is: NUL (PostgreSQL), a lone surrogate
        Message("a\x00b", MappingProxyType({}), b"", "\ud800", "m-2", None, None),
        Message("\x01looks escaped", MappingProxyType({}), b"x", None, "m-3", None, 1.0),
    ]  # fmt: skip
    operation(store, lambda: [queue.append(Entry(queue.next_seq(), m, ("up", 4, "tag")))
                              for m in sent])  # fmt: skip
    store = reopened(store)
    back = store.open_queue("q").unprocessed(10)
    assert [entry.message for entry in back] == sent
    assert all(isinstance(entry.message.headers, MappingProxyType) for entry in back)
    assert back[0].origin == ("up", 4, "tag")
    store.close()


def test_a_dropped_queue_leaves_nothing_and_its_name_starts_afresh(sql_url) -> None:
    store = SqlStore("db", sql_url)
    queue = fill(store, "q", 3)

    def change_then_drop() -> None:  # changed and dropped in one operation
        queue.counters["published"] += 3
        queue.selector(1).credit = 4
        queue.push_front([queue.pop_head()])
        store.drop_queue("q")

    operation(store, change_then_drop)
    for table in ("xump_entry", "xump_queue", "xump_selector", "xump_body"):
        assert store.db.query(f"SELECT COUNT(*) FROM {table}")[0][0] == 0, table
    again = store.open_queue("q")
    assert (again.depth(), again.last_seq(), again.counters["published"]) == (0, 0, 0)
    store.close()


def test_stores_sharing_a_database_keep_their_queues_apart(sql_url) -> None:
    first, second = SqlStore("one", sql_url), SqlStore("two", sql_url)
    fill(first, "q", 2)
    fill(second, "q", 3)
    operation(first, lambda: first.drop_queue("q"))
    first.close()
    second = reopened(second)
    assert seqs(second.open_queue("q").unprocessed(10)) == [1, 2, 3]
    second.close()


# -- engines on a SQL store ----------------------------------------------------------------


def test_unprocessed_history_outstanding_counters_and_credit_survive_a_restart(
    sql_engine,
) -> None:
    engine = sql_engine()
    engine.queue_create("orders", history=10)
    worker = engine.selector_create("orders").when_always().do_deliver("app")
    worker.set_credit(2).enable()
    sent = engine.publish_many("orders", [Message(body=b"%d" % n) for n in range(5)])
    engine.confirm(sent[0])
    before = observe(engine)

    engine = restart(engine)
    assert observe(engine) == before
    assert [m.body for m in engine.peek("orders")] == [b"3", b"4"]
    assert [m.body for m in engine.browse("orders")] == [b"0"]
    [fourth] = engine.confirm(sent[1].tag)  # taken before the restart, settled after it
    assert fourth.message.body == b"3"


def test_credit_set_between_operations_survives_a_restart(sql_engine) -> None:
    engine = sql_engine()
    engine.queue_create("q")
    worker = engine.selector_create("q").when_always().do_deliver("app")
    worker.set_credit(1).enable()
    engine.publish("q", Message(body=b"a"))
    worker.set_credit(4)  # no operation follows it before the restart
    engine = restart(engine)
    assert [s.available_credit for s in engine.selectors("q")] == [4]


def test_shrinking_history_deletes_its_rows_and_frees_their_bodies(sql_engine) -> None:
    engine = sql_engine()
    engine.queue_create("q", history=5)
    engine.selector_create("q").when_always().do_delete().enable()
    engine.publish_many("q", [Message(body=b"%d" % n) for n in range(8)])
    engine.queue_update("q", history=1)
    store = engine.backend("db")
    assert store.db.query("SELECT seq FROM xump_entry") == [(8,)]
    assert store.db.query("SELECT body, refs FROM xump_body") == [(b"7", 1)]


def test_the_database_holds_what_memory_holds_after_every_kind_of_change(sql_engine) -> None:
    engine = sql_engine()
    engine.queue_create("dead", history=10)
    engine.queue_create("in", history=3, dead_letter="dead")
    engine.queue_create("out", history=3, self_destruct=True)
    engine.selector_create("in").when_filter("n > 5").do_delete().enable()
    engine.selector_create("in").when_always().do_move("out").set_credit(2).enable()
    engine.selector_create("out").when_always().do_deliver("app").enable()
    sent = engine.publish_many("in", [Message(body=b"%d" % n, headers={"n": n})
                                      for n in range(10)])  # fmt: skip
    engine.reject(sent[0], requeue=False)
    engine.reject(sent[1], requeue=True)
    engine.expire(0)
    engine.selector_delete("out", 1)  # out destroys itself; its messages settle upstream
    before = observe(engine)
    assert observe(restart(engine)) == before


# The same scenario on the RAM store and on a SQL store (restarted halfway) gives the same
# deliveries and leaves the same observable state.


def seen(deliveries) -> list[tuple]:
    return [(d.queue, d.destination, d.message.body, d.message.seq, d.redelivered,
             d.delivery_count) for d in deliveries]  # fmt: skip


def wolfpack_scenario(engine: Engine, restart_here) -> tuple[list, Engine]:
    log = []
    wolfpack(engine, "jobs", "w1", credit=2)
    wolfpack(engine, "jobs", "w2", credit=2)
    out = engine.publish_many("jobs", [Message(body=b"job %d" % n) for n in range(9)])
    log += seen(out)
    engine = restart_here(engine)
    log += seen(engine.resume())
    log += seen(engine.confirm(out[0].tag))
    log += seen(engine.reject(out[1].tag, requeue=True))
    log += seen(engine.confirm_many([d.tag for d in out[2:4]]))
    return log, engine


def parrot_and_housecat_scenario(engine: Engine, restart_here) -> tuple[list, Engine]:
    log = []
    parrot(engine, "ann", "news.*")
    parrot(engine, "bob", "news.#")
    housecat(engine, "cat")
    for address in ("news.eu", "news.eu.fr", "sport"):
        log += seen(engine.publish("parrot", Message(address=address, body=address.encode())))
    log += seen(engine.publish("housecat", Message(address="cat", body=b"for the cat")))
    engine = restart_here(engine)
    log += seen(engine.publish("parrot", Message(address="news.us", body=b"after")))
    log += seen(engine.publish("housecat", Message(address="dog", body=b"nobody's")))
    return log, engine


def move_chain_scenario(engine: Engine, restart_here) -> tuple[list, Engine]:
    log = []
    for name in ("a", "b", "c"):
        engine.queue_create(name, history=5)
    engine.selector_create("a").when_always().do_move("b").set_credit(1).enable()
    engine.selector_create("b").when_always().do_move("c").set_credit(1).enable()
    engine.selector_create("c").when_always().do_deliver("end").enable()
    out = engine.publish_many("a", [Message(body=b"m%d" % n) for n in range(4)])
    log += seen(out)
    engine = restart_here(engine)
    while out:  # each confirmation at the end of the chain lets the next one through
        out = engine.confirm(out[0].tag)
        log += seen(out)
    return log, engine


def reject_and_dead_letter_scenario(engine: Engine, restart_here) -> tuple[list, Engine]:
    log = []
    engine.queue_create("dead", history=10)
    engine.queue_create("q", history=5, dead_letter="dead")
    engine.selector_create("q").when_always().do_deliver("app").set_credit(3).enable()
    out = engine.publish_many("q", [Message(body=b"m%d" % n, headers={"n": n})
                                    for n in range(5)])  # fmt: skip
    log += seen(out)
    log += seen(engine.reject(out[0].tag, requeue=False))
    redelivered = engine.reject(out[1].tag, requeue=True)
    log += seen(redelivered)
    engine = restart_here(engine)
    log += seen(engine.expire(0))
    log += [(m.address, dict(m.headers), m.body) for m in engine.browse("dead")]
    return log, engine


def history_scenario(engine: Engine, restart_here) -> tuple[list, Engine]:
    engine.queue_create("h", history=50)
    engine.selector_create("h").when_always().do_delete().enable()
    engine.publish_many("h", [Message(body=b"%d" % n) for n in range(80)])
    engine = restart_here(engine)
    log = [m.seq for m in engine.browse("h", count=7)]
    log += [m.seq for m in engine.browse("h", start="oldest", count=7)]
    log += [m.seq for m in engine.browse("h", before=40, count=5)]
    log += [m.seq for m in engine.browse("h", after=70, count=100)]
    return log, engine


SCENARIOS = [
    wolfpack_scenario,
    parrot_and_housecat_scenario,
    move_chain_scenario,
    reject_and_dead_letter_scenario,
    history_scenario,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_a_scenario_on_a_sql_store_restarted_halfway_matches_the_ram_store(
    scenario, sql_engine
) -> None:
    expected_log, ram_engine = scenario(Engine(), lambda engine: engine)
    log, engine = scenario(sql_engine(), restart)
    assert log == expected_log
    assert observe(engine) == observe(ram_engine)
    assert observe(restart(engine)) == observe(ram_engine)


# -- failures -------------------------------------------------------------------------------


def test_an_unreachable_database_raises_store_error_with_the_password_masked() -> None:
    engine = Engine()
    for url in ("postgresql://xump:s3cret@127.0.0.1:1/xump",
                "postgresql://xump@127.0.0.1:1/xump?password=s3cret"):  # fmt: skip
        with pytest.raises(StoreError) as raised:
            engine.store_create("sql", "pg", url=url)
        assert "s3cret" not in str(raised.value)
        assert "***" in str(raised.value)
        assert "check that PostgreSQL runs" in str(raised.value)
    assert [store.name for store in engine.stores()] == ["ram"]


def test_urls_the_store_cannot_use_are_refused(tmp_path) -> None:
    for url in ("mysql://x/y", "", f"sqlite:///{tmp_path}/x.db?journal=off",
                f"sqlite:///{tmp_path}/x.db?synchronous=off"):  # fmt: skip
        with pytest.raises(StoreError):
            SqlStore("db", url)


def test_synchronous_normal_is_a_choice_in_the_url(tmp_path) -> None:
    store = SqlStore("db", f"sqlite:///{tmp_path}/x.db?synchronous=normal")
    assert store.db.connection.execute("PRAGMA synchronous").fetchone() == (1,)
    assert (tmp_path / "x.db").exists()
    store.close()


def test_mask_password_hides_the_password_and_nothing_else() -> None:
    assert mask_password("postgresql://u:pw@h:5/d?sslmode=require") == (
        "postgresql://u:***@h:5/d?sslmode=require"
    )
    assert mask_password("postgresql://u@h/d?password=pw") == "postgresql://u@h/d?password=***"
    assert mask_password("sqlite:///var/x.db") == "sqlite:///var/x.db"


def test_a_commit_that_fails_is_written_with_the_next_one(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/x.db"
    engine = Engine()
    engine.store_create("sql", "db", url=url)
    engine.queue_create("q", store="db", history=10)
    engine.selector_create("q").when_always().do_delete().enable()
    engine.backend("db").db.connection.execute("PRAGMA busy_timeout = 50")
    other = sqlite3.connect(f"{tmp_path}/x.db", isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    with pytest.raises(StoreError, match=r"database is locked.*written with the next commit"):
        engine.publish("q", Message(body=b"a"))
    other.execute("ROLLBACK")
    engine.publish("q", Message(body=b"b"))
    engine = restart(engine)
    assert [m.body for m in engine.browse("q", start="oldest")] == [b"a", b"b"]
    assert engine.stats("q")["published"] == 2


def test_a_lost_postgresql_connection_is_opened_again(postgres_schema_url) -> None:
    import psycopg

    engine = Engine()
    engine.store_create("sql", "db", url=postgres_schema_url)
    engine.queue_create("q", store="db")
    engine.selector_create("q").when_always().do_deliver("app").enable()
    first = engine.publish("q", Message(body=b"before"))
    store = engine.backend("db")
    lost = store.db.connection.info.backend_pid
    with psycopg.connect(postgres_url(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (lost,))
    second = engine.publish("q", Message(body=b"after"))
    assert store.db.connection.info.backend_pid != lost
    engine = restart(engine)
    engine.confirm_many([first[0].tag, second[0].tag])
    assert engine.stats("q")["confirmed"] == 2


def test_a_second_engine_writing_the_same_store_fences_the_first(sql_engine) -> None:
    engine = sql_engine()
    engine.queue_create("q")
    engine.selector_create("q").when_always().do_deliver("app").enable()
    [delivery] = engine.publish("q", Message(body=b"once"))
    newer = Engine(catalog=engine.catalog)  # the store taken over while the first runs on
    newer.confirm(delivery.tag)
    with pytest.raises(StoreError, match="written by another process"):
        engine.publish("q", Message(body=b"lost"))
    newer = restart(newer)
    assert newer.stats("q")["confirmed"] == 1
    assert newer.stats("q")["published"] == 1


def test_processes_opening_a_new_postgresql_database_at_once_all_open_it(
    postgres_schema_url,
) -> None:
    """The stores of several processes that start together on a database nobody used yet
    each make the tables (CREATE ... IF NOT EXISTS): on PostgreSQL two such statements at
    once can fail (a duplicate row in pg_type), so one process's start failed now and then
    (seen in the suite on a fresh database). The schema is made under an advisory lock."""
    import threading

    start = threading.Barrier(8)
    failures: list[BaseException] = []
    threads = [threading.Thread(target=_open_at_once,
                                args=(n, postgres_schema_url, start, failures))
               for n in range(8)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures


def _open_at_once(n: int, url: str, start, failures: list) -> None:
    start.wait()
    try:
        SqlStore(f"s{n}", url).close()
    except BaseException as problem:
        failures.append(problem)
