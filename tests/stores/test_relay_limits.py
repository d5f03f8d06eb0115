"""Back-pressure on a shared Redis store: a bounded inbox refuses publishes (InboxFull) but
never settlements, and a Redis at `maxmemory` refuses them with StoreFull; either way what
was acknowledged is kept and what was refused is not stored."""

from __future__ import annotations

import json
import threading
import uuid
from base64 import b64decode

import pytest
import redis

from engine import Engine, Message
from engine.errors import InboxFull, StoreFull
from engine.relay import RelayClient, RelayRouter
from tests.conftest import RedisServer
from tests.engine.conftest import drop_redis_keys


@pytest.fixture
def store(redis_server):
    name = f"t{uuid.uuid4().hex[:12]}"
    yield redis_server.url, name
    drop_redis_keys(redis_server.url, name)


def inbox(url: str, name: str) -> list[dict]:
    client = redis.Redis.from_url(url)
    return [json.loads(raw) for raw in client.lrange(f"xump:{{{name}}}:inbox", 0, -1)]


def test_publishes_past_the_inbox_limit_are_refused_and_settlements_are_not(store):
    url, name = store
    client = RelayClient(url, name, inbox_limit=3)
    for n in range(3):
        client.publish("q", Message(body=str(n).encode()))
    with pytest.raises(InboxFull, match="holds 3 commands"):
        client.publish("q", Message(body=b"refused"))
    with pytest.raises(InboxFull):
        client.publish_many("q", [Message(body=b"a"), Message(body=b"b")])
    with pytest.raises(InboxFull):
        client.publish_applied("q", [Message(body=b"c")], timeout=1)
    client.confirm(["q:1:1.1"])  # settlements go in all the same: they let the router drain
    client.reject("q:1:1.2")
    assert [command["op"] for command in inbox(url, name)] == ["publish"] * 3 + [
        "confirm", "reject"]  # fmt: skip

    engine = Engine()
    engine.store_create("redis", name, url=url)
    engine.set_default_store(name)
    engine.queue_create("q")
    router = RelayRouter(engine, name, name="test", lease_ms=2000)
    assert router.acquire(timeout=5)
    router.run_once()
    client.publish("q", Message(body=b"3"))  # room again
    router.run_once()
    assert engine.queue_fetch("q").depth == 4
    client.close()


def test_a_publish_refused_by_the_bound_is_never_stored_and_an_accepted_one_always_is(store):
    url, name = store
    client = RelayClient(url, name, inbox_limit=50)
    accepted: list[str] = []
    refused: list[str] = []
    lock = threading.Lock()

    def publish(thread: int) -> None:
        for n in range(40):
            body = f"{thread}-{n}"
            try:
                client.publish("q", Message(body=body.encode()))
                outcome = accepted
            except InboxFull:
                outcome = refused
            with lock:
                outcome.append(body)
            if n % 5 == 0:
                client.confirm([f"q:1:x.{thread}.{n}"])  # never refused, in the same batches

    threads = [threading.Thread(target=publish, args=(t,)) for t in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    commands = inbox(url, name)
    stored = [
        b64decode(m["body"]).decode()
        for c in commands if c["op"] == "publish" for m in c["messages"]
    ]  # fmt: skip
    assert sorted(stored) == sorted(accepted)
    assert refused and len(commands) >= 50  # the bound counts every command
    assert sum(c["op"] == "confirm" for c in commands) == 8 * 8
    client.close()


def test_a_redis_at_maxmemory_refuses_publishes_with_store_full_and_loses_nothing(tmp_path):
    server = RedisServer(tmp_path)
    server.start()
    try:
        admin = redis.Redis(port=server.port)
        used = admin.info("memory")["used_memory"]
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", used + 2 * 1024 * 1024)
        client = RelayClient(server.url, "main", inbox_limit=1_000_000)
        accepted = 0
        with pytest.raises(StoreFull, match=r"out of memory \(maxmemory reached\)"):
            while accepted < 10_000:
                client.publish("q", Message(body=b"x" * 20_000))
                accepted += 1
        assert 10 < accepted < 10_000
        admin.config_set("maxmemory", 0)
        engine = Engine()
        engine.store_create("redis", "main", url=server.url)
        engine.set_default_store("main")
        engine.queue_create("q")
        router = RelayRouter(engine, "main", name="test", lease_ms=2000)
        assert router.acquire(timeout=5)
        while router.run_once():
            pass
        assert engine.queue_fetch("q").depth == accepted
        client.close()
    finally:
        server.stop()
