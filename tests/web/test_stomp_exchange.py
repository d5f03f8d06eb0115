"""RabbitMQ's /exchange/ destinations against the running service, over TCP and WebSocket
(docs/stomp.md, "Coming from RabbitMQ"): amq.direct matches the routing key exactly,
amq.fanout gives every subscriber everything, amq.topic is /topic/, an operator's queue is
an exchange of its name; each subscription a private queue of its connection, gone at
UNSUBSCRIBE; rights as for /topic/; clear ERRORs for what is not there.

amq.fanout is shared by every test of the session: a test looks for its own bodies among
what it receives, and waits for a marker it sends last before saying something never came.
"""

from __future__ import annotations

import socket
import uuid

import pytest

from tests.web.conftest import eventually, unique
from tests.web.stomp_clients import Client, made_since
from tests.web.test_stomp_clients import (
    deliver,
    issue_token,
    make_queue,
    queue_names,
    waiting,
)
from tests.web.test_stomp_peers import RABBIT


def received(client: Client, body: str):
    """The MESSAGE with this body, once it has come."""
    client.wait(lambda: any(f.body == body for f in client.messages), f"message {body!r}")
    return next(f for f in client.messages if f.body == body)


def bodies_of(client: Client) -> set[str]:
    return {f.body for f in client.messages}


def marker() -> str:
    return f"marker-{uuid.uuid4().hex[:8]}"


def private_queues(http) -> set[str]:
    return {n for n in queue_names(http) if n.startswith("stomp:")}


def test_amq_direct_delivers_what_matches_the_key_exactly(clients):
    key = unique("route")
    consumer, producer = clients(), clients()
    consumer.subscribe(f"/exchange/amq.direct/{key}", ack="auto")
    consumer.subscribe(f"/exchange/amq.direct/{key}.*", sid="2", ack="auto")
    producer.send(f"/exchange/amq.direct/{key}.x", "not for a wildcard", receipt="r0")
    producer.send(f"/exchange/amq.direct/{key}", "hello", receipt="r1")
    producer.send(f"/exchange/amq.direct/{key}.*", "literally star", receipt="r2")
    frame = received(consumer, "hello")
    assert frame.headers["destination"] == f"/exchange/amq.direct/{key}"
    assert frame.headers["subscription"] == "1"
    star = received(consumer, "literally star")  # a direct key has no wildcards
    assert star.headers["subscription"] == "2"
    assert star.headers["destination"] == f"/exchange/amq.direct/{key}.*"
    end = marker()
    producer.send(f"/exchange/amq.direct/{key}", end)
    received(consumer, end)
    assert "not for a wildcard" not in bodies_of(consumer)


def test_amq_fanout_gives_every_subscriber_everything_whatever_the_key(clients, http):
    first, second, producer = clients(), clients(), clients()
    first.subscribe("/exchange/amq.fanout", ack="auto")
    second.subscribe("/exchange/amq.fanout/ignored", ack="auto")
    body = unique("fan")
    producer.send("/exchange/amq.fanout/any.key", body, receipt="r")
    producer.receipt("r")
    for client in (first, second):
        assert received(client, body).headers["destination"] == "/exchange/amq.fanout/any.key"
    keyless = unique("fan")
    producer.send("/exchange/amq.fanout", keyless)
    assert received(first, keyless).headers["destination"] == "/exchange/amq.fanout"
    assert "amq.fanout" in queue_names(http)  # made when first needed


def test_amq_topic_is_the_topic_destination(clients):
    word = unique("t")
    via_exchange, via_topic, producer = clients(), clients(), clients()
    via_exchange.subscribe(f"/exchange/amq.topic/{word}.*", ack="auto")
    via_topic.subscribe(f"/topic/{word}.#", ack="auto")
    producer.send(f"/topic/{word}.a", "sent to the topic")
    producer.send(f"/exchange/amq.topic/{word}.b", "sent to the exchange")
    for client in (via_exchange, via_topic):
        assert received(client, "sent to the topic").headers["destination"] == f"/topic/{word}.a"
        assert received(client, "sent to the exchange").headers["destination"] == (
            f"/topic/{word}.b"
        )


