"""Queues: list, create, read, change, delete, stats."""

from __future__ import annotations

import bisect

from django.conf import settings
from django.http import HttpRequest
from ninja import Query, Router

from xumpweb.api.auth import allowed, need, need_to_send, wiring_version
from xumpweb.api.common import call, record
from xumpweb.api.errors import ApiError
from xumpweb.api.schemas import ErrorOut, QueueCreate, QueueUpdate
from xumpweb.runtime import service
from xumpweb.stompgate import mailboxes

router = Router(tags=["queues"])
ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut}


@router.get("/queues", response={200: dict, **ERRORS}, summary="List queues")
def queue_list(
    request: HttpRequest,
    limit: int = Query(100, ge=1, le=1000, description="queues on this page"),
    after: str | None = Query(None, description="the `next` of the page before"),
    prefix: str = Query("", max_length=200, description="only queues whose name starts so"),
):
    """One page of the queues the caller has a right on, in name order, each with its
    depth, history size, outstanding deliveries and counters; `total`: how many there are
    (with `prefix`, how many match); `next`: the `after` of the next page, null on the
    last. Only the page's queues are read from the router."""
    version = wiring_version(request)
    visible = sorted(
        name for name in service().queue_names(version)
        if name.startswith(prefix)
        and any(allowed(request, right, name) for right in ("read", "publish"))
    )  # fmt: skip
    start = bisect.bisect_right(visible, after) if after is not None else 0
    page = visible[start : start + limit]
    found = call("queues", names=page) if page else []
    marked = mailboxes.names()
    for queue in found:
        queue["mailbox"] = queue["name"] in marked
    more = start + limit < len(visible)
    return {"queues": found, "total": len(visible), "next": page[-1] if more else None}


@router.post("/queues", response={200: dict, 201: dict, **ERRORS}, summary="Create a queue")
def queue_create(request: HttpRequest, payload: QueueCreate):
    """201 with the new queue; 200 when one with the same settings exists already; 409
    when the name is taken by a queue with other settings."""
    need(request, payload.name, "manage")
    settings_ = payload.dict()
    need_to_send(request, settings_)
    # with shards, a queue named no store is placed (SPEC §10); else the one store
    settings_["store"] = settings_["store"] or (
        None if settings.XUMP_SHARDS > 1 else settings.XUMP_STORE
    )
    answer = call("queue_create", **settings_)
    if not answer["created"]:
        return 200, answer["queue"]
    record(request, "queue.create", payload.name, None, answer["queue"])
    return 201, answer["queue"]


@router.get("/queues/{path:queue}/stats", response={200: dict, **ERRORS}, summary="Queue stats")
def queue_stats(request: HttpRequest, queue: str):
    """Counters: published, routed, delivered, confirmed, dropped, dead_lettered, depth,
    expired (TTL only), timed_out (back after the delivery timeout), recalled (withdrawn
    from a wolfpack worker away, never received), delivery_limited, scheduled."""
    need(request, queue, "read")
    return call("stats", queue=queue)


@router.get(
    "/queues/{path:queue}/scheduled", response={200: dict, **ERRORS}, summary="Scheduled messages"
)
def scheduled(request: HttpRequest, queue: str, count: int = Query(1000, ge=1, le=10_000)):
    """The messages the queue holds out of routing (SPEC §8), soonest due first, each with
    its `due` time (epoch seconds): delayed messages (seq null) and redeliveries waiting
    out their redelivery delay. `total` counts them all."""
    need(request, queue, "read")
    return call("scheduled", queue=queue, count=count)


@router.delete(
    "/queues/{path:queue}/scheduled/{mid}",
    response={200: dict, **ERRORS},
    summary="Cancel a scheduled message",
)
def scheduled_cancel(request: HttpRequest, queue: str, mid: str):
    """Withdraw a scheduled message (counted as dropped); 404 when it is not scheduled
    there (already due, or cancelled)."""
    need(request, queue, "manage")
    answer = call("cancel", queue=queue, mids=[mid])
    record(request, "message.cancel", queue, {"mid": mid}, None)
    return answer


@router.get("/queues/{path:queue}", response={200: dict, **ERRORS}, summary="Read a queue")
def queue_get(request: HttpRequest, queue: str):
    """The queue's settings, state and counters, with its selectors in routing order;
    `mailbox` is true for a queue a STOMP SEND or SUBSCRIBE made (docs/stomp.md)."""
    need(request, queue, "read")
    answer = call("queue_get", name=queue)
    answer["mailbox"] = answer["name"] in mailboxes.names()
    return answer


@router.patch("/queues/{path:queue}", response={200: dict, **ERRORS}, summary="Change a queue")
def queue_update(request: HttpRequest, queue: str, payload: QueueUpdate):
    """Change limit, history, dead_letter, self_destruct, journal or the lifetime options
    (max_deliveries, redelivery_delay/_backoff/_delay_max, ttl; not priorities): the
    fields given."""
    need(request, queue, "manage")
    changes = payload.dict(exclude_unset=True)
    if not changes:
        raise ApiError(400, "invalid_argument", "give at least one setting to change")
    before = call("queue_get", name=queue)
    before.pop("selectors", None)
    need_to_send(request, changes, before)
    after = call("queue_update", name=queue, **changes)
    record(request, "queue.update", queue, before, after)
    return after


@router.delete("/queues/{path:queue}", response={200: dict, **ERRORS}, summary="Delete a queue")
def queue_delete(request: HttpRequest, queue: str):
    """Deletes the queue, its selectors and its messages."""
    need(request, queue, "manage")
    before = call("queue_get", name=queue)
    answer = call("queue_delete", name=queue)
    record(request, "queue.delete", queue, before, None)
    return answer
