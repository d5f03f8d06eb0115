"""The client side of the relay, which every process uses: RelayClient appends commands
(publish, confirm, reject, calls) to a store's inbox and takes deliveries off its
outboxes; call_outcome reads a call's answer. See the package doc.
"""

from __future__ import annotations

import itertools
import json
import secrets
import threading
import time
from collections.abc import Iterable
from types import MappingProxyType
from typing import Any

import redis

from engine import errors
from engine.errors import InboxFull, StoreError, StoreFull, XumpError
from engine.message import _EMPTY_HEADERS as EMPTY_HEADERS
from engine.message import Delivery, Message
from engine.relay.scripts import PUSH, TAKE
from engine.relay.wire import (
    PRESENCE_EVERY,
    PRESENCE_TTL_MS,
    _delivery_from,
    _dumps,
    _keys,
    _message_json,
    _plain,
    delivery_keys,
    pushed_key,
)
from engine.stores.redis_connect import connect, one_slot
from engine.stores.sql import mask_password
from engine.validation import (
    check_body,
    check_envelope,
    check_headers,
    check_optional_seconds,
    check_priority,
)


def store_failure(error: redis.RedisError, doing: str) -> StoreError:
    """The StoreError for a Redis error met while `doing` something: StoreFull when Redis
    refused a write for want of memory (maxmemory), else StoreError."""
    if isinstance(error, redis.exceptions.OutOfMemoryError):
        return StoreFull(
            f"Redis is out of memory (maxmemory reached) and refuses writes while {doing}: "
            "nothing was stored; consume or delete messages, or raise maxmemory"
        )
    return StoreError(f"cannot reach Redis while {doing}: {error}")


class _Waiter:
    """One command waiting for its RPUSH (see RelayClient._send)."""

    __slots__ = ("done", "error", "lead")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.lead = False


def _at_the_door(message: Message) -> Message:
    """The door every service publish passes: what cannot be carried to the router, the
    outboxes and the WebSocket frames is refused here (a XumpError), not there; a body
    given as text is encoded."""
    check_envelope(message.address, message.return_address)
    if message.headers is not EMPTY_HEADERS:
        check_headers(message.headers)
        if "priority" in message.headers:
            check_priority(message.headers["priority"])
    if message.ttl is not None or message.delay is not None:
        check_optional_seconds("ttl", message.ttl)
        check_optional_seconds("delay", message.delay)
    if type(message.body) is not bytes:
        message = message._replace(body=check_body(message.body, 1 << 62))
    return message


def _as_read(message: Message, mid: str) -> Message:
    """`message` with `mid` as the router would read it off the inbox (wire._message_from
    of its JSON): headers a read-only copy, or the shared empty ones."""
    headers = message.headers
    return message._replace(
        mid=mid, headers=MappingProxyType(dict(headers)) if headers else EMPTY_HEADERS
    )


