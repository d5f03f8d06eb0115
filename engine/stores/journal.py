"""Write-through queue state, shared by the persistent stores (sql.py, redis.py).

Theory of operation: a journaled queue holds its state in memory exactly as the RAM store
does (it subclasses ram.py) and reports every change to its store as a record: an entry
written into a section, an entry deleted, the queue's counters and positions changed, a
selector's credit changed. The store collects the records of one engine operation and
makes them durable together at `commit()` (the engine calls `begin`/`commit` around every
publish, confirm, ...). Opening a queue loads its state back from the store, so a new
process finds unprocessed messages, history, outstanding deliveries (still confirmable by
tag), credit and counters where the last one left them.

Sections of an entry: "u" unprocessed (with a position giving FIFO order, so push_front is
a smaller position), "h" history, "o" outstanding at a selector under a tag, "s" scheduled
(a delayed arrival) and "w" waiting out a redelivery delay, both with their due time. An entry that
moves between sections is deleted and written again under a new key. Each store counts the
entries holding a body (by `mid`) in its own records, so it keeps each body once and drops
it with its last entry. A store may keep a section its own way by subclassing
JournaledQueueState (`JournaledStore.queue_class`): the Redis store keeps the unprocessed
section as a list.

One process owns a journaled store's queues at a time; the engine's lock orders its calls.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from engine.stores.base import Entry, SelectorState
from engine.stores.ram import RamQueueState, RamStore


class _Counters(dict):
    """The queue's counters; a change marks the queue for saving at commit."""

    __slots__ = ("_queue",)

    def __init__(self, queue: JournaledQueueState, values: dict[str, int]) -> None:
        super().__init__(values)
        self._queue = queue

    # dict.__setitem__ and the RAM state's methods called by name, not through super():
    # these run several times per routed message, and super() costs a third of a call
    def __setitem__(self, name: str, value: int) -> None:
        dict.__setitem__(self, name, value)
        queue = self._queue
        if not queue._dirty:  # a hot path: saves a call per counter change
            queue.touch()


class _Outstanding(dict):
    """tag -> Entry for one selector; every change is recorded (section "o")."""

    __slots__ = ("_queue", "_selector_id")

    def __init__(self, queue: JournaledQueueState, selector_id: int) -> None:
        super().__init__()
        self._queue = queue
        self._selector_id = selector_id

    def __setitem__(self, tag: str, entry: Entry) -> None:
        dict.__setitem__(self, tag, entry)
        self._queue.write_entry(entry, "o", 0, self._selector_id, tag)

    def pop(self, tag: str, *default: Any) -> Any:
        if tag in self:
            entry = dict.pop(self, tag)
            self._queue.delete_entry(entry)
            return entry
        if default:
            return default[0]
        raise KeyError(tag)

    def clear(self) -> None:
        for entry in self.values():
            self._queue.delete_entry(entry)
        super().clear()


class JournaledSelectorState(SelectorState):
    """Credit recorded on every change; outstanding entries recorded by _Outstanding.

    Credit is read several times per routed message and changed less often, so reads stay
    plain slot reads and only writes go through Python (__setattr__, not a property)."""

    __slots__ = ("_queue", "_selector_id")

    def __init__(self, queue: JournaledQueueState, selector_id: int, credit: int) -> None:
        setattr_ = object.__setattr__
        setattr_(self, "_queue", queue)
        setattr_(self, "_selector_id", selector_id)
        setattr_(self, "credit", credit)
        setattr_(self, "outstanding", _Outstanding(queue, selector_id))

    def __setattr__(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)
        if name == "credit" and not self._queue.loading:
            self._queue.store.record_credit(self._queue, self._selector_id, value)


