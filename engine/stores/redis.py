"""The Redis store: queue state in Redis (redis-py with hiredis), durable with AOF.

Theory of operation: a journaled store (journal.py): queue state in memory as the RAM store
holds it, every change recorded, and the records of one engine operation sent at `commit()`
to one Lua script (_APPLY) that checks the lease and applies them: one round trip, atomic, so
no reader ever sees half an operation. With `appendonly yes` and `appendfsync always` on the
server, an operation that returned survives a kill -9 of the server.

Key layout. Every key of a store carries the store's hash tag `{<store>}`, so one
operation's keys share one Redis Cluster slot (shard by creating several stores). On a
cluster (`cluster=true` in the URL, redis_connect.py) the scripts start with `#!lua`, so the
server itself refuses any key outside that slot, and _APPLY goes to the slot's node:

    xump:{S}:q:<queue>:unprocessed  LIST  entry records, oldest first
    xump:{S}:q:<queue>:entries      HASH  entry key -> record, for history and outstanding
    xump:{S}:q:<queue>:meta         HASH  last_seq, one field per counter
    xump:{S}:q:<queue>:credit       HASH  selector id -> credit
    xump:{S}:bodies                 HASH  mid -> b"<count>:<body>", bodies held by reference
    xump:{S}:lastkey                STRING highest entry key given out
    xump:{S}:queues                 SET   queue names with state here
    xump:{S}:lease, :fence          the owner's lease token (with expiry) and fencing counter

Records are text fields joined by \\x1f, empty trailing fields left out (see _record):
section, seq, mid, address, timestamp, headers (JSON), return address, selector id, tag,
origin, delivery count, taken at, replay, downstream, message ttl, message delay, due time
(of a scheduled entry). An address with control characters
makes the record a JSON array of the same fields instead.

Bodies. A body is stored once: in the one entry that holds it (the record, a newline, the
body) or, when several entries hold it, by reference in the bodies hash with their count.
The choice is made at commit for each entry written: inline when it is the only entry of its
message written in the operation and no entry holds the body by reference; an inline entry
keeps its own copy for its life (a history entry that a start_at selector replays is then
stored twice). Python knows the count of every body born in this process (all its entries
were written here) and writes it outright; for bodies loaded from Redis, whose other entries
may sit in queues this process never opened, the script adds the change to the stored count.
A stored entry's key is negative when its body is inline; list entries get keys only in
memory (their records carry none).

Lifetime (SPEC §8): scheduled entries (sections "s" and "w", with their due time) are
fields of the entries hash like history; they are loaded into the in-memory heap, which
orders them. A queue with several priority levels keeps its unprocessed entries there too
(section "u", in seq order), not in the list: taking the head of one level must not rewrite
the list.

The unprocessed section is a list because it is one: appends, pops at the head and
give-backs at the head become RPUSH, LTRIM and LPUSH; in memory, an unprocessed entry whose
key is None is not in the list yet. Withdrawing an entry from the middle (rare: a MOVE
selector deleted) rewrites the list.

Sharing: one process routes a store's queues at a time. It takes the store's lease
(`acquire_lease`: a key with an expiry and a fencing number); every write checks the token
inside the same script that applies it, so a process that stalled past its lease can never
write over its successor (when none came, the stalled owner takes its lease back). Other
processes reach the queues through engine/relay/ (durable inbox and outbox lists). Without a
lease the store behaves as a private one.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable
from itertools import islice
from types import MappingProxyType
from typing import Any

import orjson
import redis
from hiredis import pack_command

from engine.errors import GapMoved, LeaseLost, NotWritten, StoreError
from engine.message import _EMPTY_HEADERS as EMPTY_HEADERS
from engine.message import Message
from engine.stores.base import COUNTERS, Entry
from engine.stores.journal import JournaledQueueState, JournaledStore
from engine.stores.redis_connect import REDIRECTIONS, connect, node_client, one_slot
from engine.stores.sql import mask_password

# One engine operation's writes, applied atomically, fenced by the owner's lease.
# KEYS: lease key, bodies hash, fence counter.
# ARGV: lease token ('' when the store is not leased), lease ttl in ms, the token's fencing
#       number, then commands, each as a count n followed by n words. The command "BODIES"
#       carries (mid, change, body) triples for bodies loaded from Redis: their count
#       (before the ':' of the stored value) changes by `change`; the body is stored with a
#       first count and dropped when the count reaches 0.
# A lease that expired while nobody took it (the fence counter still at the token's number)
# is taken back: its owner only stalled, and no other process wrote in between.
# ARGV[4..6], after the fencing number: a list key, a counter key and a number ('' when
# there is no such check: see RedisStore.expect_gap): nothing is written unless the list's
# length minus the counter's value is that number.
_APPLY = """
if ARGV[1] ~= '' then
    local holder = redis.call('GET', KEYS[1])
    if holder == ARGV[1] then
        redis.call('PEXPIRE', KEYS[1], ARGV[2])
    elseif holder or redis.call('GET', KEYS[3]) ~= ARGV[3] then
        return redis.error_reply('XUMP_LEASE_LOST')
    else
        redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    end
