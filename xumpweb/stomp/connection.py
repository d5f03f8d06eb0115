"""One STOMP 1.2 connection as a state machine: bytes in, actions out. No I/O.

Theory of operation
-------------------
A transport (WebSocket or TCP) owns one `StompConnection` per client. It feeds the bytes it
reads to `receive_data()` (a stream) or `receive_message()` (one WebSocket message: whole
frames only) and carries out the actions it gets back, in order:

* `Send(data)`: write these bytes to the client.
* `Authenticate(login, passcode, host, version)`: check the credentials, then call
  `accept(principal, session)` (→ CONNECTED) or `refuse(reason)` (→ ERROR + Close).
  Frames arriving meanwhile wait in the parser and are handled by `accept()`.
* `Publish`, `Subscribe`, `Unsubscribe`, `Settle`: engine work. When the action carries a
  `receipt`, call `receipt_done(receipt)` once the work is done (for `Publish`: durable)
  and send the RECEIPT it returns; on failure call `fail(message, detail, receipt)`.
  `Barrier(receipt)` asks for `receipt_done(receipt)` once every earlier action is done.
* `Commit(size, receipt)`: the next `size` actions are one COMMIT's, all or nothing: check
  them all first; if one would be refused, do none and `fail(message, detail, receipt)`.
* `Close()`: flush what was sent, then close the connection; requeue what
  `unsettled()` still lists.

Deliveries go the other way: `deliver(subscription, delivery)` returns the MESSAGE frame
(and, in `ack:auto` mode, the `Settle` that confirms it). Heart-beats: after `accept()`,
`heartbeat` holds the agreed (send, receive) intervals in ms (0 = none); send `HEARTBEAT`
when idle for `send` ms, and treat the client as gone after silence of about twice `receive`.

Choices (SPEC §9 leaves them to us):
* versions 1.2, 1.1 and 1.0 (a CONNECT without `accept-version`) are spoken; a client
  offering none of them gets an ERROR listing `version:1.0,1.1,1.2`. `host` is optional
  (passed to `Authenticate`).
* transactions are supported: SEND, ACK and NACK inside BEGIN … COMMIT are buffered and
  emitted at COMMIT (ABORT or a closed connection drops them), after a `Commit(size,
  receipt)` that makes them all or nothing (the transport checks them all first). A
  frame inside a transaction gets its RECEIPT when COMMIT has carried it out (as
  RabbitMQ does; never at ABORT); COMMIT's receipt means all done.
* `ack:client` ACK and NACK are cumulative (every earlier unsettled MESSAGE of that
  subscription too), as RabbitMQ and ActiveMQ do; `client-individual` settles one.
* `message-id` and `ack` of a MESSAGE are the same per-connection number; ACK/NACK take it
  from `id` in 1.2 and from `message-id` in 1.1 and 1.0 (each version's header only: a 1.2
  ACK without `id` is an ERROR). NACK `requeue:false` (RabbitMQ's) rejects without requeue.

Every client mistake ends in `Send(ERROR)` + `Close()` (STOMP closes after an ERROR), with
`receipt-id` when the offending frame asked for a receipt, and no engine action for that
frame. Once closed, the connection ignores further input.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from typing import Any

from engine.errors import XumpError
from engine.message import Delivery, HeaderValue
from engine.validation import (
    check_envelope,
    check_header_name,
    check_name,
    check_priority,
    check_seconds,
    check_text,
)
from xumpweb.stomp.actions import (
    Action,
    Authenticate,
    Barrier,
    Close,
    Commit,
    Publish,
    Send,
    Settle,
    Subscribe,
    TempQueue,
    Unsubscribe,
)
from xumpweb.stomp.frames import (
    CLIENT_COMMANDS,
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_HEADER_LENGTH,
    DEFAULT_MAX_HEADERS,
    HEARTBEAT,
    Frame,
    FrameParser,
    ProtocolError,
    serialize_parts,
)

__all__ = [
    "HEARTBEAT",
    "Action",
    "Authenticate",
    "Barrier",
    "Close",
    "Commit",
    "Publish",
    "Send",
    "Settle",
    "StompConfig",
    "StompConnection",
    "Subscribe",
    "TempQueue",
    "Unsubscribe",
]

VERSIONS = ("1.2", "1.1", "1.0")  # best first
ACK_MODES = frozenset({"auto", "client", "client-individual"})
# SEND headers that are STOMP's own: not copied into the message
_SEND_OWN = frozenset(
    {"destination", "receipt", "transaction", "content-length", "reply-to", "expires", "delay"}
)
MAX_CREDIT = 2**31 - 1


@dataclass(frozen=True, slots=True)
class StompConfig:
    """What the server offers. `heartbeat` is (can send every, wants to receive every) in
    ms, as in the CONNECTED frame's `heart-beat` header."""

    server: str = "Xump/0.1"
    heartbeat: tuple[int, int] = (10_000, 10_000)
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    max_headers: int = DEFAULT_MAX_HEADERS
    max_header_length: int = DEFAULT_MAX_HEADER_LENGTH
    max_subscriptions: int = 1000
    max_transactions: int = 100
    max_transaction_frames: int = 10_000


