"""Databases for the store tests: a SQLite file per test, and on PostgreSQL a schema of the
test's own (created here, dropped afterwards), so nothing is shared with other tests."""

from __future__ import annotations

import uuid

import pytest
import redis

from engine import Engine
from tests.engine.conftest import drop_redis_keys
from tests.postgres import postgres_url


def with_search_path(url: str, schema: str) -> str:
    """`url` with its tables looked up and created in `schema`."""
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"


@pytest.fixture(params=["sqlite", "postgresql"])
def sql_url(request, tmp_path) -> str:
    """The URL of an empty SQL database: SQLite, then PostgreSQL where one answers."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/xump.sqlite3"
    return request.getfixturevalue("postgres_schema_url")


@pytest.fixture
def postgres_schema_url():
    """A PostgreSQL URL whose tables live in a new schema, dropped after the test."""
    url = postgres_url()
    if url is None:
        pytest.skip("no PostgreSQL server answers at 127.0.0.1:5432 (set XUMP_TEST_POSTGRES_URL)")
    import psycopg

    schema = f"xump_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'CREATE SCHEMA "{schema}"')
    yield with_search_path(url, schema)
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(f'DROP SCHEMA "{schema}" CASCADE')


@pytest.fixture
def sql_engine(sql_url):
    """`sql_engine()`: an engine whose default store "db" is a SQL store on `sql_url`."""

    def make() -> Engine:
        engine = Engine()
        engine.store_create("sql", "db", url=sql_url)
        engine.set_default_store("db")
        return engine

    return make


def restart(engine: Engine) -> Engine:
    """A new engine on the same wiring and stores, as a new process would build it; the old
    one lets go of its database connections."""
    for store in engine.stores():
        if store.kind == "sql":
            engine.backend(store.name).close()
    return Engine(catalog=engine.catalog)


def observe(engine: Engine) -> dict:
    """What a user can see of every queue: counts, waiting messages, history, selectors."""
    seen = {}
    for queue in engine.queues():
        name = queue.name
        seen[name] = (
            engine.stats(name),
            [_message(m) for m in engine.peek(name, 10_000)],
            [_message(m) for m in engine.browse(name, start="oldest", count=10_000)],
            [(s.id, s.available_credit, s.outstanding) for s in engine.selectors(name)],
        )
    return seen


def _message(message) -> tuple:
    return (message.seq, message.address, dict(message.headers), message.body,
            message.return_address)  # fmt: skip


@pytest.fixture
def shared(redis_server):
    """A Redis store of the test's own on the session's server (its URL and name), for
    the relay's processes to share; its keys are dropped afterwards."""
    name = f"t{uuid.uuid4().hex[:12]}"
    client = redis.Redis.from_url(redis_server.url)
    client.delete("results", "stop")
    yield redis_server.url, name
    drop_redis_keys(redis_server.url, name)
    client.delete("results", "stop")
