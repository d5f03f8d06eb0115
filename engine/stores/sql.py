"""The SQL store: queue state in SQLite (default) or PostgreSQL, one row per message entry.

Theory of operation: a journaled store (journal.py): queue state in memory as the RAM store
holds it, every change recorded as a SQL statement, the statements of one engine operation
applied in one transaction at `commit()` (pipelined on PostgreSQL: one round trip).

Schema (created on first use):

    xump_queue     (store, queue) -> last_seq, head, tail, one column per counter
    xump_entry     (store, id) -> queue, section ('u' unprocessed, 'h' history,
                   'o' outstanding), position (FIFO order of 'u'), seq, selector_id, tag,
                   mid, address, headers (JSON), return_address, timestamp,
                   origin_queue, origin_selector, origin_tag, delivery_count, replay,
                   downstream_queue, downstream_seq, taken_at
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
from engine.stores.base import COUNTERS, Entry
from engine.stores.journal import JournaledQueueState, JournaledStore

_ENTRY_COLUMNS = (
    "id, store, queue, section, position, seq, selector_id, tag, mid, address, headers, "
    "return_address, timestamp, origin_queue, origin_selector, origin_tag, delivery_count, "
    "replay, downstream_queue, downstream_seq, taken_at"
)

_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS xump_queue (
        store TEXT NOT NULL, queue TEXT NOT NULL, last_seq BIGINT NOT NULL DEFAULT 0,
        head BIGINT NOT NULL DEFAULT 0, tail BIGINT NOT NULL DEFAULT 0,
        {counters},
        PRIMARY KEY (store, queue))""",
    """CREATE TABLE IF NOT EXISTS xump_entry (
        id BIGINT NOT NULL, store TEXT NOT NULL, queue TEXT NOT NULL,
        section CHAR(1) NOT NULL, position BIGINT NOT NULL, seq BIGINT NOT NULL,
        selector_id BIGINT, tag TEXT, mid TEXT NOT NULL, address TEXT NOT NULL,
        headers TEXT NOT NULL, return_address TEXT, timestamp DOUBLE PRECISION,
        origin_queue TEXT, origin_selector BIGINT, origin_tag TEXT,
        delivery_count BIGINT NOT NULL, replay BOOLEAN NOT NULL,
        downstream_queue TEXT, downstream_seq BIGINT,
        taken_at DOUBLE PRECISION NOT NULL DEFAULT 0,
        PRIMARY KEY (store, id))""",
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


