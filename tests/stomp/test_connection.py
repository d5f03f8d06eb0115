"""The connection state machine: CONNECT, SEND, SUBSCRIBE, ACK/NACK, transactions,
receipts and DISCONNECT, seen through the actions it returns (xumpweb/stomp/connection.py)."""

from __future__ import annotations

import pytest

from tests.stomp.conftest import CONNECT, connected, delivery, error_of, frame, server_frames
from xumpweb.stomp.connection import (
    Authenticate,
    Barrier,
    Close,
    Commit,
    Publish,
    Send,
    Settle,
    StompConfig,
    StompConnection,
    Subscribe,
    Unsubscribe,
)


def test_connect_asks_the_transport_to_authenticate() -> None:
    conn = StompConnection()
    actions = conn.receive_data(CONNECT)
    assert actions == [
        Authenticate(
            login="me",
            passcode="token",
            host="xump",
            version="1.2",
            headers={"accept-version": "1.2", "host": "xump", "login": "me", "passcode": "token"},
        )
    ]


def test_accept_answers_connected_with_version_heartbeat_server_and_session() -> None:
    conn = StompConnection(StompConfig(heartbeat=(4000, 6000)))
    conn.receive_data(frame("STOMP", accept_version="1.0,1.1", heart_beat="1000,9000"))
    (connected_frame,) = server_frames(conn.accept(principal="me", session="s-9"))
    assert connected_frame.command == "CONNECTED"
    assert connected_frame.headers == {
        "version": "1.1",
        "heart-beat": "4000,6000",
        "server": "Xump/0.1",
        "session": "s-9",
    }
    assert conn.principal == "me"


@pytest.mark.parametrize(
    ("server", "client", "agreed"),
    [
        ((4000, 6000), "1000,9000", (9000, 6000)),  # each side: slower of can / wants
        ((4000, 6000), "0,0", (0, 0)),
        ((0, 0), "1000,1000", (0, 0)),
        ((4000, 6000), "8000,0", (0, 8000)),
        ((4000, 6000), " 1000 , 9000", (9000, 6000)),  # spaces around the numbers are fine
    ],
)
def test_heartbeats_are_negotiated_as_the_spec_says(
    server: tuple[int, int], client: str, agreed: tuple[int, int]
) -> None:
    conn = StompConnection(StompConfig(heartbeat=server))
    conn.receive_data(frame("CONNECT", accept_version="1.2", heart_beat=client))
    conn.accept()
    assert conn.heartbeat == agreed


def test_frames_sent_before_connected_wait_for_accept() -> None:
    conn = StompConnection()
    assert len(conn.receive_data(CONNECT + frame("SEND", b"x", destination="/queue/q"))) == 1
    actions = conn.accept()
    assert isinstance(actions[0], Send)
    assert actions[1:] == [Publish("q", {}, b"x")]


def test_refused_credentials_give_error_and_close() -> None:
    conn = StompConnection()
    conn.receive_data(CONNECT)
    actions = conn.refuse("the passcode is not a valid API token")
    (error,) = server_frames(actions)
    assert error.headers["message"] == "access refused"
    assert error.body == b"the passcode is not a valid API token"
    assert actions[-1] == Close()
    assert conn.receive_data(frame("SEND", destination="/queue/q")) == []


def test_refused_credentials_name_the_connect_frames_receipt() -> None:
    conn = StompConnection()
    conn.receive_data(CONNECT.replace(b"\n\n", b"\nreceipt:c1\n\n"))
    (error,) = server_frames(conn.refuse("unknown or revoked token"))
    assert error.headers["receipt-id"] == "c1"


def test_send_publishes_to_the_queue_with_mapped_headers() -> None:
    conn = connected()
    data = frame(
        "SEND",
        b"{}",
        destination="/queue/orders",
        receipt="r1",
        content_type="application/json",
        reply_to="/queue/replies",
        expires="1700000000500",
        delay="1500",
        priority="7",
        kind="order",
    )
    assert conn.receive_data(data) == [
        Publish(
            queue="orders",
            headers={"content-type": "application/json", "priority": 7, "kind": "order"},
            body=b"{}",
            return_address="replies",
            expires=1700000000.5,
            delay=1.5,
            receipt="r1",
        )
    ]


