"""AnalyticsRun: one archive export or pipeline job, from launch to its result.

A run is created `queued` by whoever launches it (the console, beat, the command), taken
`running` by the Celery task (tasks.py) that does the work, and ends `done` with its JSON
result or `failed` with the error. `progress` is the stage the job is in, a line of text
the console polls while it runs.
"""

from __future__ import annotations

from typing import Any

from django.db import models
from django.utils import timezone


class AnalyticsRun(models.Model):
    KINDS = [
        ("report", "traffic report"),
        ("backtest", "selector backtest"),
        ("replay", "replay"),
        ("archive", "archive export"),
    ]
    STATUSES = [
        ("queued", "queued"),
        ("running", "running"),
        ("done", "done"),
        ("failed", "failed"),
    ]

    kind = models.CharField(max_length=10, choices=KINDS)
    parameters = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=STATUSES, default="queued")
    progress = models.CharField(max_length=300, blank=True, default="")
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    created_by = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["-created", "-id"]
        indexes = [models.Index(fields=["kind", "status"])]

    PERIODIC_KEPT = 50  # beat's archive runs kept (one every XUMP_ARCHIVE_INTERVAL)

    @classmethod
    def prune_periodic(cls, keep: int = PERIODIC_KEPT) -> int:
        """Delete beat's finished archive runs but the newest `keep`; how many went. Runs
        people started, and runs that failed, stay."""
        periodic = cls.objects.filter(kind="archive", created_by="beat", status="done")
        old = list(periodic.order_by("-pk").values_list("pk", flat=True)[keep:])
        return cls.objects.filter(pk__in=old).delete()[0]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} #{self.pk}"

    @property
    def active(self) -> bool:
        return self.status in ("queued", "running")

    @property
    def duration(self) -> float | None:
        if self.started is None:
            return None
        end = self.finished or timezone.now()
        return (end - self.started).total_seconds()

    # state changes: single-row UPDATEs, so a progress line never overwrites an ending
    def begin(self) -> None:
        self._set(status="running", started=timezone.now(), finished=None, error="")

    def report_progress(self, text: str) -> None:
        AnalyticsRun.objects.filter(pk=self.pk, status="running").update(progress=text[:300])
        self.progress = text[:300]

    def finish(self, result: Any) -> None:
        self._set(status="done", result=result, finished=timezone.now(), progress="done")

    def fail(self, error: str) -> None:
        self._set(status="failed", error=error, finished=timezone.now())

    def _set(self, **fields: Any) -> None:
        AnalyticsRun.objects.filter(pk=self.pk).update(**fields)
        for name, value in fields.items():
            setattr(self, name, value)
