"""The analytics pages (mounted at /analytics/ by xumpweb/urls.py)."""

from __future__ import annotations

from django.urls import path

from xumpweb.analytics import views

app_name = "analytics"

urlpatterns = [
    path("", views.runs, name="runs"),
    path("new/", views.run_new, name="new"),
    path("archive/", views.archive_now, name="archive"),
    path("<int:number>/", views.run_page, name="run"),
    path("<int:number>/status/", views.run_status, name="status"),
    path("<int:number>/run.json", views.run_json, name="json"),
    path("<int:number>/replay/", views.replay, name="replay"),
]
