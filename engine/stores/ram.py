"""The RAM store: every queue's state in plain Python objects in this process.

The reference implementation of stores/base.py: fastest, and nothing survives a restart.
History is kept as two parallel lists (seqs and entries) sorted by seq with a moving start
offset, so appending is O(1), trimming is amortised O(1) and paging by seq is a bisect.

Lifetime (SPEC §8): scheduled entries (delayed arrivals, redeliveries waiting out their
delay) sit in a heap ordered by (due, order scheduled), so scheduling and firing cost
O(log n) however many wait. Cancelling by mid is O(log n) too: an index by mid finds the
entries, which leave the live set at once and the heap lazily (a cancelled item is passed
over when it comes to the top; the heap is rebuilt when dead ones outnumber live ones).
A queue with several priority levels keeps one FIFO deque per level (`Lanes`, standing in
for the single deque `_unprocessed` of a plain queue, which pays nothing for it).
"""

from __future__ import annotations

import heapq
import itertools
from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from engine.message import Message
from engine.stores.base import COUNTERS, Entry, QueueState, SelectorState, Store


class RamQueueState(QueueState):
    __slots__ = (
        "_hist_entries",
        "_hist_seqs",
        "_hist_start",
        "_last_seq",
        "_levels",
        "_order",
        "_schedule",
        "_scheduled_by_mid",
        "_scheduled_live",
        "_selectors",
        "_unprocessed",
        "counters",
        "name",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self._last_seq = 0
        # a deque; with priority levels, Lanes (which acts as one, so no method here needs
        # to ask which it is)
        self._unprocessed: deque[Entry] | Lanes = deque()
        self._hist_seqs: list[int] = []
        self._hist_entries: list[Entry] = []
        self._hist_start = 0
        self._selectors: dict[int, SelectorState] = {}
        self.counters = dict.fromkeys(COUNTERS, 0)
        self._levels = 1
        # (due, order, entry, retry) of every scheduled entry, and of cancelled ones not yet
        # come to the top; the live ones by order, and their orders by mid
        self._schedule: list[tuple[float, int, Entry, bool]] = []
        self._scheduled_live: dict[int, tuple[float, int, Entry, bool]] = {}
        self._scheduled_by_mid: dict[str, list[int]] = {}
        self._order = itertools.count()

    # -- unprocessed -------------------------------------------------------------------
    def next_seq(self) -> int:
        self._last_seq += 1
        return self._last_seq

    def last_seq(self) -> int:
        return self._last_seq

    def depth(self) -> int:
        return len(self._unprocessed)

    def append(self, entry: Entry) -> None:
        self._unprocessed.append(entry)

    def head(self) -> Entry | None:
        return self._unprocessed[0] if self._unprocessed else None

    def pop_head(self) -> Entry:
        return self._unprocessed.popleft()

    def push_front(self, entries: list[Entry]) -> None:
        self._unprocessed.extendleft(reversed(entries))

    def take_out(self, seq: int) -> Entry | None:
        """Withdraw the unprocessed entry `seq` (None if it is not unprocessed)."""
        for entry in self._unprocessed:
            if entry.seq == seq:
                self._unprocessed.remove(entry)
                return entry
        return None

    def remove(self, seq: int) -> bool:
        return self.take_out(seq) is not None

    def all_unprocessed(self) -> list[Entry]:
        """The unprocessed section in routing order."""
        return list(self._unprocessed)

    def unprocessed(self, count: int) -> list[Entry]:
        return [entry for _, entry in zip(range(count), self._unprocessed, strict=False)]

    # -- lifetime --------------------------------------------------------------------------
    def set_levels(self, levels: int) -> None:
        if levels == self._levels:
            return
        entries = list(self._unprocessed)
        self._levels = levels
        self._unprocessed = deque(entries) if levels == 1 else Lanes(levels, entries)

    def schedule(self, entry: Entry, retry: bool) -> None:
        order = next(self._order)
        item = (entry.due, order, entry, retry)
        heapq.heappush(self._schedule, item)
        self._scheduled_live[order] = item
        self._scheduled_by_mid.setdefault(entry.message.mid, []).append(order)

    def _live_top(self) -> tuple[float, int, Entry, bool] | None:
        """The soonest live scheduled item, cancelled ones above it dropped."""
        waiting, live = self._schedule, self._scheduled_live
        while waiting and waiting[0][1] not in live:
            heapq.heappop(waiting)
        return waiting[0] if waiting else None

    def next_due(self) -> float | None:
        top = self._live_top()
        return None if top is None else top[0]

    def pop_due(self, now: float) -> tuple[Entry, bool] | None:
        top = self._live_top()
        if top is None or top[0] > now:
            return None
        _, order, entry, retry = heapq.heappop(self._schedule)
        del self._scheduled_live[order]
        orders = self._scheduled_by_mid[entry.message.mid]
        orders.remove(order)
        if not orders:
            del self._scheduled_by_mid[entry.message.mid]
        return entry, retry

    def scheduled(self) -> list[tuple[Entry, bool]]:
        live = self._scheduled_live.values()
        return [(item[2], item[3]) for item in sorted(live, key=_by_due)]

    def scheduled_count(self) -> int:
        return len(self._scheduled_live)

    def cancel(self, mid: str) -> list[Entry]:
        orders = self._scheduled_by_mid.pop(mid, None)
        if not orders:
            return []
        live = self._scheduled_live
        gone = [live.pop(order)[2] for order in orders]
        if len(self._schedule) > 2 * len(live) + 64:
            self._schedule = list(live.values())  # mostly cancelled: rebuilt, amortised
            heapq.heapify(self._schedule)
        return gone

    # -- history -----------------------------------------------------------------------
    def add_history(self, entry: Entry, keep: int) -> None:
        if keep <= 0:
            return
        seqs = self._hist_seqs
        if not seqs or entry.seq > seqs[-1]:
            seqs.append(entry.seq)
            self._hist_entries.append(entry)
        else:
            at = bisect_left(seqs, entry.seq, lo=self._hist_start)
            if at < len(seqs) and seqs[at] == entry.seq:
                self.forget([self._hist_entries[at]])
                self._hist_entries[at] = entry
                return
            insort(seqs, entry.seq, lo=self._hist_start)
            self._hist_entries.insert(at, entry)
        if len(seqs) - self._hist_start > keep:
            self.trim_history(keep)

    def trim_history(self, keep: int) -> None:
        start = max(self._hist_start, len(self._hist_seqs) - max(keep, 0))
        if start > self._hist_start:
            self.forget(self._hist_entries[self._hist_start : start])
        self._hist_start = start
        if self._hist_start > 1024 and self._hist_start * 2 > len(self._hist_seqs):
            del self._hist_seqs[: self._hist_start]
            del self._hist_entries[: self._hist_start]
            self._hist_start = 0

    def forget(self, entries: list[Entry]) -> None:
        """Entries leaving history (trimmed or replaced); persistent stores delete them."""

    def history_size(self) -> int:
        return len(self._hist_seqs) - self._hist_start

    def history_oldest(self, count: int) -> list[Entry]:
        start = self._hist_start
        return self._hist_entries[start : start + count]

    def history_latest(self, count: int) -> list[Entry]:
        start = max(self._hist_start, len(self._hist_entries) - count)
        return self._hist_entries[start:][::-1]

    def history_before(self, seq: int, count: int) -> list[Entry]:
        end = bisect_left(self._hist_seqs, seq, lo=self._hist_start)
        start = max(self._hist_start, end - count)
        return self._hist_entries[start:end][::-1]

    def history_after(self, seq: int, count: int) -> list[Entry]:
        start = bisect_right(self._hist_seqs, seq, lo=self._hist_start)
        return self._hist_entries[start : start + count]

    def history_since(self, timestamp: float) -> Iterator[Entry]:
        for entry in self._hist_entries[self._hist_start :]:
            if entry.message.timestamp is not None and entry.message.timestamp >= timestamp:
                yield entry

    # -- selectors ---------------------------------------------------------------------
    def selector(self, selector_id: int) -> SelectorState:
        state = self._selectors.get(selector_id)
        if state is None:
            state = self._selectors[selector_id] = SelectorState()
        return state

    def has_selector(self, selector_id: int) -> bool:
        return selector_id in self._selectors

    def drop_selector(self, selector_id: int) -> None:
        self._selectors.pop(selector_id, None)


def _by_due(item: tuple[float, int, Entry, bool]) -> tuple[float, int]:
    return item[0], item[1]


class Lanes:
    """The unprocessed section of a queue with priority levels: one FIFO deque per level,
    read highest level first. It offers the deque operations the stores use."""

    __slots__ = ("lanes", "levels", "size")

    def __init__(self, levels: int, entries: Iterable[Entry] = ()) -> None:
        self.levels = levels
        self.lanes: list[deque[Entry]] = [deque() for _ in range(levels)]
        self.size = 0
        for entry in entries:
            self.append(entry)

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def __iter__(self) -> Iterator[Entry]:
        for lane in reversed(self.lanes):
            yield from lane

    def __getitem__(self, index: int) -> Entry:
        if index == 0:
            for lane in reversed(self.lanes):
                if lane:
                    return lane[0]
            raise IndexError("no unprocessed entries")
        return list(self)[index]

    def append(self, entry: Entry) -> None:
        self.lanes[level(entry.message, self.levels)].append(entry)
        self.size += 1

    def appendleft(self, entry: Entry) -> None:
        self.lanes[level(entry.message, self.levels)].appendleft(entry)
        self.size += 1

    def extendleft(self, entries: Iterable[Entry]) -> None:
        for entry in entries:
            self.appendleft(entry)

    def popleft(self) -> Entry:
        for lane in reversed(self.lanes):
            if lane:
                self.size -= 1
                return lane.popleft()
        raise IndexError("no unprocessed entries")

    def remove(self, entry: Entry) -> None:
        self.lanes[level(entry.message, self.levels)].remove(entry)
        self.size -= 1


def level(message: Message, levels: int) -> int:
    """The priority level of `message` in a queue of `levels` levels: its `priority` header
    (validated on publish), missing = 0, clamped to 0 .. levels - 1."""
    value: Any = message.headers.get("priority")
    if value is None:
        return 0
    try:
        found = int(value)
    except (TypeError, ValueError, OverflowError):
        return 0
    return 0 if found < 0 else min(found, levels - 1)


class RamStore(Store):
    kind = "ram"

    def __init__(self, name: str, url: str | None = None) -> None:
        self.name = name
        self.url = url
        self._queues: dict[str, RamQueueState] = {}

    def open_queue(self, name: str) -> RamQueueState:
        state = self._queues.get(name)
        if state is None:
            state = self._queues[name] = RamQueueState(name)
        return state

    def drop_queue(self, name: str) -> None:
        self._queues.pop(name, None)