class State(Enum):
    AWAITING_CONNECT = "awaiting CONNECT"
    AUTHENTICATING = "authenticating"
    CONNECTED = "connected"
    DISCONNECTING = "disconnecting"  # DISCONNECT with a receipt, waiting for its Barrier
    CLOSED = "closed"

    # Enum's own __hash__ is Python code (hash of the name); states are singletons, and
    # ACCEPTS and PARSING are looked up with one several times per frame
    __hash__ = object.__hash__


# which client frames each state accepts; anything else is an ERROR
ACCEPTS: dict[State, frozenset[str]] = {
    State.AWAITING_CONNECT: frozenset({"CONNECT", "STOMP"}),
    State.AUTHENTICATING: frozenset(),  # frames wait in the parser until accept()
    State.CONNECTED: CLIENT_COMMANDS - {"CONNECT", "STOMP"},
    State.DISCONNECTING: frozenset(),
    State.CLOSED: frozenset(),
}
# states in which received bytes are parsed at all
PARSING = frozenset({State.AWAITING_CONNECT, State.CONNECTED})


@dataclass(slots=True)
class _Subscription:
    id: str
    destination: str  # as the client wrote it: /queue/x or /topic/p
    kind: str
    ack: str
    selector: str | None
    credit: int | None
    # ack id -> delivery tag, in delivery order (dicts keep it), for client/client-individual
    unsettled: dict[str, str] = field(default_factory=dict)
    exchange: str | None = None  # kind "exchange": the exchange's name
    key: str | None = None  # an /exchange/ destination's binding key (or topic pattern)


def _header_text(value: HeaderValue) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


