"""Version negotiation (STOMP 1.2 "Protocol Negotiation"): 1.0, 1.1 and 1.2 clients, each
spoken as its specification says: 1.0 has no header escapes, no NACK, an optional
subscription id, and ACKs by `message-id`."""

from __future__ import annotations

import pytest

from tests.stomp.conftest import delivery, error_of, server_frames
from xumpweb.stomp.connection import Publish, Settle, StompConnection, Subscribe, Unsubscribe

CONNECT_10 = b"CONNECT\nlogin:me\npasscode:token\n\n\x00"


def connected_as(connect: bytes) -> StompConnection:
    conn = StompConnection()
    conn.receive_data(connect)
    conn.accept(principal="me", session="s-1")
    return conn


@pytest.mark.parametrize(
    ("offered", "agreed"),
    [(None, "1.0"), ("1.0", "1.0"), ("1.0,1.1", "1.1"), ("1.1", "1.1"), ("1.0,1.1,1.2", "1.2")],
)
def test_the_highest_version_both_speak_is_agreed(offered, agreed) -> None:
    connect = b"CONNECT\nlogin:me\npasscode:token\n"
    if offered is not None:
        connect += f"accept-version:{offered}\n".encode()
    conn = StompConnection()
    conn.receive_data(connect + b"\n\x00")
    (connected,) = server_frames(conn.accept(principal="me", session="s-1"))
    assert connected.headers["version"] == agreed and conn.version == agreed


def test_a_client_offering_no_version_we_speak_is_refused_with_the_versions_we_speak() -> None:
    conn = StompConnection()
    error = error_of(conn.receive_data(b"CONNECT\naccept-version:2.0,3.1\n\n\x00"))
    assert error.headers["message"] == "unsupported version"
    assert error.headers["version"] == "1.0,1.1,1.2"


def test_stomp_10_subscribes_without_an_id_and_acks_by_message_id() -> None:
    conn = connected_as(CONNECT_10)
    (sub,) = conn.receive_data(b"SUBSCRIBE\ndestination:/queue/work\nack:client\n\n\x00")
    assert sub == Subscribe("/queue/work", "queue", "work", "client")
    (message,) = server_frames(conn.deliver("/queue/work", delivery("t1")))
    assert message.headers["subscription"] == "/queue/work"
    ack = f"ACK\nmessage-id:{message.headers['message-id']}\nreceipt:a\n\n\x00".encode()
    assert conn.receive_data(ack) == [Settle("/queue/work", ("t1",), accept=True, receipt="a")]


def test_stomp_10_unsubscribes_by_destination() -> None:
    conn = connected_as(CONNECT_10)
    conn.receive_data(b"SUBSCRIBE\ndestination:/queue/work\n\n\x00")
    (unsub,) = conn.receive_data(b"UNSUBSCRIBE\ndestination:/queue/work\n\n\x00")
    assert unsub == Unsubscribe("/queue/work")


def test_stomp_10_has_no_nack() -> None:
    conn = connected_as(CONNECT_10)
    conn.receive_data(b"SUBSCRIBE\ndestination:/queue/work\nack:client\n\n\x00")
    (message,) = server_frames(conn.deliver("/queue/work", delivery("t1")))
    nack = f"NACK\nmessage-id:{message.headers['message-id']}\n\n\x00".encode()
    error = error_of(conn.receive_data(nack))
    assert error.headers["message"] == "unexpected NACK"
    assert "1.0" in error.body.decode()


def test_stomp_10_headers_are_not_escaped_either_way() -> None:
    conn = connected_as(CONNECT_10)
    (publish,) = conn.receive_data(b"SEND\ndestination:/queue/q\nnote:a\\b:c\n\nhi\x00")
    assert isinstance(publish, Publish) and publish.headers["note"] == "a\\b:c"
    conn.receive_data(b"SUBSCRIBE\nid:s\ndestination:/queue/work\n\n\x00")
    (send, _) = conn.deliver("s", delivery("t1", headers={"note": "a:b"}))
    assert b"\nnote:a:b\n" in send.data


def test_stomp_11_acks_by_message_id_with_the_subscription() -> None:
    conn = connected_as(b"CONNECT\naccept-version:1.1\nlogin:me\npasscode:t\n\n\x00")
    conn.receive_data(b"SUBSCRIBE\nid:s\ndestination:/queue/work\nack:client-individual\n\n\x00")
    (message,) = server_frames(conn.deliver("s", delivery("t1")))
    ack = f"ACK\nsubscription:s\nmessage-id:{message.headers['message-id']}\n\n\x00".encode()
    assert conn.receive_data(ack) == [Settle("s", ("t1",), accept=True)]


def test_stomp_10_has_no_heart_beats() -> None:
    conn = StompConnection()
    conn.receive_data(b"CONNECT\nlogin:me\npasscode:t\nheart-beat:1000,1000\n\n\x00")
    (connected,) = server_frames(conn.accept(principal="me", session="s-1"))
    assert connected.headers["heart-beat"] == "0,0" and conn.heartbeat == (0, 0)
