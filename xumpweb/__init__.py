"""The Xump web service (Django + Channels + Celery around the engine)."""

from xumpweb.celery import app as celery_app

__all__ = ["celery_app"]
