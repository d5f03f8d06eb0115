"""The router side of the relay: RelayRouter holds a store's lease and applies the commands
of its inbox, in batches, through this process's engine, writing the store's changes and
the deliveries they caused to the outboxes in one fenced atomic step; it also returns
deliveries past their timeout and runs message lifetime's timed transitions. See the
package doc.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from engine import errors
from engine.core import Engine
from engine.errors import GapMoved, NotWritten, StoreError, XumpError
from engine.message import Delivery, Message
from engine.relay.scripts import HEAD, PURGE, PUSH, SWEEP
from engine.relay.trace import TRACE, trace_channel, trace_line
from engine.relay.wire import (
    _delivery_json,
    _dumps,
    _encode,
    _keys,
    _loads,
    _message_from,
    _message_json,
    _plain,
    delivery_keys,
    forward_keys,
    pushed_key,
    ring_commands,
)
from engine.stores.redis import RedisStore
from engine.stores.redis_connect import Client, node_client, one_slot

EXPIRE_BATCH = 10_000  # taken deliveries the router looks at per expire
TICK_EVERY = 0.05  # seconds between a router's looks for due messages (SPEC §8: within 100 ms)
CARRY = 500  # forward list items a router carries to other shards' inboxes at a time
CARRY_RETRY = 1.0  # seconds before carrying again after another shard's server refused
DISTRUST_RINGS = 60.0  # seconds a router reads the inbox at every ring after a GapMoved


# An operation a client may call: it gets the router's engine and the call's arguments, and
# returns a JSON-able answer and the Deliveries it caused (they go to the outboxes).
Call = Callable[..., tuple[Any, list[Delivery]]]
REPLY_TTL_MS = 60_000
logger = logging.getLogger("xump.relay")


class _Unreadable(Exception):
    """An inbox item that is not a JSON object: set aside as it is."""

    def get(self, key: str, default: Any = None) -> Any:
        return default


class _Settled(dict):
    """The confirm of the deliveries ack:auto consumers claimed into the autoacked list
    (see the package doc): applied at the head of a step like an inbox command, but taken
    off the autoacked list, `count` items, not off the inbox. Known by its class, never by
    its content, so no inbox command can pass for one."""

    count = 0


class Handed(dict):
    """A command this process's own router was handed in memory (`run_once`'s `handed`:
    the co-located path of SPEC §11, see the package doc) instead of reading it off the
    inbox: applied like an inbox command, at the end of the step, and taken off nothing.
    `committed` turns true once the commit that applied it (or set it aside in the errors
    list) came back: durable. Known by its class, never by its content."""

    committed = False
    part = 0  # with the store's commits deferred: which of them applied it (RedisStore.defer)
    # a publish's messages as the router would read them off the inbox (`publishing`), or
    # None: the command's "messages" hold them as the inbox does
    ready: list[Message] | None = None

    @classmethod
    def of(cls, payload: bytes) -> Handed:
        """The command a client would have appended to the inbox (RelayClient's JSON)."""
        command = _loads(payload)
        if not isinstance(command, dict):
            raise errors.InvalidArgument("a handed command must be a JSON object")
        return cls(command)

    @classmethod
    def publishing(cls, queue: str, messages: list[Message]) -> Handed:
        """The publish of `messages` (RelayClient.stamped's: checked, mids given out) into
        `queue`, not encoded: the router applies them as they are, as it would the same
        command read off the inbox (`inbox_form` is that command)."""
        command = cls(op="publish", queue=queue)
        command.ready = messages
        return command

    def inbox_form(self) -> dict[str, Any]:
        """The command as the inbox holds it (its messages as JSON objects)."""
        if self.ready is None:
            return dict(self)
        return {**self, "messages": [_message_json(message) for message in self.ready]}

    def payload(self) -> bytes:
        """The command's JSON, as a client appends it to the inbox."""
        form = self.inbox_form()
        plain = all(not data["headers"] or _plain(data["headers"])
                    for data in form.get("messages", ()))  # fmt: skip
        return _dumps(form, plain)


def _messages_of(command: dict[str, Any]) -> list[Message]:
    """A publish command's messages (KeyError, TypeError, ValueError when not well formed)."""
    if type(command) is Handed and command.ready is not None:
        return command.ready
    return [_message_from(data) for data in command["messages"]]


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
    if type(command) is Handed:
        command = command.inbox_form()
    elif not isinstance(command, dict):
        command = {"op": None, "unreadable": True}
    return json.dumps({"command": command, "error": reason, "at": time.time()})


def _publish_call(engine: Engine, queue: str, messages: list[dict[str, Any]]) -> tuple:
    """The router's side of RelayClient.publish_applied."""
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise errors.InvalidArgument("messages must be a list of relay messages")
    try:
        checked = [_message_from(data) for data in messages]
    except (KeyError, TypeError, ValueError) as error:
        raise errors.InvalidArgument(f"not a relay message: {error}") from None
    return None, engine.publish_many(queue, checked, keep_mids=True)


def _is_publish(command: Any) -> bool:
    return type(command) in (dict, Handed) and command.get("op") == "publish"


def _tag_of(item: bytes) -> str | None:
    """The tag of an outbox item (None for one that is not an item the router wrote)."""
    try:
        tag = _loads(item).get("tag")
    except (ValueError, AttributeError, RecursionError, UnicodeDecodeError):
        return None
    return tag if isinstance(tag, str) else None


def _server_time(client: Client, key: str) -> float:
    """Redis's clock, which consumers stamp taken deliveries with (not this machine's): the
    clock of the server that holds `key` (a cluster's nodes each have their own)."""
    seconds, micros = node_client(client, key).time()
    return seconds + micros / 1_000_000


def _forward_item(shard: str, data: dict[str, Any], plain: bool = True) -> bytes:
    """A forward list item: `@<shard>` and a newline (a shard's name has no whitespace),
    then the item's JSON, which the carry passes on as it is, unparsed."""
    return b"@" + shard.encode() + b"\n" + _dumps(data, plain)


def _forward_parts(item: bytes) -> tuple[str, bytes]:
    """The shard and the JSON of a forward list item; an item written before the shard
    went in front (`{"n": ..., "shard": ...}`) is read whole and written again."""
    if item[:1] == b"@":
        shard, _, body = item[1:].partition(b"\n")
        return shard.decode(), body
    data = _loads(item)
    return data.pop("shard"), _dumps(data, False)


def _forwarded_command(source: str, bodies: list[bytes]) -> bytes:
    """The `forwarded` command carrying these items' JSON to their shard's inbox, made by
    joining them: JSON that json wrote (a leading space: see wire._dumps) makes the whole
    command start with one, so the shard reads it with json too."""
    head = b" " if any(body[:1] == b" " for body in bodies) else b""
    return (head + b'{"op":"forwarded","from":' + _dumps(source) + b',"items":['
            + b",".join(bodies) + b"]}")  # fmt: skip


def _from_inbox(commands: list[Any]) -> int:
    """How many of a step's commands came off the inbox (neither settlements nor handed)."""
    return sum(1 for command in commands if not isinstance(command, _Settled | Handed))


def _by_destination(deliveries: list[Delivery]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for delivery in deliveries:
        found.setdefault(delivery.destination, []).append(delivery.tag)
    return found


class RelayRouter:
    """Runs a shared store's commands through this process's engine (see the package doc).

    Take the lease first (`acquire`), then build the engine's wiring: opening the queues
    loads their state as the previous router left it.
    """

    def __init__(
        self,
        engine: Engine,
        store: str,
        name: str,
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
        self.name = name  # its name in the lease
        self.lease_ms = lease_ms
        self.delivery_timeout = delivery_timeout
        self.errors_kept = errors_kept  # stale acks alone would grow the list for ever
        self.inbox, self._outbox, self.errors = _keys(store)
        self._trace_channel = trace_channel(store)
        self._delivery_keys = delivery_keys(store)
        self._purge = backend.client.register_script(one_slot(PURGE, backend.client, self.inbox))
        self._sweep = backend.client.register_script(one_slot(SWEEP, backend.client, self.inbox))
        # the delivery timeout counts from when a consumer took a delivery, which only the
        # taken set tells: an "expire" call must use it too (the engine's own expire would
        # put a second copy of waiting deliveries in their outbox)
        self.calls: dict[str, Call] = {
            "publish": _publish_call,
            **(calls or {}),
            "expire": self._expire_call,
        }
        self._replies: list[tuple] = []
        # crossing shards (docs/scaling.md): loaded at the first step under the lease
        self._forward_keys = forward_keys(store)
        self._forward_seq = -1  # the last number given to a forward list item (-1: unread)
        self._marks: dict[str, int] = {}  # source shard -> the last item applied from it
        self._marking: dict[str, int] = {}  # the same, moved by the attempt in progress
        self._backlog = 0  # items on the forward list
        self._carried = 0  # of which, at its head, already in their shards' inboxes
        self._carry_after = 0.0  # monotonic time: carrying failed, tried again from then
        self._push_scripts: dict[str, str] = {}  # shard -> PUSH as its node runs it (carry)
        # rings that carry the commands (see the package doc): the inbox as this router
        # knows it (every command in it, in order, when `_seen` is not None), the pushed
        # count its last known command stands at, and the inbox's length minus the pushed
        # count, which stays put while every append is counted (what a commit checks)
        self._pushed_key = pushed_key(store)
        self._head_script = one_slot(HEAD, backend.client, self.inbox)
        self._known: list[bytes] = []
        self._seen: int | None = None
        self._gap = 0
        self._rings_after = 0.0  # monotonic time: rings are not used before (GapMoved)

    def acquire(self, timeout: float = 30.0) -> bool:
        """Wait until this process holds the lease (the previous router's must expire)."""
        deadline = time.monotonic() + timeout
        while not self.store.acquire_lease(self.name, self.lease_ms):
            if time.monotonic() > deadline:
                return False
            time.sleep(min(0.1, self.lease_ms / 10_000))
        return True

    def run_once(
        self,
        limit: int = 500,
        handed: list[Handed] = (),  # type: ignore[assignment]
        head: bool = True,
    ) -> int:
        """Apply up to `limit` commands from the inbox in one atomic step (with the
        settlements of claims by ack:auto consumers, and after them the commands `handed`
        in by this process); how many. A handed command's `committed` tells whether it was
        applied when this raises (StoreError: LeaseLost when nothing was written; GapMoved
        when rings told the router what the inbox held and an append was not counted).
        `head=False`: the commands rings carried (`heard`), without reading the inbox."""
        raw, settled = self.head(limit) if head else (self.carried(limit), [])
        # the engine lock keeps other threads' calls out of this step's one commit
        with self.engine._lock:
            if raw or settled or handed:
                self._step(raw, settled, handed)
            else:
                self.store.renew_lease()
        if (self._carried < self._backlog or self._forward_seq < 0) and (
            time.monotonic() >= self._carry_after
        ):
            self.carry()
        return len(raw) + len(settled) + len(handed)

    def head(self, limit: int) -> tuple[list[bytes], list[bytes]]:
        """The inbox's first `limit` commands and the autoacked list's first `limit` items,
        in one round trip (reads); with fewer than `limit` commands, the router then knows
        the whole inbox, and rings may tell it the rest (`heard`)."""
        (raw, settled, pushed), = self.store.read_packed([
            ("EVAL", self._head_script, 3, self.inbox, self._delivery_keys["autoacked"],
             self._pushed_key, limit - 1),
        ])  # fmt: skip
        self._known = list(raw)
        if len(raw) < limit:
            self._seen = int(pushed or 0)
            self._gap = len(raw) - self._seen
        else:
            self._seen = None
        return raw, settled

    def heard(self, ring: bytes) -> bool:
        """Take in a ring of the store's doorbell (the service's router listens to it):
        whether the commands it carries (scripts.PUSH) are known now, in the inbox's order,
        so a step may take them without reading the inbox (`carried`); False when the
        inbox must be read: the ring carries none, or one was missed (or an append was
        not counted) since the router last knew the whole inbox."""
        carried = ring_commands(ring)
        if carried is None or self._seen is None:
            return False
        if self._rings_after and time.monotonic() < self._rings_after:
            self._seen = None
            return False
        count, commands = carried
        if count <= self._seen:
            return True  # appended before the inbox was read: it read them
        if count - len(commands) != self._seen:
            self._seen = None
            return False
        self._known.extend(commands)
        self._seen = count
        return True

    @property
    def knows_inbox(self) -> bool:
        """Whether the router knows every command in the inbox (see `heard`)."""
        return self._seen is not None

    def carried(self, limit: int) -> list[bytes]:
        """The inbox's first `limit` commands as rings told them (see `heard`), without
        reading it; nothing when the router does not know the whole inbox."""
        return self._known[:limit] if self._seen is not None else []

    def _step(
        self,
        raw: list[bytes],
        settled: list[bytes] = (),  # type: ignore[assignment]
        handed: list[Handed] = (),  # type: ignore[assignment]
    ) -> None:
        """Apply the commands at the head of the inbox, all or nothing (see `_attempt`).

        When the step fails (any exception but the store's own StoreError: a value some
        later stage cannot carry, a defect), nothing of it was committed; the commands are
        tried again in halves, down to the one that fails alone: that one is set aside in
        the errors list with its reason, the others are applied once each, in order. So no
        single command can stop the router, whatever it holds. A failed attempt costs a
        reload of the engine's state from Redis: cheap for a rare failure, which is what
        the checks at the door (engine/validation.py) leave."""
        commands: list[Any] = []
        if settled:
            tags = [tag for tag in map(_tag_of, settled) if tag is not None]
            confirm = _Settled(op="confirm", tags=tags)
            confirm.count = len(settled)
            commands.append(confirm)
        for item in raw:
            try:
                command = _loads(item)
            except (ValueError, RecursionError, UnicodeDecodeError):
                command = _Unreadable("a command in the inbox is not readable JSON")
            if not isinstance(command, dict | _Unreadable):
                command = _Unreadable("a command in the inbox is not a JSON object")
            commands.append(command)
        commands.extend(handed)
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
        if self._forward_seq < 0:
            self._load_forwarding()
        self._marking = {}
        self.store.hold()
        try:
            deliveries = self._apply_all(commands, failed)
            extra = self._taken_off(commands)
            extra.extend(self._to_outboxes(deliveries))
            forwarded = self._forward_commands(extra)
            if failed:
                extra.append(("RPUSH", self.errors, *failed))
                extra.append(("LTRIM", self.errors, -self.errors_kept, -1))
            for key, answer in self._replies:
                extra.append(("RPUSH", key, answer))
                extra.append(("PEXPIRE", key, REPLY_TTL_MS))
            self.store.add_commands(extra)
            self._commit(commands)
            committed = time.time()
            for command in commands:
                if type(command) is Handed:
                    self._mark_committed(command)
            self._forwarded(forwarded)
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
        traced = [d.message.mid for d in deliveries if TRACE in d.message.headers]
        if traced:  # bench-only (engine/relay/trace.py)
            self._trace("step", committed, traced)  # type: ignore[arg-type]
        return None

    def _commit(self, commands: list[Any]) -> None:
        """Commit what the store holds, which takes `commands` off the head of the inbox
        (`_taken_off`). While the router knows the whole inbox (rings), the commit checks
        that nothing was appended uncounted meanwhile (RedisStore.expect_gap: GapMoved,
        nothing written, when it was), and what it knows moves on by what was taken."""
        taken = _from_inbox(commands)
        if taken and self._seen is not None:
            self.store.expect_gap(self.inbox, self._pushed_key, self._gap)
        try:
            self.store.release()
        except BaseException as error:
            self._seen = None  # written or not, or moved: read the inbox again
            if isinstance(error, GapMoved):  # an append not counted: see the package doc
                logger.warning(
                    "the inbox of store %r had a command appended without being counted (a "
                    "process of an older release?): its rings are not used for %.0f s",
                    self.store.name, DISTRUST_RINGS,
                )  # fmt: skip
                self._rings_after = time.monotonic() + DISTRUST_RINGS
            raise
        if taken:
            del self._known[:taken]
            self._gap -= taken

    def _taken_off(self, commands: list[Any]) -> list[tuple]:
        """The commands that take `commands` off the head of the inbox (and a _Settled
        one's items off the head of the autoacked list) in a step's commit."""
        inbox = _from_inbox(commands)
        extra: list[tuple] = [("LTRIM", self.inbox, inbox, -1)] if inbox else []
        for command in commands:
            if isinstance(command, _Settled):
                extra.append(("LTRIM", self._delivery_keys["autoacked"], command.count, -1))
            elif type(command) is Handed and command.get("op") in ("confirm", "reject"):
                # a handed settlement's delivery timeout stops in its commit (an appended
                # one's client takes its tags off the taken set as it appends it)
                tags = command.get("tags") if command.get("op") == "confirm" else [
                    command.get("tag")]  # fmt: skip
                tags = [tag for tag in tags if isinstance(tag, str)] if isinstance(
                    tags, list) else []  # fmt: skip
                if tags:
                    extra.append(("ZREM", self._delivery_keys["taken"], *tags))
        return extra

    def _trace(self, hop: str, at: float, mids: list[str]) -> None:
        with contextlib.suppress(redis.RedisError):
            self.store.client.publish(self._trace_channel, trace_line(hop, at, mids))

    def _roll_back(self, journal: Any, mark: int) -> None:
        """Forget a step that was not committed: the store's records, the engine's state
        (loaded again as last committed) and the journal events and forwards it recorded.
        With the store's commits deferred (RedisStore.defer) the store is not as last
        committed while they wait, so nothing is loaded: NotWritten, and the caller sends
        none of them (xumpweb/runtime.py's Router.step_here)."""
        if self.store.deferred is not None:
            raise NotWritten("a command failed in a step whose commits were not sent yet")
        if journal is not None:
            journal.take_back(mark)
        self._marking = {}
        self.engine.reload()  # its forwards too

    # -- crossing shards (docs/scaling.md) ----------------------------------------------------
    def _load_forwarding(self) -> None:
        """What the store says of its forwarding: the forward list's counter and length,
        and the marks of what each other shard forwarded here (read under the lease)."""
        keys = self._forward_keys
        pipe = self.store.client.pipeline(transaction=False)
        pipe.get(keys["forward_seq"]).hgetall(keys["forwarded"]).llen(keys["forward"])
        seq, marks, backlog = pipe.execute()
        self._forward_seq = int(seq or 0)
        self._marks = {source.decode(): int(n) for source, n in marks.items()}
        self._backlog, self._carried = backlog, 0

    def _forward_commands(self, extra: list[tuple]) -> tuple[int, int]:
        """Add to the step's commit the forwards and settles its engine calls recorded (the
        forward list, numbered), the trim of what was carried since the last commit, and
        the marks of what it applied from other shards; what `_forwarded` needs after the
        commit: (items added, items trimmed)."""
        keys = self._forward_keys
        forwards, settles = self.engine.take_forwards()
        items = []
        n = self._forward_seq
        for forward in forwards:
            n += 1
            items.append(_forward_item(forward.shard, {
                "n": n, "queue": forward.queue, "message": _message_json(forward.message),
                "visited": list(forward.visited), "origin": forward.origin,
                "count": forward.delivery_count,
            }, _plain(forward.message.headers)))  # fmt: skip
        for settle in settles:
            n += 1
            items.append(_forward_item(settle.shard, {"n": n, "settle": settle.origin}))
        trimmed = self._carried
        if trimmed:
            extra.append(("LTRIM", keys["forward"], trimmed, -1))
        if items:
            extra.append(("RPUSH", keys["forward"], *items))
            extra.append(("SET", keys["forward_seq"], n))
        if self._marking:
            marks = [part for pair in self._marking.items() for part in pair]
            extra.append(("HSET", keys["forwarded"], *marks))
        return len(items), trimmed

    def _forwarded(self, done: tuple[int, int]) -> None:
        """The step that `_forward_commands` added to was committed."""
        added, trimmed = done
        self._forward_seq += added
        self._backlog += added - trimmed
        self._carried -= trimmed
        self._marks.update(self._marking)
        self._marking = {}

    def carry(self) -> int:
        """Append the forward list's items not carried yet to their shards' inboxes, in
        order, one `forwarded` command per shard; how many. They leave the list in the
        next step's commit (fenced by the lease): until then a new router carries them
        again, and each shard skips what it already applied (its marks)."""
        if self._forward_seq < 0:
            with self.engine._lock:
                self._load_forwarding()
        if self._carried >= self._backlog:
            return 0
        client = self.store.client
        raw = client.lrange(self._forward_keys["forward"], self._carried,
                            self._carried + CARRY - 1)  # fmt: skip
        by_shard: dict[str, list[bytes]] = {}
        for item in raw:
            shard, body = _forward_parts(item)
            by_shard.setdefault(shard, []).append(body)
        source = self.store.name
        try:
            for shard, found in by_shard.items():
                inbox = _keys(shard)[0]
                script = self._push_scripts.get(shard)
                if script is None:  # with a shebang on a cluster (one round trip, once)
                    script = self._push_scripts[shard] = one_slot(PUSH, client, inbox)
                # counted as every append is (scripts.PUSH); the service rings (_carried_to)
                client.eval(script, 2, inbox, pushed_key(shard), "", "f", "",
                            _forwarded_command(source, found))  # fmt: skip
                self._carried_to(shard)
        except redis.RedisError as error:
            # a shard whose server is away (a cluster's node down): none of these count as
            # carried, so they are carried again, the ones that arrived as well, and those
            # are skipped there (the marks); routing goes on meanwhile
            logger.warning("forwards of store %r wait: %s", source, error)
            self._carry_after = time.monotonic() + CARRY_RETRY
            return 0
        self._carried += len(raw)
        return len(raw)

    def _carried_to(self, shard: str) -> None:
        """Commands were appended to `shard`'s inbox (the service rings its router)."""

    def _apply_forwarded(self, command: dict[str, Any]) -> list[Delivery]:
        """Apply what another shard forwarded here, skipping every item at or below the
        mark of what was already applied from it (a forward carried twice). Every item is
        read before any is applied: a malformed command changes nothing."""
        source, items = command.get("from"), command.get("items")
        if not isinstance(source, str) or not isinstance(items, list):
            raise errors.InvalidArgument("a forwarded command names its shard and its items")
        mark = self._marking.get(source, self._marks.get(source, 0))
        runs: list[tuple[str, list[Any]]] = []  # ("arrive" | "settle", items), in order
        try:
            for item in items:
                n = item["n"]
                if type(n) is not int:
                    raise TypeError("an item's number")
                if n <= mark:
                    continue
                mark = n
                if "settle" in item:
                    queue, selector, tag = item["settle"]
                    found: Any = (str(queue), int(selector), str(tag))
                    kind = "settle"
                else:
                    origin = item["origin"]
                    if origin is not None:
                        queue, selector, tag = origin
                        origin = (str(queue), int(selector), str(tag))
                    visited = [str(name) for name in item["visited"]]
                    found = (str(item["queue"]), _message_from(item["message"]), visited,
                             origin, int(item["count"]))  # fmt: skip
                    kind = "arrive"
                if runs and runs[-1][0] == kind:
                    runs[-1][1].append(found)
                else:
                    runs.append((kind, [found]))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise errors.InvalidArgument(
                f"not a well-formed forwarded command ({type(error).__name__})"
            ) from None
        deliveries: list[Delivery] = []
        for kind, found in runs:
            if kind == "arrive":
                deliveries.extend(self.engine.arrive_forwarded(source, found))
            else:
                deliveries.extend(self.engine.settle_forwarded(found))
        self._marking[source] = mark
        return deliveries

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
            *self._taken_off([command]),
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
            self._commit([command])
        except BaseException:
            with contextlib.suppress(Exception):
                self.engine.reload()
            raise
        if type(command) is Handed:
            self._mark_committed(command)

    def _mark_committed(self, command: Handed) -> None:
        """`command` was applied by the commit just made (or deferred: RedisStore.defer,
        and then `part` says which of the deferred commits it is in)."""
        command.committed = True
        deferred = self.store.deferred
        if deferred is not None:
            command.part = len(deferred) - 1

    def _committed(self, deliveries: list[Delivery]) -> None:
        """Called after each committed step with the deliveries it sent (a subclass may
        note them)."""

    def expire(self) -> int:
        """Delivery timeouts and destinations away (see the package doc), in one atomic step
        with the redeliveries they cause: deliveries a consumer took longer ago than the
        delivery timeout and did not settle go back to their queues; worker queues whose
        destinations have been away that long give their work back. How many deliveries
        were made."""
        client = self.store.client
        keys = self._delivery_keys
        with self.engine._lock:
            try:
                self._sweep_claims()
                now = _server_time(client, self.inbox)
                stale = client.zrangebyscore(keys["taken"], "-inf", now - self.delivery_timeout,
                                             start=0, num=EXPIRE_BATCH)  # fmt: skip
                gone, away, absence = self._absence(now)
            except redis.RedisError as error:
                raise StoreError(
                    f"cannot read the delivery timeouts of store {self.store.name!r}: {error}"
                ) from None
            revoked: list[Delivery] = []
            commands = absence

            def operation() -> list[Delivery]:
                deliveries = self.engine.expire_tags(t.decode() for t in stale)
                caused, withdrawn = self.engine.absent(gone, away=away)
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
                self._purge(keys=[self._outbox + destination, keys["revoked"] + destination,
                                  keys["claimed"]])  # fmt: skip
            except redis.RedisError as error:  # TAKE and CLAIM_CHECK skip them meanwhile
                logger.warning("revoked deliveries stay in %r for now: %s", destination, error)
        return len(deliveries)

    def _sweep_claims(self) -> None:
        """Start the delivery timeout of the deliveries consumers claimed and did not stamp
        (they may have died after the claim; see the package doc)."""
        keys = self._delivery_keys
        self._sweep(keys=[keys["claimed"], keys["taken"]], args=[EXPIRE_BATCH])

    def _absence(self, now: float) -> tuple[set[str], set[str], list[tuple]]:
        """The worker destinations away for the delivery timeout, those away now (no
        consumer's presence key), and the commands that keep the absent hash (since when
        each is seen away) up to date."""
        keys = self._delivery_keys
        destinations = sorted(self.engine.worker_destinations())
        presence_keys = []
        for destination in destinations:
            # its subscribers' presence is kept on its home shard (forwarding.py)
            home = self.engine.destination_home(destination)
            present = keys["present"] if home is None else delivery_keys(home)["present"]
            presence_keys.append(present + destination)
        pipe = self.store.client.pipeline(transaction=False)
        for key in presence_keys:
            pipe.exists(key)
        pipe.hgetall(keys["absent"])
        try:
            *present, known = pipe.execute()
        except redis.RedisError:
            # a home shard's server is away (a cluster's node down): each key alone, and
            # one that cannot be read counts as present (nothing is given back on a guess)
            known = self.store.client.hgetall(keys["absent"])
            present = [self._exists_or_unknown(key) for key in presence_keys]
        since = {name.decode(): float(at) for name, at in known.items()}
        gone: set[str] = set()
        away: set[str] = set()
        commands: list[tuple] = []
        for destination, here in zip(destinations, present, strict=True):
            if not here:
                away.add(destination)
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
        return gone, away, commands

    def _exists_or_unknown(self, key: str) -> int:
        try:
            return self.store.client.exists(key)
        except redis.RedisError:
            return 1

    def _expire_call(self, engine: Engine, older_than: float) -> tuple[Any, list[Delivery]]:
        """The "expire" operation: deliveries taken more than `older_than` seconds ago and
        not settled are delivered again (the router's own `expire` runs by itself)."""
        if not isinstance(older_than, int | float) or isinstance(older_than, bool):
            raise errors.InvalidArgument(f"older_than must be seconds, not {older_than!r}")
        client = self.store.client
        self._sweep_claims()
        cutoff = _server_time(client, self.inbox) - older_than
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
        if self._forward_seq < 0:
            self._load_forwarding()
        self.store.hold()
        try:
            deliveries = operation()
            extra = [*(commands or ()), *self._to_outboxes(deliveries)]
            forwarded = self._forward_commands(extra)
            self.store.add_commands(extra)
            self.store.release()
        except BaseException:
            self._roll_back(journal, mark)
            raise
        self._forwarded(forwarded)
        self._committed(deliveries)
        return deliveries

    def _to_outboxes(self, deliveries: list[Delivery]) -> list[tuple]:
        out: dict[str, list[str]] = {}
        for delivery in deliveries:
            out.setdefault(delivery.destination, []).append(_delivery_json(delivery))
        return [("RPUSH", self._outbox + dest, *items) for dest, items in out.items()]

    def _apply_all(self, commands: list[Any], failed: list[str]) -> list[Delivery]:
        """Run the commands in order (see _apply). Consecutive publishes to one queue (a
        STOMP server's or web process's group commit appends one a message) go to the
        engine as one publish_many: one engine call, not one per message."""
        deliveries: list[Delivery] = []
        at, count = 0, len(commands)
        while at < count:
            command = commands[at]
            end = at + 1
            if _is_publish(command):
                queue = command.get("queue")
                while (
                    end < count
                    and _is_publish(commands[end])
                    and (commands[end].get("queue") == queue)
                ):
                    end += 1
            if end - at > 1:
                deliveries.extend(self._publish_run(commands[at:end], failed))
            else:
                deliveries.extend(self._apply(command, failed))
            at = end
        return deliveries

    def _publish_run(self, run: list[dict[str, Any]], failed: list[str]) -> list[Delivery]:
        """Publish commands to one queue as one engine call. When that is refused (a
        XumpError: it changed nothing), or a command is not well formed, or two messages
        share a mid (the engine's once-per-queue-per-step rule would then differ), each
        command is applied alone, as without the merge: what is refused is exactly what
        would have been, command by command."""
        try:
            messages = [message for command in run for message in _messages_of(command)]
            distinct = len({message.mid for message in messages}) == len(messages)
        except (KeyError, TypeError, ValueError, AttributeError):
            distinct = False
        if distinct and all(message.mid is not None for message in messages):
            try:
                return self.engine.publish_many(run[0]["queue"], messages, keep_mids=True)
            except XumpError:
                pass
        deliveries: list[Delivery] = []
        for command in run:
            deliveries.extend(self._apply(command, failed))
        return deliveries

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
                    messages = _messages_of(command)
                except (KeyError, TypeError, ValueError, AttributeError) as error:
                    raise errors.InvalidArgument(
                        f"not a well-formed publish command ({type(error).__name__})"
                    ) from None
                return engine.publish_many(queue, messages, keep_mids=True)
            if op == "call":
                return self._call(command)
            if op == "forwarded":
                return self._apply_forwarded(command)
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
