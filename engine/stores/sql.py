"""The SQL store: queue state in SQLite (default) or PostgreSQL, one row per message entry.

Theory of operation: each queue's state is held in memory exactly as the RAM store holds it
(this module subclasses ram.py), and every change is also written to the database. Writes
are collected during one engine operation and applied in one transaction at `commit()`
(the engine calls `begin`/`commit` around every publish, confirm, ...), so an operation is
durable as a whole or not at all. Opening a queue loads its state back, so a new process on
the same database finds unprocessed messages, history, outstanding deliveries, credit and
counters where the last one left them. One process owns a database's queues at a time; the
Redis store is the one shared by many processes.

Schema (created on first use):

    xump_queue     (store, queue) -> last_seq, head, tail, one column per counter
    xump_entry     id -> store, queue, section ('u' unprocessed, 'h' history,
                   'o' outstanding), position (FIFO order of 'u'), seq, selector_id, tag,
                   mid, address, headers (JSON), return_address, timestamp,
                   origin_queue, origin_selector, origin_tag, delivery_count, replay,
                   downstream_queue, downstream_seq
    xump_body      mid -> body, refs   (a body is stored once; refs counts its entries and
                   the row goes when the last entry does)
    xump_selector  (store, queue, selector_id) -> credit

An entry moving between sections is a delete and an insert of its row.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from engine.errors import StoreError
from engine.message import Message
from engine.stores.base import COUNTERS, Entry, SelectorState
from engine.stores.ram import RamQueueState, RamStore

_ENTRY_COLUMNS = (
    "id, store, queue, section, position, seq, selector_id, tag, mid, address, headers, "
    "return_address, timestamp, origin_queue, origin_selector, origin_tag, delivery_count, "
    "replay, downstream_queue, downstream_seq"
)

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS xump_queue (
        store TEXT NOT NULL, queue TEXT NOT NULL, last_seq BIGINT NOT NULL DEFAULT 0,
        head BIGINT NOT NULL DEFAULT 0, tail BIGINT NOT NULL DEFAULT 0,
        {counters},
        PRIMARY KEY (store, queue))""",
    """CREATE TABLE IF NOT EXISTS xump_entry (
        id BIGINT PRIMARY KEY, store TEXT NOT NULL, queue TEXT NOT NULL,
        section CHAR(1) NOT NULL, position BIGINT NOT NULL, seq BIGINT NOT NULL,
        selector_id BIGINT, tag TEXT, mid TEXT NOT NULL, address TEXT NOT NULL,
        headers TEXT NOT NULL, return_address TEXT, timestamp DOUBLE PRECISION,
        origin_queue TEXT, origin_selector BIGINT, origin_tag TEXT,
        delivery_count BIGINT NOT NULL, replay BOOLEAN NOT NULL,
        downstream_queue TEXT, downstream_seq BIGINT)""",
    "CREATE INDEX IF NOT EXISTS xump_entry_queue ON xump_entry (store, queue)",
    "CREATE INDEX IF NOT EXISTS xump_entry_mid ON xump_entry (mid)",
    """CREATE TABLE IF NOT EXISTS xump_body (
        mid TEXT PRIMARY KEY, body {blob} NOT NULL, refs BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS xump_selector (
        store TEXT NOT NULL, queue TEXT NOT NULL, selector_id BIGINT NOT NULL,
        credit BIGINT NOT NULL, PRIMARY KEY (store, queue, selector_id))""",
]


