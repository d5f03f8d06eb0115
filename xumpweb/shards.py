"""The service's shards (SPEC §10, docs/scaling.md): which Redis store holds a queue, and
which one a destination's subscribers read.

Theory of operation. `XUMP_SHARDS=N` names N stores: `XUMP_STORE` ("main", shard 0, today's
single store with its data unchanged) and `main-1` ... `main-{N-1}`. A queue's shard is
decided once, at creation, by engine/placement.py's rules, and kept in the wiring (the
Queue row's store); this module reads it back from the wiring, cached per wiring version,
so a process asks Redis nothing more than the version it reads anyway.

A destination's **home** is the shard its subscribers read (its outbox, its claims and
acks). It is decided once too, and kept:

1. the shard of the queue of the same name, when there is one;
2. else the home recorded for it (a DestinationHome row): the catalog records one when it
   records the first selector that DELIVERs to the destination by name (a selector made
   through the API, a pattern, a STOMP subscription, a definitions import: everything the
   engine wires goes through wiring/catalog.py), as rules 1 or 3 give it at that moment,
   and forgets it once no selector DELIVERs there, when a selector or queue is deleted
   (which revokes its deliveries; a selector turned to another destination leaves the old
   one's home recorded until then, as its deliveries there may be outstanding);
3. else where placement would put a queue of that name now (rule 2 of placement, "lives
   with the queue named before the `:`", looks the owner up by these same rules).

A new queue named for a destination with a recorded home is placed on that home, and one
given another store is refused (InvalidArgument, a 400), so making the queue never moves
the destination either (its outbox, with what waits there, stays where it is read). The routers'
engines get the recorded homes with the other shards' queues (runtime.py, `Engine.
set_destination_homes`), so a router and a subscriber always agree where a destination is
read: a DELIVER whose destination is at home on the selector's shard writes to the outbox
the subscribers read, and one whose destination is read elsewhere MOVEs into its delivery
queue there (xumpweb/shard_calls.py), as before.

Why nothing is stranded when N grows: placement depends on N, but only rule 3 uses it,
and rule 3 decides a destination's home only until the first DELIVER to it is recorded.
From then on every process reads the recorded home (or the queue of its name, which never
moves), whatever N says: the deliveries already in its outbox and those written after a
restart with more shards are in the one outbox its subscribers read. A destination that
nothing DELIVERs to has no deliveries anywhere, so rule 3 may place it anew. Homes made
before this record existed were recorded by migration 0008 from the wiring (the shard of
the queue of its name, else the one shard whose selectors deliver there, else placement
over the shards the routers had recorded, so shard 0 when none: one shard was the only
layout before shards).

When N shrinks: a home on a removed shard would be read nowhere, as a queue there would
be routed nowhere. `beyond()` and `homes_beyond()` name such shards, and the start-up
checks (router/apps.py for queues, wiring/apps.py for homes) refuse to start until
XUMP_SHARDS includes them again or the selectors delivering there are deleted (their
deliveries revoked, the home forgotten).

Not recorded: a destination a message names in its envelope (`target_from`), which is
known only when the message is routed; it keeps rule 3 (or rule 1: give it a queue of
its name to pin it).

With one shard every answer is the one store, and nothing is read; the catalog records
homes all the same (shard 0's), so a service that goes from one shard to more keeps them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from django.conf import settings

from engine.errors import InvalidArgument
from engine.placement import place

Where = Callable[[str], "str | None"]  # a name -> its queue's shard, else its recorded home


def names() -> list[str]:
    """The shards' store names, shard 0 first."""
    main = settings.XUMP_STORE
    return [main] + [f"{main}-{number}" for number in range(1, settings.XUMP_SHARDS)]


def sharded() -> bool:
    return settings.XUMP_SHARDS > 1


def _removed(stores: dict[str, int]) -> dict[str, int]:
    """Those of `stores` that are shards past the ones XUMP_SHARDS names."""
    main = settings.XUMP_STORE
    ours = set(names())
    return {
        store: count
        for store, count in stores.items()
        if store not in ours and store.startswith(f"{main}-") and store[len(main) + 1 :].isdigit()
    }


def beyond() -> dict[str, int]:
    """Stores past the shards XUMP_SHARDS names that still hold queues (shards removed
    while not empty): store -> how many queues."""
    from django.db.models import Count

    from xumpweb.wiring.models import Queue

    found = Queue.objects.values_list("store__name").annotate(count=Count("id")).order_by()
    return _removed(dict(found))


def homes_beyond() -> dict[str, int]:
    """Stores past the shards XUMP_SHARDS names that destinations are still read on (see
    the module doc): store -> how many destinations."""
    from django.db.models import Count

    from xumpweb.wiring.models import DestinationHome

    found = DestinationHome.objects.values_list("store").annotate(count=Count("id")).order_by()
    return _removed(dict(found))


def home_by(destination: str, where: Where) -> str:
    """A destination's home by the rules of the module doc, `where` giving rules 1 and 2."""
    found = where(destination)
    return found if found is not None else place(destination, names(), store_of=where)


def home_now(destination: str) -> str:
    """A destination's home as the models say it now (not cached): what the catalog
    records with the first DELIVER to it."""
    from xumpweb.wiring.models import DestinationHome, Queue

    def where(name: str) -> str | None:
        queues = Queue.objects.filter(name=name).values_list("store__name", flat=True)
        found = queues.first()
        if found is None:
            homes = DestinationHome.objects.filter(destination=name)
            found = homes.values_list("store", flat=True).first()
        return found

    return home_by(destination, where)


class Placement:
    """Where the wiring of one version keeps each queue (name -> store) and each recorded
    destination's home (destination -> store)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._version: object = None
        self._stores: dict[str, str] = {}
        self._homes: dict[str, str] = {}

    def _read(self, version: object) -> tuple[dict[str, str], dict[str, str]]:
        """The queues' stores and the recorded homes as the wiring of `version` has them
        (re-read from the models when the version moved)."""
        with self._lock:
            if version != self._version or version is None:
                from xumpweb.wiring.models import DestinationHome, Queue

                self._stores = dict(Queue.objects.values_list("name", "store__name"))
                self._homes = dict(DestinationHome.objects.values_list("destination", "store"))
                self._version = version
            return self._stores, self._homes

    def stores(self, version: object) -> dict[str, str]:
        """name -> store of every queue, as the wiring of `version` has them."""
        return self._read(version)[0]

    def store_of(self, queue: str, version: object) -> str | None:
        """The shard of an existing queue; None when it does not exist."""
        return self.stores(version).get(queue)

    def place(self, queue: str, version: object, explicit: str | None = None) -> str:
        """The shard an existing queue lives on, or a new one would: its explicit store,
        else its home when a destination of its name has one, else placement's rules."""
        stores, homes = self._read(version)
        found = stores.get(queue)
        if found is not None:
            return found
        if explicit is not None:
            home = homes.get(queue)
            if home is not None and explicit != home:
                raise InvalidArgument(
                    f"a queue named {queue!r} lives where its destination is read, shard "
                    f"{home!r} (its recorded home): give that store, or none"
                )
            return explicit

        def where(name: str) -> str | None:
            found = stores.get(name)
            return found if found is not None else homes.get(name)

        return home_by(queue, where)

    def home(self, destination: str, version: object) -> str:
        """The shard a destination's subscribers read (see the module doc)."""
        return self.place(destination, version)