@pytest.mark.parametrize("reply_to", ["/topic/answers", "/exchange/amq.direct/back", "back"])
def test_a_reply_to_of_another_form_goes_through_as_its_header(reply_to) -> None:
    """RabbitMQ passes any reply-to through to the consumer: a program written for it sends
    /topic/ or /exchange/ forms, or a bare name. Only /queue/<name> (the return address)
    and /temp-queue/<name> (the connection's private queue) mean more here."""
    conn = connected()
    [publish] = conn.receive_data(frame("SEND", b"q", destination="/queue/service",
                                        reply_to=reply_to))  # fmt: skip
    assert publish.return_address is None
    assert publish.headers == {"reply-to": reply_to}
    conn.receive_data(frame("SUBSCRIBE", id="s", destination="/queue/service"))
    d = delivery(headers=publish.headers, return_address=None)
    (message,) = server_frames(conn.deliver("s", d))
    assert message.headers["reply-to"] == reply_to


def test_receipt_done_answers_with_a_receipt_frame() -> None:
    conn = connected()
    (receipt,) = server_frames(conn.receipt_done("r1"))
    assert receipt.command == "RECEIPT"
    assert receipt.headers == {"receipt-id": "r1"}


def test_subscribe_maps_queue_and_topic_destinations_ack_selector_and_prefetch() -> None:
    conn = connected()
    actions = conn.receive_data(
        frame(
            "SUBSCRIBE",
            id="a",
            destination="/queue/work",
            ack="client-individual",
            selector="kind = 'order'",
            prefetch_count="10",
            receipt="r",
        )
        + frame(
            "SUBSCRIBE", id="b", destination="/topic/orders.*", **{"activemq.prefetchSize": "5"}
        )
    )
    assert actions == [
        Subscribe("a", "queue", "work", "client-individual", "kind = 'order'", 10, "r"),
        Subscribe("b", "topic", "orders.*", "auto", None, 5, None),
    ]
    assert conn.subscriptions == {
        "a": Subscribe("a", "queue", "work", "client-individual", "kind = 'order'", 10),
        "b": Subscribe("b", "topic", "orders.*", "auto", None, 5),
    }


def test_message_frames_carry_the_delivery() -> None:
    conn = connected()
    conn.receive_data(frame("SUBSCRIBE", id="a", destination="/queue/work", ack="client"))
    d = delivery(
        headers={"kind": "a:b\nc", "subscription": "spoof", "flag": True, "n": 3},
        return_address="replies",
        redelivered=True,
        delivery_count=2,
    )
    (message,) = server_frames(conn.deliver("a", d))
    assert message.command == "MESSAGE"
    assert message.headers == {
        "subscription": "a",
        "message-id": "1",
        "destination": "/queue/work",
        "redelivered": "true",
        "x-delivery-count": "2",
        "ack": "1",
        "mid": "m-1",
        "seq": "7",
        "reply-to": "/queue/replies",
        "kind": "a:b\nc",
        "flag": "true",
        "n": "3",
        "content-length": "2",
    }
    assert message.body == b"hi"


def test_topic_messages_name_the_topic_they_matched() -> None:
    conn = connected()
    conn.receive_data(frame("SUBSCRIBE", id="t", destination="/topic/orders.*"))
    (message,) = server_frames(conn.deliver("t", delivery(address="orders.eu")))
    assert message.headers["destination"] == "/topic/orders.eu"


def test_auto_ack_settles_as_it_delivers() -> None:
    conn = connected()
    conn.receive_data(frame("SUBSCRIBE", id="a", destination="/queue/work"))
    actions = conn.deliver("a", delivery("t1"))
    assert actions[1:] == [Settle("a", ("t1",), accept=True)]
    assert "ack" not in server_frames(actions[:1])[0].headers
    assert conn.unsettled() == {}


def deliver_three(conn: StompConnection, sid: str) -> list[str]:
    """Deliver tags t1..t3 to `sid`; the MESSAGE ack ids."""
    return [
        server_frames(conn.deliver(sid, delivery(f"t{i}")))[0].headers["ack"] for i in (1, 2, 3)
    ]


