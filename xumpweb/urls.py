from django.contrib import admin
from django.urls import include, path, re_path

from xumpweb import metrics
from xumpweb.api import api as xump_api
from xumpweb.api.errors import unknown_route

urlpatterns = [
    path("api/", xump_api.urls()),
    re_path(r"^api/", unknown_route),  # anything else under /api/: a JSON 404
    path("metrics", metrics.view),  # Prometheus (xumpweb/metrics.py)
    path("analytics/", include("xumpweb.analytics.urls")),
    path("", include("xumpweb.console.urls")),
    path("admin/", admin.site.urls),
]
