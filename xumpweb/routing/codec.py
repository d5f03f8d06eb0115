"""Messages and deliveries as the API, the WebSockets and the console show them (JSON).

A body is text when it is valid UTF-8 (`"encoding": "text"`), else base64
(`"encoding": "base64"`).
"""

from __future__ import annotations

import base64
from typing import Any

from engine.message import Delivery, Message


def body_out(body: bytes) -> tuple[str, str]:
    """(text, encoding) for a body."""
    try:
        return body.decode("utf-8"), "text"
    except UnicodeDecodeError:
        return base64.b64encode(body).decode(), "base64"


def message_out(message: Message) -> dict[str, Any]:
    body, encoding = body_out(message.body)
    return {
        "mid": message.mid,
        "seq": message.seq,
        "address": message.address,
        "headers": dict(message.headers),
        "body": body,
        "encoding": encoding,
        "size": len(message.body),
        "return_address": message.return_address,
        "timestamp": message.timestamp,
        "destination": message.destination,
    }


def delivery_out(delivery: Delivery) -> dict[str, Any]:
    return {
        "type": "delivery",
        "tag": delivery.tag,
        "queue": delivery.queue,
        "destination": delivery.destination,
        "selector_id": delivery.selector_id,
        "redelivered": delivery.redelivered,
        "delivery_count": delivery.delivery_count,
        "message": message_out(delivery.message),
    }
