"""Who may call the API, and what each caller may do to which queue.

Two ways in:
* programs send `Authorization: Bearer xump_<prefix>_<secret>` (an ApiToken); the token's
  rights map queue names or globs to publish / consume / manage;
* the console's logged-in users come with Django's session cookie; a change (POST, PUT,
  PATCH, DELETE) made that way must carry the CSRF token. Staff users may do everything;
  other logged-in users may only read (consume).

A request that names neither, or a token that is unknown or revoked, is answered 401; a
caller without the right for the queue it names is answered 403 (errors.py).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja.errors import AuthenticationError
from ninja.security import HttpBearer
from ninja.utils import check_csrf

from xumpweb.api.errors import ApiError
from xumpweb.wiring.models import ApiToken

LAST_USED_EVERY = timedelta(minutes=1)
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


class TokenOrSession(HttpBearer):
    """Bearer token first; else the session (with CSRF on changes)."""

    def __call__(self, request: HttpRequest) -> Any:
        header = request.headers.get("Authorization")
        if header:
            scheme, _, presented = header.partition(" ")
            if scheme.lower() != "bearer" or not presented.strip():
                raise AuthenticationError()
            return self.authenticate(request, presented.strip())
        user = getattr(request, "user", None)
        if user is None or not user.is_authenticated:
            return None
        if request.method not in SAFE_METHODS and check_csrf(request) is not None:
            raise ApiError(
                403, "csrf_failed", "a session-authenticated change needs the CSRF token"
            )
        request.xump_token = None  # type: ignore[attr-defined]
        return user

    def authenticate(self, request: HttpRequest, token: str) -> Any:
        found = ApiToken.find(token)
        if found is None:
            raise AuthenticationError()
        now = timezone.now()
        if found.last_used is None or now - found.last_used >= LAST_USED_EVERY:
            ApiToken.objects.filter(pk=found.pk).update(last_used=now)
            found.last_used = now
        request.xump_token = found  # type: ignore[attr-defined]
        return found


token_or_session = TokenOrSession()


def allowed(request: HttpRequest, right: str, queue: str) -> bool:
    token = getattr(request, "xump_token", None)
    if token is not None:
        return token.allows(right, queue)
    user = request.user
    if not user.is_authenticated or not user.is_active:
        return False
    return user.is_staff or right == "consume"


def need(request: HttpRequest, queue: str, *rights: str) -> None:
    """403 unless the caller has one of `rights` on `queue`."""
    if not any(allowed(request, right, queue) for right in rights):
        wanted = " or ".join(rights)
        raise ApiError(403, "forbidden", f"this caller may not {wanted} on queue {queue!r}")


def need_token_admin(request: HttpRequest) -> None:
    """Token management: staff users by session, or tokens with manage on '*'."""
    token = getattr(request, "xump_token", None)
    if token is not None:
        if "manage" in (token.rights.get("*") or []):
            return
        raise ApiError(403, "forbidden", "managing tokens needs a token with manage on '*'")
    if not request.user.is_staff:
        raise ApiError(403, "forbidden", "managing tokens needs a staff user")
