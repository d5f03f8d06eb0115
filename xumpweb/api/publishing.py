"""Messages from publish requests, checked by hand for speed.

A batch publish carries up to 10,000 messages; building a pydantic model per message costs
more than the rest of the request, so messages are checked here with plain type tests and
the engine's own header check (engine/validation.py), the same rules the router applies.
All or nothing: the first bad message is reported with its index and nothing is published.

Publishing returns once the messages are in the store's durable inbox; the router applies
them after. A queue with a limit and neither an overflow selector nor a dead-letter queue
would drop what does not fit: publishes to such a queue wait for the router's answer
(runtime.Service.publish_many), so a 409 queue_full is exact and a 202 means published.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from typing import Any

from django.conf import settings

from engine import Message
from engine.errors import InvalidArgument, MessageTooLarge
from engine.message import _EMPTY_HEADERS as EMPTY_HEADERS
from engine.validation import (
    check_envelope,
    check_headers,
    check_optional_seconds,
    check_priority,
    check_seconds,
)
from xumpweb.api.jsonbody import read_json
from xumpweb.runtime import Service

MAX_BATCH = 10_000
MESSAGE_KEYS = frozenset({
    "address", "headers", "body", "body_base64", "json", "return_address",
    "ttl", "delay", "not_before", "priority",  # message lifetime (SPEC §8)
})  # fmt: skip
BODY_KEYS = ("body", "body_base64", "json")
# allow_nan=False: a `json` body must be JSON that any reader takes (no NaN, Infinity)
_compact = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def message_from(data: Any, max_body: int, where: str = "") -> Message:
    """One message from its JSON object; InvalidArgument / MessageTooLarge if it is bad."""
    if type(data) is not dict:
        raise InvalidArgument(f"{where}a message must be a JSON object")
    if not MESSAGE_KEYS.issuperset(data):
        unknown = ", ".join(sorted(set(data) - MESSAGE_KEYS))
        raise InvalidArgument(f"{where}unknown field(s): {unknown}")
    address = data.get("address", "")
    if type(address) is not str:
        raise InvalidArgument(f"{where}address must be a string")
    return_address = data.get("return_address")
    if return_address is not None and type(return_address) is not str:
        raise InvalidArgument(f"{where}return_address must be a string or null")
    try:
        check_envelope(address, return_address)
    except InvalidArgument as error:
        raise InvalidArgument(f"{where}{error}") from None
    headers = data.get("headers")
    if headers:
        if type(headers) is not dict:
            raise InvalidArgument(f"{where}headers must be a JSON object")
        try:
            headers = check_headers(headers)
        except InvalidArgument as error:
            raise InvalidArgument(f"{where}{error}") from None
    elif headers is None or headers == {}:
        headers = EMPTY_HEADERS
    else:
        raise InvalidArgument(f"{where}headers must be a JSON object")
    body = _body(data, where)
    if len(body) > max_body:
        raise MessageTooLarge(
            f"{where}message body is {len(body)} bytes; the limit is {max_body} bytes"
        )
    if (
        "ttl" in data
        or "delay" in data
        or "not_before" in data
        or "priority" in data
        or "priority" in headers
    ):
        try:
            ttl, delay, headers = _lifetime(data, headers)
        except InvalidArgument as error:
            raise InvalidArgument(f"{where}{error}") from None
        return Message(address, headers, body, return_address, ttl=ttl, delay=delay)
    return Message(address, headers, body, return_address)


def _lifetime(data: dict[str, Any], headers: Any) -> tuple[float | None, float | None, Any]:
    """A message's ttl, delay (`not_before`, absolute epoch seconds, becomes a delay from
    now) and headers with `priority` (a field here, a header in the engine): SPEC §8."""
    ttl = check_optional_seconds("ttl", data.get("ttl"))
    delay = check_optional_seconds("delay", data.get("delay"))
    not_before = data.get("not_before")
    if not_before is not None:
        if delay is not None:
            raise InvalidArgument("give delay or not_before, not both")
        wait = check_seconds("not_before", not_before, maximum=float("inf")) - time.time()
        # a time past: at once; a time too far ahead is refused like such a delay
        delay = check_seconds("delay (from not_before)", wait) if wait > 0 else None
    priority = data.get("priority")
    if priority is not None:
        headers = check_headers({**headers, "priority": check_priority(priority)})
    elif "priority" in headers:
        check_priority(headers["priority"])
    return ttl, delay, headers


def _body(data: dict[str, Any], where: str) -> bytes:
    given = [key for key in BODY_KEYS if key in data]
    if not given:
        return b""
    if len(given) > 1:
        raise InvalidArgument(f"{where}give one of body, body_base64 and json, not several")
    key = given[0]
    value = data[key]
    if key == "body":
        if type(value) is not str:
            raise InvalidArgument(f"{where}body must be a string (use json for JSON values)")
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgument(f"{where}body is not valid Unicode text") from None
    if key == "body_base64":
        if type(value) is not str:
            raise InvalidArgument(f"{where}body_base64 must be a base64 string")
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise InvalidArgument(f"{where}body_base64 is not valid base64") from None
    try:
        return _compact(value).encode("utf-8")
    except ValueError:
        raise InvalidArgument(
            f"{where}json holds NaN or Infinity, which JSON cannot carry"
        ) from None
    except UnicodeEncodeError:
        raise InvalidArgument(f"{where}json holds text that is not valid Unicode") from None
    except RecursionError:
        raise InvalidArgument(f"{where}json is nested too deeply") from None


def messages_from(payload: Any) -> list[Message]:
    """The messages of a batch request `{"messages": [...]}`."""
    if type(payload) is not dict or set(payload) != {"messages"}:
        raise InvalidArgument('a batch is a JSON object {"messages": [...]}')
    items = payload["messages"]
    if type(items) is not list:
        raise InvalidArgument("messages must be a list")
    if not items:
        raise InvalidArgument("messages must not be empty")
    if len(items) > MAX_BATCH:
        raise InvalidArgument(f"a batch holds at most {MAX_BATCH} messages, not {len(items)}")
    max_body = settings.XUMP_MAX_BODY
    fast = EMPTY_HEADERS
    out = []
    append = out.append
    for index, data in enumerate(items):
        # the common case (text body, scalar fields, no headers) without the general path
        if (
            type(data) is dict
            and len(data) <= 2
            and type(data.get("body")) is str
            and type(data.get("address", "")) is str
            and data.get("address", "").isascii()
            and len(data["body"]) <= max_body // 4
            and (len(data) == 1 or "address" in data)
        ):
            try:
                body = data["body"].encode()
            except UnicodeEncodeError:
                pass  # a lone surrogate: the general path says so
            else:
                append(Message(data.get("address", ""), fast, body))
                continue
        append(message_from(data, max_body, f"messages[{index}]: "))
    return out


def publish_one(running: Service, queue: str, raw: bytes, wiring: int | None) -> dict[str, Any]:
    """POST /api/queues/{queue}/publish after authentication: the answer's JSON."""
    return answer("publish", running.publish_many(queue, read_messages("publish", raw), wiring))


def publish_batch(running: Service, queue: str, raw: bytes, wiring: int | None) -> dict[str, Any]:
    """POST /api/queues/{queue}/publish-batch after authentication: the answer's JSON."""
    messages = read_messages("publish-batch", raw)
    return answer("publish-batch", running.publish_many(queue, messages, wiring))


def read_messages(kind: str, raw: bytes) -> list[Message]:
    """The messages of a `publish` (one) or `publish-batch` request body; ApiError or
    InvalidArgument when it holds none that may be published."""
    if kind == "publish":
        return [message_from(read_json(raw), settings.XUMP_MAX_BODY)]
    return messages_from(read_json(raw))


def answer(kind: str, mids: list[str]) -> dict[str, Any]:
    """The 202's JSON for a `publish` or `publish-batch` whose messages got `mids`."""
    if kind == "publish":
        [mid] = mids
        return {"mid": mid}
    return {"mids": mids}
