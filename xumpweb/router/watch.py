"""Routing in Celery workers without beat: each worker watches the store's lease, takes it
when it is free and routes standing, blocked on the store's doorbell, until it stops.

Theory of operation. The store has one router at a time: the holder of its lease (a Redis
key with an expiry and a fencing number, engine/stores/redis.py). A worker process routes
in two ways, both through the ONE router it keeps (`route_here`, behind a lock: never two
routers in one process, and its engine stays loaded between bursts):

* the **lease watch**, a thread every worker starts when it is ready (Celery's
  `worker_ready`, xumpweb/celery.py): it reads the lease's remaining time (PTTL), and when
  nobody holds the lease it takes it and routes here as the **standing router**: it waits
  on the store's doorbell (pub/sub, rung by every client's inbox push), routes each
  command as it comes, and keeps the lease until its worker shuts down or loses it (SPEC
  §11: no Celery dispatch, no linger, no poll on a lone message's path). While another
  holds the lease it looks again when it would expire (at most every quarter of the lease
  time). A standing router keeps the `kicked` flag set (with its stats snapshot), so
  clients schedule no routing tasks while it stands.
* the `route` task (router/tasks.py): a client that sends a command while the `kicked`
  flag is absent (no router stands: the workers are starting, or the last router died and
  its flag expired) schedules one (runtime.Service.kick); it drains the inbox while
  traffic lasts, lingers, and lets the lease go. A task that finds the lease held by a
  router that stands returns at once.

Why this is needed: a router that dies (kill -9, the machine gone) leaves behind a lease
that expires by itself, the `kicked` flag that tells clients a router is scheduled (so they
schedule none for up to 30 s), and its Celery task, acknowledged late, which the broker
gives back only after its visibility timeout (minutes). Before the watch only beat's
`tick` noticed; without beat routing stopped until the task came back. Now a surviving
worker takes the lease over once it expires (the lease time after the dead router's last
renewal, plus a look or two, see "Who takes it"), whether beat runs or not, and when it
lets go it clears the stale `kicked` flag as every router does, so clients schedule tasks
again.

Why never two routers: the watch changes only *when* a worker tries to take the lease,
never how routing writes. The lease is taken only when its key is absent (one atomic
script that also increments the fencing number), so watches that race at an expiry get
one winner. Every routing step commits in one script that first checks the holder's token
(owner and fencing number): a router that stalled past its lease (SIGSTOP, a long pause)
and was replaced finds another token there and commits nothing (XUMP_LEASE_LOST); it
drops its engine and starts again from the store the next time it holds the lease.

Why nothing is lost: a publish is answered once its command is durable in the inbox; a
router takes commands off the inbox only in the same atomic commit that applies them and
writes the deliveries they caused to the outboxes. A router killed at any point has
committed a step whole or not at all; the next one (from the watch or a task) rebuilds its
engine from the store as last committed and takes the same head of the inbox. The dead
worker's task, when the broker gives it back, finds the lease held or nothing to do
(tasks are idempotent).

Who takes it: the process that held the lease last, when it is alive, since its engine is
current (the fencing number tells); any other rebuilds its engine from the store. So a
watch that finds the lease free lets one look pass unless its process held it last, and
the last holder's watch looks again within half a look after it let go.

Shards (SPEC §10, docs/scaling.md). With XUMP_SHARDS=N every shard has its own lease,
and a process its own router per shard (each behind its own lock: never two routers of
one shard in one process). Every look reads every shard's lease in one round trip and
marks this worker alive (a sorted set of worker names, scored by when each mark lapses,
one lease time after the look: a dead worker's mark lapses with its leases); with W live
workers each stands for its share of the N shards, `share`: N // W, one more for the first
N % W workers in the order of their names, so the shares add up to N exactly (4 shards
over 3 workers: 2, 1, 1; a share of ceil(N/W) each gave 2, 2 and none to the third). A
worker takes free leases up to its share, and above it (a worker joined) it lets one go
after the step in progress, so the joining worker's watch takes it at its next looks.
Losing or handing over a shard never routes a message twice: every step is atomic and
fenced, and the next holder rebuilds its engine from the store. With one shard nothing
is marked and the share is 1.

The preferred router (SPEC §11's co-located path, docs/live-path.md). A process that
publishes and serves subscribers itself, the STOMP server with XUMP_STOMP_ROUTES=true,
starts a watch that *prefers*
the store (one shard only): at every look it marks itself the store's preferred router
(the `preferred` key, set when absent or its own, expiring after the lease time, so a dead
process's mark lapses with its lease), and takes the lease as soon as it is free, letting
no look pass. A worker's watch that sees another process's mark takes no free lease, and
if it stands it lets the lease go after the step in progress: the preferred process takes
it at its next look. So while the STOMP server lives it routes, and hands its own
publishes to its router in memory (runtime.Router.hand): a lone message then costs one
durable write and no process hop. When it dies its mark and lease lapse together and a
worker takes over, as from a dead worker. A preferred process whose router failed (it
could not build its engine, Redis away) stops marking for PREFER_PAUSE seconds, so a
process that cannot route never keeps the workers from it for long. Never two routers:
the mark only changes who *tries*; the lease and the fenced commits are unchanged.

Cost: per worker, one pipelined PTTL + GET (reads: no AOF write, no fsync) every look; the
standing router's idle cost is its lease renewal (a write every quarter of the lease
time) and its stats snapshot (with the `kicked` flag, every SNAPSHOT_EVERY).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

import redis
from django.conf import settings
from django.db import close_old_connections, connection

from engine.errors import StoreError
from xumpweb import runtime

logger = logging.getLogger("xump.router")

ALIVE = "xump:{%s}:routing-workers"  # sorted set: worker name -> when its mark lapses
PREFER_PAUSE = 30.0  # seconds a preferred process leaves the lease alone after failing
# the preferred mark: set when absent or this process's own; the holder's name either way
PREFER = """
local held = redis.call('GET', KEYS[1])
if (not held) or held == ARGV[1] then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return ARGV[1]
end
return held
"""

_guard = threading.Lock()  # guards the dicts below
_routing: dict[str, threading.Lock] = {}  # per shard: one router at a time in this process
_routers: dict[str, runtime.Router] = {}  # per shard: this process's router (engine kept)
_standing: dict[str, threading.Event] = {}  # shards routed standing here -> their stop
_stopping = threading.Event()  # the worker shuts down: routers let go, the watch ends
_node: str | None = None  # the Celery worker's name, in its routers' lease
_watch: LeaseWatch | None = None


def _lock(store: str) -> threading.Lock:
    with _guard:
        return _routing.setdefault(store, threading.Lock())


def route_here(
    wait: float,
    linger: float = runtime.LINGER,
    store: str | None = None,
    stop: threading.Event | None = None,
) -> int | None:
    """Route shard `store` (default: shard 0) with this process's router of it if it gets
    the lease within `wait` seconds (and no other thread of this process routes it): drain
    the inbox until it has been empty for `linger` seconds (for ever: until the worker
    stops, or `stop` is set), then let the lease go. How many commands were applied; None
    when it did not route. StoreError when the store failed or the lease was lost while
    routing."""
    store = store or settings.XUMP_STORE
    deadline = time.monotonic() + wait
    routing = _lock(store)
    if not routing.acquire(timeout=max(wait, 0.0)):
        return None
    try:
        router = _routers.get(store)
        if router is None:
            router = _routers[store] = runtime.router(store, _node)
            # the preferred router (the STOMP server) takes its process's publishes in
            # memory; a worker's has none
            router.takes_handoffs = _watch is not None and _watch.prefer
        if not router.acquire(wait=max(deadline - time.monotonic(), 0.0)):
            return None
        try:
            return router.drain(linger=linger, stop=stop or _stopping)
        finally:
            router.release()
    finally:
        routing.release()


def let_go(store: str | None = None) -> None:
    """After routing (or trying to): let the next command schedule a router, and look once
    more, so a command sent while this one was letting go is not left waiting."""
    main = runtime.service()
    service = main.shards.get(store or main.store, main)
    keys = service.keys
    try:
        service.redis.delete(keys["kicked"])
        if service.redis.llen(keys["inbox"]):
            service.kick()
    except (redis.RedisError, StoreError) as error:
        # Redis is away: the watch takes the lease once it is back (commands wait, nobody
        # holds the lease); the error that ended the routing, if any, goes on
        logger.warning("router for %r cannot let go cleanly: %s", service.store, error)


def work_waiting(service: runtime.Service, inbox: int | None = None) -> bool:
    """Whether a router is needed: commands wait in the inbox (`inbox`: its length, when
    the caller has read it), deliveries are outstanding (their timeout must be watched),
    or a scheduled message is due (or expires) soon (SPEC §8)."""
    if inbox:
        return True
    snapshot = service.snapshot_here()
    if snapshot["inbox"] or any(q["outstanding"] for q in snapshot["queues"]):
        return True
    due = snapshot.get("next_due")
    return due is not None and due <= time.time() + runtime.SCHEDULED_HORIZON


def share(shards: int, workers: list[str], me: str) -> int:
    """How many of `shards` the worker named `me` stands for among the live `workers` (their
    names; `me` among them once its mark is written): shards // W each, one more for the
    first shards % W in the order of their names, so the shares add up to `shards`."""
    names = sorted(set(workers) | {me})
    whole, rest = divmod(shards, len(names))
    return whole + (1 if names.index(me) < rest else 0)


class LeaseWatch(threading.Thread):
    """Takes leases over when they are free, up to this worker's share (see the module
    doc)."""

    def __init__(self, every: float, prefer: bool = False) -> None:
        super().__init__(name="xump-lease-watch", daemon=True)
        self.every = every  # seconds between looks at most
        self.deferred: set[str] = set()  # shards whose last look it let pass (see look)
        self.name_alive = f"{_node or 'worker'}:{id(self)}"
        self.prefer = prefer  # this process routes the store first (see the module doc)
        self.paused_until = 0.0  # monotonic: a preferred process's router failed until then

    def run(self) -> None:
        pause = 0.0
        failing = False  # said once per outage, not at every look
        while not _stopping.wait(pause):
            try:
                pause = self.look()
            except Exception as problem:  # Redis away, the lease lost while routing...
                if not failing:
                    logger.warning("lease watch: %s; looking again every %.2f s", problem,
                                   self.every)  # fmt: skip
                failing = True
                pause = self.every
            else:
                if failing:
                    logger.warning("lease watch: looking again normally")
                failing = False

    def _mark_alive(self, service: runtime.Service, pipe: Any) -> None:
        """Add to `pipe` this worker's mark among the routing workers, and their names."""
        now = time.time()
        alive = ALIVE % service.store
        lapse = now + settings.XUMP_LEASE_MS / 1000  # four looks at least before it lapses
        pipe.zadd(alive, {self.name_alive: lapse}).zremrangebyscore(alive, "-inf", now)
        pipe.zrange(alive, 0, -1)

    def _look_shard_by_shard(self, service: runtime.Service, shards: list) -> list[Any]:
        """`look`'s reads, each shard from its own server: a shard whose server is away (a
        Redis Cluster node down) reads as held (-1: nobody takes it), the others as they
        are. The mark goes to shard 0's server, which must answer."""
        found: list[Any] = []
        for shard in shards:
            try:
                found.extend(shard.redis.pipeline(transaction=False).pttl(
                    shard.keys["lease"]).get(shard.keys["fence"]).execute())  # fmt: skip
            except redis.RedisError:
                found.extend([-1, None])
        pipe = service.redis.pipeline(transaction=False)
        self._mark_alive(service, pipe)
        return found + pipe.execute()

    def look(self) -> float:
        """One look (taking free leases up to this worker's share, letting one go above
        it); seconds until the next."""
        service = runtime.service()
        shards = list(service.shards.values())
        pipe = service.general.pipeline(transaction=False)  # every shard's leases
        for shard in shards:
            pipe.pttl(shard.keys["lease"]).get(shard.keys["fence"])
        if service.sharded:
            self._mark_alive(service, pipe)
        else:
            self._mark_preferred(service, pipe)
        try:
            found = pipe.execute()
        except redis.RedisError:
            if not service.sharded:
                raise
            found = self._look_shard_by_shard(service, shards)
        preferred = None if service.sharded else found[-1]
        if preferred is not None and preferred.decode() != self.name_alive:
            return self._defer(service.store, preferred.decode())
        workers = [name.decode() for name in found[-1]] if service.sharded else []
        mine = share(len(shards), workers, self.name_alive)
        with _guard:
            standing = [store for store, stop in _standing.items() if not stop.is_set()]
        if len(standing) > mine:  # a worker joined: its share comes from here
            _standing[standing[-1]].set()
            standing.pop()
        pause = self.every
        for number, shard in enumerate(shards):
            left, fence = found[2 * number], found[2 * number + 1]
            store = shard.store
            if store in _standing:
                continue
            if left != -2:  # held: look again when it would expire (-1: no expiry, never set)
                self.deferred.discard(store)
                if left > 0:
                    pause = min(pause, left / 1000 + 0.005)
                continue
            if len(standing) >= mine:
                continue
            # the last holder goes first: its engine is current, another process would
            # rebuild its own from the store. So a worker that did not hold the lease last
            # lets one look pass (the last holder's watch looks again within half of one),
            # then takes it (the holder died, or is busy): a takeover comes one look after
            # the lease expired
            first = preferred is not None  # the preferred process (this one) takes it now
            if store not in self.deferred and not _held_last(store, fence) and not first:
                self.deferred.add(store)
                continue
            self.deferred.discard(store)
            standing.append(store)
            _stand(store)
        return pause

    def _mark_preferred(self, service: runtime.Service, pipe: Any) -> None:
        """Add to `pipe` this process's preferred mark (a preferring watch not paused) or
        the read of whoever holds it: its name, or None."""
        key = service.keys["preferred"]
        if self.prefer and time.monotonic() >= self.paused_until:
            pipe.eval(PREFER, 1, key, self.name_alive, settings.XUMP_LEASE_MS)
        else:
            pipe.get(key)

    def _defer(self, store: str, holder: str) -> float:
        """Another process is the store's preferred router: take nothing, and let go of a
        lease routed standing here (after the step in progress); seconds to the next look."""
        with _guard:
            stop = _standing.get(store)
        if stop is not None and not stop.is_set():
            logger.info("letting the lease of %r go to its preferred router %s", store, holder)
            stop.set()
        self.deferred.discard(store)
        return self.every

    def failed(self) -> None:
        """This process's standing router failed: if it prefers the store, it stops
        marking itself for PREFER_PAUSE seconds (see the module doc)."""
        if self.prefer:
            self.paused_until = time.monotonic() + PREFER_PAUSE


