"""Delivery frames from outbox items, fast: the subscriber's per-message work.

An outbox item is JSON as engine/relay/wire.py writes it (body in base64); a delivery frame is
what xumpweb/router/codec.delivery_out makes of the same Delivery. Going through
relay.delivery_from_json and delivery_out with the standard json module costs about 90 us
a message on the development machine; this one step with orjson about 6 us.
tests/web/test_subscribe.py checks that both give the same frame.

An item the frame cannot carry (from data older than the publish checks or written by
another hand: a NaN or infinite header, a lone surrogate, a broken item) raises
`Undeliverable` with the delivery's tag when it can be read and a reason that says what is
wrong without repeating it; the subscriber pump rejects it to the dead letters and goes on.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import orjson

from engine.errors import InvalidArgument
from engine.validation import check_envelope, check_headers


class Undeliverable(Exception):
    """An outbox item that cannot become a frame: its tag (None when unreadable), why."""

    def __init__(self, tag: str | None, reason: str) -> None:
        super().__init__(reason)
        self.tag = tag
        self.reason = reason


def encode(value: Any) -> str:
    """JSON text for a WebSocket frame (UTF-8 kept as is)."""
    return orjson.dumps(value).decode()


def delivery_frame(raw: bytes | str) -> dict[str, Any]:
    """The delivery frame for one outbox item (codec.delivery_out's shape); Undeliverable
    when it cannot be one."""
    try:
        return _frame(raw)
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error):
        raise _undeliverable(raw) from None


def _undeliverable(raw: bytes | str) -> Undeliverable:
    """What is wrong with an item orjson refused, read again with the lenient json module
    (it takes NaN, Infinity, lone surrogates, big integers)."""
    try:
        data = json.loads(raw)
        tag = data["tag"]
        message = data["message"]
    except (ValueError, KeyError, TypeError, RecursionError):
        return Undeliverable(None, "the outbox item is not a delivery the relay wrote")
    if not isinstance(tag, str):
        return Undeliverable(None, "the outbox item has no delivery tag")
    reason = "it is not valid JSON"
    try:
        check_envelope(message.get("address"), message.get("return_address"))
        check_headers(message.get("headers") or None)
    except InvalidArgument as problem:
        reason = str(problem)
    except AttributeError:
        reason = "its message is not a JSON object"
    return Undeliverable(tag, f"the delivery cannot be sent as a JSON frame: {reason}")


def _frame(raw: bytes | str) -> dict[str, Any]:
    data = orjson.loads(raw)
    message = data["message"]
    body = base64.b64decode(message["body"])
    try:
        text, encoding = body.decode("utf-8"), "text"
    except UnicodeDecodeError:
        text, encoding = message["body"], "base64"
    return {
        "type": "delivery",
        "tag": data["tag"],
        "queue": data["queue"],
        "destination": data["destination"],
        "selector_id": data["selector_id"],
        "redelivered": data["redelivered"],
        "delivery_count": data["delivery_count"],
        "message": {
            "mid": message.get("mid"),
            "seq": message.get("seq"),
            "address": message["address"],
            "headers": message["headers"],
            "body": text,
            "encoding": encoding,
            "size": len(body),
            "return_address": message["return_address"],
            "timestamp": message.get("timestamp"),
            "destination": message.get("destination"),
            "ttl": message.get("ttl"),  # message lifetime (SPEC §8): absent when unset
            "delay": message.get("delay"),
        },
    }
