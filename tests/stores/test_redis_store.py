"""The Redis store on a private redis-server (AOF, fsync always): bodies stored once, and
every publish that returned survives a kill -9 of the server."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
import redis

from engine import Engine, Message
from engine.errors import StoreError
from tests.conftest import RedisServer
from tests.engine.conftest import drop_redis_keys


@pytest.fixture
def store(redis_server):
    name = f"t{uuid.uuid4().hex[:12]}"
    yield redis_server.url, name
    drop_redis_keys(redis_server.url, name)


def engine_on(url: str, name: str) -> Engine:
    engine = Engine()
    engine.store_create("redis", name, url=url)
    engine.set_default_store(name)
    return engine


def test_a_body_copied_to_three_queues_is_stored_once_and_freed_with_its_last_copy(
    store,
) -> None:
    url, name = store
    engine = engine_on(url, name)
    engine.queue_create("src")
    for queue in ("a", "b", "c"):
        engine.queue_create(queue)
        engine.selector_create("src").when_always().do_copy(queue).enable()
    engine.publish("src", Message(body=b"shared"))
    client = redis.Redis.from_url(url)
    assert list(client.hvals(f"xump:{{{name}}}:bodies")) == [b"shared"]
    assert list(client.hvals(f"xump:{{{name}}}:refs")) == [b"3"]
    engine.queue_delete("a")
    engine.queue_delete("b")
    assert list(client.hvals(f"xump:{{{name}}}:bodies")) == [b"shared"]
    assert client.hlen(f"xump:{{{name}}}:refs") == 0  # held once: no count kept
    engine.selector_create("c").when_always().do_delete().enable()
    assert client.hlen(f"xump:{{{name}}}:bodies") == 0
    assert client.hlen(f"xump:{{{name}}}:refs") == 0


def test_every_key_carries_the_store_hash_tag(store) -> None:
    url, name = store
    engine = engine_on(url, name)
    engine.queue_create("q", history=5)
    engine.selector_create("q").when_always().do_deliver("app").set_credit(1).enable()
    engine.publish_many("q", [Message(body=b"1"), Message(body=b"2")])
    keys = [key.decode() for key in redis.Redis.from_url(url).scan_iter(match=f"*{name}*")]
    assert keys and all(key.startswith(f"xump:{{{name}}}:") for key in keys)


def test_unreachable_redis_raises_store_error_with_the_password_masked() -> None:
    engine = Engine()
    with pytest.raises(StoreError) as raised:
        engine.store_create("redis", "r", url="redis://:hunter2@127.0.0.1:1/0")
    assert "hunter2" not in str(raised.value)
    assert "check" in str(raised.value)
    assert [s.name for s in engine.stores()] == ["ram"]


def test_publishes_that_returned_survive_kill_9_of_the_server(tmp_path) -> None:
    server = RedisServer(tmp_path)
    server.start()
    try:
        engine = engine_on(server.url, "crash")
        engine.queue_create("orders")
        accepted: list[int] = []
        killed = threading.Event()

        def kill_soon() -> None:
            time.sleep(0.3)
            server.kill()
            killed.set()

        threading.Thread(target=kill_soon).start()
        number = 0
        while True:
            try:
                engine.publish("orders", Message(body=str(number).encode()))
            except StoreError:
                break
            accepted.append(number)
            number += 1
        killed.wait()
        assert len(accepted) > 10

        server.start()  # the same directory: it replays its AOF
        survivor = engine_on(server.url, "crash")
        survivor.queue_create("orders")
        kept = [int(m.body) for m in survivor.peek("orders", count=len(accepted) + 10)]
        assert kept[: len(accepted)] == accepted
        assert len(kept) <= len(accepted) + 1  # at most the one in flight at the kill
    finally:
        server.stop()


def test_one_operation_with_thousands_of_writes_applies(store) -> None:
    url, name = store
    engine = engine_on(url, name)
    engine.queue_create("q")
    engine.selector_create("q").when_always().do_deliver("app").enable()
    deliveries = engine.publish_many("q", [Message(body=b"x")] * 5000)
    assert len(deliveries) == 5000
    assert redis.Redis.from_url(url).hlen(f"xump:{{{name}}}:q:q:entries") == 5000
