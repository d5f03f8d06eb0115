"""Every client mistake: an ERROR frame with a clear `message`, `receipt-id` when the frame
asked for a receipt, then Close, and no engine action for the offending frame."""

from __future__ import annotations

import pytest

from tests.stomp.conftest import CONNECT, connected, delivery, error_of, frame
from xumpweb.stomp.connection import StompConfig, StompConnection

SUB = frame("SUBSCRIBE", id="a", destination="/queue/work", ack="client-individual")


def send(**headers: str) -> bytes:
    """A SEND asking for receipt `r`, to /queue/q unless `headers` name a destination."""
    return frame("SEND", receipt="r", **{"destination": "/queue/q", **headers})


def subscribe(**headers: str) -> bytes:
    """A SUBSCRIBE asking for receipt `r`, id `b` to /queue/a unless `headers` say otherwise."""
    return frame("SUBSCRIBE", receipt="r", **{"id": "b", "destination": "/queue/a", **headers})


# (name, bytes sent after CONNECT, expected `message` header)
CASES = [
    ("malformed header", b"SEND\nno-colon\nreceipt:r\n\n\x00", "malformed header"),
    ("bad escape", b"SEND\ndestination:/queue/a\\tb\nreceipt:r\n\n\x00", "bad escape in header"),
    ("unknown command", b"PUBLISH\nreceipt:r\n\n\x00", "Bad command"),
    ("server command", b"MESSAGE\nreceipt:r\n\n\x00", "Bad command"),
    (
        "content-length without nul",
        b"SEND\ndestination:/queue/a\ncontent-length:1\nreceipt:r\n\nab\x00",
        "frame not terminated by NUL",
    ),
    (
        "body on subscribe",
        b"SUBSCRIBE\nid:x\nreceipt:r\n\nbody\x00",
        "a SUBSCRIBE frame must not have a body",
    ),
    ("send without destination", frame("SEND", b"x", receipt="r"), "Missing destination"),
    ("send to an existing queue, RabbitMQ's way", send(destination="/amq/queue/a"),
     "Unknown destination"),
    ("send to a bad exchange", send(destination="/exchange/a/b/c"), "Invalid destination"),
    ("send to an empty topic", send(destination="/topic/"), "Invalid destination"),
    ("send to a bad queue name", send(destination="/queue/a b"), "Invalid destination"),
    ("send to a reserved queue", send(destination="/queue/$dlq"), "Invalid destination"),
    ("send with a bad header name", send(**{"9x": "1"}), "Invalid header"),
    ("send with a bad priority", send(priority="high"), "Invalid header"),
    ("send with a negative priority", send(priority="-1"), "Invalid header"),
    ("send with a delay of more than ten years", send(delay=str(11 * 365 * 24 * 3600_000)),
     "Invalid header"),
    ("send with a bad delay", send(delay="-5"), "Invalid header"),
    ("send with a reply-to queue of a bad name", send(reply_to="/queue/a b"),
     "Invalid destination"),
    ("send with a reply-to holding a NUL", b"SEND\ndestination:/queue/q\nreceipt:r\n"
     b"reply-to:/topic/a\x00b\ncontent-length:0\n\n\x00", "Invalid header"),
    ("subscribe without id", frame("SUBSCRIBE", destination="/queue/a", receipt="r"),
     "Missing header"),
    ("subscribe to a bad destination", subscribe(destination="/reply-queue/a"),
     "Unknown destination"),
    ("subscribe to the default exchange", subscribe(destination="/exchange//a"),
     "Invalid destination"),
    ("subscribe with empty pattern", subscribe(destination="/topic/"), "Invalid destination"),
    ("duplicate subscription id", subscribe(id="a", destination="/queue/x"),
     "Duplicated subscription identifier"),
    ("bad ack mode", subscribe(ack="sometimes"), "bad ack mode"),
    ("bad prefetch", subscribe(prefetch_count="0"), "Invalid header"),
    ("unsubscribe unknown", frame("UNSUBSCRIBE", id="zz", receipt="r"), "unknown subscription"),
    ("ack unknown id", frame("ACK", id="999", receipt="r"), "unknown ack id in ACK"),
    ("nack unknown id", frame("NACK", id="999", receipt="r"), "unknown ack id in NACK"),
    ("ack without id", frame("ACK", receipt="r"), "Missing header"),
    ("ack of an auto message", frame("ACK", id="1", receipt="r"), "unknown ack id in ACK"),
    ("send in unknown transaction", send(transaction="t"), "unknown transaction"),
    ("commit unknown transaction", frame("COMMIT", transaction="t", receipt="r"),
     "unknown transaction"),
    ("begin without transaction", frame("BEGIN", receipt="r"), "Missing header"),
    ("connect twice", b"CONNECT\naccept-version:1.2\nreceipt:r\n\n\x00", "unexpected CONNECT"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_each_mistake_is_an_error_frame_and_nothing_else(data: bytes, message: str) -> None:
    conn = connected()
    conn.receive_data(SUB)
    conn.receive_data(frame("SUBSCRIBE", id="auto", destination="/queue/w2"))
    conn.deliver("auto", delivery("t0"))  # ack id "1", auto mode: not ackable
    before = (conn.subscriptions, conn.unsettled())
    actions = conn.receive_data(data + frame("SEND", destination="/queue/after"))
    error = error_of(actions)  # no Publish/Subscribe/Settle for the bad frame or the next
    assert error.headers["message"] == message
    assert error.headers["receipt-id"] == "r"
    assert error.body  # a sentence explaining
    assert (conn.subscriptions, conn.unsettled()) == before
    assert conn.receive_data(frame("SEND", destination="/queue/q")) == []


def test_ack_of_another_connections_id_is_an_error() -> None:
    mine, theirs = connected(), connected()
    for conn in (mine, theirs):
        conn.receive_data(SUB)
    theirs.deliver("a", delivery("t1"))
    theirs.deliver("a", delivery("t2"))  # ack id "2" exists only on the other connection
    error = error_of(mine.receive_data(frame("ACK", id="2")))
    assert error.headers["message"] == "unknown ack id in ACK"
    assert theirs.unsettled() == {"a": ("t1", "t2")}


def test_a_frame_before_connect_is_an_error() -> None:
    conn = StompConnection()
    error = error_of(conn.receive_data(frame("SEND", destination="/queue/q", receipt="r")))
    assert error.headers["message"] == "expected CONNECT"
    assert error.headers["receipt-id"] == "r"


def test_a_bad_heartbeat_header_is_an_error() -> None:
    conn = StompConnection()
    error = error_of(conn.receive_data(frame("CONNECT", accept_version="1.2", heart_beat="x")))
    assert error.headers["message"] == "bad heart-beat"


def test_an_oversized_frame_is_an_error() -> None:
    conn = connected(StompConfig(max_frame_size=1000))
    error = error_of(conn.receive_data(frame("SEND", b"x" * 2000, destination="/queue/q")))
    assert error.headers["message"] == "frame too large"


def test_an_oversized_header_is_an_error() -> None:
    conn = connected(StompConfig(max_header_length=100))
    error = error_of(conn.receive_data(frame("SEND", destination="/queue/q", x="v" * 200)))
    assert error.headers["message"] == "header too long"


def test_too_many_headers_is_an_error() -> None:
    conn = connected(StompConfig(max_headers=5))
    headers = {f"h{i}": "v" for i in range(6)}
    error = error_of(conn.receive_data(frame("SEND", destination="/queue/q", **headers)))
    assert error.headers["message"] == "too many headers"


def test_a_flood_while_authenticating_is_an_error() -> None:
    conn = StompConnection(StompConfig(max_frame_size=1000))
    conn.receive_data(CONNECT)
    error = error_of(conn.receive_data(b"x" * 2000))
    assert error.headers["message"] == "frame too large"


def test_error_messages_with_newlines_are_escaped_in_the_header() -> None:
    conn = connected()
    error = error_of(conn.fail("line one\nline: two"))
    assert error.headers["message"] == "line one\nline: two"


@pytest.mark.parametrize(
    ("data", "message", "detail"),
    [
        (frame("SEND", destination="/something/interesting"), "Unknown destination", "/queue/"),
        (frame("SEND"), "Missing destination", "`destination` header"),
        (frame("SUBSCRIBE", id="s"), "Missing destination", "`destination` header"),
        (frame("SUBSCRIBE", id="a", destination="/queue/x"), "Duplicated subscription identifier",
         "'a'"),
        (frame("SEND", destination="/queue/q", **{"9x": "1"}), "Invalid header", "9x"),
        (frame("ACK", message_id="1"), "Missing header", "`id` header"),
    ],
)  # fmt: skip
def test_where_rabbitmq_has_words_for_a_mistake_the_message_is_its_and_the_body_ours(
    data: bytes, message: str, detail: str
) -> None:
    """Programs (and RabbitMQ's own tests) written for RabbitMQ compare the ERROR's
    `message` header: where it has a wording, ours is the same, word for word; the body
    says what exactly, in our words."""
    conn = connected()
    conn.receive_data(SUB)
    error = error_of(conn.receive_data(data))
    assert error.headers["message"] == message
    assert detail in error.body.decode()


@pytest.mark.parametrize(
    "data",
    [send(destination="/queue/a b"), send(destination="/exchange/a/b/c"), send(**{"9x": "1"})],
)
def test_a_refused_destination_or_header_is_refused_every_time(data: bytes) -> None:
    """Destinations and header names are checked once per text (a cache): what passed is
    kept, a refusal never is: each connection that sends it again gets the ERROR again."""
    good = frame("SEND", receipt="g", destination="/queue/a", x_good="1")
    for _ in range(3):
        conn = connected()
        assert conn.receive_data(good)[0].queue == "a"
        assert error_of(conn.receive_data(data)).headers["receipt-id"] == "r"


def test_a_long_topic_address_is_checked_each_time_and_published() -> None:
    address = "a." * 2000  # past the length whose resolution is kept
    conn = connected()
    for _ in range(2):
        (publish,) = conn.receive_data(frame("SEND", destination=f"/topic/{address}"))
        assert (publish.queue, publish.address) == (None, address)
