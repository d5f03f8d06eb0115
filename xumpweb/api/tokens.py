"""API tokens: list, issue (the secret is shown once), revoke. Staff users by session, or
tokens with manage on '*'."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja import Router

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
    need_token_admin(request)
    return {"tokens": [token_json(t) for t in ApiToken.objects.select_related("user")]}


@router.post("/tokens", response={201: dict, **ERRORS}, summary="Issue an API token")
def token_create(request: HttpRequest, payload: TokenIn):
    """The answer's `secret` is shown this once; only its hash is kept."""
    need_token_admin(request)
    for pattern in payload.rights:
        if not pattern or len(pattern) > 200:
            raise ApiError(400, "invalid_argument", "a rights key is a queue name or glob")
    rights = {pattern: sorted(set(granted)) for pattern, granted in payload.rights.items()}
    caller = getattr(request, "xump_token", None)
    user = caller.user if caller is not None else request.user
    token, secret = ApiToken.issue(payload.name, rights, user=user)
    answer = token_json(token)
    record(request, "token.create", f"{token.name} ({token.prefix})", None, answer)
    return 201, {"token": answer, "secret": secret}


@router.delete("/tokens/{int:id}", response={200: dict, **ERRORS}, summary="Revoke an API token")
def token_delete(request: HttpRequest, id: int):
    need_token_admin(request)
    token = ApiToken.objects.filter(pk=id).first()
    if token is None:
        raise ApiError(404, "not_found", f"API token {id} does not exist")
    before = token_json(token)
    if token.revoked is None:
        token.revoked = timezone.now()
        token.save(update_fields=["revoked"])
    after = token_json(token)
    record(request, "token.revoke", f"{token.name} ({token.prefix})", before, after)
    return after
