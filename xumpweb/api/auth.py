"""Who may call the API, and what each caller may do to which queue.

Two ways in:
* programs send `Authorization: Bearer xump_<prefix>_<secret>` (an ApiToken); the token's
  rights map queue names or globs to publish / consume / manage;
* the console's logged-in users come with Django's session cookie; a change (POST, PUT,
  PATCH, DELETE) made that way must carry the CSRF token.
What either may do is decided by xumpweb/access.py (roles, tokens bounded by their owner),
the same rule the console and the WebSockets use.

A request that names neither, or a token that is unknown or revoked, is answered 401; a
caller without the right for the queue it names is answered 403 (errors.py).

Looking a token up in the database costs more than the rest of a single publish, so each
process remembers what a presented token stood for (`find_token`) until any token changes:
saving or deleting one bumps a version number in Redis (`forget_tokens`, connected to the
model's signals in apps.py, and on every change of a user's role: `forget_roles`), which
every lookup reads first (one GET); open WebSockets watch it too (live/security.py). An
entry lives a minute at most, in case Redis could not be told of a change.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta
from typing import Any

import redis
from django.db import transaction
from django.http import HttpRequest
from django.utils import timezone
from ninja.errors import AuthenticationError
from ninja.security import HttpBearer
from ninja.utils import check_csrf

from xumpweb import access, redis_clients
from xumpweb.api.errors import ApiError
from xumpweb.runtime import service
from xumpweb.wiring.models import ApiToken

LAST_USED_EVERY = timedelta(minutes=1)
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
REMEMBER_FOR = 60.0  # seconds a looked-up token is trusted at most
REMEMBER_AT_MOST = 10_000  # presented tokens remembered per process

logger = logging.getLogger("xump.api")
_remembered: dict[str, tuple[bytes | None, float, ApiToken | None]] = {}
_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis_clients.general_sync(socket_timeout=5)
    return _client


def tokens_version_key() -> str:
    """The key bumped whenever an ApiToken changes or goes."""
    return redis_clients.service_key("tokens:version")


def find_token(presented: str, request: HttpRequest | None = None) -> ApiToken | None:
    """ApiToken.find, remembered until any token changes (see the module doc). Given the
    request, the same round trip reads the wiring version for its view (`wiring_version`):
    a single publish makes one Redis round trip fewer."""
    if request is None:
        try:
            version = _redis().get(tokens_version_key())
        except redis.RedisError:
            return ApiToken.find(presented)
        return remembered_or_found(presented, version)
    token, wiring = token_and_wiring(presented)
    request.xump_wiring = wiring  # type: ignore[attr-defined]
    return token


def token_and_wiring(presented: str) -> tuple[ApiToken | None, int | None]:
    """The presented token (as find_token) and the wiring version, in one round trip; the
    version is None when Redis cannot be read."""
    try:
        # with shards, the wiring version is the sum of every shard's (runtime.py)
        keys = [tokens_version_key(), *service().wiring_keys]
        version, *wiring = redis_clients.get_many(_redis(), keys)
    except redis.RedisError:
        return ApiToken.find(presented), None
    return remembered_or_found(presented, version), sum(int(found or 0) for found in wiring)


def remembered_or_found(presented: str, version: bytes | None) -> ApiToken | None:
    """What `presented` stands for as of the tokens' `version`: from memory, else from the
    database (and remembered)."""
    found = remembered_token(presented, version)
    if found is not NOT_REMEMBERED:
        return found  # type: ignore[return-value]
    now = time.monotonic()
    token = ApiToken.find(presented)
    if len(_remembered) >= REMEMBER_AT_MOST:
        _remembered.clear()
    _remembered[presented] = (version, now, token)
    return token


NOT_REMEMBERED = object()  # remembered_token's answer when the database must be asked


def remembered_token(presented: str, version: bytes | None) -> ApiToken | object | None:
    """What `presented` stood for when last looked up, if that is still true as of the
    tokens' `version` (the value of tokens_version_key) and a minute old at most (the
    token, or None: no such live token); NOT_REMEMBERED otherwise. No I/O: for asyncio
    callers (api/direct.py), which look it up in a thread when it is not remembered."""
    found = _remembered.get(presented)
    if found is not None and found[0] == version and time.monotonic() - found[1] < REMEMBER_FOR:
        return found[2]
    return NOT_REMEMBERED


def forget_tokens(created: bool = False, **_: Any) -> None:
    """A token was changed or deleted: every process must look tokens up again. (A new
    token changes no answer already given.)"""
    if created:
        return
    _tokens_changed()
    # a change made in a transaction (the admin's forms, a definitions import) is read by
    # other processes only once committed: one that looks the token up between this bump
    # and the commit reads the old row and remembers it under the new version, so the
    # version moves again once the change is committed (an open WebSocket checks again)
    if transaction.get_connection().in_atomic_block:
        transaction.on_commit(_tokens_changed)


def _tokens_changed() -> None:
    """Move the tokens' version: every process looks tokens up again."""
    _remembered.clear()
    try:
        _redis().incr(tokens_version_key())
    except redis.RedisError as problem:
        logger.warning("cannot tell other processes that a token changed (%s); they trust "
                       "what they remember for up to %g s", problem, REMEMBER_FOR)  # fmt: skip


