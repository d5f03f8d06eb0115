"""Token-authenticated publishes answered without Django's request machinery, on the
event loop, through the process's group commit.

Django's handler around a single publish (the request object, eight middleware, URL
resolution, django-ninja's operation and response) costs more than the publish's own work,
and a sync view is a hop to a thread and a Redis round trip of its own. So the ASGI
application (asgi.py) hands the two publish endpoints here when they are called the way
programs call them: `POST /api/queues/<queue>/publish` or `.../publish-batch` with
`Authorization: Bearer <token>`, a Host in ALLOWED_HOSTS and a Content-Length within
DATA_UPLOAD_MAX_MEMORY_SIZE.

Theory of operation. The token is found as auth.find_token finds it (one GET of the tokens'
version; what a presented token stood for is remembered until any token changes), on the
loop when it is remembered and in a thread when the database must be asked (and once a
minute for its last use), before the body is read: a request whose token is not known goes
to Django unread (Django spools a big body to a file), so nobody without a token makes this
process hold a body of up to 64 MB in memory. The body is read with the views' functions
(publishing.read_messages; a big one in a thread, so the loop's WebSockets are not held up),
and the messages go to the process's group commit (live/group_commit.py), as a /ws/publish/
frame's do: the publishes of every request that arrive while an append is on its way go
together in the next, one round trip and one fsync for all, and the 202 is answered once the
append came back, durable (a queue that drops what does not fit: once the router answered, as
publish_applied). A request with the bench-only trace header gets its `recv` stamp here
(engine/relay/trace.py), and the group commit's `inbox` line.

The answers are the views' (messages.py): status, JSON body and headers. Whatever this does
not serve itself goes to Django unchanged (the body it read, if any, is handed on): any
other request, a token it does not know (Django answers the 401), a bad Host, one of the
headers it reads sent twice (Django joins them), a chunked or oversized body, the console's
session-authenticated publishes. Its answers carry the headers Django's middleware adds
(Strict-Transport-Security on a secure request included). tests/web/
test_direct_publish.py sends the same requests down both paths and compares the answers.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any

import redis
from asgiref.typing import ASGI3Application, ASGIReceiveCallable, ASGISendCallable, Scope
from channels.db import database_sync_to_async
from django.conf import settings
from django.http.request import split_domain_port, validate_host

from engine.errors import XumpError
from engine.relay.trace import TRACE, stamped
from xumpweb import access, redis_clients
from xumpweb.api import auth
from xumpweb.api.errors import (
    ApiError,
    engine_error_response,
    error_response,
    redis_error_response,
)
from xumpweb.api.publishing import answer, read_messages
from xumpweb.live.group_commit import Pending, group_commit, router_answer
from xumpweb.security import POLICY
from xumpweb.wiring.models import ApiToken

logger = logging.getLogger("xump.api")

ENDPOINT = re.compile(r"/api/queues/(?P<queue>.+)/(?P<kind>publish|publish-batch)")
# what SecurityMiddleware, XFrameOptionsMiddleware and our ContentSecurityPolicyMiddleware
# add to Django's answers (and Strict-Transport-Security on a secure request, `_hsts`)
SECURITY_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"content-security-policy", POLICY.encode()),
]
# the headers this path reads; a request with one of them twice goes to Django
WANTED_HEADERS = (b"host", b"authorization", b"content-length", b"x-forwarded-proto")
ACCEPTED_TYPE = b"application/json; charset=utf-8"  # django-ninja's, for the 202
ERROR_TYPE = b"application/json"  # JsonResponse's, for the errors
# bodies up to this size are read on the event loop (a single publish: tens of µs); a
# bigger one (a batch of thousands takes milliseconds) in a thread, so that the process's
# WebSockets and other requests are served meanwhile
READ_ON_LOOP = 64 * 1024
# an answer: (status, content type, content, more headers)
Answer = tuple[int, bytes, bytes, list[tuple[bytes, bytes]]]


class DirectPublish:
    """ASGI: the publish endpoints for token callers; everything else to `django`."""

    def __init__(self, django: ASGI3Application) -> None:
        self.django = django
        self._redis: Any = None  # asyncio client of the tokens' version (made on the loop)

    async def __call__(
        self, scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        wanted = _wanted(scope)
        if wanted is None:
            return await self.django(scope, receive, send)
        kind, queue, presented, length, secure = wanted
        try:  # the token first: nobody without one gets a body of up to 64 MB read
            token = await self._token(presented)
        except Exception:  # e.g. the database away: Django answers as it does
            logger.exception("API request POST %s: the token was not looked up", scope["path"])
            token = None
        if token is None:  # an unknown token: Django answers (its 401), reading the body
            return await self.django(scope, receive, send)
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
        status, content_type, content, extra = await self._serve(kind, queue, token, bytes(body))
        headers = [
            (b"content-type", content_type),
            (b"content-length", str(len(content)).encode()),
            *extra,
            *SECURITY_HEADERS,
        ]
        if secure and settings.SECURE_HSTS_SECONDS:
            headers.append((b"strict-transport-security", _hsts()))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": content})

    async def _serve(self, kind: str, queue: str, token: ApiToken, body: bytes) -> Answer:
        """(status, content type, content, more headers)."""
        try:
            principal = access.known_principal(token)
            if principal is None or auth.due_for_use_mark(token):
                principal = await _look_closer(token)
            if not access.may(principal, "publish", queue):
                raise auth.refusal(queue, ("publish",))
            if len(body) > READ_ON_LOOP:  # a big batch: the loop serves WebSockets meanwhile
                messages = await _in_thread(read_messages, kind, body)
            else:
                messages = read_messages(kind, body)
            if any(TRACE in message.headers for message in messages):  # bench-only
                messages = [message._replace(headers=stamped(message.headers, "recv"))
                            if TRACE in message.headers else message
                            for message in messages]  # fmt: skip
            publish = RequestPending(queue, messages)
            group_commit().submit(publish)
            await publish.outcome
            return 202, ACCEPTED_TYPE, json.dumps(answer(kind, publish.mids)).encode(), []
        except ApiError as error:
            return _error(error_response(error.status, error.code, error.detail, **error.extra))
        except XumpError as error:
            return _error(engine_error_response(error))
        except redis.RedisError as error:
            return _error(redis_error_response(error))
        except Exception:
            logger.exception("API request POST %s failed", f"/api/queues/{queue}/{kind}")
            return _error(
                error_response(500, "internal_error", "internal error; see the server log")
            )

    async def _token(self, presented: str) -> ApiToken | None:
        """auth.find_token's answer: from memory when it still holds (one GET of the
        tokens' version), else from the database, in a thread."""
        if self._redis is None:  # lean (xumpweb/live/lean_redis.py): once a request
            self._redis = redis_clients.lean_service(timeout=5)
        try:
            (version,) = await self._redis.execute(("GET", auth.tokens_version_key()))
        except redis.RedisError:
            return await _in_thread(ApiToken.find, presented)
        found = auth.remembered_token(presented, version)
        if found is auth.NOT_REMEMBERED:
            return await _in_thread(auth.remembered_or_found, presented, version)
        return found  # type: ignore[return-value]


