"""The relay's wire format: where it keeps things in Redis (the keys of a store's inbox,
outboxes, errors list and delivery timeouts) and how it writes messages, deliveries and
commands there (JSON; a body in base64). Clients that speak to Redis themselves (the
service's asyncio consumers) read the same keys and items. See the package doc.
"""

from __future__ import annotations

import json
from binascii import a2b_base64, b2a_base64
from math import isfinite
from types import MappingProxyType
from typing import Any

import orjson

from engine.message import _EMPTY_HEADERS as EMPTY_HEADERS
from engine.message import Delivery, Message


def relay_keys(store: str) -> tuple[str, str, str]:
    """The store's inbox key, the prefix of its outbox keys (add the destination) and its
    errors key, for clients that speak to Redis themselves (e.g. with redis.asyncio)."""
    return _keys(store)


def _keys(store: str) -> tuple[str, str, str]:
    prefix = f"xump:{{{store}}}:"
    return prefix + "inbox", prefix + "outbox:", prefix + "errors"


def pushed_key(store: str) -> str:
    """The store's pushed counter: how many commands were ever appended to its inbox,
    counted by the one script every append runs (scripts.PUSH; the package doc, "Rings that
    carry the commands")."""
    return f"xump:{{{store}}}:pushed"


# a ring carries the commands it announces when they take up to this many bytes
RING_CARRIES = 64 * 1024


def ring_commands(ring: bytes) -> tuple[int, list[bytes]] | None:
    """What a ring of the doorbell carries (scripts.PUSH): the pushed counter's value after
    the append and the commands appended, in order; None for a ring that carries none (an
    empty one, an arrival, anything else)."""
    if ring[:1] != b"=":
        return None
    head, _, rest = ring.partition(b"\n")
    try:
        count = int(head[1:])
        commands: list[bytes] = []
        at = 0
        while at < len(rest):
            end = rest.index(b"\n", at)
            size = int(rest[at:end])
            if size < 0:
                return None
            commands.append(rest[end + 1 : end + 1 + size])
            at = end + 2 + size
    except ValueError:
        return None
    if at != len(rest) + 1 or not commands:
        return None
    return count, commands


def delivery_keys(store: str) -> dict[str, str]:
    """The store's keys for delivery timeouts and presence (see the package doc): the taken
    set, the claimed and autoacked lists, and the prefixes of revoked sets and presence
    keys (add the destination)."""
    prefix = f"xump:{{{store}}}:"
    return {
        "taken": prefix + "taken",
        "claimed": prefix + "claimed",
        "autoacked": prefix + "autoacked",
        "revoked": prefix + "revoked:",
        "present": prefix + "present:",
        "absent": prefix + "absent",
    }


def forward_keys(store: str) -> dict[str, str]:
    """The store's keys for crossing shards (docs/scaling.md): the forward list, its
    counter, and the marks of what each other shard forwarded here."""
    prefix = f"xump:{{{store}}}:"
    return {
        "forward": prefix + "forward",
        "forward_seq": prefix + "forward:seq",
        "forwarded": prefix + "forwarded",
    }


PRESENCE_EVERY = 1.0  # seconds between a consumer's presence refreshes
PRESENCE_TTL_MS = 3000  # a presence key outlives its consumer by at most this


def message_json(message: Message) -> dict[str, Any]:
    """A message as the relay writes it (the body in base64)."""
    return _message_json(message)


def delivery_from_json(raw: bytes | str) -> Delivery:
    """A Delivery from an outbox item."""
    return _delivery_from(raw)


def _message_json(message: Message) -> dict[str, Any]:
    data = {
        "address": message.address,
        "headers": dict(message.headers),
        "body": b2a_base64(message.body, newline=False).decode(),
        "return_address": message.return_address,
        "mid": message.mid,
        "seq": message.seq,
        "timestamp": message.timestamp,
        "destination": message.destination,
    }
    # lifetime (SPEC §8) only when set: items stay as they were without it
    if message.ttl is not None:
        data["ttl"] = message.ttl
    if message.delay is not None:
        data["delay"] = message.delay
    return data


def _message_from(data: dict[str, Any]) -> Message:
    headers = data["headers"]
    return Message(
        data["address"],
        MappingProxyType(headers) if headers else EMPTY_HEADERS,
        a2b_base64(data["body"]),
        data["return_address"],
        data.get("mid"),
        data.get("seq"),
        data.get("timestamp"),
        data.get("destination"),
        data.get("ttl"),  # items written before message lifetime have neither
        data.get("delay"),
    )


_encode = json.JSONEncoder(separators=(",", ":")).encode  # one encoder for every call


def _dumps(value: Any, plain: bool = True) -> bytes:
    """Compact JSON; orjson on the hot paths (several times faster than json). json for
    what orjson refuses (integers beyond 64 bits) and, when not `plain`, for NaN and
    infinities, which orjson would write as null; that text starts with a space, which
    tells `_loads` to read it with json too (orjson reads big integers as floats)."""
    if plain:
        try:
            return orjson.dumps(value)
        except TypeError:
            pass
    return b" " + _encode(value).encode()


def _plain(headers: Any) -> bool:
    """Whether orjson writes these headers as json does (no NaN or infinite floats)."""
    return not headers or all(type(v) is not float or isfinite(v) for v in headers.values())


def _loads(raw: bytes | str) -> Any:
    if raw[:1] not in (b" ", " "):  # else written by json (see _dumps)
        try:
            return orjson.loads(raw)
        except ValueError:  # NaN or Infinity from another writer: json reads them
            pass
    return json.loads(raw)


def _delivery_json(delivery: Delivery) -> bytes:
    headers = delivery.message.headers
    return _dumps(
        {
            "tag": delivery.tag,
            "destination": delivery.destination,
            "queue": delivery.queue,
            "selector_id": delivery.selector_id,
            "message": _message_json(delivery.message),
            "redelivered": delivery.redelivered,
            "delivery_count": delivery.delivery_count,
        },
        headers is EMPTY_HEADERS or _plain(headers),
    )


def _delivery_from(raw: bytes | str) -> Delivery:
    data = _loads(raw)
    return Delivery(
        data["tag"],
        data["destination"],
        data["queue"],
        data["selector_id"],
        _message_from(data["message"]),
        data["redelivered"],
        data["delivery_count"],
    )
