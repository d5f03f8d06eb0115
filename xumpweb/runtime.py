"""The one place that builds what a process needs to reach Xump's engine.

Theory of operation. The service's queues live in one Redis store (`XUMP_STORE`, default
"main"). One process at a time routes it: the **router**, which holds the store's lease and
runs the engine (engine.relay.RelayRouter) with its wiring rebuilt from the Django models
(wiring/catalog.py). Every process, the router's included, reaches the queues as a
**client** (`service()`): publishes, confirms and rejects are appended to the store's
durable inbox and return at once; everything else (wiring changes, history pages, stats) is
an operation the router runs and answers (router/operations.py), after every command sent
before it.

Who routes: with `XUMP_ROUTING=worker` (the default) a Celery task (router/tasks.py)
becomes the router for a burst of traffic: a client that sends a command while no router is
busy schedules one task (`kick`), which drains the inbox and lingers a little before it
lets the lease go; and every worker's lease watch takes the lease over when nobody holds
it and work waits (a router died, deliveries are outstanding), beat or no beat
(router/watch.py). With `XUMP_ROUTING=inline` the web process routes in a thread of its own.

The router's engine keeps an event journal; every routing step appends its events to the
store's journal list in Redis in the same atomic step as its changes, for the archive
export (analytics/journal.py).

A router keeps its engine between bursts while nobody else held the lease in between (the
lease's fencing number tells); otherwise it rebuilds it from the catalog and the store.

Waking the router: every append to the inbox rings the store's doorbell (a pub/sub
PUBLISH in the append's own script, engine.relay.PUSH, pipelined with the `kicked` flag's
SET NX: neither writes to the AOF), and the ring carries the commands appended, so the
router takes them without reading the inbox (engine/relay's package doc, "Rings that carry
the commands"); it reads the inbox when a ring carries none it can use (one was missed, an
append was too big to carry), after a step of `limit` commands, and at every idle look.
An idle router waits on the doorbell rather than polling the inbox, and renews its lease a
few times per lease period rather than at every look (a renewal is a Redis write, which
costs an fsync with appendfsync always). Commands appended by other means are still seen
within IDLE_LOOK seconds. A consumer whose
destination had none rings every shard's doorbell with ARRIVAL (`announce_arrival`): the
router looks at who is away at once (its expire pass), so a wolfpack worker that arrives
gets the work held for it without waiting for the next pass.

Shards (SPEC §10, docs/scaling.md): with XUMP_SHARDS=N the queues live in N stores, each
with its own lease, inbox and outboxes. `service()` is shard 0's client and holds every
shard's (`Service.shards`); publishes, acks and calls go to their queue's shard
(`shard_of`, xumpweb/shard_calls.py), a subscriber to its destination's home (`shard_for`).
A Router routes one shard: its engine holds that shard's queues and stand-ins for the
others'. With one shard, all of this is the one store, as before.

Layers: router/tasks.py (its task runs a Router) and metrics.py (its scrape reads
`service()`) sit above this module, which imports neither: it schedules the routing task by
its Celery name, and a router counts for /metrics with the counters router/apps.py hands
to `count_with` at start-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import select
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

import redis
from django.conf import settings

from engine import Engine, Message
from engine.errors import GapMoved, NotFound, NotWritten, StoreError
from engine.message import Delivery
from engine.relay import (
    TICK_EVERY,
    Handed,
    RelayClient,
    RelayRouter,
    delivery_keys,
    pushed_key,
    relay_keys,
    store_failure,
)
from engine.stores.redis import RedisStore
from engine.validation import DEFAULT_MAX_BODY
from xumpweb import redis_clients, redis_health, series, shard_calls
from xumpweb import shards as shard_map
from xumpweb.analytics.journal import append_commands, journal_key
from xumpweb.router import operations

logger = logging.getLogger("xump.runtime")

LINGER = 2.0  # seconds a router waits for more work before it lets the lease go
SNAPSHOT_EVERY = 0.5  # seconds between stats snapshots for the console
RECENT = 50  # deliveries remembered for the console's live feed
ARRIVAL = b"arrival"  # a doorbell ring that says a destination has a consumer again
IDLE_LOOK = 0.05  # seconds an idle router waits on the doorbell before it looks anyway
# seconds the settlements of ack:auto claims found alone (nothing in the inbox, no handoff)
# wait for other work to ride with: a lone message's delivery is then settled in the commit
# of the next one's step, not in a commit (and an fsync) of its own (see run_once)
SETTLE_LATER = 0.05
# ... unless a message waits in a queue for the credit they may give back (a selector of
# its queue has deliveries outstanding: Engine.holds_for_settlements): looked at
# when the engine has at most this many queues, and settled at once when it has more
SETTLE_LOOK = 1000
# seconds at most between a busy router's looks at the autoacked list: ack:auto consumers
# ring nobody for their claims (the step that follows a look settles them), so claims are
# found within this while steps take what rings carried (see Router.drain)
CLAIMS_LOOK = 0.05
# ... and after each step that leaves such a message in a queue, looked at when the engine has
# at most this many queues (with more: after every step, as a step of what it read does)
HOLDS_LOOK = 100
# a router does not let the lease go while a message is due (or expires) this soon; beat's
# tick schedules one again before a later one is due (SPEC §8: due within 100 ms)
SCHEDULED_HORIZON = 10.0
ROUTE_TASK = "xumpweb.router.tasks.route"  # the Celery task that routes a burst (kick)


def keys(store: str) -> dict[str, str]:
    """The store's Redis keys that the service uses beside the relay's own."""
    inbox, outbox, errors = relay_keys(store)
    prefix = f"xump:{{{store}}}:"
    return {
        "inbox": inbox,
        "outbox": outbox,
        "errors": errors,
        "kicked": prefix + "kicked",  # a router task is scheduled or running
        "wiring": prefix + "wiring",  # wiring version: bumped on every wiring change
        "snapshot": prefix + "snapshot",  # JSON stats of every queue, from the router
        "series": prefix + "series:",  # + queue: its samples of the last hour (series.py)
        "lease": prefix + "lease",
        "fence": prefix + "fence",  # the lease's fencing counter (engine/stores/redis.py)
        "doorbell": prefix + "doorbell",  # pub/sub channel: commands wait in the inbox
        "pushed": pushed_key(store),  # how many commands were ever appended to the inbox
        "preferred": prefix + "preferred",  # the process that routes it first (watch.py)
        "workers": redis_clients.service_key("workers:"),  # + hostname: a live worker's beat
        **delivery_keys(store),  # taken, revoked:, present:, absent (engine/relay/wire.py)
    }


# -- the client side: every process ---------------------------------------------------------
class _RelayClient(RelayClient):
    """engine.relay's client whose every inbox push rings the router's doorbell with the
    commands it appended (engine.relay.PUSH) and, with worker routing, makes sure a router
    runs (Service.kick), in the same round trip."""

    def __init__(self, url: str, store: str, service: Service, inbox_limit: int | None) -> None:
        super().__init__(url, store, inbox_limit)
        self.service = service
        self.ring = service.keys["doorbell"]

    def _push(self, payloads: list[bytes], bounded: list[bool]) -> bool:
        pipe = self.client.pipeline(transaction=False)
        self._append(pipe, payloads, bounded)
        return self._refused(self.service.kick(pipe, ring=False)[0])


class Service:
    """What a web process, a worker or a command uses to reach the queues."""

    def __init__(
        self,
        url: str,
        store: str,
        routing: str,
        call_timeout: float,
        inbox_limit: int | None = None,
        shards: list[str] | None = None,
    ) -> None:
        self.url = url  # with cluster=true: a Redis Cluster's (redis_clients.py)
        self.store = store
        self.routing = routing
        self.call_timeout = call_timeout
        self.keys = keys(store)
        # on a cluster, the plain URL of the node serving this shard's slot: every command
        # of the shard goes there, pipelines and scripts whole (redis_clients.py)
        self.relay = _RelayClient(redis_clients.node_url(url, store), store, self, inbox_limit)
        self.redis: redis.Redis = self.relay.client
        self._general: Any = None
        self.wiring_seen: bytes | None = None  # this shard's wiring version, as last read
        self._queues: tuple[int, frozenset[str]] = (-1, frozenset())
        self._dropping: tuple[int, frozenset[str]] = (-1, frozenset())
        # every shard's client, this one (shard 0) first; with one shard, only this one
        self._here: tuple[int, frozenset[str]] = (-1, frozenset())
        self._dropping_here: tuple[int, frozenset[str]] = (-1, frozenset())
        self.main = self  # shard 0's client: what the service keeps in one place
        self.shards: dict[str, Service] = {store: self}
        for name in (shards or [store])[1:]:
            self.shards[name] = Service(url, name, routing, call_timeout, inbox_limit)
            self.shards[name].main = self
        self.sharded = len(self.shards) > 1
        # one of several shards: its queues are those of its store alone
        self.part_of_shards = self.sharded
        for shard in self.shards.values():
            shard.part_of_shards = self.sharded
        self.placement = shard_map.Placement()
        self.wiring_keys = [shard.keys["wiring"] for shard in self.shards.values()]

    @property
    def general(self) -> Any:
        """A sync client for keys of every shard: this shard's own on one server, a
        cluster client on a Redis Cluster (made when first needed)."""
        if self._general is None:
            self._general = redis_clients.general_for(self.url, self.redis)
        return self._general

    # where things live (SPEC §10, xumpweb/shards.py)
    def shard_of(self, queue: str, version: int | None = None) -> Service:
        """The client of the shard `queue` lives on (this one with one shard). NotFound
        when there is no such queue."""
        if not self.sharded:
            return self
        if version is None:
            version = self.wiring_version()
        store = self.placement.store_of(queue, version)
        if store is None:
            raise NotFound(f"queue {queue!r} does not exist")
        return self._shard(store, f"queue {queue!r}")

    def shard_for(self, name: str, explicit: str | None = None) -> Service:
        """The client of the shard a queue `name` lives on, or a new one would (placement);
        a destination's home: where its subscribers read."""
        if not self.sharded:
            return self
        store = self.placement.place(name, self.wiring_version(), explicit)
        return self._shard(store, f"queue {name!r}")

    def _shard(self, store: str, what: str) -> Service:
        found = self.shards.get(store)
        if found is None:
            raise StoreError(
                f"{what} lives in store {store!r}, which is not one of the service's shards "
                f"({', '.join(self.shards)}): set XUMP_SHARDS to include it"
            )
        return found

    # commands: durable in the inbox when these return
    def publish_many(
        self, queue: str, messages: list[Message], wiring: int | None = None
    ) -> list[str]:
        """Queue messages for routing; their mids. NotFound for an unknown queue. `wiring`:
        the wiring version the caller has just read, if it has (saves a round trip).

        A queue that would drop what does not fit (a limit, no overflow selector, no
        dead-letter queue) is published to through the router, which answers: QueueFull
        when the batch does not fit, and none of it published (SPEC §3, rule 7). Every
        other publish returns once durable in the inbox, before routing."""
        if wiring is None or self.sharded:  # a caller's version is shard 0's alone
            wiring = self.wiring_version()
        if queue not in self.queue_names(wiring):
            raise NotFound(f"queue {queue!r} does not exist")
        relay = self.shard_of(queue, wiring).relay
        if queue in self.drops_when_full(wiring):
            return relay.publish_applied(queue, messages, self.call_timeout)
        return relay.publish_many(queue, messages)  # the relay client kicks

    def confirm_later(self, tags: list[str]) -> None:
        """Confirm without waiting for the answer (WebSocket acks)."""
        if not self.sharded:
            self.relay.confirm(tags)
            return
        for shard, some in self._tags_by_shard(tags).items():
            shard.relay.confirm(some)

    def reject_later(self, tag: str, requeue: bool = True) -> None:
        [shard] = self._tags_by_shard([tag]) if self.sharded else [self]
        shard.relay.reject(tag, requeue)

    def _tags_by_shard(self, tags: list[str]) -> dict[Service, list[str]]:
        """Delivery tags by the shard of their queue (a tag is queue:selector:serial); a
        tag of no queue goes to shard 0, whose router refuses it as any stale tag."""
        version = self.wiring_version()
        found: dict[Service, list[str]] = {}
        for tag in tags:
            queue = tag.rsplit(":", 2)[0] if isinstance(tag, str) else ""
            store = self.placement.store_of(queue, version)
            shard = self.shards.get(store, self) if store is not None else self
            found.setdefault(shard, []).append(tag)
        return found

    # operations: run by the router of the shard they concern, answered
    def call(self, method: str, **arguments: Any) -> Any:
        if not self.sharded:
            return self.relay.call(method, timeout=self.call_timeout, **arguments)
        return shard_calls.call(self, method, arguments)

    def announce_arrival(self, pipe: Any) -> None:
        """Add to `pipe` (a sync or asyncio pipeline) the rings that tell every shard's
        router a destination has a consumer again (see the module doc)."""
        for shard in self.main.shards.values():
            pipe.publish(shard.keys["doorbell"], ARRIVAL)

    def call_here(self, method: str, **arguments: Any) -> Any:
        """`method` run by this shard's router (shard_calls.py picks the shard)."""
        return self.relay.call(method, timeout=self.call_timeout, **arguments)

    def kick(self, pipe: redis.client.Pipeline | None = None, ring: bool = True) -> list[Any]:
        """Make sure a router will read the inbox soon: ring the doorbell (unless `ring` is
        false: an inbox push rang it) and, with worker routing, schedule one routing task
        per burst. `pipe`: commands to send in the same round trip, before these (the relay
        client's inbox push); their errors raise, and the answers come back."""
        if pipe is None:
            pipe = self.redis.pipeline(transaction=False)
        if ring:
            pipe.publish(self.keys["doorbell"], b"")
        if self.routing == "worker":
            pipe.set(self.keys["kicked"], "1", nx=True, ex=30)
        try:
            answers = pipe.execute()
        except redis.RedisError as error:
            raise store_failure(error, "sending to the router") from None
        if self.routing == "worker" and answers[-1]:
            from celery import current_app
            from kombu.exceptions import OperationalError

            try:
                # by name: router/tasks.py sits above this module (its task runs a Router)
                current_app.send_task(ROUTE_TASK, args=[self.store], ignore_result=True)
            except OperationalError as error:
                # Redis went away since the push, which is durable: beat's tick schedules
                # a router once Redis is back (commands wait and nobody holds the lease)
                logger.warning("cannot schedule a router: %s", error)
        return answers

    # what every process may read without the router
    def wiring_version(self) -> int:
        """The wiring version: it moves whenever the wiring changes (with shards, the sum
        of every shard's, each moved by its router's commit)."""
        if not self.sharded:
            return int(self.redis.get(self.keys["wiring"]) or 0)
        try:
            found = redis_clients.get_many(self.general, self.wiring_keys)
        except redis.RedisError:
            # a shard's server is away (a Redis Cluster node down): each from its own, the
            # one away as last read (None: never). No router can change it meanwhile (its
            # bump is in its router's commit), so the sum still moves whenever the wiring
            # does and the other shards are served; what reaches the one away fails there
            reached = False
            for shard in self.shards.values():
                try:
                    shard.wiring_seen = shard.redis.get(shard.keys["wiring"])
                    reached = True
                except redis.RedisError:
                    pass
            if not reached:
                raise
            found = [shard.wiring_seen for shard in self.shards.values()]
        else:
            for shard, value in zip(self.shards.values(), found, strict=True):
                shard.wiring_seen = value
        return sum(int(value or 0) for value in found)

    def drops_when_full(self, version: int) -> frozenset[str]:
        """Queues with a limit and no dead-letter queue, as the wiring of `version` has them:
        a publish into one is refused (QueueFull) when what does not fit is more than its
        overflow selectors take, which depends on their credit, known to the router only
        (rule 7), so its publisher waits for the router's answer."""
        return self._drops_when_full(version, None)

    def drops_when_full_here(self, version: int) -> frozenset[str]:
        """drops_when_full among this shard's queues, `version` its own (with one shard:
        every queue)."""
        return self._drops_when_full(version, self.store if self.part_of_shards else None)

    def _drops_when_full(self, version: int, store: str | None) -> frozenset[str]:
        cached = self._dropping if store is None else self._dropping_here
        if version != cached[0]:
            from xumpweb.wiring.models import Queue

            limited = Queue.objects.filter(limit__isnull=False)
            if store is not None:
                limited = limited.filter(store__name=store)
            names = {name for name, dead_letter in limited.values_list("name", "dead_letter")
                     if not dead_letter}  # fmt: skip
            cached = (version, frozenset(names))
            if store is None:
                self._dropping = cached
            else:
                self._dropping_here = cached
        return cached[1]

    def queue_names(self, version: int | None = None) -> frozenset[str]:
        """Names of the queues the wiring has, re-read when the wiring version (read now
        unless given) moves."""
        if version is None:
            version = self.wiring_version()
        if version != self._queues[0]:
            from xumpweb.wiring.models import Queue

            self._queues = (version, frozenset(Queue.objects.values_list("name", flat=True)))
        return self._queues[1]

    def queue_names_here(self, version: int) -> frozenset[str]:
        """Names of this shard's queues, `version` its own wiring version (with one shard:
        every queue, as queue_names)."""
        if not self.part_of_shards:
            return self.queue_names(version)
        if version != self._here[0]:
            from xumpweb.wiring.models import Queue

            names = Queue.objects.filter(store__name=self.store).values_list("name", flat=True)
            self._here = (version, frozenset(names))
        return self._here[1]

    def snapshot(self) -> dict[str, Any]:
        """The router's latest stats of every queue (may be up to a second old), with the
        number of commands waiting in the inbox. With shards: every shard's, merged (the
        queues in name order, `time` the oldest shard's, `next_due` the soonest)."""
        if self.sharded:
            return _merged([shard.snapshot_here() for shard in self.shards.values()])
        return self.snapshot_here()

    def snapshot_here(self) -> dict[str, Any]:
        """This shard's router's snapshot (see `snapshot`)."""
        raw, waiting = self.redis.pipeline().get(self.keys["snapshot"]).llen(
            self.keys["inbox"]).execute()  # fmt: skip
        found = json.loads(raw) if raw else {"time": None, "queues": [], "recent": []}
        found["inbox"] = waiting
        return found

    def refused(self, count: int = 50) -> tuple[int, list[dict[str, Any]]]:
        """Commands the routers refused (their errors lists): how many are kept, and the
        newest `count`, newest first, each {command, error, at}."""
        if self.sharded:
            found = [shard.refused_here(count) for shard in self.shards.values()]
            items = sorted((item for _, some in found for item in some),
                           key=lambda item: item.get("at") or 0, reverse=True)  # fmt: skip
            return sum(total for total, _ in found), items[: max(count, 0)]
        return self.refused_here(count)

    def refused_here(self, count: int = 50) -> tuple[int, list[dict[str, Any]]]:
        pipe = self.redis.pipeline().llen(self.keys["errors"])
        if count > 0:
            pipe.lrange(self.keys["errors"], -count, -1)
        try:
            total, *raw = pipe.execute()
        except redis.RedisError as error:
            raise StoreError(f"cannot read the refused commands from Redis: {error}") from None
        return total, [json.loads(item) for item in reversed(raw[0] if raw else [])]

    def clear_refused(self) -> int:
        """Forget the refused commands; how many there were."""
        if self.sharded:
            return sum(shard.clear_refused_here() for shard in self.shards.values())
        return self.clear_refused_here()

    def clear_refused_here(self) -> int:
        pipe = self.redis.pipeline(transaction=True)
        try:
            count, _ = pipe.llen(self.keys["errors"]).delete(self.keys["errors"]).execute()
        except redis.RedisError as error:
            raise StoreError(f"cannot clear the refused commands in Redis: {error}") from None
        return count

    def health(self) -> dict[str, Any]:
        report: dict[str, Any] = {}
        try:
            self.redis.ping()
            refused = redis_health.write_refusal(self.redis, self.keys["snapshot"] + ":probe")
            report["redis"] = {"ok": True} if refused is None else {"ok": False, "detail": refused}
            report["durability"] = redis_health.durability(self.redis)
        except redis.RedisError as error:
            report["redis"] = {"ok": False, "detail": str(error)}
            report["workers"] = {"ok": False, "detail": "Redis is unreachable"}
            return report
        workers = sorted(
            key.decode().removeprefix(self.keys["workers"])
            for key in self.redis.scan_iter(self.keys["workers"] + "*", count=100)
        )
        leases = [shard.keys["lease"] for shard in self.shards.values()]
        routers = [found.decode().split("#")[0] if found else None
                   for found in redis_clients.get_many(self.general, leases)]  # fmt: skip
        report["workers"] = {
            "ok": bool(workers) or self.routing == "inline",
            "routing": self.routing,
            "workers": workers,
            "router": routers[0],
        }
        if self.sharded:
            report["workers"]["routers"] = dict(zip(self.shards, routers, strict=True))
        return report


