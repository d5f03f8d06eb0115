"""The event journal: what happened to each message, recorded by the engine as it routes.

Theory of operation: an Engine made with `Engine(journal=True)` (or `journal=<capacity>`)
has an `EventJournal` at `eng.journal`; without it `eng.journal` is None and routing pays
one `is None` test per place that could record. Every queue whose spec says
`journal=True` (the default) gets the journal's `append` as its `journal` attribute; the
routing rules (rules.py) pass it one plain tuple per event, a record: RECORD_FIELDS
`(time, site, mid, detail, extra)`. Nothing else happens per event: no lock of its own
(routing runs under the engine lock), no I/O, no formatting.

Records, not events: readers see events of nine fields (EVENT_FIELDS), but four of them
are the same for every event a selector records (kind, queue, selector, target), so the
rules pass them as one shared tuple, the site, made once when the selector (or queue) is
wired: `SelectorRuntime.took_site` (its route, deliver or delete; None when each message
names its target, and then the rule makes the site) and `confirm_site`,
`QueueRuntime.publish_site`. Rarer events (dead letters, drops, rejects, expiries) make
theirs on the spot. A site holds only names and an int, never a message, so a record keeps
alive nothing the event would not. `extra` is the delivery tag for the kinds in TAGGED and
the address otherwise (no kind has both); `detail` is kept as the rules have it, made into
the event's text when read: a publish's seq (an int), a deliver's "is a redelivery" (a
bool). `event_of` makes a record into its event. Five fields instead of nine, no string
made per publish and the message's fields read by index (CPython 3.11 does not specialise
a NamedTuple's attributes) took a wolfpack message from 10.3 % more instructions with the
journal on to 7.8 % (bench/engine_bench.py (h) under callgrind: 8,200 -> 6,300 a message).

Flat fields, not tuples: `append` is the `extend` of one list, `buffer`, so a record is
kept as its WIDTH fields in a row and the tuple the rules built goes straight back to
CPython's free list. A kept tuple would be one more object for the cyclic garbage collector
to visit, while a list of strings, floats, ints and shared sites gives it nothing to
follow. Readers never see the rows: `drain()` and `peek()` return a `JournalBatch` whose
`events` are event tuples (EVENT_FIELDS), made when first asked for; its `columns()` give
an exporter each event field's values (archive.py), and its `fields()` the records' fields
in a row, as the buffer keeps them, which is what the service's router writes to Redis
after every step (xumpweb/analytics/journal.py: readers make the events with `widened`,
which reads the nine- and eight-field events of older routers too) before it `forget`s
them; `records()` gives one tuple per record.

Memory is bounded by `capacity`, checked once per public engine call rather than per event
(at its start, so a call pays one length test) and by every reader before it looks (`len`,
`drain`, `peek`, `dropped`, `position`, `trace`): when more than `capacity` events wait, the
oldest are dropped and counted (`dropped`), so a reader sees what it would had the call
that left them trimmed at its end. The caller is expected to `drain()` often enough that
this never happens (the service's archive task does); a drop is reported, never silent. So
memory holds at most `capacity` events plus those of one call. Dropping moves `head`, the
index of the first waiting field, and gives the space back once half the list is dropped,
so a journal nobody drains costs no more per call than one that is drained.

Positions: every event the journal ever recorded has an ordinal, 1, 2, 3 ... in recording
order; drops come off the front. `drain()` returns a `JournalBatch` that knows the position
of its first event and the journal's `epoch` (random per journal), so an exporter can tell
an event it already wrote from a new one, even when it is handed the same batch twice.

A public call that fails takes back the events it recorded (the stores roll its changes
back too), so the journal describes only what took effect.
"""

from __future__ import annotations

import secrets
import threading
from typing import NamedTuple