class StompConnection:
    """The protocol state of one client connection. See the module docstring."""

    def __init__(self, config: StompConfig | None = None) -> None:
        self.config = config or StompConfig()
        self.state = State.AWAITING_CONNECT
        self.version: str | None = None
        self.principal: Any = None
        self.heartbeat: tuple[int, int] = (0, 0)
        self._parser = FrameParser(
            max_frame_size=self.config.max_frame_size,
            max_headers=self.config.max_headers,
            max_header_length=self.config.max_header_length,
        )
        self._client_heartbeat: tuple[int, int] = (0, 0)
        self._subscriptions: dict[str, _Subscription] = {}
        self._ack_owner: dict[str, _Subscription] = {}  # ack id -> its subscription
        self._next_ack = 0
        self._transactions: dict[str, list[Frame]] = {}
        self._disconnect_receipt: str | None = None
        self._connect_receipt: str | None = None  # for refuse(): every ERROR names it
        self._escaped = True  # header escapes in frames we send (not in STOMP 1.0)
        self.session = ""
        self.client_id: str | None = None  # CONNECT's client-id (durable subscriptions)
        self._temp: dict[str, str] = {}  # /temp-queue/<name> -> its private queue

    # ---- input --------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> list[Action]:
        """Bytes from a stream (TCP): frames may be split anywhere."""
        if self.state is State.CLOSED:
            return []
        self._parser.receive_data(data)
        if self.state not in PARSING and self._parser.buffered > self.config.max_frame_size:
            return self._error(
                ProtocolError(
                    "frame too large",
                    f"more than {self.config.max_frame_size} bytes arrived before the "
                    "previous frame was answered",
                )
            )
        return self._drain()

    def receive_message(self, data: bytes) -> list[Action]:
        """One WebSocket message: it must hold whole frames (a partial one is an error)."""
        actions = self.receive_data(data)
        if self.state in PARSING and not self._parser.at_frame_boundary():
            actions.extend(
                self._error(
                    ProtocolError(
                        "frame not terminated by NUL",
                        "a WebSocket message ended inside a frame; each message must hold "
                        "whole frames, each ending with a NUL octet",
                        self._parser.partial_receipt(),
                    )
                )
            )
        return actions

    def _drain(self) -> list[Action]:
        actions: list[Action] = []
        while self.state in PARSING:
            try:
                frame = self._parser.next_frame()
            except ProtocolError as error:
                actions.extend(self._error(error))
                break
            if frame is None:
                break
            actions.extend(self._handle(frame))
        return actions

    def _handle(self, frame: Frame) -> list[Action]:
        receipt = frame.headers.get("receipt")
        if frame.command not in ACCEPTS[self.state]:
            if self.state is State.AWAITING_CONNECT:
                problem = ProtocolError(
                    "expected CONNECT",
                    f"the first frame must be CONNECT or STOMP, not {frame.command}",
                    receipt,
                )
            else:
                problem = ProtocolError(
                    f"unexpected {frame.command}",
                    f"a {frame.command} frame is not allowed when the connection is "
                    f"{self.state.value}",
                    receipt,
                )
            return self._error(problem)
        if frame.command == "NACK" and self.version == "1.0":
            return self._error(
                ProtocolError(
                    "unexpected NACK",
                    "STOMP 1.0 has no NACK (connect with accept-version:1.1 or 1.2 to use it)",
                    receipt,
                )
            )
        try:
            return _HANDLERS[frame.command](self, frame, receipt)
        except ProtocolError as error:
            if error.receipt is None:
                error.receipt = receipt
            return self._error(error)

    # ---- answers from the transport -----------------------------------------------------

    def accept(self, principal: Any = None, session: str = "") -> list[Action]:
        """The credentials of `Authenticate` are good: CONNECTED, then buffered frames."""
        if self.state is not State.AUTHENTICATING:
            raise RuntimeError(f"accept() while the connection is {self.state.value}")
        self.principal = principal
        self.session = session
        self.state = State.CONNECTED
        sx, sy = self.config.heartbeat
        if self.version == "1.0":  # 1.0 has no heart-beating: "0,0", as RabbitMQ says
            sx = sy = 0
        cx, cy = self._client_heartbeat
        # spec "Heart-beating": each side uses the slower of what one can do and the other wants
        self.heartbeat = (
            0 if sx == 0 or cy == 0 else max(sx, cy),
            0 if cx == 0 or sy == 0 else max(cx, sy),
        )
        headers = [
            ("version", self.version or VERSIONS[0]),
            ("heart-beat", f"{sx},{sy}"),
            ("server", self.config.server),
        ]
        if session:
            headers.append(("session", session))
        actions: list[Action] = [Send(serialize_parts("CONNECTED", headers))]
        actions.extend(self._drain())
        return actions

    def refuse(self, reason: str) -> list[Action]:
        """The credentials of `Authenticate` are bad: ERROR and Close."""
        if self.state is not State.AUTHENTICATING:
            raise RuntimeError(f"refuse() while the connection is {self.state.value}")
        return self._error(ProtocolError("access refused", reason, self._connect_receipt))

    def refuse_as(self, message: str, reason: str) -> list[Action]:
        """Like `refuse`, with an ERROR `message` of its own (a client-id in use, ...)."""
        if self.state is not State.AUTHENTICATING:
            raise RuntimeError(f"refuse_as() while the connection is {self.state.value}")
        return self._error(ProtocolError(message, reason, self._connect_receipt))

    def receipt_done(self, receipt: str) -> list[Action]:
        """The action carrying `receipt` (or a Barrier) is done: the RECEIPT frame."""
        if self.state is State.CLOSED:
            return []
        actions: list[Action] = [Send(self._receipt(receipt))]
        if self.state is State.DISCONNECTING and receipt == self._disconnect_receipt:
            self._close_state()
            actions.append(Close())
        return actions

    def fail(self, message: str, detail: str = "", receipt: str | None = None) -> list[Action]:
        """The transport could not do an action (publish refused, store down, ...)."""
        if self.state is State.CLOSED:
            return []
        return self._error(ProtocolError(message, detail, receipt))

    def refuse_subscription(
        self,
        subscription: str,
        reason: str,
        *,
        column: int | None = None,
        receipt: str | None = None,
    ) -> list[Action]:
        """A Subscribe could not be set up (no right, bad selector at `column`, ...)."""
        if self.state is State.CLOSED:
            return []
        sub = self._subscriptions.get(subscription)
        detail = reason
        if sub is not None and sub.selector is not None and column is not None:
            caret = " " * max(column - 1, 0) + "^"
            detail = f"{reason}\n\n  {sub.selector}\n  {caret}\n(column {column})"
        what = "bad selector" if column is not None else "subscription refused"
        return self._error(
            ProtocolError(f"{what} for subscription {subscription!r}", detail, receipt)
        )

    def deliver(self, subscription: str, delivery: Delivery) -> list[Action]:
        """A delivery for `subscription`: the MESSAGE frame to send (plus its Settle in
        ack:auto mode). A delivery for a subscription that is gone gets a rejecting Settle and
        no MESSAGE: the transport gives it back (session.py: to the outbox, untaken)."""
        sub = self._subscriptions.get(subscription)
        if sub is None or self.state is State.CLOSED:
            return [Settle(subscription, (delivery.tag,), accept=False)]
        self._next_ack += 1
        ack_id = str(self._next_ack)
        message = delivery.message
        if sub.kind == "topic" and message.address:
            destination = "/topic/" + message.address
        elif sub.kind == "temp":
            destination = sub.destination
        elif sub.kind == "queue":
            destination = "/queue/" + delivery.destination
        elif sub.kind == "exchange":  # as RabbitMQ names it: the exchange and routing key
            destination = f"{EXCHANGE}{sub.exchange}" + (
                f"/{message.address}" if message.address else ""
            )
        else:
            destination = sub.destination
        headers: list[tuple[str, str]] = [
            ("subscription", sub.id),
            ("message-id", ack_id),
            ("destination", destination),
            ("redelivered", "true" if delivery.redelivered else "false"),
            ("x-delivery-count", str(delivery.delivery_count)),
        ]
        if sub.ack != "auto":
            headers.append(("ack", ack_id))
        if message.mid is not None:
            headers.append(("mid", message.mid))
        if message.seq is not None:
            headers.append(("seq", str(message.seq)))
        if message.return_address is not None:
            headers.append(("reply-to", "/queue/" + message.return_address))
        if message.headers:
            ours = {name for name, _ in headers}
            for name, value in message.headers.items():
                if name not in ours and name != "content-length":
                    headers.append((name, _header_text(value)))
        data = serialize_parts("MESSAGE", headers, message.body, escaped=self._escaped)
        if sub.ack == "auto":
            return [Send(data), Settle(sub.id, (delivery.tag,), accept=True)]
        sub.unsettled[ack_id] = delivery.tag
        self._ack_owner[ack_id] = sub
        return [Send(data)]

    def unsettled(self) -> dict[str, tuple[str, ...]]:
        """Delivery tags sent but not yet ACKed/NACKed, per subscription (requeue on close)."""
        return {
            sub.id: tuple(sub.unsettled.values())
            for sub in self._subscriptions.values()
            if sub.unsettled
        }

    @property
    def subscriptions(self) -> dict[str, Subscribe]:
        """The live subscriptions, as the Subscribe actions that made them (sans receipt)."""
        return {
            sub.id: Subscribe(
                sub.id,
                sub.kind,
                _bare(sub.destination) if sub.key is None else sub.key,
                sub.ack,
                sub.selector,
                sub.credit,
                exchange=sub.exchange,
            )
            for sub in self._subscriptions.values()
        }

    # ---- errors ---------------------------------------------------------------------------

    def _error(self, error: ProtocolError) -> list[Action]:
        headers = [("message", error.message)]
        if error.receipt is not None:
            headers.append(("receipt-id", error.receipt))
        if error.message in ("unsupported version", "Bad command"):  # as RabbitMQ says
            headers.append(("version", ",".join(sorted(VERSIONS))))
        headers.append(("content-type", "text/plain"))
        body = error.detail.encode("utf-8", errors="replace")
        data = serialize_parts("ERROR", headers, body, escaped=self._escaped)
        self._close_state()
        return [Send(data), Close()]

    def _close_state(self) -> None:
        self.state = State.CLOSED
        self._transactions.clear()

    # ---- frame handlers (one per command) -------------------------------------------------

    def _on_connect(self, frame: Frame, receipt: str | None) -> list[Action]:
        headers = frame.headers
        # no accept-version: a 1.0 client (STOMP 1.2 "Protocol Negotiation")
        offered = [v.strip() for v in headers.get("accept-version", "1.0").split(",")]
        version = next((v for v in VERSIONS if v in offered), None)
        if version is None:  # RabbitMQ's words: programs written for it compare them
            raise ProtocolError(
                "unsupported version",
                f"Supported versions are {','.join(reversed(VERSIONS))}\n",
            )
        beat = headers.get("heart-beat", "0,0")
        parts = [part.strip() for part in beat.split(",")]
        if len(parts) != 2 or not all(p.isascii() and p.isdigit() and len(p) < 10 for p in parts):
            raise ProtocolError(
                "bad heart-beat",
                f"heart-beat must be two non-negative integers `cx,cy` (ms), not {beat!r}"[:300],
            )
        self._client_heartbeat = (int(parts[0]), int(parts[1]))
        client_id = headers.get("client-id")
        if client_id is not None:
            try:
                self.client_id = check_name("client-id", client_id)
            except XumpError as error:
                raise ProtocolError("Invalid header", str(error)) from None
        self.version = version
        self._escaped = self._parser.escapes = version != "1.0"
        self._connect_receipt = receipt
        self.state = State.AUTHENTICATING
        return [
            Authenticate(
                login=headers.get("login"),
                passcode=headers.get("passcode"),
                host=headers.get("host"),
                version=version,
                headers=dict(headers),
            )
        ]

    def _on_send(self, frame: Frame, receipt: str | None) -> list[Action]:
        headers = frame.headers
        made: list[Action] = []
        destination = _required(frame, "destination")
        if "message-id" in headers:  # the server's header: RabbitMQ refuses it first too
            raise ProtocolError("Invalid header", "'message-id' is not allowed on 'SEND'.\n")
        if destination.startswith(TEMP):
            queue, address, exchange = self._temp_queue(destination, made), "", None
        else:
            queue, address, exchange = (
                _send_destination(destination)
                if len(destination) <= _CACHED_LENGTH
                else _resolved_destination(destination)
            )
        message_headers: dict[str, HeaderValue] = {}
        for name, value in headers.items():
            if name in _SEND_OWN:
                continue
            _checked_header_name(name)
            message_headers[name] = _typed(_checked_text(name, value))
        if "priority" in message_headers:
            try:
                message_headers["priority"] = check_priority(headers["priority"].strip())
            except XumpError as error:
                raise ProtocolError("Invalid header", str(error)) from None
        return_address = headers.get("reply-to")
        if return_address is not None and return_address.startswith(TEMP):
            return_address = self._temp_queue(return_address, made)
        elif return_address is not None and return_address.startswith("/queue/"):
            return_address = _queue_of(return_address, "reply-to", header="reply-to")
        elif return_address is not None:
            # another form (`/topic/x`, `/exchange/...`, a bare name: RabbitMQ passes any
            # text through): carried as the header it is, for the replier to read
            message_headers["reply-to"] = _checked_text("reply-to", return_address)
            return_address = None
        expires = _integer(headers, "expires", minimum=0) if "expires" in headers else 0
        delay = _integer(headers, "delay", minimum=0) if "delay" in headers else 0
        if delay:
            try:
                check_seconds("delay", delay / 1000)
            except XumpError as error:
                raise ProtocolError("Invalid header", f"{error} (STOMP's delay is in ms)") from None
        publish = Publish(
            queue=queue,
            headers=message_headers,
            body=frame.body,
            return_address=return_address,
            expires=expires / 1000 if expires else None,
            delay=delay / 1000 if delay else None,
            receipt=receipt,
            address=address,
            exchange=exchange,
        )
        if not made and "transaction" not in headers:
            return [publish]
        # the private queue is made now even in a transaction: a reply may come any time
        return [*made, *self._maybe_in_transaction(frame, receipt, [publish])]

    def _on_subscribe(self, frame: Frame, receipt: str | None) -> list[Action]:
        headers = frame.headers
        sid = self._subscription_id(frame)
        made: list[Action] = []
        destination = headers.get("destination", "")
        hidden = self._subscriptions.get(destination) if destination.startswith(TEMP) else None
        if hidden is not None and hidden.kind == "temp" and hidden.id == destination:
            # the reader a reply-to:/temp-queue/ made (its replies came with `subscription`
            # the destination) gives way: replies go to this subscription only, never
            # shared between the two (ack:auto, so it holds nothing unsettled)
            del self._subscriptions[destination]
            made.append(Unsubscribe(destination))
        if sid in self._subscriptions:
            raise ProtocolError(
                "Duplicated subscription identifier",
                f"this connection already has a subscription with id {sid!r}; ids must be "
                "unique per connection",
            )
        if len(self._subscriptions) >= self.config.max_subscriptions:
            raise ProtocolError(
                "too many subscriptions",
                f"a connection may hold {self.config.max_subscriptions} subscriptions",
            )
        destination = _required(frame, "destination")
        exchange = None
        if destination.startswith(TEMP):
            kind, name = "temp", self._temp_queue(destination, made, reader=False)
        elif _is_exchange(destination):
            exchange, name = _exchange_of(destination)
            kind = "exchange"
            if exchange == TOPIC_EXCHANGE:  # the same as SUBSCRIBE /topic/<pattern>
                kind, name, exchange = "topic", _checked("topic pattern", name), None
        else:
            kind, name = _destination_of(destination)
        durable = self._durable_name(frame, sid) if kind in ("topic", "exchange") else None
        ack = headers.get("ack", "auto")
        if ack not in ACK_MODES:
            raise ProtocolError(
                "bad ack mode",
                f"ack must be auto, client or client-individual, not {ack!r}"[:300],
            )
        credit: int | None = None
        for header in ("prefetch-count", "activemq.prefetchSize"):
            if header in headers:
                credit = _integer(headers, header, minimum=1, maximum=MAX_CREDIT)
                break
        selector = headers.get("selector")
        if selector is not None and not selector.strip():
            selector = None
        self._subscriptions[sid] = _Subscription(
            sid, destination, kind, ack, selector, credit, exchange=exchange,
            key=name if _is_exchange(destination) else None,
        )  # fmt: skip
        return [
            *made,
            Subscribe(sid, kind, name, ack, selector, credit, receipt, durable, exchange),
        ]

    def _on_unsubscribe(self, frame: Frame, receipt: str | None) -> list[Action]:
        sid = self._subscription_id(frame)
        durable = self._durable_name(frame, sid)
        sub = self._subscriptions.pop(sid, None)
        if sub is None:
            if durable is not None:  # removing a durable subscription while away
                return [Unsubscribe(sid, (), receipt, durable)]
            raise ProtocolError(
                "unknown subscription", f"this connection has no subscription with id {sid!r}"
            )
        for ack_id in sub.unsettled:
            del self._ack_owner[ack_id]
        return [Unsubscribe(sid, tuple(sub.unsettled.values()), receipt, durable)]

    def _ack_header(self) -> str:
        """Where ACK and NACK carry the MESSAGE's id: `id` (its `ack` header) in STOMP
        1.2, `message-id` in 1.1 and 1.0; the other header is not looked at."""
        return "id" if self.version == "1.2" else "message-id"

    def _on_ack(self, frame: Frame, receipt: str | None) -> list[Action]:
        header = self._ack_header()
        ack_id = frame.headers.get(header)
        if not ack_id:
            source = "ack" if header == "id" else "message-id"
            raise ProtocolError(
                "Missing header",
                f"a STOMP {self.version} {frame.command} needs the `{header}` header: the "
                f"`{source}` header of the MESSAGE",
            )
        if ack_id not in self._ack_owner:
            raise ProtocolError(
                f"unknown ack id in {frame.command}",
                f"{ack_id!r}"[:60] + " is not the `ack` of a MESSAGE this connection "
                "received and has not settled yet",
            )
        _requeue(frame)  # a bad value is an ERROR now, not at its transaction's COMMIT
        return self._maybe_in_transaction(frame, receipt, None)

    def _settle(self, frame: Frame, receipt: str | None) -> list[Action]:
        """The Settle of an ACK/NACK whose id was valid when it arrived (a transaction may
        have settled it since: then nothing)."""
        ack_id = frame.headers.get(self._ack_header()) or ""
        sub = self._ack_owner.get(ack_id)
        if sub is None:
            return []
        if sub.ack == "client":
            ids: list[str] = []
            for earlier in sub.unsettled:
                ids.append(earlier)
                if earlier == ack_id:
                    break
            tags = tuple([sub.unsettled.pop(i) for i in ids])
            for i in ids:
                del self._ack_owner[i]
        else:
            tags = (sub.unsettled.pop(ack_id),)
            del self._ack_owner[ack_id]
        accept = frame.command == "ACK"
        requeue = accept or _requeue(frame)
        return [Settle(sub.id, tags, accept, receipt, requeue)]  # positional: made per ACK

    def _on_begin(self, frame: Frame, receipt: str | None) -> list[Action]:
        tx = _required(frame, "transaction")
        if tx in self._transactions:
            raise ProtocolError("duplicate transaction", f"transaction {tx!r} is already open")
        if len(self._transactions) >= self.config.max_transactions:
            raise ProtocolError(
                "too many transactions",
                f"a connection may hold {self.config.max_transactions} open transactions",
            )
        self._transactions[tx] = []
        return self._receipt_now(receipt)

    def _on_commit(self, frame: Frame, receipt: str | None) -> list[Action]:
        frames = self._transactions.pop(self._open_transaction(frame), None) or []
        actions: list[Action] = []
        for buffered in frames:
            if buffered.command == "SEND":
                actions.extend(self._on_send_now(buffered))
            else:
                actions.extend(self._settle(buffered, buffered.headers.get("receipt")))
        if actions:
            actions.insert(0, Commit(len(actions), receipt))
        if receipt is not None:
            actions.append(Barrier(receipt))
        return actions

    def _on_abort(self, frame: Frame, receipt: str | None) -> list[Action]:
        del self._transactions[self._open_transaction(frame)]
        return self._receipt_now(receipt)

    def _on_disconnect(self, frame: Frame, receipt: str | None) -> list[Action]:
        self._transactions.clear()
        if receipt is None:
            self._close_state()
            return [Close()]
        self.state = State.DISCONNECTING
        self._disconnect_receipt = receipt
        return [Barrier(receipt)]

    # ---- helpers --------------------------------------------------------------------------

    def _temp_queue(self, written: str, made: list[Action], *, reader: bool = True) -> str:
        """/temp-queue/<name> → the connection's private queue for it; its first use adds
        a TempQueue to `made` (with an implicit reader unless a SUBSCRIBE reads it)."""
        name = written[len(TEMP) :]
        if not name:
            raise ProtocolError("Invalid destination", "/temp-queue/ needs a name after it")
        if name.startswith("stomp:"):
            raise ProtocolError(
                "Invalid destination",
                f"{written!r}"[:200] + " names a private queue: /temp-queue/<name> takes a "
                "name of this connection's own; another connection's private queue cannot "
                "be read",
            )
        queue = self._temp.get(name)
        if queue is not None:
            return queue
        # each is a queue and, for a reply-to, a reader: they count as subscriptions do
        if len(self._temp) + len(self._subscriptions) >= self.config.max_subscriptions:
            raise ProtocolError(
                "too many temporary queues",
                f"a connection may hold {self.config.max_subscriptions} subscriptions and "
                "temporary queues together",
            )
        queue = _checked("temp queue", f"stomp:{self.session}:temp:{name}")
        reader_id = None
        if reader and written not in self._subscriptions:
            reader_id = written
            self._subscriptions[written] = _Subscription(
                written, written, "temp", "auto", None, None
            )
        self._temp[name] = queue
        made.append(TempQueue(name, queue, reader_id))
        return queue

    def _durable_name(self, frame: Frame, sid: str) -> str | None:
        """The durable topic subscription a SUBSCRIBE or UNSUBSCRIBE names: ActiveMQ's
        `activemq.subscriptionName` (with the connection's client-id), or RabbitMQ's
        `durable:true` (`persistent:true` of old) with the subscription id; None if not
        durable."""
        headers = frame.headers
        name = headers.get("activemq.subscriptionName")
        if name is not None:
            if self.client_id is None:
                raise ProtocolError(
                    "Missing header",
                    "a durable subscription (activemq.subscriptionName) needs the "
                    "connection's client-id header in CONNECT",
                )
        elif "true" in (_flag(headers, "durable"), _flag(headers, "persistent")):
            if _flag(headers, "auto-delete") == "true":
                return None
            if not headers.get("id"):
                raise ProtocolError(
                    "Missing Header",  # RabbitMQ's words for this one (capital H)
                    "a durable subscription (durable:true) is named by its `id` header",
                )
            name = sid
        else:
            return None
        return _checked("durable subscription", name)

    def _subscription_id(self, frame: Frame) -> str:
        """SUBSCRIBE's and UNSUBSCRIBE's `id`; STOMP 1.0 makes it optional: the
        destination then stands for it, as RabbitMQ and ActiveMQ do."""
        if self.version == "1.0" and not frame.headers.get("id"):
            return _required(frame, "destination")
        return _required(frame, "id")

    def _open_transaction(self, frame: Frame) -> str:
        tx = _required(frame, "transaction")
        if tx not in self._transactions:
            raise ProtocolError(
                "unknown transaction", f"there is no open transaction {tx!r} (BEGIN it first)"
            )
        return tx

    def _maybe_in_transaction(
        self, frame: Frame, receipt: str | None, actions: list[Action] | None
    ) -> list[Action]:
        """Buffer `frame` in its transaction, or do it now. A buffered frame's receipt
        comes when COMMIT has carried it out (a SEND's: once durable), as RabbitMQ sends
        it: a RECEIPT never says more than what was done; at ABORT it never comes."""
        if "transaction" not in frame.headers:
            return actions if actions is not None else self._settle(frame, receipt)
        tx = self._open_transaction(frame)
        buffered = self._transactions[tx]
        if len(buffered) >= self.config.max_transaction_frames:
            raise ProtocolError(
                "transaction too large",
                f"a transaction may hold {self.config.max_transaction_frames} frames",
            )
        buffered.append(frame)
        return []

    def _on_send_now(self, frame: Frame) -> list[Action]:
        """A SEND buffered in a committed transaction (validated when it arrived), with
        its receipt: answered once durable."""
        headers = {k: v for k, v in frame.headers.items() if k not in ("transaction", "receipt")}
        return self._on_send(Frame("SEND", headers, frame.body), frame.headers.get("receipt"))

    def _receipt_now(self, receipt: str | None) -> list[Action]:
        if receipt is None:
            return []
        return [Send(self._receipt(receipt))]

    def _receipt(self, receipt: str) -> bytes:
        return serialize_parts("RECEIPT", [("receipt-id", receipt)], escaped=self._escaped)


