"""RabbitMQ's /exchange/ destinations in the protocol core: what SEND and SUBSCRIBE make of
them, the MESSAGE's destination, RabbitMQ's ERROR words where its programs compare them,
and hostile names (docs/stomp.md, "Coming from RabbitMQ")."""

from __future__ import annotations

import pytest

from tests.stomp.conftest import CONNECT, connected, delivery, error_of, frame, server_frames
from xumpweb.stomp.connection import Publish, StompConnection, Subscribe


def test_send_to_an_exchange_publishes_to_its_queue_with_the_routing_key_as_address() -> None:
    conn = connected()
    (publish,) = conn.receive_data(frame("SEND", b"hi", destination="/exchange/amq.direct/route"))
    assert publish == Publish("amq.direct", {}, b"hi", address="route", exchange="amq.direct")
    (publish,) = conn.receive_data(frame("SEND", b"hi", destination="/exchange/amq.fanout"))
    assert publish == Publish("amq.fanout", {}, b"hi", address="", exchange="amq.fanout")


def test_amq_topic_is_the_topic_destination_for_send_and_subscribe() -> None:
    conn = connected()
    (publish,) = conn.receive_data(frame("SEND", b"x", destination="/exchange/amq.topic/a.b"))
    assert publish == Publish(None, {}, b"x", address="a.b")
    (subscribe,) = conn.receive_data(
        frame("SUBSCRIBE", id="1", destination="/exchange/amq.topic/a.*")
    )
    assert subscribe == Subscribe("1", "topic", "a.*", "auto")
    assert conn.subscriptions == {"1": subscribe}
    (message,) = server_frames(conn.deliver("1", delivery(address="a.b"))[:1])
    assert message.headers["destination"] == "/topic/a.b"  # as RabbitMQ names it


def test_subscribe_to_an_exchange_binds_with_its_key_and_names_messages_as_rabbitmq() -> None:
    conn = connected()
    (subscribe,) = conn.receive_data(
        frame("SUBSCRIBE", id="1", destination="/exchange/amq.direct/route")
    )
    assert subscribe == Subscribe("1", "exchange", "route", "auto", exchange="amq.direct")
    assert conn.subscriptions == {"1": subscribe}
    (message,) = server_frames(conn.deliver("1", delivery(address="route"))[:1])
    assert message.headers["destination"] == "/exchange/amq.direct/route"
    conn.receive_data(frame("SUBSCRIBE", id="2", destination="/exchange/amq.fanout"))
    (message,) = server_frames(conn.deliver("2", delivery(address=""))[:1])
    assert message.headers["destination"] == "/exchange/amq.fanout"


def test_a_durable_exchange_subscription_is_named_by_its_id() -> None:
    conn = connected()
    (subscribe,) = conn.receive_data(
        frame("SUBSCRIBE", id="keep", destination="/exchange/amq.fanout", durable="true",
              auto_delete="false")
    )  # fmt: skip
    assert subscribe.durable == "keep" and subscribe.exchange == "amq.fanout"


@pytest.mark.parametrize(
    ("destination", "body"),
    [
        ("/exchange", "'' is not a valid exchange destination\n"),
        ("/exchange/bah/baz/boo", "'/bah/baz/boo' is not a valid exchange destination\n"),
        ("/exchange//foo", "'//foo' is not a valid exchange destination\n"),
        ("/queue", "'' is not a valid queue destination\n"),
        ("/topic", "'' is not a valid topic destination\n"),
    ],
)
@pytest.mark.parametrize("command", ["SEND", "SUBSCRIBE"])
def test_a_destination_rabbitmq_calls_invalid_gets_its_words(
    command: str, destination: str, body: str
) -> None:
    conn = connected()
    error = error_of(conn.receive_data(frame(command, id="1", destination=destination)))
    assert error.headers["message"] == "Invalid destination"
    assert error.body.decode() == body


@pytest.mark.parametrize(
    "destination",
    [
        "/exchange/a\x01b/key",  # a control character in the name
        "/exchange/amq.direct/a\x7fb",  # ... in the key
        "/exchange/amq.direct/a b",  # whitespace
        "/exchange/" + "x" * 201,  # too long a name
        "/exchange/amq.topic/" + "a." * 150,  # too long a pattern
        "/exchange/$dead/key",  # a reserved name
    ],
)
@pytest.mark.parametrize("command", ["SEND", "SUBSCRIBE"])
def test_hostile_exchange_names_and_keys_are_refused(command: str, destination: str) -> None:
    conn = connected()
    error = error_of(
        conn.receive_data(frame(command, id="1", destination=destination, receipt="r"))
    )
    assert error.headers["message"] == "Invalid destination"
    assert error.headers["receipt-id"] == "r"


def test_an_empty_routing_key_and_a_deep_wildcard_pattern_are_taken() -> None:
    conn = connected()
    (publish,) = conn.receive_data(frame("SEND", destination="/exchange/amq.direct/"))
    assert publish.queue == "amq.direct" and publish.address == ""
    deep = ".".join(["#"] * 100)  # 199 characters: the trie walks it in linear time
    (subscribe,) = conn.receive_data(
        frame("SUBSCRIBE", id="1", destination=f"/exchange/amq.topic/{deep}")
    )
    assert subscribe.destination == deep


@pytest.mark.parametrize(
    ("destination", "instead"),
    [("/amq/queue/orders", "use /queue/<name>"), ("/reply-queue/x", "/temp-queue/")],
)
def test_rabbitmqs_other_destinations_are_unknown_with_what_to_use_instead(
    destination: str, instead: str
) -> None:
    conn = connected()
    error = error_of(conn.receive_data(frame("SEND", destination=destination)))
    assert error.headers["message"] == "Unknown destination"
    assert instead in error.body.decode()


def test_a_message_id_on_send_is_refused_before_the_destination_as_rabbitmq_does() -> None:
    conn = connected()
    error = error_of(conn.receive_data(frame("SEND", destination="a", message_id="1")))
    assert error.headers["message"] == "Invalid header"
    assert error.body.decode() == "'message-id' is not allowed on 'SEND'.\n"


def test_an_unsupported_version_is_told_which_are_in_rabbitmqs_words() -> None:
    conn = StompConnection()
    error = error_of(conn.receive_data(CONNECT.replace(b"accept-version:1.2", b"accept-version:9")))
    assert error.headers["version"] == "1.0,1.1,1.2"
    assert error.body.decode() == "Supported versions are 1.0,1.1,1.2\n"
