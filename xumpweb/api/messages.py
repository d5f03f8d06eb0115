"""Messages in and out: publish (one, a batch), history, waiting messages, confirm, reject."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from django.http import HttpRequest
from ninja import Query, Router

from engine.errors import NotFound
from xumpweb.api.auth import need, wiring_version
from xumpweb.api.common import call
from xumpweb.api.errors import ApiError
from xumpweb.api.publishing import publish_batch as publish_batch_from
from xumpweb.api.publishing import publish_one
from xumpweb.api.schemas import ConfirmIn, ErrorOut, MidOut, MidsOut, RejectIn
from xumpweb.runtime import service

router = Router(tags=["messages"])
ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut, 413: ErrorOut}


def _body_doc(schema: str) -> dict:
    """The request body as the docs show it (the endpoint parses it itself)."""
    ref = {"$ref": f"#/components/schemas/{schema}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


@router.post(
    "/queues/{path:queue}/publish",
    response={202: MidOut, 409: ErrorOut, 503: ErrorOut, **ERRORS},
    openapi_extra=_body_doc("PublishIn"),
    summary="Publish one message",
)
def publish(request: HttpRequest, queue: str):
    """Durably stored when this answers 202; routed right after. Give the body as `body`
    (text), `body_base64` or `json` (any JSON value, stored as compact JSON text)."""
    need(request, queue, "publish")
    return 202, publish_one(service(), queue, request.body, wiring_version(request))


@router.post(
    "/queues/{path:queue}/publish-batch",
    response={202: MidsOut, 409: ErrorOut, 503: ErrorOut, **ERRORS},
    openapi_extra=_body_doc("PublishBatchIn"),
    summary="Publish a batch of messages",
)
def publish_batch(request: HttpRequest, queue: str):
    """Up to 10,000 messages, in order, all or none: one bad message (its index is in the
    error) publishes nothing."""
    need(request, queue, "publish")
    return 202, publish_batch_from(service(), queue, request.body, wiring_version(request))


def _timestamp(text: str) -> float:
    """Seconds since the epoch from a number or an ISO 8601 time (UTC unless it says)."""
    try:
        return float(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ApiError(
            400,
            "invalid_argument",
            f"since must be an ISO 8601 time or epoch seconds, not {text!r}",
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


@router.get(
    "/queues/{path:queue}/history", response={200: dict, **ERRORS}, summary="Browse history"
)
def history(
    request: HttpRequest,
    queue: str,
    start: Literal["latest", "oldest"] | None = None,
    before: int | None = None,
    after: int | None = None,
    since: str | None = Query(None, description="ISO 8601 time or epoch seconds"),
    count: int = Query(50, ge=1, le=1000),
):
    """A page of processed messages: `start=latest` (default) or `before=<seq>` newest
    first; `start=oldest`, `after=<seq>` or `since=<time>` oldest first. Give one."""
    need(request, queue, "read")
    given = [name for name, value in (("start", start), ("before", before), ("after", after),
                                      ("since", since)) if value is not None]  # fmt: skip
    if len(given) > 1:
        raise ApiError(400, "invalid_argument", f"give one of start, before, after and since, "
                       f"not {' and '.join(given)}")  # fmt: skip
    if since is not None:
        messages = call("since", queue=queue, timestamp=_timestamp(since), count=count)
    else:
        if not given:
            start = "latest"
        messages = call("browse", queue=queue, start=start, before=before, after=after, count=count)
    return {"queue": queue, "messages": messages}


@router.get(
    "/queues/{path:queue}/waiting", response={200: dict, **ERRORS}, summary="Unprocessed messages"
)
def waiting(request: HttpRequest, queue: str, count: int = Query(50, ge=1, le=1000)):
    """The oldest unprocessed messages, oldest first, left in place (e.g. a dead-letter
    queue's content)."""
    need(request, queue, "read")
    return {"queue": queue, "messages": call("peek", queue=queue, count=count)}


def _tag_queue(tag: str) -> str:
    """Delivery tags read `<queue>:<selector id>:<serial>`."""
    parts = tag.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        raise NotFound(f"delivery {tag!r} is not outstanding (not a delivery tag)")
    return parts[0]


@router.post("/confirm", response={200: dict, **ERRORS}, summary="Confirm deliveries")
def confirm(request: HttpRequest, payload: ConfirmIn):
    """Settle deliveries by tag, all or none: an unknown tag is a 404 and confirms none."""
    for queue in {_tag_queue(tag) for tag in payload.tags}:
        need(request, queue, "consume")
    return call("confirm", tags=payload.tags)


@router.post("/reject", response={200: dict, **ERRORS}, summary="Reject a delivery")
def reject(request: HttpRequest, payload: RejectIn):
    """`requeue: true` puts the message back at the head of its queue (redelivered);
    false sends it to the queue's dead-letter queue, or drops it."""
    need(request, _tag_queue(payload.tag), "consume")
    return call("reject", tag=payload.tag, requeue=payload.requeue)
