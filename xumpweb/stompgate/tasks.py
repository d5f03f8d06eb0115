"""Celery beat's task for the STOMP gateway: removing orphaned /topic/ queues."""

from __future__ import annotations

from celery import shared_task

from engine.errors import StoreError
from xumpweb import runtime
from xumpweb.stompgate import topics


@shared_task(autoretry_for=(StoreError,), max_retries=1, ignore_result=True)
def sweep_topics() -> int:
    """Take down the private queues of /topic/ subscriptions whose process died."""
    return len(topics.sweep(runtime.service()))