EVENT_FIELDS = (
    "time", "kind", "mid", "queue", "selector", "target", "detail", "address", "tag",
)  # fmt: skip
# events recorded before "tag" was a field (a journal list or an archive written then) have
# the first OLD_WIDTH fields only; `widened` gives them the rest as None
OLD_WIDTH = 8

# What the buffer keeps of one event (see the module doc): RECORD_FIELDS, WIDTH of them.
RECORD_FIELDS = ("time", "site", "mid", "detail", "extra")
WIDTH = len(RECORD_FIELDS)

EVENT_KINDS = (
    "publish",  # an application published to `queue` (address given); detail = the seq it
    # gets there, as text (None when it gets none yet: delayed, or arriving at a full queue)
    "route",  # a COPY/MOVE/BOUNCE selector of `queue` put it into `target`; detail = action
    "delete",  # a DELETE selector of `queue` took it
    "deliver",  # delivered to destination `target` as delivery `tag`; detail
    # "redelivered" on a repeat
    "confirm",  # the application confirmed delivery `tag` at `queue`/`selector`
    "reject",  # the application rejected delivery `tag`; detail "requeue" when it went back
    "expire",  # delivery `tag` unconfirmed past the delivery timeout: back to the front of
    # `queue`; detail "recalled": its destination was away, back to the queue it was moved
    # from
    "dead_letter",  # sent to dead-letter queue `target`; detail = the x-reason
    "drop",  # dropped (no dead-letter queue); detail = the reason it would have had
)
# the kinds whose record's `extra` is the delivery tag; every other kind's is the address
TAGGED = frozenset(("deliver", "confirm", "reject", "expire"))

DEFAULT_CAPACITY = 1_000_000


class JournalEvent(NamedTuple):
    """One event, for readers: `JournalEvent._make(t)` over a drained tuple (the engine
    records a shorter record of it: see the module doc)."""

    time: float  # seconds since the epoch
    kind: str  # one of EVENT_KINDS
    mid: str  # the message id (the same across copies and moves)
    queue: str  # the queue where it happened
    selector: int | None  # the selector id, where one acted
    target: str | None  # the queue or destination it went to
    detail: str | None  # reason, action or flag, as EVENT_KINDS says
    address: str | None  # the message address (publish events only)
    tag: str | None = None  # the delivery tag (deliver, confirm, reject and expire events)


def event_of(time: float, site: tuple, mid: str, detail: object, extra: str | None) -> tuple:
    """The event (EVENT_FIELDS order) of one record (RECORD_FIELDS order): the site's four
    fields in their places, a publish's seq as text, `extra` as the tag or the address."""
    kind, queue, selector, target = site
    if kind in TAGGED:
        if detail is True or detail is False:  # a deliver's: whether it was a redelivery
            detail = "redelivered" if detail else None
        return (time, kind, mid, queue, selector, target, detail, None, extra)
    if detail is not None and kind == "publish":
        detail = str(detail)
    return (time, kind, mid, queue, selector, target, detail, extra, None)


def _detail(kind: str, detail: object) -> str | None:
    """A record's detail as its event's (see `event_of`)."""
    if detail is None or type(detail) is str:
        return detail  # type: ignore[return-value]
    if kind == "publish":
        return str(detail)
    return "redelivered" if detail is True else None


def widened(event: tuple | list) -> tuple:
    """An event read back from a journal list or an archive as a tuple of every field in
    EVENT_FIELDS order: a record (RECORD_FIELDS, as the router writes its journal list
    since records were kept) is made into its event; one recorded before a field existed
    gets None for it."""
    if len(event) == WIDTH and isinstance(event[1], (list, tuple)):
        return event_of(event[0], tuple(event[1]), event[2], event[3], event[4])
    event = tuple(event)
    missing = len(EVENT_FIELDS) - len(event)
    return event + (None,) * missing if missing > 0 and len(event) >= OLD_WIDTH else event


def _records(fields: list) -> list[tuple]:
    """Flat fields, WIDTH per record, as one tuple per record."""
    row = iter(fields)
    return list(zip(*(row,) * WIDTH, strict=True))


