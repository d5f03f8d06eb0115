"""Token-authenticated publishes answered without Django's request machinery.

A single publish's own work (the token, the right, the message's checks, one inbox push)
costs about 0.45 ms of CPU here; Django's handler around it (the request object, eight
middleware, URL resolution, django-ninja's operation and response) costs about 0.9 ms
more. So the ASGI application (asgi.py) hands the two publish endpoints here when they
are called the way programs call them: `POST /api/queues/<queue>/publish` or
`.../publish-batch` with `Authorization: Bearer <token>`, a Host in ALLOWED_HOSTS and a
Content-Length within DATA_UPLOAD_MAX_MEMORY_SIZE.

This path does the same work with the same functions as the django-ninja views in
messages.py (publishing.publish_one / publish_batch, auth.token_and_wiring, mark_used,
access.may, refusal) and gives the same answers: status, JSON body and headers. Whatever it does not
serve itself goes to Django unchanged (the body it read is handed on): any other request,
a token it does not know (Django answers the 401), a bad Host, a chunked or oversized
body, the console's session-authenticated publishes. tests/web/test_direct_publish.py
sends the same requests down both paths and compares the answers.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import redis
from asgiref.sync import sync_to_async
from asgiref.typing import ASGI3Application, ASGIReceiveCallable, ASGISendCallable, Scope
from django.conf import settings
from django.db import close_old_connections
from django.http.request import split_domain_port, validate_host

from engine.errors import XumpError
from xumpweb import access
from xumpweb.api.auth import mark_used, refusal, token_and_wiring
from xumpweb.api.errors import (
    ApiError,
    engine_error_response,
    error_response,
    redis_error_response,
)
from xumpweb.api.publishing import publish_batch, publish_one
from xumpweb.runtime import service

logger = logging.getLogger("xump.api")

ENDPOINT = re.compile(r"/api/queues/(?P<queue>.+)/(?P<kind>publish|publish-batch)")
PUBLISHERS = {"publish": publish_one, "publish-batch": publish_batch}
# what SecurityMiddleware and XFrameOptionsMiddleware add to Django's answers
SECURITY_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
]
ACCEPTED_TYPE = b"application/json; charset=utf-8"  # django-ninja's, for the 202
ERROR_TYPE = b"application/json"  # JsonResponse's, for the errors


class DirectPublish:
    """ASGI: the publish endpoints for token callers; everything else to `django`."""

    def __init__(self, django: ASGI3Application) -> None:
        self.django = django
        self._serve = sync_to_async(_serve, thread_sensitive=False)

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        wanted = _wanted(scope)
        if wanted is None:
            return await self.django(scope, receive, send)
        kind, queue, presented, length = wanted
        body = bytearray()
        while True:
            event = await receive()
            if event["type"] == "http.disconnect":
                return
            body += event.get("body", b"")
            if not event.get("more_body", False):
                break
        if len(body) != length:  # not what the header said: Django decides
            return await self.django(scope, _replay(bytes(body), receive), send)
        answer = await self._serve(kind, queue, presented, bytes(body))
        if answer is None:
            return await self.django(scope, _replay(bytes(body), receive), send)
        status, content_type, content, extra = answer
        headers = [
            (b"content-type", content_type),
            (b"content-length", str(len(content)).encode()),
            *extra,
            *SECURITY_HEADERS,
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})


def _wanted(scope: Scope) -> tuple[str, str, str, int] | None:
    """(endpoint kind, queue, token, body length) when this path serves the request."""
    if scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path"):
        return None
    found = ENDPOINT.fullmatch(scope["path"])
    if found is None:
        return None
    host = authorization = length = None
    for name, value in scope["headers"]:
        if name == b"host":
            host = value
        elif name == b"authorization":
            authorization = value
        elif name == b"content-length":
            length = value
    if host is None or authorization is None or length is None:
        return None
    try:
        domain, _ = split_domain_port(host.decode("latin-1"))
        scheme, _, presented = authorization.decode("latin-1").partition(" ")
        size = int(length)
    except ValueError:
        return None
    presented = presented.strip()
    if scheme.lower() != "bearer" or not presented or not domain:
        return None
    if not validate_host(domain, settings.ALLOWED_HOSTS):
        return None
    if not 0 <= size <= settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        return None
    return found["kind"], found["queue"], presented, size


Answer = tuple[int, bytes, bytes, list[tuple[bytes, bytes]]]


def _serve(kind: str, queue: str, presented: str, body: bytes) -> Answer | None:
    """(status, content type, content, more headers), or None for Django to answer (an
    unknown token)."""
    try:
        token, wiring = token_and_wiring(presented)
        if token is None:
            return None
        mark_used(token)
        if not access.may(access.for_token(token), "publish", queue):
            raise refusal(queue, ("publish",))
        answer = PUBLISHERS[kind](service(), queue, body, wiring)
        return 202, ACCEPTED_TYPE, json.dumps(answer).encode(), []
    except ApiError as error:
        return _error(error_response(error.status, error.code, error.detail, **error.extra))
    except XumpError as error:
        return _error(engine_error_response(error))
    except redis.RedisError as error:
        return _error(redis_error_response(error))
    except Exception:
        logger.exception("API request POST %s failed", f"/api/queues/{queue}/{kind}")
        return _error(error_response(500, "internal_error", "internal error; see the server log"))
    finally:
        close_old_connections()  # as Django does when a request ends


def _error(response: Any) -> Answer:
    extra = [(b"retry-after", response["Retry-After"].encode())] if response.has_header(
        "Retry-After") else []  # fmt: skip
    return response.status_code, ERROR_TYPE, response.content, extra


def _replay(body: bytes, receive: ASGIReceiveCallable) -> ASGIReceiveCallable:
    """A receive callable that gives Django the body already read, then the connection's."""
    events = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> dict[str, Any]:
        if events:
            return events.pop()
        return await receive()

    return replayed
