"""Celery tasks: routing, delivery timeouts, history trimming, liveness.

`route` is the router for one burst of traffic (xumpweb/runtime.py) when no router stands
(router/watch.py: every worker's lease watch takes the lease and routes standing): a
client schedules it when it sends a command and the `kicked` flag is absent (one task per
burst, never one per message); it drains the store's inbox under the store's lease and
lingers a little before it lets the lease go; it returns at once when a router holds the
lease (that one routes, and looks at the inbox once more when it lets go). Delivery
timeouts run inside every router (every second while it routes). Both use the worker
process's one router (router/watch.py's `route_here`). `tick` (every 2 s from beat)
schedules a task when nobody holds the lease and work waits; routing does not depend on
it. Every task is idempotent and acknowledged late: a killed worker's task runs again, and
the lease makes sure two never route at once (see router/watch.py).
"""

from __future__ import annotations

import logging
import os
import socket

from celery import shared_task
from django.conf import settings

from engine.errors import StoreError
from xumpweb import runtime
from xumpweb.router import watch

logger = logging.getLogger("xump.router")


@shared_task(
    acks_late=True,
    autoretry_for=(StoreError,),
    retry_backoff=True,
    max_retries=5,
    ignore_result=True,
)
def route(store: str) -> int:
    """Drain `store`'s inbox while traffic lasts; how many commands were applied."""
    main = runtime.service()
    service = main.shards.get(store)
    if service is None:
        logger.warning("no shard %r to route (XUMP_SHARDS changed?)", store)
        return 0
    keys = service.keys
    left, preferred = (service.redis.pipeline(transaction=False).pttl(keys["lease"])
                       .exists(keys["preferred"]).execute())  # fmt: skip
    if left > 0:
        return 0  # a router holds it (standing, or lingering: its let_go looks again)
    if preferred and not main.sharded:
        return 0  # its preferred router takes it at its next look (router/watch.py)
    applied = None
    try:
        applied = watch.route_here(wait=settings.XUMP_LEASE_MS / 1000 * 1.5, store=store)
    finally:
        if applied is not None:
            watch.let_go(store)
    return applied or 0


@shared_task(ignore_result=True)
def tick() -> None:
    """Schedule a router when work waits (router/watch.py's `work_waiting`) and none is
    routing: the lease watch of every worker does the same by itself; beat's tick is a
    second look."""
    for service in runtime.service().shards.values():
        keys = service.keys
        leased, kicked = (service.redis.pipeline().exists(keys["lease"])
                          .exists(keys["kicked"]).execute())  # fmt: skip
        if not leased and watch.work_waiting(service):
            if kicked:
                service.redis.delete(keys["kicked"])  # left by a router that died
            service.kick()


@shared_task(ignore_result=True)
def heartbeat() -> None:
    """Tell /api/health that workers live (and which)."""
    service = runtime.service()
    name = f"{socket.gethostname()}:{os.getppid()}"
    service.redis.set(service.keys["workers"] + name, "1", ex=15)


@shared_task(acks_late=True, autoretry_for=(StoreError,), max_retries=3, ignore_result=True)
def expire() -> int:
    """Return deliveries unconfirmed past the delivery timeout (also done while routing)."""
    return runtime.service().call("expire", older_than=settings.XUMP_DELIVERY_TIMEOUT)[
        "redelivered"
    ]


@shared_task(acks_late=True, autoretry_for=(StoreError,), max_retries=3, ignore_result=True)
def trim() -> int:
    """Hold every queue's history to its setting."""
    return runtime.service().call("trim")["queues"]
