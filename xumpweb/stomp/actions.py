"""The actions a `StompConnection` returns: what the transport must do, in order.

Plain values, so a transport can match on them and tests can compare them. Each action
that carries a `receipt` is owed a `StompConnection.receipt_done(receipt)` (or `fail`)
once the transport has done it; see docs/stomp.md for the table of what to do with each.

They are NamedTuples, as the engine's Message and Delivery are: immutable, and made in a
third of the time a frozen dataclass takes (a message makes two or three of them). Tell
them apart by type (`type(action) is Send`), never by comparing to another kind: a tuple
equals any other tuple of the same values.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from engine.message import HeaderValue

_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


class Send(NamedTuple):
    data: bytes


class Close(NamedTuple):
    pass


class Authenticate(NamedTuple):
    login: str | None
    passcode: str | None
    host: str | None
    version: str
    headers: Mapping[str, str] = _NO_HEADERS


class Publish(NamedTuple):
    """Publish a message to `queue`, or, when `queue` is None (a SEND to /topic/<address>),
    to the transport's topic router with that `address`. `delay` in seconds, `expires`
    absolute (epoch seconds), both from the milliseconds STOMP clients send (ActiveMQ's
    convention); 0 = none."""

    queue: str | None
    headers: Mapping[str, HeaderValue]
    body: bytes
    return_address: str | None = None
    expires: float | None = None
    delay: float | None = None
    receipt: str | None = None
    address: str = ""
    exchange: str | None = None  # /exchange/<name>/<key>: queue is <name>, address <key>


class Subscribe(NamedTuple):
    """`kind` is "queue" (deliveries of DELIVER selectors to `destination`, shared with
    other subscribers), "topic" (`destination` is a topic pattern for a private queue),
    "exchange" (`destination` is the binding key of a private queue fed by the queue
    `exchange`: /exchange/<exchange>/<key>) or "temp". `credit` is the prefetch window
    (None: the transport's default)."""

    subscription: str
    kind: str
    destination: str
    ack: str
    selector: str | None = None
    credit: int | None = None
    receipt: str | None = None
    durable: str | None = None  # a durable subscription's name (kind "topic", "exchange")
    exchange: str | None = None  # kind "exchange": the exchange (a queue) it is bound to


class Unsubscribe(NamedTuple):
    """End a subscription; `unsettled` are its delivery tags never ACKed/NACKed (requeue).
    `durable`: also remove the durable topic subscription of that name (its queue)."""

    subscription: str
    unsettled: tuple[str, ...] = ()
    receipt: str | None = None
    durable: str | None = None


class TempQueue(NamedTuple):
    """Make the connection's private queue `queue` for /temp-queue/`name` (its first use),
    delivering to the destination of the same name, and take it down when the connection
    ends. `reader`: the subscription id under which the transport reads it (deliveries go
    to `deliver(reader, ...)`, ack:auto), when no SUBSCRIBE reads it (a reply-to)."""

    name: str
    queue: str
    reader: str | None = None


class Settle(NamedTuple):
    """Confirm (`accept`) or reject delivery tags: requeued per the queue's rules, or with
    `requeue` False (NACK `requeue:false`) dead-lettered (`x-reason: rejected`) or dropped."""

    subscription: str
    tags: tuple[str, ...]
    accept: bool
    receipt: str | None = None
    requeue: bool = True


class Barrier(NamedTuple):
    """Call `receipt_done(receipt)` once every action before this one is done."""

    receipt: str


class Commit(NamedTuple):
    """The next `size` actions are one COMMIT's frames, all or nothing: check them all
    before doing any; when one cannot be done (a SEND the caller may not publish), do none
    of them and `fail(message, detail, receipt)` with this receipt, the COMMIT's."""

    size: int
    receipt: str | None = None


Action = (
    Send
    | Close
    | Authenticate
    | Publish
    | Subscribe
    | Unsubscribe
    | Settle
    | Barrier
    | Commit
    | TempQueue
)