class RequestPending(Pending):
    """A request's publish on its way to the inbox (the group commit): the request awaits
    `outcome`, which holds the error when it is refused."""

    __slots__ = ("outcome",)

    def __init__(self, queue: str, messages: list) -> None:
        super().__init__(queue, messages)
        self.outcome: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def done(self) -> None:
        self.finished = True
        if not self.outcome.done():
            self.outcome.set_result(None)

    def fail(self, error: XumpError) -> None:
        self.finished = True
        if not self.outcome.done():
            self.outcome.set_exception(error)

    def await_router(self) -> None:
        _answering.add(task := asyncio.create_task(router_answer(self)))
        task.add_done_callback(_answering.discard)


_answering: set[asyncio.Task] = set()  # router answers being waited for (held until told)


async def _in_thread(function: Any, *arguments: Any) -> Any:
    """`function(*arguments)` in a thread of its own (not the one shared sync thread), its
    database connections closed around it as Django closes a request's (Channels'
    database_sync_to_async)."""
    return await database_sync_to_async(function, thread_sensitive=False)(*arguments)


async def _look_closer(token: ApiToken) -> access.Principal:
    """The token's principal, worked out with the database, and its use marked (at most
    once a minute), in a thread."""

    def closer() -> access.Principal:
        auth.mark_used(token)
        return access.for_token(token)

    return await _in_thread(closer)


def _wanted(scope: Scope) -> tuple[str, str, str, int, bool] | None:
    """(endpoint kind, queue, token, body length, whether the request came over HTTPS)
    when this path serves the request."""
    if scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path"):
        return None
    found = ENDPOINT.fullmatch(scope["path"])
    if found is None:
        return None
    seen: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        if name in WANTED_HEADERS:
            if name in seen:  # twice: Django joins them, and decides
                return None
            seen[name] = value
    host, authorization, length = (seen.get(name) for name in WANTED_HEADERS[:3])
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
    return found["kind"], found["queue"], presented, size, _secure(scope, seen)


def _secure(scope: Scope, seen: dict[bytes, bytes]) -> bool:
    """Whether Django would call the request secure (HttpRequest.is_secure): over HTTPS,
    or, behind a proxy that ends TLS, with its header (XUMP_PROXY_SSL_HEADER)."""
    proxy = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if proxy is not None:
        forwarded = seen.get(b"x-forwarded-proto")
        if forwarded is not None:
            return forwarded.decode("latin-1").split(",")[0].strip() == proxy[1]
    return scope.get("scheme") == "https"


def _hsts() -> bytes:
    """SecurityMiddleware's Strict-Transport-Security value."""
    value = f"max-age={settings.SECURE_HSTS_SECONDS}"
    if settings.SECURE_HSTS_INCLUDE_SUBDOMAINS:
        value += "; includeSubDomains"
    if settings.SECURE_HSTS_PRELOAD:
        value += "; preload"
    return value.encode()


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