def _stand(store: str) -> None:
    """Route `store` standing, in a thread of its own, until the worker stops or the watch
    lets it go."""
    stop = threading.Event()
    with _guard:
        _standing[store] = stop

    def run() -> None:
        routed = None
        try:
            close_old_connections()  # the router reads the wiring: not on a dead connection
            routed = route_here(wait=0.0, linger=float("inf"), store=store, stop=_Either(stop))
        except Exception as problem:  # Redis away, the lease lost: the watch looks again
            logger.warning("the standing router of %r stopped: %s", store, problem)
            watch = _watch
            if watch is not None:
                watch.failed()
        finally:
            with _guard:
                if _standing.get(store) is stop:
                    del _standing[store]
            if routed is not None:
                let_go(store)
                logger.debug("the standing router of %r routed %d command(s)", store, routed)
            connection.close()

    threading.Thread(target=run, name=f"xump-router-{store}", daemon=True).start()


class _Either:
    """Set when the worker stops or this router is let go (Router.drain's `stop`)."""

    def __init__(self, own: threading.Event) -> None:
        self.own = own

    def is_set(self) -> bool:
        return self.own.is_set() or _stopping.is_set()


def _held_last(store: str, fence: bytes | None) -> bool:
    """Whether this process's router of `store` held its lease last (its fencing number is
    the store's latest), so its engine is current."""
    router = _routers.get(store)
    return router is not None and fence is not None and router.fence == int(fence)


