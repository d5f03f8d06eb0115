"""Definitions: the whole wiring as one JSON document, exported and imported (admins only).

xumpweb/wiring/definitions.py holds the format and the rules; this module is the HTTP
face: GET exports, POST checks the whole document first (400 naming every problem, nothing
changed), then answers the diff (`dry_run=true`) or applies it in one audited step; a big
one (more than one step's worth of wiring) is accepted (202) and applied in steps
(xumpweb/wiring/imports.py), with where to follow it."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Body, Router

from xumpweb.api.auth import need_token_admin
from xumpweb.api.common import call
from xumpweb.api.errors import ApiError
from xumpweb.api.schemas import ErrorOut
from xumpweb.runtime import service
from xumpweb.wiring import audit, definitions, imports

router = Router(tags=["definitions"])
ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 409: ErrorOut}


@router.get("/definitions", response={200: dict, **ERRORS}, summary="Export definitions")
def definitions_export(request: HttpRequest):
    """Stores, queues with every option, selectors (WHEN, DO, credit, enabled, start),
    patterns and live tokens' names, owners and rights (never secrets), sorted so the same
    wiring always gives the same document."""
    need_token_admin(request, "exporting definitions", "definitions")
    return definitions.export()


@router.post(
    "/definitions", response={200: dict, 202: dict, **ERRORS}, summary="Import definitions"
)
def definitions_import(request: HttpRequest, document: Body[dict[str, Any]], dry_run: bool = False):
    """Adds and updates what the document names (never deletes). The whole document is
    checked first: 400 `invalid_definitions` with `problems` listing every one, and
    nothing changes. `dry_run=true` answers the changes (create / update, before and after)
    without making them; otherwise they are made in one step and audited (200), and new
    tokens' secrets are in `secrets`, shown this once. An import of more than 200 wiring
    changes is answered 202 at once (`follow`, also the Location, tells how it goes; new
    tokens are issued already) and applied in steps of 200, routing going on between
    them."""
    need_token_admin(request, "importing definitions", "definitions")
    who = audit.actor(request)
    try:
        result = definitions.plan(document)
    except definitions.InvalidDefinitions as invalid:
        raise ApiError(
            400, "invalid_definitions", str(invalid), problems=invalid.problems
        ) from None
    if dry_run:
        return result.answer(dry_run=True)
    if not definitions.is_big(result):
        return definitions.apply(result, who, call)
    accepted = imports.start(result, who, call, service().redis)
    answer = JsonResponse(accepted, status=202)
    answer["Location"] = accepted["follow"]
    return answer


@router.get(
    "/definitions/imports/{number}",
    response={200: dict, **ERRORS, 404: ErrorOut},
    summary="A big import's progress",
)
def definitions_import_status(request: HttpRequest, number: str) -> HttpResponse | dict:
    """How a big import (202 from POST /api/definitions) goes: `state` running, done,
    failed (with `error`: which step, and that the ones before it stay) or lost (the web
    process applying it stopped); `steps` and `done`; kept a day."""
    need_token_admin(request, "reading a definitions import", "definitions")
    found = imports.status(service().redis, number)
    if found is None:
        raise ApiError(404, "not_found", f"no definitions import {number!r} (kept a day)")
    return found