def mask_password(url: str) -> str:
    """The URL with its password replaced by ***, for error messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


class _Database:
    """One connection and the statements of the current operation."""

    def __init__(self, url: str) -> None:
        self.url = url
        parts = urlsplit(url)
        try:
            if parts.scheme == "sqlite":
                self.dialect = "sqlite"
                path = url[len("sqlite:///") :] if url.startswith("sqlite:///") else parts.path
                if path and path != ":memory:":
                    Path(path).parent.mkdir(parents=True, exist_ok=True)
                self.connection: Any = sqlite3.connect(
                    path or ":memory:", isolation_level=None, check_same_thread=False
                )
                self.connection.execute("PRAGMA journal_mode=WAL")
                # FULL: a commit that returned survives power loss, not just a crash
                self.connection.execute("PRAGMA synchronous=FULL")
                self.placeholder = "?"
            elif parts.scheme in ("postgresql", "postgres"):
                import psycopg

                self.dialect = "postgresql"
                self.connection = psycopg.connect(url, autocommit=True)
                self.placeholder = "%s"
            else:
                raise StoreError(
                    f"SQL store URL {mask_password(url)!r} must start with sqlite:/// or "
                    "postgresql://"
                )
            self._create_schema()
        except StoreError:
            raise
        except Exception as error:
            raise StoreError(
                f"cannot open the SQL store at {mask_password(url)}: {error}; check that the "
                "database server runs, the database exists and the user may create tables"
            ) from None
        self.pending: list[tuple[str, tuple]] = []

    def _create_schema(self) -> None:
        counters = ", ".join(f"{name} BIGINT NOT NULL DEFAULT 0" for name in COUNTERS)
        blob = "BLOB" if self.dialect == "sqlite" else "BYTEA"
        for statement in _SCHEMA:
            self.execute(statement.format(counters=counters, blob=blob))

    def sql(self, statement: str) -> str:
        return statement if self.placeholder == "?" else statement.replace("?", "%s")

    def execute(self, statement: str, params: tuple = ()) -> Any:
        return self.connection.execute(self.sql(statement), params)

    def fetchall(self, statement: str, params: tuple = ()) -> list[tuple]:
        return list(self.execute(statement, params).fetchall())

    def later(self, statement: str, params: tuple) -> None:
        self.pending.append((statement, params))

    def flush(self) -> None:
        if not self.pending:
            return
        pending, self.pending = self.pending, []
        try:
            if self.dialect == "postgresql":
                # one round trip for the whole operation instead of one per statement
                with self.connection.pipeline(), self.connection.transaction():
                    cursor = self.connection.cursor()
                    for statement, params in pending:
                        cursor.execute(self.sql(statement), params)
                return
            self.execute("BEGIN")
            cursor = self.connection.cursor()
            for statement, params in pending:
                cursor.execute(self.sql(statement), params)
            self.execute("COMMIT")
        except Exception as error:
            if self.dialect == "sqlite":
                try:
                    self.execute("ROLLBACK")
                except Exception:  # the original error is the one to report
                    pass
            raise StoreError(
                f"writing to the SQL store at {mask_password(self.url)} failed: {error}"
            ) from None


class _Counters(dict):
    """The queue's counters; a change marks the queue for writing at commit."""

    __slots__ = ("_queue",)

    def __init__(self, queue: SqlQueueState, values: dict[str, int]) -> None:
        super().__init__(values)
        self._queue = queue

    def __setitem__(self, name: str, value: int) -> None:
        super().__setitem__(name, value)
        self._queue.touch()


class _Outstanding(dict):
    """tag -> Entry for one selector, written through to xump_entry (section 'o')."""

    __slots__ = ("_queue", "_selector_id")

    def __init__(self, queue: SqlQueueState, selector_id: int) -> None:
        super().__init__()
        self._queue = queue
        self._selector_id = selector_id

    def __setitem__(self, tag: str, entry: Entry) -> None:
        super().__setitem__(tag, entry)
        self._queue.write_entry(entry, "o", 0, self._selector_id, tag)

    def pop(self, tag: str, *default: Any) -> Any:
        if tag in self:
            entry = super().pop(tag)
            self._queue.delete_entry(entry)
            return entry
        if default:
            return default[0]
        raise KeyError(tag)

    def clear(self) -> None:
        for entry in self.values():
            self._queue.delete_entry(entry)
        super().clear()


class SqlSelectorState(SelectorState):
    __slots__ = ("_queue", "_selector_id")

    def __init__(self, queue: SqlQueueState, selector_id: int, credit: int) -> None:
        self._queue = queue
        self._selector_id = selector_id
        SelectorState.credit.__set__(self, credit)  # type: ignore[attr-defined]
        self.outstanding = _Outstanding(queue, selector_id)

    @property  # type: ignore[override]
    def credit(self) -> int:
        return SelectorState.credit.__get__(self)  # type: ignore[attr-defined]

    @credit.setter
    def credit(self, value: int) -> None:
        SelectorState.credit.__set__(self, value)  # type: ignore[attr-defined]
        self._queue.store.db.later(
            "INSERT INTO xump_selector (store, queue, selector_id, credit) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (store, queue, selector_id) DO UPDATE SET credit = excluded.credit",
            (self._queue.store.name, self._queue.name, self._selector_id, value),
        )


