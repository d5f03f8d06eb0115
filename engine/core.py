"""The Engine: the public API of SPEC §3 over stores, queues and selectors, their wiring.
The Engine inherits the rest: messages in and out (messaging.py), destinations away
(absence.py), read-only queries (queries.py), explain (explain.py), trace (lineage.py) and
the routing rules (rules.py).

Every public call validates its input before it changes anything, takes the engine lock,
makes its change and lets the routing rules (rules.py, SPEC §2) route whatever became
routable; calls that can cause deliveries return them. Wiring changes go through the catalog
(catalog.py); per-message state lives in the stores (stores/base.py).
"""

from __future__ import annotations

import itertools
import secrets
import threading
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields

from engine.absence import Absence
from engine.catalog import Catalog, MemoryCatalog, QueueSpec, SelectorSpec, StoreSpec
from engine.errors import (
    AlreadyExists,
    InvalidArgument,
    InvalidSelector,
    NotFound,
)
from engine.event_journal import EventJournal
from engine.explain import Explaining
from engine.filters import compile_filter
from engine.forwarding import Forward, Forwarding, Settle
from engine.lineage import Lineage
from engine.message import Delivery
from engine.messaging import Messaging
from engine.placement import place
from engine.queries import Queries
from engine.routing_table import QUEUE_ACTIONS, SelectorRuntime
from engine.rules import QueueRuntime, by_seq
from engine.selectors import Selector
from engine.stores.base import Store
from engine.stores.ram import RamStore
from engine.validation import (
    DEFAULT_MAX_BODY,
    MAX_WIRING,
    check_count,
    check_lifetime_options,
    check_name,
    check_optional_count,
)

LIFETIME_OPTIONS = (
    "max_deliveries",
    "redelivery_delay",
    "redelivery_backoff",
    "redelivery_delay_max",
    "ttl",
    "priorities",
)

STORE_KINDS = ("ram", "redis", "sql")


@dataclass(frozen=True, slots=True)
class QueueInfo:
    name: str
    store: str
    depth: int
    history_size: int
    limit: int | None
    history: int
    dead_letter: str | None
    self_destruct: bool
    outstanding: int = 0
    journal: bool = True
    # message lifetime (SPEC §8)
    max_deliveries: int | None = None
    redelivery_delay: float | None = None
    redelivery_backoff: float = 1.0
    redelivery_delay_max: float | None = None
    ttl: float | None = None
    priorities: int = 1
    scheduled: int = 0


@dataclass(frozen=True, slots=True)
class StoreInfo:
    kind: str
    name: str
    url: str | None


