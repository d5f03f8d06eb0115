"""The RAM store: every queue's state in plain Python objects in this process.

The reference implementation of stores/base.py: fastest, and nothing survives a restart.
History is kept as two parallel lists (seqs and entries) sorted by seq with a moving start
offset, so appending is O(1), trimming is amortised O(1) and paging by seq is a bisect.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Iterator

from engine.stores.base import COUNTERS, Entry, QueueState, SelectorState, Store


class RamQueueState(QueueState):
    __slots__ = (
        "_hist_entries",
        "_hist_seqs",
        "_hist_start",
        "_last_seq",
        "_selectors",
        "_unprocessed",
        "counters",
        "name",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self._last_seq = 0
        self._unprocessed: deque[Entry] = deque()
        self._hist_seqs: list[int] = []
        self._hist_entries: list[Entry] = []
        self._hist_start = 0
        self._selectors: dict[int, SelectorState] = {}
        self.counters = dict.fromkeys(COUNTERS, 0)

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

    def remove(self, seq: int) -> bool:
        for entry in self._unprocessed:
            if entry.seq == seq:
                self._unprocessed.remove(entry)
                return True
        return False

    def unprocessed(self, count: int) -> list[Entry]:
        return [entry for _, entry in zip(range(count), self._unprocessed, strict=False)]

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
