"""The Redis store: queue state in Redis (redis-py with hiredis), durable with AOF.

Theory of operation: a journaled store (journal.py): queue state in memory as the RAM store
holds it, every change recorded as a Redis command (coalesced per hash), the commands of
one engine operation sent at `commit()` to one Lua script (_APPLY) that checks the lease and
applies them: one round trip, atomic, so no reader ever sees half an operation. With
`appendonly yes` and `appendfsync always` on the server, an operation that returned
survives a kill -9 of the server.

Key layout. Every key of a store carries the store's hash tag `{<store>}`, so one
operation's keys share one Redis Cluster slot (shard by creating several stores):

    xump:{S}:q:<queue>:meta      HASH  last_seq, head, tail, one field per counter
    xump:{S}:q:<queue>:entries   HASH  entry key -> JSON array of the entry without its
                                       body: [section (u/h/o), position, selector_id, tag,
                                       seq, mid, address, headers, return_address,
                                       timestamp, origin, delivery_count, replay,
                                       downstream, taken_at]
    xump:{S}:q:<queue>:credit    HASH  selector id -> credit
    xump:{S}:bodies              HASH  mid -> body (stored once however many entries)
    xump:{S}:refs                HASH  mid -> number of entries holding the body, when
                                       above 1 (a body without a count is held once)
    xump:{S}:lastkey             STRING highest entry key given out
    xump:{S}:queues              SET   queue names with state here
    xump:{S}:lease, :fence       the owner's lease token (with expiry) and fencing counter

Sharing: one process routes a store's queues at a time. It takes the store's lease
(`acquire_lease`: a key with an expiry and a fencing number); every write checks the token
inside the same script that applies it, so a process that stalled past its lease can never
write over its successor. Other processes reach the queues through relay.py (durable inbox
and outbox lists). Without a lease the store behaves as a private one.
"""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any

import redis

from engine.errors import StoreError
from engine.message import Message
from engine.stores.base import COUNTERS, Entry
from engine.stores.journal import JournaledQueueState, JournaledStore
from engine.stores.sql import mask_password

# One engine operation's writes, applied atomically, fenced by the owner's lease.
# KEYS: lease key, refs hash, bodies hash.
# ARGV: lease token ('' when the store is not leased), lease ttl in ms, then commands, each
#       as a count n followed by n words; the command "BODIES" carries (mid, change, body)
#       triples: a body is stored when its count becomes positive and dropped with its last
#       entry. The refs hash holds counts above 1 only (a stored body without one is held
#       once), which saves a field for the common message held by one entry.
_APPLY = """
if ARGV[1] ~= '' then
    if redis.call('GET', KEYS[1]) ~= ARGV[1] then
        return redis.error_reply('XUMP_LEASE_LOST')
    end
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
local i = 3
while i <= #ARGV do
    local n = tonumber(ARGV[i])
    if ARGV[i + 1] == 'BODIES' then
        for j = i + 2, i + n, 3 do
            local mid, change = ARGV[j], tonumber(ARGV[j + 1])
            local held = tonumber(redis.call('HGET', KEYS[2], mid))
            if held == nil then
                held = redis.call('HEXISTS', KEYS[3], mid)
            end
            local left = held + change
            if left <= 0 then
                redis.call('HDEL', KEYS[2], mid)
                redis.call('HDEL', KEYS[3], mid)
            else
                if held == 0 then
                    redis.call('HSET', KEYS[3], mid, ARGV[j + 2])
                end
                if left == 1 then
                    redis.call('HDEL', KEYS[2], mid)
                else
                    redis.call('HSET', KEYS[2], mid, left)
                end
            end
        end
    else
        redis.call(unpack(ARGV, i + 1, i + n))
    end
    i = i + n + 1
end
return 1
"""

# KEYS: lease key, fence counter. ARGV: owner name, ttl in ms.
# Takes the lease when it is free; the token carries a new fencing number.
_ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then
    return false
