"""SPEC §11's promise, from the outside: a MESSAGE leaves only after the routing step that
made it is durable, so a step that Redis never made durable sends nothing (docs/live-path.md).

The router (the web process here: inline routing) is held still while a publish is made
durable; then Redis is stopped (SIGSTOP) and the router let go: it starts its step against
a Redis that cannot answer, and the subscriber, waiting in its claim, receives nothing.
Redis is then killed, still stopped, and started again from its AOF: the step never
happened, the publish did (its RECEIPT came), and the subscriber receives the message once,
not redelivered.

A subscriber with a selector (a filtering consumer, xumpweb/live/outbox.py) passing over
another's message at the head of its outbox: it reads the outbox again only when the outbox
changes, so while the router is held still Redis counts none of its looks but a safety one;
and Redis killed and started again while it waits does not leave it asleep: what is sent
after the restart reaches it.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
import redis

from tests.web.conftest import eventually, service_with_own_redis, unique
from tests.web.stomp_clients import Client
from tests.web.test_stomp_peers import _stomp_client


@pytest.fixture
def own_redis(tmp_path):
    yield from service_with_own_redis(tmp_path)


def test_a_step_redis_never_made_durable_sends_no_message(own_redis) -> None:
    service, redis_server = own_redis
    queue = unique("live")
    port = service.start_stomp("stomp-live")
    web = service.processes["server"]
    subscriber: Client = _stomp_client(service, port, None)
    producer: Client = _stomp_client(service, port, None)
    subscriber.subscribe(f"/queue/{queue}")  # makes the mailbox
    producer.send(f"/queue/{queue}", "warm", receipt="r0")
    producer.receipt("r0")
    (warm,) = subscriber.take(1)
    subscriber.ack(warm, receipt="a0")
    subscriber.receipt("a0")

    os.kill(web.pid, signal.SIGSTOP)  # the router holds still
    stopped_redis = False
    try:
        producer.send(f"/queue/{queue}", "held", receipt="r1")
        producer.receipt("r1")  # durable in the inbox: the STOMP server appended it
        os.kill(redis_server.process.pid, signal.SIGSTOP)
        stopped_redis = True
        os.kill(web.pid, signal.SIGCONT)  # the router starts its step; Redis cannot answer
        # what the subscriber would receive now could only come from a step Redis has not
        # made durable: nothing may come (any length of this wait shows the same)
        time.sleep(1.0)
        assert [m.body for m in subscriber.messages] == ["warm"]
    except BaseException:
        if stopped_redis:
            os.kill(redis_server.process.pid, signal.SIGCONT)
        raise
    finally:
        os.kill(web.pid, signal.SIGCONT)
    # killed while it still holds still: let go first, it would run the step that waits on
    # its socket (the router had made it and sent it) and could make it durable before the
    # kill, and then the message is routed (and claimed) before the restart
    redis_server.kill()  # the step it never made durable is gone with it
    redis_server.start()  # the same port and AOF: the publish is there

    def held(client: Client) -> list:
        return [m for m in client.messages if m.body == "held"]

    # the subscriber's connection may meet the killed Redis and end: a program connects
    # and subscribes again; either way the message comes, routed once
    eventually(lambda: held(subscriber) or subscriber.disconnected,
               "the message after the restart, or the subscriber's end", within=90)  # fmt: skip
    got = held(subscriber)
    if got:
        assert [m.headers["redelivered"] for m in got] == ["false"]  # routed once
        return
    again = eventually(lambda: _stomp_client(service, port, None, quiet=True),
                       "a STOMP connection after the restart", within=60)  # fmt: skip
    again.subscribe(f"/queue/{queue}")
    again.wait(lambda: bool(held(again)), "the message, to the new subscription", 90)
    # once; redelivered it may be: the ended session may have claimed it after the restart
    # and given it back unsent, which counts as a delivery (as RabbitMQ counts one)
    assert len(held(again)) == 1


# -- a filtering subscriber (a `selector` on a /queue/ subscription) ---------------------------
def _picky_and_holding(service, port: int) -> tuple[str, Client, Client, Client]:
    """A destination read by a subscriber wanting only red messages and another wanting
    the rest one at a time, holding a blue one while the next blue waits at the head of
    the outbox, which the red one passes over: (queue, reds, blues, producer)."""
    queue = unique("picky")
    reds: Client = _stomp_client(service, port, None)
    blues: Client = _stomp_client(service, port, None)
    producer: Client = _stomp_client(service, port, None)
    reds.subscribe(f"/queue/{queue}", selector="color = 'red'")  # makes the mailbox
    blues.subscribe(f"/queue/{queue}", selector="color <> 'red'", **{"prefetch-count": "1"})
    producer.send(f"/queue/{queue}", "b1", receipt="b1", color="blue")
    producer.send(f"/queue/{queue}", "b2", receipt="b2", color="blue")
    producer.receipt("b2")
    blues.take(1)
    return queue, reds, blues, producer


def test_a_filtering_subscriber_passing_over_anothers_message_does_not_look_again_and_again(
    own_redis,
) -> None:
    """SPEC §11: no poll on the path. While nothing changes in its outbox the subscriber's
    reader does not read it; the router is held still meanwhile (inline: the web process),
    so each LRANGE Redis counts is one of the reader's looks."""
    service, redis_server = own_redis
    port = service.start_stomp("stomp-picky")
    queue, reds, blues, producer = _picky_and_holding(service, port)
    stats = redis.Redis.from_url(redis_server.url)
    web = service.processes["server"]
    os.kill(web.pid, signal.SIGSTOP)  # the router's own reads of the inbox stop
    try:
        stats.config_resetstat()
        time.sleep(1.5)  # nothing changes: any look now is a poll
        looks = stats.info("commandstats").get("cmdstat_lrange", {}).get("calls", 0)
    finally:
        os.kill(web.pid, signal.SIGCONT)
        stats.close()
    # one safety look a second at most (against a wake-up lost), not ten polls a second
    assert looks <= 2, f"{looks} looks at an outbox that did not change in 1.5 s"
    producer.send(f"/queue/{queue}", "r1", receipt="r1", color="red")  # behind b2
    (red,) = reds.take(1)
    assert red.body == "r1"
    blues.ack(blues.messages[0])
    assert [m.body for m in blues.take(2)] == ["b1", "b2"]
    assert [m.body for m in reds.messages] == ["r1"]