def _merged(snapshots: list[dict[str, Any]]) -> dict[str, Any]:
    """Several shards' snapshots as one (Service.snapshot)."""
    times = [found["time"] for found in snapshots if found.get("time") is not None]
    dues = [found["next_due"] for found in snapshots if found.get("next_due") is not None]
    recent = sorted((item for found in snapshots for item in found.get("recent", ())),
                    key=lambda item: item.get("time") or 0)  # fmt: skip
    return {
        "time": min(times) if times else None,
        "queues": sorted(
            (queue for found in snapshots for queue in found.get("queues", ())),
            key=lambda queue: queue["name"],
        ),
        "recent": recent[-RECENT:],
        "next_due": min(dues) if dues else None,
        "inbox": sum(found.get("inbox") or 0 for found in snapshots),
    }


_service: Service | None = None
_service_lock = threading.Lock()
_routes_inline = True  # with XUMP_ROUTING=inline, whether this process is the one that routes


def client_only() -> None:
    """This process never routes, whatever XUMP_ROUTING says (the STOMP server: with inline
    routing the web process routes, in a thread of its own)."""
    global _routes_inline
    _routes_inline = False


def service() -> Service:
    """This process's Service (and, with XUMP_ROUTING=inline, its router thread)."""
    global _service
    if _service is None:
        with _service_lock:
            if _service is None:
                _service = Service(
                    redis_clients.store_url(),
                    settings.XUMP_STORE,
                    settings.XUMP_ROUTING,
                    settings.XUMP_CALL_TIMEOUT,
                    settings.XUMP_INBOX_LIMIT,
                    shard_map.names(),
                )
                if settings.XUMP_ROUTING == "inline" and _routes_inline:
                    start_inline_router()
    return _service


