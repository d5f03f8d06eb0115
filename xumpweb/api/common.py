"""What every endpoint module shares: the router's operations and the audit log."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from xumpweb.runtime import service
from xumpweb.wiring import audit


def call(method: str, **arguments: Any) -> Any:
    """Run an operation in the router (xumpweb/router/operations.py); its answer, or the
    engine's error (errors.py maps it to a status)."""
    return service().call(method, **arguments)


def record(
    request: HttpRequest, action: str, subject: str, before: Any = None, after: Any = None
) -> None:
    audit.record(audit.actor(request), action, subject, before, after)
