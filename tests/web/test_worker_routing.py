"""Routing in Celery workers: a task per burst routes under the store's lease, and a worker
that takes over from another rebuilds the engine from the wiring and the store, so nothing
is lost or routed twice."""

from __future__ import annotations

from contextlib import closing

import pytest
from celery import Celery

from engine import Message
from tests.web.conftest import take_from_relay, unique


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
    second = take_from_relay(relay, destination, 100)
    assert [d.message.body for d in second] == [b"b%d" % n for n in range(100)]
    assert [d.message.seq for d in second] == list(range(101, 201))

    relay.confirm([d.tag for d in first + second])  # tags made by the first worker too
    kick()
    stats = relay.call("stats", queue=queue, timeout=30)
    assert stats["confirmed"] == 200 and stats["outstanding"] == 0
    assert stats["history_size"] == 200
    assert relay.client.llen(relay.errors) == 0