def test_client_ack_is_cumulative() -> None:
    conn = connected()
    conn.receive_data(frame("SUBSCRIBE", id="a", destination="/queue/work", ack="client"))
    ids = deliver_three(conn, "a")
    assert conn.receive_data(frame("ACK", id=ids[1], receipt="r")) == [
        Settle("a", ("t1", "t2"), accept=True, receipt="r")
    ]
    assert conn.unsettled() == {"a": ("t3",)}


def test_client_individual_ack_and_nack_settle_one_message() -> None:
    conn = connected()
    conn.receive_data(
        frame("SUBSCRIBE", id="a", destination="/queue/work", ack="client-individual")
    )
    ids = deliver_three(conn, "a")
    assert conn.receive_data(frame("NACK", id=ids[1])) == [Settle("a", ("t2",), accept=False)]
    assert conn.receive_data(frame("ACK", id=ids[2])) == [Settle("a", ("t3",), accept=True)]
    assert conn.unsettled() == {"a": ("t1",)}


def test_nack_with_requeue_false_rejects_without_requeue() -> None:
    """RabbitMQ's NACK header `requeue:false`: dead letters or dropped, not redelivered;
    `true` (any case) or no header requeues; another value is an ERROR."""
    conn = connected()
    conn.receive_data(
        frame("SUBSCRIBE", id="a", destination="/queue/work", ack="client-individual")
    )
    ids = deliver_three(conn, "a")
    assert conn.receive_data(frame("NACK", id=ids[0], requeue="false")) == [
        Settle("a", ("t1",), accept=False, requeue=False)
    ]
    assert conn.receive_data(frame("NACK", id=ids[1], requeue="True")) == [
        Settle("a", ("t2",), accept=False)
    ]
    assert conn.receive_data(frame("ACK", id=ids[2], requeue="false")) == [
        Settle("a", ("t3",), accept=True)  # means nothing on an ACK
    ]
    ids = deliver_three(conn, "a")
    error = server_frames(conn.receive_data(frame("NACK", id=ids[0], requeue="no")))[0]
    assert error.headers["message"] == "Invalid header"
    assert conn.unsettled() == {"a": ("t1", "t2", "t3")}


@pytest.mark.parametrize("command", ["ACK", "NACK"])
def test_stomp_12_acks_by_id_only(command) -> None:
    """STOMP 1.2 §ACK: the `id` header, the MESSAGE's `ack`; a 1.2 ACK with only 1.1's
    `message-id` is an ERROR (RabbitMQ's test_ack_without_id_header_fails), not taken
    as the id."""
    conn = connected()
    conn.receive_data(frame("SUBSCRIBE", id="a", destination="/queue/work", ack="client"))
    (ack_id, *_) = deliver_three(conn, "a")
    error = error_of(conn.receive_data(frame(command, subscription="a", message_id=ack_id)))
    assert error.headers["message"] == "Missing header"
    assert "`id`" in error.body.decode()


def test_unsubscribe_hands_back_the_unsettled_tags() -> None:
    conn = connected()
    conn.receive_data(frame("SUBSCRIBE", id="a", destination="/queue/work", ack="client"))
    deliver_three(conn, "a")
    assert conn.receive_data(frame("UNSUBSCRIBE", id="a", receipt="r")) == [
        Unsubscribe("a", ("t1", "t2", "t3"), "r")
    ]
    assert conn.subscriptions == {}
    # a delivery racing the unsubscribe goes back
    assert conn.deliver("a", delivery("t4")) == [Settle("a", ("t4",), accept=False)]


def test_transactions_buffer_sends_and_acks_until_commit() -> None:
    conn = connected()
    conn.receive_data(frame("SUBSCRIBE", id="a", destination="/queue/work", ack="client"))
    ids = deliver_three(conn, "a")
    assert conn.receive_data(frame("BEGIN", transaction="tx")) == []
    inside = conn.receive_data(
        frame("SEND", b"1", destination="/queue/q", transaction="tx", receipt="r1")
        + frame("ACK", id=ids[0], transaction="tx", receipt="r2")
    )
    assert inside == []  # their receipts come once COMMIT has carried them out
    assert conn.unsettled() == {"a": ("t1", "t2", "t3")}
    assert conn.receive_data(frame("COMMIT", transaction="tx", receipt="c")) == [
        Commit(2, "c"),
        Publish("q", {}, b"1", receipt="r1"),
        Settle("a", ("t1",), accept=True, receipt="r2"),
        Barrier("c"),
    ]


