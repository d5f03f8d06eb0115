"""The Content-Security-Policy header on every answer, and the client address login rate
limiting counts by (behind a trusted proxy, the forwarded one).

The console runs only its own scripts from /static/ (no inline script, no inline event
handler, no eval: htmx's allowEval is off, see templates/console/base.html), so a message
field that slipped through escaping still could not run code. Styles come from /static/
too: htmx's injected indicator styles are turned off (console.css has them) and cytoscape's
injected stylesheet is pre-empted by a <link> with the id it looks for (topology.html);
uPlot and cytoscape set element styles through the DOM (CSSOM), which CSP allows.

Django 5.2 has no CSP setting and the policy is one fixed string, so a small middleware
rather than a dependency (django-csp) earns its keep. The Swagger page /api/docs
(django-ninja, served from our /static/ since "ninja" is an installed app) keeps the same
policy: its scripts are files and its settings a JSON block.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

POLICY = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "connect-src 'self'",  # fetch, and WebSockets to the same host and port
    "object-src 'none'",
    "base-uri 'self'",
    "form-action 'self'",
    "frame-ancestors 'none'",
])  # fmt: skip


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = POLICY
        return response


def client_address(request: HttpRequest) -> str | None:
    """The address login rate limiting counts by (django-axes' AXES_CLIENT_IP_CALLABLE):
    the connection's, or, when that is a trusted proxy (XUMP_TRUSTED_PROXIES), the address
    the proxies forwarded: X-Forwarded-For read from the right, the first that is not a
    trusted proxy itself (the left-most when all are). A header from any other peer is
    ignored, so nobody outside escapes a lockout by sending one."""
    from django.conf import settings

    peer = request.META.get("REMOTE_ADDR") or None
    trusted = settings.XUMP_TRUSTED_PROXIES
    if peer is None or not trusted or not _within(peer, trusted):
        return peer
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    chain = [part for part in forwarded if _address(part) is not None]
    if not chain or len(chain) != len(forwarded):
        return peer  # absent or malformed: the proxy's own address
    for hop in reversed(chain):
        if not _within(hop, trusted):
            return hop
    return chain[0]


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _within(text: str, networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]) -> bool:
    found = _address(text)
    return found is not None and any(found in network for network in networks)


def trusted_proxies(text: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """XUMP_TRUSTED_PROXIES: addresses or networks, comma-separated ("10.0.0.5, fd00::/8")."""
    found = []
    for part in text.split(","):
        part = part.strip()
        if part:
            try:
                found.append(ipaddress.ip_network(part, strict=False))
            except ValueError:
                raise ValueError(
                    f"XUMP_TRUSTED_PROXIES: {part!r} is not an address or network"
                ) from None
    return tuple(found)