end
local token = ARGV[1] .. '#' .. redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
return token
"""


class RedisStore(JournaledStore):
    kind = "redis"

    def __init__(self, name: str, url: str | None = None) -> None:
        super().__init__(name, url)
        if not url:
            raise StoreError("a Redis store needs a URL: redis://host:port/db")
        self._prefix = f"xump:{{{name}}}:"
        try:
            self.client = redis.Redis.from_url(url, socket_timeout=10, socket_connect_timeout=5)
            self.client.ping()
            self._last_key = int(self.client.get(self._key("lastkey")) or 0)
        except (redis.RedisError, ValueError) as error:
            raise StoreError(
                f"cannot reach the Redis store at {mask_password(url)}: {error}; check that "
                "redis-server runs there and the URL (host, port, password, db) is right"
            ) from None
        self._apply = self.client.register_script(_APPLY)
        self._acquire = self.client.register_script(_ACQUIRE)
        self._commands: list[tuple] = []  # this operation's commands, in order
        self.lease_token = ""  # set while this process holds the store's lease
        self.lease_ms = 0
        # one operation's entry changes, coalesced per hash: key -> JSON, or None to delete
        self._entries: dict[str, dict[str, str | None]] = {}
        self._credits: dict[str, dict[str, int]] = {}  # credit hash -> selector id -> credit

    def _key(self, *parts: str) -> str:
        return self._prefix + ":".join(parts)

    def _queue_key(self, state: JournaledQueueState, part: str) -> str:
        return f"{self._prefix}q:{state.name}:{part}"

    # -- records -------------------------------------------------------------------------
    def record_entry(
        self,
        state: JournaledQueueState,
        entry: Entry,
        section: str,
        position: int,
        selector_id: int | None,
        tag: str | None,
    ) -> None:
        message = entry.message
        record = [
            section, position, selector_id, tag, entry.seq, message.mid, message.address,
            dict(message.headers), message.return_address, message.timestamp, entry.origin,
            entry.delivery_count, entry.replay, entry.downstream, entry.taken_at,
        ]  # fmt: skip
        changes = self._entries.setdefault(self._queue_key(state, "entries"), {})
        changes[str(entry.key)] = _encode(record)

    def record_deletion(self, state: JournaledQueueState, entry: Entry) -> None:
        changes = self._entries.setdefault(self._queue_key(state, "entries"), {})
        key = str(entry.key)
        if changes.get(key) is not None:
            del changes[key]  # written and deleted within this operation: never stored
        else:
            changes[key] = None  # every write has a new key, so this one is stored

    def record_meta(self, state: JournaledQueueState) -> None:
        meta: dict[str, Any] = {
            "last_seq": state.last_seq(),
            "head": state.head_position,
            "tail": state.tail_position,
        }
        meta.update((name, state.counters[name]) for name in COUNTERS)
        self._commands.append(("HSET", self._queue_key(state, "meta"), *_flat(meta)))
        self._commands.append(("SADD", self._key("queues"), state.name))

    def record_credit(self, state: JournaledQueueState, selector_id: int, credit: int) -> None:
        # only the last credit of an operation is sent
        self._credits.setdefault(self._queue_key(state, "credit"), {})[str(selector_id)] = credit

    def record_selector_dropped(self, state: JournaledQueueState, selector_id: int) -> None:
        self._credits.get(self._queue_key(state, "credit"), {}).pop(str(selector_id), None)
        self._commands.append(("HDEL", self._queue_key(state, "credit"), str(selector_id)))

    def record_queue_dropped(self, state: JournaledQueueState) -> None:
        self._entries.pop(self._queue_key(state, "entries"), None)
        self._credits.pop(self._queue_key(state, "credit"), None)
        for part in ("meta", "entries", "credit"):
            self._commands.append(("DEL", self._queue_key(state, part)))
        self._commands.append(("SREM", self._key("queues"), state.name))

    def discard_records(self) -> None:
        self._commands.clear()
        self._entries.clear()
        self._credits.clear()

    def add_commands(self, commands: list[tuple]) -> None:
        """Redis commands to apply in the same atomic step as the next commit (the relay
        uses it to take commands off an inbox and put deliveries in an outbox)."""
        self._commands.extend(commands)

    def flush(self, body_changes: dict[str | None, tuple[int, bytes]]) -> None:
        commands = self._commands
        for hash_key, changes in self._entries.items():
            written = {key: value for key, value in changes.items() if value is not None}
            deleted = [key for key, value in changes.items() if value is None]
            if written:
                commands.append(("HSET", hash_key, *_flat(written)))
            if deleted:
                commands.append(("HDEL", hash_key, *deleted))
        self._entries.clear()
        for hash_key, credits in self._credits.items():
            if credits:
                commands.append(("HSET", hash_key, *_flat(credits)))
        self._credits.clear()
        counted: list[Any] = []
        for mid, (change, body) in body_changes.items():
            if change:
                counted.extend((mid, change, body if change > 0 else b""))
        if counted:
            commands.append(("BODIES", *counted))
        if not commands:
            return
        commands.append(("SET", self._key("lastkey"), self._last_key))
        words: list[Any] = [self.lease_token, self.lease_ms]
        for command in _chunked(commands):
            words.append(len(command))
            words.extend(command)
        self._commands = []
        keys = [self._key("lease"), self._key("refs"), self._key("bodies")]
        try:
            self._apply(keys=keys, args=words)
        except redis.RedisError as error:
            if "XUMP_LEASE_LOST" in str(error):
                raise StoreError(
                    f"this process lost the lease on Redis store {self.name!r} (it expired and "
                    "another process took over); its changes were not written"
                ) from None
            raise StoreError(
                f"writing to the Redis store at {mask_password(self.url or '')} failed: {error}"
            ) from None

    # -- the lease: one process routes a store's queues at a time ------------------------
    def acquire_lease(self, owner: str, lease_ms: int = 5000) -> bool:
        """Take the store's lease if it is free. Call before opening any queue (queues load
        their state as the last owner left it); renew with `renew_lease()` more often than
        `lease_ms`. Every write then checks the token, so a process whose lease expired can
        never write over its successor's."""
        token = self._acquire(keys=[self._key("lease"), self._key("fence")], args=[owner, lease_ms])
        if not token:
            return False
        self.lease_token = token.decode()
        self.lease_ms = lease_ms
        # the previous owner gave out keys until it stopped: continue above them
        self._last_key = int(self.client.get(self._key("lastkey")) or 0)
        return True

    def renew_lease(self) -> None:
        """Extend the lease; StoreError if it was lost."""
        self._commands.append(("PEXPIRE", self._key("lease"), self.lease_ms))
        self.flush({})

    def release_lease(self) -> None:
        if self.lease_token:
            self._commands.append(("DEL", self._key("lease")))
            self.flush({})
            self.lease_token = ""

    # -- loading -------------------------------------------------------------------------
    def load_queue(self, state: JournaledQueueState) -> None:
        try:
            meta = self.client.hgetall(self._queue_key(state, "meta"))
            credits = self.client.hgetall(self._queue_key(state, "credit"))
            stored = self.client.hgetall(self._queue_key(state, "entries"))
        except redis.RedisError as error:
            raise StoreError(
                f"reading queue {state.name!r} from Redis at {mask_password(self.url or '')} "
                f"failed: {error}"
            ) from None
        if meta:
            values = {key.decode(): int(value) for key, value in meta.items()}
            state.restore_meta(
                values.get("last_seq", 0),
                values.get("head", 0),
                values.get("tail", 0),
                {name: values.get(name, 0) for name in COUNTERS},
            )
        for selector_id, credit in credits.items():
            state.restore_credit(int(selector_id), int(credit))
        records = [(int(key), json.loads(value)) for key, value in stored.items()]
        mids = sorted({record[_MID] for _, record in records})
        found = self.client.hmget(self._key("bodies"), mids) if mids else []
        bodies = dict(zip(mids, found, strict=True))
        order = {"u": 0, "h": 1, "o": 2}
        # FIFO positions for unprocessed, seq for history, key (order taken) for outstanding
        records.sort(key=lambda item: (order[item[1][0]], item[1][1], item[1][4], item[0]))
        for key, record in records:
            section, _position, selector_id, tag = record[:4]
            entry = _entry(key, record, bodies.get(record[_MID]) or b"")
            state.restore(entry, section, selector_id, tag)

    def close(self) -> None:
        self.client.close()


