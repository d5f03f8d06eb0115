"""The service's shards (SPEC §10, docs/scaling.md): which Redis store holds a queue, and
which one a destination's subscribers read.

Theory of operation. `XUMP_SHARDS=N` names N stores: `XUMP_STORE` ("main", shard 0, today's
single store with its data unchanged) and `main-1` ... `main-{N-1}`. A queue's shard is
decided once, at creation, by engine/placement.py's rules, and kept in the wiring (the
Queue row's store); this module reads it back from the wiring, cached per wiring version,
so a process asks Redis nothing more than the version it reads anyway.

A destination's **home** is the shard its subscribers read (its outbox, its claims and
acks): the shard of the queue of the same name when there is one, else where placement
would put a queue of that name. Every pattern the service builds delivers from a queue on
its destination's home (a mailbox `x` delivers to `x`; a wolfpack's, a parrot's and a
STOMP connection's private queues and destinations share their owner's name before the
`:`), and a DELIVER selector whose destination lives on another shard is refused
(engine's `set_destination_homes`), so a delivery is always written where its subscribers
read it.

With one shard every answer is the one store, and nothing is read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.conf import settings

from engine.placement import place


def names() -> list[str]:
    """The shards' store names, shard 0 first."""
    main = settings.XUMP_STORE
    return [main] + [f"{main}-{number}" for number in range(1, settings.XUMP_SHARDS)]


def sharded() -> bool:
    return settings.XUMP_SHARDS > 1


def beyond() -> dict[str, int]:
    """Stores past the shards XUMP_SHARDS names that still hold queues (shards removed
    while not empty): store -> how many queues."""
    from django.db.models import Count

    from xumpweb.wiring.models import Queue

    main = settings.XUMP_STORE
    ours = set(names())
    found = Queue.objects.values_list("store__name").annotate(count=Count("id")).order_by()
    return {
        store: count
        for store, count in found
        if store not in ours and store.startswith(f"{main}-") and store[len(main) + 1 :].isdigit()
    }


class Placement:
    """Where the wiring of one version keeps each queue (name -> store)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version: object = None
        self._stores: dict[str, str] = {}

    def stores(self, version: object) -> dict[str, str]:
        """name -> store of every queue, as the wiring of `version` has them (re-read from
        the models when the version moved)."""
        with self._lock:
            if version != self._version or version is None:
                from xumpweb.wiring.models import Queue

                self._stores = dict(Queue.objects.values_list("name", "store__name"))
                self._version = version
            return self._stores

    def store_of(self, queue: str, version: object) -> str | None:
        """The shard of an existing queue; None when it does not exist."""
        return self.stores(version).get(queue)

    def place(self, queue: str, version: object, explicit: str | None = None) -> str:
        """The shard an existing queue lives on, or a new one would: placement's rules."""
        found = self.stores(version).get(queue)
        if found is not None:
            return found
        return place(queue, names(), explicit, self._lookup(version))

    def home(self, destination: str, version: object) -> str:
        """The shard a destination's subscribers read (see the module doc)."""
        return self.place(destination, version)

    def _lookup(self, version: object) -> Callable[[str], str | None]:
        stores = self.stores(version)
        return stores.get