end
if ARGV[4] ~= '' then
    local gap = redis.call('LLEN', ARGV[4]) - tonumber(redis.call('GET', ARGV[5]) or '0')
    if gap ~= tonumber(ARGV[6]) then
        return redis.error_reply('XUMP_GAP_MOVED')
    end
end
local i = 7
while i <= #ARGV do
    local n = tonumber(ARGV[i])
    if ARGV[i + 1] == 'BODIES' then
        for j = i + 2, i + n, 3 do
            local mid, change, body = ARGV[j], tonumber(ARGV[j + 1]), ARGV[j + 2]
            local held = 0
            local stored = redis.call('HGET', KEYS[2], mid)
            if stored then
                local colon = string.find(stored, ':', 1, true)
                held = tonumber(string.sub(stored, 1, colon - 1))
                body = string.sub(stored, colon + 1)
            end
            local left = held + change
            if left <= 0 then
                redis.call('HDEL', KEYS[2], mid)
            else
                redis.call('HSET', KEYS[2], mid, left .. ':' .. body)
            end
        end
    else
        redis.call(unpack(ARGV, i + 1, i + n))
    end
    i = i + n + 1
end
return 1
"""

# KEYS: lease key. ARGV: the lease's token. Deletes the lease if it is still that token's.
_DROP_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
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

_SEP = "\x1f"  # between the fields of a record
_SUB = "\x1e"  # between the parts of a field (origin, downstream)
_FIELDS = 17
_LOAD_CHUNK = 10_000


class RedisQueueState(JournaledQueueState):
    """A journaled queue whose unprocessed section is a Redis list (see the module doc).

    Between commits it counts what happened to the list: entries given back at the head
    (`_front`, not in the list yet), list entries popped from the head (`_popped`) and
    entries appended (`_tail`, not in the list yet); `_stored` is the list's length at the
    last commit."""

    __slots__ = ("_front", "_listed", "_popped", "_rewrite", "_stored", "_tail", "dropped", "keys")

    def __init__(self, store: RedisStore, name: str) -> None:
        prefix = f"{store.prefix}q:{name}:"
        self.keys = (prefix + "unprocessed", prefix + "entries", prefix + "meta",
                     prefix + "credit")  # fmt: skip
        self._front = self._popped = self._tail = self._stored = 0
        self._listed = self._rewrite = self.dropped = False
        super().__init__(store, name)
        self._stored = len(self._unprocessed)

    def _changed(self) -> None:
        if not self._listed and not self.loading:
            self._listed = True
            self.store._lists.append(self)  # type: ignore[attr-defined]

    def listed(self) -> None:
        """The list now holds the unprocessed section (called at commit)."""
        self._front = self._popped = self._tail = 0
        self._listed = self._rewrite = False
        self._stored = len(self._unprocessed)

    # A queue with priority levels keeps its unprocessed entries in the entries hash (see
    # the module doc): the journaled state's own way.
    def append(self, entry: Entry) -> None:
        if self._levels > 1:
            JournaledQueueState.append(self, entry)
            return
        self._unprocessed.append(entry)
        self._tail += 1
        if not self._listed:
            self._changed()

    def pop_head(self) -> Entry:
        if self._levels > 1:
            return JournaledQueueState.pop_head(self)
        entry = self._unprocessed.popleft()
        if self._front:
            self._front -= 1
        elif self._popped < self._stored:
            self._popped += 1
            self.store.released(entry)  # type: ignore[attr-defined]
        else:
            self._tail -= 1
        entry.key = None
        if not self._listed:
            self._changed()
        return entry

    def push_front(self, entries: list[Entry]) -> None:
        if self._levels > 1:
            JournaledQueueState.push_front(self, entries)
            return
        self._unprocessed.extendleft(reversed(entries))
        self._front += len(entries)
        self._changed()

    def remove(self, seq: int) -> bool:
        if self._levels > 1:
            return JournaledQueueState.remove(self, seq)
        at = next((at for at, entry in enumerate(self._unprocessed) if entry.seq == seq), None)
        if at is None:
            return False
        entry = self._unprocessed[at]
        del self._unprocessed[at]
        if at < self._front:
            self._front -= 1
        elif at < self._front + self._stored - self._popped:
            self._rewrite = True  # from the middle of the list: written again whole
            self.store.released(entry)  # type: ignore[attr-defined]
        else:
            self._tail -= 1
        entry.key = None
        self._changed()
        return True


class RedisStore(JournaledStore):
    kind = "redis"
    queue_class = RedisQueueState

    def __init__(self, name: str, url: str | None = None) -> None:
        super().__init__(name, url)
        if not url:
            raise StoreError("a Redis store needs a URL: redis://host:port/db")
        self.prefix = f"xump:{{{name}}}:"
        try:
            # one Redis server, or with cluster=true a Redis Cluster (redis_connect.py)
            self.client, self.cluster = connect(url, socket_timeout=10, socket_connect_timeout=5)
            node_client(self.client, self._key("lease")).ping()
            self._last_key = int(self.client.get(self._key("lastkey")) or 0)
            # on a cluster the server itself refuses a script that strays from the slot
            self._apply_source = one_slot(_APPLY, self.client, self._key("lease"))
            acquire_source = one_slot(_ACQUIRE, self.client, self._key("lease"))
        except (redis.RedisError, ValueError) as error:
            raise StoreError(
                f"cannot reach the Redis store at {mask_password(url)}: {error}; check that "
                "redis-server runs there and the URL (host, port, password, db) is right"
            ) from None
        self._apply = self.client.register_script(self._apply_source)
        keys = (self._key("lease"), self._key("bodies"), self._key("fence"))
        self._apply_head = ("EVALSHA", self._apply.sha, len(keys), *keys)
        self._acquire = self.client.register_script(acquire_source)
        # the connection the router's reads and commits go on (see _checkout)
        self._own: tuple[Any, Any, int] | None = None  # (pool, connection, pid)
        self._own_lock = threading.Lock()
        self.lease_token = ""  # set while this process holds the store's lease
        self._fence = ""  # the lease's fencing number (the token ends with "#<number>")
        self.lease_ms = 0
        # what the operation(s) since the last commit changed:
        self._commands: list[tuple] = []  # commands to send before the entries' writes
        self._writes: dict[int, tuple] = {}  # key -> (state, entry, section, selector, tag)
        self._deletes: list[tuple] = []  # (state or None for a list entry, key, message)
        self._lists: list[RedisQueueState] = []  # queues whose unprocessed list changed
        self._credits: dict[tuple[RedisQueueState, int], int] = {}
        # bodies: by-reference count of each body born here (see the module doc), and the
        # mids of bodies loaded from Redis
        self._refs: dict[str | None, int] = {}
        self._foreign: set[str | None] = set()
        self._registered: set[str] = set()  # queues known to be in the `queues` set

    def _key(self, *parts: str) -> str:
        return self.prefix + ":".join(parts)

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
        # encoded at commit: an entry written again in the same operation costs nothing
        self._writes[entry.key] = (state, entry, section, selector_id, tag)  # type: ignore

    def record_deletion(self, state: JournaledQueueState, entry: Entry) -> None:
        key: int = entry.key  # type: ignore[assignment]
        if self._writes.pop(key, None) is None:  # not written within this commit: stored
            self._deletes.append((state, key, entry.message))

    def released(self, entry: Entry) -> None:
        """A stored list entry left (no hash field to delete)."""
        if entry.key is not None and entry.key > 0:
            self._deletes.append((None, entry.key, entry.message))

    def record_meta(self, state: JournaledQueueState) -> None:
        if state.dropped:  # type: ignore[attr-defined]
            return
        counters = state.counters
        self._commands.append(
            ("HSET", state.keys[2], "last_seq", state.last_seq(),  # type: ignore[attr-defined]
             *[word for name in COUNTERS for word in (name, counters[name])])
        )  # fmt: skip
        if state.name not in self._registered:
            self._registered.add(state.name)
            self._commands.append(("SADD", self._key("queues"), state.name))

    def record_credit(self, state: JournaledQueueState, selector_id: int, credit: int) -> None:
        self._credits[(state, selector_id)] = credit  # type: ignore[index]

    def record_selector_dropped(self, state: JournaledQueueState, selector_id: int) -> None:
        self._credits.pop((state, selector_id), None)  # type: ignore[arg-type]
        self._commands.append(("HDEL", state.keys[3], selector_id))  # type: ignore[attr-defined]

    def record_queue_dropped(self, state: JournaledQueueState) -> None:
        state.dropped = True  # type: ignore[attr-defined]
        pending = {key for key, write in self._writes.items() if write[0] is state}
        for key in pending:
            del self._writes[key]
        for entry in state.held_entries():  # what the queue's keys held leaves with them
            key = entry.key
            if key is not None and key > 0 and key not in pending:
                self._deletes.append((None, key, entry.message))
        self._deletes = [(None if s is state else s, k, m) for s, k, m in self._deletes]
        self._lists = [listed for listed in self._lists if listed is not state]
        self._credits = {key: c for key, c in self._credits.items() if key[0] is not state}
        self._commands.append(("DEL", *state.keys))  # type: ignore[attr-defined]
        self._commands.append(("SREM", self._key("queues"), state.name))
        self._registered.discard(state.name)

    def discard_records(self) -> None:
        """Nothing to discard: what was recorded between operations (a new selector's
        credit) is written with the next commit."""

    def reset(self) -> None:
        """Forget every record not yet committed and every queue state loaded: a queue
        opened again loads its state as the last commit left it, as a new owner would.
        The relay's rollback of a step that failed (relay/owner.py); the lease is kept."""
        self._holding = 0
        self.dirty.clear()
        self._queues.clear()
        self._commands, self._writes, self._deletes = [], {}, []
        self._lists, self._credits = [], {}
        self._refs.clear()
        self._foreign.clear()
        self._registered.clear()

    def add_commands(self, commands: list[tuple]) -> None:
        """Redis commands to apply in the same atomic step as the next commit (the relay
        uses it to take commands off an inbox and put deliveries in an outbox)."""
        self._commands.extend(commands)

    # -- commit --------------------------------------------------------------------------
    def flush(self) -> None:
        commands = self._commands
        writes, deletes, lists = self._writes, self._deletes, self._lists
        # the body changes: first what left, then where each new entry keeps its body
        change: dict[str | None, int] = {}
        bodies: dict[str | None, bytes] = {}
        removed: dict[str, list[str]] = {}  # entries hash -> fields to delete
        for state, key, message in deletes:
            if state is not None:
                field_list = removed.get(state.keys[1])
                if field_list is None:
                    field_list = removed[state.keys[1]] = []
                field_list.append(str(key))
            if key > 0:
                mid = message.mid
                change[mid] = change.get(mid, 0) - 1
                bodies[mid] = message.body
        written_here: dict[str | None, int] = {}
        for write in writes.values():
            mid = write[1].message.mid
            written_here[mid] = written_here.get(mid, 0) + 1
        new_in_lists = []
        for state in lists:
            fresh = _unstored(state)
            new_in_lists.append(fresh)
            for entry in fresh:
                mid = entry.message.mid
                written_here[mid] = written_here.get(mid, 0) + 1
        refs, foreign = self._refs, self._foreign

        def inline(message: Message) -> bool:
            """Whether a new entry keeps this body itself (else: by reference, counted)."""
            mid = message.mid
            if (
                written_here[mid] == 1
                and mid not in foreign
                and refs.get(mid, 0) + change.get(mid, 0) == 0
            ):
                return True
            change[mid] = change.get(mid, 0) + 1
            bodies[mid] = message.body
            return False

        added: dict[str, list[Any]] = {}  # entries hash -> field, value, ...
        for key, (state, entry, section, selector_id, tag) in writes.items():
            header = _record(entry, section, selector_id, tag)
            message = entry.message
            if inline(message):
                key = entry.key = -key
                value: Any = b"%s\n%s" % (header.encode(), message.body)
            else:
                value = header
            words = added.get(state.keys[1])
            if words is None:
                words = added[state.keys[1]] = []
            words.append(key)
            words.append(value)
        for state, fresh in zip(lists, new_in_lists, strict=True):
            self._list_commands(state, fresh, inline, commands)
        for hash_key, words in added.items():
            commands.append(("HSET", hash_key, *words))
        for hash_key, fields in removed.items():
            commands.append(("HDEL", hash_key, *fields))
        for (state, selector_id), credit in self._credits.items():
            commands.append(("HSET", state.keys[3], selector_id, credit))
        self._writes, self._deletes, self._lists, self._credits = {}, [], [], {}
        counted: list[Any] = []
        stored: list[Any] = []
        dropped: list[Any] = []
        for mid, delta in change.items():
            if not delta:
                continue
            if mid in foreign:
                counted.extend((mid, delta, bodies[mid] if delta > 0 else b""))
                continue
            held = refs.get(mid, 0) + delta
            if held > 0:
                refs[mid] = held
                stored.extend((mid, b"%d:%s" % (held, bodies[mid])))
            else:
                refs.pop(mid, None)
                dropped.append(mid)
        if stored:
            commands.append(("HSET", self._key("bodies"), *stored))
        if dropped:
            commands.append(("HDEL", self._key("bodies"), *dropped))
        if counted:
            commands.append(("BODIES", *counted))
        if not commands:
            self._gap = None  # nothing to commit: nothing to check
            return
        commands.append(("SET", self._key("lastkey"), self._last_key))
        self._commands = []
        self._send(commands)

    def _list_commands(
        self, state: RedisQueueState, fresh: list[Entry], inline: Any, commands: list[tuple]
    ) -> None:
        """The commands that make `state`'s list hold its unprocessed section again."""
        list_key = state.keys[0]
        if state._rewrite:
            values = [self._list_value(entry, inline) for entry in state._unprocessed]
            commands.append(("DEL", list_key))
            if values:
                commands.append(("RPUSH", list_key, *values))
        else:
            if state._popped:
                commands.append(("LTRIM", list_key, state._popped, -1))
            front, tail = fresh[: state._front], fresh[state._front :]
            if front:
                values = [self._list_value(entry, inline) for entry in front]
                commands.append(("LPUSH", list_key, *reversed(values)))
            if tail:
                values = [self._list_value(entry, inline) for entry in tail]
                commands.append(("RPUSH", list_key, *values))
        state.listed()

    def _list_value(self, entry: Entry, inline: Any) -> Any:
        """The record of an unprocessed entry; a stored one keeps its body where it is."""
        key = entry.key
        message = entry.message
        header = _record(entry, "u", None, None)
        if key is None:
            key = self.next_key()
            if inline(message):
                key = -key
            entry.key = key
        if key < 0:
            return b"%s\n%s" % (header.encode(), message.body)
        return header

    _gap: tuple[str, str, int] | None = None  # the next commit's check (expect_gap)

    def expect_gap(self, list_key: str, counter_key: str, gap: int) -> None:
        """Make the next commit write nothing, and raise GapMoved, unless the length of the
        list at `list_key` minus the value of the counter at `counter_key` (0 when absent)
        is `gap` when it runs; keys of the store's slot. Checked in the commit's atomic
        step, after the lease and before any write (the relay's router: rings that carry
        the commands, engine/relay's package doc)."""
        self._gap = (list_key, counter_key, gap)

    # Commits deferred (a list: `defer`), or None: sent as they are made. See `defer`.
    deferred: list[tuple] | None = None
    # Set when a deferred commit failed (`deferred_failed`): this store's commits raise it,
    # writing nothing, for its owner to drop the engine and load the store again.
    broken: StoreError | None = None

    def defer(self) -> None:
        """Until `sent_later`, record each commit's command instead of sending it: the
        caller sends them itself, in order, on a connection of its own (the co-located
        router's step on the event loop, xumpweb/runtime.py), then says how that went
        (`deferred_failed`). The engine and the store take a deferred commit as made."""
        self.deferred = []

    def sent_later(self) -> list[tuple]:
        """The commits recorded since `defer`, oldest first: EVALSHA commands of the
        store's apply script (`apply_source` for EVAL when the server lacks it)."""
        commits, self.deferred = self.deferred or [], None
        return commits

    @property
    def apply_source(self) -> str:
        return self._apply_source

    def deferred_failed(self, error: BaseException) -> StoreError:
        """A deferred commit failed (`error`: Redis's refusal or a lost connection):
        the StoreError it means (LeaseLost, a NotWritten, when the lease was lost), and
        from now on every commit raises NotWritten, since memory holds what Redis may
        not: the owner drops the engine and loads the store again."""
        failure = self._commit_failure(error) if isinstance(error, redis.RedisError) else (
            error if isinstance(error, StoreError) else StoreError(str(error)))  # fmt: skip
        self.broken = NotWritten(
            f"a commit to Redis store {self.name!r} failed ({failure}): this router loads "
            "the store again before it writes"
        )
        return failure

    def _send(self, commands: list[tuple]) -> None:
        gap, self._gap = self._gap, None
        if self.broken is not None:
            raise self.broken
        words: list[Any] = [self.lease_token, self.lease_ms, self._fence, *(gap or ("", "", ""))]
        for command in _chunked(commands):
            words.append(len(command))
            words.extend(command)
        if self.deferred is not None:
            self.deferred.append((*self._apply_head, *words))
            return
        try:
            self._run_apply(words)
        except redis.RedisError as error:
            raise self._commit_failure(error) from None

    def _commit_failure(self, error: redis.RedisError) -> StoreError:
        if "XUMP_LEASE_LOST" in str(error):
            return LeaseLost(
                f"this process lost the lease on Redis store {self.name!r} (it expired and "
                "another process took over); its changes were not written"
            )
        if "XUMP_GAP_MOVED" in str(error):
            return GapMoved(
                f"a commit to Redis store {self.name!r} was refused: the list it expected "
                "had changed; nothing was written"
            )
        return StoreError(self._failure("writing to", error))

    def _run_apply(self, words: list[Any]) -> None:
        """EVALSHA of _APPLY packed by hiredis in one call: redis-py's generic path looks
        at each of the ~500 words of a 100-message operation in Python first (about a
        microsecond a message). A server that lost its scripts (restarted) gets it again."""
        packed = pack_command(self._apply_head + tuple(words))
        # on a cluster: the pool of the node that serves the store's slot
        node = node_client(self.client, self._apply_head[3])
        pool = node.connection_pool
        connection, own = self._checkout(pool)
        try:
            try:
                connection.send_packed_command((packed,))
                connection.read_response()
            except redis.exceptions.NoScriptError:
                node.script_load(self._apply_source)  # there only: another may be down
                connection.send_packed_command((packed,))
                connection.read_response()
        except (redis.ConnectionError, redis.TimeoutError):
            connection.disconnect()  # not reused half-read
            raise
        except REDIRECTIONS:  # the slot moved (resharding): nothing was applied
            self._run_redirected(words)
        finally:
            self._checkin(pool, connection, own)

    def read_packed(self, commands: list[tuple]) -> list[Any]:
        """The answers to `commands` (reads of keys in the store's slot), sent in one round
        trip packed by hiredis, as _run_apply sends: a redis-py pipeline's Python costs more
        (the pair of reads a router makes at every step: 145 -> 96 us of CPU, median of
        ten interleaved runs on a busy 2-core machine). RedisError
        as a pipeline raises it, after the same retries; a slot that moved is read through
        the cluster client."""
        packed = [pack_command(command) for command in commands]
        node = node_client(self.client, self._apply_head[3])
        pool = node.connection_pool
        connection, own = self._checkout(pool)

        def send() -> list[Any]:
            connection.send_packed_command(packed)
            return [connection.read_response() for _ in packed]

        try:
            # retried on a lost connection as a pipeline's reads are (the client's policy)
            answers = connection.retry.call_with_retry(send, lambda _: connection.disconnect())
        except REDIRECTIONS:
            connection.disconnect()  # the other answers are not read: never reused
            pipe = self.client.pipeline(transaction=False)
            for command in commands:
                pipe.execute_command(*command)
            return pipe.execute()
        except BaseException:
            connection.disconnect()  # not reused half-read
            raise
        finally:
            self._checkin(pool, connection, own)
        return answers

    def _checkout(self, pool: Any) -> tuple[Any, bool]:
        """A connection to `pool`'s server for one round trip, and whether it is the
        store's own: the router's reads and commits, one thread's at a time, go on one
        connection kept out of the pool (redis-py's checkout and return of a pooled
        connection, with its health check and observability events, cost about as much
        CPU as the round trip itself). Another thread meanwhile, or another process after
        a fork, takes one from the pool."""
        if not self._own_lock.acquire(blocking=False):
            return pool.get_connection(), False
        own = self._own
        if own is None or own[0] is not pool or own[2] != os.getpid():
            if own is not None and own[2] == os.getpid():
                own[1].disconnect()
            own = self._own = (pool, pool.make_connection(), os.getpid())
        return own[1], True

    def _checkin(self, pool: Any, connection: Any, own: bool) -> None:
        if own:
            self._own_lock.release()
        else:
            pool.release(connection)

    def _run_redirected(self, words: list[Any]) -> None:
        """_APPLY through the cluster client's generic path, which follows the cluster to
        the node that serves the store's slot now."""
        command = (*self._apply_head, *words)
        try:
            self.client.execute_command(*command)
        except redis.exceptions.NoScriptError:
            self.client.script_load(self._apply_source)
            self.client.execute_command(*command)

    def _failure(self, doing: str, error: Exception) -> str:
        """What went wrong talking to the server, where (password masked), what to check."""
        return (
            f"{doing} the Redis store {self.name!r} at {mask_password(self.url or '')} failed: "
            f"{error}; check that redis-server runs and answers there (host, port, password, "
            "db in the URL) and has memory and disk left"
        )

    # -- the lease: one process routes a store's queues at a time ------------------------
    def acquire_lease(self, owner: str, lease_ms: int = 5000) -> bool:
        """Take the store's lease if it is free. Call before opening any queue (queues load
        their state as the last owner left it); renew with `renew_lease()` more often than
        `lease_ms`. Every write then checks the token, so a process whose lease expired can
        never write over its successor's."""
        try:
            token = self._acquire(
                keys=[self._key("lease"), self._key("fence")], args=[owner, lease_ms]
            )
            if not token:
                return False
            # the previous owner gave out keys until it stopped: continue above them
            last_key = int(self.client.get(self._key("lastkey")) or 0)
        except redis.RedisError as error:
            raise StoreError(self._failure("taking the lease of", error)) from None
        self.lease_token = token.decode()
        self._fence = self.lease_token.rsplit("#", 1)[1]
        self.lease_ms = lease_ms
        self._last_key = last_key
        return True

    def renew_lease(self) -> None:
        """Extend the lease; StoreError if it was lost."""
        self._commands.append(("PEXPIRE", self._key("lease"), self.lease_ms))
        self.flush()

    def release_lease(self) -> None:
        if self.lease_token:
            if self.broken is not None:  # memory is not written: only the lease goes
                self._drop_lease()
            else:
                self._commands.append(("DEL", self._key("lease")))
                self.flush()
            self.lease_token = self._fence = ""

    def _drop_lease(self) -> None:
        """Delete the lease if it is still this process's (a store whose commits are refused,
        `broken`: what memory holds is dropped with it, so another router may start at
        once from what Redis holds)."""
        key = self._key("lease")
        try:
            node_client(self.client, key).eval(_DROP_LEASE, 1, key, self.lease_token)
        except redis.RedisError as error:
            raise StoreError(self._failure("releasing the lease of", error)) from None

    # -- loading -------------------------------------------------------------------------
    def load_queue(self, state: JournaledQueueState) -> None:
        list_key, entries_key, meta_key, credit_key = state.keys  # type: ignore[attr-defined]
        client = self.client
        try:
            meta = client.hgetall(meta_key)
            credits = client.hgetall(credit_key)
            stored = client.hgetall(entries_key)
            listed: list[bytes] = []
            while True:
                chunk = client.lrange(list_key, len(listed), len(listed) + _LOAD_CHUNK - 1)
                listed.extend(chunk)
                if len(chunk) < _LOAD_CHUNK:
                    break
            taken = [(int(key), *_decoded(raw)) for key, raw in stored.items()]
            waiting = [_decoded(raw) for raw in listed]
            wanted = sorted(
                {fields[2] for _, fields, body in taken if body is None}
                | {fields[2] for fields, body in waiting if body is None}
            )
            bodies: dict[str, bytes] = {}
            for at in range(0, len(wanted), _LOAD_CHUNK):
                mids = wanted[at : at + _LOAD_CHUNK]
                found = client.hmget(self._key("bodies"), mids)
                bodies.update((mid, value) for mid, value in zip(mids, found, strict=True) if value)
        except redis.RedisError as error:
            raise StoreError(self._failure(f"reading queue {state.name!r} from", error)) from None
        if meta:
            values = {key.decode(): int(value) for key, value in meta.items()}
            state.restore_meta(
                values.get("last_seq", 0), 0, 0, {name: values.get(name, 0) for name in COUNTERS}
            )
            self._registered.add(state.name)
        for selector_id, credit in credits.items():
            state.restore_credit(int(selector_id), int(credit))
        foreign = self._foreign
        for fields, body in waiting:
            entry = _entry(fields, _body(body, fields, bodies))
            key = self.next_key()
            entry.key = key if body is None else -key
            foreign.add(entry.message.mid)
            state.restore(entry, "u", None, None)
        # history in seq order; outstanding in the order taken (seq, then key)
        taken.sort(key=lambda item: (item[1][0], int(item[1][1]), abs(item[0])))
        for key, fields, body in taken:
            entry = _entry(fields, _body(body, fields, bodies))
            entry.key = key
            foreign.add(entry.message.mid)
            selector_id = int(fields[7]) if fields[7] else None
            state.restore(entry, fields[0], selector_id, fields[8] or None)

    def close(self) -> None:
        with self._own_lock:
            own, self._own = self._own, None
            if own is not None and own[2] == os.getpid():
                own[1].disconnect()
        self.client.close()


