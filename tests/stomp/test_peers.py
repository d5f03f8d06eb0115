"""What programs written for RabbitMQ or ActiveMQ send (SPEC §9): /temp-queue/ names,
durable topic subscriptions and the connection's client-id, seen through the actions the
core returns."""

from __future__ import annotations

import pytest

from tests.stomp.conftest import delivery, error_of, frame, server_frames
from xumpweb.stomp.connection import (
    Publish,
    StompConfig,
    StompConnection,
    Subscribe,
    TempQueue,
    Unsubscribe,
)


def connected(**connect: str) -> StompConnection:
    conn = StompConnection()
    conn.receive_data(frame("CONNECT", accept_version="1.2", passcode="t", **connect))
    conn.accept(principal="me", session="s-1")
    return conn


def test_a_reply_to_temp_queue_is_rewritten_to_the_private_queue_made_on_first_use() -> None:
    conn = connected()
    send = frame("SEND", b"ask", destination="/queue/service", reply_to="/temp-queue/answers")
    made, publish = conn.receive_data(send)
    assert made == TempQueue("answers", "stomp:s-1:temp:answers", "/temp-queue/answers")
    assert isinstance(publish, Publish) and publish.return_address == "stomp:s-1:temp:answers"
    (again,) = conn.receive_data(send)  # made once
    assert again.return_address == "stomp:s-1:temp:answers"


def test_a_reply_reaches_the_connection_without_a_subscribe() -> None:
    conn = connected()
    conn.receive_data(frame("SEND", destination="/queue/s", reply_to="/temp-queue/a"))
    send, _ = conn.deliver("/temp-queue/a", delivery("t1", destination="stomp:s-1:temp:a"))
    (message,) = server_frames([send])
    assert message.headers["destination"] == "/temp-queue/a"
    assert message.headers["subscription"] == "/temp-queue/a"


def test_a_subscribe_to_a_temp_queue_reads_it_itself() -> None:
    conn = connected()
    made, sub = conn.receive_data(frame("SUBSCRIBE", id="r", destination="/temp-queue/a"))
    assert made == TempQueue("a", "stomp:s-1:temp:a", None)
    assert sub == Subscribe("r", "temp", "stomp:s-1:temp:a", "auto")


@pytest.mark.parametrize("sid", ["replies", "/temp-queue/a"])
def test_a_subscribe_after_a_reply_to_takes_the_replies_over(sid) -> None:
    """A reply-to:/temp-queue/a made a reader of its own; a SUBSCRIBE to it afterwards
    added a second reader on the same queue, so the replies were shared between them
    (those of the hidden, ack:auto reader came under a subscription id the program never
    made, and stompjs drops such a MESSAGE), or, with the destination as its id, was
    refused as a duplicate. The hidden reader now gives way."""
    conn = connected()
    conn.receive_data(frame("SEND", destination="/queue/s", reply_to="/temp-queue/a"))
    gone, sub = conn.receive_data(frame("SUBSCRIBE", id=sid, destination="/temp-queue/a",
                                        ack="client-individual"))  # fmt: skip
    assert gone == Unsubscribe("/temp-queue/a")
    assert sub == Subscribe(sid, "temp", "stomp:s-1:temp:a", "client-individual")
    (message,) = server_frames(conn.deliver(sid, delivery("t1", destination="stomp:s-1:temp:a")))
    assert message.headers["subscription"] == sid
    if sid != "/temp-queue/a":  # the hidden reader's id is nobody's now
        [refused] = conn.deliver("/temp-queue/a", delivery("t2"))
        assert refused.accept is False


def test_another_connections_private_queue_cannot_be_named_in_temp_queue() -> None:
    conn = connected()
    error = error_of(
        conn.receive_data(frame("SUBSCRIBE", id="r", destination="/temp-queue/stomp:s-2:temp:a"))
    )
    assert error.headers["message"] == "Invalid destination"


def test_durable_subscriptions_in_both_dialects() -> None:
    conn = connected(client_id="app-1")
    (rabbit,) = conn.receive_data(
        frame("SUBSCRIBE", id="d1", destination="/topic/a.*", durable="true", auto_delete="false")
    )
    assert rabbit.durable == "d1"
    (amq,) = conn.receive_data(
        frame("SUBSCRIBE", id="d2", destination="/topic/b", **{"activemq.subscriptionName": "n"})
    )
    assert amq.durable == "n"
    (plain,) = conn.receive_data(frame("SUBSCRIBE", id="p", destination="/topic/c"))
    assert plain.durable is None


