"""WebSocket URLs (asgi.py mounts them).

A destination may hold any character a name may (":" from patterns, "/" too): the pattern
takes everything between /ws/subscribe/ and the final slash, and the consumer checks it as
a name. Clients percent-encode it (ASGI hands the path over decoded).
"""

from __future__ import annotations

from django.urls import re_path

from xumpweb.live.consumers import MonitorConsumer, SubscribeConsumer
from xumpweb.live.publish import PublishConsumer

websocket_urlpatterns: list = [
    re_path(r"^ws/subscribe/(?P<destination>.+)/$", SubscribeConsumer.as_asgi()),
    re_path(r"^ws/monitor/$", MonitorConsumer.as_asgi()),
    re_path(r"^ws/publish/$", PublishConsumer.as_asgi()),
]
