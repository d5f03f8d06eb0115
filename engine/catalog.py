"""The catalog: the engine's wiring (stores, queues, selectors and their settings).

Theory of operation: the engine keeps its runtime (routers, store handles) in memory and
writes every wiring change through a catalog, so that another process can rebuild the same
network. `MemoryCatalog` is the embedded default; the web service swaps in one backed by its
Django models. Per-message state (unprocessed, history, credit, outstanding) is never here:
it lives in the stores.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(slots=True)
class StoreSpec:
    kind: str
    name: str
    url: str | None = None


@dataclass(slots=True)
class QueueSpec:
    name: str
    store: str = "ram"
    limit: int | None = None
    history: int = 0
    dead_letter: str | None = None
    self_destruct: bool = False
    journal: bool = True  # record this queue's events in the engine's journal, if it keeps one
    # message lifetime (SPEC §8, docs/lifetime.md); the defaults keep a queue as before
    max_deliveries: int | None = None
    redelivery_delay: float | None = None
    redelivery_backoff: float = 1.0
    redelivery_delay_max: float | None = None
    ttl: float | None = None
    priorities: int = 1


@dataclass(slots=True)
class SelectorSpec:
    """A selector's WHEN + DO. `when` is None until configured, else one of "match"
    (match and/or filter), "always", "default", "overflow"."""

    queue: str
    id: int
    when: str | None = None
    match: tuple[str, str, str] | None = None  # (operator, pattern, field): the indexed one
    filter: str | None = None
    action: str | None = None
    target: str | None = None
    enabled: bool = False
    start: str | int = "current"
    credit: int = -1  # the credit set by set_credit; runtime credit lives in the store
    # further MATCH conditions after `match` (SPEC §12): all must hold
    more_matches: tuple[tuple[str, str, str], ...] = ()
    # the field naming each message's target queue or destination, instead of `target`
    target_from: str | None = None


class Catalog(Protocol):
    """Where an engine keeps its wiring. The engine writes every change through it, and an
    engine created with a catalog that already holds wiring rebuilds that wiring (the same
    queues and selector ids), so a new process finds the network the last one had."""

    def store_specs(self) -> Iterable[StoreSpec]: ...
    def queue_specs(self) -> Iterable[QueueSpec]: ...
    def selector_specs(self, queue: str) -> Iterable[SelectorSpec]: ...
    def save_store(self, spec: StoreSpec) -> None: ...
    def delete_store(self, name: str) -> None: ...
    def save_queue(self, spec: QueueSpec) -> None: ...
    def delete_queue(self, name: str) -> None: ...
    def next_selector_id(self, queue: str) -> int: ...
    def save_selector(self, spec: SelectorSpec) -> None: ...
    def delete_selector(self, queue: str, selector_id: int) -> None: ...


@dataclass
class MemoryCatalog:
    """Wiring held in dicts; what an embedded engine uses."""

    stores: dict[str, StoreSpec] = field(default_factory=dict)
    queues: dict[str, QueueSpec] = field(default_factory=dict)
    selectors: dict[str, dict[int, SelectorSpec]] = field(default_factory=dict)
    last_selector_id: dict[str, int] = field(default_factory=dict)

    def store_specs(self) -> Iterable[StoreSpec]:
        return list(self.stores.values())

    def queue_specs(self) -> Iterable[QueueSpec]:
        return list(self.queues.values())

    def selector_specs(self, queue: str) -> Iterable[SelectorSpec]:
        return sorted(self.selectors.get(queue, {}).values(), key=lambda spec: spec.id)

    def save_store(self, spec: StoreSpec) -> None:
        self.stores[spec.name] = spec

    def delete_store(self, name: str) -> None:
        self.stores.pop(name, None)

    def save_queue(self, spec: QueueSpec) -> None:
        self.queues[spec.name] = spec
        self.selectors.setdefault(spec.name, {})

    def delete_queue(self, name: str) -> None:
        self.queues.pop(name, None)
        self.selectors.pop(name, None)
        self.last_selector_id.pop(name, None)

    def next_selector_id(self, queue: str) -> int:
        """Ids start at 1 per queue and are never reused while the queue exists."""
        number = self.last_selector_id.get(queue, 0) + 1
        self.last_selector_id[queue] = number
        return number

    def save_selector(self, spec: SelectorSpec) -> None:
        self.selectors.setdefault(spec.queue, {})[spec.id] = spec

    def delete_selector(self, queue: str, selector_id: int) -> None:
        self.selectors.get(queue, {}).pop(selector_id, None)