_MID = 5  # position of the mid in a stored entry record


# json.dumps with separators builds a new encoder per call; one shared encoder is faster
_encode = json.JSONEncoder(separators=(",", ":")).encode

_SPLITTABLE = {"HSET": 2, "HDEL": 1, "RPUSH": 1}  # variadic commands: words per item
_MOST_WORDS = 1000  # Lua's unpack() has a limit of about 8,000 values


def _chunked(commands: list[tuple]) -> list[tuple]:
    """Long variadic commands split into several, so the apply script can unpack each."""
    out: list[tuple] = []
    for command in commands:
        step = _SPLITTABLE.get(command[0])
        if step is None or len(command) <= _MOST_WORDS + 2:
            out.append(command)
            continue
        name, key, items = command[0], command[1], command[2:]
        size = _MOST_WORDS - _MOST_WORDS % step
        out.extend((name, key, *items[at : at + size]) for at in range(0, len(items), size))
    return out


def _flat(mapping: dict) -> list[Any]:
    return [word for pair in mapping.items() for word in pair]


def _entry(key: int, record: list[Any], body: bytes) -> Entry:
    """An Entry from its stored record: [section, position, selector_id, tag, seq, mid,
    address, headers, return_address, timestamp, origin, delivery_count, replay,
    downstream, taken_at]."""
    (
        _section, _position, _selector_id, _tag, seq, mid, address, headers, return_address,
        timestamp, origin, delivery_count, replay, downstream, taken_at,
    ) = record  # fmt: skip
    message = Message(
        address, MappingProxyType(headers), body, return_address, mid, None, timestamp
    )
    entry = Entry(seq, message, tuple(origin) if origin else None)  # type: ignore[arg-type]
    entry.key = key
    entry.delivery_count = delivery_count
    entry.replay = replay
    entry.taken_at = taken_at
    if downstream:
        entry.downstream = tuple(downstream)  # type: ignore[assignment]
    return entry
