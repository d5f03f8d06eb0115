"""Health (no authentication) and filter validation (for the console's selector builder)."""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, connection
from django.http import HttpRequest
from ninja import Router

from engine.errors import InvalidSelector
from engine.filters import compile_filter
from xumpweb.api.errors import error_response
from xumpweb.api.schemas import ErrorOut, FilterIn
from xumpweb.runtime import service

router = Router(tags=["service"])


@router.get("/health", auth=None, response={200: dict, 503: dict}, summary="Health")
def health(request: HttpRequest):
    """Redis, the database and the routing workers; `ok` is true when all three are.
    503 when Redis or the database fails, or when no worker routes while commands wait in
    the inbox (routing is stalled). Without workers and with nothing waiting the answer is
    200 with `ok` false: publishes are still stored durably and routed once one starts."""
    running = service()
    report: dict[str, Any] = running.health()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        report["database"] = {"ok": True}
    except DatabaseError as error:
        report["database"] = {"ok": False, "detail": str(error)}
    report["ok"] = all(part.get("ok") for part in report.values() if isinstance(part, dict))
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
