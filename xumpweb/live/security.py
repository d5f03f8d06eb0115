"""Who may open a WebSocket: the Origin check, and tokens or the console's session.

Browsers always send an Origin header on a WebSocket handshake, and a page on a foreign site
could otherwise ride the operator's session cookie into /ws/monitor/. Programs (the
`websockets` library, curl) send none and authenticate with a token instead. So: no Origin
is allowed, an Origin must name one of ALLOWED_HOSTS (channels' own check), and every
connection still has to show a token or a logged-in session before it gets anything, and
what that token or user may do is xumpweb/access.py's rule (subscribe: consume on the
destination; monitor: read on every queue).

A connection stays only as long as its right does: `watch` registers it with this process's
watcher, one task that reads the tokens' version (api/auth.py; bumped when any token or
role changes) every WATCH_EVERY seconds and, when it moved, has every connection check its
token or user again (`recheck`): a revoked token's WebSockets close within a second.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any, Protocol
from urllib.parse import parse_qs

import redis
from channels.db import database_sync_to_async
from channels.security.websocket import OriginValidator
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from xumpweb import access, redis_clients
from xumpweb.api import auth
from xumpweb.wiring.models import ApiToken

LAST_USED_EVERY = timedelta(minutes=1)  # how stale ApiToken.last_used may get
WATCH_EVERY = 0.25  # seconds between two reads of the tokens' version

logger = logging.getLogger("xump.live")


class ProgramOrSameOriginValidator(OriginValidator):
    """channels' OriginValidator, except that a handshake without an Origin (a program,
    not a browser) passes on to the consumer, which demands a token or a session."""

    def valid_origin(self, parsed_origin: Any) -> bool:
        if parsed_origin is None:
            return True
        return self.validate_origin(parsed_origin)


def origin_validator(application: Any) -> ProgramOrSameOriginValidator:
    """Wrap the WebSocket application: browsers only from ALLOWED_HOSTS, programs always."""
    allowed = settings.ALLOWED_HOSTS
    if settings.DEBUG and not allowed:
        allowed = ["localhost", "127.0.0.1", "[::1]"]
    return ProgramOrSameOriginValidator(application, allowed)


def query_token(scope: dict[str, Any]) -> str | None:
    """The `?token=` of the handshake URL, if any."""
    raw = scope.get("query_string", b"")
    found = parse_qs(raw.decode("latin-1")).get("token")
    return found[-1] if found else None


def query_number(scope: dict[str, Any], name: str) -> str | None:
    raw = scope.get("query_string", b"")
    found = parse_qs(raw.decode("latin-1")).get(name)
    return found[-1] if found else None


def session_user(scope: dict[str, Any]) -> Any | None:
    """The logged-in, active user of the console's session (AuthMiddlewareStack), or None."""
    user = scope.get("user")
    if user is not None and user.is_authenticated and user.is_active:
        return user
    return None


@database_sync_to_async
def find_token(secret: str) -> ApiToken | None:
    """The live token `secret` stands for (its last use noted at most once a minute)."""
    if not isinstance(secret, str) or len(secret) > 200:
        return None
    token = auth.find_token(secret)
    if token is not None:
        now = timezone.now()
        if token.last_used is None or now - token.last_used > LAST_USED_EVERY:
            ApiToken.objects.filter(pk=token.pk).update(last_used=now)
            token.last_used = now  # the token is remembered (auth.find_token): once a minute
        access.for_token(token)  # worked out here, where the database may be used
    return token


@database_sync_to_async
def user_principal(user: Any, fresh: bool = False) -> access.Principal:
    """The principal of a session's user; `fresh`: read the user again (a role changed)."""
    if fresh:
        user = get_user_model().objects.filter(pk=user.pk).first()
    return access.for_user(user)


class Watched(Protocol):
    async def recheck(self) -> None: ...


_watched: set[Watched] = set()
_watcher: asyncio.Task | None = None


def watch(connection: Watched) -> None:
    """Have `connection.recheck()` called whenever a token or a role changes."""
    global _watcher
    _watched.add(connection)
    if _watcher is None or _watcher.done():
        _watcher = asyncio.create_task(_watch_versions())


def unwatch(connection: Watched) -> None:
    _watched.discard(connection)


async def _watch_versions() -> None:
    global _watcher
    client = redis_clients.general(socket_timeout=5)
    try:
        # nothing read yet: the first version read checks every connection once more (they
        # were checked before it: a token revoked in between moved the version this look
        # already sees; a revoked token's connection stayed open for good otherwise), and
        # so does the first read after Redis did not answer the first looks
        seen: object = NOT_READ
        away = False  # Redis did not answer the last look: said once an outage
        while True:
            try:
                now = await client.get(auth.tokens_version_key())
            except redis.RedisError as problem:
                if not away:
                    logger.warning("cannot read the tokens' version: %s; looking again "
                                   "every %g s", problem, WATCH_EVERY)  # fmt: skip
                away = True
            else:
                if away:
                    logger.info("the tokens' version can be read again")
                    away = False
                if now != seen:
                    seen = now
                    await _recheck_all()
            if not _watched:
                # a connection watched from now on starts a watcher of its own (this one
                # still closes its client: `watch` must not take it for a running one)
                if _watcher is asyncio.current_task():
                    _watcher = None
                return
            await asyncio.sleep(WATCH_EVERY)
    finally:
        await client.aclose()


NOT_READ = object()  # _watch_versions has not read the tokens' version yet


async def _recheck_all() -> None:
    checked = await asyncio.gather(
        *(connection.recheck() for connection in list(_watched)), return_exceptions=True
    )
    for failed in checked:
        if isinstance(failed, Exception):
            logger.error("re-checking a connection failed", exc_info=failed)
