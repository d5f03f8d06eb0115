"""What a queue holds, read without changing it: pages of its history, the messages
waiting unprocessed, its counters (SPEC §3). The Engine inherits these; they take the
engine lock and route nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from engine.errors import InvalidArgument
from engine.message import Message
from engine.rules import QueueRuntime
from engine.validation import check_count


class Queries:
    """Read-only queries, as methods the Engine inherits."""

    _lock: Any
    _queue: Callable[[object], QueueRuntime]
    _queues: dict[str, QueueRuntime]

    # == history =============================================================================
    def browse(
        self,
        queue: str,
        start: str | None = None,
        count: int = 50,
        *,
        before: int | None = None,
        after: int | None = None,
    ) -> list[Message]:
        """A page of `queue`'s history: `start="latest"` (default) or `before=seq` newest
        first, `start="oldest"` or `after=seq` oldest first; before/after are exclusive."""
        check_count("count", count, minimum=0)
        given = sum(x is not None for x in (start, before, after))
        if given > 1:
            raise InvalidArgument("give only one of start, before and after")
        if start not in (None, "latest", "oldest"):
            raise InvalidArgument(f"start must be 'latest' or 'oldest', not {start!r}")
        for name, seq in (("before", before), ("after", after)):
            if seq is not None:
                check_count(name, seq, minimum=0)
        with self._lock:
            state = self._queue(queue).state
            if before is not None:
                entries = state.history_before(before, count)
            elif after is not None:
                entries = state.history_after(after, count)
            elif start == "oldest":
                entries = state.history_oldest(count)
            else:
                entries = state.history_latest(count)
            return [entry.message.with_seq(entry.seq) for entry in entries]

    def since(self, queue: str, timestamp: float) -> Iterator[Message]:
        """History messages published at or after `timestamp`, oldest first."""
        if not isinstance(timestamp, int | float) or isinstance(timestamp, bool):
            raise InvalidArgument(f"timestamp must be a number of seconds, not {timestamp!r}")
        with self._lock:
            state = self._queue(queue).state
            found = [entry.message.with_seq(entry.seq) for entry in state.history_since(timestamp)]
        return iter(found)

    def peek(self, queue: str, count: int = 50) -> list[Message]:
        """The oldest `count` unprocessed messages (waiting to be routed), oldest first."""
        check_count("count", count, minimum=0)
        with self._lock:
            state = self._queue(queue).state
            return [entry.message.with_seq(entry.seq) for entry in state.unprocessed(count)]

    def holds_for_settlements(self, look_at: int) -> bool:
        """Whether a queue holds a message waiting to be routed that a settlement might let
        go: one of the queue's selectors has deliveries outstanding, and settling them (a
        confirm; up a chain of MOVEs, the confirm downstream) gives that selector's credit
        back. A message held while none of its queue's selectors has anything outstanding
        (no selector takes it, a filter refuses it, the credit is not what holds it) waits
        for no settlement. True without looking when there are more than `look_at` queues.
        (The service's router keeps ack:auto settlements waiting, and skips reading their
        list after a step, only while this is False: xumpweb/runtime.py.)"""
        with self._lock:
            if len(self._queues) > look_at:
                return True
            return any(
                qrt.state.depth() and any(sel.state.outstanding for sel in qrt.selectors.values())
                for qrt in self._queues.values()
            )

    def stats(self, queue: str) -> dict[str, int]:
        with self._lock:
            qrt = self._queue(queue)
            counters = dict(qrt.state.counters)
            counters["depth"] = qrt.state.depth()
            counters["history_size"] = qrt.state.history_size()
            counters["scheduled"] = qrt.state.scheduled_count()
            counters["outstanding"] = sum(len(s.state.outstanding) for s in qrt.selectors.values())
            return counters
