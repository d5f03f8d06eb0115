"""STOMP as its users meet it: stomp.py clients against the running service (inline
routing), over both transports — plain TCP (`manage.py stomp_server`) and WebSocket
(/ws/stomp/, subprotocol v12.stomp). Publishing with receipts and the message fields
SEND maps to (SPEC §9, §8), /queue/ and /topic/ subscriptions with selectors, the ack
modes, prefetch as the credit window, NACK, redelivery after a consumer leaves (with or
without DISCONNECT, or frozen past its heart-beats), competing consumers, transactions,
the consumers registry, bodies and header escaping, passcodes and rights.

Each test uses destinations of its own; waiting is for events (a frame, a receipt, an
HTTP answer) with generous deadlines, never for a wall-clock margin.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import stomp
from stomp.utils import Frame

from tests.web.conftest import eventually, unique
from tests.web.stomp_clients import TRANSPORTS, Client, queue_names, stomp_connection

KIND = {"tcp": "stomp-tcp", "websocket": "stomp-websocket"}


# -- helpers ----------------------------------------------------------------------------------
def make_queue(http, name: str | None = None, **settings) -> str:
    """A queue (`name`, or a new name of the test's own); its name."""
    name = name or unique()
    answer = http.post("/api/queues", json={"name": name, **settings})
    assert answer.status_code == 201, answer.text
    return name


def deliver(http, queue: str, destination: str, enabled: bool = True, **settings) -> int:
    """A queue whose every message goes to `destination`; the selector's id."""
    make_queue(http, queue, **settings)
    selector = {"when": "always", "action": "deliver", "target": destination, "enabled": enabled}
    answer = http.post(f"/api/queues/{quote(queue, safe='')}/selectors", json=selector)
    assert answer.status_code == 201, answer.text
    return answer.json()["id"]


def subscribed(clients, destination: str, **headers) -> tuple[Client, Client]:
    """A client subscribed to /queue/`destination` (with these SUBSCRIBE headers) and another
    to produce: (consumer, producer)."""
    consumer = clients()
    consumer.subscribe(f"/queue/{destination}", **headers)
    return consumer, clients()


def delivering(http, **settings) -> tuple[str, str]:
    """A new queue whose every message goes to a new destination: (queue, destination)."""
    queue, destination = unique(), unique("d")
    deliver(http, queue, destination, **settings)
    return queue, destination


def waiting(http, queue: str) -> list[dict]:
    answer = http.get(f"/api/queues/{quote(queue, safe='')}/waiting", params={"count": 1000})
    assert answer.status_code == 200, answer.text
    return answer.json()["messages"]


def stats(http, queue: str) -> dict:
    answer = http.get(f"/api/queues/{quote(queue, safe='')}/stats")
    assert answer.status_code == 200, answer.text
    return answer.json()


def bodies(frames: list[Frame]) -> list[str]:
    return [frame.body for frame in frames]


# -- publishing -------------------------------------------------------------------------------
def test_every_send_gets_its_receipt_and_the_messages_wait_in_the_queue(http, clients):
    queue = make_queue(http)
    client = clients()
    client.send_numbered(queue, 20)
    client.wait(lambda: len(client.receipts) == 20, "20 receipts")
    assert client.receipts == {f"r{n}" for n in range(20)} and not client.errors
    assert [m["body"] for m in waiting(http, queue)] == [f"m{n}" for n in range(20)]


def test_send_keeps_headers_and_content_type_and_reply_to_is_the_return_address(http, clients):
    queue = make_queue(http)
    client = clients()
    client.send(f"/queue/{queue}", '{"n": 1}', receipt="r", **{
        "content-type": "application/json", "region": "eu", "x-trace": "abc",
        "reply-to": "/queue/answers"})  # fmt: skip
    client.receipt("r")
    [message] = waiting(http, queue)
    assert message["body"] == '{"n": 1}' and message["return_address"] == "answers"
    headers = message["headers"]
    assert headers["content-type"] == "application/json"
    assert headers["region"] == "eu" and headers["x-trace"] == "abc"
    assert not {"destination", "receipt", "content-length", "reply-to"} & set(headers)


def test_a_message_carries_its_fields_to_the_subscriber(http, clients):
    queue, destination = delivering(http)
    consumer, producer = subscribed(clients, destination)
    producer.send(f"/queue/{queue}", "hello", receipt="r", **{
        "content-type": "text/plain", "region": "eu", "reply-to": "/queue/back"})  # fmt: skip
    producer.receipt("r")
    [frame] = consumer.take(1)
    headers = frame.headers
    assert frame.body == "hello"
    assert headers["subscription"] == "1" and headers["destination"] == f"/queue/{destination}"
    assert headers["ack"] == headers["message-id"]
    assert headers["redelivered"] == "false" and headers["x-delivery-count"] == "1"
    assert headers["seq"] == "1" and headers["mid"]
    assert headers["content-type"] == "text/plain" and headers["region"] == "eu"
    assert headers["reply-to"] == "/queue/back"
    consumer.ack(frame, receipt="acked")
    eventually(lambda: stats(http, queue)["confirmed"] == 1, "the ack to be counted")


def test_a_stomp_1_1_client_publishes_and_acks_by_message_id(http, clients):
    queue, destination = delivering(http)
    client = clients(version="1.1")
    client.subscribe(f"/queue/{destination}")
    client.send(f"/queue/{queue}", "hello", receipt="r")
    [frame] = client.take(1)
    client.ack(frame, receipt="acked")
    assert frame.body == "hello"
    eventually(lambda: stats(http, queue)["confirmed"] == 1, "the ack to be counted")


# -- message lifetime: priority, expires, delay -----------------------------------------------
def test_priority_orders_what_waits_in_the_queue(http, clients):
    queue, destination = unique(), unique("d")
    selector = deliver(http, queue, destination, enabled=False, priorities=10)
    producer = clients()
    for body, priority in [("low", 1), ("high", 9), ("none", None), ("mid", 5)]:
        headers = {} if priority is None else {"priority": str(priority)}
        producer.send(f"/queue/{queue}", body, receipt=body, **headers)
        producer.receipt(body)
    assert {m["body"]: m["headers"].get("priority") for m in waiting(http, queue)} == {
        "low": 1, "high": 9, "none": None, "mid": 5}  # fmt: skip
    consumer = clients()
    consumer.subscribe(f"/queue/{destination}")
    answer = http.patch(f"/api/queues/{queue}/selectors/{selector}", json={"enabled": True})
    assert answer.status_code == 200, answer.text
    found = consumer.take(4)
    assert bodies(found) == ["high", "mid", "low", "none"]
    assert [frame.headers.get("priority") for frame in found] == ["9", "5", "1", None]


def test_an_already_expired_message_is_never_delivered(http, clients):
    dead = make_queue(http, unique("dead"))
    queue, destination = delivering(http, dead_letter=dead)
    consumer, producer = subscribed(clients, destination)
    past = int((time.time() - 60) * 1000)  # STOMP's expires: epoch milliseconds
    future = int((time.time() + 3600) * 1000)
    producer.send(f"/queue/{queue}", "stale", receipt="r1", expires=str(past))
    producer.send(f"/queue/{queue}", "fresh", receipt="r2", expires=str(future))
    producer.receipt("r2")
    [frame] = consumer.take(1)
    assert frame.body == "fresh" and "expires" not in frame.headers
    [letter] = eventually(lambda: waiting(http, dead), "the expired message's dead letter")
    assert letter["body"] == "stale" and letter["headers"]["x-reason"] == "expired"
    assert stats(http, queue)["expired"] == 1
    assert bodies(consumer.messages) == ["fresh"]


def test_a_delayed_message_arrives_only_after_its_delay(http, clients):
    queue, destination = delivering(http)
    consumer, producer = subscribed(clients, destination)
    sent = time.monotonic()
    producer.send(f"/queue/{queue}", "later", receipt="r1", delay="1500")
    producer.send(f"/queue/{queue}", "now", receipt="r2")
    producer.receipt("r2")
    first = consumer.take(1)[0]
    assert first.body == "now"
    later = consumer.take(2)[1]
    arrived = time.monotonic()
    assert later.body == "later" and "delay" not in later.headers
    assert arrived - sent >= 1.5  # never before its time (how much later is not asserted)


def test_a_scheduled_message_is_listed_until_due(http, clients):
    queue = make_queue(http)
    producer = clients()
    producer.send(f"/queue/{queue}", "tomorrow", receipt="r", delay=str(86_400_000))
    producer.receipt("r")

    def scheduled():
        answer = http.get(f"/api/queues/{quote(queue, safe='')}/scheduled")
        return answer.json()["messages"]

    [message] = eventually(scheduled, "the message among the scheduled")
    assert message["body"] == "tomorrow" and message["delay"] == 86_400
    assert waiting(http, queue) == []


def test_a_delayed_message_whose_expires_comes_before_its_delay_is_never_delivered(http, clients):
    dead = make_queue(http, unique("dead"))
    queue, destination = delivering(http, dead_letter=dead)
    consumer, producer = subscribed(clients, destination)
    expires = str(int((time.time() + 0.2) * 1000))
    producer.send(f"/queue/{queue}", "too late", receipt="r1", delay="1000", expires=expires)
    producer.send(f"/queue/{queue}", "fine", receipt="r2", delay="1000")
    producer.receipt("r2")
    [letter] = eventually(lambda: waiting(http, dead), "the expired message's dead letter")
    assert letter["body"] == "too late" and letter["headers"]["x-reason"] == "expired"
    assert bodies(consumer.take(1)) == ["fine"]
    assert bodies(consumer.messages) == ["fine"]


# -- subscriptions with a selector ------------------------------------------------------------
def test_a_queue_selector_takes_only_matching_messages_and_leaves_the_rest(http, clients):
    queue, destination = delivering(http)
    picky, producer = clients(), clients()
    # text headers compare as text; decimal numbers become numbers (test_stomp_peers.py)
    picky.subscribe(f"/queue/{destination}", selector="color = 'red' AND size IN ('L', 'XL')")
    for n, (color, size) in enumerate([("red", "L"), ("blue", "L"), ("red", "S"), ("red", "XL")]):
        producer.send(f"/queue/{queue}", f"m{n}", receipt=f"r{n}", color=color, size=size)
    producer.receipt("r3")
    found = picky.take(2)
    assert bodies(found) == ["m0", "m3"]
    for frame in found:
        picky.ack(frame)
    anyone = clients()
    anyone.subscribe(f"/queue/{destination}")
    assert bodies(anyone.take(2)) == ["m1", "m2"]
    assert bodies(picky.messages) == ["m0", "m3"]


def test_two_subscribers_with_complementary_selectors_each_receive_only_theirs(http, clients):
    queue, destination = delivering(http)
    reds, blues, producer = clients(), clients(), clients()
    reds.subscribe(f"/queue/{destination}", selector="color = 'red'")
    # one at a time and holding it: the next blue waits at the head of the outbox, so each
    # red comes from behind a blue the red subscriber passes over
    blues.subscribe(f"/queue/{destination}", selector="color <> 'red'", **{"prefetch-count": "1"})
    colors = ["blue", "blue", "red", "blue", "blue", "red", "red", "blue", "red", "blue"]
    for n, color in enumerate(colors):
        producer.send(f"/queue/{queue}", f"m{n}", receipt=f"r{n}", color=color)
    producer.receipt(f"r{len(colors) - 1}")
    red = [f"m{n}" for n, color in enumerate(colors) if color == "red"]
    blue = [f"m{n}" for n, color in enumerate(colors) if color != "red"]
    for frame in reds.take(len(red)):
        reds.ack(frame)
    for count in range(1, len(blue) + 1):
        blues.ack(blues.take(count)[-1])
    eventually(lambda: stats(http, queue)["confirmed"] == len(colors), "every ack counted")
    assert bodies(reds.messages) == red
    assert bodies(blues.messages) == blue
    assert all(frame.headers["redelivered"] == "false" for frame in reds.messages + blues.messages)


def test_a_bad_selector_is_refused_with_an_error_frame(clients):
    client = clients()
    client.connection.subscribe(f"/queue/{unique('d')}", "1", headers={"selector": "color = "})
    client.wait(lambda: client.errors, "an ERROR frame")
    [error] = client.errors
    assert "selector" in error.headers["message"] and "column" in error.body
    client.wait(lambda: client.disconnected, "the server to close the connection")


# -- NACK -------------------------------------------------------------------------------------
def test_a_nacked_message_comes_back_redelivered(http, clients):
    queue, destination = delivering(http)
    client = clients()
    client.subscribe(f"/queue/{destination}")
    client.send(f"/queue/{queue}", "again", receipt="r")
    [first] = client.take(1)
    client.nack(first)
    second = client.take(2)[1]
    assert second.body == "again" and second.headers["mid"] == first.headers["mid"]
    assert second.headers["redelivered"] == "true" and second.headers["x-delivery-count"] == "2"
    assert second.headers["ack"] != first.headers["ack"]
    client.ack(second, receipt="acked")
    eventually(lambda: stats(http, queue)["confirmed"] == 1, "the ack to be counted")


def test_a_nacked_message_goes_to_one_of_the_competing_subscribers_once(http, clients):
    queue, destination = delivering(http)
    first, second, producer = clients(), clients(), clients()
    first.subscribe(f"/queue/{destination}", **{"prefetch-count": "1"})
    second.subscribe(f"/queue/{destination}", **{"prefetch-count": "1"})
    producer.send(f"/queue/{queue}", "hot potato", receipt="r")
    holder = eventually(lambda: [c for c in (first, second) if c.messages], "a delivery")[0]
    holder.nack(holder.messages[0])
    again = eventually(
        lambda: [f for c in (first, second) for f in c.messages[1 if c is holder else 0 :]],
        "the redelivery",
    )
    assert len(again) == 1 and again[0].body == "hot potato"
    assert again[0].headers["redelivered"] == "true"
    assert again[0].headers["x-delivery-count"] == "2"
    assert len(first.messages) + len(second.messages) == 2


def test_a_nack_with_requeue_false_dead_letters_or_drops_instead_of_redelivering(http, clients):
    """RabbitMQ's `requeue:false`: the queue's dead-letter queue gets it (`x-reason:
    rejected`); a queue without one drops it. Either way it is not delivered again."""
    lettered, plain, dead = unique(), unique(), unique("dead")
    lettered_to, plain_to = unique("d"), unique("d")
    make_queue(http, dead)
    deliver(http, lettered, lettered_to, dead_letter=dead)
    deliver(http, plain, plain_to)
    client = clients()
    client.subscribe(f"/queue/{lettered_to}", sid="l")
    client.subscribe(f"/queue/{plain_to}", sid="p")
    client.send(f"/queue/{lettered}", "poison", receipt="r1")
    client.send(f"/queue/{plain}", "unwanted", receipt="r2")
    for frame in client.take(2):
        client.connection.nack(frame.headers["ack"], requeue="false")
    [letter] = eventually(lambda: waiting(http, dead), "the rejected message's dead letter")
    assert letter["body"] == "poison" and letter["headers"]["x-reason"] == "rejected"
    eventually(lambda: stats(http, plain)["dropped"] == 1, "the drop to be counted")
    client.send(f"/queue/{lettered}", "next", receipt="r3")  # behind where a redelivery would be
    client.send(f"/queue/{plain}", "next", receipt="r4")
    assert sorted(bodies(client.take(4)[2:])) == ["next", "next"]
    client.ack(client.messages[2])
    client.ack(client.messages[3], receipt="acked")
    assert len(client.messages) == 4


# -- consumers that leave -----------------------------------------------------------------------
@pytest.mark.parametrize("leaving", ["unsubscribe", "disconnect", "drop"])
@pytest.mark.parametrize("taker", ["the other subscriber", "the same consumer reconnected"])
def test_what_a_consumer_leaves_unacked_is_redelivered_none_lost(http, clients, leaving,
                                                                  taker):  # fmt: skip
    queue, destination = delivering(http)
    leaver, producer = subscribed(clients, destination, **{"prefetch-count": "100"})
    producer.send_numbered(queue, 10)
    producer.receipt("r9")
    found = leaver.take(10)
    for frame in found[:3]:
        leaver.ack(frame)
    leaver.ack(found[3], receipt="acked")  # the first four are done; six are not
    other = None
    if taker == "the other subscriber":
        other = clients()
        other.subscribe(f"/queue/{destination}")
    getattr(leaver, leaving)()
    if other is None:
        other = clients()
        other.subscribe(f"/queue/{destination}")
    again = other.take(6)
    assert sorted(bodies(again)) == [f"m{n}" for n in range(4, 10)]
    assert all(frame.headers["redelivered"] == "true" for frame in again)
    assert all(frame.headers["x-delivery-count"] == "2" for frame in again)
    for frame in again:
        other.ack(frame)
    eventually(lambda: stats(http, queue)["confirmed"] == 10, "every message confirmed")
    assert len(other.messages) == 6


# -- competing consumers ----------------------------------------------------------------------
def test_a_wolfpack_of_three_shares_three_thousand_messages_none_lost_none_twice(http, connect):
    queue, destination = delivering(http)
    pack = [connect(over, auto_ack=True) for over in ("tcp", "websocket", "tcp")]
    for wolf in pack:
        wolf.subscribe(f"/queue/{destination}", **{"prefetch-count": "100"})
    producer = connect("websocket")
    for n in range(3000):
        producer.send(f"/queue/{queue}", f"m{n}", receipt="last" if n == 2999 else None)
    producer.receipt("last")  # receipts come in order: every SEND before it is durable
    deadline = time.monotonic() + 60
    while sum(len(wolf.messages) for wolf in pack) < 3000 and time.monotonic() < deadline:
        time.sleep(0.05)
    found = [frame.body for wolf in pack for frame in wolf.messages]
    assert len(found) == 3000 and set(found) == {f"m{n}" for n in range(3000)}
    assert all(wolf.messages for wolf in pack), [len(wolf.messages) for wolf in pack]
    eventually(lambda: stats(http, queue)["confirmed"] == 3000, "every ack counted")
    assert not any(f.headers["redelivered"] == "true" for wolf in pack for f in wolf.messages)


@pytest.mark.parametrize("dropout", TRANSPORTS)
def test_when_a_wolf_drops_out_midway_the_others_finish_its_work(http, connect, dropout):
    queue, destination = delivering(http)
    pack = [connect(over, auto_ack=True) for over in (dropout, "tcp", "websocket")]
    for wolf in pack:
        wolf.subscribe(f"/queue/{destination}", **{"prefetch-count": "100"})
    producer = connect("tcp")
    for n in range(3000):
        producer.send(f"/queue/{queue}", f"m{n}", receipt="last" if n == 2999 else None)
    producer.receipt("last")
    pack[0].wait(lambda: len(pack[0].messages) >= 100, "the first wolf to be at work")
    pack[0].drop()  # its unacked deliveries go back to the queue
    try:  # a generous deadline: a loaded machine once took more than 60 s
        eventually(lambda: stats(http, queue)["confirmed"] == 3000, "every message confirmed",
                   180)  # fmt: skip
    except AssertionError as late:
        raise AssertionError(f"{late}; the queue's stats: {stats(http, queue)}") from None
    found = [frame for wolf in pack for frame in wolf.messages]
    assert {frame.body for frame in found} == {f"m{n}" for n in range(3000)}
    seen: set[str] = set()
    for frame in found:  # a second copy only as a redelivery of what the dropout held
        assert frame.body not in seen or frame.headers["redelivered"] == "true"
        seen.add(frame.body)
    assert stats(http, queue)["outstanding"] == 0


# -- ack modes and the credit window --------------------------------------------------------------
def test_ack_auto_needs_no_acks(http, clients):
    queue, destination = delivering(http)
    consumer, producer = subscribed(clients, destination, ack="auto", **{"prefetch-count": "2"})
    producer.send_numbered(queue, 5)
    found = consumer.take(5)
    assert bodies(found) == [f"m{n}" for n in range(5)]
    assert not any("ack" in frame.headers for frame in found)
    eventually(lambda: stats(http, queue)["confirmed"] == 5, "the deliveries confirmed")


def test_ack_client_is_cumulative_and_the_rest_come_back(http, clients):
    queue, destination = delivering(http)
    consumer, producer = subscribed(clients, destination, ack="client")
    producer.send_numbered(queue, 5)
    found = consumer.take(5)
    consumer.ack(found[2], receipt="acked")  # m0, m1 and m2
    eventually(lambda: stats(http, queue)["confirmed"] == 3, "three confirmed")
    consumer.disconnect()
    other = clients()
    other.subscribe(f"/queue/{destination}", ack="client")
    again = other.take(2)
    assert bodies(again) == ["m3", "m4"]
    assert all(frame.headers["redelivered"] == "true" for frame in again)
    other.ack(again[1], receipt="acked")
    eventually(lambda: stats(http, queue)["confirmed"] == 5, "all confirmed")


def test_a_cumulative_nack_gives_back_every_earlier_message(http, clients):
    queue, destination = delivering(http)
    consumer, producer = subscribed(clients, destination, ack="client", **{"prefetch-count": "3"})
    producer.send_numbered(queue, 3)
    found = consumer.take(3)
    consumer.nack(found[1], receipt="nacked")  # m0 and m1 back; m2 still held
    again = consumer.take(5)[3:]
    assert sorted(bodies(again)) == ["m0", "m1"]
    assert all(frame.headers["x-delivery-count"] == "2" for frame in again)


def test_prefetch_count_limits_what_is_in_flight(http, clients):
    queue, destination = delivering(http)
    consumer, producer = subscribed(clients, destination, **{"prefetch-count": "2"})
    producer.send_numbered(queue, 5)
    producer.receipt("r4")
    found = consumer.take(2)
    time.sleep(0.5)  # a third would have come by now (a missing one cannot be awaited)
    assert len(consumer.messages) == 2
    consumer.ack(found[0])
    consumer.take(3)
    time.sleep(0.5)
    assert bodies(consumer.messages) == ["m0", "m1", "m2"]
    for frame in consumer.messages[1:]:
        consumer.ack(frame)
    assert bodies(consumer.take(5)) == [f"m{n}" for n in range(5)]


def test_a_consumer_that_acks_a_whole_window_at_once_gets_the_whole_window(http, clients):
    """A batch consumer (prefetch-count 100, ACKs once it holds 100) whose messages come
    in two parts, 80 then 20: it must get the last 20 without acking first, as with
    RabbitMQ's prefetch (a refill that waited for a quarter of the window to be free
    would leave it waiting for ever)."""
    queue, destination = delivering(http)
    consumer, producer = subscribed(clients, destination, **{"prefetch-count": "100"})
    for n in range(80):
        producer.send(f"/queue/{queue}", f"m{n}", receipt=f"r{n}")
    producer.receipt("r79")
    consumer.take(80)
    for n in range(80, 100):
        producer.send(f"/queue/{queue}", f"m{n}", receipt=f"r{n}")
    producer.receipt("r99")
    assert bodies(consumer.take(100)) == [f"m{n}" for n in range(100)]
    for frame in consumer.messages:
        consumer.ack(frame)


def test_activemq_prefetch_size_is_the_window_too(http, clients):
    queue, destination = delivering(http)
    consumer, producer = subscribed(clients, destination, **{"activemq.prefetchSize": "1"})
    producer.send_numbered(queue, 3)
    producer.receipt("r2")
    [first] = consumer.take(1)
    time.sleep(0.5)
    assert len(consumer.messages) == 1
    consumer.ack(first)
    assert bodies(consumer.take(2)) == ["m0", "m1"]


# -- transactions -----------------------------------------------------------------------------
def test_a_committed_transaction_publishes_its_sends(http, clients):
    queue = make_queue(http)
    client = clients()
    tx = client.connection.begin()
    for n in range(3):
        client.connection.send(f"/queue/{queue}", f"m{n}", transaction=tx, receipt=f"r{n}")
    client.send(f"/queue/{queue}", "outside", receipt="outside")
    client.receipt("outside")  # receipts come in the order of the frames asking
    # a SEND's receipt says durable: a held one's comes once COMMIT has published it
    assert client.receipts.isdisjoint({"r0", "r1", "r2"})
    assert [m["body"] for m in waiting(http, queue)] == ["outside"]
    client.connection.commit(tx, receipt="committed")
    client.receipt("committed")
    assert {"r0", "r1", "r2"} <= client.receipts
    assert [m["body"] for m in waiting(http, queue)] == ["outside", "m0", "m1", "m2"]


def test_an_aborted_transaction_publishes_nothing(http, clients):
    queue = make_queue(http)
    client = clients()
    tx = client.connection.begin()
    for n in range(3):
        client.connection.send(f"/queue/{queue}", f"m{n}", transaction=tx)
    client.connection.abort(tx, receipt="aborted")
    client.receipt("aborted")
    client.send(f"/queue/{queue}", "after", receipt="r")
    client.receipt("r")
    assert [m["body"] for m in waiting(http, queue)] == ["after"]


def test_acks_in_a_transaction_count_at_commit_and_not_after_abort(http, clients):
    queue, destination = delivering(http)
    client = clients()
    client.subscribe(f"/queue/{destination}")
    client.send_numbered(queue, 2)
    first, second = client.take(2)
    aborted = client.connection.begin()
    client.connection.ack(first.headers["ack"], transaction=aborted)
    client.connection.abort(aborted, receipt="aborted")
    client.receipt("aborted")
    committed = client.connection.begin()
    client.connection.ack(first.headers["ack"], transaction=committed)
    client.connection.ack(second.headers["ack"], transaction=committed)
    client.connection.commit(committed, receipt="committed")
    client.receipt("committed")
    eventually(lambda: stats(http, queue)["confirmed"] == 2, "both confirmed")


# -- /topic/ ----------------------------------------------------------------------------------
def topic_queue(client: Client, serial: int = 1) -> str:
    """The private queue of the client's `serial`-th /topic/ subscription (its name holds
    the CONNECTED frame's session)."""
    assert client.session
    return f"stomp:{client.session}:{serial}"


def test_a_topic_subscription_receives_only_matching_addresses(http, clients):
    prefix = unique("t")
    subscriber, producer = clients(), clients()
    subscriber.subscribe(f"/topic/{prefix}.stock.*.price")
    assert topic_queue(subscriber) in queue_names(http)
    addresses = ["stock.ibm.price", "stock.ibm.volume", "bond.ibm.price", "stock.ibm.eu.price",
                 "stock.sap.price"]  # fmt: skip
    for n, address in enumerate(addresses):
        producer.send(f"/topic/{prefix}.{address}", address, receipt=f"r{n}", n=str(n))
    producer.receipt(f"r{len(addresses) - 1}")
    found = subscriber.take(2)
    assert bodies(found) == ["stock.ibm.price", "stock.sap.price"]
    assert [f.headers["destination"] for f in found] == [
        f"/topic/{prefix}.stock.ibm.price", f"/topic/{prefix}.stock.sap.price"]  # fmt: skip
    assert found[0].headers["n"] == "0" and found[0].headers["subscription"] == "1"
    for frame in found:
        subscriber.ack(frame)
    time.sleep(0.5)  # a non-matching one would have come by now
    assert len(subscriber.messages) == 2


def test_every_topic_subscriber_gets_its_own_copy(clients):
    prefix = unique("t")
    first, second, producer = clients(), clients(), clients()
    first.subscribe(f"/topic/{prefix}.#", ack="auto")
    second.subscribe(f"/topic/{prefix}.news.#", ack="auto")
    producer.send(f"/topic/{prefix}.news.sport", "goal", receipt="r")
    assert bodies(first.take(1)) == ["goal"] and bodies(second.take(1)) == ["goal"]
    assert topic_queue(first) != topic_queue(second)


def test_a_topic_subscription_with_a_selector_filters_too(clients):
    prefix = unique("t")
    subscriber, producer = clients(), clients()
    subscriber.subscribe(f"/topic/{prefix}.#", selector="region = 'eu'")
    for n, region in enumerate(["us", "eu", "asia", "eu"]):
        producer.send(f"/topic/{prefix}.orders", f"m{n}", receipt=f"r{n}", region=region)
    assert bodies(subscriber.take(2)) == ["m1", "m3"]


def test_a_nacked_topic_message_comes_back_in_the_subscription(clients):
    prefix = unique("t")
    subscriber, producer = clients(), clients()
    subscriber.subscribe(f"/topic/{prefix}.#")
    producer.send(f"/topic/{prefix}.a", "again", receipt="r")
    [first] = subscriber.take(1)
    subscriber.nack(first)
    second = subscriber.take(2)[1]
    assert second.body == "again" and second.headers["redelivered"] == "true"
    assert second.headers["x-delivery-count"] == "2"
    assert second.headers["destination"] == f"/topic/{prefix}.a"


@pytest.mark.parametrize("ending", ["unsubscribe", "disconnect", "drop"])
def test_the_private_topic_queue_lives_as_long_as_the_subscription(http, clients, ending):
    prefix = unique("t")
    subscriber, producer = clients(), clients()
    subscriber.subscribe(f"/topic/{prefix}.#")
    subscriber.subscribe(f"/queue/{unique('d')}", sid="2")
    subscriber.subscribe(f"/topic/{prefix}.other.#", sid="3")
    mine = {topic_queue(subscriber, 1), topic_queue(subscriber, 2)}
    assert mine <= queue_names(http)
    producer.send(f"/topic/{prefix}.x", "unacked", receipt="r")
    subscriber.take(1)
    if ending == "unsubscribe":
        subscriber.connection.unsubscribe("1", headers={"receipt": "gone"})
        subscriber.receipt("gone")
        assert topic_queue(subscriber, 1) not in queue_names(http)
        assert topic_queue(subscriber, 2) in queue_names(http)
        subscriber.connection.unsubscribe("3", headers={"receipt": "gone too"})
        subscriber.receipt("gone too")
        assert not mine & queue_names(http)
    else:
        getattr(subscriber, ending)()
        eventually(lambda: not mine & queue_names(http), "the private queues to be removed")


# -- the consumers registry -------------------------------------------------------------------
def consumers_of(http, destination: str) -> list[dict]:
    answer = http.get("/api/consumers")
    assert answer.status_code == 200, answer.text
    return [c for c in answer.json()["consumers"] if c["destination"] == destination]


def test_the_consumers_registry_lists_a_stomp_subscription(http, clients, transport):
    queue, destination = delivering(http)
    consumer, producer = subscribed(clients, destination, **{"prefetch-count": "5"})
    producer.send_numbered(queue, 2)
    found = consumer.take(2)
    consumer.ack(found[0])
    [entry] = eventually(
        lambda: [c for c in consumers_of(http, destination) if c["acked"] == 1],
        "the registry entry with one ack",
    )
    assert entry["transport"] == KIND[transport] and entry["who"] == "token:tests"
    assert entry["in_flight"] == 1 and entry["credit"] == 4
    assert entry["remote"].startswith("127.0.0.1:") and entry["may_close"] is True
    [feed] = [f for f in http.get("/api/consumers").json()["feeds"] if f["queue"] == queue]
    assert feed["destination"] == destination and feed["listeners"] == 1
    consumer.disconnect()
    eventually(lambda: not consumers_of(http, destination), "the entry to go")


def test_an_operator_closes_a_stomp_consumer_and_its_messages_go_to_the_others(http, clients):
    queue, destination = delivering(http)
    doomed, producer = subscribed(clients, destination)
    producer.send(f"/queue/{queue}", "held", receipt="r")
    doomed.take(1)
    [entry] = eventually(lambda: consumers_of(http, destination), "the registry entry")
    other = clients()
    other.subscribe(f"/queue/{destination}")
    answer = http.delete(f"/api/consumers/{entry['id']}")
    assert answer.status_code == 200, answer.text
    doomed.wait(lambda: doomed.errors and doomed.disconnected, "an ERROR and the close")
    assert doomed.errors[0].headers["message"] == "closed by an operator"
    [again] = other.take(1)
    assert again.body == "held" and again.headers["redelivered"] == "true"


# -- bodies and headers as clients send them --------------------------------------------------
def test_text_bodies_and_escaped_header_values_arrive_as_sent(http, clients):
    queue, destination = delivering(http)
    consumer, producer = subscribed(clients, destination)
    odd = "a:b\nc\\d"  # STOMP 1.2 escapes these in header values
    producer.send(f"/queue/{queue}", "héllo ✓ \x00 end", receipt="r", note=odd)
    [frame] = consumer.take(1)
    assert frame.body == "héllo ✓ \x00 end" and frame.headers["note"] == odd


def test_a_binary_body_arrives_intact(http, clients, transport):
    queue, destination = delivering(http)
    options = {"auto_decode": False}
    if transport == "websocket":
        options["binary_mode"] = True  # a text WebSocket message must be UTF-8
    consumer, producer = clients(**options), clients(**options)
    consumer.subscribe(f"/queue/{destination}")
    body = bytes(range(256)) * 4
    producer.connection.send(f"/queue/{queue}", body, content_type="application/octet-stream",
                             headers={"receipt": "r"})  # fmt: skip
    producer.receipt("r")
    [frame] = consumer.take(1)
    assert frame.body == body
    assert frame.headers["content-type"] == "application/octet-stream"
    assert frame.headers["content-length"] == str(len(body))


# -- who may do what --------------------------------------------------------------------------
def issue_token(http, rights: dict) -> str:
    answer = http.post("/api/tokens", json={"name": unique("stomp"), "rights": rights})
    assert answer.status_code == 201, answer.text
    return answer.json()["secret"]


def test_a_bad_passcode_is_refused_with_an_error_and_the_connection_closed(service, stomp_port,
                                                                           transport):  # fmt: skip
    connection = stomp_connection(service, stomp_port, transport)
    client = Client(connection)
    connection.connect("tests", "xump_not_a_token", wait=False)
    client.wait(lambda: client.errors and client.disconnected, "an ERROR and the close")
    assert client.errors[0].headers["message"] == "access refused"
    assert not connection.is_connected()


def test_rights_are_checked_on_send_and_subscribe(http, clients):
    queue, other = unique(), unique()
    make_queue(http, queue)
    make_queue(http, other)
    token = issue_token(http, {queue: ["publish"]})
    publisher = clients(token=token)
    publisher.send(f"/queue/{queue}", "allowed", receipt="r1")
    publisher.receipt("r1")
    publisher.send(f"/queue/{other}", "refused", receipt="r2")
    publisher.wait(lambda: publisher.errors, "an ERROR")
    [error] = publisher.errors
    assert error.headers["receipt-id"] == "r2" and "publish" in error.body
    assert [m["body"] for m in waiting(http, queue)] == ["allowed"]
    assert waiting(http, other) == []
    reader = clients(token=token)
    reader.connection.subscribe(f"/queue/{queue}", "1", headers={"receipt": "s"})
    reader.wait(lambda: reader.errors, "an ERROR")
    assert reader.errors[0].headers["receipt-id"] == "s"
    assert "consume" in reader.errors[0].body


def test_a_send_or_subscribe_refused_for_want_of_its_right_makes_no_mailbox(http, clients):
    """A token that may manage a queue but not publish on it (or consume from it) made the
    mailbox first and was refused after, leaving a queue (and its audit) behind."""
    for verb in ("send", "subscribe"):
        name = unique("mb")
        client = clients(token=issue_token(http, {name: ["manage"]}))
        if verb == "send":
            client.send(f"/queue/{name}", "x", receipt="r")
        else:
            client.connection.subscribe(f"/queue/{name}", "1", headers={"receipt": "r"})
        client.wait(lambda c=client: c.errors, "an ERROR")
        assert client.errors[0].headers["receipt-id"] == "r"
        assert name not in queue_names(http), verb


def test_a_token_scoped_to_its_service_queue_answers_through_a_temp_queue(http, clients):
    """Request/reply as on RabbitMQ: the replier's token holds a right on its own queue
    only, and the reply-to names the caller's private temp queue, which holding its name
    lets anyone send to (it took a publish right on `stomp:*`, which opened every
    connection's private queues). Another connection's topic subscription stays closed."""
    service_queue, topic = unique("svc"), unique("news")
    token = issue_token(http, {service_queue: ["consume"]})  # the caller makes the mailbox
    server, caller = clients(token=token), clients()
    server.subscribe(f"/queue/{service_queue}")
    caller.send(f"/queue/{service_queue}", "2+2?", **{"reply-to": "/temp-queue/answers"})
    [request] = server.take(1)
    server.send(request.headers["reply-to"], "4", receipt="back")
    server.receipt("back")
    server.ack(request)
    [answer] = caller.take(1)
    assert answer.body == "4"
    before = set(queue_names(http))
    clients().subscribe(f"/topic/{topic}")
    [private] = [name for name in set(queue_names(http)) - before if name.startswith("stomp:")]
    server.send(f"/queue/{private}", "intruding", receipt="in")
    server.wait(lambda: server.errors, "an ERROR")
    assert server.errors[0].headers["receipt-id"] == "in"
    assert "topic subscription" in server.errors[0].body


# -- heart-beats ------------------------------------------------------------------------------
FROZEN_CONSUMER = """
import sys, time, stomp
port, token, destination = int(sys.argv[1]), sys.argv[2], sys.argv[3]

class Out(stomp.ConnectionListener):
    def on_receipt(self, frame):
        print("subscribed", flush=True)

    def on_message(self, frame):
        print(frame.body, flush=True)

connection = stomp.Connection12([("127.0.0.1", port)], heartbeats=(1000, 1000))
connection.set_listener("", Out())
connection.connect("tests", token, wait=True)
connection.subscribe(f"/queue/{destination}", "1", ack="client-individual",
                     headers={"receipt": "s"})
time.sleep(600)
"""


@pytest.fixture(scope="module")
def beating_stomp(service) -> Iterator[int]:
    """A STOMP TCP server of the service that offers and asks heart-beats every second."""
    own = dataclasses.replace(
        service, env={**service.env, "XUMP_STOMP_HEARTBEAT_MS": "1000"}, processes={}
    )
    yield own.start_stomp(name=f"stomp-{unique('beat')}")
    own.close()


def test_a_heart_beating_client_stays_connected_while_idle(service, http, beating_stomp):
    queue, destination = delivering(http)
    connection = stomp.Connection12([("127.0.0.1", beating_stomp)], heartbeats=(1000, 1000))
    client = Client(connection)
    connection.connect("tests", service.admin_token, wait=True)
    try:
        client.subscribe(f"/queue/{destination}")
        time.sleep(3)  # idle for three intervals: only heart-beats go either way
        assert connection.is_connected() and not client.disconnected
        client.send(f"/queue/{queue}", "still here", receipt="r")
        assert bodies(client.take(1)) == ["still here"]
    finally:
        connection.disconnect()


def test_a_frozen_consumer_is_dropped_and_its_messages_go_to_the_others(service, http,
                                                                        beating_stomp,
                                                                        clients):  # fmt: skip
    queue, destination = delivering(http)
    frozen = subprocess.Popen(
        [sys.executable, "-c", FROZEN_CONSUMER, str(beating_stomp), service.admin_token,
         destination], stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert frozen.stdout.readline().strip() == "subscribed"
        producer = clients()
        producer.send_numbered(queue, 3)
        assert [frozen.stdout.readline().strip() for _ in range(3)] == ["m0", "m1", "m2"]
        os.kill(frozen.pid, signal.SIGSTOP)  # its socket stays open; it sends nothing more
        other = clients()
        other.subscribe(f"/queue/{destination}")
        again = other.take(3)
        assert sorted(bodies(again)) == ["m0", "m1", "m2"]
        assert all(frame.headers["redelivered"] == "true" for frame in again)
    finally:
        frozen.kill()
        frozen.wait()


def test_a_send_to_a_queue_that_does_not_exist_is_an_error_naming_it(http, clients):
    """Without the manage right (with it, the SEND makes a mailbox: test_stomp_peers.py)."""
    missing = unique("missing")
    client = clients(token=issue_token(http, {"*": ["publish", "consume"]}))
    client.send(f"/queue/{missing}", "lost?", receipt="r")
    client.wait(lambda: client.errors and client.disconnected, "an ERROR and the close")
    [error] = client.errors
    assert error.headers["receipt-id"] == "r" and missing in error.body
