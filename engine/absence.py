"""Destinations away: a worker queue (a wolfpack worker's private queue) whose consumers have
all been away for the delivery timeout gives its unsettled work back to the queue it came
from, for the other workers of the pack, and the MOVE or BOUNCE feeding it is held until one
is back (README, docs/service.md).

The Engine inherits these. The service says which destinations are away (`absent`: the
engine has no clock of its own); each call replaces the last, and runs, as every public
call does, under the engine lock through the rules' `_run`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from time import time as _time
from typing import Any

from engine.errors import InvalidArgument
from engine.message import Delivery
from engine.routing_table import SelectorRuntime
from engine.rules import QueueRuntime, Rules


class Absence(Rules):
    """Destinations away, as methods the Engine inherits. They run under the engine lock."""

    _lock: Any
    # selectors that COPY/MOVE/BOUNCE into a queue name (the Engine keeps it)
    _targeted_by: dict[str, set[SelectorRuntime]]
    _held: dict[tuple[str, int], SelectorRuntime]  # held: their target is unattended
    _give_back: Callable[..., None]  # messaging.py

    def worker_destinations(self) -> set[str]:
        """The destinations whose absence `absent` acts on: those of the DELIVER selectors
        of *worker queues*, queues fed by an enabled MOVE or BOUNCE whose enabled selectors
        all deliver (a wolfpack worker's private queue)."""
        with self._lock:
            found: set[str] = set()
            for qrt in self._worker_queues():
                found.update(sel.target for sel in qrt.selectors.values() if sel.spec.enabled)
            return found

    def _worker_queues(self) -> list[QueueRuntime]:
        found = []
        for name, feeders in self._targeted_by.items():
            qrt = self._queues.get(name)
            if qrt is None or not any(_feeds(sel) for sel in feeders):
                continue
            enabled = [sel for sel in qrt.selectors.values() if sel.spec.enabled]
            if enabled and all(sel.action == "deliver" for sel in enabled):
                found.append(qrt)
        return found

    def absent(
        self, destinations: Iterable[str], away: Iterable[str] | None = None
    ) -> tuple[list[Delivery], list[Delivery]]:
        """Tell the engine which destinations have had no consumer for long enough (the
        service watches its subscribers; the engine has no clock); each call replaces the
        last. `away` (optional) names those with no consumer right now, not yet for long
        enough; the first ones count as away too.

        A worker queue (see `worker_destinations`) whose destinations are all absent is
        *stranded*; one whose destinations are all away (or absent) is *unattended*. A MOVE
        or BOUNCE feeding an unattended queue is held: it takes nothing, as with no credit,
        so new work and work given back wait in its own queue (the service queue) for a
        worker that is present (never routed again among workers just as absent). When the
        queue it feeds is stranded and its own queue has another enabled taker with the
        same WHEN that is present (a worker of the pack whose queue is attended, or any
        other kind of taker), the messages it moved there that wait unsettled
        (unprocessed, or delivered and not confirmed) come back to the front of its queue,
        in order, as deleting it would return them, its credit given back, each marked
        with the deliveries it had (the next one is `redelivered`): the present worker
        takes them. Their deliveries are revoked (their tags stop working) and counted as
        `recalled`. A selector no longer to be held is released and takes again.

        Returns (the Deliveries caused, the Deliveries revoked); whoever holds copies of
        the revoked ones (an outbox) must drop them."""
        gone = set(destinations)
        unseen = gone | (set() if away is None else set(away))
        if not all(isinstance(name, str) for name in unseen):
            raise InvalidArgument("destinations must be names (strings)")
        revoked: list[Delivery] = []
        with self._lock:
            return self._run(self._absent, gone, unseen, revoked), revoked

    def _absent(self, gone: set[str], unseen: set[str], revoked: list[Delivery]) -> None:
        stranded, unattended = set(), set()
        for qrt in self._worker_queues():
            targets = [s.target for s in qrt.selectors.values() if s.spec.enabled]
            if all(target in unseen for target in targets):
                unattended.add(qrt.name)
                if all(target in gone for target in targets):
                    stranded.add(qrt.name)
        holding: dict[tuple[str, int], SelectorRuntime] = {}
        recalling: list[tuple[str, int]] = []
        for name in unattended:
            for sel in self._targeted_by.get(name, ()):
                source = self._queues.get(sel.spec.queue)
                if not _feeds(sel) or source is None:
                    continue
                holding[(source.name, sel.id)] = sel
                if name in stranded and _has_partner(source, sel, unattended):
                    recalling.append((source.name, sel.id))
        for key, sel in list(self._held.items()):
            if key not in holding:
                del self._held[key]
                sel.hold(False)
                source = self._queues.get(key[0])
                if source is not None and source.selectors.get(key[1]) is sel:
                    self._credit_arrived(source, sel)
        for key, sel in holding.items():
            self._held[key] = sel
            sel.hold(True)
        for key in recalling:
            sel = holding[key]
            if sel.state.outstanding:
                self._recall(self._queues[key[0]], sel, revoked)

    def _recall(self, qrt: QueueRuntime, sel: SelectorRuntime, revoked: list[Delivery]) -> None:
        """What `sel` moved into its target and is not settled there comes back to `qrt`."""
        target = sel.target_queue
        if target is None or target.remote is not None:
            return  # another shard's queue: what went there is theirs (forwarding.py)
        delivered: dict[str, tuple[SelectorRuntime, str]] = {}  # sel's tag -> its delivery
        for taker in target.selectors.values():
            if taker.action == "deliver":
                for tag, entry in taker.state.outstanding.items():
                    origin = entry.origin
                    if origin is not None and origin[0] == qrt.name and origin[1] == sel.id:
                        delivered[origin[2]] = (taker, tag)
        back = []
        for tag, entry in list(sel.state.outstanding.items()):
            if entry.downstream is None or entry.downstream[0] != target.name:
                continue
            if target.state.remove(entry.downstream[1]):
                target.counters["published"] -= 1
            elif tag in delivered:
                taker, taken = delivered[tag]
                withdrawn = self._revoke(target, taker, taken)
                revoked.append(withdrawn)
                # as a requeue: whoever takes it next sees it redelivered, counted on
                entry.delivery_count = max(entry.delivery_count, withdrawn.delivery_count)
            else:
                continue  # taken further downstream: it is theirs now
            back.append(tag)
        if back:
            returned = [sel.state.outstanding.pop(tag) for tag in back]
            for entry in returned:
                entry.downstream = None
            self._give_back(qrt, sel, returned)

    def _revoke(self, qrt: QueueRuntime, sel: SelectorRuntime, tag: str) -> Delivery:
        """Withdraw an outstanding delivery (counted as recalled); the Delivery it was."""
        entry = sel.state.outstanding.pop(tag)
        qrt.counters["recalled"] += 1
        journal = qrt.journal
        if journal is not None:
            mid = entry.message.mid
            destination = sel.destination_of(entry.message)
            journal((_time(), ("expire", qrt.name, sel.id, destination), mid, "recalled", tag))
        self._credit_back(qrt, sel)
        count = entry.delivery_count
        destination = sel.destination_of(entry.message)
        message = entry.message._replace(seq=entry.seq, destination=destination)
        return Delivery(tag, destination, qrt.name, sel.id, message, count > 1, count)  # type: ignore[arg-type]


def _feeds(sel: SelectorRuntime) -> bool:
    """An enabled MOVE or BOUNCE: what brings messages into a worker queue."""
    return sel.spec.enabled and sel.action in ("move", "bounce")


def _has_partner(source: QueueRuntime, sel: SelectorRuntime, unattended: set[str]) -> bool:
    """Whether `source` has another enabled taker with `sel`'s WHEN that does not feed an
    unattended queue: someone present to take what `sel` would give back."""
    spec = sel.spec
    when = (spec.when, spec.match, spec.more_matches, spec.filter)
    for other in source.selectors.values():
        other_spec = other.spec
        if (
            other is not sel
            and other_spec.enabled
            and other.action in TAKERS
            and (other_spec.when, other_spec.match, other_spec.more_matches, other_spec.filter)
            == when
            and not (other.action in ("move", "bounce") and other.target in unattended)
        ):
            return True
    return False


TAKERS = frozenset({"move", "bounce", "deliver", "delete"})