def test_abort_drops_the_transaction() -> None:
    conn = connected()
    conn.receive_data(frame("BEGIN", transaction="tx"))
    conn.receive_data(frame("SEND", b"1", destination="/queue/q", transaction="tx", receipt="s"))
    (receipt,) = server_frames(conn.receive_data(frame("ABORT", transaction="tx", receipt="r")))
    assert receipt.headers == {"receipt-id": "r"}  # the dropped SEND's never comes
    error = server_frames(conn.receive_data(frame("COMMIT", transaction="tx")))[0]
    assert error.headers["message"] == "unknown transaction"


def test_disconnect_without_receipt_closes() -> None:
    conn = connected()
    assert conn.receive_data(frame("DISCONNECT")) == [Close()]
    assert conn.receive_data(frame("SEND", destination="/queue/q")) == []


def test_disconnect_receipt_comes_after_earlier_work_then_closes() -> None:
    conn = connected()
    actions = conn.receive_data(
        frame("SEND", destination="/queue/q", receipt="p") + frame("DISCONNECT", receipt="d")
    )
    assert actions == [Publish("q", {}, b"", receipt="p"), Barrier("d")]
    assert server_frames(conn.receipt_done("p"))[0].headers == {"receipt-id": "p"}
    done = conn.receipt_done("d")
    assert server_frames(done)[0].headers == {"receipt-id": "d"}
    assert done[-1] == Close()


def test_transport_failure_is_an_error_frame_naming_the_receipt() -> None:
    conn = connected()
    conn.receive_data(frame("SEND", destination="/queue/q", receipt="r7"))
    actions = conn.fail("queue 'q' is full", "the queue holds 1000 messages", receipt="r7")
    (error,) = server_frames(actions)
    assert error.headers["message"] == "queue 'q' is full"
    assert error.headers["receipt-id"] == "r7"
    assert actions[-1] == Close()


def test_bad_selector_error_points_at_its_column() -> None:
    conn = connected()
    conn.receive_data(
        frame("SUBSCRIBE", id="a", destination="/queue/work", selector="kind = = 'x'")
    )
    actions = conn.refuse_subscription("a", "unexpected '='", column=8)
    (error,) = server_frames(actions)
    assert error.headers["message"] == "bad selector for subscription 'a'"
    assert error.body.decode() == ("unexpected '='\n\n  kind = = 'x'\n         ^\n(column 8)")
    assert actions[-1] == Close()


def test_websocket_messages_hold_whole_frames() -> None:
    conn = connected()
    assert conn.receive_message(frame("SEND", destination="/queue/q") + b"\n") == [
        Publish("q", {}, b"")
    ]
    actions = conn.receive_message(b"SEND\ndestination:/queue/q\n\nno nul")
    assert server_frames(actions)[0].headers["message"] == "frame not terminated by NUL"


@pytest.mark.parametrize(
    "partial",
    [b"SEND\nreceipt:r\\c1\ndestination:/queue/q\n\nno nul", b"SEND\nreceipt:r\\c1\nx:y"],
    ids=["body", "headers"],
)
def test_a_message_ending_inside_a_frame_names_its_receipt_when_it_arrived(partial) -> None:
    conn = connected()
    (error,) = server_frames(conn.receive_message(partial))
    assert error.headers["receipt-id"] == "r:1"
    conn = connected()
    (error,) = server_frames(conn.receive_message(b"SEND\nx:y\nreceipt:r"))  # not whole
    assert "receipt-id" not in error.headers


def test_a_send_to_a_topic_publishes_to_the_topic_router_with_that_address():
    connection = connected()
    actions = connection.receive_data(frame("SEND", b"hi", destination="/topic/stock.ibm"))
    assert actions == [Publish(None, {}, b"hi", address="stock.ibm")]
