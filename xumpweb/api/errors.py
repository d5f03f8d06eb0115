"""Every API error is JSON `{"error": code, "detail": text}` with one 4xx (or 503) status.

Theory of operation: endpoints raise the engine's XumpError subclasses (from the router,
through `service().call`, or from the engine's own checks) or `ApiError`; the handlers
installed on the NinjaAPI turn each into one response. The mapping lives in `ENGINE_ERRORS`
so the docs (docs/api.md) and the code say the same thing. Nothing here ever returns a
traceback: an unexpected exception is logged and answered with a bare 500.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Callable
from typing import Any

import redis
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, AuthorizationError, HttpError, ValidationError

from engine import errors as engine_errors
from engine.relay import store_failure

logger = logging.getLogger("xump.api")

# engine error class -> (HTTP status, error code); the first class in the MRO wins, so
# MessageTooLarge (an InvalidArgument) is 413, not 400
ENGINE_ERRORS: dict[type[engine_errors.XumpError], tuple[int, str]] = {
    engine_errors.NotFound: (404, "not_found"),
    engine_errors.AlreadyExists: (409, "already_exists"),
    engine_errors.InvalidName: (400, "invalid_name"),
    engine_errors.MessageTooLarge: (413, "message_too_large"),
    engine_errors.InvalidArgument: (400, "invalid_argument"),
    engine_errors.InvalidSelector: (400, "invalid_selector"),
    engine_errors.QueueFull: (409, "queue_full"),
    engine_errors.Changed: (409, "changed"),
    engine_errors.InboxFull: (503, "inbox_full"),
    engine_errors.StoreFull: (503, "store_full"),
    engine_errors.StoreError: (503, "store_unavailable"),
    engine_errors.InternalError: (500, "internal_error"),
    engine_errors.XumpError: (400, "invalid_request"),
}

COLUMN = re.compile(r"\bcolumn (\d+)")
RANGE_ERRORS = {"greater_than_equal", "less_than_equal", "greater_than", "less_than"}
# seconds a publisher refused for a full inbox or a full Redis should wait (Retry-After)
RETRY_AFTER = {engine_errors.InboxFull: "1", engine_errors.StoreFull: "5"}


class ApiError(Exception):
    """An error the API answers itself (not one of the engine's)."""

    def __init__(self, status: int, code: str, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.extra = extra


def error_response(status: int, code: str, detail: str, **extra: Any) -> JsonResponse:
    """The API's JSON error. It says `nosniff` itself: the middleware that answers before
    Django's SecurityMiddleware (api/middleware.py) must not leave it out."""
    answer = JsonResponse({"error": code, "detail": detail, **extra}, status=status)
    answer["X-Content-Type-Options"] = "nosniff"
    return answer


def engine_error_response(error: engine_errors.XumpError) -> JsonResponse:
    for kind in type(error).__mro__:
        if kind in ENGINE_ERRORS:
            status, code = ENGINE_ERRORS[kind]
            break
    else:  # pragma: no cover - every XumpError is in the table through its base
        status, code = 400, "invalid_request"
    extra: dict[str, Any] = {}
    if isinstance(error, engine_errors.InvalidSelector):
        # the router sends the message across processes; the column is in its text
        column = error.column
        if column is None:
            found = COLUMN.search(str(error))
            column = int(found.group(1)) if found else None
        if column is not None:
            extra["column"] = column
    response = error_response(status, code, str(error), **extra)
    retry = RETRY_AFTER.get(type(error))
    if retry is not None:
        response["Retry-After"] = retry
    return response


def redis_error_response(error: redis.RedisError) -> JsonResponse:
    """Redis went away under a request that reads it directly (not through the relay, whose
    errors are StoreErrors already): 503, as for the store."""
    logger.warning("Redis failed under an API request: %s", error)
    if isinstance(error, redis.exceptions.OutOfMemoryError):
        return engine_error_response(store_failure(error, "answering the request"))
    return error_response(503, "store_unavailable", f"cannot reach Redis: {error}")


def _where(location: Any) -> str:
    parts = [str(part) for part in location if part not in ("body", "payload")]
    return ".".join(parts) or "body"


def validation_detail(errors: list[dict[str, Any]]) -> str:
    """Pydantic/ninja validation errors as one readable line."""
    return "; ".join(f"{_where(e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in errors)


def install(api: NinjaAPI) -> None:
    """Replace ninja's exception handlers (which answer {"detail": ...}, 422, or a
    traceback in DEBUG) with ours."""

    def on_api_error(request: HttpRequest, error: ApiError) -> HttpResponse:
        return error_response(error.status, error.code, error.detail, **error.extra)

    def on_engine_error(request: HttpRequest, error: engine_errors.XumpError) -> HttpResponse:
        return engine_error_response(error)

    def on_validation(request: HttpRequest, error: ValidationError) -> HttpResponse:
        # a number out of its range is the engine's invalid_argument, whichever door
        # refused it (the schema's bounds are the engine's, engine/validation.py)
        kinds = {e.get("type") for e in error.errors}
        code = "invalid_argument" if kinds <= RANGE_ERRORS else "invalid_request"
        return error_response(400, code, validation_detail(error.errors))

    def on_authentication(request: HttpRequest, error: AuthenticationError) -> HttpResponse:
        return error_response(
            401,
            "unauthorized",
            "send 'Authorization: Bearer xump_...' with a valid API token, or log in",
        )

    def on_authorization(request: HttpRequest, error: AuthorizationError) -> HttpResponse:
        return error_response(403, "forbidden", str(error) or "not allowed")

    def on_http_error(request: HttpRequest, error: HttpError) -> HttpResponse:
        status = error.status_code
        text = str(error)
        if status == 400 and text.startswith("Cannot parse request body"):
            cause = error.__cause__  # our parser's own word (jsonbody.py), e.g. too deep
            if isinstance(cause, ApiError):
                return on_api_error(request, cause)
            return error_response(400, "malformed_json", "the request body is not valid JSON")
        if status == 403 and "CSRF" in text:
            return error_response(
                403, "csrf_failed", "a session-authenticated change needs the CSRF token"
            )
        code = {401: "unauthorized", 403: "forbidden", 404: "not_found"}.get(status, "error")
        return error_response(status, code, text)

    def on_not_found(request: HttpRequest, error: Http404) -> HttpResponse:
        return error_response(404, "not_found", str(error) or "not found")

    def on_too_big(request: HttpRequest, error: RequestDataTooBig) -> HttpResponse:
        return error_response(413, "request_too_large", "the request body is too large")

    def on_redis(request: HttpRequest, error: redis.RedisError) -> HttpResponse:
        return redis_error_response(error)

    def on_anything(request: HttpRequest, error: Exception) -> HttpResponse:
        logger.exception("API request %s %s failed", request.method, request.path)
        return error_response(500, "internal_error", "internal error; see the server log")

    api.add_exception_handler(ApiError, on_api_error)
    api.add_exception_handler(engine_errors.XumpError, on_engine_error)
    api.add_exception_handler(ValidationError, on_validation)
    api.add_exception_handler(AuthenticationError, on_authentication)
    api.add_exception_handler(AuthorizationError, on_authorization)
    api.add_exception_handler(HttpError, on_http_error)
    api.add_exception_handler(Http404, on_not_found)
    api.add_exception_handler(RequestDataTooBig, on_too_big)
    api.add_exception_handler(redis.RedisError, on_redis)
    api.add_exception_handler(Exception, on_anything)


def json_method_not_allowed(view: Callable) -> Callable:
    """Wrap a ninja path view so its 405 answer is JSON like every other error."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if response.status_code == 405 and response.get("Content-Type", "").startswith("text/html"):
            allowed = response.get("Allow", "")
            answer = error_response(
                405, "method_not_allowed", f"{request.method} is not allowed here; use {allowed}"
            )
            answer["Allow"] = allowed
            return answer
        return response

    wrapped.csrf_exempt = True  # type: ignore[attr-defined]
    return wrapped


@csrf_exempt  # a 404 whatever the method: there is nothing here to protect
def unknown_route(request: HttpRequest, rest: str = "") -> HttpResponse:
    """Anything under /api/ that no endpoint serves."""
    return error_response(404, "not_found", f"no API endpoint at {request.path}")
