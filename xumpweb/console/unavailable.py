"""Pages while Redis is away: a 503 that says so, instead of the generic server error.

Console views read queues, stats and the wiring version from Redis; when it cannot be
reached they raise StoreError (through the relay) or a redis-py error (direct reads). This
middleware answers both with templates/503.html and logs one line. API views never get
here: their own handlers answer 503 store_unavailable in JSON (api/errors.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from engine.errors import StoreError

logger = logging.getLogger("xump.console")


class StoreUnavailableMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, StoreError | redis.RedisError):
            return None
        logger.warning("%s %s: the store is unavailable: %s", request.method, request.path,
                       exception)  # fmt: skip
        return render(request, "503.html", {"detail": str(exception)}, status=503)
