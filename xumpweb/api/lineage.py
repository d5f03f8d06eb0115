"""Explain and trace (SPEC §12): where a message would go, and where one went.

`POST /api/queues/{queue}/explain` takes a message as publish does and answers the engine's
explanation (engine/explain.py): every selector met, its verdict and why, and where the
message would end. Nothing is published; the caller needs `read` on the queue, and sees
nothing of the queues it may not read (engine.explain.visible_to: the walk is cut where it
enters one).

`GET /api/messages/{mid}/trace` answers the message's steps, oldest first, from the live
journal and the Parquet archive (xumpweb/analytics/lineage.py). Only steps at queues the
caller may read are shown; a mid with no step the caller may see is a 404, the same as an
unknown one, so a trace reveals nothing of queues the caller cannot read; a login without
a role is refused (403), as on every other page and call.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from ninja import Router

from engine.explain import visible_to
from xumpweb import access
from xumpweb.analytics.lineage import trace as trace_of
from xumpweb.api.auth import allowed, need
from xumpweb.api.common import call
from xumpweb.api.errors import ApiError
from xumpweb.api.jsonbody import read_json
from xumpweb.api.publishing import message_from
from xumpweb.api.schemas import ErrorOut
from xumpweb.runtime import service

router = Router(tags=["lineage"])
ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 413: ErrorOut}


@router.post(
    "/queues/{path:queue}/explain",
    response={200: dict, **ERRORS},
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/PublishIn"}}},
        }
    },
    summary="Explain where a message would go",
)
def explain(request: HttpRequest, queue: str):
    """Route a message on paper: the body is a message as for publish; nothing is published
    or changed. The answer: `steps` (one per queue met: each selector's `verdict` or
    `reason`, the queue's `outcome`) and `ends` (where the message would end)."""
    need(request, queue, "read")
    message = message_from(read_json(request.body), settings.XUMP_MAX_BODY)
    envelope = {
        "address": message.address,
        "headers": dict(message.headers),
        "return_address": message.return_address,
        "ttl": message.ttl,
        "delay": message.delay,  # `not_before` is one by now (publishing._lifetime)
    }
    readable: dict[str, bool] = {}

    def may_read(name: str) -> bool:
        if name not in readable:
            readable[name] = allowed(request, "read", name)
        return readable[name]

    return visible_to(call("explain", queue=queue, message=envelope), may_read)


@router.get("/messages/{mid}/trace", response={200: dict, **ERRORS}, summary="Trace a message")
def trace(request: HttpRequest, mid: str):
    """What happened to message `mid`, oldest first: published (with its seq), routed by
    which selector into which queue, delivered, confirmed, rejected, timed out, expired,
    dead-lettered and why; each step with its `time`, a sentence (`said`) and whether it
    was read from the live `journal` or the `archive`."""
    if not access.for_request(request).has_role:  # a login nobody gave a role: as everywhere
        raise ApiError(403, "forbidden", "this login has no role yet: ask an administrator")
    archive = settings.XUMP_ARCHIVE_DIR
    steps = trace_of(service(), mid, archive)
    readable: dict[str, bool] = {}
    shown = []
    for step in steps:
        queue = step["queue"]
        if queue not in readable:
            readable[queue] = allowed(request, "read", queue)
        if readable[queue]:
            shown.append(step)
    if not shown:
        raise ApiError(404, "not_found", f"no recorded step of message {mid[:200]!r}")
    return {"mid": mid, "steps": shown}