class Engine(Messaging, Absence, Forwarding, Queries, Explaining, Lineage):
    """Queues joined by selectors. See SPEC §3 for the API and §2 for the rules."""

    def __init__(
        self,
        dead_letter: str | None = None,
        *,
        max_body: int = DEFAULT_MAX_BODY,
        catalog: Catalog | None = None,
        journal: bool | int = False,
        stores: tuple[Store, ...] = (),
    ) -> None:
        if dead_letter is not None:
            check_name("dead-letter queue", dead_letter, allow_reserved=True)
        self.max_body = check_count("max_body", max_body, minimum=0)
        self.dead_letter = dead_letter
        self._lock = threading.RLock()
        self._journal = _event_journal(journal, self._lock)
        self._catalog = catalog if catalog is not None else MemoryCatalog()
        self._stores: dict[str, Store] = {}
        self._transactional: list[Store] = []
        self._queues: dict[str, QueueRuntime] = {}
        self._default_store = "ram"
        self._shards: tuple[str, ...] = ()  # stores new queues are placed over (set_shards)
        # selectors that COPY/MOVE/BOUNCE into a queue name, to re-point them when a queue
        # of that name is created or deleted
        self._targeted_by: dict[str, set[SelectorRuntime]] = {}
        # MOVE/BOUNCE selectors held because their target's destinations are away (absent)
        self._held: dict[tuple[str, int], SelectorRuntime] = {}
        self._pending: deque[QueueRuntime] = deque()
        self._timed: set[QueueRuntime] = set()  # queues `tick` looks at (rules.py)
        self._out: list[Delivery] = []
        # other shards' queues, and what arrived there or left from there (forwarding.py)
        self._remote: dict = {}
        self._forwards: list[Forward] = []
        self._settles: list[Settle] = []
        self._visited: set[tuple[str | None, str]] = set()
        self._nesting = 0  # depth of fast-path routing on the stack
        # what rules.py and forwarding.py declare with a class default, set here too: an
        # attribute read from the instance is specialised by CPython 3.11, one found on the
        # class is looked up through the Engine's whole MRO at every read (the hot path
        # reads each once or twice a message)
        self._clock = 0.0
        self._tick_now = 0.0
        self._local_shard: str | None = None
        self._homes: Mapping[str, str] = {}
        self._turns = itertools.count(1)
        self._serials = itertools.count(1)
        self._prefix = secrets.token_hex(4)
        self._selector_host = _SelectorHost(self)  # what its Selectors see of it
        self.store_create("ram", "ram")
        # stores opened by the caller, e.g. a Redis store whose lease it already holds, so
        # that the queues load their state under that lease
        for store in stores:
            self._stores[store.name] = store
        self._transactional = [s for s in self._stores.values() if s.transactional]
        if catalog is not None:
            self._load_wiring()

    @property
    def journal(self) -> EventJournal | None:
        """The event journal (event_journal.py) when the engine was made with `journal=`;
        `eng.journal.drain()` takes its events. None when the engine keeps no journal."""
        return self._journal

    @property
    def catalog(self) -> Catalog:
        """The engine's wiring; give it to another Engine to rebuild the same network."""
        return self._catalog

    def _load_wiring(self) -> None:
        """Rebuild stores, queues and selectors (same ids) from the catalog. Selector state a
        persistent store kept (credit, outstanding deliveries) is taken over as it is; nothing
        is routed until the next call (see `resume`)."""
        catalog = self._catalog
        for spec in catalog.store_specs():
            if spec.name not in self._stores:
                self._stores[spec.name] = self._open_store(spec.kind, spec.name, spec.url)
        self._transactional = [s for s in self._stores.values() if s.transactional]
        for spec in catalog.queue_specs():
            store = self._stores[spec.store]
            self._queues[spec.name] = self._queue_runtime(spec, store.open_queue(spec.name))
        for qrt in self._queues.values():
            for spec in catalog.selector_specs(qrt.name):
                known = qrt.state.has_selector(spec.id)
                sel = self._selector_runtime(qrt, spec)
                if not known:
                    sel.state.credit = spec.credit
                sel.refresh(compile_filter(spec.filter) if spec.filter is not None else None)
                if spec.action in QUEUE_ACTIONS and spec.target_from is None:
                    self._targeted_by.setdefault(spec.target, set()).add(sel)  # type: ignore
                    sel.resolve(self._target_named(spec.target))  # type: ignore[arg-type]
                if spec.enabled:
                    try:
                        qrt.routing_table.add(sel)
                    except InvalidSelector:
                        # a regex stored before regexes ran on RE2 (matching.py) that needs
                        # backtracking: loaded disabled, for a person to fix, rather than
                        # leaving the whole network unbuildable
                        spec.enabled = False
                        catalog.save_selector(spec)

    def _queue_runtime(self, spec: QueueSpec, state) -> QueueRuntime:  # type: ignore[no-untyped-def]
        qrt = QueueRuntime(spec, state, self._recorder())
        if state.scheduled_count() or qrt.expiries is None:
            self._timed.add(qrt)  # loaded with entries that `tick` may have to move
        return qrt

    def _selector_runtime(self, qrt: QueueRuntime, spec: SelectorSpec) -> SelectorRuntime:
        sel = SelectorRuntime(spec, qrt.state.selector(spec.id), next(self._turns))
        sel.place(qrt.name, f"{qrt.name}:{spec.id}:{self._prefix}.")
        qrt.selectors[spec.id] = sel
        return sel

    def reload(self) -> None:
        """Throw away the in-memory state and load it again from the catalog and the
        stores, as a new process would: for a router whose batch of operations failed
        half-way and was not committed (engine/relay/router.py). Redis stores give back their
        state as last committed; RAM and SQL queues keep theirs as it is."""
        with self._lock:
            for store in self._stores.values():
                reset = getattr(store, "reset", None)
                if reset is not None:
                    reset()
            self._queues.clear()
            self._timed.clear()
            self._targeted_by.clear()
            self._pending.clear()
            self._out = []
            self._forwards, self._settles = [], []  # made by calls rolled back
            self._visited.clear()
            self._nesting = 0
            held, self._held = list(self._held), {}
            self._load_wiring()
            for queue, selector_id in held:  # the selectors feeding absent workers stay held
                qrt = self._queues.get(queue)
                sel = qrt.selectors.get(selector_id) if qrt is not None else None
                if sel is not None:
                    self._held[(queue, selector_id)] = sel
                    sel.hold(True)

    def resume(self) -> list[Delivery]:
        """Route every queue that holds unprocessed messages (after rebuilding from a
        catalog, or when credit was set without routing); returns the Deliveries."""
        with self._lock:
            return self._run(self._resume)

    def _resume(self) -> None:
        for qrt in self._queues.values():
            if qrt.state.depth():
                self._schedule(qrt)

    # == stores ==============================================================================
    def store_create(self, kind: str, name: str, url: str | None = None) -> StoreInfo:
        """Create a named store; idempotent for the same kind and URL."""
        check_name("store", name)
        if kind not in STORE_KINDS:
            raise InvalidArgument(
                f"unknown store kind {kind!r}; use one of {', '.join(STORE_KINDS)}"
            )
        with self._lock:
            existing = self._stores.get(name)
            if existing is not None:
                if existing.kind == kind and existing.url == url:
                    return StoreInfo(kind, name, url)
                raise AlreadyExists(
                    f"store {name!r} already exists as a {existing.kind} store"
                    + (f" at {existing.url}" if existing.url else "")
                )
            store = self._open_store(kind, name, url)
            self._stores[name] = store
            self._transactional = [s for s in self._stores.values() if s.transactional]
            self._catalog.save_store(StoreSpec(kind, name, url))
            return StoreInfo(kind, name, url)

    def _open_store(self, kind: str, name: str, url: str | None) -> Store:
        if kind == "ram":
            return RamStore(name, url)
        if kind == "sql":
            from engine.stores.sql import SqlStore

            return SqlStore(name, url)
        from engine.stores.redis import RedisStore

        return RedisStore(name, url)

    def store_delete(self, name: str) -> None:
        with self._lock:
            store = self._stores.get(name)
            if store is None:
                raise NotFound(f"store {name!r} does not exist")
            if name == self._default_store:
                raise InvalidArgument(f"store {name!r} is the default store and cannot be deleted")
            if name in self._shards:
                raise InvalidArgument(
                    f"store {name!r} is a shard new queues are placed on; set_shards without "
                    "it first"
                )
            used = sorted(q.name for q in self._queues.values() if q.spec.store == name)
            if used:
                raise InvalidArgument(
                    f"store {name!r} still holds queues {', '.join(used[:5])}"
                    + (" ..." if len(used) > 5 else "")
                    + "; delete them first"
                )
            del self._stores[name]
            self._transactional = [s for s in self._stores.values() if s.transactional]
            self._catalog.delete_store(name)
            store.close()

    def stores(self) -> list[StoreInfo]:
        with self._lock:
            return [StoreInfo(s.kind, s.name, s.url) for s in self._stores.values()]

    def backend(self, name: str) -> Store:
        """The store object itself, for what only that kind of store does (leases)."""
        with self._lock:
            store = self._stores.get(name)
            if store is None:
                raise NotFound(f"store {name!r} does not exist")
            return store

    @property
    def default_store(self) -> str:
        return self._default_store

    def set_default_store(self, name: str) -> None:
        """The store `queue_create` uses when none is named."""
        with self._lock:
            if name not in self._stores:
                raise NotFound(f"store {name!r} does not exist")
            self._default_store = name

    def shards(self) -> list[str]:
        """The stores new queues are placed over (placement.py); empty: the default store."""
        return list(self._shards)

    def set_shards(self, names: list[str]) -> None:
        """Place queues created without a store over these stores (SPEC §10, placement.py);
        an empty list places every one in the default store again. Existing queues stay
        where they are."""
        with self._lock:
            for name in names:
                if name not in self._stores:
                    raise NotFound(f"store {name!r} does not exist; create it with store_create")
            if len(set(names)) != len(names):
                raise InvalidArgument(f"shards must be distinct stores, not {names!r}")
            self._shards = tuple(names)

    # == queues ==============================================================================
    def queue_create(
        self,
        name: str,
        store: str | None = None,
        limit: int | None = None,
        history: int = 0,
        dead_letter: str | None = None,
        self_destruct: bool = False,
        journal: bool = True,
        *,
        max_deliveries: int | None = None,
        redelivery_delay: float | None = None,
        redelivery_backoff: float = 1.0,
        redelivery_delay_max: float | None = None,
        ttl: float | None = None,
        priorities: int = 1,
    ) -> QueueInfo:
        """Create a queue; idempotent when it exists with the same settings. `journal=False`
        keeps its events out of the engine's event journal.

        Message lifetime (SPEC §8, docs/lifetime.md), all off by default:
        `max_deliveries` (int >= 1): a message whose next delivery would exceed it is
        dead-lettered (`x-reason: delivery-limit`, `x-delivery-count`) or dropped.
        `redelivery_delay` (seconds >= 0), `redelivery_backoff` (>= 1) and
        `redelivery_delay_max`: a message rejected with requeue or timed out waits
        delay x backoff^(delivery_count - 1), capped, before it is routable again (the
        messages behind it are routed meanwhile); it then goes back to the front.
        `ttl` (seconds): unprocessed messages older than this expire (with a message's own
        ttl, the sooner wins). `priorities` (1-10): with more than one level, the highest
        `priority` header is routed first, FIFO within a level; fixed at creation."""
        check_name("queue", name)
        lifetime = dict(
            max_deliveries=max_deliveries,
            redelivery_delay=redelivery_delay,
            redelivery_backoff=redelivery_backoff,
            redelivery_delay_max=redelivery_delay_max,
            ttl=ttl,
            priorities=priorities,
        )
        return self._queue_create(
            name, store, limit, history, dead_letter, self_destruct, journal, **lifetime
        )

    def _queue_create(
        self,
        name: str,
        store: str | None,
        limit: int | None,
        history: int,
        dead_letter: str | None,
        self_destruct: bool,
        journal: bool = True,
        **lifetime: object,
    ) -> QueueInfo:
        spec = self._queue_spec(
            name, store, limit, history, dead_letter, self_destruct, journal, **lifetime
        )
        with self._lock:
            if spec.store not in self._stores:
                raise NotFound(f"store {spec.store!r} does not exist; create it with store_create")
            self._check_dead_letter(name, dead_letter)
            if name in self._remote:
                raise AlreadyExists(f"queue {name!r} lives on shard {self._remote[name].remote!r}")
            existing = self._queues.get(name)
            if existing is not None:
                if existing.spec == spec:
                    return self._info(existing)
                raise AlreadyExists(
                    f"queue {name!r} already exists with other settings "
                    f"({_describe_spec(existing.spec)})"
                )
            qrt = self._queue_runtime(spec, self._stores[spec.store].open_queue(name))
            self._catalog.save_queue(spec)  # first: a catalog that refuses leaves nothing
            self._queues[name] = qrt
            for sel in self._targeted_by.get(name, ()):
                sel.resolve(qrt)
            return self._info(qrt)

    def _queue_spec(
        self,
        name: str,
        store: str | None,
        limit: object,
        history: object,
        dead_letter: object,
        self_destruct: object,
        journal: object = True,
        max_deliveries: object = None,
        redelivery_delay: object = None,
        redelivery_backoff: object = 1.0,
        redelivery_delay_max: object = None,
        ttl: object = None,
        priorities: object = 1,
    ) -> QueueSpec:
        if store is None and self._shards and self._local_shard is None:
            # (a shard router's engine makes its queues on its own shard, the default: the
            # service placed the call there)
            store = place(name, self._shards, store_of=self._store_of)
        store = self._default_store if store is None else store
        check_name("store", store)
        limit = check_optional_count("limit", limit, minimum=0, maximum=MAX_WIRING)
        history = check_count("history", history, minimum=0, maximum=MAX_WIRING)
        if dead_letter is not None:
            check_name("dead-letter queue", dead_letter, allow_reserved=True)
        if not isinstance(self_destruct, bool):
            raise InvalidArgument(f"self_destruct must be True or False, not {self_destruct!r}")
        if not isinstance(journal, bool):
            raise InvalidArgument(f"journal must be True or False, not {journal!r}")
        lifetime = check_lifetime_options(
            max_deliveries,
            redelivery_delay,
            redelivery_backoff,
            redelivery_delay_max,
            ttl,
            priorities,
        )
        return QueueSpec(
            name, store, limit, history, dead_letter, self_destruct, journal, *lifetime
        )

    def _store_of(self, queue: str) -> str | None:
        qrt = self._queues.get(queue)
        if qrt is not None:
            return qrt.spec.store
        remote = self._remote.get(queue)
        return None if remote is None else remote.remote

    def _recorder(self):  # type: ignore[no-untyped-def]
        return self._journal.append if self._journal is not None else None

    def _check_dead_letter(self, name: str, dead_letter: str | None) -> None:
        """A queue's dead-letter queue must exist, except the engine's own, made on demand."""
        if dead_letter is None or dead_letter == name or self._target_named(dead_letter):
            return
        if dead_letter != self.dead_letter:
            raise NotFound(f"dead-letter queue {dead_letter!r} does not exist; create it first")
        self._engine_dead_letter_queue()

    def queue_update(self, name: str, **changes: object) -> QueueInfo:
        """Change a queue's limit, history, dead_letter, self_destruct or journal."""
        if "priorities" in changes:
            raise InvalidArgument(
                "a queue's priorities are fixed when it is created; make a new queue"
            )
        changeable = {"limit", "history", "dead_letter", "self_destruct", "journal"}
        unknown = set(changes) - changeable - set(LIFETIME_OPTIONS)
        if unknown:
            raise InvalidArgument(
                f"queue setting(s) {', '.join(sorted(unknown))} cannot be changed"
            )
        with self._lock:
            qrt = self._queue(name)
            current = qrt.spec
            values = {
                "limit": current.limit,
                "history": current.history,
                "dead_letter": current.dead_letter,
                "self_destruct": current.self_destruct,
                "journal": current.journal,
            }
            values.update({option: getattr(current, option) for option in LIFETIME_OPTIONS})
            values.update(changes)
            spec = self._queue_spec(name, current.store, **values)  # type: ignore[arg-type]
            self._check_dead_letter(name, spec.dead_letter)
            # the catalog first: one that refuses leaves the running queue as it was; a
            # failure after it puts both back
            self._catalog.save_queue(spec)
            try:
                qrt.apply(spec)
                if spec.ttl != current.ttl:
                    qrt.expiries = None  # expiry times change: rebuilt at the next tick
                    self._timed.add(qrt)
                self._run(qrt.state.trim_history, spec.history)
            except BaseException:
                qrt.apply(current)
                self._catalog.save_queue(current)
                raise
            return self._info(qrt)

    def queue_fetch(self, name: str) -> QueueInfo:
        with self._lock:
            return self._info(self._queue(name))

    def queues(self) -> list[QueueInfo]:
        with self._lock:
            return [self._info(self._queues[name]) for name in sorted(self._queues)]

    def queue_delete(self, name: str) -> list[Delivery]:
        """Delete a queue with its selectors and messages. Messages it held that were moved
        here are settled upstream (as dropped), which may route and deliver there."""
        with self._lock:
            qrt = self._queue(name)
            return self._run(self._delete_queue, qrt)

    def _delete_queue(self, qrt: QueueRuntime) -> None:
        qrt.deleted = True
        del self._queues[qrt.name]
        for sel in self._targeted_by.get(qrt.name, ()):
            sel.resolve(None)
        for sel in qrt.selectors.values():
            self._untarget(sel)
        state = qrt.state
        held = state.unprocessed(state.depth())
        for sel in qrt.selectors.values():
            held.extend(e for e in sel.state.outstanding.values() if not e.replay)
        held.extend(entry for entry, _ in state.scheduled())
        self._stores[qrt.spec.store].drop_queue(qrt.name)
        self._catalog.delete_queue(qrt.name)
        journal = qrt.journal
        site = ("drop", qrt.name, None, None)
        for entry in held:
            if journal is not None:  # what it held ends here (a trace says so)
                journal((self._clock, site, entry.message.mid, "queue deleted", None))
            self._settle(entry.origin)

    def _queue(self, name: object) -> QueueRuntime:
        qrt = self._queues.get(name)  # type: ignore[arg-type]
        if qrt is None:
            raise NotFound(f"queue {name!r} does not exist")
        return qrt

    def _info(self, qrt: QueueRuntime) -> QueueInfo:
        spec = qrt.spec
        return QueueInfo(
            name=spec.name,
            store=spec.store,
            depth=qrt.state.depth(),
            history_size=qrt.state.history_size(),
            limit=spec.limit,
            history=spec.history,
            dead_letter=spec.dead_letter,
            self_destruct=spec.self_destruct,
            outstanding=sum(len(s.state.outstanding) for s in qrt.selectors.values()),
            journal=spec.journal,
            max_deliveries=spec.max_deliveries,
            redelivery_delay=spec.redelivery_delay,
            redelivery_backoff=spec.redelivery_backoff,
            redelivery_delay_max=spec.redelivery_delay_max,
            ttl=spec.ttl,
            priorities=spec.priorities,
            scheduled=qrt.state.scheduled_count(),
        )

    # == selectors ===========================================================================
    def selector_create(self, queue: str) -> Selector:
        """A new selector on `queue`: no WHEN, no DO, disabled, unlimited credit."""
        with self._lock:
            qrt = self._queue(queue)
            spec = SelectorSpec(queue=queue, id=self._catalog.next_selector_id(queue))
            state = self._selector_runtime(qrt, spec).state
            self._run(setattr, state, "credit", -1)  # an operation: stores commit it
            self._catalog.save_selector(spec)
            return Selector(self._selector_host, queue, spec.id)

    def selector_fetch(self, queue: str, selector_id: int) -> Selector:
        with self._lock:
            self._selector(queue, selector_id)
            return Selector(self._selector_host, queue, selector_id)

    def selectors(self, queue: str) -> list[Selector]:
        with self._lock:
            host = self._selector_host
            return [Selector(host, queue, sid) for sid in self._queue(queue).selectors]

    def selector_delete(self, queue: str, selector_id: int) -> list[Delivery]:
        """Delete a selector. Its outstanding messages go back to the front of the queue, in
        order, and are routed again; a self-destructive queue left without selectors goes."""
        with self._lock:
            qrt, sel = self._selector(queue, selector_id)
            return self._run(self._delete_selector, qrt, sel)

    def _delete_selector(self, qrt: QueueRuntime, sel: SelectorRuntime) -> None:
        del qrt.selectors[sel.id]
        qrt.routing_table.remove(sel)
        self._untarget(sel)
        taken = list(sel.state.outstanding.values())
        sel.state.outstanding.clear()
        qrt.state.drop_selector(sel.id)
        self._catalog.delete_selector(qrt.name, sel.id)
        returned = []
        for entry in taken:
            if entry.replay:
                continue
            if entry.downstream is None:
                returned.append(entry)
                continue
            name, seq = entry.downstream
            target = self._queues.get(name)
            if target is not None and target.state.remove(seq):
                target.counters["published"] -= 1
                returned.append(entry)
            else:
                # already taken further downstream: it is theirs now; done here
                self._processed(qrt, entry)
        if returned:
            returned.sort(key=by_seq)
            qrt.state.push_front(returned)
            self._schedule(qrt)
        if qrt.spec.self_destruct and not qrt.selectors:
            self._delete_queue(qrt)

    def _selector(self, queue: str, selector_id: object) -> tuple[QueueRuntime, SelectorRuntime]:
        qrt = self._queue(queue)
        sel = qrt.selectors.get(selector_id)  # type: ignore[arg-type]
        if sel is None:
            raise NotFound(f"selector {selector_id!r} does not exist on queue {queue!r}")
        return qrt, sel

    def _untarget(self, sel: SelectorRuntime) -> None:
        if sel.target is not None and sel.action in QUEUE_ACTIONS:
            targeting = self._targeted_by.get(sel.target)
            if targeting is not None:
                targeting.discard(sel)
                if not targeting:
                    del self._targeted_by[sel.target]

    # == purge ===============================================================================
    def purge(
        self, queue: str, seqs: list[int] | None = None, *, reason: str = "purged"
    ) -> list[Delivery]:
        """Remove unprocessed messages from `queue` (all, or those with the given seqs) and
        count them as dropped; messages moved here are settled upstream, which may route
        and deliver there. NotFound, changing nothing, when a seq is not waiting. Each
        leaves a `drop` event with `reason` (PURGE_REASONS: "purged", or "deleted" and
        "moved" by an operator's message operation) in the journal."""
        if reason not in PURGE_REASONS:
            raise InvalidArgument(f"reason must be one of {', '.join(PURGE_REASONS)}")
        if seqs is not None:
            if not isinstance(seqs, list | tuple):
                raise InvalidArgument(f"seqs must be a list of numbers, not {seqs!r}")
            for seq in seqs:
                check_count("seq", seq, minimum=1)
        with self._lock:
            qrt = self._queue(queue)
            state = qrt.state
            waiting = state.unprocessed(state.depth())
            if seqs is None:
                chosen = waiting
            else:
                by_seq_number = {entry.seq: entry for entry in waiting}
                missing = [seq for seq in seqs if seq not in by_seq_number]
                if missing:
                    raise NotFound(
                        f"queue {queue!r} holds no unprocessed message with seq "
                        + ", ".join(str(seq) for seq in missing[:5])
                    )
                chosen = [by_seq_number[seq] for seq in dict.fromkeys(seqs)]
            return self._run(self._purge, qrt, chosen, seqs is None, reason)

    def _purge(self, qrt: QueueRuntime, entries: list, everything: bool, reason: str) -> None:
        state = qrt.state
        journal = qrt.journal
        site = ("drop", qrt.name, None, None)
        for entry in entries:
            if everything:
                state.pop_head()  # the entries are the queue's, in order: no search
            else:
                state.remove(entry.seq)
            qrt.counters["dropped"] += 1
            if journal is not None:
                journal((self._clock, site, entry.message.mid, reason, None))
            self._settle(entry.origin)


