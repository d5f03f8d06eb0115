"""Crossing shards through Redis (docs/scaling.md): each shard a store of its own with its
own relay router; what one shard's step sends to another shard's queue goes on its
forward list in the step's commit, is carried to the other shard's inbox and applied
there exactly once, on one redis-server and on a 3-node Redis Cluster (the two shards on
different nodes)."""

from __future__ import annotations

import json
import random
import time
import uuid
from contextlib import closing

import pytest

from engine import Engine, Message
from engine.relay import RelayClient, RelayRouter, relay_keys
from engine.stores.redis_connect import connect
from tests.engine.conftest import drop_redis_keys
from tests.stores.test_redis_cluster import store_names
from tests.stores.test_redis_relay import start, wait_ready


@pytest.fixture(params=["server", "cluster"])
def shards(request):
    """(url, [shard a, shard b]) on one redis-server or on the cluster's first two nodes."""
    if request.param == "server":
        url = request.getfixturevalue("redis_server").url
        names = [f"t{uuid.uuid4().hex[:12]}" for _ in range(2)]
    else:
        cluster = request.getfixturevalue("redis_cluster")
        url, names = cluster.url, store_names(cluster, [0, 1])
    yield url, names
    for name in names:
        drop_redis_keys(url, name)


def router(url: str, shard: str, queues: list[str], remote: dict[str, str]) -> RelayRouter:
    """A relay router of `shard` holding its lease, its queues made, the other shard's
    queues its stand-ins."""
    engine = Engine()
    engine.store_create("redis", shard, url=url)
    engine.set_default_store(shard)
    relay = RelayRouter(engine, shard, name=f"test-{uuid.uuid4().hex[:6]}", lease_ms=5000)
    assert relay.acquire(timeout=10)
    for queue in queues:
        if queue not in {info.name for info in engine.queues()}:
            engine.queue_create(queue)
    engine.set_remote_queues(remote)
    return relay


def outbox(url: str, shard: str, destination: str) -> list[bytes]:
    client, _ = connect(url)
    try:
        return client.lrange(relay_keys(shard)[1] + destination, 0, -1)
    finally:
        client.close()


def inbox_length(url: str, shard: str) -> int:
    client, _ = connect(url)
    try:
        return client.llen(relay_keys(shard)[0])
    finally:
        client.close()


def copying(url: str, a: str, b: str) -> tuple[RelayRouter, RelayRouter]:
    """Routers of shard a, whose "orders" COPYs to b's "audit", and of shard b, where
    "audit" DELIVERs to "archive"."""
    left = router(url, a, ["orders"], {"audit": b})
    right = router(url, b, ["audit"], {"orders": a})
    left.engine.selector_create("orders").when_always().do_copy("audit").enable()
    right.engine.selector_create("audit").when_always().do_deliver("archive").enable()
    return left, right


def test_a_copy_to_another_shard_is_carried_and_delivered_there_once(shards) -> None:
    url, (a, b) = shards
    left, right = copying(url, a, b)
    with closing(RelayClient(url, a)) as client:
        client.publish_many("orders", [Message(body=b"1"), Message(body=b"2")])
    left.run_once()  # routes, writes two forwards, and carries them
    assert inbox_length(url, b) == 1  # one forwarded command
    right.run_once()
    assert [item.count(b'"body"') for item in outbox(url, b, "archive")] == [1, 1]
    assert right.engine.stats("audit")["published"] == 2
    assert left._backlog == 2  # carried, off the list at the router's next commit
    left.expire()  # a commit (each router makes one at least every second)
    assert left._backlog == 0 and left._carried == 0
    client, _ = connect(url)
    assert client.llen(f"xump:{{{a}}}:forward") == 0
    client.close()


def test_a_router_that_dies_before_the_trim_carries_again_and_nothing_arrives_twice(
    shards,
) -> None:
    url, (a, b) = shards
    first, right = copying(url, a, b)
    with closing(RelayClient(url, a)) as client:
        client.publish_many("orders", [Message(body=b"%d" % n) for n in range(5)])
    first.run_once()  # committed and carried; the trim waits for its next commit
    first.store.release_lease()  # it dies here: the trim never comes
    second = router(url, a, ["orders"], {"audit": b})
    second.run_once()  # nothing in its inbox: it carries what the list holds
    assert inbox_length(url, b) == 2  # the same forwards, carried twice
    right.run_once()
    assert len(outbox(url, b, "archive")) == 5  # applied once
    assert right.engine.stats("audit")["published"] == 5


def test_a_move_across_shards_flows_with_its_credit_and_settles_back(shards) -> None:
    url, (a, b) = shards
    left = router(url, a, ["jobs"], {"work": b})
    right = router(url, b, ["work"], {"jobs": a})
    left.engine.selector_create("jobs").when_always().do_move("work").set_credit(1).enable()
    right.engine.selector_create("work").when_always().do_deliver("worker").enable()
    got = []
    with closing(RelayClient(url, a)) as publisher, closing(RelayClient(url, b)) as worker:
        publisher.publish_many("jobs", [Message(body=b"%d" % n) for n in range(3)])
        for _ in range(3):
            left.run_once()  # one job goes (credit 1), carried to b
            right.run_once()
            (delivery,) = worker.deliveries("worker", count=10, wait=5)
            got.append(delivery.message.body)
            worker.confirm([delivery])
            right.run_once()  # the confirm settles the copy: a settle goes back to a
            left.run_once()  # the credit is back: the next job goes
    assert got == [b"0", b"1", b"2"]
    assert left.engine.stats("jobs")["depth"] == 0
    assert left.engine.selectors("jobs")[0].outstanding == 0


