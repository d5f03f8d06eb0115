"""The event journal: what happened to each message, recorded by the engine as it routes.

Theory of operation: an Engine made with `Engine(journal=True)` (or `journal=<capacity>`)
has an `EventJournal` at `eng.journal`; without it `eng.journal` is None and routing pays
one `is None` test per place that could record. Every queue whose spec says
`journal=True` (the default) gets the journal's buffer `append` as its `journal` attribute;
the routing rules (rules.py) append one plain tuple per event, fields in `EVENT_FIELDS`
order, to a deque. Nothing else happens per event: no lock of its own (routing runs under
the engine lock), no I/O, no formatting.

Memory is bounded by `capacity`, checked once per public engine call rather than per event
(at its start, so a call pays one length test) and by every reader before it looks (`len`,
`drain`, `peek`, `dropped`, `position`, `trace`): when more than `capacity` events wait, the
oldest are dropped and counted (`dropped`), so a reader sees what it would had the call
that left them trimmed at its end. The caller is expected to `drain()` often enough that
this never happens (the service's archive task does); a drop is reported, never silent. So
memory holds at most `capacity` events plus those of one call.

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
from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

EVENT_FIELDS = (
    "time", "kind", "mid", "queue", "selector", "target", "detail", "address", "tag",
)  # fmt: skip
# events recorded before "tag" was a field (a journal list or an archive written then) have
# the first OLD_WIDTH fields only; `widened` gives them the rest as None
OLD_WIDTH = 8

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

DEFAULT_CAPACITY = 1_000_000


class JournalEvent(NamedTuple):
    """One event, for readers: `JournalEvent._make(t)` over a drained tuple. The engine
    itself appends plain tuples with the same fields in the same order."""

    time: float  # seconds since the epoch
    kind: str  # one of EVENT_KINDS
    mid: str  # the message id (the same across copies and moves)
    queue: str  # the queue where it happened
    selector: int | None  # the selector id, where one acted
    target: str | None  # the queue or destination it went to
    detail: str | None  # reason, action or flag, as EVENT_KINDS says
    address: str | None  # the message address (publish events only)
    tag: str | None = None  # the delivery tag (deliver, confirm, reject and expire events)


def widened(event: tuple | list) -> tuple:
    """An event read back from a journal list or an archive as a tuple of every field in
    EVENT_FIELDS order: one recorded before a field existed gets None for it."""
    event = tuple(event)
    missing = len(EVENT_FIELDS) - len(event)
    return event + (None,) * missing if missing > 0 and len(event) >= OLD_WIDTH else event


@dataclass(frozen=True, slots=True)
class JournalBatch:
    """Events drained at once, oldest first, plain tuples in `EVENT_FIELDS` order.

    `first` is the position of `events[0]` (positions count every event the journal ever
    recorded, from 1), `epoch` names the journal, `dropped` counts the events lost to the
    capacity bound since the previous drain (they came before `first`)."""

    epoch: str
    first: int
    events: list[tuple] = field(default_factory=list)
    dropped: int = 0

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.events)

    @property
    def last(self) -> int:
        """The position of the last event (first - 1 when empty)."""
        return self.first + len(self.events) - 1


class EventJournal:
    """A bounded buffer of events that the engine appends to and the caller drains."""

    def __init__(self, capacity: int = DEFAULT_CAPACITY, lock: threading.RLock | None = None):
        self.capacity = capacity
        self.epoch = secrets.token_hex(6)
        self.buffer: deque[tuple] = deque()
        self.append = self.buffer.append  # what the queues call
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
            return len(self.buffer)

    def drain(self, limit: int | None = None) -> JournalBatch:
        """Take the waiting events, oldest first (at most `limit`), out of the journal."""
        with self._lock:
            self.enforce_capacity()
            buffer = self.buffer
            count = len(buffer) if limit is None else max(0, min(limit, len(buffer)))
            if count == len(buffer):
                events = list(buffer)
                buffer.clear()
            else:
                popleft = buffer.popleft
                events = [popleft() for _ in range(count)]
            batch = JournalBatch(self.epoch, self._taken + 1, events, self._dropped_since_drain)
            self._taken += count
            self._dropped_since_drain = 0
            return batch

    def peek(self) -> JournalBatch:
        """The waiting events as `drain()` would return them, left in the journal: a
        writer that may fail drains them (`drain(len(batch))`) once they are written."""
        with self._lock:
            self.enforce_capacity()
            return JournalBatch(
                self.epoch, self._taken + 1, list(self.buffer), self._dropped_since_drain
            )

    # -- called by the engine, under its lock ---------------------------------------------
    def enforce_capacity(self) -> None:
        """Drop the oldest events beyond `capacity` (at the start of each public call, and
        by each reader before it looks)."""
        excess = len(self.buffer) - self.capacity
        if excess > 0:
            popleft = self.buffer.popleft
            for _ in range(excess):
                popleft()
            self._taken += excess
            self._dropped_total += excess
            self._dropped_since_drain += excess

    def take_back(self, mark: int) -> None:
        """Forget the events recorded after the buffer held `mark` (a failed call)."""
        pop = self.buffer.pop
        for _ in range(len(self.buffer) - mark):
            pop()