# the reasons a purge gives its messages' `drop` events (lineage.py says them)
PURGE_REASONS = ("purged", "deleted", "moved")


class _SelectorHost:
    """The engine as its Selectors see it: selectors.SelectorHost over the Engine's own
    state, so that selectors.py needs nothing of this module (see its docstring)."""

    __slots__ = ("_engine", "lock")

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.lock = engine._lock

    def runtimes(self, queue: str, selector_id: int) -> tuple[QueueRuntime, SelectorRuntime]:
        return self._engine._selector(queue, selector_id)

    def queue_runtime(self, name: str) -> QueueRuntime | None:
        return self._engine._target_named(name)

    def deliver_elsewhere(self, destination: str) -> str | None:
        return self._engine._no_delivery_queue(destination)

    def untarget(self, sel: SelectorRuntime) -> None:
        self._engine._untarget(sel)

    def target(self, sel: SelectorRuntime, queue: QueueRuntime | None) -> None:
        if queue is not None:
            self._engine._targeted_by.setdefault(queue.name, set()).add(sel)
        sel.resolve(queue)

    def wiring_changed(self, qrt: QueueRuntime, sel: SelectorRuntime) -> None:
        qrt.routing_table.remove(sel)
        if sel.spec.enabled:
            qrt.routing_table.add(sel)
        self._engine._catalog.save_selector(sel.spec)

    def save_selector(self, spec: SelectorSpec) -> None:
        self._engine._catalog.save_selector(spec)

    def run(self, operation: Callable[..., object], *args: object) -> list[Delivery]:
        return self._engine._run(operation, *args)

    def credit_arrived(self, qrt: QueueRuntime, sel: SelectorRuntime) -> None:
        self._engine._credit_arrived(qrt, sel)

    def selector_enabled(self, qrt: QueueRuntime, sel: SelectorRuntime) -> None:
        start = sel.spec.start
        if start != "current" and sel.spec.when not in ("default", "overflow"):
            sel.replay_next = 1 if start == "head" else start  # type: ignore[assignment]
            sel.replay_end = qrt.state.last_seq()
            self._engine._replay(qrt, sel)
        self._engine._schedule(qrt)

    def selector_resumed(
        self, qrt: QueueRuntime, sel: SelectorRuntime, position: tuple[int, int] | None
    ) -> None:
        if position is not None:
            sel.replay_next, sel.replay_end = position
            self._engine._replay(qrt, sel)
        self._engine._schedule(qrt)

    def selector_delete(self, queue: str, selector_id: int) -> list[Delivery]:
        return self._engine.selector_delete(queue, selector_id)


def _describe_spec(spec: QueueSpec) -> str:
    return (
        f"store={spec.store}, limit={spec.limit}, history={spec.history}, "
        f"dead_letter={spec.dead_letter}, self_destruct={spec.self_destruct}"
        + ("" if spec.journal else ", journal=False")
        + "".join(
            f", {option}={getattr(spec, option)}"
            for option in LIFETIME_OPTIONS
            if getattr(spec, option) != _LIFETIME_DEFAULTS[option]
        )
    )


_LIFETIME_DEFAULTS = {f.name: f.default for f in fields(QueueSpec) if f.name in LIFETIME_OPTIONS}


def _event_journal(journal: object, lock: threading.RLock) -> EventJournal | None:
    """`journal=False` keeps none; True keeps one of the default capacity; an int sets it."""
    if journal is False:
        return None
    if journal is True:
        return EventJournal(lock=lock)
    capacity = check_count("journal capacity", journal, minimum=1)
    return EventJournal(capacity, lock=lock)
