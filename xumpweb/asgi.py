"""The ASGI application: Django for HTTP, Channels consumers for WebSockets.

Serve it with `uvicorn xumpweb.asgi:application` (the Procfile does).

HTTP requests go through `OneHopHandler`: Django's ASGI handler with the request's whole
sync part (signals, middleware chain, view, closing the response) in one call on a pooled
thread. Django's own handler runs the chain in async mode, where every sync-only middleware
(WhiteNoise), every `MiddlewareMixin` hook (two per middleware) and the sync view each cost
a hop between the event loop and a thread (about 15 per request), and it starts and joins a
new thread for every request (its ThreadSensitiveContext). That was most of a single
publish's CPU: 3.6 ms of server CPU before, about 1 ms after. Nothing in
the HTTP path is async (the WebSocket consumers are served by Channels, not by this
handler), so nothing is lost; requests still run side by side, each on its own thread of
the event loop's pool, as each had its own thread before.

Token-authenticated publishes (`POST /api/queues/<q>/publish[-batch]` with a Bearer token)
skip even that: `api.direct.DirectPublish` answers them on the event loop, through the
process's group commit, with the same functions and the same answers as the django-ninja
views, for a seventh of the CPU (about 0.25 ms instead of 1.7 ms a publish on this
machine), and hands everything else to Django. XUMP_DIRECT_PUBLISH=0 turns it off.
"""

import asyncio
import atexit
import os
import socket

import django
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.http import FileResponse
from django.http.response import HttpResponseBase
from django.urls import set_script_prefix

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "xumpweb.settings")
django.setup(set_prefix=False)  # before the consumers import


class OneHopHandler(ASGIHandler):
    """Django's ASGI handler with a request's whole sync part in one call: the
    request_started signal, the middleware chain and the view, and (unless the response
    streams) closing the response, which sends request_finished. What Django's own
    `handle` does besides is kept: the body read before, the response sent after; a client
    that goes away meanwhile is noticed when the response is sent (a sync view cannot be
    cancelled anyway)."""

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def __call__(self, scope, receive, send) -> None:
        # Django's opens a ThreadSensitiveContext here: a new thread started and joined for
        # every request. The request's sync part runs in one call, so any pooled thread does.
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        await self.handle(scope, receive, send)

    async def handle(self, scope, receive, send) -> None:
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        set_script_prefix(get_script_prefix(scope))
        try:
            response = await sync_to_async(self._respond, thread_sensitive=False)(scope, body_file)
            try:
                await self.send_response(response, send)
            except asyncio.CancelledError:
                pass  # the client went away while the response was sent
            if response.streaming:
                await sync_to_async(response.close, thread_sensitive=False)()
        finally:
            body_file.close()

    def _respond(self, scope, body_file) -> HttpResponseBase:
        signals.request_started.send(sender=self.__class__, scope=scope)
        request, response = self.create_request(scope, body_file)
        if request is not None:
            response = self.get_response(request)
            response._handler_class = self.__class__
            if isinstance(response, FileResponse):
                response.block_size = self.chunk_size  # the server chunks its output
        if not response.streaming:
            response.close()  # its content is in memory: request_finished now, in this hop
        return response


django_application = OneHopHandler()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from xumpweb import collector, metrics, runtime  # noqa: E402
from xumpweb.api.direct import DirectPublish  # noqa: E402
from xumpweb.live.security import origin_validator  # noqa: E402
from xumpweb.live.websocket_urls import websocket_urlpatterns  # noqa: E402
from xumpweb.stompgate.websocket_urls import stomp_urlpatterns  # noqa: E402

runtime.service()  # with XUMP_ROUTING=inline, this starts the router thread now
if settings.XUMP_WEB_ROUTES:  # route the store here while this process runs (SPEC §11)
    from xumpweb.router import watch

    watch.start(node=f"web@{socket.gethostname()}", prefer=True)
    atexit.register(watch.stop)  # the lease goes at once to a worker, not a lease time later
metrics.serve_separately()  # with XUMP_METRICS_ADDRESS (xumpweb/metrics.py)

application = ProtocolTypeRouter(
    {
        # token-authenticated publishes without Django's request machinery (api/direct.py)
        # every request counted and timed for /metrics, the direct publishes too
        "http": metrics.HttpMetrics(
            DirectPublish(django_application)
            if settings.XUMP_DIRECT_PUBLISH
            else django_application
        ),
        # browsers only from ALLOWED_HOSTS; programs (no Origin) authenticate by token
        "websocket": origin_validator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns + stomp_urlpatterns))
        ),
    }
)

collector.settle()  # start-up is over: the server carries messages from here (collector.py)
