"""The Celery app: `celery -A xumpweb worker` / `celery -A xumpweb beat` (see Procfile)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "xumpweb.settings")

app = Celery("xumpweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["xumpweb.routing"])
app.conf.beat_schedule = {
    # a worker that died while routing left its kick flag set: make sure someone routes
    "tick": {"task": "xumpweb.routing.tasks.tick", "schedule": 2.0},
    "heartbeat": {"task": "xumpweb.routing.tasks.heartbeat", "schedule": 5.0},
    "trim-history": {"task": "xumpweb.routing.tasks.trim", "schedule": 300.0},
}
