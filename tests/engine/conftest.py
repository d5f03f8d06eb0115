"""Engines for the engine tests. Tests take their engine only from these fixtures, so the
same tests can run against every store."""

from __future__ import annotations

import uuid

import pytest

from engine import Engine
from tests.postgres import postgres_url

# "postgresql" runs only where a server answers (tests/postgres.py); CI makes sure one does.
# "redis" runs on the session's private redis-server (tests/conftest.py); "redis-cluster" on
# its private 3-node Redis Cluster, the queues placed over 4 stores (shards, SPEC §10) whose
# hash tags land on different nodes.
STORES = ["ram", "sqlite", "postgresql", "redis", "redis-cluster"]
SHARDS = 4


@pytest.fixture
def engine_on(tmp_path, request):
    """`engine_on(kind, **options)`: an engine whose queues live in a fresh store of `kind`
    unless a test names another. PostgreSQL stores get a unique name, so their rows are
    apart from every other test's, and are deleted afterwards."""
    made: list[Engine] = []

    def make(kind: str, **options) -> Engine:
        engine = Engine(**options)
        if kind == "sqlite":
            engine.store_create("sql", "db", url=f"sqlite:///{tmp_path}/xump.sqlite3")
            engine.set_default_store("db")
        elif kind == "postgresql":
            url = postgres_url()
            if url is None:
                pytest.skip("no PostgreSQL server answers (set XUMP_TEST_POSTGRES_URL)")
            name = f"t{uuid.uuid4().hex[:12]}"
            engine.store_create("sql", name, url=url)
            engine.set_default_store(name)
        elif kind == "redis":
            server = request.getfixturevalue("redis_server")
            name = f"t{uuid.uuid4().hex[:12]}"  # its own hash tag: keys apart from others
            engine.store_create("redis", name, url=server.url)
            engine.set_default_store(name)
        elif kind == "redis-cluster":
            cluster = request.getfixturevalue("redis_cluster")
            names = shard_names(cluster.url, SHARDS)
            for name in names:
                engine.store_create("redis", name, url=cluster.url)
            engine.set_default_store(names[0])
            engine.set_shards(names)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        for store in engine.stores():
            if store.kind == "sql" and store.url and store.url.startswith("postgresql"):
                drop_postgres_rows(store.url, store.name)
            elif store.kind == "redis":
                drop_redis_keys(store.url, store.name)


@pytest.fixture(params=STORES)
def store_kind(request) -> str:
    """The store the test runs on; a test that builds an engine of its own (other options)
    asks `engine_on(store_kind, ...)`, so it runs on every store too."""
    return request.param


@pytest.fixture
def eng(store_kind, engine_on) -> Engine:
    """The conformance fixture: every engine test runs once per store."""
    return engine_on(store_kind)


@pytest.fixture
def eng_dlq(store_kind, engine_on) -> Engine:
    """An engine whose unknown-queue publishes go to "$dead"."""
    return engine_on(store_kind, dead_letter="$dead")


def drop_postgres_rows(url: str, store: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        mids = connection.execute(
            "SELECT DISTINCT mid FROM xump_entry WHERE store = %s", (store,)
        ).fetchall()
        for table in ("xump_entry", "xump_selector", "xump_queue", "xump_store"):
            connection.execute(f"DELETE FROM {table} WHERE store = %s", (store,))
        for (mid,) in mids:
            connection.execute(
                "DELETE FROM xump_body WHERE mid = %s AND NOT EXISTS "
                "(SELECT 1 FROM xump_entry WHERE xump_entry.mid = %s)",
                (mid, mid),
            )


@pytest.fixture
def refused():
    """`refused(engine, Error, call, *args)`: the call raises Error with a message and the
    engine is exactly as it was before."""

    def check(engine: Engine, error, call, *args, match: str | None = None, **kwargs):
        before = snapshot(engine)
        with pytest.raises(error, match=match) as raised:
            call(*args, **kwargs)
        assert snapshot(engine) == before
        assert str(raised.value)
        return raised.value

    return check


def snapshot(engine: Engine) -> tuple:
    """Everything a user can observe of an engine's wiring and counts, to assert that a
    refused call changed nothing."""
    queues = engine.queues()
    return (
        queues,
        {q.name: engine.stats(q.name) for q in queues},
        {
            q.name: [
                (s.id, s.when, s.action, s.target, s.enabled, s.available_credit, s.start)
                for s in engine.selectors(q.name)
            ]
            for q in queues
        },
    )


def drop_redis_keys(url: str, store: str) -> None:
    """Delete the store's keys (on a cluster: on the node that serves its hash tag)."""
    from engine.stores.redis_connect import connect, node_client

    client, _ = connect(url)
    node = node_client(client, f"xump:{{{store}}}:")
    keys = list(node.scan_iter(match=f"xump:{{{store}}}:*", count=1000))
    if keys:
        node.delete(*keys)
    client.close()


def shard_names(url: str, count: int) -> list[str]:
    """`count` new store names whose hash tags land on the cluster's nodes in turn (so
    shards 1 to 3 are on three different nodes, and shard 4 on the first one again)."""
    from engine.stores.redis_connect import connect

    client, _ = connect(url)
    try:
        primaries = sorted(node.name for node in client.get_primaries())
        names: list[str] = []
        while len(names) < count:
            name = f"t{uuid.uuid4().hex[:12]}"
            node = client.get_node_from_key(f"xump:{{{name}}}:lease").name
            if node == primaries[len(names) % len(primaries)]:
                names.append(name)
        return names
    finally:
        client.close()
