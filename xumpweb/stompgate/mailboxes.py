"""/queue/<name> mailboxes: what makes "SEND /queue/x, SUBSCRIBE /queue/x" meet (SPEC §9).

A SEND or SUBSCRIBE to /queue/<name> by a caller with `manage` on <name>, where no queue
<name> exists and no DELIVER selector feeds destination <name>, first creates the mailbox
<name>: a queue of that name whose one selector DELIVERs to destination <name>, as a
RabbitMQ or ActiveMQ queue behaves. The check and the creation are one router operation
(router/operations.py stomp_mailbox), so concurrent first uses make one mailbox; the one
call that made it marks the queue as a mailbox (the wiring's Queue.mailbox, shown by the
API and the console) and writes the audit entry. A caller without `manage` is never asked
about: its SEND or SUBSCRIBE goes on as before (a SEND to a missing queue is an ERROR).

Private queues of STOMP connections (topic subscriptions, temp queues, durable
subscriptions) are never made into mailboxes: their names start with PRIVATE_PREFIXES.
"""

from __future__ import annotations

import logging

import redis
from asgiref.sync import sync_to_async

from engine.errors import StoreError, XumpError
from xumpweb.router.operations import STOMP_PRIVATE
from xumpweb.runtime import Service

logger = logging.getLogger("xump.stomp")

PRIVATE_PREFIXES = STOMP_PRIVATE


def is_private(name: str) -> bool:
    return name.startswith(PRIVATE_PREFIXES)


async def ensure(found: Service, name: str, who: str) -> bool:
    """Make the mailbox `name` when it is missing (the caller has `manage` on it); True
    when this call made it. A refusal (a bad name) is logged: the SEND or SUBSCRIBE then
    meets the error it would have met anyway. StoreError when the store could not be asked
    (Redis away): whether the mailbox exists is not known."""
    try:
        answer = await sync_to_async(found.call, thread_sensitive=False)("stomp_mailbox", name=name)
    except (StoreError, redis.RedisError) as problem:
        raise StoreError(f"cannot make the mailbox {name!r}: {problem}") from None
    except XumpError as problem:
        logger.warning("cannot make the mailbox %r: %s", name, problem)
        return False
    if answer["created"]:
        await sync_to_async(_mark, thread_sensitive=False)(name, who)
    return bool(answer["created"])


def _mark(name: str, who: str) -> None:
    from xumpweb.wiring import audit
    from xumpweb.wiring.models import Queue

    Queue.objects.filter(name=name).update(mailbox=True)
    audit.record(
        who,
        "queue.create",
        name,
        None,
        {"name": name, "mailbox": True, "selector": f"always → deliver {name}", "via": "stomp"},
    )


def names() -> frozenset[str]:
    """The queues that are mailboxes (for the API's and the console's queue answers)."""
    from xumpweb.wiring.models import Queue

    return frozenset(Queue.objects.filter(mailbox=True).values_list("name", flat=True))
