"""Explain (SPEC §12): where a message would go.

`POST /api/queues/{queue}/explain` takes a message as publish does and answers the engine's
explanation (engine/explain.py): every selector met, its verdict and why, and where the
message would end. Nothing is published; the caller needs `read` on the queue.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest
from ninja import Router

from xumpweb.api.auth import need
from xumpweb.api.common import call
from xumpweb.api.jsonbody import read_json
from xumpweb.api.publishing import message_from
from xumpweb.api.schemas import ErrorOut

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
    }
    return call("explain", queue=queue, message=envelope)
