"""/topic/<pattern> subscriptions: a private queue per subscription, and its removal.

A STOMP subscription to /topic/<pattern> gets a private, self-destructing queue
`stomp:<connection>:<n>` delivering to the destination of the same name, fed by a COPY
selector on the topic router (XUMP_STOMP_TOPIC_ROUTER, default "parrot", the parrot
pattern's router) that matches the message's address against the pattern and, with a
`selector` header, filters by it (router/operations.py stomp_topic_open). A SEND to
/topic/<address> publishes to that router with that address. Unsubscribing, or the
connection ending, takes the queue down (stomp_topic_close).

The router is made when first needed, by a subscription or a SEND (`ensure_router`, once
per process), with a DEFAULT DELETE selector: what no subscription's pattern matches is
dropped, so a subscriber receives only what is published while it is subscribed (a router
without any enabled selector would hold what arrives for the next one).

/exchange/<name>/<key> subscriptions (exchanges.py) get the same private queue, fed by a
COPY on the exchange's queue instead of the topic router.

A STOMP process that dies cannot take its queues down: `sweep()` (a beat task, every
SWEEP_EVERY seconds) removes the `stomp:` queues whose destination has had no consumer
present (relay presence keys) at two sweeps in a row.
"""

from __future__ import annotations

import hashlib
import logging

from asgiref.sync import sync_to_async
from django.conf import settings

from engine.errors import NotFound
from xumpweb.runtime import Service

logger = logging.getLogger("xump.stomp")

PREFIX = "stomp:"
DURABLE_PREFIX = "stomp-durable:"  # not swept: they outlive their connections
SWEEP_EVERY = 30.0


def queue_name(connection: str, serial: int) -> str:
    return f"{PREFIX}{connection}:{serial}"


def router() -> str:
    return settings.XUMP_STOMP_TOPIC_ROUTER


def private_owner(queue: str) -> tuple[str, bool] | None:
    """For a connection's private queue `stomp:<connection>:...`: (that connection's id,
    whether it is a /temp-queue/ one, `stomp:<connection>:temp:<name>`); else None."""
    if not queue.startswith(PREFIX):
        return None
    connection, _, rest = queue[len(PREFIX) :].partition(":")
    return connection, rest.startswith("temp:")


_ready: set[tuple[str, str]] = set()  # (store, router) this process has made sure of


async def ensure_router(found: Service, name: str | None = None) -> None:
    """Make sure the router `name` (default: the topic router) exists, with its DEFAULT
    DELETE (XumpError when the router refuses), once per process."""
    key = (found.keys["inbox"], name or router())
    if key in _ready:
        return
    await sync_to_async(found.call, thread_sensitive=False)("stomp_topic_router", router=key[1])
    _ready.add(key)


async def open_topic(
    found: Service,
    queue: str,
    pattern: str,
    expression: str | None,
    durable: bool = False,
    *,
    source: str | None = None,
    operator: str | None = "topic",
    make_router: bool = True,
) -> None:
    """Build the subscription's wiring (XumpError when the router refuses it); a durable
    one's is kept when it exists (the subscriber is back). `source`: the router queue
    (default: the topic router; an exchange's queue for /exchange/), `operator` how the
    pattern matches the address (None: every address, a fanout)."""
    await sync_to_async(found.call, thread_sensitive=False)(
        "stomp_topic_open", queue=queue, router=source or router(), pattern=pattern,
        filter=expression, durable=durable, operator=operator, make_router=make_router,
    )  # fmt: skip


def durable_name(owner: str, name: str) -> str:
    """The queue of the durable subscription `name` of `owner` (durable_owner): found again
    by both on the subscriber's return."""
    return f"{DURABLE_PREFIX}{owner}:{name}"


def durable_owner(who: str, client_id: str | None) -> str:
    """Whose durable subscriptions a connection finds again: its client-id within its login
    (`who`, shortened to a digest), or its login alone. A client-id is anybody's to claim
    while it is free, so another login that takes it finds none of them, and can neither
    read nor remove them."""
    login = hashlib.sha256(who.encode()).hexdigest()[:12]
    return f"{login}:{client_id}" if client_id else login


async def close_topic(found: Service, queue: str, source: str | None = None) -> None:
    """Take a subscription's queue down with the COPY on `source` (default: the topic
    router) that feeds it."""
    await sync_to_async(found.call, thread_sensitive=False)(
        "stomp_topic_close", queue=queue, router=source or router()
    )


async def remove_private(found: Service, queue: str) -> None:
    """Take a private queue down with every COPY that feeds it, from whichever router (a
    durable subscription removed while its subscriber is away: its router is not known)."""
    try:
        await sync_to_async(found.call, thread_sensitive=False)("queue_delete", name=queue)
    except NotFound:
        pass


def sweep(found: Service) -> list[str]:
    """Remove the private topic queues nobody has consumed at two sweeps in a row (their
    STOMP process died); the names removed."""
    candidates_key = found.keys["inbox"][: -len("inbox")] + "stomp-orphans"
    version = found.wiring_version()
    names = sorted(n for n in found.queue_names(version) if n.startswith(PREFIX))
    if not names:
        found.redis.delete(candidates_key)
        return []
    # its subscriber's presence is kept on the queue's shard: on a Redis Cluster another
    # node may serve it than shard 0's (a cluster client's pipeline asks each its own)
    pipe = found.general.pipeline(transaction=False)
    for name in names:
        pipe.exists(found.shard_of(name, version).keys["present"] + name)
    present = pipe.execute()
    absent = {name for name, here in zip(names, present, strict=True) if not here}
    before = {member.decode() for member in found.redis.smembers(candidates_key)}
    removed = []
    for name in sorted(absent & before):
        try:  # with the COPY that fed it, on the topic router or an exchange's queue
            found.call("queue_delete", name=name)
        except Exception as problem:  # the next sweep tries again
            logger.warning("cannot remove orphaned topic queue %r: %s", name, problem)
            continue
        removed.append(name)
    pipe = found.redis.pipeline(transaction=True)
    pipe.delete(candidates_key)
    if absent - set(removed):
        pipe.sadd(candidates_key, *(absent - set(removed)))
    pipe.execute()
    if removed:
        logger.info("removed %d orphaned STOMP topic queue(s)", len(removed))
    return removed
