"""The routing rules of SPEC §2 over the engine's runtime state.

Theory of operation (a protocol core in the manner of h11: no I/O of its own):

* Every public Engine call runs its state change through `_run`, which routes whatever became
  routable and returns the Deliveries that caused. Nothing happens between calls; output
  only follows input.
* A message arriving at a queue becomes an `Entry`. An idle, empty queue routes it at once
  (the fast path); otherwise it waits at the tail of the unprocessed section and the queue
  is scheduled. `_drain` routes scheduled queues from their head, strictly FIFO, stopping at
  a head that must wait (takers matched, none with credit; or no routing selectors at all).
  Fast-path nesting is bounded, so long chains of queues fall back to the worklist and never
  exhaust the stack.
* Routing an entry: the queue's routing table answers (copies, takers). The taker with
  credit and the lowest turn takes the message and gets a new turn (round-robin). COPYs run
  first; a message never arrives twice at the same queue within one public call
  (`_visited`), which also stops cycles.
* A taken entry stays *outstanding* at its selector. When it is settled (confirmed, deleted,
  or its moved copy settled downstream) the selector gets its credit back and the entry is
  processed, which settles the entry it came from: credit flows up a chain of MOVEs as
  messages flow down (`_settle`).
* Dead letters and drops also settle the entry's origin: a MOVE's message is settled when it
  leaves the target queue's accounting in any way.
* Lifetime (SPEC §8, docs/lifetime.md): routing an entry first checks its expiry (message
  and queue TTL, the sooner wins) against the engine's time, the later of the wall clock
  and the latest `tick(now)`; an expired entry is dead-lettered (`x-reason: expired`), never
  taken. Taking for a DELIVER checks `max_deliveries`. Delayed arrivals and redeliveries
  waiting out their delay sit in the store's schedule (a heap) and come back in `tick`;
  entries that can expire while they wait are watched in a per-queue heap of expiry
  times, so `tick` finds them without scanning the queue.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections import deque
from collections.abc import Callable
from functools import partial
from types import MappingProxyType
from typing import Any

from engine.catalog import QueueSpec
from engine.errors import InvalidName, QueueFull
from engine.event_journal import EventJournal
from engine.message import Delivery, Message
from engine.routing_table import RoutingTable, SelectorRuntime
from engine.stores.base import Entry, QueueState, Store
from engine.validation import check_name

# NamedTuple constructors without the keyword-handling wrapper: the hot path builds a
# Message and a Delivery for every delivery, always with every field given in order.
_new_message = partial(tuple.__new__, Message)
# Message fields by position, for journal records: CPython 3.11 does not specialise a
# NamedTuple's attributes, and reading one by index costs about a third as much
_ADDRESS, _MID, _TIMESTAMP = (Message._fields.index(f) for f in ("address", "mid", "timestamp"))
_new_delivery = partial(tuple.__new__, Delivery)

_now = time.time

# Fast-path routing recurses along a chain of queues; past this depth arrivals queue up
# and the worklist takes over.
_MAX_NESTING = 40

# Ties in a queue's heap of expiry times: the same entry may be watched twice (given back)
_watch_order = itertools.count()

# History entries a replay reads at a time (rule 13)
_REPLAY_PAGE = 100


class QueueRuntime:
    """One queue's settings (copied out of its spec for speed), state and routing table."""

    __slots__ = (
        "busy",
        "counters",
        "dead_letter",
        "deleted",
        "expiries",
        "history",
        "journal",
        "limit",
        "max_deliveries",
        "name",
        "publish_site",
        "recorder",
        "redelivery",
        "routing_table",
        "scheduled",
        "selectors",
        "spec",
        "state",
        "ttl",
    )

    remote: str | None = None  # a local queue (a stand-in of another shard's: its shard)

    def __init__(
        self, spec: QueueSpec, state: QueueState, recorder: Callable[[tuple], None] | None = None
    ) -> None:
        self.name = spec.name
        self.recorder = recorder  # the engine's event journal append, if it keeps one
        self.publish_site = ("publish", spec.name, None, None)  # its publishes' journal site
        self.spec = spec
        self.state = state
        self.counters = state.counters  # the store's counters, held here for speed
        self.selectors: dict[int, SelectorRuntime] = {}
        self.routing_table = RoutingTable()
        self.scheduled = False
        self.busy = False  # being routed right now (further up the stack)
        self.deleted = False
        # (expires at, order, entry) of unprocessed entries that can expire; None until built
        # from the unprocessed section (a queue loaded from a persistent store)
        self.expiries: list[tuple[float, int, Entry]] | None = [] if not state.depth() else None
        self.apply(spec)

    def apply(self, spec: QueueSpec) -> None:
        self.spec = spec
        self.limit = spec.limit
        self.history = spec.history
        self.dead_letter = spec.dead_letter
        # where this queue's events go (event_journal.py); None records nothing
        self.journal = self.recorder if spec.journal else None
        self.max_deliveries = spec.max_deliveries
        self.ttl = spec.ttl
        self.redelivery = (
            (spec.redelivery_delay, spec.redelivery_backoff, spec.redelivery_delay_max)
            if spec.redelivery_delay
            else None
        )
        self.state.set_levels(spec.priorities)

    def redelivery_wait(self, delivery_count: int) -> float:
        """Seconds a message delivered `delivery_count` times waits before it is routable
        again: delay x backoff^(delivery_count - 1), capped at redelivery_delay_max."""
        delay, backoff, cap = self.redelivery  # type: ignore[misc]
        try:
            wait = delay * backoff ** max(delivery_count - 1, 0)
        except OverflowError:
            wait = float("inf")
        return wait if cap is None or wait <= cap else cap

    def expires_at(self, message: Message) -> float | None:
        """When `message` expires in this queue (the sooner of its ttl and the queue's), or
        None. Both count from the message's timestamp."""
        ttl = message.ttl
        queue_ttl = self.ttl
        if queue_ttl is not None and (ttl is None or queue_ttl < ttl):
            ttl = queue_ttl
        if ttl is None or message.timestamp is None:
            return None
        return message.timestamp + ttl