_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]{0,17})(?:\.[0-9]+)?")
_NUMBER_START = frozenset("-0123456789")
# the checks below depend on the text alone: a client names the same few destinations
# and headers in every frame, so each is checked once, not once per frame (an error is
# raised again each time: lru_cache keeps only what passed)
_CHECKED_MANY = 4096
# the longest destination kept (a valid queue name is at most 200 characters, a topic
# address may be longer): a client naming many long ones cannot make the cache large
_CACHED_LENGTH = 256


@lru_cache(maxsize=_CHECKED_MANY)
def _checked_header_name(name: str) -> str:
    try:
        return check_header_name(name)
    except XumpError as error:
        raise ProtocolError("Invalid header", str(error)) from None


def _typed(value: str) -> HeaderValue:
    """A header value written as a decimal number (as JSON writes one, so it comes out as
    the same text) becomes that number, for selectors to compare as a number
    (`amount > 500`); any other text stays text ("007", "1e3", "12.50", "+5")."""
    if not value or value[0] not in _NUMBER_START or not _DECIMAL.fullmatch(value):
        return value
    if "." not in value:
        return int(value)
    number = float(value)
    return number if repr(number) == value else value


def _flag(headers: Mapping[str, str], name: str) -> str | None:
    """A true/false header as written in any case (Python clients send `True`)."""
    value = headers.get(name)
    return None if value is None else value.lower()