class SqlQueueState(RamQueueState):
    """The RAM store's state plus a write of every change (see the module docstring)."""

    __slots__ = ("_dirty", "_head", "_loading", "_tail", "store")

    def __init__(self, store: SqlStore, name: str) -> None:
        super().__init__(name)
        self.store = store
        self._head = 0  # position of the front of the unprocessed section
        self._tail = 0
        self._dirty = False
        self._loading = True
        self.counters = _Counters(self, self.counters)
        self._load()
        self._loading = False

    # -- writing -----------------------------------------------------------------------
    def touch(self) -> None:
        if not self._loading and not self._dirty:
            self._dirty = True
            self.store.dirty.append(self)

    def save_row(self) -> None:
        self._dirty = False
        columns = ", ".join(COUNTERS)
        marks = ", ".join("?" for _ in COUNTERS)
        updates = ", ".join(f"{name} = excluded.{name}" for name in COUNTERS)
        self.store.db.later(
            f"INSERT INTO xump_queue (store, queue, last_seq, head, tail, {columns}) "
            f"VALUES (?, ?, ?, ?, ?, {marks}) ON CONFLICT (store, queue) DO UPDATE SET "
            f"last_seq = excluded.last_seq, head = excluded.head, tail = excluded.tail, "
            f"{updates}",
            (
                self.store.name,
                self.name,
                self._last_seq,
                self._head,
                self._tail,
                *(self.counters[name] for name in COUNTERS),
            ),
        )

    def write_entry(
        self,
        entry: Entry,
        section: str,
        position: int,
        selector_id: int | None = None,
        tag: str | None = None,
    ) -> None:
        if self._loading:
            return
        if entry.key is not None:
            self.delete_entry(entry)
        entry.key = self.store.next_key()
        message = entry.message
        origin = entry.origin or (None, None, None)
        downstream = entry.downstream or (None, None)
        self.store.db.later(
            f"INSERT INTO xump_entry ({_ENTRY_COLUMNS}) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                entry.key,
                self.store.name,
                self.name,
                section,
                position,
                entry.seq,
                selector_id,
                tag,
                message.mid,
                message.address,
                json.dumps(dict(message.headers)),
                message.return_address,
                message.timestamp,
                *origin,
                entry.delivery_count,
                entry.replay,
                *downstream,
            ),
        )
        self.store.body_added(message)

    def delete_entry(self, entry: Entry) -> None:
        if entry.key is None or self._loading:
            return
        self.store.db.later("DELETE FROM xump_entry WHERE id = ?", (entry.key,))
        entry.key = None
        self.store.body_released(entry.message)

    # -- the RAM state, written through ----------------------------------------------------
    def next_seq(self) -> int:
        seq = super().next_seq()
        self.touch()
        return seq

    def append(self, entry: Entry) -> None:
        super().append(entry)
        self._tail += 1
        self.touch()
        self.write_entry(entry, "u", self._tail)

    def pop_head(self) -> Entry:
        entry = super().pop_head()
        self.delete_entry(entry)
        return entry

    def push_front(self, entries: list[Entry]) -> None:
        super().push_front(entries)
        for entry in reversed(entries):
            self._head -= 1
            self.write_entry(entry, "u", self._head)
        self.touch()

    def remove(self, seq: int) -> bool:
        for entry in self._unprocessed:
            if entry.seq == seq:
                self._unprocessed.remove(entry)
                self.delete_entry(entry)
                return True
        return False

    def add_history(self, entry: Entry, keep: int) -> None:
        if keep > 0:
            self.write_entry(entry, "h", 0)
            super().add_history(entry, keep)

    def forget(self, entries: list[Entry]) -> None:
        for entry in entries:
            self.delete_entry(entry)

    def selector(self, selector_id: int) -> SelectorState:
        state = self._selectors.get(selector_id)
        if state is None:
            state = self._selectors[selector_id] = SqlSelectorState(self, selector_id, -1)
            if not self._loading:
                state.credit = -1
        return state

    def drop_selector(self, selector_id: int) -> None:
        state = self._selectors.pop(selector_id, None)
        if state is not None:
            state.outstanding.clear()
            self.store.db.later(
                "DELETE FROM xump_selector WHERE store = ? AND queue = ? AND selector_id = ?",
                (self.store.name, self.name, selector_id),
            )

    # -- loading -----------------------------------------------------------------------
    def _load(self) -> None:
        db, store = self.store.db, self.store.name
        row = db.fetchall(
            f"SELECT last_seq, head, tail, {', '.join(COUNTERS)} FROM xump_queue "
            "WHERE store = ? AND queue = ?",
            (store, self.name),
        )
        if row:
            self._last_seq, self._head, self._tail, *counts = row[0]
            self.counters.update(zip(COUNTERS, counts, strict=True))
        for selector_id, credit in db.fetchall(
            "SELECT selector_id, credit FROM xump_selector WHERE store = ? AND queue = ?",
            (store, self.name),
        ):
            self._selectors[selector_id] = SqlSelectorState(self, selector_id, credit)
        rows = db.fetchall(
            f"SELECT {_ENTRY_COLUMNS} FROM xump_entry WHERE store = ? AND queue = ? "
            "ORDER BY section, position, seq, id",
            (store, self.name),
        )
        for row in rows:
            entry = self.store.entry_from_row(row)
            section, selector_id, tag = row[3], row[6], row[7]
            if section == "u":
                self._unprocessed.append(entry)
            elif section == "h":
                self._hist_seqs.append(entry.seq)
                self._hist_entries.append(entry)
            else:
                dict.__setitem__(self.selector(selector_id).outstanding, tag, entry)


