"""The Content-Security-Policy header on every answer.

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
