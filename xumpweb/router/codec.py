"""Messages and deliveries as the API, the WebSockets and the console show them (JSON).

A body is text when it is valid UTF-8 (`"encoding": "text"`), else base64
(`"encoding": "base64"`).

What JSON cannot carry is shown so that every answer is valid JSON, for messages stored
before the publish checks refused such values (engine/validation.py): a NaN or infinite
header value as the string "NaN", "Infinity" or "-Infinity", a lone surrogate in text as
U+FFFD (docs/api.md).
"""

from __future__ import annotations

import base64
from math import isfinite
from typing import Any

from engine.message import Delivery, Message


def body_out(body: bytes) -> tuple[str, str]:
    """(text, encoding) for a body."""
    try:
        return body.decode("utf-8"), "text"
    except UnicodeDecodeError:
        return base64.b64encode(body).decode(), "base64"


def _text(text: str | None) -> str | None:
    """Text as JSON can carry it: a lone surrogate becomes U+FFFD."""
    if text is None or text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def _header(value: Any) -> Any:
    if type(value) is float and not isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if type(value) is str:
        return _text(value)
    return value


def headers_out(headers: Any) -> dict[str, Any]:
    """Headers as JSON can carry them (see the module doc)."""
    out = dict(headers)
    for name, value in out.items():
        kind = type(value)
        if (kind is float and not isfinite(value)) or (kind is str and not value.isascii()):
            return {_text(n): _header(v) for n, v in out.items()}
        if not name.isascii():
            return {_text(n): _header(v) for n, v in out.items()}
    return out


def message_out(message: Message) -> dict[str, Any]:
    body, encoding = body_out(message.body)
    return {
        "mid": message.mid,
        "seq": message.seq,
        "address": _text(message.address),
        "headers": headers_out(message.headers),
        "body": body,
        "encoding": encoding,
        "size": len(message.body),
        "return_address": _text(message.return_address),
        "timestamp": message.timestamp,
        "destination": message.destination,
        "ttl": message.ttl,  # message lifetime (SPEC §8)
        "delay": message.delay,
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