class SqlStore(JournaledStore):
    kind = "sql"

    def __init__(self, name: str, url: str | None = None) -> None:
        super().__init__(name, url)
        if not url:
            raise StoreError("a SQL store needs a URL: sqlite:///path or postgresql://...")
        self.db = _Database(url)
        # entry ids are per store: stores sharing a database each number their own
        found = self.db.fetchall("SELECT MAX(id) FROM xump_entry WHERE store = ?", (name,))
        self._last_key = found[0][0] or 0
        self._bodies: dict[str, bytes] = {}

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
        origin = entry.origin or (None, None, None)
        downstream = entry.downstream or (None, None)
        self.db.later(
            f"INSERT INTO xump_entry ({_ENTRY_COLUMNS}) VALUES "
            "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                entry.key, self.name, state.name, section, position, entry.seq,
                selector_id, tag, message.mid, message.address,
                json.dumps(dict(message.headers)), message.return_address, message.timestamp,
                *origin, entry.delivery_count, entry.replay, *downstream, entry.taken_at,
            ),
        )  # fmt: skip

    def record_deletion(self, state: JournaledQueueState, entry: Entry) -> None:
        self.db.later("DELETE FROM xump_entry WHERE store = ? AND id = ?", (self.name, entry.key))

    def record_meta(self, state: JournaledQueueState) -> None:
        columns = ", ".join(COUNTERS)
        marks = ", ".join("?" for _ in COUNTERS)
        updates = ", ".join(f"{name} = excluded.{name}" for name in COUNTERS)
        self.db.later(
            f"INSERT INTO xump_queue (store, queue, last_seq, head, tail, {columns}) "
            f"VALUES (?, ?, ?, ?, ?, {marks}) ON CONFLICT (store, queue) DO UPDATE SET "
            f"last_seq = excluded.last_seq, head = excluded.head, tail = excluded.tail, "
            f"{updates}",
            (
                self.name,
                state.name,
                state.last_seq(),
                state.head_position,
                state.tail_position,
                *(state.counters[name] for name in COUNTERS),
            ),
        )

    def record_credit(self, state: JournaledQueueState, selector_id: int, credit: int) -> None:
        self.db.later(
            "INSERT INTO xump_selector (store, queue, selector_id, credit) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (store, queue, selector_id) DO UPDATE SET credit = excluded.credit",
            (self.name, state.name, selector_id, credit),
        )

    def record_selector_dropped(self, state: JournaledQueueState, selector_id: int) -> None:
        self.db.later(
            "DELETE FROM xump_selector WHERE store = ? AND queue = ? AND selector_id = ?",
            (self.name, state.name, selector_id),
        )

    def record_queue_dropped(self, state: JournaledQueueState) -> None:
        for table in ("xump_entry", "xump_selector", "xump_queue"):
            self.db.later(f"DELETE FROM {table} WHERE store = ? AND queue = ?",
                          (self.name, state.name))  # fmt: skip

    def discard_records(self) -> None:
        self.db.pending.clear()

    def flush(self, body_changes: dict[str | None, tuple[int, bytes]]) -> None:
        for mid, (change, body) in body_changes.items():
            if change > 0:
                self.db.later(
                    "INSERT INTO xump_body (mid, body, refs) VALUES (?, ?, ?) ON CONFLICT (mid) "
                    "DO UPDATE SET refs = xump_body.refs + excluded.refs",
                    (mid, body, change),
                )
            elif change < 0:
                self.db.later("UPDATE xump_body SET refs = refs + ? WHERE mid = ?", (change, mid))
                self.db.later("DELETE FROM xump_body WHERE mid = ? AND refs <= 0", (mid,))
        self.db.flush()

    # -- loading -------------------------------------------------------------------------
    def load_queue(self, state: JournaledQueueState) -> None:
        row = self.db.fetchall(
            f"SELECT last_seq, head, tail, {', '.join(COUNTERS)} FROM xump_queue "
            "WHERE store = ? AND queue = ?",
            (self.name, state.name),
        )
        if row:
            last_seq, head, tail, *counts = row[0]
            state.restore_meta(last_seq, head, tail, dict(zip(COUNTERS, counts, strict=True)))
        for selector_id, credit in self.db.fetchall(
            "SELECT selector_id, credit FROM xump_selector WHERE store = ? AND queue = ?",
            (self.name, state.name),
        ):
            state.restore_credit(selector_id, credit)
        rows = self.db.fetchall(
            f"SELECT {_ENTRY_COLUMNS} FROM xump_entry WHERE store = ? AND queue = ? "
            "ORDER BY section, position, seq, id",
            (self.name, state.name),
        )
        for row in rows:
            state.restore(self._entry_from_row(row), row[3], row[6], row[7])
        self._bodies.clear()  # bodies are shared between the entries of one load only

    def _entry_from_row(self, row: tuple) -> Entry:
        (
            key, _store, _queue, _section, _position, seq, _selector, _tag, mid, address,
            headers, return_address, timestamp, origin_queue, origin_selector, origin_tag,
            delivery_count, replay, downstream_queue, downstream_seq, taken_at,
        ) = row  # fmt: skip
        body = self._bodies.get(mid)
        if body is None:
            found = self.db.fetchall("SELECT body FROM xump_body WHERE mid = ?", (mid,))
            body = bytes(found[0][0]) if found else b""
            self._bodies[mid] = body
        message = Message(
            address, MappingProxyType(json.loads(headers)), body, return_address, mid, None,
            timestamp,
        )  # fmt: skip
        origin = (origin_queue, origin_selector, origin_tag) if origin_queue else None
        entry = Entry(seq, message, origin)
        entry.key = key
        entry.delivery_count = delivery_count
        entry.replay = bool(replay)
        entry.taken_at = taken_at
        if downstream_queue is not None:
            entry.downstream = (downstream_queue, downstream_seq)
        return entry

    def close(self) -> None:
        self.db.connection.close()
