"""The store interface: where a queue's runtime state lives.

Theory of operation: the engine (core.py) decides *what* happens to a message; a store keeps
the state those decisions change. Per queue that is

* the **unprocessed** section: entries waiting to be routed, FIFO;
* the **history** section: processed entries kept for browsing, ordered by seq and trimmed
  to the queue's `history` setting (newest seqs kept);
* the seq counter and the statistics counters;
* per selector of the queue: its remaining **credit** and its **outstanding** entries (taken,
  not yet settled), in the order they were taken.

An `Entry` is one message's presence in one queue: the shared immutable `Message`, the seq it
got in this queue, and `origin`, the upstream outstanding slot (queue, selector id, tag) to
settle when this entry leaves the queue's accounting (None when published or copied in).
Bodies are never copied: entries in many queues refer to one Message.

The RAM store (ram.py) is the reference implementation: read it to learn the contract.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator

from engine.message import Message

COUNTERS = (
    "published",
    "routed",
    "delivered",
    "confirmed",
    "rejected",
    "expired",
    "dropped",
    "dead_lettered",
    "delivery_limited",
    "timed_out",
    "recalled",
)


class Entry:
    """A message's place in one queue. Mutable only in its delivery bookkeeping."""

    __slots__ = (
        "delivery_count",
        "downstream",
        "due",
        "key",
        "message",
        "origin",
        "replay",
        "seq",
        "taken_at",
    )

    def __init__(self, seq: int, message: Message, origin: tuple[str, int, str] | None) -> None:
        self.seq = seq
        self.message = message
        self.origin = origin
        self.delivery_count = 0
        self.taken_at = 0.0  # when it was last delivered (time.time()), for delivery timeouts
        # (queue, seq) of the entry a MOVE made of this one, while it is outstanding
        self.downstream: tuple[str, int] | None = None
        # True for history entries a start_at selector is replaying: settling them must
        # not add them to history a second time
        self.replay = False
        self.key: int | None = None  # a persistent store's row id for this entry
        # while scheduled (SPEC §8): when it is due; 0.0 otherwise
        self.due = 0.0

    def __repr__(self) -> str:
        return f"Entry(seq={self.seq}, mid={self.message.mid!r})"


class SelectorState:
    """Runtime state of one selector: remaining credit (-1 = unlimited) and the entries it
    has taken and not yet settled, keyed by delivery tag, in the order taken."""

    __slots__ = ("credit", "outstanding")

    def __init__(self, credit: int = -1) -> None:
        self.credit = credit
        self.outstanding: dict[str, Entry] = {}


class QueueState(ABC):
    """One queue's unprocessed section, history, counters and selector states."""

    name: str
    counters: dict[str, int]

    # -- unprocessed section -------------------------------------------------------------
    @abstractmethod
    def next_seq(self) -> int: ...

    @abstractmethod
    def last_seq(self) -> int:
        """The seq most recently given out (0 before the first message)."""

    @abstractmethod
    def depth(self) -> int: ...

    @abstractmethod
    def append(self, entry: Entry) -> None: ...

    @abstractmethod
    def head(self) -> Entry | None: ...

    @abstractmethod
    def pop_head(self) -> Entry: ...

    @abstractmethod
    def push_front(self, entries: list[Entry]) -> None:
        """Put entries back at the head, keeping their order (first one becomes the head)."""

    @abstractmethod
    def remove(self, seq: int) -> bool:
        """Withdraw the unprocessed entry `seq`; False if it is no longer unprocessed."""

    @abstractmethod
    def unprocessed(self, count: int) -> list[Entry]:
        """The oldest `count` unprocessed entries, oldest first."""

    # -- lifetime (SPEC §8, docs/lifetime.md) -----------------------------------------------
    @abstractmethod
    def set_levels(self, levels: int) -> None:
        """Route the unprocessed section by `levels` priority levels (1 = plain FIFO): the
        head is the oldest entry of the highest level holding one (header `priority`,
        missing = 0, clamped), FIFO within a level. The engine sets it on opening."""

    @abstractmethod
    def schedule(self, entry: Entry, retry: bool) -> None:
        """Hold `entry` out of routing until `entry.due`: a delayed arrival (`retry` False:
        it gets its seq when due) or a redelivery waiting out its delay (`retry` True: it
        keeps its seq and goes back to the head). O(log n)."""

    @abstractmethod
    def next_due(self) -> float | None:
        """When the soonest scheduled entry is due (None when none is scheduled)."""

    @abstractmethod
    def pop_due(self, now: float) -> tuple[Entry, bool] | None:
        """Take the soonest scheduled entry due at `now` (due time, then the order
        scheduled) with its `retry` flag; None when none is due. O(log n)."""

    @abstractmethod
    def scheduled(self) -> list[tuple[Entry, bool]]:
        """Every scheduled entry, soonest due first, with its `retry` flag."""

    @abstractmethod
    def scheduled_count(self) -> int: ...

    @abstractmethod
    def cancel(self, mid: str) -> list[Entry]:
        """Withdraw the scheduled entries of message `mid`; the ones withdrawn."""

    # -- history ---------------------------------------------------------------------------
    @abstractmethod
    def add_history(self, entry: Entry, keep: int) -> None:
        """Record a processed entry, keeping only the `keep` newest seqs."""

    @abstractmethod
    def trim_history(self, keep: int) -> None: ...

    @abstractmethod
    def history_size(self) -> int: ...

    @abstractmethod
    def history_oldest(self, count: int) -> list[Entry]: ...

    @abstractmethod
    def history_latest(self, count: int) -> list[Entry]: ...

    @abstractmethod
    def history_before(self, seq: int, count: int) -> list[Entry]:
        """Newest first, seqs strictly below `seq`."""

    @abstractmethod
    def history_after(self, seq: int, count: int) -> list[Entry]:
        """Oldest first, seqs strictly above `seq`."""

    @abstractmethod
    def history_since(self, timestamp: float) -> Iterator[Entry]: ...

    # -- selectors -------------------------------------------------------------------------
    @abstractmethod
    def selector(self, selector_id: int) -> SelectorState:
        """The state of a selector, created (unlimited credit, nothing outstanding) on first
        use."""

    @abstractmethod
    def has_selector(self, selector_id: int) -> bool:
        """Whether the store holds state for this selector (a persistent store may, from an
        earlier process)."""

    @abstractmethod
    def drop_selector(self, selector_id: int) -> None: ...


class Store(ABC):
    """A named storage back-end instance holding the state of many queues.

    A store whose `transactional` is True gets `begin()` before each engine operation and
    `commit()` (or `rollback()` on error) after it, so one publish or confirm is one
    transaction however many state changes it makes. Persistent stores must save an entry
    whenever it is set into `SelectorState.outstanding` (the engine sets it again after
    changing it) and treat `counters` and `credit` as write-through.
    """

    kind: str
    name: str
    url: str | None
    transactional = False

    def begin(self) -> None:  # noqa: B027 - optional hook
        """Start the transaction of one engine operation."""

    def commit(self) -> None:  # noqa: B027 - optional hook
        """Make the operation's changes durable."""

    def rollback(self) -> None:  # noqa: B027 - optional hook
        """Undo the operation's changes (it raised)."""

    @abstractmethod
    def open_queue(self, name: str) -> QueueState:
        """The state of queue `name`, created empty if it does not exist."""

    @abstractmethod
    def drop_queue(self, name: str) -> None:
        """Forget everything about queue `name`."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the RAM store has none."""
