"""What every console view shares: calling the router, audit entries, message display.

The console is a client of the service like the API: it reads and changes everything
through `xumpweb.runtime.service()` (operations answered by the router, and the router's
stats snapshot). It never writes the wiring models itself; it reads them only where the
router's answer would cost a round trip per queue (the topology, the store column).
"""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.http import HttpRequest

from engine.errors import StoreError, XumpError
from engine.message import Message
from xumpweb.router import operations
from xumpweb.runtime import service
from xumpweb.wiring.audit import actor, record

LIST_PAGE = 100  # rows per page of the console's lists (patterns, tokens; issue 21)

HEX_LIMIT = 4096  # bytes of a body shown in the hex view


class CallFailed(Exception):
    """An operation the router refused or could not run; `str()` is for the operator."""


def call(method: str, **arguments: Any) -> Any:
    """Run an operation in the router; CallFailed with a readable message when it refuses.
    StoreError (Redis or the router away) goes on to the 503 page (unavailable.py)."""
    try:
        return service().call(method, **arguments)
    except StoreError:
        raise
    except XumpError as error:
        raise CallFailed(str(error) or type(error).__name__) from None


def has_operation(method: str) -> bool:
    """Whether the routers of this version offer `method` (purge and dead-letter sending
    arrived after the first release)."""
    return method in operations.CALLS


def audit(request: HttpRequest, action: str, subject: str, before: Any = None, after: Any = None):
    return record(actor(request), action, subject, before, after)


def health() -> dict[str, Any]:
    """Redis and workers from the service, plus Django's database."""
    report = service().health()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        report["database"] = {"ok": True}
    except Exception as error:  # any driver error means the database is not usable
        report["database"] = {"ok": False, "detail": str(error)}
    return report


# -- messages as the console shows them -------------------------------------------------------
def when(timestamp: float | None) -> str:
    if timestamp is None:
        return ""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def body_bytes(out: dict[str, Any]) -> bytes:
    if out.get("encoding") == "base64":
        return base64.b64decode(out["body"])
    return str(out.get("body", "")).encode()


def to_message(out: dict[str, Any]) -> Message:
    """An engine Message from the JSON shape of router/codec.message_out (for filters)."""
    return Message(
        address=out.get("address") or "",
        headers=dict(out.get("headers") or {}),
        body=body_bytes(out),
        return_address=out.get("return_address"),
        mid=out.get("mid"),
        seq=out.get("seq"),
        timestamp=out.get("timestamp"),
        destination=out.get("destination"),
    )


def shown(out: dict[str, Any]) -> dict[str, Any]:
    """A message's JSON plus what the templates show: time, header pairs, a body excerpt.
    Everything stays text: the templates escape it."""
    headers = out.get("headers") or {}
    body = out.get("body", "")
    text = body if out.get("encoding") == "text" else f"({out.get('size', 0)} bytes, binary)"
    return {
        **out,
        "when": when(out.get("timestamp")),
        "header_pairs": sorted((str(k), json.dumps(v)) for k, v in headers.items()),
        "excerpt": text if len(text) <= 120 else text[:119] + "…",
    }


def body_views(out: dict[str, Any]) -> dict[str, Any]:
    """The body as text, as pretty-printed JSON (when it parses) and as a hex dump."""
    raw = body_bytes(out)
    text = raw.decode("utf-8", errors="replace")
    try:
        pretty = json.dumps(json.loads(raw), indent=2, ensure_ascii=False, sort_keys=True)
    except ValueError:
        pretty = None
    lines = []
    for offset in range(0, min(len(raw), HEX_LIMIT), 16):
        chunk = raw[offset : offset + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        printable = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{offset:08x}  {hexes:<47}  {printable}")
    if len(raw) > HEX_LIMIT:
        lines.append(f"... {len(raw) - HEX_LIMIT} more bytes")
    return {"text": text, "json": pretty, "hex": "\n".join(lines), "size": len(raw)}


def parse_header_lines(text: str) -> dict[str, Any]:
    """Headers typed one per line as `name: value`. Values that read as JSON numbers or
    booleans become those; everything else is a string. ValueError on a line without `:`."""
    headers: dict[str, Any] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, colon, value = line.partition(":")
        if not colon or not name.strip():
            raise ValueError(f"line {number}: write headers as `name: value`")
        value = value.strip()
        typed: Any = value
        if value in ("true", "false"):
            typed = value == "true"
        else:
            try:
                number_value = json.loads(value)
                if isinstance(number_value, int | float) and not isinstance(number_value, bool):
                    typed = number_value
            except (ValueError, RecursionError):  # not JSON, or nested too deeply to read
                pass
        headers[name.strip()] = typed
    return headers


def snapshot_by_name() -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """The router's latest snapshot, its queues by name."""
    found = service().snapshot()
    return {q["name"]: q for q in found.get("queues", [])}, found


def age(seconds_since: float | None) -> str:
    if seconds_since is None:
        return "never"
    delta = max(0.0, time.time() - seconds_since)
    return f"{delta:.1f} s ago" if delta < 120 else f"{delta / 60:.0f} min ago"
