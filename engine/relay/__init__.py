"""Sharing a Redis store between processes: one owner routes, the others relay.

Theory of operation: the process holding a Redis store's lease (see stores/redis.py) is its
**owner** and the only one running the engine on its queues. Any other process is a
**client**: it appends commands (publish, confirm, reject) to the store's durable inbox and
reads deliveries from per-destination outboxes. The owner takes a batch of commands off the
head of the inbox, runs them through its engine, and writes in ONE fenced atomic step the
store's changes, the removal of those commands from the inbox and the deliveries they
caused into the outboxes. So:

* a publish that returned to a client is durable (it is in the inbox, with AOF);
* a command is applied exactly once: if the owner dies before its step, nothing of the
  batch happened and the next owner (after the lease expires) takes the same commands;
* a delivery reaches an outbox exactly once, in the order the owner made it;
* FIFO holds across processes: the inbox is one list and one owner routes.

Besides publish, confirm and reject, a client can **call** an operation the owner offers
(`RelayOwner(calls=...)`: wiring changes, history pages, stats) and wait for its answer: the
call is a command like the others, so it sees every command sent before it, and its answer
is written to a reply list in the same atomic step as the changes it made. A publish whose
refusal the publisher must hear (QueueFull from a queue that would drop it) is such a call
(`publish_applied`); a plain publish the owner refuses goes to the errors list.

Keys (the store's hash tag keeps them in the store's slot):
    xump:{S}:inbox                 LIST  JSON commands, oldest first
    xump:{S}:outbox:<destination>  LIST  JSON deliveries, oldest first
    xump:{S}:errors                LIST  JSON {command, error, at} for commands that failed
                                         (the newest `errors_kept`, 10,000 by default)
    xump:{S}:reply:<id>            LIST  the answer to one call, kept for a minute
    xump:{S}:taken                 ZSET  tag -> when a consumer took it off its outbox
    xump:{S}:revoked:<destination> SET   tags revoked while a copy may wait in the outbox
    xump:{S}:present:<destination> STRING (expiring) a consumer of the destination is here
    xump:{S}:absent                HASH  destination -> since when the owner sees it away

Delivery timeouts (SPEC §7). A delivery waits in its outbox, one copy, for as long as no
consumer takes it; the timeout counts from the moment one does. Consumers take deliveries
with one Lua script (TAKE: LPOP and, in the same atomic step, ZADD of each tag into the
taken set at the server's time; `take_script`), so no delivery is ever taken unrecorded; a
consumer that has none waits with BLMOVE of the outbox onto itself, which takes nothing.
Settling a delivery removes its tag from the taken set (the client does it with its
confirm or reject). The owner's `expire` returns the deliveries taken longer ago than the
delivery timeout (`delivery_timeout`, default 60 s) and not settled (their consumer may
have died) to their queues; they are delivered again with `redelivered` set, to the outbox,
again one copy. At-least-once, as in SPEC §7. A delivery never taken is never expired, so an
outbox of a destination nobody consumes holds one copy of each message waiting for it; it
is bounded by the credit of the DELIVER selectors feeding it (or, with unlimited credit,
by the messages of their queues), and does not grow with time.

Destinations away. Consumers refresh their destination's presence key every second
(PRESENCE_TTL_MS). A worker queue (Engine.worker_destinations: fed by a MOVE, all of its
selectors DELIVER) whose destinations have all been away for the delivery timeout gives its
unsettled work back to the front of the queue it came from, for the other workers of the
pack (Engine.absent). The copies of revoked deliveries still in the outbox are dropped: in
the same atomic step the owner lists their tags in the destination's revoked set, which
TAKE skips, and right after it removes them from the outbox (PURGE).
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
import json
import logging
import secrets
import threading
import time
from binascii import a2b_base64, b2a_base64
from collections.abc import Callable, Iterable
from math import isfinite
from types import MappingProxyType
from typing import Any

import orjson
import redis

from engine import errors
from engine.core import Engine
from engine.errors import InboxFull, StoreError, StoreFull, XumpError
from engine.message import _EMPTY_HEADERS as EMPTY_HEADERS
from engine.message import Delivery, Message
from engine.stores.redis import RedisStore
from engine.stores.sql import mask_password
from engine.validation import (
    check_body,
    check_envelope,
    check_headers,
    check_optional_seconds,
    check_priority,
)


def relay_keys(store: str) -> tuple[str, str, str]:
    """The store's inbox key, the prefix of its outbox keys (add the destination) and its
    errors key, for clients that speak to Redis themselves (e.g. with redis.asyncio)."""
    return _keys(store)


def _keys(store: str) -> tuple[str, str, str]:
    prefix = f"xump:{{{store}}}:"
    return prefix + "inbox", prefix + "outbox:", prefix + "errors"


def delivery_keys(store: str) -> dict[str, str]:
    """The store's keys for delivery timeouts and presence (see the module doc): the taken
    set, and the prefixes of revoked sets and presence keys (add the destination)."""
    prefix = f"xump:{{{store}}}:"
    return {
        "taken": prefix + "taken",
        "revoked": prefix + "revoked:",
        "present": prefix + "present:",
        "absent": prefix + "absent",
    }


PRESENCE_EVERY = 1.0  # seconds between a consumer's presence refreshes
PRESENCE_TTL_MS = 3000  # a presence key outlives its consumer by at most this

# The tag of an outbox item, in Lua: the item is a JSON object whose first key is "tag"
# (see _delivery_json); the string is read up to its closing quote and decoded only when
# it holds escapes. Anything else is decoded whole.
_TAG_OF = r"""
local function tag_of(item)
    local s, e = string.find(item, '"tag":"', 1, true)
    if s == nil or s > 3 then
        local ok, data = pcall(cjson.decode, item)
        if ok and type(data) == 'table' and type(data.tag) == 'string' then
            return data.tag
        end
        return nil
    end
    local j = e + 1
    while true do
        local k = string.find(item, '["\\]', j)
        if k == nil then
            return nil
        end
        if string.byte(item, k) == 34 then
            local raw = string.sub(item, e + 1, k - 1)
            if string.find(raw, '\\', 1, true) == nil then
                return raw
            end
            local ok, tag = pcall(cjson.decode, '"' .. raw .. '"')
            if ok then
                return tag
            end
            return nil
        end
        j = k + 2
    end
