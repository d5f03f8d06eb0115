"""Patterns: housecat, parrot and wolfpack declarations that build queues and selectors."""

from __future__ import annotations

from typing import Any

from django.db import IntegrityError
from django.http import HttpRequest
from ninja import Router

from xumpweb.api.auth import allowed, need, need_token_admin
from xumpweb.api.common import call, record
from xumpweb.api.errors import ApiError
from xumpweb.api.schemas import ErrorOut, PatternIn
from xumpweb.wiring.models import Pattern

router = Router(tags=["patterns"])
ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut}
DEFAULT_ROUTERS = {"housecat": "housecat", "parrot": "parrot"}


def pattern_json(pattern: Pattern) -> dict[str, Any]:
    return {
        "id": pattern.id,
        "kind": pattern.kind,
        "name": pattern.name,
        "router": pattern.router,
        "topic": pattern.topic,
        "credit": pattern.credit,
        "queue": pattern.built_queue,
        "selectors": pattern.built_selectors,
        "created": pattern.created.isoformat(),
    }


def _pattern(id: int) -> Pattern:
    found = Pattern.objects.filter(pk=id).first()
    if found is None:
        raise ApiError(404, "not_found", f"pattern {id} does not exist")
    return found


@router.get("/patterns", response={200: dict, **ERRORS}, summary="List patterns")
def pattern_list(request: HttpRequest):
    found = [
        pattern_json(p) for p in Pattern.objects.all()
        if allowed(request, "read", p.router)
    ]  # fmt: skip
    return {"patterns": found}


@router.post("/patterns", response={200: dict, 201: dict, **ERRORS}, summary="Build a pattern")
def pattern_create(request: HttpRequest, payload: PatternIn):
    """Builds the pattern's queues and selectors. Idempotent: the same kind, router and name
    answer 200 with the pattern that exists."""
    router_name = payload.router or DEFAULT_ROUTERS.get(payload.kind)
    if not router_name:
        raise ApiError(400, "invalid_argument", "a wolfpack needs `router`: its service queue")
    need_token_admin(request, "building patterns", "patterns")
    existing = Pattern.objects.filter(
        kind=payload.kind, router=router_name, name=payload.name
    ).first()
    if existing is not None:
        return 200, pattern_json(existing)
    if payload.kind == "parrot" and not payload.topic:
        raise ApiError(400, "invalid_argument", "a parrot needs `topic`: the pattern to follow")
    built = call(
        "pattern_build", kind=payload.kind, name=payload.name, router=router_name,
        topic=payload.topic, credit=payload.credit,
    )  # fmt: skip
    try:
        pattern = Pattern.objects.create(
            kind=payload.kind, name=payload.name, router=router_name, topic=payload.topic,
            credit=payload.credit, built_queue=built["queue"], built_selectors=built["selectors"],
        )  # fmt: skip
    except IntegrityError:  # the same pattern, built at the same time by another request
        existing = Pattern.objects.get(kind=payload.kind, router=router_name, name=payload.name)
        return 200, pattern_json(existing)
    except Exception:  # no record, no wiring: take down what this build made
        call("pattern_unbuild", queues=built["made_queues"], selectors=built["made_selectors"])
        raise
    answer = pattern_json(pattern)
    record(request, "pattern.create", str(pattern), None, answer)
    return 201, answer


@router.get("/patterns/{int:id}", response={200: dict, **ERRORS}, summary="Read a pattern")
def pattern_get(request: HttpRequest, id: int):
    pattern = _pattern(id)
    need(request, pattern.router, "read")
    return pattern_json(pattern)


@router.delete("/patterns/{int:id}", response={200: dict, **ERRORS}, summary="Remove a pattern")
def pattern_delete(request: HttpRequest, id: int):
    """Deletes the selectors the pattern built and its private queue (the router queue
    stays: other patterns may share it)."""
    pattern = _pattern(id)
    need_token_admin(request, "removing patterns", "patterns")
    before = pattern_json(pattern)
    call("pattern_remove", queue=pattern.built_queue, selectors=pattern.built_selectors)
    pattern.delete()
    record(request, "pattern.delete", str(pattern), before, None)
    return {"deleted": id}
