"""SPEC §11's co-located path: with XUMP_STOMP_ROUTES=true, worker routing and one shard the
STOMP server routes the store while it runs (router/watch.py's preferred router) and hands
its SENDs to its own router, whose step is their one durable write (engine.relay.Handed).
Workers take routing over when it stops or dies, and give it back when it returns; a
RECEIPT still means durable and a MESSAGE still leaves only after the step that made it is
durable.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from tests.conftest import RedisServer
from tests.web.conftest import Service, eventually, start_service, unique
from tests.web.test_stomp_peers import _stomp_client

pytestmark = pytest.mark.slow
ROUTES = {"XUMP_STOMP_ROUTES": "true"}


def _service(redis_url: str, directory: Path) -> Service:
    running = start_service(redis_url, directory, "worker")
    running.start_worker()
    return running


@pytest.fixture(scope="module")
def colocated(redis_server, tmp_path_factory) -> Iterator[Service]:
    """The service with a Celery worker routing, on the session's redis-server."""
    running = _service(redis_server.url, tmp_path_factory.mktemp("colocated"))
    yield running
    running.close()


def holder(service: Service) -> str:
    """The name in the store's lease ("" when nobody holds it): the Celery worker's or
    `stomp@host` followed by the process and thread."""
    client = redis.Redis.from_url(service.env["XUMP_REDIS_URL"])
    token = client.get(f"xump:{{{service.env['XUMP_STORE']}}}:lease")
    return token.decode() if token else ""


def stomp_routes(service: Service) -> bool:
    return holder(service).startswith("stomp@")


def worker_routes(service: Service) -> bool:
    return bool(holder(service)) and not stomp_routes(service)


def delivered_over_http(service: Service, queue: str, body: str) -> None:
    """Publish `body` over HTTP and see it routed into `queue` (whoever routes)."""
    with service.client() as http:
        assert http.post(f"/api/queues/{queue}/publish", json={"body": body}).status_code == 202

        def routed() -> bool:
            waiting = http.get(f"/api/queues/{queue}/waiting").json()["messages"]
            return any(message["body"] == body for message in waiting)

        eventually(routed, f"{body!r} routed into {queue}", within=60)


def inbox_pushes(service: Service, action: Callable[[], None], op: str = "publish") -> list[str]:
    """The `op` commands ("publish", "confirm") pushed onto the store's inbox (directly or
    inside a script) while `action()` ran, as Redis's MONITOR showed them."""
    url, store = service.env["XUMP_REDIS_URL"], service.env["XUMP_STORE"]
    inbox, marker = f"xump:{{{store}}}:inbox", f"monitor-end-{uuid.uuid4().hex}"
    seen: list[str] = []
    ready = threading.Event()

    def watch() -> None:
        with redis.Redis.from_url(url).monitor() as monitor:
            ready.set()
            for command in monitor.listen():
                text = command["command"]
                if marker in text:
                    return
                pushed = text.split(" ", 1)[0].upper() in ("RPUSH", "LPUSH")
                if pushed and inbox in text and f'"{op}"' in text:
                    seen.append(text)

    watching = threading.Thread(target=watch, daemon=True)
    watching.start()
    assert ready.wait(30)
    action()
    redis.Redis.from_url(url).set(marker, "1", ex=60)
    watching.join(60)
    assert not watching.is_alive()
    return seen


def one_message_through(service: Service, port: int, queue: str) -> tuple:
    """Once the STOMP server on `port` routes: a subscriber of /queue/`queue` and a
    producer, and one message ("warm") sent, received and acked; (subscriber, producer)."""
    eventually(lambda: stomp_routes(service), "the STOMP server taking the lease", within=120)
    subscriber = _stomp_client(service, port, None)
    producer = _stomp_client(service, port, None)
    subscriber.subscribe(f"/queue/{queue}")
    producer.send(f"/queue/{queue}", "warm", receipt="r0")
    producer.receipt("r0")
    (warm,) = subscriber.take(1)
    assert warm.body == "warm"
    subscriber.ack(warm, receipt="a0")
    return subscriber, producer


