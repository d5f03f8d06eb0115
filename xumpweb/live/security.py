"""Who may open a WebSocket: the Origin check, and tokens or the console's session.

Browsers always send an Origin header on a WebSocket handshake, and a page on a foreign site
could otherwise ride the operator's session cookie into /ws/monitor/. Programs (the
`websockets` library, curl) send none and authenticate with a token instead. So: no Origin
is allowed, an Origin must name one of ALLOWED_HOSTS (channels' own check), and every
connection still has to show a token or a logged-in session before it gets anything.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.security.websocket import OriginValidator
from django.conf import settings
from django.utils import timezone

from xumpweb.api import auth
from xumpweb.wiring.models import ApiToken

LAST_USED_EVERY = timedelta(minutes=1)  # how stale ApiToken.last_used may get


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
    return token
