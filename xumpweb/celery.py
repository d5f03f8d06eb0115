"""The Celery app: `celery -A xumpweb worker` / `celery -A xumpweb beat` (see Procfile)."""

from __future__ import annotations

import logging
import os

from celery import Celery, signals
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "xumpweb.settings")

app = Celery("xumpweb")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["xumpweb.router", "xumpweb.analytics", "xumpweb.stompgate"])
app.conf.beat_schedule = {
    # a second look beside every worker's lease watch (router/watch.py): routing does not
    # depend on it, but a router is scheduled if work waits and nobody routes
    "tick": {"task": "xumpweb.router.tasks.tick", "schedule": 2.0},
    "heartbeat": {"task": "xumpweb.router.tasks.heartbeat", "schedule": 5.0},
    "trim-history": {"task": "xumpweb.router.tasks.trim", "schedule": 300.0},
    # private queues of STOMP /topic/ subscriptions whose STOMP process died
    "stomp-topics": {"task": "xumpweb.stompgate.tasks.sweep_topics", "schedule": 30.0},
    # history and the delivery journal to Parquet under XUMP_ARCHIVE_DIR
    "archive": {
        "task": "xumpweb.analytics.tasks.archive",
        "schedule": settings.XUMP_ARCHIVE_INTERVAL,
    },
}


@signals.worker_ready.connect
def watch_the_lease(sender: object = None, **_: object) -> None:
    """Every worker takes routing over when the lease is free and work waits, beat or no
    beat (router/watch.py); its routers are named after the worker (its node name)."""
    from xumpweb import collector
    from xumpweb.router import watch

    collector.settle()  # start-up is over: the worker routes from here (collector.py)
    watch.start(getattr(sender, "hostname", None))


@signals.worker_shutdown.connect
def stop_watching(**_: object) -> None:
    """A router of this worker lets the lease go before the process ends."""
    from xumpweb.router import watch

    watch.stop()


@signals.worker_shutdown.connect
@signals.worker_process_shutdown.connect
def metrics_process_gone(**_: object) -> None:
    """Its gauges stop counting in /metrics (xumpweb/metrics.py, multiprocess mode)."""
    from xumpweb import metrics

    metrics.mark_dead()


@signals.after_setup_logger.connect
def quiet_task_lines(**_: object) -> None:
    """No "received"/"succeeded" line per task: beat's tick alone would log one a second.
    Failures and retries are still logged (at ERROR and WARNING)."""
    for name in ("celery.app.trace", "celery.worker.strategy"):
        logging.getLogger(name).setLevel(logging.WARNING)
