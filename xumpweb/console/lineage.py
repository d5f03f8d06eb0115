"""The console's trace of a message (SPEC §12): search by mid, then its steps oldest first
and the path it took through the queues, read from the journal and the archive
(xumpweb/analytics/lineage.py). Only steps at queues the person may read are shown."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from engine.errors import XumpError
from xumpweb import access
from xumpweb.access import requires
from xumpweb.analytics.lineage import trace as trace_of
from xumpweb.runtime import service

ACTIONS = {"route": None, "dead_letter": "dead letter"}  # the steps that go from queue to queue


@requires("console")
def message_trace(request: HttpRequest) -> HttpResponse:
    mid = (request.GET.get("mid") or "").strip()
    context: dict[str, Any] = {"mid": mid, "steps": None, "path": [], "error": None}
    if mid:
        try:
            steps = trace_of(service(), mid, Path(settings.XUMP_ARCHIVE_DIR))
        except XumpError as error:
            context["error"] = str(error)
            steps = []
        reader = access.for_request(request)
        readable: dict[str, bool] = {}
        shown = []
        for step in steps:
            queue = step["queue"]
            if queue not in readable:
                readable[queue] = access.may(reader, "read", queue)
            if readable[queue]:
                moment = datetime.fromtimestamp(step["time"], UTC)
                shown.append({**step, "when": moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]})
        context["steps"] = shown
        context["path"] = path_of(shown)
    return render(request, "console/trace.html", context)


def path_of(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The edges the message travelled, in order: queue to queue (copy, move, bounce, dead
    letter) and queue to destination (deliver), each once."""
    edges: list[dict[str, Any]] = []
    seen = set()
    for step in steps:
        kind, target = step["kind"], step["target"]
        if kind == "route":
            edge = (step["queue"], target, step["detail"], "queue")
        elif kind == "dead_letter":
            edge = (step["queue"], target, f"dead letter ({step['detail']})", "queue")
        elif kind == "deliver":
            edge = (step["queue"], target, "deliver", "destination")
        else:
            continue
        if edge not in seen:
            seen.add(edge)
            edges.append({"source": edge[0], "target": edge[1], "label": edge[2], "to": edge[3]})
    return edges