class JournaledQueueState(RamQueueState):
    """The RAM store's state plus a record of every change (see the module docstring)."""

    __slots__ = ("_dirty", "head_position", "loading", "store", "tail_position")

    def __init__(self, store: JournaledStore, name: str) -> None:
        super().__init__(name)
        self.store = store
        self.head_position = 0  # position of the front of the unprocessed section
        self.tail_position = 0
        self._dirty = False
        self.loading = True
        self.counters = _Counters(self, self.counters)
        store.load_queue(self)
        self.loading = False

    # -- records -----------------------------------------------------------------------
    def touch(self) -> None:
        if not self.loading and not self._dirty:
            self._dirty = True
            self.store.dirty.append(self)

    def saved(self) -> None:
        self._dirty = False

    @property
    def last_seq_value(self) -> int:
        return self._last_seq

    def write_entry(
        self,
        entry: Entry,
        section: str,
        position: int,
        selector_id: int | None = None,
        tag: str | None = None,
    ) -> None:
        if self.loading:
            return
        if entry.key is not None:
            self.delete_entry(entry)
        entry.key = self.store.next_key()
        self.store.record_entry(self, entry, section, position, selector_id, tag)

    def delete_entry(self, entry: Entry) -> None:
        if entry.key is None or self.loading:
            return
        self.store.record_deletion(self, entry)
        entry.key = None

    # -- loading helpers (the store calls these from load_queue) -----------------------
    def restore(self, entry: Entry, section: str, selector_id: int | None, tag: str | None) -> None:
        """Put a loaded entry back where it was; entries come in FIFO / seq order."""
        if section == "u":
            self._unprocessed.append(entry)  # before set_levels, which sorts into lanes
        elif section in ("s", "w"):
            RamQueueState.schedule(self, entry, section == "w")
        elif section == "h":
            self._hist_seqs.append(entry.seq)
            self._hist_entries.append(entry)
        else:
            dict.__setitem__(self.selector(selector_id).outstanding, tag, entry)  # type: ignore

    def restore_meta(self, last_seq: int, head: int, tail: int, counters: dict[str, int]) -> None:
        self._last_seq = last_seq
        self.head_position = head
        self.tail_position = tail
        dict.update(self.counters, counters)

    def restore_credit(self, selector_id: int, credit: int) -> None:
        self._selectors[selector_id] = JournaledSelectorState(self, selector_id, credit)

    # -- the RAM state, recorded -------------------------------------------------------
    def next_seq(self) -> int:
        seq = RamQueueState.next_seq(self)
        self.touch()
        return seq

    def append(self, entry: Entry) -> None:
        RamQueueState.append(self, entry)
        self.tail_position += 1
        self.touch()
        self.write_entry(entry, "u", self.tail_position)

    def pop_head(self) -> Entry:
        entry = RamQueueState.pop_head(self)
        self.delete_entry(entry)
        return entry

    def push_front(self, entries: list[Entry]) -> None:
        super().push_front(entries)
        for entry in reversed(entries):
            self.head_position -= 1
            self.write_entry(entry, "u", self.head_position)
        self.touch()

    def remove(self, seq: int) -> bool:
        entry = self.take_out(seq)
        if entry is None:
            return False
        self.delete_entry(entry)
        return True

    def schedule(self, entry: Entry, retry: bool) -> None:
        super().schedule(entry, retry)
        self.write_entry(entry, "w" if retry else "s", 0)

    def pop_due(self, now: float) -> tuple[Entry, bool] | None:
        found = super().pop_due(now)
        if found is not None:
            self.delete_entry(found[0])
        return found

    def cancel(self, mid: str) -> list[Entry]:
        gone = super().cancel(mid)
        for entry in gone:
            self.delete_entry(entry)
        return gone

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
            state = self._selectors[selector_id] = JournaledSelectorState(self, selector_id, -1)
            state.credit = -1
        return state

    def drop_selector(self, selector_id: int) -> None:
        state = self._selectors.pop(selector_id, None)
        if state is not None:
            state.outstanding.clear()
            self.store.record_selector_dropped(self, selector_id)

    def held_entries(self) -> list[Entry]:
        """Every entry of the queue: unprocessed, history and outstanding."""
        held = [*self.all_unprocessed(), *self._hist_entries[self._hist_start :]]
        held.extend(item[2] for item in self._scheduled_live.values())
        for selector in self._selectors.values():
            held.extend(selector.outstanding.values())
        return held


class JournaledStore(RamStore):
    """A store whose queues are journaled; subclasses make the records durable."""

    transactional = True
    queue_class: type[JournaledQueueState] = JournaledQueueState

    def __init__(self, name: str, url: str | None = None) -> None:
        super().__init__(name, url)
        self.dirty: list[JournaledQueueState] = []
        self._last_key = 0
        self._holding = 0  # > 0 while a caller batches several operations into one commit

    def next_key(self) -> int:
        self._last_key += 1
        return self._last_key

    def open_queue(self, name: str) -> JournaledQueueState:  # type: ignore[override]
        state = self._queues.get(name)
        if state is None:
            state = self._queues[name] = self.queue_class(self, name)  # type: ignore
        return state  # type: ignore[return-value]

    def drop_queue(self, name: str) -> None:
        state = self._queues.get(name)
        if state is not None:
            self.record_queue_dropped(state)  # type: ignore[arg-type]
        super().drop_queue(name)

    # -- transactions --------------------------------------------------------------------
    def begin(self) -> None:
        if not self._holding:
            self.discard_records()

    def hold(self) -> None:
        """Until `release()`, the operations' records accumulate into one commit."""
        self._holding += 1

    def release(self) -> None:
        """Commit everything recorded since `hold()`."""
        self._holding -= 1
        if not self._holding:
            self.commit()

    def commit(self) -> None:
        if self._holding:
            return
        for state in self.dirty:
            self.record_meta(state)
            state.saved()
        self.dirty.clear()
        self.flush()

    def rollback(self) -> None:
        """The operation raised. The engine does not undo what it changed in memory, so the
        store is kept in step with memory: what was done is recorded, as at commit."""
        self.commit()

    # -- what a backend provides -----------------------------------------------------------
    @abstractmethod
    def load_queue(self, state: JournaledQueueState) -> None:
        """Fill a new state from storage with restore_meta / restore_credit / restore, and
        keep `_last_key` above every stored key."""

    @abstractmethod
    def record_entry(
        self,
        state: JournaledQueueState,
        entry: Entry,
        section: str,
        position: int,
        selector_id: int | None,
        tag: str | None,
    ) -> None: ...

    @abstractmethod
    def record_deletion(self, state: JournaledQueueState, entry: Entry) -> None: ...

    @abstractmethod
    def record_meta(self, state: JournaledQueueState) -> None:
        """Save last seq, head/tail positions and counters."""

    @abstractmethod
    def record_credit(self, state: JournaledQueueState, selector_id: int, credit: int) -> None: ...

    @abstractmethod
    def record_selector_dropped(self, state: JournaledQueueState, selector_id: int) -> None: ...

    @abstractmethod
    def record_queue_dropped(self, state: JournaledQueueState) -> None:
        """Forget the queue; the bodies its entries held are released by the store."""

    @abstractmethod
    def discard_records(self) -> None:
        """Forget records not yet flushed (a new operation starts)."""

    @abstractmethod
    def flush(self) -> None:
        """Make this operation's records (and the body counts they change) durable,
        atomically."""