def test_a_filtering_subscriber_waiting_when_redis_restarts_receives_what_comes_after(
    own_redis,
) -> None:
    """A restart ends the connections its reader waits on: it must look again once Redis is
    back, not sleep for good on a wake-up that cannot come."""
    service, redis_server = own_redis
    port = service.start_stomp("stomp-picky")
    queue, reds, _, _ = _picky_and_holding(service, port)
    redis_server.kill()
    redis_server.start()  # the same port and AOF: b2 still waits at the head of the outbox
    sent = eventually(lambda: _sent_after_restart(service, port, queue),
                      "a receipted SEND after the restart", within=60)  # fmt: skip
    reds.wait(lambda: bool(reds.messages), "the red message sent after the restart", 60)
    assert [m.body for m in reds.messages] == [sent]
    assert not reds.disconnected


def _sent_after_restart(service, port: int, queue: str) -> str | None:
    """A red message sent and receipted by a new connection (the STOMP server may refuse
    SENDs while its connections to Redis come back): its body, or None to try again."""
    producer = _stomp_client(service, port, None, quiet=True)
    if producer is None:
        return None
    body = unique("r")
    producer.send(f"/queue/{queue}", body, receipt=body, color="red")
    try:
        producer.wait(lambda: body in producer.receipts or bool(producer.errors), "a receipt", 10)
    except AssertionError:
        return None
    finally:
        producer.connection.disconnect()
    return body if body in producer.receipts else None


def test_a_new_connection_s_first_send_to_a_queue_that_exists_needs_no_router(
    own_redis,
) -> None:
    """SPEC §11: a SEND's RECEIPT means the append is durable; nothing else is on its way.
    A connection's first SEND to a /queue/ asked the router for the mailbox even when the
    queue existed (a router call on the path, and no RECEIPT while the router was held
    still: an adversarial probe saw it); the wiring the STOMP server reads already knows."""
    service, redis_server = own_redis
    queue = unique("exists")
    port = service.start_stomp("stomp-first")
    with service.client() as http:
        assert http.post("/api/queues", json={"name": queue}).status_code == 201
    warm: Client = _stomp_client(service, port, None)  # the STOMP server has read the wiring
    warm.send(f"/queue/{queue}", "warm", receipt="w0")
    warm.receipt("w0")
    web = service.processes["server"]
    os.kill(web.pid, signal.SIGSTOP)  # the router (inline: the web process) holds still
    try:
        producer: Client = _stomp_client(service, port, None)
        producer.send(f"/queue/{queue}", "first", receipt="r1")
        producer.receipt("r1")  # durable in the inbox
        # and no call for the router waits in the inbox (before: stomp_mailbox, asked
        # while the SEND waited, answered only when its call timed out)
        inbox = redis.Redis.from_url(redis_server.url)
        try:
            waiting = inbox.lrange(f"xump:{{{service.env['XUMP_STORE']}}}:inbox", 0, -1)
        finally:
            inbox.close()
        assert not [item for item in waiting if b"stomp_mailbox" in item], waiting
    finally:
        os.kill(web.pid, signal.SIGCONT)
    with service.client() as http:
        eventually(lambda: http.get(f"/api/queues/{queue}/stats").json().get("published") == 2,
                   "both published", within=60)  # fmt: skip
