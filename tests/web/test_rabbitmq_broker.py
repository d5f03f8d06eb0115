"""RabbitMQ as Celery's broker (XUMP_BROKER_URL=amqp://..., README: Configuration): a real
worker takes its routing tasks from RabbitMQ and routes, and nothing of Celery's is in
Redis. Runs against the RabbitMQ at localhost:5672, in a vhost of the test's own; skipped,
with the reason, where none answers (CI machines may have none)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import uuid
from contextlib import closing

import pytest
import redis
from celery import Celery

from engine import Message
from tests.conftest import RedisServer
from tests.web.conftest import delivering_queue, eventually, start_service, take_from_relay

RABBITMQ = ("localhost", 5672)


def rabbitmqctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["rabbitmqctl", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def vhost():
    """A RabbitMQ vhost of the test's own (guest may use it), deleted afterwards."""
    try:
        socket.create_connection(RABBITMQ, timeout=2).close()
    except OSError as error:
        pytest.skip(f"RabbitMQ is not reachable at localhost:5672 ({error}): apt-get install "
                    "rabbitmq-server to run this test")  # fmt: skip
    if shutil.which("rabbitmqctl") is None:
        pytest.skip("rabbitmqctl is not installed: the test cannot make a vhost of its own")
    name = f"xump-test-{uuid.uuid4().hex[:8]}"
    made = rabbitmqctl("add_vhost", name)
    if made.returncode != 0:
        pytest.skip(f"rabbitmqctl add_vhost failed: {made.stderr.strip()[-300:]}")
    try:
        allowed = rabbitmqctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
        assert allowed.returncode == 0, allowed.stderr
        yield name
    finally:
        rabbitmqctl("delete_vhost", name)


def celery_queue(vhost: str) -> tuple[int, int] | None:
    """(messages, consumers) of Celery's queue in the vhost, None while it does not exist."""
    listed = rabbitmqctl("list_queues", "-p", vhost, "--quiet", "--no-table-headers",
                         "name", "messages", "consumers")  # fmt: skip
    for line in listed.stdout.splitlines():
        name, messages, consumers = line.split()
        if name == "celery":
            return int(messages), int(consumers)
    return None


def test_a_worker_routes_with_rabbitmq_as_celerys_broker(tmp_path, vhost) -> None:
    (tmp_path / "redis").mkdir()
    (tmp_path / "service").mkdir()
    store_redis = RedisServer(tmp_path / "redis")  # its own: no other test's Celery keys
    store_redis.start()
    broker = f"amqp://guest:guest@localhost:5672/{vhost}"
    service = start_service(store_redis.url, tmp_path / "service", "worker",
                            XUMP_BROKER_URL=broker)  # fmt: skip
    app = Celery(broker=broker)
    try:
        store = service.env["XUMP_STORE"]
        # a routing task waits in RabbitMQ while no worker runs ...
        app.send_task("xumpweb.router.tasks.route", args=[store])
        assert celery_queue(vhost) == (1, 0)
        # ... and the worker takes it from there
        service.start_worker()
        eventually(lambda: celery_queue(vhost) == (0, 1), "the worker to take the task",
                   within=120, every=0.5)  # fmt: skip

        with closing(service.relay()) as relay:
            queue, destination = delivering_queue(relay)
            relay.publish_many(queue, [Message(body=b"%d" % n) for n in range(20)])
            app.send_task("xumpweb.router.tasks.route", args=[store])  # a kick, as the web's
            found = take_from_relay(relay, destination, 20, within=60)
            assert [d.message.body for d in found] == [b"%d" % n for n in range(20)]

        client = redis.Redis.from_url(store_redis.url)
        celery_keys = [key for key in client.keys("*") if b"kombu" in key or b"celery" in key
                       or key.startswith((b"unacked", b"_kombu"))]  # fmt: skip
        assert celery_keys == []
        client.close()
    finally:
        app.close()
        service.close()
        store_redis.stop()