def start(node: str | None = None, prefer: bool = False) -> None:
    """Start this process's lease watch, with worker routing: a Celery worker's (its
    worker_ready; `node`: the worker's name, in its routers' leases), or with `prefer` the
    STOMP server's, which routes the store first (see the module doc; one shard only)."""
    global _watch, _node
    if settings.XUMP_ROUTING != "worker" or _watch is not None:
        return
    if prefer and runtime.service().sharded:
        return
    _node = node
    _stopping.clear()
    _watch = LeaseWatch(every=settings.XUMP_LEASE_MS / 1000 / 4, prefer=prefer)
    _watch.start()


def stop() -> None:
    """The worker shuts down: the watch (and every router of this process) lets go."""
    global _watch
    _stopping.set()
    watch = _watch
    if watch is not None:
        watch.join(timeout=settings.XUMP_LEASE_MS / 1000 + 5)
        _watch = None
        if watch.prefer:  # a worker may take the lease at once
            service = runtime.service()
            with contextlib.suppress(redis.RedisError):
                if service.redis.get(service.keys["preferred"]) == watch.name_alive.encode():
                    service.redis.delete(service.keys["preferred"])
    deadline = time.monotonic() + settings.XUMP_LEASE_MS / 1000 + 5
    for store in list(_routing):
        lock = _lock(store)
        if lock.acquire(timeout=max(deadline - time.monotonic(), 0.0)):
            lock.release()  # its router let the lease go