def _requeue(frame: Frame) -> bool:
    """A NACK's `requeue` header (RabbitMQ's): `false` rejects without requeue (dead
    letters or dropped, by the queue's rules); `true` or none requeues."""
    value = frame.headers.get("requeue")
    if value is None or frame.command != "NACK":
        return True
    if value.lower() not in ("true", "false"):
        raise ProtocolError("Invalid header", f"requeue must be true or false, not {value!r}"[:300])
    return value.lower() == "true"


def _required(frame: Frame, header: str) -> str:
    value = frame.headers.get(header)
    if value is None or value == "":
        raise ProtocolError(
            "Missing destination" if header == "destination" else "Missing header",
            f"a {frame.command} frame needs the `{header}` header",
        )
    return value


def _integer(
    headers: Mapping[str, str], header: str, *, minimum: int, maximum: int = 2**63 - 1
) -> int:
    text = headers[header].strip()
    digits = text.removeprefix("-")
    if not (digits.isascii() and digits.isdigit() and len(digits) <= 19):
        raise ProtocolError("Invalid header", f"{header} must be an integer, not {text!r}"[:300])
    value = int(text)
    if not minimum <= value <= maximum:
        raise ProtocolError(
            "Invalid header", f"{header} must be between {minimum} and {maximum}, not {value}"
        )
    return value


