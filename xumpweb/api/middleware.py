"""Every answer under /api/ is JSON, even those Django's own machinery gives.

Django answers some requests before any view runs, in HTML: a Host not in ALLOWED_HOSTS
(DisallowedHost, a 400 page), a refused CSRF check (a 403 page), its generic 404 and 500
pages. Programs calling the API read JSON, so this middleware, first in the chain, checks
the Host itself for /api/ paths and turns any other HTML error answer under /api/ into the
API's `{"error": code, "detail": text}` with the same status. Successful answers (the
HTML docs page at /api/docs) pass unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.exceptions import DisallowedHost
from django.http import HttpRequest, HttpResponse

from xumpweb.api.errors import error_response

CODES = {
    400: ("bad_request", "the request is malformed"),
    403: ("forbidden", "the request was refused"),
    404: ("not_found", "not found"),
    405: ("method_not_allowed", "that method is not allowed here"),
    413: ("request_too_large", "the request body is too large"),
    500: ("internal_error", "internal error; see the server log"),
}


class ApiJsonMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not request.path.startswith("/api/"):
            return self.get_response(request)
        try:
            request.get_host()
        except DisallowedHost:
            host = request.META.get("HTTP_HOST", "")[:100]
            return error_response(400, "bad_host", f"the Host {host!r} is not served here")
        response = self.get_response(request)
        if response.status_code < 400 or response.get("Content-Type", "").startswith(
            "application/json"
        ):
            return response
        if response.status_code == 403 and b"CSRF" in getattr(response, "content", b""):
            return error_response(
                403, "csrf_failed", "a session-authenticated change needs the CSRF token"
            )
        code, detail = CODES.get(response.status_code, ("error", "the request failed"))
        answer = error_response(response.status_code, code, detail)
        if response.has_header("Allow"):
            answer["Allow"] = response["Allow"]
        return answer
