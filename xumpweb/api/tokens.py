"""API tokens: list, issue (the secret is shown once), revoke (xumpweb/access.py decides).

Console users (by session) list and revoke their own tokens and issue tokens with rights
they hold; admins (and tokens with manage on '*') see and revoke every token. Other tokens
do not manage tokens."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja import Router

from xumpweb import access
from xumpweb.api.auth import need_token_admin
from xumpweb.api.common import record
from xumpweb.api.errors import ApiError
from xumpweb.api.schemas import ErrorOut, TokenIn
from xumpweb.wiring.models import ApiToken

router = Router(tags=["tokens"])
ERRORS = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut, 404: ErrorOut}


def token_json(token: ApiToken) -> dict[str, Any]:
    def when(moment: Any) -> str | None:
        return moment.isoformat() if moment else None

    return {
        "id": token.id,
        "name": token.name,
        "prefix": token.prefix,
        "rights": token.rights,
        "user": token.user.get_username() if token.user else None,
        "created": when(token.created),
        "revoked": when(token.revoked),
        "last_used": when(token.last_used),
    }


@router.get("/tokens", response={200: dict, **ERRORS}, summary="List API tokens")
def token_list(request: HttpRequest):
    """Every token for admins; a console user's own tokens otherwise."""
    return {"tokens": [token_json(t) for t in access.tokens_seen_by(_manager(request))]}


def _manager(request: HttpRequest) -> access.Principal:
    """The caller, when it may manage (some) tokens: a console user with a role, or an
    admin token."""
    principal = access.for_request(request)
    if principal.role == "token" or not principal.has_role:
        return need_token_admin(request)
    return principal


@router.post("/tokens", response={201: dict, **ERRORS}, summary="Issue an API token")
def token_create(request: HttpRequest, payload: TokenIn):
    """The answer's `secret` is shown this once; only its hash is kept. The rights must be
    ones the caller holds (403 otherwise)."""
    principal = _manager(request)
    problem = ApiToken.patterns_problem(payload.rights)
    if problem is not None:
        raise ApiError(400, "invalid_argument", problem)
    rights = {pattern: sorted(set(granted)) for pattern, granted in payload.rights.items()}
    problem = access.may_grant(principal, rights)
    if problem is not None:
        raise ApiError(403, "forbidden", problem)
    caller = getattr(request, "xump_token", None)
    user = caller.user if caller is not None else request.user
    token, secret = ApiToken.issue(payload.name, rights, user=user)
    answer = token_json(token)
    record(request, "token.create", f"{token.name} ({token.prefix})", None, answer)
    return 201, {"token": answer, "secret": secret}


@router.delete("/tokens/{int:id}", response={200: dict, **ERRORS}, summary="Revoke an API token")
def token_delete(request: HttpRequest, id: int):
    """An admin revokes any token; a console user their own (403 for another's)."""
    principal = _manager(request)
    token = ApiToken.objects.filter(pk=id).first()
    if token is None:
        raise ApiError(404, "not_found", f"API token {id} does not exist")
    if not access.tokens_seen_by(principal).filter(pk=id).exists():
        raise ApiError(403, "forbidden", f"API token {id} is not yours to revoke")
    before = token_json(token)
    if token.revoked is None:
        token.revoked = timezone.now()
        token.save(update_fields=["revoked"])
    after = token_json(token)
    record(request, "token.revoke", f"{token.name} ({token.prefix})", before, after)
    return after