def _checked_text(name: str, value: str) -> str:
    """A header value carried into the message: text every store and JSON can carry."""
    if not value.isascii():
        try:
            check_text(f"header {name!r}", value)
        except XumpError as error:
            raise ProtocolError("Invalid header", str(error)) from None
    if "\x00" in value:  # STOMP frames end at a NUL: no client meant this one
        raise ProtocolError("Invalid header", f"header {name!r} holds a NUL octet")
    return value


def _queue_of(destination: str, what: str, *, header: str = "destination") -> str:
    """`/queue/<name>` → name (checked by the engine's naming rules)."""
    if not destination.startswith("/queue/"):
        raise ProtocolError(
            "Invalid destination",
            f"{what}: {header} must be /queue/<name>, not {destination!r}"[:300],
        )
    return _checked("queue", destination[len("/queue/") :])


def _resolved_destination(destination: str) -> tuple[str | None, str, str | None]:
    """A SEND destination other than /temp-queue/ → (queue, address, exchange)."""
    if not _is_exchange(destination):
        return (*_send_target(destination), None)
    exchange, address = _exchange_of(destination)
    if exchange == TOPIC_EXCHANGE:  # RabbitMQ's /topic/ is this exchange: so is ours
        return None, address, None
    return exchange, address, exchange


