"""The STOMP WebSocket URL (asgi.py mounts it beside live/websocket_urls.py's)."""

from __future__ import annotations

from django.urls import re_path

from xumpweb.stompgate.websocket import StompConsumer

stomp_urlpatterns: list = [re_path(r"^ws/stomp/?$", StompConsumer.as_asgi())]
