"""The Xump web service: Django + Channels + Celery around the engine (SPEC §5)."""