def _unstored(state: RedisQueueState) -> list[Entry]:
    """The entries of `state`'s unprocessed section not in its list yet: given back at the
    head, then appended (all of them when the list is written again)."""
    entries = state._unprocessed
    if state._rewrite:
        return [entry for entry in entries if entry.key is None]
    front = list(islice(entries, state._front))
    tail = list(islice(reversed(entries), state._tail))
    tail.reverse()
    return front + tail


# json.dumps with separators builds a new encoder per call; one shared encoder is faster
_encode = json.JSONEncoder(separators=(",", ":")).encode


def _headers_json(headers: Any) -> str:
    """A record's headers field: compact JSON, read back with json.loads. orjson (several
    times faster: every entry the router writes has one) unless it cannot write them as
    json does: integers beyond 64 bits (it refuses them) and NaN or infinities (it writes
    null, which no header value is: a text with "null" anywhere goes to json too)."""
    try:
        text = orjson.dumps(dict(headers))
    except TypeError:
        return _encode(dict(headers))
    if b"null" in text:
        return _encode(dict(headers))
    return text.decode()


def _record(entry: Entry, section: str, selector_id: int | None, tag: str | None) -> str:
    """An entry's record without its body (see the module docstring for the fields)."""
    message = entry.message
    address = message.address
    return_address = message.return_address
    headers = message.headers
    origin = entry.origin
    downstream = entry.downstream
    timestamp = message.timestamp
    fields = (
        section,
        str(entry.seq),
        message.mid or "",
        address,
        "" if timestamp is None else repr(timestamp),
        _headers_json(headers) if headers else "",
        "" if return_address is None else "=" + return_address,
        "" if selector_id is None else str(selector_id),
        tag or "",
        "" if origin is None else f"{origin[0]}{_SUB}{origin[1]}{_SUB}{origin[2]}",
        str(entry.delivery_count) if entry.delivery_count else "",
        repr(entry.taken_at) if entry.taken_at else "",
        "1" if entry.replay else "",
        "" if downstream is None else f"{downstream[0]}{_SUB}{downstream[1]}",
        "" if message.ttl is None else repr(message.ttl),
        "" if message.delay is None else repr(message.delay),
        repr(entry.due) if entry.due else "",
    )
    if (
        address.isprintable()
        and (return_address is None or return_address.isprintable())
        and (origin is None or origin[0].isprintable())  # another shard's: a control char
    ):
        return _SEP.join(fields).rstrip(_SEP)
    return _encode(fields)  # JSON escapes the control characters the separators need


