"""Processes sharing a Redis store through the relay: one owner routes under the store's
lease; clients publish and confirm through the inbox and take deliveries from outboxes."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from engine import Engine, Message
from engine.errors import StoreError
from engine.relay import RelayClient, RelayOwner
from tests.engine.conftest import drop_redis_keys

PROCESSES = Path(__file__).with_name("relay_processes.py")


@pytest.fixture
def shared(redis_server):
    name = f"t{uuid.uuid4().hex[:12]}"
    client = redis.Redis.from_url(redis_server.url)
    client.delete("results", "stop")
    yield redis_server.url, name
    drop_redis_keys(redis_server.url, name)
    client.delete("results", "stop")


def start(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(PROCESSES), *args], stdout=subprocess.PIPE, text=True
    )


def wait_ready(process: subprocess.Popen) -> None:
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"


def wait_until(condition, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def owner_engine(url: str, name: str, **options) -> tuple[Engine, RelayOwner]:
    engine = Engine()
    engine.store_create("redis", name, url=url)
    engine.set_default_store(name)
    relay = RelayOwner(engine, name, owner="test", lease_ms=2000, **options)
    assert relay.acquire(timeout=5)
    return engine, relay


@contextmanager
def serving_app_queue(url: str, name: str, **options):
    """An owner in a thread of this process, routing queue "q" to destination "app"."""
    engine, relay = owner_engine(url, name, **options)
    engine.queue_create("q")
    engine.selector_create("q").when_always().do_deliver("app").enable()
    stop = threading.Event()
    serving = threading.Thread(target=relay.serve, args=(stop,))
    serving.start()
    try:
        yield engine, relay
    finally:
        stop.set()
        serving.join()


def test_clients_publish_and_confirm_through_the_owner(shared) -> None:
    url, name = shared
    with serving_app_queue(url, name) as (engine, relay):
        client = RelayClient(url, name)
        client.publish_many("q", [Message(body=str(n).encode()) for n in range(100)])
        got = []
        while len(got) < 100:
            got.extend(client.deliveries("app", count=50, wait=5))
        assert [int(d.message.body) for d in got] == list(range(100))
        client.confirm(got)
        client.confirm(["q:1:nonsense.1"])  # a bad tag is noted, not fatal
        wait_until(lambda: engine.stats("q")["confirmed"] == 100, 10)
        wait_until(lambda: redis.Redis.from_url(url).llen(relay.errors) == 1, 10)


def test_a_second_owner_waits_for_the_lease_and_a_stale_one_cannot_write(shared) -> None:
    url, name = shared
    first, _first_relay = owner_engine(url, name)
    second = Engine()
    second.store_create("redis", name, url=url)
    assert not RelayOwner(second, name, owner="second", lease_ms=500).acquire(timeout=0.3)
    first.queue_create("q")
    time.sleep(2.2)  # the first owner stalls past its lease...
    assert RelayOwner(second, name, owner="second", lease_ms=5000).acquire(timeout=1)
    with pytest.raises(StoreError, match="lost the lease"):
        first.publish("q", Message(body=b"late"))  # ...and can no longer write


def test_killed_owner_mid_batch_second_owner_delivers_every_message_exactly_once(
    shared,
) -> None:
    url, name = shared
    client = RelayClient(url, name)
    total = 20_000
    for start_at in range(0, total, 100):
        client.publish_many("jobs", [Message(body=str(n).encode())
                                     for n in range(start_at, start_at + 100)])  # fmt: skip
    notes = redis.Redis.from_url(url)
    outbox = f"xump:{{{name}}}:outbox:w1"
    first = start("owner", url, name, "w1", "1")
    wait_ready(first)
    wait_until(lambda: notes.llen(outbox) >= 3_000)
    first.kill()  # kill -9 in the middle of routing the batch
    first.wait()
    assert notes.llen(outbox) < total
    second = start("owner", url, name, "w1", "1")
    try:
        wait_ready(second)
        wait_until(lambda: notes.llen(outbox) >= total)
        time.sleep(0.3)
        bodies = [int(d.message.body) for d in client.waiting("w1")]
        assert len(bodies) == total
        assert sorted(bodies) == list(range(total))  # every message once, none twice
        assert bodies == list(range(total))  # and in order
    finally:
        second.terminate()
        second.wait()


def test_two_publishers_two_confirmers_share_a_wolfpack_without_loss_or_duplicates(
    shared,
) -> None:
    url, name = shared
    notes = redis.Redis.from_url(url)
    owner = start("owner", url, name, "w1,w2", "50")
    wait_ready(owner)
    confirmers = [start("confirmer", url, name, worker) for worker in ("w1", "w2")]
    publishers = [start("publisher", url, name, who, "10000") for who in ("p1", "p2")]
    try:
        for process in publishers:
            assert process.wait(timeout=120) == 0
        wait_until(lambda: notes.llen("results") >= 20_000)
        notes.set("stop", 1)
        for process in confirmers:
            process.wait(timeout=30)
        results = [raw.decode() for raw in notes.lrange("results", 0, -1)]
        seen = [r.split(":", 1)[1] for r in results]
        assert len(seen) == len(set(seen)) == 20_000
        assert set(seen) == {f"{p}:{n}" for p in ("p1", "p2") for n in range(10_000)}
        for worker in ("w1", "w2"):
            mine = [r.split(":")[1:] for r in results if r.startswith(worker + ":")]
            assert mine, f"{worker} got nothing"
            for publisher in ("p1", "p2"):
                numbers = [int(n) for p, n in mine if p == publisher]
                assert numbers == sorted(numbers)  # FIFO per worker
        assert redis.Redis.from_url(url).llen(f"xump:{{{name}}}:errors") == 0
    finally:
        owner.terminate()
        owner.wait()
        for process in confirmers + publishers:
            process.kill()
            process.wait()


def test_a_delivery_nobody_confirms_comes_back_after_the_timeout(shared) -> None:
    url, name = shared
    with serving_app_queue(url, name, delivery_timeout=1.0) as (engine, _):
        client = RelayClient(url, name)
        client.publish("q", Message(body=b"lost"))
        [first] = client.deliveries("app", wait=5)  # ...and the client "dies" holding it
        assert not first.redelivered
        [again] = client.deliveries("app", wait=5)
        assert (again.message.body, again.redelivered, again.delivery_count) == (b"lost", True, 2)
        client.confirm([again])
        wait_until(lambda: engine.stats("q")["confirmed"] == 1, 10)