def forget_roles(update_fields: Any = None, **_: Any) -> None:
    """A user, group, permission or queue grant changed: what a token may do depends on its
    owner's role, and open WebSockets re-check theirs (a login's last_login is no change)."""
    if update_fields is not None and set(update_fields) <= {"last_login"}:
        return
    forget_tokens()


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
        found = find_token(token, request)
        if found is None:
            raise AuthenticationError()
        mark_used(found)
        request.xump_token = found  # type: ignore[attr-defined]
        return found


token_or_session = TokenOrSession()


def due_for_use_mark(token: ApiToken) -> bool:
    """Whether mark_used would write (no I/O)."""
    return token.last_used is None or timezone.now() - token.last_used >= LAST_USED_EVERY


def mark_used(token: ApiToken) -> None:
    """Record when the token was last used (at most once a minute: it is a write)."""
    if due_for_use_mark(token):
        now = timezone.now()
        ApiToken.objects.filter(pk=token.pk).update(last_used=now)
        token.last_used = now


def allowed(request: HttpRequest, action: str, queue: str) -> bool:
    """access.may for the request's token or session user."""
    return access.may(access.for_request(request), action, queue)


def wiring_version(request: HttpRequest) -> int:
    """The wiring version, as read with the caller's token (find_token) or now."""
    version = getattr(request, "xump_wiring", None)
    return service().wiring_version() if version is None else version


def need(request: HttpRequest, queue: str, *rights: str) -> None:
    """403 unless the caller may do one of `rights` (access.py's actions) on `queue`."""
    if not any(allowed(request, right, queue) for right in rights):
        raise refusal(queue, rights)


def need_to_send(
    request: HttpRequest, settings: dict[str, Any], before: dict[str, Any] | None = None
) -> None:
    """403 unless the caller may publish where a selector's or queue's `settings` send
    messages (access.cannot_send: targets, a dead-letter queue)."""
    blocked = access.cannot_send(access.for_request(request), settings, before)
    if blocked is not None:
        raise ApiError(403, "forbidden", f"this caller may not {blocked}")


def refusal(queue: str, rights: tuple[str, ...]) -> ApiError:
    """The 403 for a caller without any of `rights` on `queue`."""
    wanted = " or ".join(rights)
    return ApiError(403, "forbidden", f"this caller may not {wanted} on queue {queue!r}")


def need_token_admin(
    request: HttpRequest, doing: str = "managing tokens", action: str = "tokens-for-others"
) -> access.Principal:
    """403 unless the caller may do `action`, one that concerns every queue (access.py:
    the admin actions need an admin user or a token with manage on '*'; read-all, read on
    '*'); the caller's principal."""
    principal = access.for_request(request)
    if access.may(principal, action):
        return principal
    reading = action == "read-all"
    if principal.role == "token":
        right = "read" if reading else "manage"
        raise ApiError(403, "forbidden", f"{doing} needs a token with {right} on '*'")
    raise ApiError(403, "forbidden", f"{doing} needs {'a role' if reading else 'the admin role'}")