# -- the router side --------------------------------------------------------------------------
def _uncounted(*_: object) -> None:
    pass


# what a router counts for /metrics: metrics.py's counters, handed in at start-up
_count_step: Callable[[int, float], None] = _uncounted  # commands applied, seconds taken
_count_lease: Callable[[bool], None] = _uncounted  # a lease taken; True: a handover


def count_with(step: Callable[[int, float], None], lease: Callable[[bool], None]) -> None:
    """Have routers count each step (`step(commands, seconds)`) and each lease they take
    (`lease(handover)`: True when another process held it since, so the engine was rebuilt).
    metrics.py is above this module, so router/apps.py hands its counters in; a router
    counts nothing before that."""
    global _count_step, _count_lease
    _count_step, _count_lease = step, lease


def _recent_items(recent: deque) -> list[dict[str, Any]]:
    """The console's live feed items of the deliveries a router remembers (time, Delivery)."""
    return [
        {
            "time": at, "tag": delivery.tag, "queue": delivery.queue,
            "destination": delivery.destination, "mid": delivery.message.mid,
            "address": delivery.message.address, "redelivered": delivery.redelivered,
        }
        for at, delivery in list(recent)
    ]  # fmt: skip


class _RelayRouter(RelayRouter):
    """engine.relay's router side, remembering recent deliveries for the console and writing the
    engine's journal to Redis with every step's changes."""

    recent: deque
    journal_key: str
    journal_limit: int
    wiring_key: str
    wiring_changed = False  # a wiring call ran in the current step (see _to_outboxes)
    _journaled = 0  # journal events the current step writes (drained once committed)
    steps = 0  # routing steps committed (the snapshot's steps per second)
    # when the settlements found alone are applied anyway (time.monotonic()), None when none
    # wait: Router.drain wakes for it
    settle_due: float | None = None
    settle_later = SETTLE_LATER
    settling: Sequence[bytes] = ()  # the settlements that wait, as the last head read found them
    # the router's thread wants the engine's lock (set before it takes it for a step, an
    # expiry, a tick..., cleared when it waits for work again, Router.drain): the lock is
    # not fair, so the event loop makes no step of its own meanwhile (Router.apply_here:
    # those go to the thread, Router.hand), and a loop busy with steps never keeps it out
    thread_busy = False

    def _carried_to(self, shard: str) -> None:
        """Ring the router of the shard that was sent commands (a standing one sleeps on
        its doorbell)."""
        self.store.client.publish(keys(shard)["doorbell"], b"")

    def run_once(
        self,
        limit: int = 500,
        handoffs: list[Handoff] = (),  # type: ignore[assignment]
        head: bool = True,
    ) -> int:
        """RelayRouter.run_once without its lease renewal at every empty look (Router.drain
        renews when it is due, see the module doc), with the publishes this process handed
        over (`handoffs`, Router.hand), applied after the inbox's head. `head`: read the
        inbox and the autoacked list; without it the step takes the commands the doorbell's
        rings carried (RelayRouter.heard) and the settlements that wait (Router.drain reads
        when a ring told it to or carried nothing it could use, after a full read and at
        every idle look; a handoff that follows an inbox append of its publisher forces
        it). A handoff is answered MOVED when the wiring moved since its publishes were sorted,
        left unanswered (for the next step: Router.drain puts it back) when the inbox
        held more than `limit` commands, so nothing overtakes what its publisher
        appended before; the others are settled once the step's commit came back (or with
        the step's StoreError).

        Settlements of ack:auto claims found alone (the autoacked list holds items, the
        inbox nothing, no handoff) wait up to `settle_later` seconds (`settle_due`) for
        other work, whose step applies them first, in the same commit: a message at a
        time then costs one commit, not two. Nothing waits for them: the consumer had its
        deliveries, the claims are durable (the autoacked list), and they wait only while
        no queue holds a message that they might let go (one of its selectors has
        deliveries outstanding: `holds_for_settlements`), so a publish that needs that
        credit is still in the inbox, and its step settles them before routing it. A full
        list is settled at once."""
        handed: list[Handed] = []
        taken: list[Handoff] = []
        if head or any(handoff.after_inbox for handoff in handoffs):
            raw, settled = self.head(limit)
            self.full = len(raw) >= limit or len(settled) >= limit
        else:  # what rings carried, with the settlements that wait (both from the heads)
            raw, settled = self.carried(limit), self.settling
            self.full = len(raw) >= limit
        self.settling = ()
        if (
            settled
            and not (raw or handoffs or self.full)
            and not self.engine.holds_for_settlements(SETTLE_LOOK)
        ):
            now = time.monotonic()
            if self.settle_due is None:
                self.settle_due = now + self.settle_later
            if now < self.settle_due:
                # they wait for other work to ride with (see above), still at the head of
                # the autoacked list (only the router takes items off it)
                self.settling, settled = settled, []
        if not self.full:
            version = str(self.wiring_version).encode()
            for handoff in handoffs:
                if handoff.version is not None and handoff.version != version:
                    handoff.future.set_result(MOVED)
                    continue
                handed.extend(handoff.commands)
                taken.append(handoff)
        if raw or settled or handed:
            if settled:
                self.settle_due = None  # this step applies them
            started = time.perf_counter()
            self.thread_busy = True  # wants the lock: the event loop steps no more meanwhile
            try:
                with self.engine._lock:  # keeps other threads' calls out of the step's commit
                    self._step(raw, settled, handed)
            except BaseException as error:
                self._traces = None
                for handoff in taken:
                    handoff.future.set_exception(
                        error if isinstance(error, StoreError) else StoreError(str(error))
                    )
                raise
            for handoff in taken:
                handoff.future.set_result(None)
            self._flush_traces()
            self.steps += 1
            count = len(raw) + len(settled) + len(handed)
            _count_step(count, time.perf_counter() - started)  # per step
        if self._carried < self._backlog or self._forward_seq < 0:
            self.thread_busy = True
            self.carry()  # to other shards' inboxes (docs/scaling.md)
        return len(raw) + len(settled) + len(handed)

    def looks_after(self, done: int, handed: bool) -> bool:
        """Whether the router reads the inbox and the autoacked list before its next step,
        after a step that applied `done` commands (`handed`: some handed over, Router.hand):
        after a full read; after a step of what it read, unless rings tell it the inbox (a
        step of handoffs alone, or of what rings carried, read nothing); and after a step
        that leaves a message in a queue which may wait for the credit an ack:auto claim
        gives back (`holds_for_settlements`: a message no settlement can let go, in a
        queue without selectors say, needs no look; ack:auto consumers ring nobody, so the
        claims are found by these looks and every CLAIMS_LOOK)."""
        if self.full:
            return True
        if not done:
            return False
        if not (handed or self.knows_inbox):
            return True
        return self.engine.holds_for_settlements(HOLDS_LOOK)

    full = False  # the last head read found `limit` commands or more: read again at once
    wiring_version = 0  # the wiring key's value as this router's last write left it
    _bumping = False  # the step being committed moves the wiring version
    _traces: list | None = None

    def _trace(self, hop: str, at: float, mids: list[str]) -> None:
        """Bench-only (engine/relay/trace.py): published after the step's handoffs are
        answered, not before (the trace is off the path it measures)."""
        if self._traces is None:
            self._traces = []
        self._traces.append((hop, at, mids))

    def _flush_traces(self) -> None:
        traces, self._traces = self._traces, None
        for hop, at, mids in traces or ():
            super()._trace(hop, at, mids)

    def renew_lease(self) -> None:
        with self.engine._lock:
            self.store.renew_lease()

    def _to_outboxes(self, deliveries: list[Delivery]) -> list[tuple]:
        commands = super()._to_outboxes(deliveries)
        self._bumping = self.wiring_changed
        if self.wiring_changed:
            # the wiring version moves in the commit that answers the wiring call: a client
            # that has the answer never reads the old version (and its old queue list)
            self.wiring_changed = False
            commands.append(("INCR", self.wiring_key))
        # called once per step, after the step's engine calls, inside its atomic commit;
        # the events stay in the journal until the commit succeeded (_committed): a step
        # that fails is rolled back with its events (engine/relay/router.py)
        journal = self.engine.journal
        self._journaled = 0
        if journal is not None and len(journal):
            batch = journal.peek()
            commands.extend(append_commands(self.journal_key, batch, self.journal_limit))
            self._journaled = len(batch)
        return commands

    def _committed(self, deliveries: list[Delivery]) -> None:
        if self._bumping:
            self._bumping = False
            self.wiring_version += 1
        if self._journaled:
            self.engine.journal.forget(self._journaled)  # type: ignore[union-attr]
            self._journaled = 0
        # as they are: the console's items are made from them at the snapshot (_recent_items),
        # not for every delivery
        now = time.time()
        self.recent.extend((now, delivery) for delivery in deliveries[-RECENT:])


