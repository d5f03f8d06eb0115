"""Celery tasks: routing, delivery timeouts, history trimming, liveness.

`route` is the router for one burst of traffic (xumpweb/runtime.py): a client schedules it
when it sends a command and none is scheduled (one task per burst, never one per message);
it drains the store's inbox under the store's lease and lingers a little before it lets
the lease go. Delivery timeouts run inside it (every second while it routes); when traffic
stops, `tick` (every 2 s from beat) notices work left in the inbox or deliveries still
outstanding and schedules it again. Every task is idempotent and acknowledged late: a
killed worker's task runs again, and the lease makes sure two never route at once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import redis
from celery import shared_task
from django.conf import settings

from engine.errors import StoreError
from xumpweb import runtime

_local = threading.local()
logger = logging.getLogger("xump.router")


def _router() -> runtime.Router:
    """The router of this worker thread (kept between tasks: its engine stays loaded)."""
    found = getattr(_local, "router", None)
    if found is None:
        found = _local.router = runtime.router()
    return found


@shared_task(
    acks_late=True,
    autoretry_for=(StoreError,),
    retry_backoff=True,
    max_retries=5,
    ignore_result=True,
)
def route(store: str) -> int:
    """Drain `store`'s inbox while traffic lasts; how many commands were applied."""
    service = runtime.service()
    keys = runtime.keys(store)
    router = _router()
    applied = 0
    try:
        if router.acquire(wait=settings.XUMP_LEASE_MS / 1000 * 1.5):
            try:
                applied = router.drain()
            finally:
                router.release()
    finally:
        # let the next command schedule a router; then look once more, so a command sent
        # while this one was letting go is not left waiting for the next tick
        try:
            service.redis.delete(keys["kicked"])
            if service.redis.llen(keys["inbox"]):
                service.kick()
        except (redis.RedisError, StoreError) as error:
            # Redis is away: `tick` schedules a router once it is back (commands wait,
            # nobody holds the lease); the error that ended the routing, if any, goes on
            logger.warning("router for %r cannot let go cleanly: %s", store, error)
    return applied


@shared_task(ignore_result=True)
def tick() -> None:
    """Schedule a router when commands wait, deliveries are outstanding (their timeout
    must be watched), or a scheduled message is due (or expires) soon (SPEC §8), and none
    is routing."""
    service = runtime.service()
    keys = runtime.keys(service.store)
    pipe = service.redis.pipeline()
    waiting, leased, kicked = pipe.llen(keys["inbox"]).exists(keys["lease"]).exists(
        keys["kicked"]).execute()  # fmt: skip
    snapshot = service.snapshot()
    outstanding = sum(q["outstanding"] for q in snapshot["queues"])
    due = snapshot.get("next_due")
    due_soon = due is not None and due <= time.time() + runtime.SCHEDULED_HORIZON
    if (waiting or outstanding or due_soon) and not leased:
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