def test_unsubscribe_with_durable_removes_it_even_when_not_subscribed_now() -> None:
    conn = connected(client_id="app-1")
    (removed,) = conn.receive_data(frame("UNSUBSCRIBE", id="d1", durable="true"))
    assert removed == Unsubscribe("d1", (), None, "d1")
    conn.receive_data(frame("SUBSCRIBE", id="d2", destination="/topic/a", durable="true"))
    (kept,) = conn.receive_data(frame("UNSUBSCRIBE", id="d2"))
    assert kept == Unsubscribe("d2", (), None, None)


def test_activemq_durable_needs_a_client_id() -> None:
    conn = connected()
    error = error_of(
        conn.receive_data(
            frame("SUBSCRIBE", id="d", destination="/topic/a", **{"activemq.subscriptionName": "n"})
        )
    )
    assert error.headers["message"] == "Missing header"


def test_durable_without_an_id_is_an_error_in_stomp_10() -> None:
    conn = StompConnection()
    conn.receive_data(b"CONNECT\nlogin:me\npasscode:t\n\n\x00")
    conn.accept(principal="me", session="s-1")
    error = error_of(conn.receive_data(b"SUBSCRIBE\ndestination:/topic/a\ndurable:true\n\n\x00"))
    assert error.headers["message"] == "Missing Header"  # RabbitMQ's words, word for word


@pytest.mark.parametrize("written", ["true", "True", "TRUE"])
def test_durable_and_persistent_in_any_case_make_a_durable_subscription(written) -> None:
    """Python clients send a header value True as `True`."""
    conn = connected()
    for sid, header in (("a", "durable"), ("b", "persistent")):
        (sub,) = conn.receive_data(
            frame("SUBSCRIBE", id=sid, destination="/topic/t", **{header: written,
                                                                  "auto-delete": "False"})
        )  # fmt: skip
        assert sub.durable == sid


def test_a_client_id_with_control_characters_is_refused() -> None:
    conn = StompConnection()
    error = error_of(conn.receive_data(b"CONNECT\naccept-version:1.2\nclient-id:a\x07b\n\n\x00"))
    assert error.headers["message"] == "Invalid header"


def test_header_values_written_as_decimal_numbers_become_numbers() -> None:
    conn = connected()
    headers = {"amount": "700", "price": "12.5", "neg": "-3", "zip": "007", "big": "1e3",
               "cents": "12.50", "region": "eu", "plus": "+5"}  # fmt: skip
    (publish,) = conn.receive_data(frame("SEND", b"x", destination="/queue/q", **headers))
    typed = {"amount": 700, "price": 12.5, "neg": -3}
    assert publish.headers == {**headers, **typed}
    conn.receive_data(frame("SUBSCRIBE", id="s", destination="/queue/w"))
    send, _ = conn.deliver("s", delivery("t", headers=publish.headers))
    (message,) = server_frames([send])  # the same text comes out
    assert {k: message.headers[k] for k in headers} == headers


def test_temp_queues_count_against_the_subscription_limit() -> None:
    """Each reply-to:/temp-queue/<new name> made a queue, a reader and a Redis connection
    with no limit: one SEND batch of a thousand made hundreds, and the server ran out of
    Redis connections. They count as subscriptions do, and past the limit the frame is
    refused."""
    conn = StompConnection(StompConfig(max_subscriptions=3))
    conn.receive_data(frame("CONNECT", accept_version="1.2", passcode="t"))
    conn.accept(principal="me", session="s-1")
    conn.receive_data(frame("SUBSCRIBE", id="s", destination="/queue/q"))
    made, _ = conn.receive_data(frame("SEND", destination="/queue/s", reply_to="/temp-queue/a"))
    assert isinstance(made, TempQueue)
    error = error_of(conn.receive_data(
        frame("SEND", destination="/queue/s", reply_to="/temp-queue/b")))  # fmt: skip
    assert error.headers["message"] == "too many temporary queues"
