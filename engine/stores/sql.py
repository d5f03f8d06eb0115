"""The SQL store: queue state in SQLite (default) or PostgreSQL, one row per message entry.

Theory of operation: a journaled store (journal.py). Queue state lives in memory as the RAM
store holds it, so reads and routing decisions never touch the database; every change is
recorded, and the records of one engine operation are written in one transaction at
`commit()` (pipelined on PostgreSQL: one round trip). Within that transaction the writes are
coalesced: an entry written and deleted again (a MOVE setting its entry twice, history
trimmed at once) is never sent, a selector's credit and a queue's counters are written once
with their last values, and rows of one kind go in one executemany. Opening a queue reads
its rows back, so a new process finds it as the last one left it.

Schema (created on first use; `store` is the store's name, so stores can share a database):

    xump_entry     (store, id) -> queue, section ('u' unprocessed, 'h' history,
                   'o' outstanding), position (order of 'u' and of 'o'), seq,
                   selector_id, tag, mid, address, headers (JSON), return_address, timestamp,
                   origin_queue, origin_selector, origin_tag, delivery_count, replay,
                   downstream_queue, downstream_seq, taken_at, ttl, delay (the message's
                   lifetime), due (of a scheduled entry: sections 's' delayed arrival,
                   'w' waiting out a redelivery delay)
    xump_body      mid -> body, refs   (a body is stored once; refs counts the entries
                   holding it and the row goes with the last of them)
    xump_queue     (store, queue) -> last_seq, head, tail, one column per counter
    xump_selector  (store, queue, selector_id) -> credit
    xump_store     store -> token (changed by every commit: see "Failures")

An entry moving between sections is a delete and an insert of its row under a new id. An
'o' row's position is the id it got when first taken and is kept when the engine sets the
entry again, so outstanding entries come back in the order taken. Address and return
address are stored as they are unless a database cannot hold them (NUL on PostgreSQL,
unpaired surrogates): then as "\\x01" + JSON, as is any value starting with "\\x01".

Durability. SQLite runs in WAL mode with synchronous=FULL: a commit that returned survives
power loss, not only a crash of the process; `sqlite:///path?synchronous=normal` trades the
last commits before a power loss (never consistency) for fewer fsyncs. PostgreSQL commits as
the server is configured (synchronous_commit).

Failures. A commit that fails raises StoreError; the operation has happened in memory (the
engine does not undo), so its writes are kept and sent again, first, with the next commit
(a lost PostgreSQL connection is reopened and retried once at once). Every commit also moves
the store's token on, guarded by the token it expects: after a commit whose outcome was lost
with the connection the token tells whether it was applied, and a second process writing
the same store is refused (StoreError) instead of silently interleaving: one process owns a
store; restarting an engine takes the store over with whatever the database holds.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from itertools import count
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from engine.errors import StoreError
from engine.message import _EMPTY_HEADERS, Message
from engine.stores.base import COUNTERS, Entry
from engine.stores.journal import JournaledQueueState, JournaledStore

_ENTRY_COLUMNS = (
    "id, store, queue, section, position, seq, selector_id, tag, mid, address, headers, "
    "return_address, timestamp, origin_queue, origin_selector, origin_tag, delivery_count, "
    "replay, downstream_queue, downstream_seq, taken_at, ttl, delay, due"
)
# columns added after the first release: added to older databases when opened
_ADDED_COLUMNS = [
    ("xump_entry", "ttl", "DOUBLE PRECISION"),
    ("xump_entry", "delay", "DOUBLE PRECISION"),
    ("xump_entry", "due", "DOUBLE PRECISION NOT NULL DEFAULT 0"),
    ("xump_queue", "delivery_limited", "BIGINT NOT NULL DEFAULT 0"),
    ("xump_queue", "timed_out", "BIGINT NOT NULL DEFAULT 0"),
    ("xump_queue", "recalled", "BIGINT NOT NULL DEFAULT 0"),
]

_SCHEMA_LOCK = 0x78756D70  # "xump": the advisory lock the making of the schema holds
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
        ttl DOUBLE PRECISION, delay DOUBLE PRECISION,
        due DOUBLE PRECISION NOT NULL DEFAULT 0,
        PRIMARY KEY (store, id))""",
    "CREATE INDEX IF NOT EXISTS xump_entry_queue ON xump_entry (store, queue)",
    "CREATE INDEX IF NOT EXISTS xump_entry_mid ON xump_entry (mid)",
    """CREATE TABLE IF NOT EXISTS xump_body (
        mid TEXT PRIMARY KEY, body {blob} NOT NULL, refs BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS xump_selector (
        store TEXT NOT NULL, queue TEXT NOT NULL, selector_id BIGINT NOT NULL,
        credit BIGINT NOT NULL, PRIMARY KEY (store, queue, selector_id))""",
    "CREATE TABLE IF NOT EXISTS xump_store (store TEXT PRIMARY KEY, token TEXT NOT NULL)",
]