MOVED = "moved"  # a handoff's answer: the wiring moved since its publishes were sorted
NOT_HERE = "not here"  # Router.apply_here cannot step now: send the commands another way


class HereWork:
    """Commands handed to Router.apply_here: the wiring version their publishes were sorted
    by (None: no publishes) and the future their caller waits on."""

    __slots__ = ("commands", "future", "version")

    def __init__(self, commands: list[Handed], version: bytes | None, future: Any) -> None:
        self.commands = commands
        self.version = version
        self.future = future


COMMIT_WAIT = 10.0  # seconds a commit on the event loop waits (the store's socket timeout)
_STEPPING_INLINE = object()  # Router._here_task while a caller makes the step itself


async def _commit_on(lean: Any, command: tuple, source: str) -> None:
    """Send one deferred commit (an EVALSHA of the store's apply script) on `lean` (a
    LeanRedis) and wait for its answer, at most COMMIT_WAIT (then the connection goes and
    the commit fails: its answer is lost). A server without the script (restarted,
    flushed) refuses it before running anything: sent again with the script's text, on
    the same connection, which stays (the other calls pipelined on it are not failed)."""
    (future,) = await lean.send(command, timeout=COMMIT_WAIT)
    reply = await future
    if isinstance(reply, redis.exceptions.NoScriptError):
        (future,) = await lean.send(("EVAL", source, *command[2:]), timeout=COMMIT_WAIT)
        reply = await future
    if isinstance(reply, redis.RedisError):
        raise reply


