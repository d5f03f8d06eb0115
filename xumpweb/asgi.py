"""The ASGI application: Django for HTTP, Channels consumers for WebSockets.

Serve it with `uvicorn xumpweb.asgi:application` (the Procfile does).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "xumpweb.settings")
django_application = get_asgi_application()  # sets Django up before the consumers import

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from xumpweb import runtime  # noqa: E402
from xumpweb.live.routing import websocket_urlpatterns  # noqa: E402
from xumpweb.live.security import origin_validator  # noqa: E402

runtime.service()  # with XUMP_ROUTING=inline, this starts the router thread now

application = ProtocolTypeRouter(
    {
        "http": django_application,
        # browsers only from ALLOWED_HOSTS; programs (no Origin) authenticate by token
        "websocket": origin_validator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