class Rules:
    """The routing rules, as methods the Engine inherits. They run under the engine lock."""

    _queues: dict[str, QueueRuntime]
    _pending: deque[QueueRuntime]
    _out: list[Delivery]
    _visited: set[tuple[str | None, str]]
    _nesting: int
    _turns: itertools.count[int]
    _serials: itertools.count[int]
    _transactional: list[Store]  # stores that want begin/commit around each operation
    _journal: EventJournal | None
    _clock = 0.0  # when the current call started, for its journal events
    _tick_now = 0.0  # the latest `tick(now)`: the engine's time never runs behind it
    _timed: set[QueueRuntime]  # queues with scheduled entries or expiries to watch
    _remote: dict[str, Any]  # stand-ins of other shards' queues (forwarding.py)
    _forwards: list[Any]  # forwarding.py: arrivals at stand-ins, not yet taken
    _settles: list[Any]  # forwarding.py: other shards' origins to settle
    _forward: Callable[..., None]  # forwarding.py: an arrival at a stand-in
    _forward_all: Callable[..., None]  # forwarding.py: a publish into a stand-in
    _settle_remote: Callable[[str, int, str], bool]  # forwarding.py: another shard's origin
    _elsewhere: Callable[[str], str | None]  # forwarding.py: a destination read elsewhere
    _local_shard: str | None = None  # forwarding.py: the one shard this engine routes

    def _target_named(self, name: str) -> QueueRuntime | None:
        """The queue (or another shard's queue's stand-in) a target name names."""
        found = self._queues.get(name)
        return found if found is not None else self._remote.get(name)

    def _time(self) -> float:
        """The engine's time: the wall clock, or the latest tick's `now` if that is later
        (so tests drive time forward with `tick(now)`)."""
        now = _now()
        return now if now >= self._tick_now else self._tick_now

    def _run(self, operation, *args) -> list[Delivery]:  # type: ignore[no-untyped-def]
        """Run one state change, route what it made routable, return the Deliveries."""
        transactional = self._transactional
        journal = self._journal
        if journal is not None:
            now = _now()  # one time for the events of one call: cheaper than each; the
            self._clock = now if now >= self._tick_now else self._tick_now  # engine's (_time)
            buffer = journal.buffer
            mark = len(buffer)
            if mark > journal.full_at:  # the previous call's excess (event_journal.py)
                journal.enforce_capacity()
                mark = len(buffer)
        forwards, settles = self._forwards, self._settles  # forwarding.py
        crossed = (len(forwards), len(settles))
        try:
            for store in transactional:
                store.begin()
            operation(*args)
            if self._pending:
                self._drain()
            for store in transactional:
                store.commit()
            return self._out
        except BaseException:
            for store in transactional:
                store.rollback()
            if journal is not None:
                journal.forget_after(mark)
            del forwards[crossed[0] :], settles[crossed[1] :]
            raise
        finally:
            self._out = []
            self._visited.clear()
            if self._pending:
                for qrt in self._pending:
                    qrt.scheduled = False
                self._pending.clear()

    def _schedule(self, qrt: QueueRuntime) -> None:
        if not qrt.scheduled:
            qrt.scheduled = True
            self._pending.append(qrt)

    def _drain(self) -> None:
        pending = self._pending
        while pending:
            qrt = pending.popleft()
            qrt.scheduled = False
            if not qrt.deleted:
                self._route_queue(qrt)

    def _route_queue(self, qrt: QueueRuntime) -> None:
        """Route `qrt` from its head until it is empty or its head must wait."""
        table = qrt.routing_table
        head = qrt.state.head
        route = self._route_entry
        qrt.busy = True
        try:
            while (entry := head()) is not None and route(qrt, table, entry, True):
                pass
        finally:
            qrt.busy = False

    def _route_entry(
        self, qrt: QueueRuntime, table: RoutingTable, entry: Entry, queued: bool
    ) -> bool:
        """Route one entry (the queue's head when `queued`); False when it must wait."""
        message = entry.message
        if message.ttl is not None or qrt.ttl is not None:
            expires = qrt.expires_at(message)
            if expires is not None and expires <= self._time():
                if queued:
                    qrt.state.pop_head()
                self._expired(qrt, entry)
                return True
        copies, takers = table.match(message)
        if not copies and not takers:
            if table.defaults:
                copies, takers = table.fallback()
            elif not table.routing:
                return False  # rule 6: nothing to route with; hold
            else:
                if queued:
                    qrt.state.pop_head()
                qrt.counters["routed"] += 1
                self._dead_letter(qrt, entry, "unroutable")
                return True
        taker = None
        if takers:
            taker = _choose_taker(takers)
            if taker is None:
                return False  # rule 4: wait for credit, in order
            taker.turn = next(self._turns)  # rotated to the end of the takers
        if queued:
            qrt.state.pop_head()
        qrt.counters["routed"] += 1
        if copies:
            visited = self._visited
            mid = message.mid
            for sel in copies:
                if (mid, sel.target) not in visited:
                    self._copy(qrt, sel, message)
        if taker is None:
            self._processed(qrt, entry)
        else:
            self._take(qrt, taker, entry)
        return True

    def _copy(self, qrt: QueueRuntime, sel: SelectorRuntime, message: Message) -> None:
        target = sel.target_queue
        if sel.target_from is not None:
            target, failure = self._named_target(qrt, sel, message)
            if target is None:
                # the copy cannot go where the message says: its dead letter goes instead
                # (the message itself was not taken, so nothing upstream is settled)
                self._send_dead_letter(qrt, message, *failure)  # type: ignore[misc]
                return
            if (message.mid, target.name) in self._visited:
                return  # never twice into one queue in one step (rule 2)
        if target is not None:
            journal = qrt.journal
            if journal is not None:
                site = sel.took_site or ("route", qrt.name, sel.id, target.name)
                journal((self._clock, site, message[_MID], "copy", None))
            self._visited.add((message.mid, target.name))
            self._arrive(target, message, None)

    def _take(self, qrt: QueueRuntime, sel: SelectorRuntime, entry: Entry) -> None:
        state = sel.state
        action = sel.action
        if action == "delete":
            journal = qrt.journal
            if journal is not None:
                site = sel.took_site or ("delete", qrt.name, sel.id, None)
                journal((self._clock, site, entry.message[_MID], None, None))
            self._processed(qrt, entry)
            return
        message = entry.message
        destination = sel.target
        if sel.target_from is not None:
            found, failure = self._named_target(qrt, sel, message)
            if found is None:
                self._dead_letter(qrt, entry, *failure)  # type: ignore[misc]
                return
            if action == "deliver":
                destination = found  # type: ignore[assignment]
            else:
                target = found
        elif action != "deliver":
            target = sel.target_queue
        if action == "deliver" and self._local_shard is not None:
            home = self._elsewhere(destination)  # type: ignore[arg-type]
            if home is not None:
                # read on another shard: a MOVE into its delivery queue there, the queue of
                # the destination's name (forwarding.py), settled back when it is acked
                target = self._remote.get(destination)  # type: ignore[assignment]
                if target is None:
                    detail = no_delivery_queue(destination, home)  # type: ignore[arg-type]
                    self._dead_letter(qrt, entry, "no-target", detail, {"x-target": destination})
                    return
                action = "move"
                qrt.counters["delivered"] += 1  # through its delivery queue: acks settle back
        mid = message.mid
        if action != "deliver" and (mid, target.name) in self._visited:  # type: ignore
            # a cycle of MOVEs brought it back within one step: stop it here
            self._dead_letter(qrt, entry, "unroutable")
            return
        if action == "deliver":
            limit = qrt.max_deliveries
            if limit is not None and entry.delivery_count >= limit:
                self._delivery_limited(qrt, entry)
                return
        if state.credit > 0:
            state.credit -= 1
        tag = f"{sel.tag_prefix}{next(self._serials)}"
        if action == "deliver":
            count = entry.delivery_count = entry.delivery_count + 1
            now = _now()
            if now < self._tick_now:
                now = self._tick_now
            entry.taken_at = now
            state.outstanding[tag] = entry
            qrt.counters["delivered"] += 1
            journal = qrt.journal
            if journal is not None:
                site = sel.took_site or ("deliver", qrt.name, sel.id, destination)
                journal((now, site, mid, count > 1, tag))  # True: "redelivered" when read
            self._out.append(
                _new_delivery(
                    (
                        tag,
                        destination,
                        qrt.name,
                        sel.id,
                        _new_message(
                            (
                                message.address,
                                message.headers,
                                message.body,
                                message.return_address,
                                mid,
                                entry.seq,
                                message.timestamp,
                                destination,
                                message.ttl,
                                message.delay,
                            )
                        ),
                        count > 1,
                        count,
                    )
                )
            )
            return
        outstanding = state.outstanding
        outstanding[tag] = entry
        journal = qrt.journal
        if journal is not None:
            site = sel.took_site
            if target is not sel.target_queue:  # named by the message, or another shard's
                site = ("route", qrt.name, sel.id, target.name)  # type: ignore[union-attr]
            journal((self._clock, site, mid, action, None))
        if action == "bounce":
            message = _bounced(message)
        self._visited.add((mid, target.name))
        moved = self._arrive(target, message, (qrt.name, sel.id, tag), entry.delivery_count)
        if moved is not None and tag in outstanding:
            entry.downstream = (target.name, moved.seq)
            outstanding[tag] = entry  # stores persist an entry when it is set
        elif target.remote is not None and tag in outstanding:  # type: ignore[union-attr]
            entry.downstream = (target.name, 0)  # another shard's now (forwarding.py)
            outstanding[tag] = entry

    def _arrive(
        self,
        qrt: QueueRuntime,
        message: Message,
        origin: tuple[str, int, str] | None,
        delivery_count: int = 0,
        direct: bool = False,
        published: bool = False,
    ) -> Entry | None:
        """A message arrives at `qrt` (rule 7 when full). Returns its entry, or None when it
        was not kept there (overflow: dropped, dead-lettered or taken at once; or it went
        to another shard: forwarding.py). A MOVE passes on the deliveries the message had
        (`delivery_count`: work given back to a pack is redelivered, as a requeue is).
        `published`: an application published it into `qrt` (a local queue); its publish
        event is recorded here, where its seq is given and before anything routes it."""
        if qrt.remote is not None:
            self._forward(qrt, message, origin, delivery_count)
            return None
        state = qrt.state
        limit = qrt.limit
        depth = state.depth()
        if limit is not None and depth >= limit:
            if published and qrt.journal is not None:  # full: it gets no seq of its own
                qrt.journal((message[_TIMESTAMP], qrt.publish_site, message[_MID], None,
                             message[_ADDRESS]))  # fmt: skip
            return self._overflow(qrt, message, origin, direct)
        entry = Entry(state.next_seq(), message, origin)
        if published:
            journal = qrt.journal
            if journal is not None:  # the seq as an int: made text when read
                journal((message[_TIMESTAMP], qrt.publish_site, message[_MID], entry.seq,
                         message[_ADDRESS]))  # fmt: skip
        entry.delivery_count = delivery_count
        qrt.counters["published"] += 1
        if not (depth or qrt.busy or qrt.scheduled) and self._nesting < _MAX_NESTING:
            # Fast path: an idle, empty queue routes the message at once, with no trip
            # through the unprocessed section and the worklist.
            qrt.busy = True
            self._nesting += 1
            try:
                if self._route_entry(qrt, qrt.routing_table, entry, False):
                    return entry
            finally:
                qrt.busy = False
                self._nesting -= 1
        state.append(entry)
        if message.ttl is not None or qrt.ttl is not None:
            self._watch(qrt, entry)
        if not qrt.scheduled:
            qrt.scheduled = True
            self._pending.append(qrt)
        return entry

    # -- lifetime (SPEC §8) ----------------------------------------------------------------
    def _watch(self, qrt: QueueRuntime, entry: Entry) -> None:
        """Remember when an unprocessed entry expires, for `tick` to find it."""
        expires = qrt.expires_at(entry.message)
        if expires is None:
            return
        heap = qrt.expiries
        if heap is not None:
            heapq.heappush(heap, (expires, next(_watch_order), entry))
            if len(heap) > 2 * qrt.state.depth() + 64:
                qrt.expiries = None  # mostly routed already: rebuilt at the next tick
        self._timed.add(qrt)

    def _expiry_heap(self, qrt: QueueRuntime) -> list[tuple[float, int, Entry]]:
        heap = qrt.expiries
        if heap is None:
            state = qrt.state
            heap = []
            for entry in state.unprocessed(state.depth()):
                expires = qrt.expires_at(entry.message)
                if expires is not None:
                    heap.append((expires, next(_watch_order), entry))
            heapq.heapify(heap)
            qrt.expiries = heap
        return heap

    def _expired(self, qrt: QueueRuntime, entry: Entry) -> None:
        """An unprocessed entry outlived its ttl: dead-lettered or dropped, never routed."""
        qrt.counters["expired"] += 1
        self._dead_letter(qrt, entry, "expired")

    def _delivery_limited(self, qrt: QueueRuntime, entry: Entry) -> None:
        """The next delivery would exceed `max_deliveries`: dead-lettered or dropped."""
        qrt.counters["delivery_limited"] += 1
        self._dead_letter(
            qrt, entry, "delivery-limit", extra={"x-delivery-count": entry.delivery_count}
        )

    def _schedule_entry(self, qrt: QueueRuntime, entry: Entry, due: float, retry: bool) -> None:
        entry.due = due
        qrt.state.schedule(entry, retry)
        self._timed.add(qrt)

    def _tick(self, now: float) -> None:
        """Every time-based transition due at `now`: scheduled entries enter their queues,
        unprocessed entries past their expiry leave."""
        for qrt in list(self._timed):
            if qrt.deleted:
                self._timed.discard(qrt)
                continue
            state = qrt.state
            retried = []
            while (found := state.pop_due(now)) is not None:
                entry, retry = found
                due, entry.due = entry.due, 0.0
                if retry:
                    retried.append(entry)
                    continue
                # a delayed message enters as if published when due
                message = entry.message._replace(timestamp=due)
                self._visited.add((message.mid, qrt.name))
                self._arrive(qrt, message, entry.origin)
            if retried:
                retried.sort(key=by_seq)
                state.push_front(retried)
                for entry in retried:
                    self._watch(qrt, entry)
                self._schedule(qrt)
            heap = self._expiry_heap(qrt)
            while heap and heap[0][0] <= now:
                entry = heapq.heappop(heap)[2]
                if qrt.deleted:
                    break
                if state.head() is entry:
                    state.pop_head()  # the common case, and cheap in every store
                elif not state.remove(entry.seq):
                    continue  # routed meanwhile (or outstanding: watched again if given back)
                self._expired(qrt, entry)
            if not heap and not state.scheduled_count():
                self._timed.discard(qrt)

    def _overflow(
        self,
        qrt: QueueRuntime,
        message: Message,
        origin: tuple[str, int, str] | None,
        direct: bool,
    ) -> Entry | None:
        table = qrt.routing_table
        if message.ttl is not None or qrt.ttl is not None:
            expires = qrt.expires_at(message)
            if expires is not None and expires <= self._time():
                self._expired(qrt, Entry(0, message, origin))  # never taken, not even here
                return None
        if table.overflows:
            copies, takers = table.overflow()
            taker = _choose_taker(takers) if takers else None
            if taker is not None or not takers:
                entry = Entry(qrt.state.next_seq(), message, origin)
                qrt.counters["published"] += 1
                qrt.counters["routed"] += 1
                for sel in copies:
                    if (message.mid, sel.target) not in self._visited:
                        self._copy(qrt, sel, message)
                if taker is None:
                    self._processed(qrt, entry)
                    return None
                taker.turn = next(self._turns)
                self._take(qrt, taker, entry)
                return entry if taker.action != "delete" else None
        if qrt.dead_letter is None and direct:
            raise QueueFull(
                f"queue {qrt.name!r} is full (limit {qrt.limit}), no overflow selector can "
                "take the message and it has no dead-letter queue"
            )
        self._dead_letter(qrt, Entry(0, message, origin), "overflow")
        return None

    def _dead_letter(
        self,
        qrt: QueueRuntime,
        entry: Entry,
        reason: str,
        detail: str | None = None,
        extra: dict[str, str | int] | None = None,
    ) -> None:
        """Send `entry` to `qrt`'s dead-letter queue, or drop it; either way it leaves."""
        self._send_dead_letter(qrt, entry.message, reason, detail, extra)
        self._settle(entry.origin)

    def _send_dead_letter(
        self,
        qrt: QueueRuntime,
        message: Message,
        reason: str,
        detail: str | None = None,
        extra: dict[str, str | int] | None = None,
    ) -> None:
        """Send `message` to `qrt`'s dead-letter queue, or drop it (counted either way)."""
        target = self._target_named(qrt.dead_letter) if qrt.dead_letter else None
        journal = qrt.journal
        if target is None or target is qrt or (message.mid, target.name) in self._visited:
            qrt.counters["dropped"] += 1
            if journal is not None:
                journal((self._clock, ("drop", qrt.name, None, None), message.mid, reason, None))
        else:
            if journal is not None:
                journal((self._clock, ("dead_letter", qrt.name, None, target.name), message.mid,
                         reason, None))  # fmt: skip
            self._visited.add((message.mid, target.name))
            qrt.counters["dead_lettered"] += 1
            letter = dead_lettered(message, reason, qrt.name, detail, extra)
            self._arrive(target, letter, None)

    def _named_target(
        self, qrt: QueueRuntime, sel: SelectorRuntime, message: Message
    ) -> tuple[QueueRuntime | str | None, tuple[str, str | None, dict[str, str | int] | None]]:
        """Where a selector with `target_from` sends `message` (SPEC §12): the target
        queue's runtime (or, for DELIVER, the destination name) and no failure; or None and
        the failure as the dead letter's (reason, detail, extra headers)."""
        name = sel.target_from(message)  # type: ignore[misc]
        field = sel.spec.target_from
        if not name:
            return None, ("no-target", f"the message has no {field} to take its target from", None)
        if sel.action == "deliver":
            if not is_name(name) or name[0] == "$":
                return None, ("no-target", f"its {field} is not a destination name", None)
            return name, NO_FAILURE
        if name[0] == "$":  # the engine's own queues (SPEC §1): a message names none
            return None, ("no-target", f"its {field} names a reserved queue", None)
        target = self._target_named(name)
        if target is None:
            if not is_name(name):
                return None, ("no-target", f"its {field} is not a queue name", None)
            return None, ("no-such-queue", None, {"x-target": name})
        if target is qrt:
            detail = f"its {field} names the selector's own queue"
            return None, ("unroutable", detail, {"x-target": name})
        return target, NO_FAILURE

    def _processed(self, qrt: QueueRuntime, entry: Entry) -> None:
        if qrt.history and not entry.replay:
            qrt.state.add_history(entry, qrt.history)
        if entry.origin is not None:
            self._settle(entry.origin)

    def _settle(self, origin: tuple[str, int, str] | None) -> None:
        """The message that came from `origin` left its queue: settle it up the chain."""
        while origin is not None:
            name, selector_id, tag = origin
            qrt = self._queues.get(name)
            if qrt is None:
                self._settle_remote(name, selector_id, tag)  # another shard's MOVE
                return
            sel = qrt.selectors.get(selector_id)
            entry = sel.state.outstanding.pop(tag, None) if sel is not None else None
            if entry is None:
                return  # let go when its selector was deleted
            entry.downstream = None
            if sel.action == "deliver":  # (moved to its delivery queue on another shard)
                qrt.counters["confirmed"] += 1  # type: ignore[union-attr]
            self._credit_back(qrt, sel)  # type: ignore[arg-type]
            if qrt.history and not entry.replay:
                qrt.state.add_history(entry, qrt.history)
            origin = entry.origin

    def _credit_back(self, qrt: QueueRuntime, sel: SelectorRuntime) -> None:
        state = sel.state
        if state.credit >= 0 and sel.action != "delete":
            state.credit += 1
            self._credit_arrived(qrt, sel)

    def _credit_arrived(self, qrt: QueueRuntime, sel: SelectorRuntime) -> None:
        if sel.replay_next is not None:
            self._replay(qrt, sel)
        if qrt.state.depth() and not qrt.scheduled:
            qrt.scheduled = True
            self._pending.append(qrt)

    def _replay(self, qrt: QueueRuntime, sel: SelectorRuntime) -> None:
        """Rule 13: feed history from `replay_next` to `sel` alone, as far as credit allows.
        The selector's own WHEN picks what it takes (history it does not select costs no
        credit) and its own DO acts; history itself is not altered."""
        state = qrt.state
        meets = None
        while sel.replay_next is not None:
            found = state.history_after(sel.replay_next - 1, _REPLAY_PAGE)
            if not found or found[0].seq > sel.replay_end:
                sel.replay_next = None
                self._schedule(qrt)
                return
            for kept in found:
                if kept.seq > sel.replay_end:
                    sel.replay_next = None
                    self._schedule(qrt)
                    return
                if not sel.is_copy and (
                    not sel.ready or (sel.action != "delete" and sel.state.credit == 0)
                ):
                    return  # resumes when credit comes back (or the hold is released)
                sel.replay_next = kept.seq + 1
                if meets is None:
                    meets = sel.when_matcher()
                if not meets(kept.message):
                    continue
                if sel.is_copy:
                    self._copy(qrt, sel, kept.message)
                else:
                    entry = Entry(kept.seq, kept.message, None)
                    entry.replay = True
                    sel.turn = next(self._turns)
                    self._take(qrt, sel, entry)
                if sel.replay_next != kept.seq + 1:
                    break  # settling downstream replayed further (or ended it): look again