def test_a_forward_written_before_the_shard_went_in_front_is_still_carried(shards) -> None:
    """Forward list items used to hold their shard inside their JSON: one left on a list
    by a router of that time is carried and applied as before."""
    url, (a, b) = shards
    client, _ = connect(url)
    message = {"address": "", "headers": {}, "body": "b2xk", "return_address": None,
               "mid": "m-old", "seq": None, "timestamp": 1.0, "destination": None}  # fmt: skip
    old = {"n": 1, "shard": b, "queue": "audit", "message": message, "visited": ["orders"],
           "origin": None, "count": 0}  # fmt: skip
    client.rpush(f"xump:{{{a}}}:forward", json.dumps(old))
    client.set(f"xump:{{{a}}}:forward_seq", 1)
    client.close()
    left, right = copying(url, a, b)
    left.run_once()
    right.run_once()
    (item,) = outbox(url, b, "archive")
    assert json.loads(item)["message"]["mid"] == "m-old"


def test_a_malformed_forwarded_command_is_set_aside_and_changes_nothing(shards) -> None:
    url, (a, b) = shards
    right = router(url, b, ["audit"], {})
    client, _ = connect(url)
    good = {"n": 1, "queue": "audit", "visited": [], "origin": None, "count": 0,
            "message": {"address": "", "headers": {}, "body": "eA==",
                        "return_address": None}}  # fmt: skip
    for items in ([good, {"n": 2, "queue": "audit"}], "not a list", [{"n": "NaN"}]):
        command = {"op": "forwarded", "from": a, "items": items}
        client.rpush(relay_keys(b)[0], json.dumps(command))
    right.run_once()
    assert right.engine.stats("audit")["published"] == 0  # not even the good first item
    assert client.llen(relay_keys(b)[2]) == 3  # each in the errors list
    assert client.llen(relay_keys(b)[0]) == 0
    client.close()


def test_crossing_is_exactly_once_while_the_sending_router_is_killed_at_random(
    redis_server,
) -> None:
    """Shard a COPYs and MOVEs every message to shard b while a's router is killed with
    SIGKILL at random points, again and again (each time between any two of: its step's
    commit, the carry to b's inbox, the trim in its next commit), and started again: b
    delivers each message once at each destination, and a's MOVEs are all settled."""
    url = redis_server.url
    a, b = (f"t{uuid.uuid4().hex[:12]}" for _ in range(2))
    total, seed = 1500, random.randrange(1 << 30)
    chance = random.Random(seed)
    with closing(RelayClient(url, a)) as publisher:
        for start_at in range(0, total, 50):
            publisher.publish_many(
                "orders", [Message(body=b"%d" % n) for n in range(start_at, start_at + 50)]
            )
    processes = [start("crossing", url, "b", a, b)]
    got: dict[str, list] = {"w": [], "log": []}
    try:
        wait_ready(processes[0])
        for _ in range(6):
            killed = start("crossing", url, "a", a, b)
            wait_ready(killed)
            time.sleep(chance.uniform(0.02, 0.3))
            killed.kill()
            killed.wait()
        processes.append(start("crossing", url, "a", a, b))
        wait_ready(processes[-1])
        with closing(RelayClient(url, b)) as consumer:
            deadline = time.monotonic() + 120
            while (len(got["w"]) < total or len(got["log"]) < total) and (
                time.monotonic() < deadline
            ):
                for destination, found in got.items():
                    batch = consumer.deliveries(destination, count=500, wait=0.1)
                    consumer.confirm(batch)
                    found.extend(batch)
            for destination, found in got.items():
                found.extend(consumer.deliveries(destination, count=500, wait=0.5))
        client, _ = connect(url)
        deadline = time.monotonic() + 60  # b has carried every settle to a's inbox
        while client.llen(f"xump:{{{b}}}:forward") and time.monotonic() < deadline:
            time.sleep(0.05)
        client.close()
        for process in processes:
            process.terminate()
            process.wait()
        last = router(url, a, ["orders"], {"audit": b, "work": b})
        last.engine.selector_create("orders").when_always().do_copy("audit").enable()
        moving = last.engine.selector_create("orders").when_always().do_move("work")
        moving.enable()
        while last.run_once():  # the settles b sent
            pass
        assert moving.outstanding == 0, f"seed {seed}"
        last.store.release_lease()
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
                process.wait()
        for name in (a, b):
            client, _ = connect(url)
            errors = client.llen(relay_keys(name)[2])
            client.close()
            drop_redis_keys(url, name)
            assert errors == 0, f"shard {name}'s errors list (seed {seed})"
    for destination, found in got.items():
        first = sorted(int(d.message.body) for d in found if not d.redelivered)
        assert first == list(range(total)), f"{destination}: seed {seed}"
