"""Helpers for driving the STOMP core: build frames, connect, read what the core sends."""

from __future__ import annotations

from collections.abc import Iterable

from engine.message import Delivery, Message
from xumpweb.stomp.connection import Action, Close, Send, StompConfig, StompConnection
from xumpweb.stomp.frames import SERVER_COMMANDS, Frame, FrameParser, serialize_parts

CONNECT = b"CONNECT\naccept-version:1.2\nhost:xump\nlogin:me\npasscode:token\n\n\x00"


def frame(command: str, body: bytes = b"", **headers: str) -> bytes:
    """A client frame; keyword `_` becomes `-` in header names (content_type=...)."""
    return serialize_parts(
        command, [(name.replace("_", "-"), value) for name, value in headers.items()], body
    )


def connected(config: StompConfig | None = None) -> StompConnection:
    conn = StompConnection(config)
    conn.receive_data(CONNECT)
    conn.accept(principal="me", session="s-1")
    return conn


def server_frames(actions: Iterable[Action]) -> list[Frame]:
    """The frames the core asked to send, parsed back as a client would."""
    parser = FrameParser(commands=SERVER_COMMANDS)
    for action in actions:
        if isinstance(action, Send):
            parser.receive_data(action.data)
    frames = []
    while (parsed := parser.next_frame()) is not None:
        frames.append(parsed)
    assert parser.buffered == 0
    return frames


def error_of(actions: list[Action]) -> Frame:
    """The ERROR frame of actions that must be exactly: send ERROR, then close."""
    assert len(actions) == 2, actions
    assert isinstance(actions[1], Close), actions
    (error,) = server_frames(actions[:1])
    assert error.command == "ERROR"
    assert error.headers["message"]
    return error


def delivery(tag: str = "t1", body: bytes = b"hi", **overrides: object) -> Delivery:
    message = Message(
        address=str(overrides.pop("address", "orders.eu")),
        headers=overrides.pop("headers", {"kind": "order"}),  # type: ignore[arg-type]
        body=body,
        return_address=overrides.pop("return_address", None),  # type: ignore[arg-type]
        mid="m-1",
        seq=7,
    )
    return Delivery(tag, str(overrides.pop("destination", "work")), "q", 1, message, **overrides)  # type: ignore[arg-type]
