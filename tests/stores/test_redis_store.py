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
from engine.stores.redis_connect import connect, node_client
from tests.conftest import RedisServer
from tests.engine.conftest import drop_redis_keys


@pytest.fixture(params=["server", "cluster"])
def store(request):
    """(URL, name) of a fresh store: on the private redis-server, then on the private Redis
    Cluster (tests/conftest.py)."""
    name = f"t{uuid.uuid4().hex[:12]}"
    fixture = "redis_server" if request.param == "server" else "redis_cluster"
    url = request.getfixturevalue(fixture).url
    yield url, name
    drop_redis_keys(url, name)


def node(url: str, name: str) -> redis.Redis:
    """A client of the server that holds the store's keys (on a cluster: its slot's node)."""
    client, _ = connect(url)
    return node_client(client, f"xump:{{{name}}}:")


def engine_on(url: str, name: str) -> Engine:
    engine = Engine()
    engine.store_create("redis", name, url=url)
    engine.set_default_store(name)
    return engine


@pytest.fixture
def engine(store) -> Engine:
    """An engine whose default store is `store`."""
    return engine_on(*store)


def bodies(url: str, name: str) -> list[bytes]:
    """The bodies hash: each body held by reference, after its count and a colon."""
    return list(node(url, name).hvals(f"xump:{{{name}}}:bodies"))


def test_a_body_copied_to_three_queues_is_stored_once_and_freed_with_its_last_copy(
    store, engine
) -> None:
    url, name = store
    engine.queue_create("src")
    for queue in ("a", "b", "c"):
        engine.queue_create(queue)
        engine.selector_create("src").when_always().do_copy(queue).enable()
    engine.publish("src", Message(body=b"shared"))
    assert bodies(url, name) == [b"3:shared"]
    engine.queue_delete("a")
    engine.queue_delete("b")
    assert bodies(url, name) == [b"1:shared"]
    engine.selector_create("c").when_always().do_delete().enable()
    assert bodies(url, name) == []


def test_a_body_held_by_one_entry_is_stored_in_that_entry(store, engine) -> None:
    url, name = store
    engine.queue_create("held")
    engine.publish("held", Message(body=b"alone"))
    client = node(url, name)
    [record] = client.lrange(f"xump:{{{name}}}:q:held:unprocessed", 0, -1)
    assert record.endswith(b"\nalone")
    assert bodies(url, name) == []


def test_a_body_shared_with_a_queue_not_opened_after_a_restart_is_kept_for_it(store) -> None:
    url, name = store
    first = engine_on(url, name)
    first.queue_create("src")
    for queue in ("a", "b"):
        first.queue_create(queue)
        first.selector_create("src").when_always().do_copy(queue).enable()
    first.publish("src", Message(body=b"shared"))
    assert bodies(url, name) == [b"2:shared"]

    second = engine_on(url, name)
    second.queue_create("a")  # "b" is not opened in this process
    second.selector_create("a").when_always().do_delete().enable()
    assert bodies(url, name) == [b"1:shared"]
    third = engine_on(url, name)
    third.queue_create("b")
    assert [m.body for m in third.peek("b")] == [b"shared"]


def test_addresses_with_control_characters_and_every_entry_field_survive_a_restart(
    store,
) -> None:
    url, name = store
    first = engine_on(url, name)
    first.queue_create("q", history=5)
    first.queue_create("down")
    first.selector_create("q").when_always().do_move("down").enable()
    message = Message(
        address="a\x1fb\nc", headers={"k": "v\x1e", "n": 2, "f": 1.5, "b": True},
        body=b"x\ny", return_address="",
    )  # fmt: skip
    first.publish("q", message)
    first.publish("down", Message(address="plain", return_address="r\x1f"))
    second = Engine(catalog=first.catalog)  # the same wiring, as a new process builds it
    [moved, plain] = second.peek("down", 10)
    assert (moved.address, dict(moved.headers), moved.body, moved.return_address) == (
        "a\x1fb\nc", {"k": "v\x1e", "n": 2, "f": 1.5, "b": True}, b"x\ny", "",
    )  # fmt: skip
    assert (plain.address, plain.return_address, plain.body) == ("plain", "r\x1f", b"")
    assert second.queue_fetch("q").outstanding == 1  # until its move is settled below
    second.selector_create("down").when_always().do_delete().enable()
    assert second.queue_fetch("q").outstanding == 0
    assert [m.body for m in second.browse("q")] == [b"x\ny"]


