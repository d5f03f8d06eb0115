"""Messages and deliveries: the values that flow in and out of the engine.

A `Message` is immutable once published. Copying or moving it to another queue never copies
its body: queues hold references to the same object, and only the per-queue `seq` differs
(it lives on the queue's entry and is stamped on the message the application sees).

Both are NamedTuples rather than frozen dataclasses: they are built several times per
routed message, and a tuple is built about seven times faster (bench/engine_bench.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

HeaderValue = str | int | float | bool

_EMPTY_HEADERS: Mapping[str, HeaderValue] = MappingProxyType({})


class Message(NamedTuple):
    """One message: the envelope (`address`, `return_address`, ids) plus headers and body.

    Applications fill `address`, `headers`, `body` and `return_address`; the engine sets
    `mid` (the same across every copy and move), `timestamp` (seconds, set on publish),
    `seq` (position in the queue it is read from) and `destination` (on deliveries).

    Lifetime (SPEC §8, docs/lifetime.md): `ttl` (seconds) makes it expire at
    `timestamp + ttl` while unprocessed; `delay` (seconds) holds it out of routing until
    `timestamp + delay` (it then enters its queue as if published then, its `timestamp`
    the due time). Both default to None and travel with every copy and move.
    """

    address: str = ""
    headers: Mapping[str, HeaderValue] = _EMPTY_HEADERS
    body: bytes = b""
    return_address: str | None = None
    mid: str | None = None
    seq: int | None = None
    timestamp: float | None = None
    destination: str | None = None
    ttl: float | None = None
    delay: float | None = None

    def text(self, encoding: str = "utf-8") -> str:
        """The body decoded as text (replacement characters where it is not valid)."""
        return self.body.decode(encoding, errors="replace")

    def with_seq(self, seq: int) -> Message:
        return self._replace(seq=seq)


class Delivery(NamedTuple):
    """A message handed to the application at a DELIVER selector.

    It stays outstanding until the application confirms or rejects it by `tag`.
    """

    tag: str
    destination: str
    queue: str
    selector_id: int
    message: Message
    redelivered: bool = False
    delivery_count: int = 1