# checked once per text: a client sends to the same few
_send_destination = lru_cache(maxsize=_CHECKED_MANY)(_resolved_destination)


def _send_target(destination: str) -> tuple[str | None, str]:
    """A SEND destination → (queue, "") for /queue/<name>, (None, address) for
    /topic/<address> (published to the topic router with that address)."""
    _not_bare(destination)
    if destination.startswith("/topic/"):
        address = destination[len("/topic/") :]
        try:
            check_envelope(address, None)
        except XumpError as error:
            raise ProtocolError("Invalid destination", str(error)) from None
        if not address:
            raise ProtocolError("Invalid destination", "SEND: /topic/ needs an address after it")
        return None, address
    if not destination.startswith("/queue/"):
        shown = repr(destination)[:200]
        raise ProtocolError(
            "Unknown destination",
            "SEND: destination must be /queue/<name>, /topic/<address>, "
            f"/exchange/<exchange>/<routing key> or /temp-queue/<name>, not {shown}"
            + _unsupported(destination),
        )
    return _queue_of(destination, "SEND"), ""


TEMP = "/temp-queue/"
_SUBSCRIBE_PREFIXES = (("/queue/", "queue", "destination"), ("/topic/", "topic", "topic pattern"))


def _destination_of(destination: str) -> tuple[str, str]:
    """A SUBSCRIBE destination → ("queue", selector destination) or ("topic", pattern)."""
    _not_bare(destination)
    for prefix, kind, what in _SUBSCRIBE_PREFIXES:
        if destination.startswith(prefix):
            return kind, _checked(what, destination[len(prefix) :])
    raise ProtocolError(
        "Unknown destination",
        "SUBSCRIBE: destination must be /queue/<destination>, /topic/<pattern>, "
        f"/exchange/<exchange>/<binding key> or /temp-queue/<name>, not {destination!r}"[:300]
        + _unsupported(destination),
    )