class RelayClient:
    """What any process uses to reach a shared Redis store's queues. Safe to share between
    threads: commands sent by several threads at once go out in one RPUSH (group commit),
    each call still returning only when its own command is durable."""

    # the doorbell channel its appends ring, the ring carrying the commands (scripts.PUSH;
    # "" rings none: the service sets its doorbell, engine/relay's package doc)
    ring = ""

    def __init__(self, url: str, store: str, inbox_limit: int | None = None) -> None:
        # longer than any wait of `call` or `deliveries`, which block inside Redis; a
        # cluster=true URL opens the cluster, whose node holding the store answers (its
        # keys share one hash tag); a plain one costs no round trip here (Redis may be away)
        self.client, self.cluster = connect(url, check=False, socket_timeout=120)
        self.store = store
        # publishes are refused (InboxFull) while the inbox holds this many commands
        self.inbox_limit = inbox_limit
        self._where = f"Redis store {store!r} at {mask_password(url)}"
        self.inbox, self._outbox, self.errors = _keys(store)
        self._delivery_keys = delivery_keys(store)
        self._pushed = pushed_key(store)
        self._push_script = one_slot(PUSH, self.client, self.inbox) if self.cluster else PUSH
        self._take = self.client.register_script(
            one_slot(TAKE, self.client, self.inbox) if self.cluster else TAKE
        )
        self._presence_due: dict[str, float] = {}  # destination -> next presence refresh
        # mids are given out here, so a publisher knows them before the router routes
        self._mid_prefix = "r" + secrets.token_hex(5)
        self._serials = itertools.count(1)
        self._lock = threading.Lock()
        # commands waiting for the leader: (payload, waiter, bounded by inbox_limit)
        self._pending: list[tuple[bytes, _Waiter, bool]] = []
        self._sending = False  # a thread (the leader) is pushing commands

    def _send(self, command: dict[str, Any], plain: bool = True, bounded: bool = False) -> None:
        """Append a command to the inbox; durable (with appendfsync always) on return.
        `bounded`: a publish, refused with InboxFull while the inbox holds `inbox_limit`
        commands (settlements never are).

        Group commit: the thread that finds nobody sending leads: it pushes every command
        waiting at that moment in one RPUSH (one round trip, one fsync, in arrival order),
        then hands the lead to the first command that arrived meanwhile. With one thread
        this is a plain RPUSH per command."""
        waiter = _Waiter()
        with self._lock:
            self._pending.append((_dumps(command, plain), waiter, bounded))
            lead = not self._sending
            self._sending = True
        if not lead:
            waiter.done.wait()
            if not waiter.lead:
                self._raise(waiter.error)
                return
        with self._lock:
            batch, self._pending = self._pending, []
        error: BaseException | None = None
        full: InboxFull | None = None
        try:
            if self._push([item[0] for item in batch], [item[2] for item in batch]):
                full = InboxFull(
                    f"the inbox of the {self._where} holds {self.inbox_limit} commands or "
                    "more (routing is behind or stopped): publish again later"
                )
        except BaseException as failure:  # the others must hear of it whatever it is
            error = failure
        with self._lock:
            if self._pending:
                successor = self._pending[0][1]
                successor.lead = True
                successor.done.set()
            else:
                self._sending = False
        for _, other, other_bounded in batch:
            if other is not waiter:
                other.error = full if full is not None and other_bounded else error
                other.done.set()
        if error is not None and not isinstance(error, Exception):
            raise error  # KeyboardInterrupt and the like, in the thread it happened in
        self._raise(full if full is not None and bounded else error)

    def _push(self, payloads: list[bytes], bounded: list[bool]) -> bool:
        """One round trip that appends commands to the inbox (a subclass may add to it);
        whether the inbox was full, so the bounded commands were left out."""
        pipe = self.client.pipeline(transaction=False)
        self._append(pipe, payloads, bounded)
        return self._refused(pipe.execute()[0])

    def _append(self, pipe: redis.client.Pipeline, payloads: list[bytes],
                bounded: list[bool]) -> None:  # fmt: skip
        """Queue on `pipe` the command that appends `payloads` to the inbox (scripts.PUSH:
        every append is counted, and rings `ring` when it names the doorbell; its answer
        goes to `_refused`)."""
        limit = "" if self.inbox_limit is None else self.inbox_limit
        kinds = "".join("b" if one else "f" for one in bounded)
        # EVAL, not EVALSHA: no NOSCRIPT round trip after Redis restarts (Redis caches the
        # compiled script by its digest either way); as a command, which a cluster's
        # pipeline routes by the script's keys too (its `eval` method it refuses)
        pipe.execute_command("EVAL", self._push_script, 2, self.inbox, self._pushed, limit,
                             kinds, self.ring, *payloads)  # fmt: skip

    def _refused(self, answer: Any) -> bool:
        """Whether `_append`'s command left the bounded commands out."""
        return isinstance(answer, int) and answer < 0

    def _raise(self, error: BaseException | None) -> None:
        if error is None:
            return
        if isinstance(error, StoreError):  # InboxFull, or a subclass's own
            raise error
        if isinstance(error, redis.exceptions.OutOfMemoryError):
            raise store_failure(error, f"appending to the inbox of the {self._where}")
        raise StoreError(
            f"cannot reach the inbox of the {self._where}: {error}; check that "
            "redis-server runs and answers there (host, port, password, db in the URL)"
        ) from None

    def publish(self, queue: str, message: Message) -> str:
        """Durably queued for the router when this returns; the message's mid."""
        return self.publish_many(queue, [message])[0]

    def publish_many(self, queue: str, messages: Iterable[Message]) -> list[str]:
        """Durably queued, in order, when this returns; the messages' mids."""
        batch, plain = self._batch(messages)
        self._send({"op": "publish", "queue": queue, "messages": batch}, plain, bounded=True)
        return [data["mid"] for data in batch]

    def publish_command(
        self, queue: str, messages: Iterable[Message], applied: bool = False
    ) -> tuple[bytes, list[str], str | None]:
        """For a caller that appends to the inbox itself (an asyncio one): the encoded
        command publish_many (or, `applied`, publish_applied) would append, the mids given
        out, and the reply key to wait on for publish_applied's answer (`call_outcome`
        reads it). Append it with scripts.PUSH's rules: a publish is bounded."""
        batch, plain = self._batch(messages)
        mids = [data["mid"] for data in batch]
        if not applied:
            return _dumps({"op": "publish", "queue": queue, "messages": batch}, plain), mids, None
        command, reply = self._call_command("publish", {"queue": queue, "messages": batch})
        return _dumps(command, False), mids, reply

    def publish_applied(
        self, queue: str, messages: Iterable[Message], timeout: float = 10.0
    ) -> list[str]:
        """publish_many that returns once the router has published the messages, so what it
        refuses raises here (QueueFull for a full queue with nowhere to overflow, NotFound)
        instead of going to the errors list; all or none. A round trip to the router: for
        the publishes that need the answer. StoreError when no router answers in time (the
        messages may still be published after)."""
        batch, _ = self._batch(messages)
        self._call("publish", timeout, {"queue": queue, "messages": batch}, bounded=True)
        return [data["mid"] for data in batch]

    def _batch(self, messages: Iterable[Message]) -> tuple[list[dict[str, Any]], bool]:
        """The messages as the relay writes them, with mids given out here; and whether
        orjson may write them (see _dumps)."""
        batch = []
        plain = True
        for message in messages:
            data = _message_json(_at_the_door(message))
            data["mid"] = f"{self._mid_prefix}-{next(self._serials)}"
            batch.append(data)
            if data["headers"] and not _plain(data["headers"]):
                plain = False
        return batch, plain

    def stamped(self, messages: Iterable[Message]) -> list[Message]:
        """The messages as the router reads them off the inbox, with mids given out here
        (publish_command's, not encoded): for a caller that hands them to its own router
        in memory (engine.relay.Handed.publishing)."""
        prefix, serials = self._mid_prefix, self._serials
        return [
            _as_read(_at_the_door(message), f"{prefix}-{next(serials)}") for message in messages
        ]

    def call(self, method: str, timeout: float = 10.0, **arguments: Any) -> Any:
        """Run one of the router's operations after every command sent before it; its
        answer, or the XumpError it raised. StoreError when no router answers in time."""
        return self._call(method, timeout, arguments)

    def _call(
        self, method: str, timeout: float, arguments: dict[str, Any], bounded: bool = False
    ) -> Any:
        command, reply = self._call_command(method, arguments)
        # json, not orjson: arguments may hold anything (calls are not the hot path)
        self._send(command, False, bounded)
        try:
            answer = self.client.blpop([reply], timeout=timeout)
        except redis.RedisError as error:
            raise StoreError(
                f"cannot read the answer to {method!r} from the {self._where}: {error}"
            ) from None
        return call_outcome(method, timeout, answer[1] if answer is not None else None)

    def _call_command(self, method: str, arguments: dict[str, Any]) -> tuple[dict, str]:
        reply = f"{self.inbox[: -len('inbox')]}reply:{secrets.token_hex(8)}"
        return {"op": "call", "method": method, "args": arguments, "reply": reply}, reply

    def confirm(self, deliveries: Iterable[Delivery | str]) -> None:
        tags = [d.tag if isinstance(d, Delivery) else d for d in deliveries]
        self._send({"op": "confirm", "tags": tags})
        self._settled(tags)

    def reject(
        self, delivery: Delivery | str, requeue: bool = True, detail: str | None = None
    ) -> None:
        tag = delivery.tag if isinstance(delivery, Delivery) else delivery
        command: dict[str, Any] = {"op": "reject", "tag": tag, "requeue": requeue}
        if detail is not None:
            command["detail"] = detail
        self._send(command)
        self._settled([tag])

    def _settled(self, tags: list[str]) -> None:
        """Settled deliveries leave the taken set (their settlement is in the inbox): their
        delivery timeout stops. Should this fail, the router forgets them at the timeout."""
        if tags:
            try:
                self.client.zrem(self._delivery_keys["taken"], *tags)
            except redis.RedisError:
                pass

    def deliveries(self, destination: str, count: int = 100, wait: float = 1.0) -> list[Delivery]:
        """Take up to `count` deliveries for `destination`, oldest first; waits up to
        `wait` seconds for the first one. Their delivery timeout starts now (see the
        package doc): confirm or reject them before it runs out."""
        self._present(destination)
        found = self._take_some(destination, count)
        if not found and wait > 0:
            # wait for the outbox to fill without taking: BLMOVE of the list onto itself
            self.client.blmove(self._outbox + destination, self._outbox + destination,
                               wait, "LEFT", "LEFT")  # fmt: skip
            found = self._take_some(destination, count)
        return [_delivery_from(raw) for raw in found]

    def _present(self, destination: str) -> None:
        """Tell the router `destination` has a consumer (its presence key, as the service's
        subscribers keep it: a worker destination without one is away, and the wolfpack
        holds its work), at most once per PRESENCE_EVERY: the key is a write."""
        now = time.monotonic()
        if now >= self._presence_due.get(destination, 0.0):
            key = self._delivery_keys["present"] + destination
            self.client.set(key, b"1", px=PRESENCE_TTL_MS)
            self._presence_due[destination] = now + PRESENCE_EVERY

    def _take_some(self, destination: str, count: int) -> list[bytes]:
        keys = self._delivery_keys
        return self._take(  # type: ignore[no-any-return]
            keys=[self._outbox + destination, keys["taken"], keys["revoked"] + destination],
            args=[count],
        )

    def waiting(self, destination: str) -> list[Delivery]:
        """The deliveries waiting in `destination`'s outbox, oldest first, left in place."""
        return [_delivery_from(raw) for raw in self.client.lrange(self._outbox + destination,
                                                                  0, -1)]  # fmt: skip

    def close(self) -> None:
        self.client.close()


def call_outcome(method: str, timeout: float, raw: bytes | str | None) -> Any:
    """A call's answer from its reply list item (None: none came within `timeout`), or
    the XumpError the router raised; StoreError when none came."""
    if raw is None:
        raise StoreError(
            f"no router answered {method!r} within {timeout:g} s: is a worker running?"
        )
    outcome = json.loads(raw)
    if "error" in outcome:
        kind = getattr(errors, outcome["error"], XumpError)
        if not (isinstance(kind, type) and issubclass(kind, XumpError)):
            kind = XumpError
        raise kind(outcome["detail"])
    return outcome["result"]