def _events(fields: list) -> list[tuple]:
    """Flat fields as one event tuple (EVENT_FIELDS) per record."""
    row = iter(fields)
    return [event_of(*record) for record in zip(*(row,) * WIDTH, strict=True)]


class JournalBatch:
    """Events drained at once, oldest first, plain tuples in `EVENT_FIELDS` order.

    `first` is the position of `events[0]` (positions count every event the journal ever
    recorded, from 1), `epoch` names the journal, `dropped` counts the events lost to the
    capacity bound since the previous drain (they came before `first`). A journal hands
    over its flat record fields (`fields=`); the event tuples are made when `events` is
    first read, and `records()` gives the shorter records themselves (for a writer whose
    reader makes the events: `widened`)."""

    __slots__ = ("_events", "_fields", "dropped", "epoch", "first")

    def __init__(
        self,
        epoch: str,
        first: int,
        events: list[tuple] | None = None,
        dropped: int = 0,
        *,
        fields: list | None = None,
    ) -> None:
        self.epoch = epoch
        self.first = first
        self.dropped = dropped
        self._events = events if events is not None or fields is not None else []
        self._fields = fields

    @property
    def events(self) -> list[tuple]:
        if self._events is None:
            self._events = _events(self._fields)  # type: ignore[arg-type]
        return self._events

    def fields(self) -> tuple[list, int]:
        """The records' fields in a row, as the journal keeps them, and how many make one
        (WIDTH); a batch made of events (`events=`) gives theirs, EVENT_FIELDS each."""
        if self._fields is not None:
            return self._fields, WIDTH
        events = self._events or []
        return [field for event in events for field in event], len(EVENT_FIELDS)

    def records(self) -> list[tuple]:
        """The events as the journal keeps them (RECORD_FIELDS order, one tuple each):
        shorter to write than `events`; `widened` makes each back into its event."""
        if self._fields is not None:
            return _records(self._fields)
        return list(self._events)  # type: ignore[arg-type]

    def columns(self) -> list[list]:
        """Each field's values, in EVENT_FIELDS order: the events transposed."""
        if self._fields is not None:
            fields = self._fields
            sites = fields[1::WIDTH]
            kinds = [site[0] for site in sites]
            details = fields[3::WIDTH]
            extras = fields[4::WIDTH]
            tagged = [kind in TAGGED for kind in kinds]
            return [
                fields[0::WIDTH],
                kinds,
                fields[2::WIDTH],
                [site[1] for site in sites],
                [site[2] for site in sites],
                [site[3] for site in sites],
                [_detail(kind, detail) for kind, detail in zip(kinds, details, strict=True)],
                [None if tag else extra for tag, extra in zip(tagged, extras, strict=True)],
                [extra if tag else None for tag, extra in zip(tagged, extras, strict=True)],
            ]
        if not self._events:
            return [[] for _ in range(len(EVENT_FIELDS))]
        return [list(column) for column in zip(*self._events, strict=True)]

    def __len__(self) -> int:
        if self._fields is not None:
            return len(self._fields) // WIDTH
        return len(self._events)  # type: ignore[arg-type]

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.events)

    def __repr__(self) -> str:
        return (
            f"JournalBatch(epoch={self.epoch!r}, first={self.first}, events={len(self)}, "
            f"dropped={self.dropped})"
        )

    @property
    def last(self) -> int:
        """The position of the last event (first - 1 when empty)."""
        return self.first + len(self) - 1


