"""Consumers: every connected subscriber (of every web process, xumpweb/live/registry.py),
closing one, and which destinations each queue's DELIVER selectors feed."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router

from xumpweb import access
from xumpweb.api.common import record
from xumpweb.api.errors import ApiError
from xumpweb.api.schemas import ErrorOut
from xumpweb.live import registry
from xumpweb.runtime import service
from xumpweb.wiring.models import Selector

router = Router(tags=["consumers"])
ERRORS = {401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 503: ErrorOut}


def report(principal: access.Principal) -> dict[str, Any]:
    """The subscribers of the destinations `principal` may read, and the DELIVER selectors
    of the queues it may read with how many subscribers listen at each destination."""
    found = service()
    everyone = registry.listing(found.redis, found.store)
    connections = [
        info for info in everyone if access.may(principal, "read", info.get("destination", ""))
    ]  # fmt: skip
    listening: dict[str, int] = {}
    for info in everyone:
        destination = info.get("destination", "")
        listening[destination] = listening.get(destination, 0) + 1
    feeds = []
    rows = Selector.objects.select_related("queue").filter(action="deliver")
    for row in rows.order_by("queue__name", "number"):
        if not row.target or not access.may(principal, "read", row.queue.name):
            continue
        feeds.append({
            "queue": row.queue.name,
            "selector": row.number,
            "destination": row.target,
            "enabled": row.enabled,
            "credit": row.credit,
            "listeners": listening.get(row.target, 0),
        })  # fmt: skip
    for info in connections:
        info["may_close"] = access.may(principal, "disconnect", info.get("destination", ""))
    return {"consumers": connections, "feeds": feeds}


def need_role(request: HttpRequest) -> access.Principal:
    principal = access.for_request(request)
    if not access.may(principal, "console"):
        raise ApiError(403, "forbidden", "listing the consumers needs a role or a token")
    return principal


def close(request: HttpRequest, connection: str) -> dict[str, Any]:
    """Ask one connection to close (manage on its destination); audited. ApiError 404
    when it is not connected, 403 without the right."""
    found = service()
    info = registry.fetch(found.redis, found.store, connection) if registry.valid_id(
        connection) else None  # fmt: skip
    if info is None:
        raise ApiError(404, "not_found", f"no subscriber {connection!r} is connected")
    destination = info.get("destination", "")
    if not access.may(access.for_request(request), "disconnect", destination):
        raise ApiError(403, "forbidden", f"this caller may not manage on {destination!r}")
    if not registry.close(found.redis, found.store, connection):
        raise ApiError(404, "not_found", f"no subscriber {connection!r} is connected")
    record(request, "consumer.close", destination, info, None)
    return {"closing": connection, "destination": destination}


@router.get("/consumers", response={200: dict, **ERRORS}, summary="Connected subscribers")
def consumer_list(request: HttpRequest):
    """`consumers`: every connected subscriber of a destination the caller may read (id,
    transport, destination, who, remote address, since, credit, in_flight, acked,
    acks_per_second, host, pid), oldest first; `feeds`: every DELIVER selector of a
    queue the caller may read, with how many subscribers listen at its destination."""
    return report(need_role(request))


@router.delete(
    "/consumers/{connection}", response={200: dict, **ERRORS}, summary="Close a subscriber"
)
def consumer_close(request: HttpRequest, connection: str):
    """The connection closes within a second (close code 4000, error `closed_by_operator`)
    and its unsettled deliveries go back to their queues, redelivered. Needs manage on
    the destination; audited."""
    need_role(request)
    return close(request, connection)
