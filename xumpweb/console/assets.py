"""Static files (CSS, scripts, vendored libraries) served by the ASGI application itself.

uvicorn serves no files, and the console's few assets are small and named with their
versions, so Django serves them from the finders (STATICFILES_DIRS only: no path outside
them is reachable) with a long cache lifetime.
"""

from __future__ import annotations

from django.contrib.staticfiles.views import serve
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe


@require_safe
def static_file(request: HttpRequest, path: str) -> HttpResponse:
    response = serve(request, path, insecure=True)
    versioned = path.startswith("vendor/")
    response["Cache-Control"] = f"public, max-age={86400 * 30 if versioned else 60}"
    response["X-Content-Type-Options"] = "nosniff"
    return response