def _choose_taker(takers: list[SelectorRuntime]) -> SelectorRuntime | None:
    """The taker with credit whose turn is lowest (rule 3); None if none can take."""
    best = None
    for sel in takers:
        if sel.replay_next is not None:
            continue  # still catching up on history: live messages wait
        if (sel.state.credit == 0 and sel.action != "delete") or not sel.ready:
            continue
        if best is None or sel.turn < best.turn:
            best = sel
    return best


def by_seq(entry: Entry) -> int:
    return entry.seq


def _bounced(message: Message) -> Message:
    """Rule 9: the new address is the return address; the old one is kept in a header."""
    address = message.return_address if message.return_address is not None else message.address
    return _rewritten(message, address, {"x-original-address": message.address})


NO_FAILURE: tuple = (None, None, None)


def no_delivery_queue(destination: str, home: str) -> str:
    """A dead letter's `x-detail` when a DELIVER to `destination`, read on shard `home`,
    finds no queue of its name there to move it into (its delivery queue; explain says
    the same)."""
    return (f"destination {destination!r} is read on shard {home!r}, which has no queue "
            f"{destination!r} to deliver it")  # fmt: skip


def is_name(name: str) -> bool:
    """Whether `name` could name a queue or destination (validation.check_name's rule)."""
    try:
        check_name("target", name, allow_reserved=True)
    except InvalidName:
        return False
    return True


def dead_lettered(
    message: Message,
    reason: str,
    queue: str,
    detail: str | None = None,
    more: dict[str, str | int] | None = None,
) -> Message:
    """A dead letter says why and where from, so it can be sent back; `detail` (header
    `x-detail`) says more when there is more to say; `more` adds headers (a delivery-limit
    letter's `x-delivery-count`)."""
    extra: dict[str, str | int] = {"x-reason": reason, "x-original-queue": queue}
    if detail is not None:
        extra["x-detail"] = detail
    if more:
        extra.update(more)
    if message.ttl is not None or message.delay is not None:
        message = message._replace(ttl=None, delay=None)  # a dead letter starts a new life
    return _rewritten(message, message.address, extra)


def _rewritten(message: Message, address: str, extra: dict[str, str | int]) -> Message:
    """The same message (mid, body) under a new envelope, as it arrives in another queue."""
    headers = dict(message.headers)
    headers.update(extra)
    return message._replace(
        address=address, headers=MappingProxyType(headers), seq=None, destination=None
    )