def _answer(batch: list[HereWork], result: Any = None, error: BaseException | None = None) -> None:
    """Settle the futures of `batch` not settled yet (their callers may have gone)."""
    for work in batch:
        if not work.future.done():
            if error is not None:
                work.future.set_exception(error)
            else:
                work.future.set_result(result)


class HereStep:
    """A step made on the event loop (Router._step_here), waiting for its commits to be sent
    (Router._commit_here): the router, its commands, the deferred commits, the trace lines
    it made (bench-only) and when it started."""

    __slots__ = ("commands", "commits", "relay", "started", "traces")

    def __init__(
        self,
        relay: _RelayRouter,
        commands: list[Handed],
        commits: list[tuple],
        traces: list | None,
        started: float,
    ) -> None:
        self.relay = relay
        self.commands = commands
        self.commits = commits
        self.traces = traces
        self.started = started


class Handoff:
    """Publishes a process hands its own router (Router.hand): the commands, the wiring
    version (the wiring key's bytes) they were sorted by, and the future the router
    settles: None once they are committed, MOVED when the wiring moved first, or the
    step's StoreError (NotWritten, LeaseLost among them: none of the step was written);
    after any error, each command's `committed` says whether it was (engine.relay.Handed)."""

    __slots__ = ("after_inbox", "commands", "future", "version")

    def __init__(self, commands: list[Handed], version: bytes | None, after_inbox: bool) -> None:
        self.commands = commands
        self.version = version
        # its publisher appended to the inbox since its last handoff was committed: the
        # step reads the inbox first, so these never overtake those
        self.after_inbox = after_inbox
        self.future: Future = Future()


_handing = threading.Lock()  # guards _taking_handoffs and each Router's _handoffs
_taking_handoffs: dict[str, Router] = {}  # store -> this process's router draining it


def router_here(store: str) -> Router | None:
    """This process's router of `store` while it drains it and takes handoffs (SPEC §11's
    co-located path: xumpweb/live/group_commit.py hands it the process's publishes)."""
    return _taking_handoffs.get(store)