end
"""

# KEYS: outbox, taken set, the destination's revoked set. ARGV: how many at most.
# Takes deliveries off the outbox and notes when, at the server's clock; drops revoked ones.
TAKE = (
    _TAG_OF
    + r"""
local items = redis.call('LPOP', KEYS[1], ARGV[1])
if not items then
    return {}
end
local now = redis.call('TIME')
local at = now[1] .. '.' .. string.format('%06d', now[2])
local revoked = redis.call('EXISTS', KEYS[3]) == 1
local kept, scored = {}, {}
for _, item in ipairs(items) do
    local tag = tag_of(item)
    if not (revoked and tag and redis.call('SREM', KEYS[3], tag) == 1) then
        if tag then
            scored[#scored + 1] = at
            scored[#scored + 1] = tag
        end
        kept[#kept + 1] = item
    end
    if #scored >= 1000 then
        redis.call('ZADD', KEYS[2], unpack(scored))
        scored = {}
    end
end
if #scored > 0 then
    redis.call('ZADD', KEYS[2], unpack(scored))
end
return kept
"""
)

# KEYS: outbox, taken set, the destination's revoked set. ARGV: items read from the outbox.
# Takes those of the given items still in the outbox (a consumer chose them, e.g. by a
# filter of its own), as TAKE does: each removed, its tag noted taken, revoked ones dropped.
# An item another consumer took meanwhile is no longer there and is left out.
TAKE_THESE = (
    _TAG_OF
    + r"""
local now = redis.call('TIME')
local at = now[1] .. '.' .. string.format('%06d', now[2])
local revoked = redis.call('EXISTS', KEYS[3]) == 1
local kept = {}
for _, item in ipairs(ARGV) do
    if redis.call('LREM', KEYS[1], 1, item) == 1 then
        local tag = tag_of(item)
        if not (revoked and tag and redis.call('SREM', KEYS[3], tag) == 1) then
            if tag then
                redis.call('ZADD', KEYS[2], at, tag)
            end
            kept[#kept + 1] = item
        end
    end
end
return kept
"""
)

# KEYS: outbox, the destination's revoked set. Removes the revoked items; how many.
PURGE = (
    _TAG_OF
    + r"""
if redis.call('EXISTS', KEYS[2]) == 0 then
    return 0
end
local removed = 0
for _, item in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
    local tag = tag_of(item)
    if tag and redis.call('SISMEMBER', KEYS[2], tag) == 1 then
        removed = removed + redis.call('LREM', KEYS[1], 1, item)
    end
end
redis.call('DEL', KEYS[2])
return removed
"""
)

EXPIRE_BATCH = 10_000  # taken deliveries the owner looks at per expire
TICK_EVERY = 0.05  # seconds between a router's looks for due messages (SPEC §8: within 100 ms)


# An operation a client may call: it gets the owner's engine and the call's arguments, and
# returns a JSON-able answer and the Deliveries it caused (they go to the outboxes).
Call = Callable[..., tuple[Any, list[Delivery]]]
REPLY_TTL_MS = 60_000
logger = logging.getLogger("xump.relay")


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


# KEYS[1] the inbox
# ARGV[1] the inbox limit; ARGV[2] one letter per command, "b" for a bounded one (a publish),
# "f" for a free one (confirm, reject, other calls); ARGV[3...] the commands, in order.
# Appends the commands in order, leaving out the bounded ones when the inbox already holds
# `limit` commands (all of them: one batch, one answer); returns minus how many it left
# out (0 when none: never positive, which tells its answer from RPUSH's, the new length).
# Settlements are never refused: they are what lets the router drain a full inbox.
_BOUNDED_PUSH = """
local limit = tonumber(ARGV[1])
local kinds = ARGV[2]
local refuse = string.find(kinds, 'b', 1, true) ~= nil
    and redis.call('LLEN', KEYS[1]) >= limit
local chunk, refused = {}, 0
for i = 3, #ARGV do
    if refuse and string.byte(kinds, i - 2) == 98 then
        refused = refused + 1
    else
        chunk[#chunk + 1] = ARGV[i]
        if #chunk == 1000 then
            redis.call('RPUSH', KEYS[1], unpack(chunk))
            chunk = {}
        end
    end
end
if #chunk > 0 then
    redis.call('RPUSH', KEYS[1], unpack(chunk))
end
return -refused
"""

# KEYS[1] the inbox, KEYS[2] a guard key (the caller's: e.g. the wiring version)
# ARGV[1] the value the guard key must hold ("" for none); then _BOUNDED_PUSH's ARGV.
# _BOUNDED_PUSH when the guard holds that value, else nothing appended and {the value}: the
# caller decided what to send from a stale reading, reads again and sends again.
GUARDED_PUSH = (
    """
local guard = redis.call('GET', KEYS[2]) or ''
if guard ~= ARGV[1] then
    return {guard}
end
table.remove(ARGV, 1)
"""
    + _BOUNDED_PUSH
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


class RelayClient:
    """What any process uses to reach a shared Redis store's queues. Safe to share between
    threads: commands sent by several threads at once go out in one RPUSH (group commit),
    each call still returning only when its own command is durable."""

    def __init__(self, url: str, store: str, inbox_limit: int | None = None) -> None:
        # longer than any wait of `call` or `deliveries`, which block inside Redis
        self.client = redis.Redis.from_url(url, socket_timeout=120)
        self.store = store
        # publishes are refused (InboxFull) while the inbox holds this many commands
        self.inbox_limit = inbox_limit
        self._where = f"Redis store {store!r} at {mask_password(url)}"
        self.inbox, self._outbox, self.errors = _keys(store)
        self._delivery_keys = delivery_keys(store)
        self._take = self.client.register_script(TAKE)
        # mids are given out here, so a publisher knows them before the owner routes
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
        """Queue on `pipe` the command that appends `payloads` to the inbox (its answer
        goes to `_refused`)."""
        if self.inbox_limit is None or not any(bounded):
            pipe.rpush(self.inbox, *payloads)
        else:
            kinds = "".join("b" if one else "f" for one in bounded)
            # EVAL, not EVALSHA: no NOSCRIPT round trip after Redis restarts (Redis caches
            # the compiled script by its digest either way)
            pipe.eval(_BOUNDED_PUSH, 1, self.inbox, self.inbox_limit, kinds, *payloads)

    def _refused(self, answer: Any) -> bool:
        """Whether `_append`'s command left the bounded commands out."""
        return self.inbox_limit is not None and isinstance(answer, int) and answer < 0

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
        """Durably queued for the owner when this returns; the message's mid."""
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
        reads it). Append it with _BOUNDED_PUSH's rules: a publish is bounded."""
        batch, plain = self._batch(messages)
        mids = [data["mid"] for data in batch]
        if not applied:
            return _dumps({"op": "publish", "queue": queue, "messages": batch}, plain), mids, None
        command, reply = self._call_command("publish", {"queue": queue, "messages": batch})
        return _dumps(command, False), mids, reply

    def publish_applied(
        self, queue: str, messages: Iterable[Message], timeout: float = 10.0
    ) -> list[str]:
        """publish_many that returns once the owner has published the messages, so what it
        refuses raises here (QueueFull for a full queue with nowhere to overflow, NotFound)
        instead of going to the errors list; all or none. A round trip to the owner: for
        the publishes that need the answer. StoreError when no owner answers in time (the
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
            # the door every service publish passes: what cannot be carried to the
            # router, the outboxes and the WebSocket frames is refused here, not there
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
            data = _message_json(message)
            data["mid"] = f"{self._mid_prefix}-{next(self._serials)}"
            batch.append(data)
            if data["headers"] and not _plain(data["headers"]):
                plain = False
        return batch, plain

    def call(self, method: str, timeout: float = 10.0, **arguments: Any) -> Any:
        """Run one of the owner's operations after every command sent before it; its
        answer, or the XumpError it raised. StoreError when no owner answers in time."""
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
        delivery timeout stops. Should this fail, the owner forgets them at the timeout."""
        if tags:
            try:
                self.client.zrem(self._delivery_keys["taken"], *tags)
            except redis.RedisError:
                pass

    def deliveries(self, destination: str, count: int = 100, wait: float = 1.0) -> list[Delivery]:
        """Take up to `count` deliveries for `destination`, oldest first; waits up to
        `wait` seconds for the first one. Their delivery timeout starts now (see the
        module doc): confirm or reject them before it runs out."""
        found = self._take_some(destination, count)
        if not found and wait > 0:
            # wait for the outbox to fill without taking: BLMOVE of the list onto itself
            self.client.blmove(self._outbox + destination, self._outbox + destination,
                               wait, "LEFT", "LEFT")  # fmt: skip
            found = self._take_some(destination, count)
        return [_delivery_from(raw) for raw in found]

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
    the XumpError the owner raised; StoreError when none came."""
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


class _Unreadable(Exception):
    """An inbox item that is not a JSON object: set aside as it is."""

    def get(self, key: str, default: Any = None) -> Any:
        return default


def _is_reply_key(reply: Any, inbox: str) -> bool:
    return isinstance(reply, str) and reply.startswith(inbox[: -len("inbox")])


def _failure(command: Any, error: BaseException | str) -> str:
    """An errors-list item: the command (kept whole, so what was accepted and then refused
    can still be recovered; an unreadable item only by its kind), why it failed, when
    (epoch seconds). The reason says what was wrong, never the offending bytes; json's
    ensure_ascii makes any text storable."""
    reason = str(error)
    if len(reason) > 500:
        reason = reason[:500] + "..."
    if not isinstance(command, dict):
        command = {"op": None, "unreadable": True}
    return json.dumps({"command": command, "error": reason, "at": time.time()})


def _publish_call(engine: Engine, queue: str, messages: list[dict[str, Any]]) -> tuple:
    """The owner's side of RelayClient.publish_applied."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise errors.InvalidArgument("messages must be a list of relay messages")
    try:
        checked = [_message_from(data) for data in messages]
    except (KeyError, TypeError, ValueError) as error:
        raise errors.InvalidArgument(f"not a relay message: {error}") from None
    return None, engine.publish_many(queue, checked, keep_mids=True)


def _server_time(client: redis.Redis) -> float:
    """Redis's clock, which consumers stamp taken deliveries with (not this machine's)."""
    seconds, micros = client.time()
    return seconds + micros / 1_000_000


def _by_destination(deliveries: list[Delivery]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for delivery in deliveries:
        found.setdefault(delivery.destination, []).append(delivery.tag)
    return found


class RelayOwner:
    """Runs a shared store's commands through this process's engine (see the module doc).

    Take the lease first (`acquire`), then build the engine's wiring: opening the queues
    loads their state as the previous owner left it.
    """

    def __init__(
        self,
        engine: Engine,
        store: str,
        owner: str,
        lease_ms: int = 5000,
        delivery_timeout: float = 60.0,
        calls: dict[str, Call] | None = None,
        errors_kept: int = 10_000,
    ) -> None:
        backend = engine.backend(store)
        if not isinstance(backend, RedisStore):
            raise StoreError(f"store {store!r} is not a Redis store; only those can be shared")
        self.engine = engine
        self.store = backend
        self.owner = owner
        self.lease_ms = lease_ms
        self.delivery_timeout = delivery_timeout
        self.errors_kept = errors_kept  # stale acks alone would grow the list for ever
        self.inbox, self._outbox, self.errors = _keys(store)
        self._delivery_keys = delivery_keys(store)
        self._purge = backend.client.register_script(PURGE)
        # the delivery timeout counts from when a consumer took a delivery, which only the
        # taken set tells: an "expire" call must use it too (the engine's own expire would
        # put a second copy of waiting deliveries in their outbox)
        self.calls: dict[str, Call] = {
            "publish": _publish_call,
            **(calls or {}),
            "expire": self._expire_call,
        }
        self._replies: list[tuple] = []

    def acquire(self, timeout: float = 30.0) -> bool:
        """Wait until this process holds the lease (the previous owner's must expire)."""
        deadline = time.monotonic() + timeout
        while not self.store.acquire_lease(self.owner, self.lease_ms):
            if time.monotonic() > deadline:
                return False
            time.sleep(min(0.1, self.lease_ms / 10_000))
        return True

    def run_once(self, limit: int = 500) -> int:
        """Apply up to `limit` commands from the inbox in one atomic step; how many."""
        raw = self.store.client.lrange(self.inbox, 0, limit - 1)
        # the engine lock keeps other threads' calls out of this step's one commit
        with self.engine._lock:
            if raw:
                self._step(raw)
            else:
                self.store.renew_lease()
        return len(raw)

    def _step(self, raw: list[bytes]) -> None:
        """Apply the commands at the head of the inbox, all or nothing (see `_attempt`).

        When the step fails (any exception but the store's own StoreError: a value some
        later stage cannot carry, a defect), nothing of it was committed; the commands are
        tried again in halves, down to the one that fails alone: that one is set aside in
        the errors list with its reason, the others are applied once each, in order. So no
        single command can stop the router, whatever it holds. A failed attempt costs a
        reload of the engine's state from Redis: cheap for a rare failure, which is what
        the checks at the door (engine/validation.py) leave."""
        commands: list[Any] = []
        for item in raw:
            try:
                command = _loads(item)
            except (ValueError, RecursionError, UnicodeDecodeError):
                command = _Unreadable("a command in the inbox is not readable JSON")
            if not isinstance(command, dict | _Unreadable):
                command = _Unreadable("a command in the inbox is not a JSON object")
            commands.append(command)
        # a call runs in a step of its own: a wiring change is saved in the catalog at
        # once, so a step holding one must never need a retry (it would apply it twice)
        part: list[Any] = []
        for command in commands:
            if command.get("op") != "call":
                part.append(command)
                continue
            if part:
                self._settle_part(part)
                part = []
            self._settle_part([command])
        if part:
            self._settle_part(part)

    def _settle_part(self, commands: list[Any]) -> None:
        failure = self._attempt(commands)
        if failure is None:
            return
        if len(commands) == 1:
            self._set_aside(commands[0], failure)
            return
        half = len(commands) // 2
        self._settle_part(commands[:half])
        self._settle_part(commands[half:])

    def _attempt(self, commands: list[Any]) -> BaseException | None:
        """Apply `commands` (the head of the inbox) and take them off it in one atomic
        step. None when that was committed; otherwise the error, and nothing of the
        attempt is left: neither in Redis (never committed) nor in this process (the
        engine reloads its state as last committed). StoreError (the store itself failed:
        lease lost, Redis away) is raised: it is no command's fault."""
        failed: list[str] = []
        journal = self.engine.journal
        mark = len(journal) if journal is not None else 0
        self.store.hold()
        try:
            deliveries = []
            for command in commands:
                deliveries.extend(self._apply(command, failed))
            extra: list[tuple] = [("LTRIM", self.inbox, len(commands), -1)]
            extra.extend(self._to_outboxes(deliveries))
            if failed:
                extra.append(("RPUSH", self.errors, *failed))
                extra.append(("LTRIM", self.errors, -self.errors_kept, -1))
            for key, answer in self._replies:
                extra.append(("RPUSH", key, answer))
                extra.append(("PEXPIRE", key, REPLY_TTL_MS))
            self.store.add_commands(extra)
            self.store.release()  # the commit
        except BaseException as error:
            if isinstance(error, StoreError) or not isinstance(error, Exception):
                # the store failed (or the process is stopping): not the commands' fault;
                # leave this process consistent if we can and let the caller decide
                with contextlib.suppress(Exception):
                    self._roll_back(journal, mark)
                raise
            self._roll_back(journal, mark)
            return error
        finally:
            self._replies.clear()
        self._committed(deliveries)
        return None

    def _roll_back(self, journal: Any, mark: int) -> None:
        """Forget a step that was not committed: the store's records, the engine's state
        (loaded again as last committed) and the journal events it recorded."""
        if journal is not None:
            journal.take_back(mark)
        self.engine.reload()

    def _set_aside(self, command: Any, error: BaseException) -> None:
        """Take one command that fails alone off the inbox, into the errors list with its
        reason (a caller waiting for its answer hears the same)."""
        if isinstance(error, XumpError | _Unreadable):
            reason = str(error)
        else:
            # ASCII and short: an exception's text may quote what the command held
            said = str(error).encode("ascii", "backslashreplace").decode()[:200]
            reason = f"the router could not apply it ({type(error).__name__}: {said})"
            logger.warning("command set aside: %s", reason)
        extra: list[tuple] = [
            ("LTRIM", self.inbox, 1, -1),
            ("RPUSH", self.errors, _failure(command, reason)),
            ("LTRIM", self.errors, -self.errors_kept, -1),
        ]
        reply = command.get("reply")
        if command.get("op") == "call" and _is_reply_key(reply, self.inbox):
            answer = _encode({"error": "XumpError", "detail": reason})
            extra.append(("RPUSH", reply, answer))
            extra.append(("PEXPIRE", reply, REPLY_TTL_MS))
        self.store.hold()
        try:
            self.store.add_commands(extra)
            self.store.release()
        except BaseException:
            with contextlib.suppress(Exception):
                self.engine.reload()
            raise

    def _committed(self, deliveries: list[Delivery]) -> None:
        """Called after each committed step with the deliveries it sent (a subclass may
        note them)."""

    def expire(self) -> int:
        """Delivery timeouts and destinations away (see the module doc), in one atomic step
        with the redeliveries they cause: deliveries a consumer took longer ago than the
        delivery timeout and did not settle go back to their queues; worker queues whose
        destinations have been away that long give their work back. How many deliveries
        were made."""
        client = self.store.client
        keys = self._delivery_keys
        with self.engine._lock:
            try:
                now = _server_time(client)
                stale = client.zrangebyscore(keys["taken"], "-inf", now - self.delivery_timeout,
                                             start=0, num=EXPIRE_BATCH)  # fmt: skip
                gone, absence = self._absence(now)
            except redis.RedisError as error:
                raise StoreError(
                    f"cannot read the delivery timeouts of store {self.store.name!r}: {error}"
                ) from None
            revoked: list[Delivery] = []
            commands = absence

            def operation() -> list[Delivery]:
                deliveries = self.engine.expire_tags(t.decode() for t in stale)
                caused, withdrawn = self.engine.absent(gone)
                revoked.extend(withdrawn)
                deliveries.extend(caused)
                if stale:
                    commands.append(("ZREM", keys["taken"], *stale))
                if revoked:
                    commands.append(("ZREM", keys["taken"], *(d.tag for d in revoked)))
                for destination, tags in _by_destination(revoked).items():
                    commands.append(("SADD", keys["revoked"] + destination, *tags))
                return deliveries

            deliveries = self._whole(operation, commands)
        for destination in _by_destination(revoked):
            try:
                self._purge(keys=[self._outbox + destination, keys["revoked"] + destination])
            except redis.RedisError as error:  # TAKE skips them meanwhile
                logger.warning("revoked deliveries stay in %r for now: %s", destination, error)
        return len(deliveries)

    def _absence(self, now: float) -> tuple[set[str], list[tuple]]:
        """The worker destinations away for the delivery timeout, and the commands that
        keep the absent hash (since when each is seen away) up to date."""
        keys = self._delivery_keys
        destinations = sorted(self.engine.worker_destinations())
        pipe = self.store.client.pipeline(transaction=False)
        for destination in destinations:
            pipe.exists(keys["present"] + destination)
        pipe.hgetall(keys["absent"])
        *present, known = pipe.execute()
        since = {name.decode(): float(at) for name, at in known.items()}
        gone: set[str] = set()
        commands: list[tuple] = []
        for destination, here in zip(destinations, present, strict=True):
            if here:
                if destination in since:
                    commands.append(("HDEL", keys["absent"], destination))
            elif destination not in since:
                commands.append(("HSET", keys["absent"], destination, repr(now)))
            elif now - since[destination] >= self.delivery_timeout:
                gone.add(destination)
        forgotten = set(since) - set(destinations)
        if forgotten:
            commands.append(("HDEL", keys["absent"], *sorted(forgotten)))
        return gone, commands

    def _expire_call(self, engine: Engine, older_than: float) -> tuple[Any, list[Delivery]]:
        """The "expire" operation: deliveries taken more than `older_than` seconds ago and
        not settled are delivered again (the owner's own `expire` runs by itself)."""
        if not isinstance(older_than, int | float) or isinstance(older_than, bool):
            raise errors.InvalidArgument(f"older_than must be seconds, not {older_than!r}")
        client = self.store.client
        cutoff = _server_time(client) - older_than
        stale = client.zrangebyscore(self._delivery_keys["taken"], "-inf", cutoff,
                                     start=0, num=EXPIRE_BATCH)  # fmt: skip
        deliveries = engine.expire_tags(t.decode() for t in stale)
        return {"redelivered": len(deliveries)}, deliveries

    def tick(self) -> int:
        """Message lifetime's time-based transitions due now (SPEC §8: delayed messages
        and redeliveries whose wait is over, expiries), in one atomic step with the
        deliveries they cause; how many deliveries. Only looks (cheaply) when nothing is
        due, so a router may call it often."""
        with self.engine._lock:
            due = self.engine.next_due()
            if due is None or due > time.time():
                return 0
            deliveries = self._whole(self.engine.tick)
        return len(deliveries)

    def resume(self) -> int:
        """Route what waits in every queue (after taking over a store), in one atomic step
        with the deliveries it causes; how many deliveries."""
        with self.engine._lock:
            deliveries = self._whole(self.engine.resume)
        return len(deliveries)

    def _whole(
        self, operation: Callable[[], list[Delivery]], commands: list[tuple] | None = None
    ) -> list[Delivery]:
        """Run an engine operation and send its deliveries in one commit, with `commands`
        (which the operation may fill in), or (it failed) leave nothing of it and raise."""
        journal = self.engine.journal
        mark = len(journal) if journal is not None else 0
        self.store.hold()
        try:
            deliveries = operation()
            self.store.add_commands([*(commands or ()), *self._to_outboxes(deliveries)])
            self.store.release()
        except BaseException:
            self._roll_back(journal, mark)
            raise
        self._committed(deliveries)
        return deliveries

    def _to_outboxes(self, deliveries: list[Delivery]) -> list[tuple]:
        out: dict[str, list[str]] = {}
        for delivery in deliveries:
            out.setdefault(delivery.destination, []).append(_delivery_json(delivery))
        return [("RPUSH", self._outbox + dest, *items) for dest, items in out.items()]

    def _apply(self, command: Any, failed: list[str]) -> list[Delivery]:
        """Run one command; what the engine refuses (a XumpError: it changed nothing) or
        what is not a well-formed command is noted in `failed`. Any other error raises:
        the step is then rolled back (see `_step`)."""
        engine = self.engine
        if isinstance(command, _Unreadable):
            failed.append(_failure(command, str(command)))
            return []
        op = command.get("op")
        try:
            if op == "publish":
                try:
                    queue = command["queue"]
                    messages = [_message_from(data) for data in command["messages"]]
                except (KeyError, TypeError, ValueError, AttributeError) as error:
                    raise errors.InvalidArgument(
                        f"not a well-formed publish command ({type(error).__name__})"
                    ) from None
                return engine.publish_many(queue, messages, keep_mids=True)
            if op == "call":
                return self._call(command)
            if op == "reject":
                detail = command.get("detail")
                if isinstance(detail, str) and len(detail) > 500:
                    detail = detail[:500] + "..."
                return engine.reject(
                    command.get("tag"),  # type: ignore[arg-type]
                    requeue=bool(command.get("requeue", True)),
                    detail=detail if isinstance(detail, str) and detail else None,
                )
            if op != "confirm":
                raise XumpError(f"unknown relay command {op!r}"[:120])
            tags = command.get("tags", [])
            if not isinstance(tags, list):
                raise errors.InvalidArgument("a confirm command's tags must be a list")
        except XumpError as error:
            failed.append(_failure(command, error))
            return []
        deliveries: list[Delivery] = []
        for tag in tags:  # one stale tag must not hold up the others
            try:
                deliveries.extend(engine.confirm(tag))
            except XumpError as error:
                failed.append(_failure({"op": "confirm", "tags": [tag]}, error))
        return deliveries

    def _call(self, command: dict[str, Any]) -> list[Delivery]:
        """Run a called operation; its answer (or error) goes to the caller's reply list."""
        reply = command.get("reply")
        if not _is_reply_key(reply, self.inbox):
            raise XumpError("a call's reply key must be one of this store's keys")
        method = self.calls.get(command.get("method"))  # type: ignore[arg-type]
        deliveries: list[Delivery] = []
        try:
            if method is None:
                raise XumpError(f"there is no operation {command.get('method')!r}")
            arguments = command.get("args") or {}
            if not isinstance(arguments, dict):
                raise errors.InvalidArgument("a call's arguments must be a JSON object")
            try:  # arguments that do not fit the operation: before it runs
                inspect.signature(method).bind(self.engine, **arguments)
            except TypeError as error:
                raise errors.InvalidArgument(str(error)) from None
            result, deliveries = method(self.engine, **arguments)
            answer = _encode({"result": result})
        except XumpError as error:
            answer = _encode({"error": type(error).__name__, "detail": str(error)})
        # any other error (a defect) fails the step, which is rolled back; the call is
        # then set aside alone and its caller answered (see _step): never half applied
        self._replies.append((reply, answer))
        return deliveries

    def serve(self, stop: threading.Event, idle: float = 0.01) -> None:
        """Apply commands until `stop` is set; StoreError if the lease is lost."""
        every = min(1.0, self.delivery_timeout / 2)
        next_expiry = time.monotonic() + every
        next_tick = 0.0
        while not stop.is_set():
            if not self.run_once():
                stop.wait(idle)
            now = time.monotonic()
            if now >= next_tick:
                self.tick()
                next_tick = now + TICK_EVERY
            if now >= next_expiry:
                self.expire()
                next_expiry = time.monotonic() + every
        with self.engine._lock:
            self.store.release_lease()