def test_the_stomp_server_routes_while_it_runs_and_workers_take_over_when_it_goes(
    colocated,
) -> None:
    service = colocated
    eventually(lambda: worker_routes(service), "the worker routing", within=120)
    port = service.start_stomp("stomp-colocated", **ROUTES)
    queue = unique("co")
    subscriber, producer = one_message_through(service, port, queue)

    def send_and_take() -> None:
        producer.send(f"/queue/{queue}", "handed", receipt="r-handed")
        producer.receipt("r-handed")
        handed = subscriber.take(2)[1]
        assert handed.body == "handed"
        subscriber.ack(handed, receipt="a-handed")

    assert inbox_pushes(service, send_and_take) == []  # handed to the router in memory
    # and so are the acks: stepped on the STOMP server's event loop, as its SENDs are
    producer.send(f"/queue/{queue}", "acked", receipt="r-acked")
    producer.receipt("r-acked")
    acked = subscriber.take(3)[2]
    assert acked.body == "acked"
    ack = lambda: subscriber.ack(acked, receipt="a-acked")  # noqa: E731
    assert inbox_pushes(service, ack, op="confirm") == []
    # an HTTP publish goes through the inbox, which the STOMP server's router reads too
    parked = unique("parked")
    with service.client() as http:
        assert http.post("/api/queues", json={"name": parked}).status_code == 201
    assert inbox_pushes(service, lambda: delivered_over_http(service, parked, "through the inbox"))
    assert stomp_routes(service)

    service.stop("stomp-colocated")  # SIGTERM: it lets the lease go on its way out
    eventually(lambda: worker_routes(service), "a worker taking the lease over", within=60)
    delivered_over_http(service, parked, "after the STOMP server")

    port = service.start_stomp("stomp-colocated", port=port, **ROUTES)
    try:
        eventually(lambda: stomp_routes(service), "the STOMP server taking it back", within=60)
        again = _stomp_client(service, port, None)
        again.subscribe(f"/queue/{queue}")
        again.send(f"/queue/{queue}", "two", receipt="r2")
        again.receipt("r2")
        (second,) = again.take(1)
        assert second.body == "two"
    finally:
        service.stop("stomp-colocated")


def unconsumed_queue(service: Service, port: int, prefix: str) -> tuple[str, object]:
    """A queue whose mailbox exists and that nobody takes from, and a producer connected to
    the STOMP server on `port`."""
    queue = unique(prefix)
    producer = _stomp_client(service, port, None)
    producer.subscribe(f"/queue/{queue}")  # makes the mailbox; nobody takes from it here
    producer.connection.unsubscribe("1")
    return queue, producer


def assert_received_once(consumer, queue: str, receipted: set[str]) -> None:
    """`consumer` subscribes to `queue` (ack:auto): every receipted body comes, none twice."""
    consumer.subscribe(f"/queue/{queue}", ack="auto")
    consumer.take(len(receipted))
    time.sleep(0.5)  # a duplicate would come right behind
    bodies = [frame.body for frame in consumer.messages]
    assert len(bodies) == len(set(bodies))
    assert receipted <= set(bodies)


def test_a_killed_stomp_servers_lease_goes_to_a_worker_and_nothing_received_is_lost(
    colocated,
) -> None:
    """kill -9 of the routing STOMP server: every SEND it gave a RECEIPT for is delivered,
    once, after a worker takes the lease over (no beat runs here)."""
    service = colocated
    port = service.start_stomp("stomp-killed", **ROUTES)
    eventually(lambda: stomp_routes(service), "the STOMP server taking the lease", within=60)
    queue, producer = unconsumed_queue(service, port, "co")
    for n in range(50):
        producer.send(f"/queue/{queue}", f"m{n}", receipt=f"r{n}")
    producer.receipt("r49")
    receipted = {f"m{n}" for n in range(50) if f"r{n}" in producer.receipts}
    service.stop("stomp-killed", kill=True)
    eventually(lambda: worker_routes(service), "a worker taking the lease over", within=60)
    port = service.start_stomp("stomp-killed", port=port, **ROUTES)
    try:
        assert_received_once(_stomp_client(service, port, None), queue, receipted)
    finally:
        service.stop("stomp-killed")


def test_the_router_thread_keeps_its_turn_while_the_event_loop_steps_sends(colocated) -> None:
    """While SENDs keep the routing STOMP server's event loop stepping (each step holds
    the engine's lock until its commit is answered), its router thread still gets the lock
    for what only it routes: an HTTP publish, which comes through the inbox."""
    service = colocated
    port = service.start_stomp("stomp-busy", **ROUTES)
    queue, parked = unique("busy"), unique("parked")
    _, producer = one_message_through(service, port, queue)
    with service.client() as http:
        assert http.post("/api/queues", json={"name": parked}).status_code == 201
    stop = threading.Event()

    def flood() -> None:
        n = 0
        while not stop.is_set():
            producer.connection.send(f"/queue/{queue}", f"f{n}")
            n += 1

    flooding = threading.Thread(target=flood, daemon=True)
    flooding.start()
    try:
        for n in range(5):
            delivered_over_http(service, parked, f"through the inbox {n}")
    finally:
        stop.set()
        flooding.join(30)
        service.stop("stomp-busy")


