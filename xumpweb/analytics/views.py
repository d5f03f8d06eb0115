"""The analytics pages: past runs (polling while one is at work), a form to start a
traffic report or a backtest, a run's page with its charts and tables, replay of a
backtest's selection into a queue, and an archive export on demand.

Views only create AnalyticsRun rows and hand them to a worker (tasks.launch); the work and
its status changes happen in the task (jobs.py)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from xumpweb.access import check, requires
from xumpweb.analytics import charts
from xumpweb.analytics.forms import ReplayForm, RunForm
from xumpweb.analytics.models import AnalyticsRun
from xumpweb.analytics.tasks import launch
from xumpweb.console.common import audit

LISTED = 100


def _queue_names() -> list[str]:
    from xumpweb.wiring.models import Queue

    return list(Queue.objects.order_by("name").values_list("name", flat=True))


@requires("console")
def runs(request: HttpRequest) -> HttpResponse:
    found = list(AnalyticsRun.objects.all()[:LISTED])
    context = {"runs": found, "active": any(run.active for run in found)}
    if request.headers.get("HX-Request"):
        return render(request, "analytics/partials/runs_table.html", context)
    return render(request, "analytics/runs.html", context)


@requires("analytics")
def run_new(request: HttpRequest) -> HttpResponse:
    queues = _queue_names()
    if request.method == "POST":
        form = RunForm(request.POST, queues=queues)
        if form.is_valid():
            run = AnalyticsRun.objects.create(
                kind=form.cleaned_data["kind"],
                parameters=form.parameters(),
                created_by=request.user.get_username(),
            )
            audit(request, f"analytics.{run.kind}", f"run {run.pk}", None, run.parameters)
            launch(run)
            messages.success(request, f"{run} queued.")
            return redirect("analytics:run", number=run.pk)
    else:
        initial: dict[str, Any] = {"kind": request.GET.get("kind") or "report"}
        form = RunForm(initial=initial, queues=queues)
    return render(request, "analytics/new.html", {"form": form})


@requires("console")
def run_page(request: HttpRequest, number: int) -> HttpResponse:
    run = get_object_or_404(AnalyticsRun, pk=number)
    window = {key: charts.moment(run.parameters.get(key)) for key in ("since", "until")}
    context: dict[str, Any] = {"run": run, "view": charts.view_of(run), "window": window}
    if run.kind == "backtest" and run.status == "done":
        context["replay_form"] = ReplayForm(queues=_queue_names())
        context["replays"] = AnalyticsRun.objects.filter(kind="replay", parameters__backtest=run.pk)
    return render(request, "analytics/run.html", context)


@requires("console")
def run_status(request: HttpRequest, number: int) -> HttpResponse:
    """The status line (htmx polls it while the run is at work; when it ends the page is
    reloaded to draw the result)."""
    run = get_object_or_404(AnalyticsRun, pk=number)
    response = render(request, "analytics/partials/status.html", {"run": run})
    if not run.active and request.GET.get("was") == "active":
        response["HX-Refresh"] = "true"
    return response


@requires("console")
def run_json(request: HttpRequest, number: int) -> JsonResponse:
    """A run as JSON: its parameters, status, progress, result and error."""
    run = get_object_or_404(AnalyticsRun, pk=number)
    return JsonResponse({
        "id": run.pk, "kind": run.kind, "status": run.status, "progress": run.progress,
        "parameters": run.parameters, "result": run.result, "error": run.error,
        "created": run.created.isoformat(),
        "started": run.started.isoformat() if run.started else None,
        "finished": run.finished.isoformat() if run.finished else None,
        "created_by": run.created_by,
    })  # fmt: skip


@requires("analytics")
def replay(request: HttpRequest, number: int) -> HttpResponse:
    source = get_object_or_404(AnalyticsRun, pk=number, kind="backtest")
    if source.status != "done":
        messages.error(request, "Only a finished backtest can be replayed.")
        return redirect("analytics:run", number=source.pk)
    form = ReplayForm(request.POST or None, queues=_queue_names())
    if request.method == "POST" and form.is_valid():
        target = form.cleaned_data["queue"]
        check(request, "publish", target)
        run = AnalyticsRun.objects.create(
            kind="replay",
            parameters={"backtest": source.pk, "queue": target},
            created_by=request.user.get_username(),
        )
        audit(request, "analytics.replay", f"run {run.pk}", None, run.parameters)
        launch(run)
        messages.success(request, f"{run} queued: backtest {source.pk} into {target}.")
        return redirect("analytics:run", number=run.pk)
    context = {"source": source, "form": form, "view": charts.view_of(source)}
    return render(request, "analytics/replay.html", context)


@requires("analytics")
@require_POST
def archive_now(request: HttpRequest) -> HttpResponse:
    busy = AnalyticsRun.objects.filter(kind="archive", status="queued").first()
    if busy is not None:
        messages.info(request, f"{busy} is already waiting for a worker.")
        return redirect("analytics:runs")
    run = AnalyticsRun.objects.create(kind="archive", created_by=request.user.get_username())
    launch(run)
    messages.success(request, f"{run} queued.")
    return redirect("analytics:runs")
