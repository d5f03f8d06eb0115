"""Delivery frames from outbox items, fast: the subscriber's per-message work.

An outbox item is JSON as engine/relay.py writes it (body in base64); a delivery frame is
what xumpweb/routing/codec.delivery_out makes of the same Delivery. Going through
relay.delivery_from_json and delivery_out with the standard json module costs about 90 us
a message on the development machine; this one step with orjson about 6 us.
tests/web/test_subscribe.py checks that both give the same frame.
"""

from __future__ import annotations

import base64
from typing import Any

import orjson


def encode(value: Any) -> str:
    """JSON text for a WebSocket frame (UTF-8 kept as is)."""
    return orjson.dumps(value).decode()


def delivery_frame(raw: bytes | str) -> dict[str, Any]:
    """The delivery frame for one outbox item (codec.delivery_out's shape)."""
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
        },
    }
