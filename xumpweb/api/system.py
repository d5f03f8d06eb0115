"""Health (no authentication), filter validation (for the console's selector builder), the
commands the router refused (its errors list) and the shards (SPEC §10)."""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, connection
from django.http import HttpRequest
from ninja import Query, Router

from engine.errors import InvalidSelector
from engine.filters import compile_filter
from xumpweb import shard_status
from xumpweb.api.auth import need_token_admin
from xumpweb.api.common import record
from xumpweb.api.errors import error_response
from xumpweb.api.schemas import ErrorOut, FilterIn
from xumpweb.runtime import service

router = Router(tags=["service"])


@router.get("/health", auth=None, response={200: dict, 503: dict}, summary="Health")
def health(request: HttpRequest):
    """Redis, the database and the routing workers; `ok` is true when all three are.
    503 when Redis or the database fails (Redis refusing writes, e.g. at maxmemory, counts
    as failing), or when no worker routes while commands wait in the inbox (routing is
    stalled). Without workers and with nothing waiting the answer is 200 with `ok` false:
    publishes are still stored durably and routed once one starts. `durability` tells
    whether a 202 means on disk (Redis's appendonly and appendfsync); when it does not,
    `warnings` says so (and `ok` stays as it was: the service works, with less promise)."""
    running = service()
    report: dict[str, Any] = running.health()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        report["database"] = {"ok": True}
    except DatabaseError as error:
        report["database"] = {"ok": False, "detail": str(error)}
    report["ok"] = all(report[part]["ok"] for part in ("redis", "database", "workers"))
    report["warnings"] = [report["durability"]["warning"]] if report.get(
        "durability", {}).get("warning") else []  # fmt: skip
    healthy = report["redis"]["ok"] and report["database"]["ok"]
    if healthy and not report["workers"]["ok"]:
        report["inbox"] = running.redis.llen(running.keys["inbox"])
        healthy = report["inbox"] == 0
    return (200 if healthy else 503), report


@router.post(
    "/filters/validate", response={200: dict, 400: ErrorOut, 401: ErrorOut},
    summary="Validate a filter expression",
)  # fmt: skip
def filter_validate(request: HttpRequest, payload: FilterIn):
    """`{"ok": true}`, or 400 `invalid_selector` with the `column` of the error."""
    try:
        compile_filter(payload.expression)
    except InvalidSelector as error:
        extra = {} if error.column is None else {"column": error.column}
        return error_response(400, "invalid_selector", str(error), **extra)
    return {"ok": True}


@router.get(
    "/refused", response={200: dict, 401: ErrorOut, 403: ErrorOut, 503: ErrorOut},
    summary="Commands the router refused",
)  # fmt: skip
def refused(request: HttpRequest, count: int = Query(50, ge=1, le=1000)):
    """Commands the router could not apply and set aside, newest first: `{"total": n,
    "refused": [{"command", "error", "at"}]}`; a refused publish holds its messages (bodies
    in base64). The newest 10,000 are kept. Needs read on '*' (any console role)."""
    need_token_admin(request, "reading the refused commands", "read-all")
    total, items = service().refused(count)
    return {"total": total, "refused": items}


@router.delete(
    "/refused", response={200: dict, 401: ErrorOut, 403: ErrorOut, 503: ErrorOut},
    summary="Forget the refused commands",
)  # fmt: skip
def refused_clear(request: HttpRequest):
    """`{"cleared": n}`. Needs an admin (or a token with manage on '*'); audited."""
    need_token_admin(request, "clearing the refused commands", "refused")
    count = service().clear_refused()
    record(request, "refused.clear", "router", {"refused": count}, {"refused": 0})
    return {"cleared": count}


@router.get(
    "/shards", response={200: dict, 401: ErrorOut, 403: ErrorOut}, summary="Shards"
)  # fmt: skip
def shards(request: HttpRequest):
    """Every shard (SPEC §10), shard 0 first: `{"shards": [{"name", "queues", "inbox",
    "forward_backlog", "routed_by", "since", "steps_per_second", "ok", "problem"}]}`.
    `routed_by` is the worker whose router holds the shard's lease (null: nobody routes it
    now); `since` (epoch seconds) and `steps_per_second` come from that router's latest
    snapshot (null until it has written one). A shard whose Redis cannot be read has `ok`
    false, `problem` saying why, and its Redis figures null; the others are still read.
    With one shard, the list holds the one store. Needs read on '*' (any console role)."""
    need_token_admin(request, "reading the shards", "read-all")
    return {"shards": shard_status.shard_statuses()}
