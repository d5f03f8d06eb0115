"""WebSocket URLs (asgi.py mounts them)."""

from __future__ import annotations

websocket_urlpatterns: list = []
