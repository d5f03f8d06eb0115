"""Messages in and out: publish, confirm, reject, expire (SPEC §2 rules 10, 11, 14), and the
time-based transitions of message lifetime: tick, scheduled, cancel (SPEC §8).

The Engine inherits these. Each public call validates first, takes the engine lock and runs
its change through the routing rules (rules.py), returning the Deliveries it caused.
Delivery tags read `<queue>:<selector id>:<serial>`, so any process can tell where a tag
belongs without a shared index.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from engine.errors import InvalidArgument, NotFound, QueueFull
from engine.message import _EMPTY_HEADERS as EMPTY_HEADERS
from engine.message import Delivery, Message
from engine.routing_table import SelectorRuntime
from engine.rules import _MID, QueueRuntime, Rules, _new_message, by_seq, dead_lettered
from engine.stores.base import Entry
from engine.validation import (
    check_body,
    check_envelope,
    check_headers,
    check_optional_seconds,
    check_priority,
    check_text,
)

_wall = time.time


def _parse_tag(tag: object) -> tuple[str, int]:
    """Delivery tags read `<queue>:<selector id>:<serial>` so any process can settle them."""
    if isinstance(tag, Delivery):
        tag = tag.tag
    if not isinstance(tag, str):
        raise NotFound(f"delivery tag must be a string or a Delivery, not {type(tag).__name__}")
    parts = tag.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        raise NotFound(f"delivery {tag!r} is not outstanding (not a delivery tag)")
    return parts[0], int(parts[1])


def _publish_event(message: Message, queue: str, unknown: str | None) -> tuple:
    """The journal record (event_journal.py) of a publish that `Rules._arrive` does not
    record (it records the others where their seq is given): a delayed one, published into
    `queue` with no seq yet; or, when `unknown` names a queue that does not exist, the
    dead-lettering (rule 14) into `queue`, the engine's dead-letter queue."""
    if unknown is None:
        return (message.timestamp, ("publish", queue, None, None), message.mid, None,
                message.address)  # fmt: skip
    return (
        message.timestamp,
        ("dead_letter", unknown, None, queue),
        message.mid,
        "no-such-queue",
        message.address,
    )