class Router:
    """Routes the service's store while it holds the lease (see the module doc)."""

    def __init__(
        self,
        url: str,
        store: str,
        lease_ms: int,
        delivery_timeout: float,
        journal_limit: int = 2_000_000,
        shards: list[str] | None = None,
        node: str | None = None,
    ) -> None:
        self.url = url
        self.journal_limit = journal_limit
        self.store = store
        self.lease_ms = lease_ms
        self.delivery_timeout = delivery_timeout
        # every shard of the service (None or one: the store alone, no stand-ins)
        self.shards = list(shards) if shards and len(shards) > 1 else None
        # its name in the lease: the Celery node (or host), process and thread
        self.name = f"{node or socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"
        self.since: float | None = None  # when it took the lease it holds
        self._remote_version: int | None = None  # the wiring its stand-ins were read from
        self._steps_seen = (0, time.monotonic())  # steps and when, at the last snapshot
        self.relay: _RelayRouter | None = None
        self._fence = -1  # the fencing number of the lease this router last held
        self._wiring_changed = False
        self._recent: deque = deque(maxlen=RECENT)
        self.keys = keys(store)
        self.calls = {name: self._watch(name, fn) for name, fn in operations.CALLS.items()}
        self._handoffs: deque[Handoff] = deque()  # handed over, not yet taken by a step
        # whether it takes this process's handoffs while it drains (the STOMP server's
        # preferred router, router/watch.py): otherwise its publishes go to the inbox
        self.takes_handoffs = False

    def _watch(self, name: str, function: Any) -> Any:
        if name not in operations.WIRING_CALLS:
            if name in ("expire", "tick"):
                return function

            @functools.wraps(function)
            def current(engine: Engine, **arguments: Any) -> Any:
                self._refresh_remote(engine)  # a target may be another shard's new queue
                return function(engine, **arguments)

            return current

        @functools.wraps(function)  # its signature: the relay checks arguments against it
        def changing_wiring(engine: Engine, **arguments: Any) -> Any:
            self._refresh_remote(engine)  # a target may be another shard's new queue
            answer = function(engine, **arguments)
            result = answer[0]
            if isinstance(result, dict) and result.get("created") is False:
                return answer  # found as it was (a mailbox's every later first use)
            self._wiring_changed = True  # the version moves in the step's commit
            if self.relay is not None:
                self.relay.wiring_changed = True
            return answer

        return changing_wiring

    def acquire(self, wait: float = 0.0) -> bool:
        """Take the store's lease (waiting up to `wait` seconds for it to be free) and make
        sure the engine holds the store's state as the last router left it."""
        deadline = time.monotonic() + wait
        if self.relay is not None:
            backend = self.relay.store
            while not backend.acquire_lease(self.name, self.lease_ms):
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.05)
            if _fence(backend.lease_token) == self._fence + 1:
                self._fence += 1  # nobody held it in between: the engine is current
                self.since = time.time()
                _count_lease(False)  # no handover
                return True
            backend.release_lease()
            self._discard()
        store = RedisStore(self.store, self.url)
        while not store.acquire_lease(self.name, self.lease_ms):
            if time.monotonic() >= deadline:
                store.close()
                return False
            time.sleep(0.05)
        try:
            self.relay = self._build(store)
        except BaseException:
            store.release_lease()
            store.close()
            raise
        self._fence = _fence(store.lease_token)
        self.since = time.time()
        _count_lease(True)  # a handover
        return True

    @property
    def fence(self) -> int:
        """The fencing number of the lease this router last held (-1: none yet)."""
        return self._fence

    def _build(self, store: RedisStore) -> _RelayRouter:
        from engine.catalog import StoreSpec
        from xumpweb.wiring.catalog import DjangoCatalog, ShardCatalog

        catalog = DjangoCatalog() if self.shards is None else ShardCatalog(self.store)
        catalog.save_store(StoreSpec("redis", self.store, self.url))
        # the router takes every body a door took (XUMP_MAX_BODY): one larger than the
        # engine's own limit would otherwise be refused here, after its 202 or RECEIPT
        max_body = max(settings.XUMP_MAX_BODY, DEFAULT_MAX_BODY)
        engine = Engine(catalog=catalog, stores=(store,), journal=True, max_body=max_body)
        engine.set_default_store(self.store)
        if self.shards is not None:
            engine.set_local_shard(self.store, self.shards)
            self._remote_version = None
            self._refresh_remote(engine, store.client)
        relay = _RelayRouter(
            engine, self.store, name=self.name, lease_ms=self.lease_ms,
            delivery_timeout=self.delivery_timeout, calls=self.calls,
        )  # fmt: skip
        relay.recent = self._recent
        relay.journal_key = journal_key(self.store)
        relay.journal_limit = self.journal_limit
        relay.wiring_key = self.keys["wiring"]
        relay.expire()  # holds for destinations away first, so resume routes around them
        relay.resume()
        # other processes re-read what this one rebuilt
        relay.wiring_version = self._bump_wiring(store.client)
        return relay

    def _discard(self) -> None:
        if self.relay is not None:
            self.relay.store.close()
            self.relay = None

    def release(self) -> None:
        if self.relay is not None:
            try:
                with self.relay.engine._lock:
                    self.relay.store.release_lease()
            except StoreError:
                self._discard()

    def hand(
        self, commands: list[Handed], version: bytes | None, after_inbox: bool
    ) -> Future | None:
        """Hand this router publishes to apply in its next step (see Handoff), from any
        thread; None when it does not drain now (append them to the inbox instead)."""
        handoff = Handoff(commands, version, after_inbox)
        with _handing:
            if _taking_handoffs.get(self.store) is not self:
                return None
            self._handoffs.append(handoff)
        self._wake_router()
        return handoff.future

    # SPEC §11's co-located path on the event loop (engine/relay's package doc, "Deferred
    # commits"): what waits for the next step made there, and the task making them
    _here_waiting: list[HereWork] | None = None
    _here_task: asyncio.Task | object | None = None  # or _STEPPING_INLINE

    async def apply_here(self, commands: list[Handed], version: bytes | None) -> HereStep | str:
        """Apply `commands` in a step made on the caller's event loop and committed on the
        loop's lean connection to the store (redis_clients.shared_lean, the one outbox
        readers take and stamp on). Commands handed over while a step waits for its
        commit go together in the next (batching only when work waits). The step once
        committed; MOVED when the wiring moved since `version` (None: no publishes among
        them); NOT_HERE when the router cannot step here now (it does not route, or its
        thread is stepping or has handoffs waiting): the caller sends them its other way
        (Router.hand, the inbox). Raises the step's StoreError: the commands whose
        `committed` is true were written (engine.relay.Handed)."""
        loop = asyncio.get_running_loop()
        work = HereWork(commands, version, loop.create_future())
        if self._here_waiting is None:
            self._here_waiting = []
        if self._here_task is None:
            # no step on its way: this one is made in the caller's own task (a lone
            # message then costs no task and no turn of the loop more); what comes
            # meanwhile waits for the task started after it
            self._here_task = _STEPPING_INLINE
            try:
                await self._step_batch_here([work])
            finally:
                self._here_task = None
                if self._here_waiting:
                    self._here_task = loop.create_task(self._steps_here())
            return work.future.result()  # type: ignore[no-any-return]
        self._here_waiting.append(work)
        return await work.future  # type: ignore[no-any-return]

    async def _steps_here(self) -> None:
        """Make steps of what waits (apply_here) until nothing does."""
        try:
            while self._here_waiting:
                batch, self._here_waiting = self._here_waiting, []
                await self._step_batch_here(batch)
        finally:
            self._here_task = None
            left, self._here_waiting = self._here_waiting or [], []
            _answer(left, result=NOT_HERE)  # stopped (cancelled): they go their other way

    async def _step_batch_here(self, batch: list[HereWork]) -> None:
        try:
            # the connection first: nothing may fail between the step and its commit's send
            lean = redis_clients.shared_lean(self.store)
        except (redis.RedisError, StoreError, ValueError):
            _answer(batch, result=NOT_HERE)
            return
        try:
            step = self._step_here(batch)
        except StoreError as error:
            _answer(batch, error=error)
            return
        if step is None:
            _answer(batch, result=NOT_HERE)
            return
        try:
            await self._commit_here(step, lean)
        except BaseException as error:
            _answer(batch, error=error if isinstance(error, StoreError) else StoreError(
                f"the router's step stopped: {error!r}"))  # fmt: skip
            if not isinstance(error, Exception):
                raise
            return
        _answer(batch, result=step)

    def _step_here(self, batch: list[HereWork]) -> HereStep | None:
        """The step of `batch`'s commands, its commits deferred (RedisStore.defer) and the
        engine's lock held for `_commit_here`; its works whose wiring version moved are
        answered MOVED and left out. None when it cannot be made here now."""
        relay = self.relay
        if (
            relay is None
            or relay.thread_busy
            or self._handoffs
            or _taking_handoffs.get(self.store) is not self
            or relay.store.broken is not None
        ):
            return None
        lock = relay.engine._lock
        if lock._is_owned():  # type: ignore[attr-defined]  # this thread's step in flight
            return None
        if not lock.acquire(blocking=False):
            return None
        if self.relay is not relay or relay.store.broken is not None:
            lock.release()
            return None
        version = str(relay.wiring_version).encode()
        for work in batch:
            if work.version is not None and work.version != version and not work.future.done():
                work.future.set_result(MOVED)
        commands = [command for work in batch if not work.future.done()
                    for command in work.commands]  # fmt: skip
        if not commands:
            lock.release()
            return None
        started = time.perf_counter()
        relay.store.defer()
        try:
            try:
                relay._step([], (), commands)
            finally:
                commits = relay.store.sent_later()
            traces, relay._traces = relay._traces, None
        except BaseException as error:
            relay.store.deferred_failed(error)  # memory may be ahead of Redis: reload
            lock.release()
            self._wake_router()
            for command in commands:
                command.committed = False
            if isinstance(error, StoreError):
                raise
            raise StoreError(f"the router's step failed: {error!r}") from None
        return HereStep(relay, commands, commits, traces, started)

    async def _commit_here(self, step: HereStep, lean: Any) -> None:
        """Send `step`'s commits in order on `lean` (a LeanRedis), then let the engine's
        lock go. Once it returns, every command of the step is durable (`committed`). A
        commit that fails (the lease lost, Redis away) leaves `committed` true only on the
        commands of the commits before it; the router loads the store again before its
        next write (RedisStore.deferred_failed), and the error is raised."""
        relay = step.relay
        failed: StoreError | None = None
        stopped: BaseException | None = None
        wake = False
        done = 0
        try:
            for command in step.commits:
                await _commit_on(lean, command, relay.store.apply_source)
                done += 1
        except BaseException as error:  # Redis's refusal, a lost connection, cancelled
            failed = relay.store.deferred_failed(error)
            if not isinstance(error, Exception):
                stopped = error
            for command in step.commands:
                if command.part >= done:
                    command.committed = False
        finally:
            if failed is None:
                relay.steps += 1
                # asked while the lock is still this thread's: never wait for it on the loop
                wake = relay._carried < relay._backlog or relay.engine.holds_for_settlements(
                    HOLDS_LOOK)  # fmt: skip
            relay.engine._lock.release()
        if failed is not None:
            logger.info("a step's commit on the event loop failed (%s): the router "
                        "loads store %r again", failed, self.store)  # fmt: skip
            self._wake_router()  # it drops the engine and loads the store again
            raise stopped or failed
        _count_step(len(step.commands), time.perf_counter() - step.started)
        if wake:
            self._wake_router()  # to carry to other shards, or to look for settlements

    def _wake_router(self) -> None:
        wake = self._wake
        if wake is not None:
            with contextlib.suppress(OSError):  # full: a wake-up is already waiting
                wake[1].send(b"\0")

    def _take_handoffs(self) -> list[Handoff]:
        if not self._handoffs:
            return []
        with _handing:
            taken = list(self._handoffs)
            self._handoffs.clear()
        return taken

    def _put_back(self, handoffs: list[Handoff]) -> None:
        """Handoffs a step left for the next (the inbox was fuller than one step): first."""
        left = [handoff for handoff in handoffs if not handoff.future.done()]
        if left:
            with _handing:
                self._handoffs.extendleft(reversed(left))

    def _stop_taking_handoffs(self) -> None:
        """Take no more handoffs; those not taken are refused as by a lost lease (nothing of
        them was written): their publishers append them to the inbox."""
        with _handing:
            if _taking_handoffs.get(self.store) is self:
                del _taking_handoffs[self.store]
            left = list(self._handoffs)
            self._handoffs.clear()
        _not_written(left, "this process's router stopped routing")

    _wake: tuple[socket.socket, socket.socket] | None = None

    def drain(self, linger: float = LINGER, stop: threading.Event | None = None) -> int:
        """Apply commands until the inbox has stayed empty for `linger` seconds (or `stop`
        is set); how many. StoreError (and the engine discarded) if the lease is lost.
        While it drains it takes this process's handoffs (Router.hand) if it
        `takes_handoffs`."""
        relay = self.relay
        if relay is None:
            raise StoreError("the router does not hold the lease; call acquire() first")
        applied = 0
        idle_since = renewed = time.monotonic()
        next_expiry = next_snapshot = next_tick = next_claims = 0.0
        expire_every = min(1.0, self.delivery_timeout / 2)
        renew_every = self.lease_ms / 1000 / 4
        doorbell = relay.store.client.pubsub(ignore_subscribe_messages=True)
        if self._wake is None:
            self._wake = socket.socketpair()
            for end in self._wake:
                end.setblocking(False)
        if self.takes_handoffs:
            with _handing:
                _taking_handoffs[self.store] = self
        try:
            doorbell.subscribe(self.keys["doorbell"])  # before the first look: no ring lost
            look = True  # read the inbox at the next step (see _RelayRouter.run_once)
            while stop is None or not stop.is_set():
                if relay.store.broken is not None:  # a commit on the event loop failed
                    raise relay.store.broken
                handoffs = self._take_handoffs()
                try:
                    done = relay.run_once(handoffs=handoffs, head=look)
                except GapMoved:
                    # nothing of the step was written and the engine was loaded again
                    # (engine/relay's package doc): read the inbox and go on
                    _not_written(handoffs, "this process's router read the inbox again")
                    look = True
                    continue
                except BaseException:  # those it did not settle were in no step
                    _not_written(handoffs, "this process's router failed before its step")
                    raise
                self._put_back(handoffs)
                # the inbox is read when a ring asks (below), at every idle look, every
                # CLAIMS_LOOK, and when the step says so (_RelayRouter.looks_after)
                look = relay.looks_after(done, bool(handoffs))
                applied += done
                now = time.monotonic()
                if now >= next_claims:
                    look = True
                    next_claims = now + CLAIMS_LOOK
                if self._wiring_changed:
                    self._wiring_changed = False
                    if relay.wiring_changed:  # no commit carried the bump (set aside)
                        relay.wiring_changed = False
                        self._bump_wiring(relay.store.client)
                if now >= next_expiry:
                    relay.thread_busy = True  # this thread wants the lock (see apply_here)
                    relay.expire()  # a commit, which renews the lease as well
                    next_expiry = now + expire_every
                    renewed = now
                if now >= next_tick:
                    relay.thread_busy = True
                    relay.tick()  # due messages fire, expired ones leave (a commit if any)
                    next_tick = now + TICK_EVERY
                if now >= next_snapshot:
                    relay.thread_busy = True
                    self._snapshot(relay)
                    next_snapshot = now + SNAPSHOT_EVERY
                    with relay.engine._lock:
                        try:
                            self._refresh_remote(relay.engine)  # envelope targets elsewhere
                        except redis.RedisError as problem:
                            # another shard's node is away (a cluster): the stand-ins stay
                            # as last read; this shard's own errors surface in its step
                            logger.debug("shards' wiring not read: %s", problem)
                if done:
                    idle_since = renewed = now  # the step's commit renewed the lease
                    if look or self._handoffs or relay.carried(1):  # more to do: see who
                        # rang, not waiting
                        relay.thread_busy = False
                        rang, arrived, _ = _wait_for_ring(relay, doorbell, 0.0, self._wake[0])
                        look = look or rang
                        if arrived:
                            next_expiry = 0.0
                        continue
                if now - idle_since >= linger and not _due_soon(relay.engine):
                    break
                if now - renewed >= renew_every:
                    relay.thread_busy = True
                    relay.renew_lease()
                    renewed = now
                wake = min(next_expiry, next_snapshot, renewed + renew_every, next_tick,
                           idle_since + linger, now + IDLE_LOOK,
                           relay.settle_due or now + IDLE_LOOK)  # fmt: skip
                relay.thread_busy = False
                rang, arrived, heard = _wait_for_ring(relay, doorbell, wake - now,
                                                      self._wake[0])  # fmt: skip
                # asked to, or an idle look's time came (nothing rang, nothing handed)
                look = rang or not (heard or self._handoffs)
                if arrived:
                    next_expiry = 0.0  # a consumer arrived: who is away, now
        except (StoreError, redis.RedisError) as problem:
            if relay.store.broken is not None:
                # a commit on the event loop failed: memory goes, and with it the lease,
                # so a router (this process's watch, or a worker's) starts again at once
                # from what Redis holds, not a lease time later
                with contextlib.suppress(StoreError), relay.engine._lock:
                    relay.store.release_lease()
            self._discard()
            if isinstance(problem, StoreError):
                raise
            raise StoreError(f"the router lost Redis: {problem}") from None
        finally:
            relay.thread_busy = False
            self._stop_taking_handoffs()
            doorbell.close()
        self._snapshot(relay)
        return applied

    def _bump_wiring(self, client: redis.Redis) -> int:
        """Move the wiring version (only routers write it); the new one."""
        version = int(client.incr(self.keys["wiring"]))
        if self.relay is not None:
            self.relay.wiring_version = version
        return version

    def _refresh_remote(self, engine: Engine, client: redis.Redis | None = None) -> None:
        """With shards: read the other shards' queues into the engine's stand-ins, and the
        destinations' recorded homes (xumpweb/shards.py), when the wiring moved since they
        were read (one round trip to see it)."""
        if self.shards is None:
            return
        if client is None:
            client = self.relay.store.client if self.relay is not None else None
        if client is None:
            return
        pipe = client.pipeline(transaction=False)
        for shard in self.shards:
            pipe.get(keys(shard)["wiring"])
        version = sum(int(found or 0) for found in pipe.execute())
        if version == self._remote_version:
            return
        from xumpweb.wiring.catalog import ShardCatalog

        catalog = engine.catalog
        assert isinstance(catalog, ShardCatalog)
        engine.set_remote_queues(catalog.remote_queues())
        engine.set_destination_homes(catalog.destination_homes())
        self._remote_version = version

    def _snapshot(self, relay: _RelayRouter) -> None:
        engine = relay.engine
        with engine._lock:
            queues = [
                {
                    "name": info.name,
                    "depth": info.depth,
                    "history_size": info.history_size,
                    "outstanding": info.outstanding,
                    "limit": info.limit,
                    "dead_letter": info.dead_letter,
                    "stats": engine.stats(info.name),
                    "oldest": _oldest(engine, info.name) if info.depth else None,
                }
                for info in engine.queues()
            ]
            next_due = engine.next_due()
        now, seen = time.monotonic(), self._steps_seen
        self._steps_seen = (relay.steps, now)
        rate = (relay.steps - seen[0]) / (now - seen[1]) if now > seen[1] else 0.0
        found = {"time": time.time(), "queues": queues, "recent": _recent_items(self._recent),
                 "next_due": next_due, "router": self.name, "since": self.since,
                 "steps_per_second": round(max(rate, 0.0), 1)}  # fmt: skip
        # and the queue page's charts: one sample per series.EVERY s, whichever router (or
        # Celery task's router) first sees a new period
        bucket = str(int(found["time"] // series.EVERY))
        # and the `kicked` flag: clients schedule no routing task while a router routes
        _, before, _ = (relay.store.client.pipeline(transaction=False)
                        .set(self.keys["snapshot"], json.dumps(found))
                        .set(self.keys["series"], bucket, get=True)
                        .set(self.keys["kicked"], "1", ex=30).execute())  # fmt: skip
        if before is None or before.decode() != bucket:
            series.record_later(relay.store.client, self.keys["series"], queues, found["time"])


def _due_soon(engine: Engine) -> bool:
    """Whether a message is due (or expires) within SCHEDULED_HORIZON: a router stays."""
    due = engine.next_due()
    return due is not None and due <= time.time() + SCHEDULED_HORIZON


def _oldest(engine: Engine, queue: str) -> float | None:
    """When the oldest message waiting in `queue` was published (for /metrics)."""
    waiting = engine.peek(queue, 1)
    return waiting[0].timestamp if waiting else None


def _not_written(handoffs: list[Handoff], why: str) -> None:
    """Settle the handoffs not settled yet: none of them was in a step (NotWritten)."""
    for handoff in handoffs:
        if not handoff.future.done():
            handoff.future.set_exception(NotWritten(why))


def _wait_for_ring(
    relay: _RelayRouter, doorbell: redis.client.PubSub, seconds: float, wake: socket.socket
) -> tuple[bool, bool, bool]:
    """Until a client rings the doorbell, this process hands its router work (a byte on
    `wake`), or `seconds` pass; takes every ring waiting, those that carry commands into
    what `relay` knows of the inbox (RelayRouter.heard). Whether a ring asks the router to
    read the inbox, whether one of the rings was an ARRIVAL, and whether one carried
    commands the router now knows."""
    ring = doorbell.get_message(timeout=0.0)  # what the client has read already
    rung = getattr(doorbell.connection, "_sock", None)
    if ring is None and rung is None:  # not connected: redis-py connects again, or raises
        ring = doorbell.get_message(timeout=max(seconds, 0.0))
    elif ring is None:
        try:
            readable, _, _ = select.select([rung, wake], [], [], max(seconds, 0.0))
        except (OSError, ValueError):  # the connection was closed meanwhile
            readable = [rung]
        if wake in readable:
            with contextlib.suppress(BlockingIOError):
                wake.recv(4096)
        if rung in readable:
            ring = doorbell.get_message(timeout=0.0)
    rang = arrived = heard = False
    while ring is not None:
        data = ring.get("data")
        if data == ARRIVAL:
            arrived = rang = True
        elif isinstance(data, bytes) and relay.heard(data):
            heard = True
        else:
            rang = True
        ring = doorbell.get_message(timeout=0.0)
    return rang, arrived, heard


def _fence(token: str) -> int:
    return int(token.rsplit("#", 1)[1])


def router(store: str | None = None, node: str | None = None) -> Router:
    """A new router for a shard (default: shard 0, the one store), from the settings;
    `node`: the Celery worker's name, for the lease."""
    return Router(
        redis_clients.store_url(),
        store or settings.XUMP_STORE,
        settings.XUMP_LEASE_MS,
        settings.XUMP_DELIVERY_TIMEOUT,
        settings.XUMP_JOURNAL_LIMIT,
        shard_map.names(),
        node,
    )


def start_inline_router() -> list[threading.Thread]:
    """XUMP_ROUTING=inline: route every shard in a daemon thread of this process each, for
    as long as it lives (taking a lease over whenever another holder lets it go)."""
    return [_inline_router(store) for store in shard_map.names()]


def _inline_router(store: str) -> threading.Thread:
    def run() -> None:
        routing = router(store)
        while True:
            try:
                if routing.acquire(wait=settings.XUMP_LEASE_MS / 1000 * 2):
                    routing.drain(linger=float("inf"))
            except Exception:
                logger.exception("inline router failed; starting again")
                routing._discard()
                time.sleep(1)

    thread = threading.Thread(target=run, name=f"xump-router-{store}", daemon=True)
    thread.start()
    return thread