def test_unsubscribe_ends_the_binding_and_takes_its_private_queue_down(clients, http):
    consumer, witness, producer = clients(), clients(), clients()
    witness.subscribe("/exchange/amq.fanout", sid="w", ack="auto")
    before = private_queues(http)
    consumer.subscribe("/exchange/amq.fanout", sid="fan", ack="auto")
    made = private_queues(http) - before
    assert len(made) == 1
    first = unique("before")
    producer.send("/exchange/amq.fanout", first)
    received(consumer, first)
    consumer.unsubscribe("fan")
    assert not made & private_queues(http)
    after = unique("after")
    producer.send("/exchange/amq.fanout", after)
    received(witness, after)
    end = marker()  # what the consumer would have had by now, had it stayed
    producer.send("/exchange/amq.fanout", end)
    received(witness, end)
    assert after not in bodies_of(consumer) and end not in bodies_of(consumer)


def test_a_transaction_on_an_exchange_publishes_at_commit(clients):
    key = unique("tx")
    consumer, producer = clients(), clients()
    consumer.subscribe(f"/exchange/amq.direct/{key}", ack="auto")
    producer.connection.begin("t1")
    producer.send(f"/exchange/amq.direct/{key}", "in the transaction", transaction="t1")
    producer.send(f"/exchange/amq.direct/{key}", "outside")
    received(consumer, "outside")
    assert "in the transaction" not in bodies_of(consumer)
    producer.connection.commit("t1")
    received(consumer, "in the transaction")


def test_an_operators_queue_is_an_exchange_of_its_name(http, clients):
    queue, destination = unique("orders"), unique("d")
    deliver(http, queue, destination)  # the queue's own routing: everything to `destination`
    tap, producer = clients(), clients()
    tap.subscribe(f"/exchange/{queue}/eu.*", ack="auto")
    producer.send(f"/exchange/{queue}/eu.new", "an eu order", receipt="r1")
    producer.send(f"/exchange/{queue}/us.new", "a us order", receipt="r2")
    frame = received(tap, "an eu order")
    assert frame.headers["destination"] == f"/exchange/{queue}/eu.new"
    assert frame.headers["mid"]
    owner = clients()
    owner.subscribe(f"/queue/{destination}", ack="auto")  # its wiring still does its work
    owner.wait(lambda: len(owner.messages) >= 2, "both orders at the queue's destination")
    assert bodies_of(owner) == {"an eu order", "a us order"}
    assert "a us order" not in bodies_of(tap)


def test_a_queue_that_routes_nothing_yet_is_not_made_an_exchange(http, clients):
    queue = make_queue(http)  # no selector: it holds what arrives for wiring to come
    producer = clients()
    producer.send(f"/exchange/{queue}/k", "held", receipt="r")
    producer.receipt("r")
    tap = clients()
    tap.connection.subscribe(f"/exchange/{queue}/k", "1", headers={"receipt": "s"})
    tap.wait(lambda: tap.errors, "an ERROR")
    assert "routes nothing yet" in tap.errors[0].body
    assert [m["body"] for m in waiting(http, queue)] == ["held"]


@pytest.mark.parametrize(
    ("destination", "words"),
    [
        ("/exchange/does.not.exist", "no exchange 'does.not.exist'"),
        ("/exchange/amq.headers", "no exchange 'amq.headers'"),
    ],
)
def test_an_exchange_that_does_not_exist_is_not_found_and_nothing_is_made(
    http, clients, destination, words
):
    before = queue_names(http)
    made = []
    for command in ("SUBSCRIBE", "SEND"):
        client = clients()
        made.append(client)
        if command == "SEND":
            client.connection.send(destination, "x", headers={"receipt": "r"})
        else:
            client.connection.subscribe(destination, "1", headers={"receipt": "r"})
        client.wait(lambda c=client: c.errors and c.disconnected, "an ERROR and the close")
        error = client.errors[0]
        assert error.headers["message"] == "not_found"  # RabbitMQ's words
        assert error.body.startswith(words)
    assert made_since(http, before, made, destination.rsplit("/", 1)[-1]) == set()


def test_exchanges_ask_for_the_rights_topics_do(http, connect, transport):
    queue = make_queue(http)
    token = issue_token(http, {queue: ["consume"]})  # nothing on amq.fanout
    client = connect(transport, token=token)
    client.connection.subscribe("/exchange/amq.fanout", "1", headers={"receipt": "r"})
    client.wait(lambda: client.errors, "an ERROR")
    assert client.errors[0].headers["message"] == "subscription refused for subscription '1'"
    assert "amq.fanout" in client.errors[0].body
    sender = connect(transport, token=token)
    sender.connection.send("/exchange/amq.fanout", "x", headers={"receipt": "r"})
    sender.wait(lambda: sender.errors, "an ERROR")
    assert sender.errors[0].headers["message"] == "forbidden"


