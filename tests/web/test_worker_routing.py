"""Routing in Celery workers: a task per burst routes under the store's lease, and a worker
that takes over from another rebuilds the engine from the wiring and the store, so nothing
is lost or routed twice."""

from __future__ import annotations

import time
from contextlib import closing

import pytest
from celery import Celery

from engine import Message
from tests.web.conftest import start_service, take_from_relay, unique, wait_for


@pytest.fixture
def relay(worker_service):
    with closing(worker_service.relay()) as client:
        yield client


@pytest.fixture
def kick(worker_service):
    """Schedule a routing task, as every web process does after sending commands."""
    app = Celery(broker=worker_service.env["XUMP_REDIS_URL"])
    store = worker_service.env["XUMP_STORE"]
    yield lambda: app.send_task("xumpweb.router.tasks.route", args=[store])
    app.close()


def test_a_second_worker_takes_over_where_the_first_stopped(worker_service, relay, kick):
    queue, destination = unique(), unique("d")
    kick()
    relay.call("queue_create", name=queue, history=1000)
    relay.call("selector_create", queue=queue, when="always", action="deliver",
               target=destination, enabled=True)  # fmt: skip
    relay.publish_many(queue, [Message(body=b"a%d" % n) for n in range(100)])
    kick()
    first = take_from_relay(relay, destination, 100)
    assert [d.message.body for d in first] == [b"a%d" % n for n in range(100)]

    worker_service.stop("worker")  # lets its lease go
    worker_service.start_worker("second")
    relay.publish_many(queue, [Message(body=b"b%d" % n) for n in range(100)])
    kick()
    # a generous deadline: the second worker boots first (over 30 s on a loaded machine)
    second = take_from_relay(relay, destination, 100, within=180)
    assert [d.message.body for d in second] == [b"b%d" % n for n in range(100)]
    assert [d.message.seq for d in second] == list(range(101, 201))

    relay.confirm([d.tag for d in first + second])  # tags made by the first worker too
    kick()
    stats = relay.call("stats", queue=queue, timeout=30)
    assert stats["confirmed"] == 200 and stats["outstanding"] == 0
    assert stats["history_size"] == 200
    assert relay.client.llen(relay.errors) == 0


def test_a_worker_routes_standing_and_keeps_the_lease_between_bursts(worker_service, relay):
    """SPEC §11: a lone message waits for no routing task. The worker's lease watch takes
    the lease and routes standing (router/watch.py): it keeps the lease past any linger
    and keeps the `kicked` flag set, so clients schedule no routing task."""
    from xumpweb.runtime import LINGER, keys

    store_keys = keys(worker_service.env["XUMP_STORE"])
    assert wait_for(lambda: relay.client.get(store_keys["lease"]), within=60), "no router"
    queue, destination = unique(), unique("d")
    relay.call("queue_create", name=queue)
    relay.call("selector_create", queue=queue, when="always", action="deliver",
               target=destination, enabled=True)  # fmt: skip
    relay.publish(queue, Message(body=b"first"))
    assert [d.message.body for d in take_from_relay(relay, destination, 1)] == [b"first"]
    assert wait_for(lambda: relay.client.ttl(store_keys["kicked"]) > 0, within=30)
    time.sleep(LINGER + 1)  # longer than a burst's router lingers: this one stays
    held = relay.client.get(store_keys["lease"])
    assert held, "the router let go"
    relay.publish(queue, Message(body=b"lone"))
    assert [d.message.body for d in take_from_relay(relay, destination, 1)] == [b"lone"]
    assert relay.client.get(store_keys["lease"]) == held


def _lease(client, store: str) -> tuple[int, int] | None:
    """The lease record of `store`: (pid of its holder, fencing number), or None when free.
    Its value is owner#fence, the owner host:pid:thread."""
    value = client.get(f"xump:{{{store}}}:lease")
    if value is None:
        return None
    owner, fence = value.decode().rsplit("#", 1)
    return int(owner.split(":")[1]), int(fence)


@pytest.mark.slow
def test_killing_the_routing_worker_without_beat_the_other_takes_the_lease_over(
    redis_server, tmp_path
):
    """Two workers, no beat: kill -9 of the worker whose router holds the lease (its task
    acknowledged late and the clients' kick flag left set, so no task comes for minutes).
    The other worker's lease watch takes the lease over once it expires: a message
    published after the kill is delivered, well within 4 lease times (not the broker's
    visibility timeout), and nothing published before it is lost or delivered twice."""
    service = start_service(redis_server.url, tmp_path, "worker")
    try:
        workers = {"first": service.start_worker("first"), "second": service.start_worker("second")}
        # both up before the first call (on a loaded machine a worker takes seconds to start)
        app = Celery(broker=service.env["XUMP_REDIS_URL"])
        try:
            assert wait_for(lambda: len(app.control.ping(timeout=1.0)) >= 2, within=120)
        finally:
            app.close()
        store = service.env["XUMP_STORE"]
        lease_time = int(service.env["XUMP_LEASE_MS"]) / 1000
        queue, destination = unique(), unique("d")
        published: list[str] = []
        with closing(service.relay()) as relay, service.client() as client:
            assert client.post("/api/queues", json={"name": queue}).status_code == 201
            made = client.post(f"/api/queues/{queue}/selectors", json={
                "when": "always", "action": "deliver", "target": destination,
                "enabled": True})  # fmt: skip
            assert made.status_code == 201, made.text

            def publish(body: str) -> None:
                answer = client.post(f"/api/queues/{queue}/publish", json={"body": body})
                assert answer.status_code == 202, answer.text
                published.append(answer.json()["mid"])

            delivered: list[str] = []

            def take(until: float) -> None:
                while time.monotonic() < until and not set(published) <= set(delivered):
                    found = relay.deliveries(destination, count=100, wait=0.2)
                    delivered.extend(d.message.mid for d in found)

            # traffic, so that a router holds the lease when its worker is killed
            for n in range(20):
                publish(f"before {n}")
                time.sleep(0.02)
            take(time.monotonic() + 30)
            assert set(published) <= set(delivered)
            publish("just before")
            before = wait_for(lambda: _lease(relay.client, store), within=10, every=0.01)
            assert before, "no router holds the lease under traffic"
            killed = next(name for name, p in workers.items() if p.pid == before[0])
            survivor = workers["second" if killed == "first" else "first"]
            service.stop(killed, kill=True)  # kill -9
            killed_at = time.monotonic()
            assert _lease(relay.client, store) == before  # the dead router's, until it expires

            publish("after the kill")
            take(killed_at + 4 * lease_time)
            assert set(published) <= set(delivered), "routing did not resume in 4 lease times"
            assert len(delivered) == len(set(delivered)), "a message was delivered twice"
            # the deliveries stay outstanding (never confirmed): a router keeps watching them
            after = wait_for(lambda: (found := _lease(relay.client, store))
                             and found[1] > before[1] and found, within=4 * lease_time)  # fmt: skip
            assert after and after[0] == survivor.pid, (before, after)
    finally:
        service.close()
