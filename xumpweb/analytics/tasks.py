"""Celery tasks of the analytics app: the periodic archive export and the runs started
from the console. Each works on an AnalyticsRun (jobs.py says how a run is claimed, so a
task delivered twice does the work once)."""

from __future__ import annotations

from celery import shared_task

from xumpweb.analytics import jobs
from xumpweb.analytics.models import AnalyticsRun


@shared_task(acks_late=True, ignore_result=True)
def execute(run_id: int) -> None:
    """Do the work of run `run_id` (report, backtest, replay or archive)."""
    jobs.execute(run_id)


@shared_task(acks_late=True, ignore_result=True)
def archive() -> int | None:
    """The periodic archive export (beat): one AnalyticsRun of kind archive, unless one
    is still at work (a run whose worker died is marked failed and no longer counts)."""
    for run in AnalyticsRun.objects.filter(kind="archive", status="running"):
        if jobs.claimed(run.pk):
            return None
        run.fail("the process running it stopped before it ended")
    run = AnalyticsRun.objects.create(kind="archive", created_by="beat")
    jobs.execute(run.pk)
    AnalyticsRun.prune_periodic()
    return run.pk


def launch(run: AnalyticsRun) -> None:
    """Hand a new run to a worker."""
    execute.delay(run.pk)