def test_a_durable_exchange_subscription_keeps_what_comes_while_away(
    http, connect, durable_client, transport
):
    key, client_id = unique("keep"), unique("app")
    first = durable_client(transport, client_id)
    first.subscribe(f"/exchange/amq.direct/{key}", sid="keep", **RABBIT)
    first.disconnect()
    producer = connect(transport)
    producer.send(f"/exchange/amq.direct/{key}", "while away", receipt="r")
    producer.receipt("r")
    back = eventually(
        lambda: durable_client(transport, client_id, auto_ack=True), "the client-id to be free"
    )
    back.subscribe(f"/exchange/amq.direct/{key}", sid="keep", **RABBIT)
    assert received(back, "while away").headers["redelivered"] == "false"
    kept = [n for n in queue_names(http) if n.startswith("stomp-durable:") and client_id in n]
    assert len(kept) == 1
    back.connection.disconnect()
    again = eventually(lambda: durable_client(transport, client_id), "the client-id to be free")
    again.connection.unsubscribe("keep", headers={"durable": "true", "receipt": "gone"})
    again.receipt("gone")  # removed while away: with the COPY on amq.direct that fed it
    assert kept[0] not in queue_names(http)
    feeding = http.get("/api/queues/amq.direct").json()["selectors"]
    assert not [s for s in feeding if s["target"] == kept[0]]


def test_a_stomp_10_raw_socket_subscribes_and_sends_in_one_write(service, stomp_port):
    """RabbitMQ's parsing tests: a STOMP 1.0 client (no id) writes SUBSCRIBE and SEND to
    amq.fanout at once, with newlines and stray NULs between frames, and reads the
    MESSAGE."""
    body = unique("raw")
    with socket.create_connection(("127.0.0.1", stomp_port), timeout=60) as sock:
        sock.sendall(f"CONNECT\nlogin:x\npasscode:{service.admin_token}\n\n\n\x00".encode())
        assert sock.recv(4096).startswith(b"CONNECTED\nversion:1.0\n")
        sock.sendall(
            b"\n\x00SUBSCRIBE\ndestination:/exchange/amq.fanout\nselector:kind = 'raw'\n\n\x00\n"
            b"\x00SEND\ndestination:/exchange/amq.fanout\nkind:raw\ncontent-type:text/plain\n\n"
            + body.encode()
            + b"\n\x00\n"
        )
        data = b""
        while b"\x00" not in data:
            data += sock.recv(4096)
    head, _, rest = data.partition(b"\n\n")
    assert head.startswith(b"MESSAGE\n")
    assert b"destination:/exchange/amq.fanout" in head.split(b"\n")
    assert rest.split(b"\x00")[0] == body.encode() + b"\n"


@pytest.mark.parametrize("destination", ["/exchange/amq.direct/", "/exchange/amq.direct"])
def test_an_empty_routing_key_is_a_key_like_any_other(clients, destination):
    consumer, producer = clients(), clients()
    consumer.subscribe(destination, ack="auto", selector=f"tag = '{destination}'")
    body = unique("empty")
    producer.send(destination, body, tag=destination)
    assert received(consumer, body).headers["destination"] == "/exchange/amq.direct"


def test_a_deep_wildcard_binding_is_served(clients):
    word = unique("deep")
    pattern = ".".join([word] + ["#"] * 60)
    consumer, producer = clients(), clients()
    consumer.subscribe(f"/exchange/amq.topic/{pattern}", ack="auto")
    producer.send(f"/exchange/amq.topic/{word}." + ".".join("abcdefghij" * 3), "deep")
    received(consumer, "deep")


@pytest.mark.parametrize(
    ("destination", "message", "body"),
    [
        ("/exchange//foo", "Invalid destination", "'//foo' is not a valid exchange destination\n"),
        ("/exchange", "Invalid destination", "'' is not a valid exchange destination\n"),
        ("/queue", "Invalid destination", "'' is not a valid queue destination\n"),
        ("/amq/queue/x", "Unknown destination", None),
    ],
)
def test_rabbitmqs_error_words_reach_the_client_and_nothing_is_made(
    http, clients, destination, message, body
):
    before = queue_names(http)
    client = clients()
    client.connection.send(destination, "x", headers={"receipt": "r"})
    client.wait(lambda: client.errors and client.disconnected, "an ERROR and the close")
    error = client.errors[0]
    assert error.headers["message"] == message
    assert error.headers["receipt-id"] == "r"
    assert body is None or error.body == body
    assert made_since(http, before, [client], destination.rsplit("/", 1)[-1]) == set()