class Messaging(Rules):
    """Publishing and settling messages; the Engine inherits it."""

    dead_letter: str | None
    max_body: int
    _prefix: str
    _queue_create: Callable[..., Any]
    _queue: Callable[[object], QueueRuntime]
    _lock: Any

    def publish(self, queue: str, message: Message) -> list[Delivery]:
        """Publish `message` to `queue`; returns the Deliveries it caused.

        Raises NotFound for an unknown queue (unless the engine has a dead-letter queue) and
        QueueFull when the queue is full with no overflow selector and no dead-letter queue.
        """
        message = self._checked(message)
        with self._lock:
            qrt = self._queues.get(queue)
            if qrt is None:
                if self.dead_letter is None or not isinstance(queue, str):
                    raise NotFound(f"queue {queue!r} does not exist")
                message = dead_lettered(message, "no-such-queue", queue)
                qrt = self._engine_dead_letter_queue()
                return self._run(self._publish, qrt, message, queue)
            return self._run(self._publish, qrt, message)

    def _publish(self, qrt: QueueRuntime, message: Message, unknown: str | None = None) -> None:
        self._visited.add((message.mid, qrt.name))
        if unknown is None and not message.delay:
            # the common case: _arrive records the publish event where the seq is given
            # (arguments by position: this is the hot path; direct=True, published=True)
            self._arrive(qrt, message, None, 0, True, True)
            return
        journal = qrt.journal
        if journal is not None:
            journal(_publish_event(message, qrt.name, unknown))
        if message.delay:
            self._schedule_entry(qrt, Entry(0, message, None), message.timestamp + message.delay,
                                 False)  # fmt: skip
            return
        self._arrive(qrt, message, None, direct=True)

    def publish_many(
        self, queue: str, messages: list[Message], *, keep_mids: bool = False
    ) -> list[Delivery]:
        """Publish messages to one queue in order, under one lock: faster than one call
        each. All or nothing: a bad message, or a full queue (no overflow selector, no
        dead-letter queue) without room for the whole batch, raises and publishes none.
        `keep_mids` keeps the mids the messages carry (a relay client gave them out, so
        the publisher knows them before routing); otherwise the engine gives new ones.
        Into another shard's queue (a stand-in, forwarding.py) they are forwarded, to be
        routed there; a delayed one is refused (its shard's router keeps the time)."""
        checked = [self._checked(message, keep_mids) for message in messages]
        with self._lock:
            qrt = self._queues.get(queue)
            unknown = None
            remote = self._remote.get(queue) if qrt is None and isinstance(queue, str) else None
            if remote is not None:
                if any(message.delay for message in checked):
                    raise InvalidArgument(
                        f"queue {queue!r} lives on shard {remote.remote!r}: publish a "
                        "delayed message there"
                    )
                return self._run(self._forward_all, remote, checked)
            if qrt is None:
                if self.dead_letter is None or not isinstance(queue, str):
                    raise NotFound(f"queue {queue!r} does not exist")
                checked = [dead_lettered(m, "no-such-queue", queue) for m in checked]
                qrt = self._engine_dead_letter_queue()
                unknown = queue
            limit = qrt.limit
            if limit is not None and qrt.dead_letter is None:
                beyond = qrt.state.depth() + len(checked) - limit  # arriving at a full queue
                taken = _overflow_room(qrt)  # how many of them its OVERFLOW selectors take
                if beyond > 0 and taken is not None and beyond > taken:
                    raise QueueFull(
                        f"queue {qrt.name!r} has room for {limit - qrt.state.depth()} "
                        f"of the {len(checked)} messages (limit {limit})"
                        + (f" and its overflow selectors take {taken}" if taken else "")
                        + "; none published"
                    )
            return self._run(self._publish_many, qrt, checked, unknown)

    def _publish_many(
        self, qrt: QueueRuntime, messages: list[Message], unknown: str | None = None
    ) -> None:
        visited, arrive, name = self._visited, self._arrive, qrt.name
        journal = qrt.journal
        for message in messages:
            visited.add((message.mid, name))
            if unknown is None and not message.delay:
                # as in _publish: _arrive records the publish event where the seq is given
                arrive(qrt, message, None, 0, False, True)  # published=True, by position
                continue
            if journal is not None:
                journal(_publish_event(message, qrt.name, unknown))
            if message.delay:
                self._schedule_entry(qrt, Entry(0, message, None),
                                     message.timestamp + message.delay, False)  # fmt: skip
                continue
            arrive(qrt, message, None)

    def _checked(self, message: object, keep_mid: bool = False) -> Message:
        if not isinstance(message, Message):
            raise InvalidArgument(f"publish takes a Message, not {type(message).__name__}")
        check_envelope(message.address, message.return_address)
        headers = message.headers
        if headers is not EMPTY_HEADERS:
            headers = check_headers(headers)
            priority = headers.get("priority")
            if priority is not None and (type(priority) is not int or priority < 0):
                check_priority(priority)
        ttl, delay = message.ttl, message.delay
        if ttl is not None or delay is not None:
            ttl = check_optional_seconds("ttl", ttl)
            delay = check_optional_seconds("delay", delay)
        body = message.body
        if type(body) is not bytes or len(body) > self.max_body:
            body = check_body(body, self.max_body)
        mid = message.mid
        if not (keep_mid and isinstance(mid, str) and mid):
            mid = f"{self._prefix}-{next(self._serials)}"
        now = _wall()
        if now < self._tick_now:
            now = self._tick_now  # the engine's time (see Rules._time), inlined: hot path
        return _new_message(
            (message.address, headers, body, message.return_address, mid, None, now, None, ttl,
             delay)
        )  # fmt: skip

    def _engine_dead_letter_queue(self) -> QueueRuntime:
        name = self.dead_letter
        qrt = self._queues.get(name)  # type: ignore[arg-type]
        if qrt is None:
            self._queue_create(name, None, None, 0, None, False)  # type: ignore[arg-type]
            qrt = self._queues[name]  # type: ignore[index]
        return qrt

    def confirm(self, delivery: Delivery | str) -> list[Delivery]:
        """Settle a delivery: the message is processed and the selector's credit returns."""
        with self._lock:
            qrt, sel, tag = self._outstanding(delivery)
            return self._run(self._confirm, qrt, sel, tag)

    def confirm_many(self, deliveries: list[Delivery | str]) -> list[Delivery]:
        """Confirm several deliveries under one lock. All or nothing: an unknown, settled or
        repeated tag raises NotFound and confirms none."""
        with self._lock:
            settling = []
            seen: set[str] = set()
            for delivery in deliveries:
                found = self._outstanding(delivery)
                if found[2] in seen:
                    raise NotFound(f"delivery {found[2]!r} is listed twice")
                seen.add(found[2])
                settling.append(found)
            return self._run(self._confirm_many, settling)

    def _confirm_many(self, settling: list[tuple[QueueRuntime, SelectorRuntime, str]]) -> None:
        for qrt, sel, tag in settling:
            self._confirm(qrt, sel, tag)

    def _take_back(
        self,
        qrt: QueueRuntime,
        sel: SelectorRuntime,
        tag: str,
        counter: str,
        event: str,
        detail: str | None = None,
    ) -> Entry:
        """Take the outstanding delivery `tag` back from its selector, counted under
        `counter` and journaled as `event`; its entry, for the caller to finish with."""
        entry = sel.state.outstanding.pop(tag)
        qrt.counters[counter] += 1
        journal = qrt.journal
        if journal is not None:
            message = entry.message
            site = sel.confirm_site if event == "confirm" else None
            if site is None:
                site = (event, qrt.name, sel.id, sel.destination_of(message))
            journal((self._clock, site, message[_MID], detail, tag))
        return entry

    def _confirm(self, qrt: QueueRuntime, sel: SelectorRuntime, tag: str) -> None:
        entry = self._take_back(qrt, sel, tag, "confirmed", "confirm")
        self._credit_back(qrt, sel)
        self._processed(qrt, entry)

    def reject(
        self, delivery: Delivery | str, requeue: bool = True, *, detail: str | None = None
    ) -> list[Delivery]:
        """Give a delivery back: to the head of its queue (requeue) or to the dead letters.
        `detail` (without requeue): why, as the dead letter's `x-detail` header (e.g. the
        service could not encode the delivery for its subscriber)."""
        if not isinstance(requeue, bool):
            raise InvalidArgument(f"requeue must be True or False, not {requeue!r}")
        if detail is not None:
            if not isinstance(detail, str) or not detail:
                raise InvalidArgument("detail must be a non-empty string or None")
            check_text("detail", detail)
        with self._lock:
            qrt, sel, tag = self._outstanding(delivery)
            return self._run(self._reject, qrt, sel, tag, requeue, detail)

    def _reject(
        self,
        qrt: QueueRuntime,
        sel: SelectorRuntime,
        tag: str,
        requeue: bool,
        detail: str | None = None,
    ) -> None:
        entry = self._take_back(qrt, sel, tag, "rejected", "reject", "requeue" if requeue else None)
        if requeue:
            self._give_back(qrt, sel, [entry], retry=True)
        else:
            if not entry.replay:
                self._dead_letter(qrt, entry, "rejected", detail)
            self._credit_back(qrt, sel)

    def expire(self, older_than: float) -> list[Delivery]:
        """Deliveries left unconfirmed for more than `older_than` seconds go back to the
        front of their queues, in order, and are delivered again (`redelivered`); their
        old tags stop working. The service calls this periodically: its delivery timeout."""
        if (
            not isinstance(older_than, int | float)
            or isinstance(older_than, bool)
            or (older_than < 0)
        ):
            raise InvalidArgument(f"older_than must be seconds >= 0, not {older_than!r}")
        with self._lock:
            return self._run(self._expire, self._time() - older_than)

    def _expire(self, cutoff: float) -> None:
        for qrt in list(self._queues.values()):
            for sel in list(qrt.selectors.values()):
                if sel.action != "deliver":
                    continue
                tags = []
                for tag, entry in sel.state.outstanding.items():  # in the order delivered
                    if entry.taken_at > cutoff:
                        break
                    tags.append(tag)
                if tags:
                    self._expire_entries(qrt, sel, tags)

    def expire_tags(self, tags: Iterable[str]) -> list[Delivery]:
        """Deliveries whose delivery timeout ran out, by tag, go back to the front of their
        queues in order and are delivered again (`redelivered`), as `expire` does; for a
        caller that knows better than the engine when each delivery reached its consumer
        (the router: when a subscriber took it off its outbox). Tags that are not
        outstanding (settled since, or not tags) are passed over."""
        tags = list(tags)
        if not all(isinstance(tag, str) for tag in tags):
            raise InvalidArgument("tags must be delivery tags (strings)")
        with self._lock:
            return self._run(self._expire_tags, tags)

    def _expire_tags(self, tags: list[str]) -> None:
        found: dict[tuple[str, int], tuple[QueueRuntime, SelectorRuntime, list[str]]] = {}
        for tag in tags:
            try:
                qrt, sel, _ = self._outstanding(tag)
            except NotFound:
                continue
            found.setdefault((qrt.name, sel.id), (qrt, sel, []))[2].append(tag)
        for qrt, sel, chosen in found.values():
            self._expire_entries(qrt, sel, list(dict.fromkeys(chosen)))

    def _expire_entries(self, qrt: QueueRuntime, sel: SelectorRuntime, tags: list[str]) -> None:
        outstanding = sel.state.outstanding
        qrt.counters["timed_out"] += len(tags)
        journal = qrt.journal
        if journal is not None:
            now = self._time()
            for tag in tags:
                message = outstanding[tag].message
                destination = sel.destination_of(message)
                journal((now, ("expire", qrt.name, sel.id, destination), message.mid, None,
                         tag))  # fmt: skip
        self._give_back(qrt, sel, [outstanding.pop(tag) for tag in tags], retry=True)

    def _give_back(
        self, qrt: QueueRuntime, sel: SelectorRuntime, entries: list[Entry], retry: bool = False
    ) -> None:
        """Taken entries return to the front of their queue in seq order, or, when they were
        history being replayed, to the selector's replay; the selector's credit returns.
        A `retry` (rejected with requeue, or timed out) first meets the queue's lifetime
        rules (SPEC §8): past `max_deliveries` it is dead-lettered; with a redelivery
        delay it waits in the schedule and comes back to the front when due (`tick`)."""
        returned = []
        limit = qrt.max_deliveries if retry else None
        wait = qrt.redelivery is not None and retry
        for entry in entries:
            if not entry.replay:
                if limit is not None and entry.delivery_count >= limit:
                    self._delivery_limited(qrt, entry)
                elif wait:
                    due = self._time() + qrt.redelivery_wait(entry.delivery_count)
                    self._schedule_entry(qrt, entry, due, True)
                else:
                    returned.append(entry)
            elif sel.replay_next is None:
                sel.replay_next, sel.replay_end = entry.seq, entry.seq
            else:
                sel.replay_next = min(sel.replay_next, entry.seq)
                sel.replay_end = max(sel.replay_end, entry.seq)
        if returned:
            returned.sort(key=by_seq)
            qrt.state.push_front(returned)
            if qrt.ttl is not None or any(e.message.ttl is not None for e in returned):
                for entry in returned:
                    self._watch(qrt, entry)
            self._schedule(qrt)
        for _ in entries:
            self._credit_back(qrt, sel)

    # == lifetime (SPEC §8) ===================================================================
    def tick(self, now: float | None = None) -> list[Delivery]:
        """Make every time-based transition due at `now` (default: the wall clock): delayed
        messages and redeliveries whose wait is over enter their queues (and are routed),
        unprocessed messages past their ttl are dead-lettered (`x-reason: expired`) or
        dropped. The engine has no clock of its own: the service's router calls this when
        `next_due()` has come (it looks every 50 ms); tests call it with explicit times.
        The engine's time never runs behind the latest `now` given. Returns the Deliveries
        caused."""
        if now is None:
            now = time.time()
        elif not isinstance(now, int | float) or isinstance(now, bool) or now != now:
            raise InvalidArgument(f"now must be a time in seconds, not {now!r}")
        elif now in (float("inf"), float("-inf")):
            raise InvalidArgument(f"now must be a finite time in seconds, not {now!r}")
        with self._lock:
            if now > self._tick_now:
                self._tick_now = float(now)
            if not self._timed:
                return []
            return self._run(self._tick, float(now))

    def next_due(self) -> float | None:
        """When `tick` next has work: the soonest due time of a scheduled message or expiry
        of an unprocessed one, over every queue; None when nothing waits for a time (then
        `tick` does nothing). Cheap (each queue's heads), so a router can ask it often."""
        with self._lock:
            soonest: float | None = None
            for qrt in list(self._timed):
                if qrt.deleted:
                    continue
                due = qrt.state.next_due()
                heap = self._expiry_heap(qrt)
                if heap and (due is None or heap[0][0] < due):
                    due = heap[0][0]
                if due is None:
                    continue  # nothing left: the next tick forgets the queue
                if soonest is None or due < soonest:
                    soonest = due
            return soonest

    def scheduled(self, queue: str) -> list[Message]:
        """The messages of `queue` held out of routing until due, soonest due first: delayed
        arrivals (seq None) and redeliveries waiting out their delay (with their seq)."""
        with self._lock:
            state = self._queue(queue).state
            return [entry.message._replace(seq=entry.seq or None) for entry, _ in state.scheduled()]

    def scheduled_due(self, queue: str) -> list[tuple[float, Message]]:
        """`scheduled(queue)` with when each is due (seconds since the epoch)."""
        with self._lock:
            state = self._queue(queue).state
            return [
                (entry.due, entry.message._replace(seq=entry.seq or None))
                for entry, _ in state.scheduled()
            ]

    def cancel(self, queue: str, mid: str) -> list[Delivery]:
        """Withdraw the scheduled message `mid` from `queue` (counted as dropped); NotFound,
        changing nothing, when it is not scheduled there. Returns the Deliveries caused (a
        message moved here is settled upstream, which may route there)."""
        if not isinstance(mid, str) or not mid:
            raise InvalidArgument(f"mid must be a message id (a string), not {mid!r}")
        with self._lock:
            return self._run(self._cancel, self._queue(queue), mid)

    def _cancel(self, qrt: QueueRuntime, mid: str) -> None:
        gone = qrt.state.cancel(mid)
        if not gone:
            raise NotFound(f"message {mid!r} is not scheduled in queue {qrt.name!r}")
        for entry in gone:
            qrt.counters["dropped"] += 1
            journal = qrt.journal
            if journal is not None:
                journal((self._clock, ("drop", qrt.name, None, None), mid, "cancelled", None))
            self._settle(entry.origin)

    def _outstanding(self, delivery: Delivery | str) -> tuple[QueueRuntime, SelectorRuntime, str]:
        queue, selector_id = _parse_tag(delivery)
        tag = delivery.tag if isinstance(delivery, Delivery) else delivery
        qrt = self._queues.get(queue)
        sel = qrt.selectors.get(selector_id) if qrt is not None else None
        if sel is None or sel.action != "deliver" or tag not in sel.state.outstanding:
            raise NotFound(
                f"delivery {tag!r} is not outstanding (already settled, or its "
                "selector or queue was deleted)"
            )
        return qrt, sel, tag  # type: ignore[return-value]


def _overflow_room(qrt: QueueRuntime) -> int | None:
    """How many messages arriving at full queue `qrt` its OVERFLOW selectors take now
    (rule 7): None for any number (only copies, a DELETE, or a taker without a credit
    limit), else the credit of those that can take. What they do not take is dropped
    when the queue has no dead-letter queue, which a publish refuses (QueueFull)."""
    copies, takers = qrt.routing_table.overflow()
    if copies and not takers:
        return None
    room = 0
    for sel in takers:
        if sel.replay_next is not None or not sel.ready:
            continue
        if sel.action == "delete" or sel.state.credit < 0:
            return None
        room += sel.state.credit
    return room