class SqlStore(RamStore):
    kind = "sql"
    transactional = True

    def __init__(self, name: str, url: str | None = None) -> None:
        super().__init__(name, url)
        if not url:
            raise StoreError("a SQL store needs a URL: sqlite:///path or postgresql://...")
        self.db = _Database(url)
        self.dirty: list[SqlQueueState] = []
        self._refs_changed: dict[str, tuple[int, bytes]] = {}
        found = self.db.fetchall("SELECT MAX(id) FROM xump_entry")
        self._last_key = found[0][0] or 0
        self._bodies: dict[str, bytes] = {}

    def next_key(self) -> int:
        self._last_key += 1
        return self._last_key

    def open_queue(self, name: str) -> SqlQueueState:  # type: ignore[override]
        state = self._queues.get(name)
        if state is None:
            state = self._queues[name] = SqlQueueState(self, name)  # type: ignore[assignment]
            self._bodies.clear()  # only shares bodies between the entries of one load
        return state  # type: ignore[return-value]

    def drop_queue(self, name: str) -> None:
        state = self._queues.get(name)
        if state is not None:
            held = [*state.unprocessed(state.depth()), *state.history_oldest(state.history_size())]
            for selector in state._selectors.values():
                held.extend(selector.outstanding.values())
            for entry in held:
                if entry.key is not None:
                    self.body_released(entry.message)
        super().drop_queue(name)
        self.db.later("DELETE FROM xump_entry WHERE store = ? AND queue = ?", (self.name, name))
        self.db.later("DELETE FROM xump_selector WHERE store = ? AND queue = ?", (self.name, name))
        self.db.later("DELETE FROM xump_queue WHERE store = ? AND queue = ?", (self.name, name))

    # -- bodies ------------------------------------------------------------------------
    def body_added(self, message: Message) -> None:
        refs, body = self._refs_changed.get(message.mid, (0, message.body))  # type: ignore
        self._refs_changed[message.mid] = (refs + 1, body)  # type: ignore[index]

    def body_released(self, message: Message) -> None:
        refs, body = self._refs_changed.get(message.mid, (0, message.body))  # type: ignore
        self._refs_changed[message.mid] = (refs - 1, body)  # type: ignore[index]

    def _write_bodies(self) -> None:
        for mid, (delta, body) in self._refs_changed.items():
            if delta > 0:
                self.db.later(
                    "INSERT INTO xump_body (mid, body, refs) VALUES (?, ?, ?) ON CONFLICT (mid) "
                    "DO UPDATE SET refs = xump_body.refs + excluded.refs",
                    (mid, body, delta),
                )
            elif delta < 0:
                self.db.later("UPDATE xump_body SET refs = refs + ? WHERE mid = ?", (delta, mid))
                self.db.later("DELETE FROM xump_body WHERE mid = ? AND refs <= 0", (mid,))
        self._refs_changed.clear()

    def entry_from_row(self, row: tuple) -> Entry:
        (
            key,
            _store,
            _queue,
            _section,
            _position,
            seq,
            _selector,
            _tag,
            mid,
            address,
            headers,
            return_address,
            timestamp,
            origin_queue,
            origin_selector,
            origin_tag,
            delivery_count,
            replay,
            downstream_queue,
            downstream_seq,
        ) = row
        body = self._bodies.get(mid)
        if body is None:
            found = self.db.fetchall("SELECT body FROM xump_body WHERE mid = ?", (mid,))
            body = bytes(found[0][0]) if found else b""
            self._bodies[mid] = body
        message = Message(
            address,
            MappingProxyType(json.loads(headers)),
            body,
            return_address,
            mid,
            None,
            timestamp,
        )
        origin = (origin_queue, origin_selector, origin_tag) if origin_queue else None
        entry = Entry(seq, message, origin)
        entry.key = key
        entry.delivery_count = delivery_count
        entry.replay = bool(replay)
        if downstream_queue is not None:
            entry.downstream = (downstream_queue, downstream_seq)
        return entry

    # -- transactions --------------------------------------------------------------------
    def begin(self) -> None:
        self.db.pending.clear()

    def commit(self) -> None:
        for state in self.dirty:
            state.save_row()
        self.dirty.clear()
        self._write_bodies()
        self.db.flush()

    def rollback(self) -> None:
        """The operation raised. The engine does not undo what it changed in memory, so the
        database is kept in step with memory: what was done is written, as at commit."""
        self.commit()

    def close(self) -> None:
        self.db.connection.close()