_INSERT_ENTRY = f"INSERT INTO xump_entry ({_ENTRY_COLUMNS}) VALUES ({', '.join('?' * 24)})"
_DELETE_ENTRY = "DELETE FROM xump_entry WHERE store = ? AND id = ?"
_UPSERT_QUEUE = (
    f"INSERT INTO xump_queue (store, queue, last_seq, head, tail, {', '.join(COUNTERS)}) "
    f"VALUES (?, ?, ?, ?, ?, {', '.join('?' * len(COUNTERS))}) ON CONFLICT (store, queue) "
    "DO UPDATE SET last_seq = excluded.last_seq, head = excluded.head, tail = excluded.tail, "
    + ", ".join(f"{name} = excluded.{name}" for name in COUNTERS)
)
_UPSERT_CREDIT = (
    "INSERT INTO xump_selector (store, queue, selector_id, credit) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (store, queue, selector_id) DO UPDATE SET credit = excluded.credit"
)
_DELETE_SELECTOR = "DELETE FROM xump_selector WHERE store = ? AND queue = ? AND selector_id = ?"
_ADD_BODY = (
    "INSERT INTO xump_body (mid, body, refs) VALUES (?, ?, ?) "
    "ON CONFLICT (mid) DO UPDATE SET refs = xump_body.refs + excluded.refs"
)
_RELEASE_BODY = "UPDATE xump_body SET refs = refs + ? WHERE mid = ?"
_FREE_BODY = "DELETE FROM xump_body WHERE mid = ? AND refs <= 0"
# NULL (a NOT NULL violation, in both databases) unless the token is the one expected
_MOVE_TOKEN = "UPDATE xump_store SET token = CASE WHEN token = ? THEN ? END WHERE store = ?"
_LOAD_ENTRIES = (
    f"SELECT {', '.join('e.' + c for c in _ENTRY_COLUMNS.split(', '))}, b.body "
    "FROM xump_entry e LEFT JOIN xump_body b ON b.mid = e.mid "
    "WHERE e.store = ? AND e.queue = ? ORDER BY e.section, e.position, e.seq, e.id"
)

_encode_json = json.JSONEncoder(separators=(",", ":")).encode
_MARK = "\x01"


