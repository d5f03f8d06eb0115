"""Rings that carry the commands (engine/relay's package doc): every append to an inbox is
counted and rings the doorbell with what it appended, so a router that listens takes those
commands without reading the inbox; a ring missed or an append not counted never puts a
command out of order, applies one twice or takes one off unapplied."""

from __future__ import annotations

import time
from contextlib import closing

import pytest
import redis

from engine import Message
from engine.errors import GapMoved
from engine.relay import RING_CARRIES, RelayClient, pushed_key, relay_keys, ring_commands
from tests.stores.test_redis_relay import app_router


def listening(url: str, channel: str) -> redis.client.PubSub:
    rings = redis.Redis.from_url(url).pubsub(ignore_subscribe_messages=True)
    rings.subscribe(channel)
    return rings


def rings_of(rings: redis.client.PubSub, count: int) -> list[bytes]:
    """The next `count` rings (each within a generous deadline)."""
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < count:
        assert time.monotonic() < deadline, "no ring came"
        ring = rings.get_message(timeout=1)  # None for the subscription's own message
        if ring is not None:
            got.append(ring["data"])
    return got


def bodies(client: RelayClient) -> list[str]:
    return [d.message.body.decode() for d in client.deliveries("app", count=100, wait=0)]


def ringing_client(url: str, name: str) -> RelayClient:
    client = RelayClient(url, name)
    client.ring = f"bell:{name}"
    return client


def test_a_ring_carries_the_count_and_the_commands_it_appended(shared) -> None:
    url, name = shared
    rings = listening(url, f"bell:{name}")
    with closing(ringing_client(url, name)) as client:
        client.publish_many("q", [Message(body=b"one"), Message(body=b"two")])
        client.publish("q", Message(body=b"three"))
        first, second = rings_of(rings, 2)
        inbox = redis.Redis.from_url(url).lrange(relay_keys(name)[0], 0, -1)
        assert ring_commands(first) == (1, inbox[:1])
        assert ring_commands(second) == (2, inbox[1:])
        assert int(redis.Redis.from_url(url).get(pushed_key(name))) == 2
        # a bigger append rings empty: the router reads the inbox for it
        client.publish("q", Message(body=b"x" * (RING_CARRIES + 1)))
        assert rings_of(rings, 1) == [b""]
        assert int(redis.Redis.from_url(url).get(pushed_key(name))) == 3


def test_a_router_takes_what_rings_carried_without_reading_the_inbox(shared) -> None:
    url, name = shared
    engine, router, _ = app_router(url, name)
    rings = listening(url, f"bell:{name}")
    with closing(ringing_client(url, name)) as client:
        assert router.run_once() == 0  # reads the (empty) inbox: it knows all of it now
        assert router.knows_inbox
        client.publish("q", Message(body=b"one"))
        client.publish("q", Message(body=b"two"))
        assert all(router.heard(ring) for ring in rings_of(rings, 2))
        raw = redis.Redis.from_url(url)
        assert router.run_once(head=False) == 2
        assert bodies(client) == ["one", "two"]
        assert engine.stats("q")["published"] == 2
        assert raw.llen(relay_keys(name)[0]) == 0
        # a ring of what a read of the inbox found already is not taken twice
        client.publish("q", Message(body=b"three"))
        assert router.run_once() == 1
        assert router.heard(rings_of(rings, 1)[0])
        assert router.carried(10) == []
        assert router.run_once(head=False) == 0
        assert bodies(client) == ["three"]
        assert engine.stats("q")["published"] == 3


def test_a_missed_ring_makes_the_router_read_the_inbox(shared) -> None:
    url, name = shared
    _, router, silent = app_router(url, name)  # counted appends that ring nobody
    rings = listening(url, f"bell:{name}")
    with closing(ringing_client(url, name)) as client, closing(silent):
        router.run_once()
        silent.publish("q", Message(body=b"one"))
        client.publish("q", Message(body=b"two"))
        assert not router.heard(rings_of(rings, 1)[0])  # count 2 after 0: one missed
        assert not router.knows_inbox and router.carried(10) == []
        assert router.run_once() == 2
        assert bodies(client) == ["one", "two"]
        # and from that read on it knows the inbox again
        client.publish("q", Message(body=b"three"))
        assert router.heard(rings_of(rings, 1)[0])
        assert router.run_once(head=False) == 1
        assert bodies(client) == ["three"]


def test_an_append_not_counted_is_caught_by_the_commit_and_nothing_is_lost(shared) -> None:
    url, name = shared
    engine, router, _ = app_router(url, name)
    rings = listening(url, f"bell:{name}")
    raw = redis.Redis.from_url(url)
    with closing(ringing_client(url, name)) as client:
        router.run_once()
        # a hand-made RPUSH (or a process of an older release): in the inbox first
        sneaked = RelayClient(url, name).publish_command("q", [Message(body=b"sneaked")])[0]
        raw.rpush(relay_keys(name)[0], sneaked)
        client.publish("q", Message(body=b"rung"))
        assert router.heard(rings_of(rings, 1)[0])  # the count follows on: no gap seen
        assert router.carried(10) != raw.lrange(relay_keys(name)[0], 0, -1)
        with pytest.raises(GapMoved):
            router.run_once(head=False)  # would take "sneaked" off in place of "rung"
        # nothing of that step was written, and the router no longer trusts its rings
        assert raw.llen(relay_keys(name)[0]) == 2
        assert engine.stats("q")["published"] == 0
        assert bodies(client) == []
        assert not router.knows_inbox
        assert router.run_once() == 2  # it reads the inbox: in order, once each
        assert bodies(client) == ["sneaked", "rung"]
        client.publish("q", Message(body=b"later"))
        assert not router.heard(rings_of(rings, 1)[0])  # distrusted for a while
        assert router.run_once() == 1
        assert bodies(client) == ["later"]
        assert engine.stats("q")["published"] == 3


@pytest.mark.parametrize(
    "ring",
    [b"", b"arrival", b"=", b"=x\n1\na", b"=3", b"=3\n", b"=3\n5\nab", b"=3\n-1\na",
     b"=3\n1\nab", b"=3\n1\na\n", b"=3\n\n", b"\xff\xfe", b"=9" + b"9" * 5000 + b"\n1\na",
     b"=3\n99999999999999999999999\na"],
)  # fmt: skip
def test_a_ring_that_carries_nothing_readable_makes_the_router_read(shared, ring) -> None:
    url, name = shared
    _, router, client = app_router(url, name)
    with closing(client):
        router.run_once()
        assert not router.heard(ring)
        assert router.carried(10) == []
        client.publish("q", Message(body=b"one"))
        assert router.run_once() == 1
        assert bodies(client) == ["one"]
