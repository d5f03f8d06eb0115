"""The engine's catalog kept in Django models (engine/catalog.py defines the protocol).

The routing process's engine writes every wiring change through this catalog, so the models
always hold what the engine runs, and a process that builds a new engine from them rebuilds
the same network (selector ids included).

Destinations' homes (xumpweb/shards.py): recording a selector that DELIVERs to a destination
by name records the destination's home when it has none yet, and deleting the last such
selector (or its queue) forgets it. Here, because every selector the engine wires (through
the API, a pattern, a STOMP subscription, an import) is recorded here, and only when the
wiring changes: nothing per message.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.db.models import F, Q

from engine.catalog import QueueSpec, SelectorSpec, StoreSpec
from engine.core import LIFETIME_OPTIONS  # kept as Queue columns of the same names
from engine.errors import AlreadyExists
from xumpweb import shards
from xumpweb.wiring import models


class DjangoCatalog:
    def store_specs(self) -> Iterable[StoreSpec]:
        return [StoreSpec(s.kind, s.name, s.url or None) for s in models.Store.objects.all()]

    def queue_specs(self) -> Iterable[QueueSpec]:
        return [queue_spec(q) for q in models.Queue.objects.select_related("store")]

    def selector_specs(self, queue: str) -> Iterable[SelectorSpec]:
        rows = models.Selector.objects.filter(queue__name=queue).order_by("number")
        return [selector_spec(row, queue) for row in rows]

    def save_store(self, spec: StoreSpec) -> None:
        models.Store.objects.update_or_create(
            name=spec.name, defaults={"kind": spec.kind, "url": spec.url or ""}
        )

    def delete_store(self, name: str) -> None:
        models.Store.objects.filter(name=name).delete()

    def save_queue(self, spec: QueueSpec) -> None:
        store, _ = models.Store.objects.get_or_create(name=spec.store, defaults={"kind": "ram"})
        models.Queue.objects.update_or_create(
            name=spec.name,
            defaults={
                "store": store,
                "limit": spec.limit,
                "history": spec.history,
                "dead_letter": spec.dead_letter,
                "self_destruct": spec.self_destruct,
                "journal": spec.journal,
                **{option: getattr(spec, option) for option in LIFETIME_OPTIONS},
            },
        )

    def delete_queue(self, name: str) -> None:
        models.Queue.objects.filter(name=name).delete()
        _forget_homes()

    def next_selector_id(self, queue: str) -> int:
        with transaction.atomic():
            models.Queue.objects.filter(name=queue).update(
                last_selector_id=F("last_selector_id") + 1
            )
            return models.Queue.objects.values_list("last_selector_id", flat=True).get(name=queue)

    def save_selector(self, spec: SelectorSpec) -> None:
        operator, pattern, field = spec.match or ("", "", "address")
        models.Selector.objects.update_or_create(
            queue=models.Queue.objects.get(name=spec.queue),
            number=spec.id,
            defaults={
                "when": spec.when,
                "match_operator": operator,
                "match_pattern": pattern,
                "match_field": field,
                "filter": spec.filter,
                "action": spec.action,
                "target": spec.target,
                "enabled": spec.enabled,
                "start": str(spec.start),
                "credit": spec.credit,
                "more_matches": [list(match) for match in spec.more_matches],
                "target_from": spec.target_from,
            },
        )
        if spec.action == "deliver" and spec.target and not spec.target_from:
            _record_home(spec.target)
        # (a selector turned elsewhere leaves the old destination's home until the next
        # selector or queue deleted sweeps the homes nothing delivers to: _forget_homes)

    def delete_selector(self, queue: str, selector_id: int) -> None:
        models.Selector.objects.filter(queue__name=queue, number=selector_id).delete()
        _forget_homes()

    def destination_homes(self) -> dict[str, str]:
        """Every recorded home: destination -> its store (xumpweb/shards.py)."""
        return dict(models.DestinationHome.objects.values_list("destination", "store"))


class ShardCatalog(DjangoCatalog):
    """The wiring of one shard's queues, for that shard's router's engine (SPEC §10): its
    store and the queues that live in it; every other queue is a remote stand-in
    (`remote_queues`). Never moves a queue: making one whose name another shard's queue
    has is refused."""

    def __init__(self, store: str) -> None:
        self.store = store

    def store_specs(self) -> Iterable[StoreSpec]:
        return [spec for spec in super().store_specs() if spec.name == self.store]

    def queue_specs(self) -> Iterable[QueueSpec]:
        rows = models.Queue.objects.select_related("store").filter(store__name=self.store)
        return [queue_spec(q) for q in rows]

    def save_queue(self, spec: QueueSpec) -> None:
        rows = models.Queue.objects.filter(name=spec.name).exclude(store__name=spec.store)
        for store in rows.values_list("store__name", flat=True):
            raise AlreadyExists(f"queue {spec.name!r} lives on shard {store!r}")
        super().save_queue(spec)

    def remote_queues(self) -> dict[str, str]:
        """Every other shard's queue: name -> its store."""
        rows = models.Queue.objects.exclude(store__name=self.store)
        return dict(rows.values_list("name", "store__name"))


def _record_home(destination: str) -> None:
    """Its home, kept from now on, unless it has one (xumpweb/shards.py)."""
    if not models.DestinationHome.objects.filter(destination=destination).exists():
        home = shards.home_now(destination)
        models.DestinationHome.objects.get_or_create(
            destination=destination, defaults={"store": home}
        )


def _forget_homes() -> None:
    """Forget the homes of the destinations no selector DELIVERs to any more (by name): those
    of the selectors just deleted, and one a selector delivered to before it was turned
    elsewhere (kept while that selector lived, as its deliveries there may be outstanding;
    a home kept for nothing would hold a lower XUMP_SHARDS up at start, xump.E002)."""
    delivering = models.Selector.objects.filter(action="deliver", target__gt="").filter(
        Q(target_from__isnull=True) | Q(target_from="")
    )
    gone = models.DestinationHome.objects.exclude(destination__in=delivering.values("target"))
    gone.delete()


def queue_spec(row: models.Queue) -> QueueSpec:
    return QueueSpec(
        name=row.name,
        store=row.store.name,
        limit=row.limit,
        history=row.history,
        dead_letter=row.dead_letter or None,
        self_destruct=row.self_destruct,
        journal=row.journal,
        **{option: getattr(row, option) for option in LIFETIME_OPTIONS},
    )


def selector_spec(row: models.Selector, queue: str) -> SelectorSpec:
    match = None
    if row.match_operator:
        match = (row.match_operator, row.match_pattern, row.match_field or "address")
    start: str | int = int(row.start) if row.start.isdigit() else row.start
    return SelectorSpec(
        queue=queue,
        id=row.number,
        when=row.when or None,
        match=match,
        filter=row.filter,
        action=row.action or None,
        target=row.target,
        enabled=row.enabled,
        start=start,
        credit=row.credit,
        more_matches=tuple(tuple(m) for m in row.more_matches or ()) if match else (),
        target_from=row.target_from or None,
    )
