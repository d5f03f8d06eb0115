"""Audit entries: who changed what, when, with the state before and after."""

from __future__ import annotations

from typing import Any

from xumpweb.wiring.models import AuditEvent


def record(
    who: str, action: str, subject: str, before: Any = None, after: Any = None
) -> AuditEvent:
    """Write one audit entry. `who` is a user name or "token:<name>"; `action` a verb
    such as "queue.create"; `before`/`after` JSON-able states (None when none)."""
    return AuditEvent.objects.create(
        who=who[:200], action=action[:100], subject=subject[:500], before=before, after=after
    )


def actor(request: Any) -> str:
    """Who is making `request`: the API token's name or the logged-in user's."""
    token = getattr(request, "xump_token", None)
    if token is not None:
        return f"token:{token.name}"
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return user.get_username()
    return "anonymous"
