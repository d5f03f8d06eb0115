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

Cost: per worker, one pipelined PTTL + GET (reads: no AOF write, no fsync) every look; the
standing router's idle cost is its lease renewal (a write every quarter of the lease
time) and its stats snapshot (with the `kicked` flag, every SNAPSHOT_EVERY).
"""

from __future__ import annotations

import logging
import threading
import time

import redis
from django.conf import settings
from django.db import close_old_connections

from engine.errors import StoreError
from xumpweb import runtime

logger = logging.getLogger("xump.router")

_routing = threading.Lock()  # one router at a time in this process: the task's or the watch's
_router: runtime.Router | None = None  # this process's router (its engine kept between bursts)
_stopping = threading.Event()  # the worker shuts down: routers let go, the watch ends
_watch: LeaseWatch | None = None


def route_here(wait: float, linger: float = runtime.LINGER) -> int | None:
    """Route with this process's router if it gets the lease within `wait` seconds (and no
    other thread of this process routes): drain the inbox until it has been empty for
    `linger` seconds (for ever: until the worker stops), then let the lease go. How many
    commands were applied; None when it did not route. StoreError when the store failed
    or the lease was lost while routing."""
    global _router
    deadline = time.monotonic() + wait
    if not _routing.acquire(timeout=max(wait, 0.0)):
        return None
    try:
        if _router is None:
            _router = runtime.router()
        router = _router
        if not router.acquire(wait=max(deadline - time.monotonic(), 0.0)):
            return None
        try:
            return router.drain(linger=linger, stop=_stopping)
        finally:
            router.release()
    finally:
        _routing.release()


def let_go() -> None:
    """After routing (or trying to): let the next command schedule a router, and look once
    more, so a command sent while this one was letting go is not left waiting."""
    service = runtime.service()
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
    snapshot = service.snapshot()
    if snapshot["inbox"] or any(q["outstanding"] for q in snapshot["queues"]):
        return True
    due = snapshot.get("next_due")
    return due is not None and due <= time.time() + runtime.SCHEDULED_HORIZON


class LeaseWatch(threading.Thread):
    """Takes the lease over when it is free and work waits (see the module doc)."""

    def __init__(self, every: float) -> None:
        super().__init__(name="xump-lease-watch", daemon=True)
        self.every = every  # seconds between looks at most
        self.deferred = False  # it let the last look pass for the last holder (see look)

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

    def look(self) -> float:
        """One look (routing here if the lease is free and work waits); seconds until the
        next."""
        service = runtime.service()
        keys = service.keys
        left, fence = (service.redis.pipeline(transaction=False)
                       .pttl(keys["lease"]).get(keys["fence"]).execute())  # fmt: skip
        if left != -2:  # held: look again when it would expire (-1, no expiry: never set)
            self.deferred = False
            return min(self.every, left / 1000 + 0.005) if left > 0 else self.every
        # the last holder goes first: its engine is current, another process would rebuild
        # its own from the store. So a worker that did not hold the lease last lets one look
        # pass (the last holder's watch looks again within half of one), then takes it
        # (the holder died, or is busy): a takeover comes one look after the lease expired
        if not self.deferred and not _held_last(fence):
            self.deferred = True
            return self.every
        self.deferred = False
        close_old_connections()  # the router may read the wiring: not on a dead connection
        routed = route_here(wait=0.0, linger=float("inf"))  # standing, until the worker stops
        if routed is None:  # another thread of this process is taking it, or another worker
            return self.every
        let_go()
        logger.debug("the standing router routed %d command(s)", routed)
        return self.every / 2


def _held_last(fence: bytes | None) -> bool:
    """Whether this process's router held the lease last (its fencing number is the
    store's latest), so its engine is current."""
    return _router is not None and fence is not None and _router.fence == int(fence)


def start() -> None:
    """Start this worker's lease watch (Celery's worker_ready), with worker routing."""
    global _watch
    if settings.XUMP_ROUTING != "worker" or _watch is not None:
        return
    _stopping.clear()
    _watch = LeaseWatch(every=settings.XUMP_LEASE_MS / 1000 / 4)
    _watch.start()


def stop() -> None:
    """The worker shuts down: the watch (and a router of this process) lets go."""
    global _watch
    _stopping.set()
    if _watch is not None:
        _watch.join(timeout=settings.XUMP_LEASE_MS / 1000 + 5)
        _watch = None
