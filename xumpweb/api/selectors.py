"""Selectors of a queue: list, create, read, change, delete, credit."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Router

from engine.filters import compile_filter
from xumpweb.api.auth import need, need_to_send
from xumpweb.api.common import call, record
from xumpweb.api.errors import ApiError
from xumpweb.api.schemas import CreditIn, ErrorOut, SelectorCreate, SelectorUpdate

router = Router(tags=["selectors"])
ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut}
ONE = "/queues/{path:queue}/selectors/{int:id}"


@router.get(
    "/queues/{path:queue}/selectors", response={200: dict, **ERRORS}, summary="List selectors"
)
def selector_list(request: HttpRequest, queue: str):
    """The queue's selectors in routing order."""
    need(request, queue, "read")
    return {"queue": queue, "selectors": call("selectors", queue=queue)}


@router.post(
    "/queues/{path:queue}/selectors", response={201: dict, **ERRORS}, summary="Create a selector"
)
def selector_create(request: HttpRequest, queue: str, payload: SelectorCreate):
    """A configured selector in one call (WHEN, DO, credit, start); it routes once
    `enabled` is true. A bad filter is a 400 `invalid_selector` with the `column`."""
    need(request, queue, "manage")
    settings = payload.dict(exclude_unset=True)
    _check_filter(settings)
    need_to_send(request, settings)
    created = call("selector_create", queue=queue, **settings)
    record(request, "selector.create", f"{queue}#{created['id']}", None, created)
    return 201, created


@router.post(ONE + "/credit", response={200: dict, **ERRORS}, summary="Add credit")
def selector_credit(request: HttpRequest, queue: str, id: int, payload: CreditIn):
    """Top the selector's credit up by `n`; what waited for credit is routed."""
    need(request, queue, "manage")
    before = call("selector_get", queue=queue, id=id)
    after = call("selector_credit", queue=queue, id=id, n=payload.n)
    record(request, "selector.credit", f"{queue}#{id}", before, after)
    return after


@router.get(ONE, response={200: dict, **ERRORS}, summary="Read a selector")
def selector_get(request: HttpRequest, queue: str, id: int):
    need(request, queue, "read")
    return call("selector_get", queue=queue, id=id)


@router.patch(ONE, response={200: dict, **ERRORS}, summary="Change a selector")
def selector_update(request: HttpRequest, queue: str, id: int, payload: SelectorUpdate):
    """Change the settings given; the selector is disabled while it changes and keeps its
    old settings when a new one is refused."""
    need(request, queue, "manage")
    changes = payload.dict(exclude_unset=True)
    if not changes:
        raise ApiError(400, "invalid_argument", "give at least one setting to change")
    _check_filter(changes)
    before = call("selector_get", queue=queue, id=id)
    changes = _completed(changes, before)
    need_to_send(request, changes, before)
    after = call("selector_update", queue=queue, id=id, **changes)
    record(request, "selector.update", f"{queue}#{id}", before, after)
    return after


def _check_filter(settings: dict[str, Any]) -> None:
    """Compile a filter here first: the error keeps its column (the router's answer has it
    only in the text) and a bad filter costs no round trip."""
    if isinstance(settings.get("filter"), str):
        compile_filter(settings["filter"])


def _completed(changes: dict[str, Any], before: dict[str, Any]) -> dict[str, Any]:
    """The router's update applies a match or filter only with its WHEN, and a target only
    with its action: fill in what the PATCH left out from the selector as it is."""
    changes = dict(changes)
    if "match" in changes and "matches" in changes:
        raise ApiError(400, "invalid_argument", "give `match` or `matches`, not both")
    conditions = "match" in changes or "matches" in changes
    if (conditions or "filter" in changes) and "when" not in changes:
        if before["when"] not in ("match", "filter"):
            raise ApiError(400, "invalid_argument", "give `when` with `match` or `filter`")
        if not conditions:
            changes["matches"] = before.get("matches") or None
        changes.setdefault("filter", before["filter"])
        changes["when"] = "match" if changes.get("match") or changes.get("matches") else "filter"
    if ("target" in changes or "target_from" in changes) and "action" not in changes:
        if before["action"] is None:
            raise ApiError(400, "invalid_argument", "give `action` with `target`")
        changes["action"] = before["action"]
    return changes


@router.delete(ONE, response={200: dict, **ERRORS}, summary="Delete a selector")
def selector_delete(request: HttpRequest, queue: str, id: int):
    """Its outstanding messages go back to the front of the queue."""
    need(request, queue, "manage")
    before = call("selector_get", queue=queue, id=id)
    answer = call("selector_delete", queue=queue, id=id)
    record(request, "selector.delete", f"{queue}#{id}", before, None)
    return answer