def test_a_stomp_server_held_still_past_its_lease_delivers_each_receipted_send_once(
    colocated,
) -> None:
    """SIGSTOP of the routing STOMP server until a worker takes its lease, then SIGCONT and
    SENDs at once: its steps on the event loop are made against an engine whose lease is
    gone, so their commits are refused by the fence (nothing written) and the SENDs go to
    the inbox, where the worker routes them. Every SEND receipted is delivered once."""
    service = colocated
    port = service.start_stomp("stomp-held", **ROUTES)
    queue = unique("held")
    subscriber, producer = one_message_through(service, port, queue)
    process = service.processes["stomp-held"]
    os.kill(process.pid, signal.SIGSTOP)
    try:
        eventually(lambda: worker_routes(service), "a worker taking the lease", within=60)
    finally:
        os.kill(process.pid, signal.SIGCONT)
    for n in range(20):
        producer.send(f"/queue/{queue}", f"m{n}", receipt=f"r{n}")
    producer.receipt("r19")
    receipted = {f"m{n}" for n in range(20) if f"r{n}" in producer.receipts}
    assert receipted
    subscriber.take(1 + len(receipted))
    time.sleep(0.5)  # a duplicate would come right behind
    bodies = [frame.body for frame in subscriber.messages]
    assert len(bodies) == len(set(bodies))
    assert receipted <= set(bodies)
    service.stop("stomp-held")


@pytest.fixture
def own_redis(tmp_path) -> Iterator[tuple[Service, RedisServer]]:
    (tmp_path / "redis").mkdir()
    (tmp_path / "service").mkdir()
    redis_server = RedisServer(tmp_path / "redis")
    redis_server.start()
    running = _service(redis_server.url, tmp_path / "service")
    yield running, redis_server
    running.close()
    redis_server.stop()


def test_a_send_redis_never_made_durable_gets_no_receipt_and_sends_no_message(
    own_redis,
) -> None:
    """Redis held still (SIGSTOP) while the routing STOMP server takes a SEND: neither its
    RECEIPT nor its MESSAGE may come; both come, once, when Redis answers again."""
    service, redis_server = own_redis
    port = service.start_stomp("stomp-live", **ROUTES)
    queue = unique("live")
    subscriber, producer = one_message_through(service, port, queue)

    os.kill(redis_server.process.pid, signal.SIGSTOP)
    try:
        producer.send(f"/queue/{queue}", "held", receipt="r1")
        # whatever came now could only come from a step Redis has not made durable
        time.sleep(1.0)
        assert "r1" not in producer.receipts
        assert [m.body for m in subscriber.messages] == ["warm"]
    finally:
        os.kill(redis_server.process.pid, signal.SIGCONT)
    producer.receipt("r1")
    subscriber.take(2)
    assert [m.body for m in subscriber.messages] == ["warm", "held"]


def test_redis_killed_while_the_stomp_server_routes_loses_nothing_it_receipted(
    own_redis,
) -> None:
    """kill -9 of Redis (AOF, fsync always) while the routing STOMP server steps SENDs on
    its event loop, then Redis started again from its AOF: every SEND it gave a RECEIPT for
    is delivered, once (a commit whose answer was lost is failed to its publisher, never
    told durable), and routing goes on (the router, its commit failed, loads the store
    again)."""
    service, redis_server = own_redis
    port = service.start_stomp("stomp-redis-killed", **ROUTES)
    eventually(lambda: stomp_routes(service), "the STOMP server taking the lease", within=60)
    queue, producer = unconsumed_queue(service, port, "rk")
    for n in range(200):
        producer.connection.send(f"/queue/{queue}", f"m{n}", receipt=f"r{n}")
        if n == 100:
            redis_server.kill()  # SENDs on their way meet it
    receipted = {f"m{n}" for n in range(200) if f"r{n}" in producer.receipts}
    redis_server.start()  # the same port and AOF
    eventually(lambda: stomp_routes(service), "the STOMP server routing again", within=90)
    consumer = eventually(lambda: _stomp_client(service, port, None, quiet=True),
                          "a STOMP connection after the restart", within=60)  # fmt: skip
    assert_received_once(consumer, queue, receipted)
    service.stop("stomp-redis-killed")