def mask_password(url: str) -> str:
    """The URL with its password (user:password@ or ?password=) replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None and "password=" not in parts.query.lower():
        return url  # untouched (urlunsplit would turn sqlite:///x into sqlite:/x)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", ":***@", 1)
    query = "&".join(
        "password=***" if pair.lower().startswith("password=") else pair
        for pair in parts.query.split("&")
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _storable(text: str | None) -> str | None:
    """Text as a column holds it (see the module docstring)."""
    if text is None:
        return None
    if "\x00" in text or text[:1] == _MARK:
        return _MARK + _encode_json(text)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return _MARK + _encode_json(text)
    return text


def _stored(text: str | None) -> str | None:
    return json.loads(text[1:]) if text is not None and text[:1] == _MARK else text


class _Database:
    """One connection to SQLite or PostgreSQL; statements are written with ? placeholders."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.masked = mask_password(url)
        parts = urlsplit(url)
        self.dialect = "postgresql" if parts.scheme in ("postgresql", "postgres") else parts.scheme
        if self.dialect not in ("sqlite", "postgresql"):
            raise StoreError(
                f"SQL store URL {self.masked!r} must start with sqlite:/// or postgresql://"
            )
        self._sql: dict[str, str] = {}
        self.connection: Any = None
        try:
            self._connect()
            self._make_schema()
        except StoreError:
            raise
        except Exception as error:
            raise StoreError(f"cannot open the SQL store at {self.masked}: {self.text(error)}; "
                             f"{self.advice()}") from None  # fmt: skip

    def _make_schema(self) -> None:
        """The tables, when the database lacks them. On PostgreSQL two processes making them
        at once can both fail a CREATE ... IF NOT EXISTS (a duplicate row in its catalog),
        so it is done in one transaction under an advisory lock: one process at a time."""
        counters = ", ".join(f"{name} BIGINT NOT NULL DEFAULT 0" for name in COUNTERS)
        blob = "BLOB" if self.dialect == "sqlite" else "BYTEA"
        if self.dialect != "postgresql":
            for statement in _SCHEMA:
                self.connection.execute(statement.format(counters=counters, blob=blob))
            self._add_columns()
            return
        with self.connection.transaction():
            self.connection.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            for statement in _SCHEMA:
                self.connection.execute(statement.format(counters=counters, blob=blob))
            self._add_columns()

    def _add_columns(self) -> None:
        """Columns a database made by an older release lacks (see _ADDED_COLUMNS)."""
        for table, column, kind in _ADDED_COLUMNS:
            if self.dialect == "postgresql":
                self.connection.execute(
                    f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}"
                )
                continue
            present = {row[1] for row in self.connection.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                self.connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    def _connect(self) -> None:
        if self.dialect == "postgresql":
            import psycopg

            options = {} if "connect_timeout=" in self.url else {"connect_timeout": 10}
            self.connection = psycopg.connect(self.url, autocommit=True, **options)
            return
        parts = urlsplit(self.url)
        path = self.url[len("sqlite:///") :] if self.url.startswith("sqlite:///") else parts.path
        path = path.split("?", 1)[0]
        options = dict(parse_qsl(parts.query))
        synchronous = options.pop("synchronous", "full").upper()
        if options or synchronous not in ("FULL", "NORMAL"):
            raise StoreError(
                f"SQL store URL {self.masked!r}: the only option is synchronous=full (the "
                "default) or synchronous=normal"
            )
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.connection = sqlite3.connect(
            path or ":memory:", isolation_level=None, check_same_thread=False
        )
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.execute(f"PRAGMA synchronous={synchronous}")

    def advice(self) -> str:
        if self.dialect == "sqlite":
            return (
                "check that no other process keeps the file locked, that its directory exists "
                "and is writable, and that the disk is not full"
            )
        parts = urlsplit(self.url)
        host = f"{parts.hostname or 'localhost'}:{parts.port or 5432}"
        return (
            f"check that PostgreSQL runs and accepts connections at {host}, that database "
            f"{parts.path.lstrip('/')!r} exists and that user {parts.username!r} may log in "
            "and create tables"
        )

    def text(self, error: Exception) -> str:
        """The driver's message, without the password should it quote the URL."""
        text = str(error).strip()
        password = urlsplit(self.url).password
        return text.replace(password, "***") if password else text

    def sql(self, statement: str) -> str:
        found = self._sql.get(statement)
        if found is None:
            found = statement if self.dialect == "sqlite" else statement.replace("?", "%s")
            self._sql[statement] = found
        return found

    def lost(self) -> bool:
        """True when the PostgreSQL connection broke (it has then been opened again)."""
        if self.dialect != "postgresql" or not (self.connection.broken or self.connection.closed):
            return False
        try:
            self.connection.close()
            self._connect()
        except Exception:  # still unreachable: the caller reports its own error
            pass
        return True

    def query(self, statement: str, params: tuple = ()) -> list[tuple]:
        for attempt in range(2):
            try:
                return list(self.connection.execute(self.sql(statement), params).fetchall())
            except Exception as error:
                if attempt == 0 and self.lost():
                    continue
                raise StoreError(f"reading the SQL store at {self.masked} failed: "
                                 f"{self.text(error)}; {self.advice()}") from None  # fmt: skip
        raise AssertionError("unreachable")

    def transaction(self, statements: list[tuple[str, list[tuple]]]) -> None:
        """Run the statements (each with its rows) as one transaction; all or nothing."""
        connection = self.connection
        if self.dialect == "postgresql":
            with connection.pipeline(), connection.transaction():
                cursor = connection.cursor()
                for statement, rows in statements:
                    if len(rows) == 1:
                        cursor.execute(self.sql(statement), rows[0])
                    else:
                        cursor.executemany(self.sql(statement), rows)
            return
        cursor = connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            for statement, rows in statements:
                if len(rows) == 1:
                    cursor.execute(statement, rows[0])
                else:
                    cursor.executemany(statement, rows)
            cursor.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise


class SqlStore(JournaledStore):
    kind = "sql"

    def __init__(self, name: str, url: str | None = None) -> None:
        super().__init__(name, url)
        if not url:
            raise StoreError("a SQL store needs a URL: sqlite:///path or postgresql://...")
        self.db = _Database(url)
        # entry ids are per store: stores sharing a database each number their own
        self._last_key = self.db.query(
            "SELECT MAX(id) FROM xump_entry WHERE store = ?", (name,)
        )[0][0] or 0  # fmt: skip
        self._token = self._read_token()
        self._tokens = (f"{secrets.token_hex(6)}.{n}" for n in count(1))
        # this operation's writes, coalesced (see the module docstring)
        self._inserts: dict[int, tuple] = {}  # entry id -> row
        self._deletes: list[tuple[str, int]] = []
        self._credits: dict[tuple[str, int], int] = {}
        self._metas: dict[str, tuple] = {}
        self._selector_drops: list[tuple[str, str, int]] = []
        self._queue_drops: list[str] = []
        self._dropped: list[JournaledQueueState] = []
        # mid -> [change in the number of entries holding it, body], counted by the records
        # as they are made, so that a record made between operations can be committed at once
        self._bodies: dict[str | None, list] = {}
        # id -> position of every 'o' row, and the (entry, position) just deleted to be set
        # again (see the module docstring)
        self._taken_positions: dict[int, int] = {}
        self._replaced: tuple[Entry, int] | None = None
        # statements of commits that failed, oldest first, and the attempt still unsettled:
        # (token it would have set, how many of `_unwritten` it held)
        self._unwritten: list[tuple[str, list[tuple]]] = []
        self._attempt: tuple[str, int] | None = None
        self._in_operation = False
        self._failed_in_operation = False

    def _read_token(self) -> str | None:
        try:
            self.db.transaction(
                [("INSERT INTO xump_store (store, token) VALUES (?, '') ON CONFLICT DO NOTHING",
                  [(self.name,)])]
            )  # fmt: skip
        except Exception as error:
            self.db.connection.close()
            raise StoreError(f"cannot open the SQL store at {self.db.masked}: "
                             f"{self.db.text(error)}; {self.db.advice()}") from None  # fmt: skip
        return self.db.query("SELECT token FROM xump_store WHERE store = ?", (self.name,))[0][0]

    # -- operations ------------------------------------------------------------------------
    def begin(self) -> None:
        self._in_operation = True
        self._failed_in_operation = False
        super().begin()

    def commit(self) -> None:
        self._in_operation = True  # records made while committing belong to this commit
        try:
            super().commit()
        finally:
            self._in_operation = False

    def rollback(self) -> None:
        if self._failed_in_operation:  # its writes wait for the next commit already
            self._in_operation = False
            return
        super().rollback()  # keeps the store in step with memory, as commit does

    def discard_records(self) -> None:
        """Nothing to discard: records made between operations (set_credit, a new selector's
        credit) are committed at once, and failed commits are kept to be written again."""

    def _between_operations(self) -> None:
        if not self._in_operation and not self._holding:
            self.commit()

    # -- records ---------------------------------------------------------------------------
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
        headers = message.headers
        if section == "o":
            replaced = self._replaced
            position = replaced[1] if replaced is not None and replaced[0] is entry else entry.key
            self._taken_positions[entry.key] = position  # type: ignore[index]
        self._replaced = None
        origin = entry.origin or (None, None, None)
        downstream = entry.downstream or (None, None)
        self._inserts[entry.key] = (  # type: ignore[index]
            entry.key, self.name, state.name, section, position, entry.seq, selector_id, tag,
            message.mid, _storable(message.address),
            _encode_json(dict(headers)) if headers else "{}",
            _storable(message.return_address), message.timestamp, *origin,
            entry.delivery_count, entry.replay, *downstream, entry.taken_at,
            message.ttl, message.delay, entry.due,
        )  # fmt: skip
        counted = self._bodies.get(message.mid)
        if counted is None:
            self._bodies[message.mid] = [1, message.body]
        else:
            counted[0] += 1
        if not self._in_operation:
            self._between_operations()

    def record_deletion(self, state: JournaledQueueState, entry: Entry) -> None:
        key: int = entry.key  # type: ignore[assignment]
        if self._inserts.pop(key, None) is None:
            self._deletes.append((self.name, key))
        position = self._taken_positions.pop(key, None)
        if position is not None:
            self._replaced = (entry, position)
        self._release(entry.message)
        if not self._in_operation:
            self._between_operations()

    def _release(self, message: Message) -> None:
        counted = self._bodies.get(message.mid)
        if counted is None:
            self._bodies[message.mid] = [-1, message.body]
        else:
            counted[0] -= 1

    def record_meta(self, state: JournaledQueueState) -> None:
        if self._dropped and any(state is dropped for dropped in self._dropped):
            return
        self._metas[state.name] = (
            self.name, state.name, state.last_seq(), state.head_position, state.tail_position,
            *(state.counters[name] for name in COUNTERS),
        )  # fmt: skip

    def record_credit(self, state: JournaledQueueState, selector_id: int, credit: int) -> None:
        self._credits[(state.name, selector_id)] = credit
        self._between_operations()

    def record_selector_dropped(self, state: JournaledQueueState, selector_id: int) -> None:
        self._credits.pop((state.name, selector_id), None)
        self._selector_drops.append((self.name, state.name, selector_id))
        self._between_operations()

    def record_queue_dropped(self, state: JournaledQueueState) -> None:
        # what this batch would still write for the queue is void; its rows go first
        queue = state.name
        for entry in state.held_entries():
            if entry.key is not None:
                self._release(entry.message)
                self._taken_positions.pop(entry.key, None)
        self._inserts = {key: row for key, row in self._inserts.items() if row[2] != queue}
        self._credits = {key: c for key, c in self._credits.items() if key[0] != queue}
        self._selector_drops = [drop for drop in self._selector_drops if drop[1] != queue]
        self._metas.pop(queue, None)
        self._queue_drops.append(queue)
        self._dropped.append(state)
        self._between_operations()

    def flush(self) -> None:
        name = self.name
        statements: list[tuple[str, list[tuple]]] = []
        for queue in self._queue_drops:
            for table in ("xump_entry", "xump_selector", "xump_queue"):
                statements.append(
                    (f"DELETE FROM {table} WHERE store = ? AND queue = ?", [(name, queue)])
                )
        if self._deletes:
            statements.append((_DELETE_ENTRY, self._deletes))
        if self._inserts:
            statements.append((_INSERT_ENTRY, list(self._inserts.values())))
        if self._selector_drops:
            statements.append((_DELETE_SELECTOR, self._selector_drops))
        if self._credits:
            rows = [(name, q, sid, credit) for (q, sid), credit in self._credits.items()]
            statements.append((_UPSERT_CREDIT, rows))
        if self._metas:
            statements.append((_UPSERT_QUEUE, list(self._metas.values())))
        added = [(mid, body, n) for mid, (n, body) in self._bodies.items() if n > 0]
        released = [(n, mid) for mid, (n, _body) in self._bodies.items() if n < 0]
        if added:
            statements.append((_ADD_BODY, added))
        if released:
            statements.append((_RELEASE_BODY, released))
            statements.append((_FREE_BODY, [(mid,) for _n, mid in released]))
        self._inserts, self._deletes, self._credits, self._metas = {}, [], {}, {}
        self._selector_drops, self._queue_drops, self._dropped = [], [], []
        self._bodies = {}
        if statements or self._unwritten:
            self._write(statements)

    def _write(self, statements: list[tuple[str, list[tuple]]]) -> None:
        """Write the failed commits' statements, then these, in one transaction."""
        self._unwritten.extend(statements)
        for attempt in range(2):
            try:
                if self._attempt is not None:
                    self._settle_attempt()
                    if not self._unwritten:
                        return
                token = next(self._tokens)
                self._attempt = (token, len(self._unwritten))
                guard = (_MOVE_TOKEN, [(self._token, token, self.name)])
                self.db.transaction([guard, *self._unwritten])
            except StoreError:
                self._failed_in_operation = True
                raise
            except Exception as error:
                if attempt == 0 and self.db.lost():
                    continue
                self._failed_in_operation = True
                raise StoreError(self._failure(error)) from None
            self._token = token
            self._attempt = None
            self._unwritten = []
            return

    def _settle_attempt(self) -> None:
        """A commit failed: find out from the token whether it was applied after all."""
        token, held = self._attempt  # type: ignore[misc]
        found = self.db.query("SELECT token FROM xump_store WHERE store = ?", (self.name,))
        found_token = found[0][0] if found else None
        if found_token == token:  # applied; its reply was lost with the connection
            self._token = token
            del self._unwritten[:held]
        elif found_token != self._token:
            raise StoreError(self._fenced())
        self._attempt = None

    def _failure(self, error: Exception) -> str:
        if "xump_store" in str(error):
            return self._fenced()
        return (
            f"writing to the SQL store {self.name!r} at {self.db.masked} failed: "
            f"{self.db.text(error)}; the change is kept in memory and written with the next "
            f"commit that succeeds; {self.db.advice()}"
        )

    def _fenced(self) -> str:
        return (
            f"the SQL store {self.name!r} at {self.db.masked} was written by another process "
            "since this engine opened it; one process owns a store: stop the other, then "
            "restart this engine to take the store over as the database holds it"
        )

    # -- loading -----------------------------------------------------------------------------
    def load_queue(self, state: JournaledQueueState) -> None:
        if self._unwritten:
            self._write([])  # what the database returns must include what memory did
        if state.name in self._queue_drops:
            return  # dropped in this batch: its rows are about to go
        name, queue = self.name, state.name
        row = self.db.query(
            f"SELECT last_seq, head, tail, {', '.join(COUNTERS)} FROM xump_queue "
            "WHERE store = ? AND queue = ?",
            (name, queue),
        )
        if row:
            last_seq, head, tail, *counts = row[0]
            state.restore_meta(last_seq, head, tail, dict(zip(COUNTERS, counts, strict=True)))
        for selector_id, credit in self.db.query(
            "SELECT selector_id, credit FROM xump_selector WHERE store = ? AND queue = ?",
            (name, queue),
        ):
            state.restore_credit(selector_id, credit)
        bodies: dict[str, bytes] = {}  # one bytes object per body, as in the RAM store
        for row in self.db.query(_LOAD_ENTRIES, (name, queue)):
            state.restore(self._entry_from_row(queue, row, bodies), row[3], row[6], row[7])
            if row[3] == "o":
                self._taken_positions[row[0]] = row[4]

    def _entry_from_row(self, queue: str, row: tuple, bodies: dict[str, bytes]) -> Entry:
        (
            key, _store, _queue, _section, _position, seq, _selector, _tag, mid, address,
            headers, return_address, timestamp, origin_queue, origin_selector, origin_tag,
            delivery_count, replay, downstream_queue, downstream_seq, taken_at, ttl, delay, due,
            body,
        ) = row  # fmt: skip
        if body is None:
            raise StoreError(
                f"queue {queue!r} of the SQL store {self.name!r} holds message {mid!r} whose "
                f"body is missing from xump_body at {self.db.masked}; the database was "
                "changed outside Xump"
            )
        found = bodies.get(mid)
        if found is None:
            found = bodies[mid] = bytes(body)
        message = Message(
            _stored(address), MappingProxyType(json.loads(headers)) if headers != "{}"
            else _EMPTY_HEADERS, found, _stored(return_address), mid, None, timestamp, None,
            ttl, delay,
        )  # fmt: skip
        entry = Entry(seq, message, (origin_queue, origin_selector, origin_tag)
                      if origin_queue is not None else None)  # fmt: skip
        entry.key = key
        entry.delivery_count = delivery_count
        entry.replay = bool(replay)
        entry.taken_at = taken_at
        entry.due = due or 0.0
        if downstream_queue is not None:
            entry.downstream = (downstream_queue, downstream_seq)
        return entry

    def close(self) -> None:
        try:
            if self._unwritten:
                self._write([])
        finally:
            self.db.connection.close()
