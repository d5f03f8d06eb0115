"""Definitions: the whole wiring as one JSON document, exported and imported (admins only).

xumpweb/wiring/definitions.py holds the format and the rules; this module is the HTTP
face: GET exports, POST checks the whole document first (400 naming every problem, nothing
changed), then answers the diff (`dry_run=true`) or applies it in one audited step."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Body, Router

from xumpweb.api.auth import need_token_admin
from xumpweb.api.common import call
from xumpweb.api.errors import ApiError
from xumpweb.api.schemas import ErrorOut
from xumpweb.wiring import audit, definitions

router = Router(tags=["definitions"])
ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 409: ErrorOut}


@router.get("/definitions", response={200: dict, **ERRORS}, summary="Export definitions")
def definitions_export(request: HttpRequest):
    """Stores, queues with every option, selectors (WHEN, DO, credit, enabled, start),
    patterns and live tokens' names, owners and rights (never secrets), sorted so the same
    wiring always gives the same document."""
    need_token_admin(request, "exporting definitions", "definitions")
    return definitions.export()


@router.post("/definitions", response={200: dict, **ERRORS}, summary="Import definitions")
def definitions_import(request: HttpRequest, document: Body[dict[str, Any]], dry_run: bool = False):
    """Adds and updates what the document names (never deletes). The whole document is
    checked first: 400 `invalid_definitions` with `problems` listing every one, and
    nothing changes. `dry_run=true` answers the changes (create / update, before and after)
    without making them; otherwise they are made in one step and audited, and new tokens'
    secrets are in `secrets`, shown this once."""
    need_token_admin(request, "importing definitions", "definitions")
    try:
        return definitions.import_document(document, audit.actor(request), call, dry_run=dry_run)
    except definitions.InvalidDefinitions as invalid:
        raise ApiError(
            400, "invalid_definitions", str(invalid), problems=invalid.problems
        ) from None
