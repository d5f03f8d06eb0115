"""The Redis store: queue state in Redis (redis-py with hiredis), durable with AOF.

Theory of operation: a journaled store (journal.py): queue state in memory as the RAM store
holds it, every change recorded as a Redis command, the commands of one engine operation
sent in one MULTI/EXEC pipeline at `commit()`: one round trip, applied atomically, so no
reader ever sees half an operation. With `appendonly yes` and `appendfsync always` on the
server, an operation that returned survives a kill -9 of the server.

Key layout. Every key of a store carries the store's hash tag `{<store>}`, so one
operation's keys share one Redis Cluster slot (shard by creating several stores):

    xump:{S}:q:<queue>:meta      HASH  last_seq, head, tail, one field per counter
    xump:{S}:q:<queue>:entries   HASH  entry key -> JSON array of the entry without its
                                       body: [section (u/h/o), position, selector_id, tag,
                                       seq, mid, address, headers, return_address,
                                       timestamp, origin, delivery_count, replay,
                                       downstream]
    xump:{S}:q:<queue>:credit    HASH  selector id -> credit
    xump:{S}:bodies              HASH  mid -> body (stored once however many entries)
    xump:{S}:refs                HASH  mid -> number of entries holding the body
    xump:{S}:lastkey             STRING highest entry key given out
    xump:{S}:queues              SET   queue names with state here

Not yet: several processes sharing one store's queues (queue leases with fencing tokens);
today one process owns a store's queues at a time, as with the SQL store.
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

# KEYS: refs hash, bodies hash. ARGV: mid1, change1, body1, mid2, change2, body2, ...
# Applies one operation's changes to the number of entries holding each body: a body is
# stored when its count becomes positive and dropped with its last entry.
_COUNT_BODIES = """
for i = 1, #ARGV, 3 do
    local mid, change = ARGV[i], tonumber(ARGV[i + 1])
    local left = redis.call('HINCRBY', KEYS[1], mid, change)
    if left <= 0 then
        redis.call('HDEL', KEYS[1], mid)
        redis.call('HDEL', KEYS[2], mid)
    elseif left == change then
        redis.call('HSET', KEYS[2], mid, ARGV[i + 2])
    end
end
return #ARGV / 3
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
        self._count_bodies = self.client.register_script(_COUNT_BODIES)
        self._pipe = self.client.pipeline(transaction=True)
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
            entry.delivery_count, entry.replay, entry.downstream,
        ]  # fmt: skip
        changes = self._entries.setdefault(self._queue_key(state, "entries"), {})
        changes[str(entry.key)] = json.dumps(record, separators=(",", ":"))

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
        self._pipe.hset(self._queue_key(state, "meta"), mapping=meta)
        self._pipe.sadd(self._key("queues"), state.name)

    def record_credit(self, state: JournaledQueueState, selector_id: int, credit: int) -> None:
        # only the last credit of an operation is sent
        self._credits.setdefault(self._queue_key(state, "credit"), {})[str(selector_id)] = credit

    def record_selector_dropped(self, state: JournaledQueueState, selector_id: int) -> None:
        self._credits.get(self._queue_key(state, "credit"), {}).pop(str(selector_id), None)
        self._pipe.hdel(self._queue_key(state, "credit"), str(selector_id))

    def record_queue_dropped(self, state: JournaledQueueState) -> None:
        self._entries.pop(self._queue_key(state, "entries"), None)
        self._credits.pop(self._queue_key(state, "credit"), None)
        for part in ("meta", "entries", "credit"):
            self._pipe.delete(self._queue_key(state, part))
        self._pipe.srem(self._key("queues"), state.name)

    def discard_records(self) -> None:
        self._pipe.reset()
        self._entries.clear()
        self._credits.clear()

    def flush(self, body_changes: dict[str | None, tuple[int, bytes]]) -> None:
        for hash_key, changes in self._entries.items():
            written = {key: value for key, value in changes.items() if value is not None}
            deleted = [key for key, value in changes.items() if value is None]
            if written:
                self._pipe.hset(hash_key, mapping=written)
            if deleted:
                self._pipe.hdel(hash_key, *deleted)
        self._entries.clear()
        for hash_key, credits in self._credits.items():
            if credits:
                self._pipe.hset(hash_key, mapping=credits)
        self._credits.clear()
        counted = []
        for mid, (change, body) in body_changes.items():
            if change:
                counted.extend((mid, change, body if change > 0 else b""))
        if counted:
            keys = [self._key("refs"), self._key("bodies")]
            self._count_bodies(keys=keys, args=counted, client=self._pipe)
        if not len(self._pipe):
            return
        self._pipe.set(self._key("lastkey"), self._last_key)
        try:
            self._pipe.execute()
        except redis.RedisError as error:
            raise StoreError(
                f"writing to the Redis store at {mask_password(self.url or '')} failed: {error}"
            ) from None
        finally:
            self._pipe.reset()

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


def _entry(key: int, record: list[Any], body: bytes) -> Entry:
    """An Entry from its stored record: [section, position, selector_id, tag, seq, mid,
    address, headers, return_address, timestamp, origin, delivery_count, replay,
    downstream]."""
    (
        _section, _position, _selector_id, _tag, seq, mid, address, headers, return_address,
        timestamp, origin, delivery_count, replay, downstream,
    ) = record  # fmt: skip
    message = Message(
        address, MappingProxyType(headers), body, return_address, mid, None, timestamp
    )
    entry = Entry(seq, message, tuple(origin) if origin else None)  # type: ignore[arg-type]
    entry.key = key
    entry.delivery_count = delivery_count
    entry.replay = replay
    if downstream:
        entry.downstream = tuple(downstream)  # type: ignore[assignment]
    return entry