EXCHANGE = "/exchange/"
TOPIC_EXCHANGE = "amq.topic"  # RabbitMQ's /topic/<key> is /exchange/amq.topic/<key>
# RabbitMQ's other destination kinds, and what to use on Xump instead
_INSTEAD = {
    "/amq/queue/": "RabbitMQ's /amq/queue/<name> (an existing queue) is not supported: use "
    "/queue/<name>",
    "/reply-queue/": "RabbitMQ's /reply-queue/ is not supported: use reply-to:/temp-queue/<name>",
}


def _unsupported(destination: str) -> str:
    return next(("\n" + why for prefix, why in _INSTEAD.items() if destination.startswith(prefix)),
                "")  # fmt: skip


def _not_bare(destination: str) -> None:
    """`/queue` or `/topic` with nothing after: RabbitMQ's words, since its programs
    compare them (`/queue/` with an empty name gets the engine's words)."""
    if destination in ("/queue", "/topic"):
        raise ProtocolError(
            "Invalid destination", f"'' is not a valid {destination[1:]} destination\n"
        )


def _is_exchange(destination: str) -> bool:
    return destination == EXCHANGE[:-1] or destination.startswith(EXCHANGE)


def _exchange_of(destination: str) -> tuple[str, str]:
    """`/exchange/<name>` or `/exchange/<name>/<key>` → (name, key), RabbitMQ's syntax: a
    name (not the default exchange's empty one) and at most one key, itself free of `/`.
    The name follows the engine's naming rules (an exchange is a queue on Xump); a key,
    when given, too (1 to 200 characters, no whitespace or control characters)."""
    rest = destination[len(EXCHANGE) - 1 :]
    parts = rest[1:].split("/") if rest.startswith("/") else []
    if not 1 <= len(parts) <= 2 or not parts[0]:
        # RabbitMQ's words (its programs compare them)
        raise ProtocolError(
            "Invalid destination", f"'{rest}' is not a valid exchange destination\n"[:300]
        )
    name = _checked("exchange", parts[0])
    key = parts[1] if len(parts) == 2 else ""
    if key:
        _checked("routing key", key)
    return name, key


@lru_cache(maxsize=_CHECKED_MANY)
def _checked(kind: str, name: str) -> str:
    try:
        return check_name(kind, name)
    except XumpError as error:
        raise ProtocolError("Invalid destination", str(error)) from None


def _bare(destination: str) -> str:
    return destination.split("/", 2)[2]


_HANDLERS: dict[str, Callable[[StompConnection, Frame, str | None], list[Action]]] = {
    "CONNECT": StompConnection._on_connect,
    "STOMP": StompConnection._on_connect,
    "SEND": StompConnection._on_send,
    "SUBSCRIBE": StompConnection._on_subscribe,
    "UNSUBSCRIBE": StompConnection._on_unsubscribe,
    "ACK": StompConnection._on_ack,
    "NACK": StompConnection._on_ack,
    "BEGIN": StompConnection._on_begin,
    "COMMIT": StompConnection._on_commit,
    "ABORT": StompConnection._on_abort,
    "DISCONNECT": StompConnection._on_disconnect,
}