class EventJournal:
    """A bounded buffer of events that the engine appends to and the caller drains."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, lock: threading.RLock | None = None):
        self.capacity = capacity
        self.epoch = secrets.token_hex(6)
        # the waiting events' fields from `head` on, WIDTH each (see the module doc)
        self.buffer: list = []
        self.head = 0
        self.append = self.buffer.extend  # what the queues call, with one record
        # the buffer length past which the bound is exceeded: the engine's one test a call
        self.full_at = capacity * WIDTH
        self._lock = lock if lock is not None else threading.RLock()
        self._taken = 0  # events drained or dropped so far: the position before the buffer
        self._dropped_total = 0
        self._dropped_since_drain = 0

    @property
    def dropped(self) -> int:
        """Events dropped because the buffer was full, over the journal's life."""
        with self._lock:
            self.enforce_capacity()
            return self._dropped_total

    @property
    def position(self) -> int:
        """The position the next drained event will have."""
        with self._lock:
            self.enforce_capacity()
            return self._taken + 1

    def __len__(self) -> int:
        with self._lock:
            self.enforce_capacity()
            return (len(self.buffer) - self.head) // WIDTH

    def drain(self, limit: int | None = None) -> JournalBatch:
        """Take the waiting events, oldest first (at most `limit`), out of the journal."""
        with self._lock:
            self.enforce_capacity()
            buffer, head = self.buffer, self.head
            waiting = (len(buffer) - head) // WIDTH
            count = waiting if limit is None else max(0, min(limit, waiting))
            fields = buffer[head : head + count * WIDTH]
            batch = JournalBatch(
                self.epoch, self._taken + 1, None, self._dropped_since_drain, fields=fields
            )
            self.forget(count)
            return batch

    def peek(self) -> JournalBatch:
        """The waiting events as `drain()` would return them, left in the journal: a
        writer that may fail forgets them (`forget(len(batch))`) once they are written."""
        with self._lock:
            self.enforce_capacity()
            return JournalBatch(
                self.epoch,
                self._taken + 1,
                None,
                self._dropped_since_drain,
                fields=self.buffer[self.head :],
            )

    def forget(self, count: int) -> None:
        """Take the oldest `count` waiting events out, as `drain(count)` does, without
        handing them over: a writer that peeked has written them."""
        with self._lock:
            self.enforce_capacity()
            buffer, head = self.buffer, self.head
            count = max(0, min(count, (len(buffer) - head) // WIDTH))
            if head + count * WIDTH == len(buffer):
                buffer.clear()
                self._moved(0)
            else:
                self._moved(head + count * WIDTH)
            self._taken += count
            self._dropped_since_drain = 0

    def events_of(self, mid: str) -> list[tuple]:
        """The waiting events of message `mid`, oldest first (for `trace`)."""
        with self._lock:
            self.enforce_capacity()
            buffer, head = self.buffer, self.head
            return [
                event_of(*buffer[head + n * WIDTH : head + (n + 1) * WIDTH])
                for n, found in enumerate(buffer[head + 2 :: WIDTH])
                if found == mid
            ]

    # -- called by the engine, under its lock ---------------------------------------------
    def enforce_capacity(self) -> None:
        """Drop the oldest events beyond `capacity` (at the start of each public call, and
        by each reader before it looks)."""
        if len(self.buffer) <= self.full_at:
            return
        excess = (len(self.buffer) - self.head) // WIDTH - self.capacity
        if excess > 0:
            self._moved(self.head + excess * WIDTH)
            self._taken += excess
            self._dropped_total += excess
            self._dropped_since_drain += excess

    def _moved(self, head: int) -> None:
        """The first waiting field is now at `head`: give the space before it back once it
        is half the buffer (so each dropped field is moved at most once)."""
        if head and head * 2 >= len(self.buffer):
            del self.buffer[:head]
            head = 0
        self.head = head
        self.full_at = head + self.capacity * WIDTH

    def take_back(self, mark: int) -> None:
        """Forget the events recorded after the journal held `mark` (its `len`): a failed
        call."""
        del self.buffer[self.head + mark * WIDTH :]

    def forget_after(self, length: int) -> None:
        """Forget the fields past `length` (`len(buffer)` when a call began): it failed."""
        del self.buffer[length:]