def _decoded(raw: bytes) -> tuple[list[str], bytes | None]:
    """A stored record's fields and its inline body (None when held by reference)."""
    head, newline, body = raw.partition(b"\n")
    text = head.decode()
    fields = json.loads(text) if text.startswith("[") else text.split(_SEP)
    fields.extend([""] * (_FIELDS - len(fields)))
    return fields, body if newline else None


def _body(inline: bytes | None, fields: list[str], bodies: dict[str, bytes]) -> bytes:
    if inline is not None:
        return inline
    stored = bodies.get(fields[2], b"0:")
    return stored[stored.index(b":") + 1 :]


def _entry(fields: list[str], body: bytes) -> Entry:
    """An Entry from its stored record's fields."""
    (
        _section, seq, mid, address, timestamp, headers, return_address, _selector_id, _tag,
        origin, delivery_count, taken_at, replay, downstream, ttl, delay, due,
    ) = fields  # fmt: skip
    message = Message(
        address,
        MappingProxyType(json.loads(headers)) if headers else EMPTY_HEADERS,
        body,
        return_address[1:] if return_address else None,
        mid or None,
        None,
        float(timestamp) if timestamp else None,
        None,
        float(ttl) if ttl else None,
        float(delay) if delay else None,
    )
    from_origin = None
    if origin:
        queue, selector_id, tag = origin.split(_SUB)
        from_origin = (queue, int(selector_id), tag)
    entry = Entry(int(seq), message, from_origin)
    entry.delivery_count = int(delivery_count or 0)
    entry.replay = replay == "1"
    entry.taken_at = float(taken_at) if taken_at else 0.0
    entry.due = float(due) if due else 0.0
    if downstream:
        queue, downstream_seq = downstream.split(_SUB)
        entry.downstream = (queue, int(downstream_seq))
    return entry


_SPLITTABLE = {"HSET": 2, "HDEL": 1, "RPUSH": 1, "LPUSH": 1}  # variadic: words per item
_MOST_WORDS = 1000  # Lua's unpack() has a limit of about 8,000 values


def _chunked(commands: Iterable[tuple]) -> list[tuple]:
    """Long variadic commands split into several, so the apply script can unpack each (an
    LPUSH of items given in reverse still leaves them in order, chunk after chunk)."""
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