def test_every_key_carries_the_store_hash_tag(store, engine) -> None:
    url, name = store
    engine.queue_create("q", history=5)
    engine.selector_create("q").when_always().do_deliver("app").set_credit(1).enable()
    engine.publish_many("q", [Message(body=b"1"), Message(body=b"2")])
    every_node = connect(url)[0]  # a cluster client scans every node
    keys = [key.decode() for key in every_node.scan_iter(match=f"*{name}*")]
    assert keys and all(key.startswith(f"xump:{{{name}}}:") for key in keys)


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


def test_one_operation_with_thousands_of_writes_applies(store, engine) -> None:
    url, name = store
    engine.queue_create("q")
    engine.selector_create("q").when_always().do_deliver("app").enable()
    deliveries = engine.publish_many("q", [Message(body=b"x")] * 5000)
    assert len(deliveries) == 5000
    assert node(url, name).hlen(f"xump:{{{name}}}:q:q:entries") == 5000


def test_a_lost_server_raises_store_error_and_queues_in_other_stores_keep_working(
    tmp_path,
) -> None:
    server = RedisServer(tmp_path)
    server.start()
    try:
        engine = Engine()
        engine.store_create("redis", "shared", url=server.url)
        engine.queue_create("remote", store="shared")
        engine.queue_create("local")  # in the RAM store
        engine.selector_create("local").when_always().do_deliver("app").enable()
        engine.publish("remote", Message(body=b"before"))
        server.kill()

        with pytest.raises(StoreError) as raised:
            engine.publish("remote", Message(body=b"after"))
        assert server.url in str(raised.value)
        assert "check that redis-server runs" in str(raised.value)
        with pytest.raises(StoreError, match=r"check that redis-server runs"):
            engine.queue_create("another", store="shared")
        [delivery] = engine.publish("local", Message(body=b"still here"))
        assert engine.confirm(delivery) == []
        assert engine.stats("local")["confirmed"] == 1
    finally:
        server.stop()


def test_a_server_that_forgot_the_scripts_gets_them_again(store, engine) -> None:
    url, name = store
    engine.queue_create("q")
    engine.publish("q", Message(body=b"1"))
    node(url, name).script_flush()  # as after a restart without the old cache
    engine.publish("q", Message(body=b"2"))
    again = engine_on(url, name)
    again.queue_create("q")  # opened: its state loads from Redis
    assert [m.body for m in again.peek("q")] == [b"1", b"2"]


@pytest.mark.parametrize(
    "headers",
    [
        {"persistent": "true", "n": 3, "f": 0.1, "big": 1e16, "yes": True},
        {"text": "é ✓ \u2028", "controls": "a\x1fb\x1e\n"},
        {"says": "null", "u64": 2**64 - 1, "i64": -(2**63)},
        {"nan": float("nan"), "inf": float("-inf"), "huge": 2**70},  # only from inside
    ],
    ids=["plain", "unicode-and-controls", "null-text-and-64-bits", "what-json-alone-writes"],
)
def test_a_records_headers_read_back_as_json_wrote_them(headers) -> None:
    """A record's headers field (orjson when it writes them as json would) reads back with
    json.loads exactly as json.dumps's text does, and holds no separator character."""
    import json
    import math
    from types import MappingProxyType

    from engine.stores.redis import _SEP, _SUB, _encode, _headers_json

    text = _headers_json(MappingProxyType(headers))
    assert _SEP not in text and _SUB not in text
    read, expected = json.loads(text), json.loads(_encode(headers))
    assert read.keys() == expected.keys()
    for name, value in expected.items():
        same = value == read[name] or (math.isnan(value) and math.isnan(read[name]))
        assert same and type(value) is type(read[name]), name
